"""A/B of the ingest's parse threads (``jobs``) on one trace or folder, interleaved, each run in a
process of its own through measure.py (wall, CPU, peak RSS), optionally pinned to some cores.

    .venv/bin/python benchmarks/ab_ingest_jobs.py TARGET [--jobs 1,2] [--repeat 2] [--cpus 0,1]
        [--base-src DIR]

TARGET: a trace file or a folder of rank files (``bench_ranks.py`` builds one). ``--cpus``: the
cores every run is pinned to (``os.sched_setaffinity``; a 2-core figure on a bigger, quiet host).
``--base-src DIR``: also run the "before" contender: DIR holds an older ``gpuscope`` package
(e.g. ``git archive <commit> app ingest analysis`` with ``app`` renamed ``gpuscope`` and the other
two moved into it), run with its own defaults. Each run ingests into a new local store and runs
the store maintenance that ``gpuscope ingest`` runs after it.
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
src, target, db, jobs = sys.argv[1:5]
if src:
    sys.path.insert(0, src)
from pathlib import Path
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
kw = {} if jobs == "-" else {"jobs": int(jobs)}
with connect(db) as con:
    ingest_paths(con, [Path(target)], **kw)
    con.maintain_after_ingest()
"""


def size_of(target: Path) -> int:
    if target.is_dir():
        return sum(p.stat().st_size for p in target.iterdir() if p.is_file())
    return target.stat().st_size


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path)
    ap.add_argument("--jobs", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--cpus", default=None, help="pin every run to these cores, e.g. 0,1")
    ap.add_argument("--base-src", type=Path, default=None)
    a = ap.parse_args()
    size = size_of(a.target)
    modes: list[tuple[str, str, str]] = [(f"jobs={j}", "", j) for j in a.jobs.split(",")]
    if a.base_src:
        modes.insert(0, ("before", str(a.base_src.resolve()), "-"))
    cpus = {int(c) for c in a.cpus.split(",")} if a.cpus else None
    rows = []
    (HERE / "out").mkdir(exist_ok=True)
    for i in range(a.repeat):
        for label, src, jobs in modes if i % 2 == 0 else modes[::-1]:
            work = Path(tempfile.mkdtemp(prefix="ab-jobs-", dir=HERE / "out"))
            cmd = [sys.executable, str(HERE / "measure.py"), "--", sys.executable, "-c", CHILD]
            cmd += [src, str(a.target), str(work / "s"), jobs]
            pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
            done = subprocess.run(cmd, capture_output=True, text=True, check=True, preexec_fn=pin)
            m = json.loads(done.stdout.strip().splitlines()[-1])
            shutil.rmtree(work, ignore_errors=True)
            m.update(
                {
                    "mode": label,
                    "repeat": i + 1,
                    "rss_over_size": round(m["peak_rss_mb"] * 2**20 / size, 3),
                    "load": os.getloadavg()[0],
                }
            )
            print(json.dumps(m), flush=True)
            rows.append(m)
    for label, _, _ in modes:
        mine = [r for r in rows if r["mode"] == label]
        w = [r["wall_s"] for r in mine]
        c = [round(r["user_s"] + r["sys_s"], 1) for r in mine]
        print(f"{label}: wall {w} s, CPU {c} s, peak RSS/size {[r['rss_over_size'] for r in mine]}")
    print(f"target {size / 1e9:.3f} GB; cpus {a.cpus or 'all'}; load now {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
