#!/usr/bin/env bash
# How v201-v208 (the fourteenth blind part) are to be recorded: every case on one GPU (one GPU a
# lane): `bash sample_traces/validation/record_blind14_device.sh TAG CASES [ROUNDS] [BUDGET_S] [more]`,
# from the repository root ($OUT: where the tar.gz, the log and the environment go), or several
# lanes at once on one lease of several GPUs (device_env.sh's drive_lanes: each lane its own GPUs
# and cores; timings never share a GPU):
# `bash sample_traces/validation/record_blind14_device.sh lanes TAG BUDGET_S "GPUS/CORES/CASES"...`.
# One driver a lane: CASES in order, each a profiled trace of the planted variant, then ROUNDS
# (default 3) rounds of planted and fixed, each a fresh process; no case started after BUDGET_S
# (default 470) seconds. `more` as 5th argument: ROUNDS more rounds, no trace (timing_run2.json).
# Two lanes of one GPU and 16 cores on an nvidia-h200-x2 lease, the compiled v206 and v207 first
# (their first compiled process compiles cold), ~300 and ~270 s estimated (record_blind14.py):
# `... lanes TAG 470 "0/0-15/v206,v201,v203,v208" "1/16-31/v207,v202,v205,v204"`.
# No case starts DataLoader workers; 16 cores a lane are for Inductor's compile workers.
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable, drive_part, drive_lanes
if [ "${1:-}" = lanes ]; then
    shift
    drive_lanes blind14 "$@"
else
    drive_part blind14 "$@"
fi
