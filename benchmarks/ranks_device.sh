#!/bin/bash
# 128 ranks beside HTA on a machine without the project's venv (a GPU host), pinned to 2 cores:
# bench_ranks.py --ranks $RANKS --repeat $REPEAT under `taskset -c $CORES` (HTA's worker processes
# and gpuscope's threads alike), in two stages, since the wheels of both do not travel in one call:
#
#   bash benchmarks/ranks_device.sh gpuscope   # carry .h4dev/site.tar.xz: duckdb & co, the rank files
#   bash benchmarks/ranks_device.sh hta        # carry .h4dev/hta: HTA 0.5.0's wheels; then the runs
#
# The second stage needs the first's /tmp on the same (warm) machine. Where the tree and the tar pass
# the device's 64 MiB, send the tar in `split` parts over two calls and give the joined file as
# SITE_TAR=/tmp/site.tar.xz to the gpuscope stage (docs/benchmarks.md, "The 10 GB rank"). gpuscope's package is laid out
# as big_rank_device.sh does; HTA runs on the host's python3 with its wheels first on PYTHONPATH.
set -u
STAGE=${1:?gpuscope or hta}
RANKS=${RANKS:-128}
REPEAT=${REPEAT:-2}
CORES=${CORES:-0,1}
WORK=${WORK:-/tmp/big-work}
export PYTHONPATH="$WORK/site:$WORK/pkg" PYTHONUNBUFFERED=1
if [ "$STAGE" = gpuscope ]; then
    . benchmarks/device_package.sh
    lay_out_gpuscope "$WORK" "${SITE_TAR:-.h4dev/site.tar.xz}" || exit 1
    python3 -c 'import duckdb, gpuscope.ingest.compiled_parser as c; print("duckdb", duckdb.__version__, "compiled parser", c.AVAILABLE)'
    python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path; from bench_ranks import make_ranks; print(make_ranks($RANKS, Path('$WORK/out')))"
    exit 0
fi
[ -f "$WORK/site/.unpacked" ] || { echo "no $WORK/site: run the gpuscope stage first (same machine)"; exit 1; }
mkdir -p "$WORK/hta-site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/hta-site" .h4dev/hta/*.whl || exit 1
cat >"$WORK/hta-python" <<EOF
#!/bin/sh
PYTHONPATH="$WORK/hta-site" exec python3 "\$@"
EOF
chmod +x "$WORK/hta-python"
"$WORK/hta-python" -c 'import hta, pandas; print("HTA", pandas.__version__)' || exit 1
python3 -m compileall -q "$WORK/hta-site" "$WORK/pkg" >/dev/null
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo), pinned to $CORES"
taskset -c "$CORES" python3 benchmarks/bench_ranks.py --ranks "$RANKS" --repeat "$REPEAT" \
    --out "$WORK/out" --hta-python "$WORK/hta-python"
