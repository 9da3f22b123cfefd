#!/usr/bin/env bash
# How v209-v214 (the fifteenth blind part) are to be recorded: every case on two GPUs (a fresh
# torchrun --nproc_per_node 2 job a run; two GPUs a lane):
# `bash sample_traces/validation/record_blind15_device.sh TAG CASES [ROUNDS] [BUDGET_S] [more]`,
# from the repository root ($OUT: where the tar.gz, the log and the environment go), or several
# lanes at once on one lease of several GPUs (device_env.sh's drive_lanes: each lane its own GPUs
# and cores; timings never share a GPU):
# `bash sample_traces/validation/record_blind15_device.sh lanes TAG BUDGET_S "GPUS/CORES/CASES"...`.
# One driver a lane: CASES in order, each a profiled trace of the planted variant, then ROUNDS
# (default 3) rounds of planted and fixed, each a fresh process; no case started after BUDGET_S
# (default 470) seconds. `more` as 5th argument: ROUNDS more rounds, no trace (timing_run2.json).
# Planned: one lane of both GPUs and 32 cores on an nvidia-h200-x2 lease, two calls of three cases,
# ~150 s a case (7 torchrun jobs), ~420 and ~450 s estimated (record_blind15.py):
# `... lanes TAG 470 "0,1/0-31/v209,v210,v211"`, then `... lanes TAG2 470 "0,1/0-31/v212,v213,v214"`.
# v214 starts 4 DataLoader workers a rank (8 in all) in each of its jobs; 32 cores hold them.
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable, drive_part, drive_lanes
if [ "${1:-}" = lanes ]; then
    shift
    drive_lanes blind15 "$@"
else
    drive_part blind15 "$@"
fi
