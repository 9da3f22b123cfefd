#!/usr/bin/env bash
# How v100-v114 (the sixth blind part) are to be recorded: v100-v113 on nvidia-h100-x1, v114 (2 GPUs, torchrun) on nvidia-h100-x2:
# `bash sample_traces/validation/record_blind6_device.sh TAG CASES [ROUNDS] [BUDGET_S] [more]`,
# from the repository root ($OUT: where the tar.gz, the log and the environment go).
# One driver at a time (timings never share a GPU): CASES in order, each a profiled trace
# of the planted variant, then ROUNDS (default 3) rounds of planted and fixed, each a fresh
# process; the driver starts no case after BUDGET_S (default 470) seconds.
# `more` as 5th argument: ROUNDS more rounds, no trace (a second recording, timing_run2.json).
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
# Not recorded yet: the recipes (record_blind6.py) were fixed before any device call.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable, drive_part
drive_part blind6 "$@"
