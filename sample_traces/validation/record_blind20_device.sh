#!/usr/bin/env bash
# How v236-v239 (the twentieth blind part) are to be recorded: every case on one GPU (one GPU a
# lane): `bash sample_traces/validation/record_blind20_device.sh TAG CASES [ROUNDS] [BUDGET_S] [more]`,
# from the repository root ($OUT: where the tar.gz, the log and the environment go), or several
# lanes at once on one lease of several GPUs (device_env.sh's drive_lanes: each lane its own GPUs
# and cores; timings never share a GPU):
# `bash sample_traces/validation/record_blind20_device.sh lanes TAG BUDGET_S "GPUS/CORES/CASES"...`.
# One driver a lane: CASES in order, each a profiled trace of the planted variant, then ROUNDS
# (default 3) rounds of planted and fixed, each a fresh process; no case started after BUDGET_S
# (default 470) seconds. `more` as 5th argument: ROUNDS more rounds, no trace (timing_run2.json).
# One lane on an nvidia-h200 lease, ~400-520 s estimated (record_blind20.py):
# `... TAG v236,v237,v238,v239 3 430`. No case is compiled. gpuscope is not installed there:
# device_env.sh (this folder) makes it importable.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable, drive_part, drive_lanes
if [ "${1:-}" = lanes ]; then
    shift
    drive_lanes blind20 "$@"
else
    drive_part blind20 "$@"
fi
