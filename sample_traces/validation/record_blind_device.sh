#!/usr/bin/env bash
# How v29-v40 (the blind part) and the torch.compile timings of v06, v12, v23 were recorded:
# `bash sample_traces/validation/record_blind_device.sh call1|call2|call3`, from the repository root on an
# nvidia-h100-x2 machine ($OUT: where the tar.gz and logs go).
# call1: the 10 one-GPU blind cases, two drivers at once, one per GPU (CUDA_VISIBLE_DEVICES), then
#        v08's planted trace again (the untraced step timed by CUDA events).
# call2: the 2 two-GPU blind cases (each run a fresh torchrun job on both GPUs), then eager vs
#        model.compile() of v06, v12 and v23's planted variants, one driver per GPU, and two more
#        rounds of v30 (timing_run2.json).
# call3: four more rounds of each compile pair (a second recording).
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable
B=sample_traces/validation/record_blind.py
(nvidia-smi && nvidia-smi topo -m && python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count())' && nproc && uptime) >"$OUT/env_$1.txt" 2>&1
case "$1" in
call1)
    CUDA_VISIBLE_DEVICES=0 timeout -s INT 560 python3 $B drive --cases v29,v31,v33,v35,v37 --out /tmp/ba \
        --tar "$OUT/blind_a.tar.gz" --budget-s 470 --child-timeout 120 >"$OUT/blind_a.log" 2>&1 &
    (
        CUDA_VISIBLE_DEVICES=1 timeout -s INT 500 python3 $B drive --cases v30,v32,v34,v36,v38 --out /tmp/bb \
            --tar "$OUT/blind_b.tar.gz" --budget-s 430 --child-timeout 120 >"$OUT/blind_b.log" 2>&1
        mkdir -p /tmp/v08new
        CUDA_VISIBLE_DEVICES=1 timeout -s INT 50 python3 sample_traces/validation/record_validation.py one \
            --case v08 --variant planted --mode trace --out /tmp/v08new >/tmp/v08new/result.log 2>&1
        tar czf "$OUT/v08_retrace.tar.gz" -C /tmp v08new
    ) &
    wait
    ;;
call2)
    timeout -s INT 300 python3 $B drive --cases v39,v40 --out /tmp/bc \
        --tar "$OUT/blind_c.tar.gz" --budget-s 200 --child-timeout 90 >"$OUT/blind_c.log" 2>&1
    CUDA_VISIBLE_DEVICES=0 timeout -s INT 330 python3 $B drive --cases v06c,v23c --no-trace --out /tmp/ca \
        --tar "$OUT/compile_a.tar.gz" --budget-s 200 --child-timeout 80 >"$OUT/compile_a.log" 2>&1 &
    (
        CUDA_VISIBLE_DEVICES=1 timeout -s INT 200 python3 $B drive --cases v12c --no-trace --out /tmp/cb \
            --tar "$OUT/compile_b.tar.gz" --budget-s 150 --child-timeout 80 >"$OUT/compile_b.log" 2>&1
        # v30's first three rounds scattered (-1.3 to 15.0 %): two more, a second recording
        CUDA_VISIBLE_DEVICES=1 timeout -s INT 120 python3 $B drive --cases v30 --rounds 2 --no-trace \
            --out /tmp/bd --tar "$OUT/blind_d.tar.gz" --budget-s 60 --child-timeout 60 >"$OUT/blind_d.log" 2>&1
    ) &
    wait
    ;;
call3)
    # the compile pairs' first three rounds scattered: four more each, a second recording
    CUDA_VISIBLE_DEVICES=0 timeout -s INT 280 python3 $B drive --cases v06c,v23c --rounds 4 --no-trace \
        --out /tmp/ce --tar "$OUT/compile_e.tar.gz" --budget-s 200 --child-timeout 80 >"$OUT/compile_e.log" 2>&1 &
    CUDA_VISIBLE_DEVICES=1 timeout -s INT 280 python3 $B drive --cases v12c --rounds 4 --no-trace \
        --out /tmp/cf --tar "$OUT/compile_f.tar.gz" --budget-s 200 --child-timeout 80 >"$OUT/compile_f.log" 2>&1 &
    wait
    ;;
esac
grep -h -E '^\[|^==|FAILED|TIMEOUT|budget|done|Error' "$OUT"/*.log | tail -n 80
