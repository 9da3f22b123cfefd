#!/bin/bash
# One big single-rank trace on a machine without the project's venv (a GPU host): build it from
# the real before_rank0 (make_big_trace.py), then `gpuscope ingest` and `gpuscope analyze --json`,
# each pinned to 2 cores (taskset -c $CORES), each under /usr/bin/time -v and mem_timeline.py (RSS
# over time, charged to the code running). Results under $OUT (default /tmp/big-out).
#
#   GB=10 OUT=/tmp/out bash benchmarks/big_rank_device.sh
#
# Needs python3 with numpy, pandas, pyarrow; duckdb 1.5.5, its extensions and msgspec come from
# $SITE_TAR (a tar.xz of a `pip install --target` of their cp312 wheels: docs/benchmarks.md,
# "The 10 GB rank"). The package is laid out from this checkout (app/ is gpuscope, the other
# layers inside it) and the compiled parser built here when a C compiler is at hand.
set -u
GB=${GB:-10}
OUT=${OUT:-/tmp/big-out}
CORES=${CORES:-0,1}
SITE_TAR=${SITE_TAR:-.h4dev/site.tar.xz}
ANALYZE_TIMEOUT=${ANALYZE_TIMEOUT:-300}
WORK=${WORK:-/tmp/big-work}
mkdir -p "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/steps.txt"; }
log "host: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GB, $(python3 --version)"
. benchmarks/device_package.sh
lay_out_gpuscope "$WORK" "$SITE_TAR" 2>>"$OUT/steps.txt"
case $? in
0) log "compiled parser built here" ;;
2) log "compiled parser: the carried build" ;;
*) exit 1 ;;
esac
export PYTHONPATH="$WORK/site:$WORK/pkg" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -c 'import duckdb, msgspec, gpuscope.ingest.compiled_parser as c; print("duckdb", duckdb.__version__, "compiled parser", c.AVAILABLE)' 2>&1 | tee -a "$OUT/steps.txt"
TRACE="$WORK/big.pt.trace.json"
if [ ! -f "$TRACE" ]; then
    log "make_big_trace $GB GB"
    python3 benchmarks/make_big_trace.py sample_traces/before/before_rank0.pt.trace.json.gz \
        "$TRACE" --target-gb "$GB" 2>&1 | tail -2 | tee -a "$OUT/steps.txt"
fi
TIME=/usr/bin/time
[ -x $TIME ] || TIME=""
export GPUSCOPE_STORE="$WORK/store"
rm -rf "$GPUSCOPE_STORE"
log "ingest (pinned to $CORES)"
${TIME:+$TIME -v -o "$OUT/ingest_time.txt"} taskset -c "$CORES" python3 benchmarks/mem_timeline.py \
    --every 0.5 --log "$OUT/ingest_timeline.txt" -- ingest "$TRACE" >"$OUT/ingest_out.txt" 2>"$OUT/ingest_err.txt"
log "ingest exit $?"
tail -25 "$OUT/ingest_err.txt"
grep -E "Elapsed|Maximum resident|User time|System time" "$OUT/ingest_time.txt" 2>/dev/null
RUN=$(tail -1 "$OUT/ingest_out.txt" | awk '{print $1}')
log "analyze $RUN --json (pinned to $CORES, timeout $ANALYZE_TIMEOUT s)"
${TIME:+$TIME -v -o "$OUT/analyze_time.txt"} timeout -k 20 "$ANALYZE_TIMEOUT" taskset -c "$CORES" \
    python3 benchmarks/mem_timeline.py --every 0.5 --log "$OUT/analyze_timeline.txt" -- analyze "$RUN" --json \
    >"$OUT/analyze.json" 2>"$OUT/analyze_err.txt"
log "analyze exit $?"
tail -25 "$OUT/analyze_err.txt"
grep -E "Elapsed|Maximum resident|User time|System time" "$OUT/analyze_time.txt" 2>/dev/null
du -sh "$GPUSCOPE_STORE" | tee -a "$OUT/steps.txt"
