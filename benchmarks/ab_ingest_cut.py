"""A/B of the ingest's batch cut on one trace: Kineto-separator cut (as shipped) vs the numpy scan
only, interleaved, each in a process of its own through measure.py (wall, peak RSS, CPU).

    .venv/bin/python benchmarks/ab_ingest_cut.py TRACE [--repeat 2] [--summaries]

``--summaries`` also computes the run's rank summaries inside the ingest (what ``gpuscope ingest``
does); without it the figure is the ingest alone (comparable to bench_ingest's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = """
import sys
from pathlib import Path
from gpuscope.ingest import json_stream
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
trace, db, mode, summaries = sys.argv[1:5]
if mode == "scan":
    json_stream.TraceSplitter._fast_cut = lambda *a: None
hook = None
if summaries == "1":
    from gpuscope.analysis.rank_summary import store_after_ingest as hook
with connect(db) as con:
    ingest_paths(con, [Path(trace)], after_trace=hook)
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--summaries", action="store_true")
    a = ap.parse_args()
    size = a.trace.stat().st_size
    rows = []
    for i in range(a.repeat):
        for mode in ("scan", "cut") if i % 2 == 0 else ("cut", "scan"):
            work = Path(tempfile.mkdtemp(prefix="ab-cut-", dir=HERE / "out"))
            done = subprocess.run(
                [sys.executable, str(HERE / "measure.py"), "--", sys.executable, "-c", CHILD,
                 str(a.trace), str(work / "s"), mode, "1" if a.summaries else "0"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            m = json.loads(done.stdout.strip().splitlines()[-1])
            shutil.rmtree(work, ignore_errors=True)
            m.update(
                {
                    "mode": mode,
                    "repeat": i + 1,
                    "rss_over_size": round(m["peak_rss_mb"] * 2**20 / size, 3),
                }
            )
            print(json.dumps(m), flush=True)
            rows.append(m)
    for mode in ("scan", "cut"):
        w = [r["wall_s"] for r in rows if r["mode"] == mode]
        c = [round(r["user_s"] + r["sys_s"], 1) for r in rows if r["mode"] == mode]
        print(
            f"{mode}: wall {w} s, CPU {c} s, peak RSS/size {[r['rss_over_size'] for r in rows if r['mode'] == mode]}"
        )
    print(f"file {size / 1e9:.3f} GB; load now {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
