#!/usr/bin/env bash
# How v230-v235 (the nineteenth blind part) are to be recorded: every case on one GPU (one GPU a
# lane): `bash sample_traces/validation/record_blind19_device.sh TAG CASES [ROUNDS] [BUDGET_S] [more]`,
# from the repository root ($OUT: where the tar.gz, the log and the environment go), or several
# lanes at once on one lease of several GPUs (device_env.sh's drive_lanes: each lane its own GPUs
# and cores; timings never share a GPU):
# `bash sample_traces/validation/record_blind19_device.sh lanes TAG BUDGET_S "GPUS/CORES/CASES"...`.
# One driver a lane: CASES in order, each a profiled trace of the planted variant, then ROUNDS
# (default 3) rounds of planted and fixed, each a fresh process; no case started after BUDGET_S
# (default 470) seconds. `more` as 5th argument: ROUNDS more rounds, no trace (timing_run2.json).
# Two lanes of one GPU and 16 cores on an nvidia-h200-x2 lease, ~300-400 s each estimated
# (record_blind19.py): `... lanes TAG 440 "0/0-15/v230,v232,v234" "1/16-31/v231,v233,v235"`.
# v230 and v231 are compiled (reduce-overhead): each goes first in its lane, as the compiled
# cases before. gpuscope is not installed there: device_env.sh (this folder) makes it importable.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable, drive_part, drive_lanes
if [ "${1:-}" = lanes ]; then
    shift
    drive_lanes blind19 "$@"
else
    drive_part blind19 "$@"
fi
