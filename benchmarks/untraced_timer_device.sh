#!/bin/bash
# The untraced timer on a GPU: plain timing vs the old timer (a synchronise per step) vs the new one
# (CUDA events), in fresh processes, interleaved (untraced_timer_device.py says how).
# Run from the repository root on the device machine; results go to $OUT (else /tmp).
#   bash benchmarks/untraced_timer_device.sh [drive|pairs] [ROUNDS] [BUDGET_S]
#   drive: each job x mode its own process (~270 s for 3 rounds on an H100);
#   pairs: the three modes inside one process per job and round (~100 s for 3 rounds).
set -u
what=${1:-drive}
out=${OUT:-/tmp}
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' || {
    echo "no torch here: nothing measured"; exit 3; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
PYTHONUNBUFFERED=1 python3 benchmarks/untraced_timer_device.py "$what" --rounds "${2:-3}" \
    --budget-s "${3:-270}" --out "$out/untraced_$what.json" 2>&1 | tee "$out/untraced_$what.log"
