#!/usr/bin/env bash
# How v41-v54 (the second blind part) were recorded:
# `bash sample_traces/validation/record_blind2_device.sh call1|call2|more CASES0 CASES1 [ROUNDS]`,
# from the repository root on an nvidia-h100-x2 machine ($OUT: where the tar.gz and logs go).
# call1: the 11 one-GPU cases, two drivers at once, one per GPU (CUDA_VISIBLE_DEVICES), the
#        compiled cases last on each GPU (the budget skips them first).
# call2: the 3 two-GPU cases (each run a fresh torchrun job on both GPUs), one after the other;
#        then CASES0 on GPU 0 and CASES1 on GPU 1 (one-GPU cases call 1 left, or that failed).
# more:  ROUNDS more rounds of CASES0 on GPU 0 and CASES1 on GPU 1, no trace (a second
#        recording, timing_run2.json, for cases whose rounds scattered); "-" for none.
# more2: ROUNDS more rounds of the two-GPU CASES0 (torchrun on both GPUs), no trace.
# As recorded: call1; `call2 - -` then `more v43 - 4` in one call; `more2 v53,v54 - 4`.
# gpuscope is not installed there: device_env.sh (this folder) makes it importable.
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable
B=sample_traces/validation/record_blind2.py
(nvidia-smi && nvidia-smi topo -m && python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count())' && nproc && uptime) >"$OUT/env_blind2_$1.txt" 2>&1
# one driver per GPU: pair GPU CASES TAG BUDGET_S LIMIT_S [extra args]
pair() {
    local gpu=$1 cases=$2 tag=$3 budget=$4 limit=$5
    shift 5
    [ "$cases" = "-" ] && return 0
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT "$limit" python3 $B drive --cases "$cases" --out "/tmp/b2_$tag" \
        --tar "$OUT/blind2_$tag.tar.gz" --budget-s "$budget" --child-timeout 150 "$@" >"$OUT/blind2_$tag.log" 2>&1
}
case "$1" in
call1)
    pair 0 v41,v43,v45,v50,v51,v46 a 400 575 &
    pair 1 v42,v44,v47,v48,v49 b 400 575 &
    wait
    ;;
call2)
    timeout -s INT 420 python3 $B drive --cases v52,v53,v54 --out /tmp/b2_c \
        --tar "$OUT/blind2_c.tar.gz" --budget-s 300 --child-timeout 100 >"$OUT/blind2_c.log" 2>&1
    pair 0 "${2:--}" d 60 150 &
    pair 1 "${3:--}" e 60 150 &
    wait
    ;;
more)
    pair 0 "${2:--}" f 300 560 --rounds "${4:-2}" --no-trace &
    pair 1 "${3:--}" g 300 560 --rounds "${4:-2}" --no-trace &
    wait
    ;;
more2)
    timeout -s INT 330 python3 $B drive --cases "$2" --rounds "${4:-4}" --no-trace --out /tmp/b2_h \
        --tar "$OUT/blind2_h.tar.gz" --budget-s 150 --child-timeout 60 >"$OUT/blind2_h.log" 2>&1
    ;;
esac
grep -h -E '^\[|^==|FAILED|TIMEOUT|budget|done|Error' "$OUT"/*.log | tail -n 90
