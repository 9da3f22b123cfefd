#!/usr/bin/env bash
# How v85-v99 (the fifth blind part) are recorded: v85-v98 on nvidia-h100-x1, v99 (2 GPUs, torchrun) on nvidia-h100-x2:
# `bash sample_traces/validation/record_blind5_device.sh TAG CASES [ROUNDS] [BUDGET_S] [more]`,
# from the repository root ($OUT: where the tar.gz, the log and the environment go).
# One driver at a time (timings never share a GPU): CASES in order, each a profiled trace
# of the planted variant, then ROUNDS (default 3) rounds of planted and fixed, each a fresh
# process; the driver starts no case after BUDGET_S (default 470) seconds.
# `more` as 5th argument: ROUNDS more rounds, no trace (a second recording, timing_run2.json).
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
# As recorded (README, "Fifth blind part recorded"): call1-call3 on one H100 lease (v85 not
# recorded: its compiled variant passed the child limit), call4 (v99, 5 rounds) and call5 (v86, v97)
# on an nvidia-h100-x2 lease that came as 2 x H200.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable, drive_part
drive_part blind5 "$@"
