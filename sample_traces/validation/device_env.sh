# Sourced from the repository root by the recorders' device scripts (record_*_device.sh), on a
# machine where gpuscope is not installed: NVLink multicast off (the device notes' KINDS.md), Python
# unbuffered (the logs follow the run), and gpuscope.capture importable through a throw-away
# package whose __path__ is app/ plus the root (as ../multi_gpu/README.md). Exports PYTHONPATH.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
_gpuscope_root=$PWD
_gpuscope_pkg=$(mktemp -d)
mkdir "$_gpuscope_pkg/gpuscope"
echo "__path__=['$_gpuscope_root/app','$_gpuscope_root'];exec(open('$_gpuscope_root/app/__init__.py').read())" \
    >"$_gpuscope_pkg/gpuscope/__init__.py"
export PYTHONPATH=$_gpuscope_pkg

# drive_part PART TAG CASES [ROUNDS] [BUDGET_S] [more]: record_PART.py's driver on CASES, one at a
# time (timings never share a GPU), ROUNDS (default 3) rounds, no case started after BUDGET_S
# (default 470) s; `more`: timings only, no trace. Writes $OUT/PART_TAG.tar.gz, its log and
# $OUT/env_PART_TAG.txt (the GPUs, torch, the cores, the load), then prints the log's outline.
drive_part() {
    local part=$1 tag=$2 cases=$3 rounds=${4:-3} budget=${5:-470} extra=()
    [ "${6:-}" = more ] && extra=(--no-trace)
    (nvidia-smi && nvidia-smi topo -m &&
        python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())' &&
        nproc && uptime) >"$OUT/env_${part}_$tag.txt" 2>&1
    timeout -s INT 585 python3 "sample_traces/validation/record_$part.py" drive --cases "$cases" \
        --rounds "$rounds" --out "/tmp/${part}_$tag" --tar "$OUT/${part}_$tag.tar.gz" \
        --budget-s "$budget" --child-timeout 150 "${extra[@]}" >"$OUT/${part}_$tag.log" 2>&1
    grep -h -E '^\[|^==|FAILED|TIMEOUT|budget|done|Error' "$OUT/${part}_$tag.log" | tail -n 90
}
