#!/usr/bin/env bash
# How v100-v114 (the sixth blind part) are to be recorded: v100-v113 on nvidia-h100-x1, v114 (2 GPUs, torchrun) on nvidia-h100-x2:
# `bash sample_traces/validation/record_blind6_device.sh TAG CASES [ROUNDS] [BUDGET_S] [more]`,
# from the repository root ($OUT: where the tar.gz, the log and the environment go).
# One driver at a time (timings never share a GPU): CASES in order, each a profiled trace
# of the planted variant, then ROUNDS (default 3) rounds of planted and fixed, each a fresh
# process; the driver starts no case after BUDGET_S (default 470) seconds.
# `more` as 5th argument: ROUNDS more rounds, no trace (a second recording, timing_run2.json).
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
# As recorded (README, "Sixth blind part recorded"), on one nvidia-h100-x4 lease that came as 4 x H200,
# the recipes (record_blind6.py) fixed before any device call: call c1 ran v100-v113 as four lanes at
# once (device_env.sh's drive_lanes: each lane its own GPU and 16 cores), call c2 v114 (5 rounds, GPUs
# 0-1) beside `more` rounds of v102 (GPU 2) and v101 (GPU 3), whose first rounds scattered.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable, drive_part
drive_part blind6 "$@"
