#!/usr/bin/env bash
# How v16-v28 were recorded: `bash sample_traces/validation/record_new_device.sh single|multi`,
# from the repository root on an nvidia-h100-x2 machine ($OUT: where the tar.gz and logs go).
# single: the 9 one-GPU cases, two drivers at once, one per GPU (CUDA_VISIBLE_DEVICES);
# multi: the 4 two-GPU cases, each run a fresh torchrun job on both GPUs.
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable
N=sample_traces/validation/record_new.py
(nvidia-smi && nvidia-smi topo -m && python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count())') >"$OUT/env_$1.txt" 2>&1
case "$1" in
single)
    CUDA_VISIBLE_DEVICES=0 timeout -s INT 575 python3 $N drive --cases v16,v18,v20,v22 --out /tmp/na \
        --tar "$OUT/validation_new_a.tar.gz" --budget-s 470 --child-timeout 120 >"$OUT/new_a.log" 2>&1 &
    CUDA_VISIBLE_DEVICES=1 timeout -s INT 575 python3 $N drive --cases v17,v19,v21,v23,v24 --out /tmp/nb \
        --tar "$OUT/validation_new_b.tar.gz" --budget-s 470 --child-timeout 120 >"$OUT/new_b.log" 2>&1 &
    wait
    ;;
multi)
    timeout -s INT 575 python3 $N drive --cases v25,v26,v27,v28 --out /tmp/nc \
        --tar "$OUT/validation_new_c.tar.gz" --budget-s 480 --child-timeout 150 >"$OUT/new_c.log" 2>&1
    ;;
esac
grep -h -E '^\[|^==|FAILED|TIMEOUT|budget|done' "$OUT"/new_*.log | tail -n 80
