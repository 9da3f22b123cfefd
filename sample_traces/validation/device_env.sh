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
# (default 470) s, the driver interrupted at DRIVE_TIMEOUT_S (default 585) s; `more`: timings only,
# no trace. Writes $OUT/PART_TAG.tar.gz, its log and $OUT/env_PART_TAG.txt (the GPUs, torch, the
# cores, the load), then prints the log's outline.
drive_part() {
    local part=$1 tag=$2 cases=$3 rounds=${4:-3} budget=${5:-470} extra=()
    [ "${6:-}" = more ] && extra=(--no-trace)
    (nvidia-smi && nvidia-smi topo -m &&
        python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())' &&
        nproc && uptime) >"$OUT/env_${part}_$tag.txt" 2>&1
    timeout -s INT "${DRIVE_TIMEOUT_S:-585}" python3 "sample_traces/validation/record_$part.py" drive --cases "$cases" \
        --rounds "$rounds" --out "/tmp/${part}_$tag" --tar "$OUT/${part}_$tag.tar.gz" \
        --budget-s "$budget" --child-timeout 150 "${extra[@]}" >"$OUT/${part}_$tag.log" 2>&1
    grep -h -E '^\[|^==|FAILED|TIMEOUT|budget|done|Error' "$OUT/${part}_$tag.log" | tail -n 90
}

# drive_lanes PART TAG BUDGET_S LANE...: one drive_part per LANE, all at once, each LANE
# "GPUS/CORES/CASES" (e.g. "2,3/32-47/v114"): its cases, 3 rounds, on its own GPUs
# (CUDA_VISIBLE_DEVICES) and cores (taskset), tagged TAG-l0, TAG-l1, ...; no case started after
# BUDGET_S s. Timings still never share a GPU: a lane's planted and fixed runs alternate on its
# GPUs. Then the lanes' outlines are printed and their logs and environments packed into
# $OUT/PART_TAG_logs.tar.gz (the device returns 8 files at most: the lanes' case tars and that).
drive_lanes() {
    local part=$1 tag=$2 budget=$3 n=0 lane gpus cores cases
    shift 3
    for lane in "$@"; do
        IFS=/ read -r gpus cores cases <<<"$lane"
        (
            export CUDA_VISIBLE_DEVICES=$gpus
            taskset -cp "$cores" "$BASHPID" >/dev/null
            drive_part "$part" "$tag-l$n" "$cases" 3 "$budget"
        ) >"$OUT/lane$n.out" 2>&1 &
        n=$((n + 1))
    done
    wait
    (cd "$OUT" && for f in lane*.out; do echo "### $f"; cat "$f"; done &&
        tar czf "${part}_${tag}_logs.tar.gz" lane*.out "${part}_$tag"-l*.log env_"${part}_$tag"-l*.txt &&
        rm lane*.out "${part}_$tag"-l*.log env_"${part}_$tag"-l*.txt)
}
