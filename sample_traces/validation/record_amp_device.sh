#!/usr/bin/env bash
# bf16 autocast timings of v07 and v37's planted variants (record_blind.py's AMP cases, timed
# only): `bash sample_traces/validation/record_amp_device.sh` from the repository root on a one-GPU
# machine ($OUT: the tar.gz and the log). 3 rounds, eager/autocast alternately, fresh processes.
# As recorded (2026-11-26, H100): with v45a first, which was dropped (record_blind.AMP says why).
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable
(nvidia-smi && python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' && nproc && uptime) >"$OUT/env_amp.txt" 2>&1
timeout -s INT 540 python3 sample_traces/validation/record_blind.py drive --cases v07a,v37a \
    --no-trace --rounds 3 --out /tmp/amp --tar "$OUT/amp.tar.gz" --budget-s 480 --child-timeout 90 \
    >"$OUT/amp.log" 2>&1
grep -h -E '^\[|^==|FAILED|TIMEOUT|budget|done|Error' "$OUT"/amp.log | tail -n 40
