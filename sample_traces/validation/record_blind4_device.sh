#!/usr/bin/env bash
# How v70-v84 (the fourth blind part) are recorded: v70-v83 on nvidia-h100-x1, v84 (2 GPUs, torchrun) on nvidia-h100-x2 (came as 2 x H200):
# `bash sample_traces/validation/record_blind4_device.sh TAG CASES [ROUNDS] [BUDGET_S] [more]`,
# from the repository root ($OUT: where the tar.gz, the log and the environment go).
# One driver at a time (timings never share a GPU): CASES in order, each a profiled trace
# of the planted variant, then ROUNDS (default 3) rounds of planted and fixed, each a fresh
# process; the driver starts no case after BUDGET_S (default 470) seconds.
# `more` as 5th argument: ROUNDS more rounds, no trace (a second recording, timing_run2.json).
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
# As recorded (README, sixth part): call1; call2 then `more2 v77 2 30 more`; call3 then
# `more3 v82,v80 2 60 more`; call4 then `more4 v77 2 10 more` (one H100 lease); call5 (v84: the
# 2-GPU call came as 2 x H200); `more5 v82 4 10 more` (a second H100 lease).
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable, drive_part
drive_part blind4 "$@"
