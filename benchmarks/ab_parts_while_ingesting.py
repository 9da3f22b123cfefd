"""A/B: a run of many rank files ingested with each rank's cross-rank part computed while the next
ranks are parsed (``store_after_ingest``, whose ``rank_sink`` takes each rank's rows) against the
same parts computed from the store after the ingest (the same hook without its sink). Each variant
in a fresh process, interleaved, ``--repeat`` rounds; prints wall, CPU and peak RSS per run, then
the medians and the ratio.

    .venv/bin/python benchmarks/ab_parts_while_ingesting.py benchmarks/out/ranks-128 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(folder: Path, variant: str) -> dict[str, float]:
    """Ingest ``folder`` into a new store in this process (``--child``) and return the figures."""
    from gpuscope.analysis import rank_summary as RS
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    def after_ingest(con, result) -> None:  # type: ignore[no-untyped-def]
        RS.store_after_ingest(con, result)  # the same parts, no rank_sink: from the store

    hook = RS.store_after_ingest if variant == "while" else after_ingest
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        with connect(Path(tmp) / "store") as con:
            run_id = ingest_paths(con, [folder], after_trace=hook)[0].run_id
            n = con.execute(
                "SELECT count(*) FROM rank_summaries WHERE run_id = ?", [run_id]
            ).fetchone()[0]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "rss_mb": round(rss), "parts": n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=["while", "after"])
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.folder, a.child)))
        return 0
    got: dict[str, list[dict[str, float]]] = {"while": [], "after": []}
    for i in range(a.repeat):
        for v in ("while", "after") if i % 2 == 0 else ("after", "while"):
            out = subprocess.run(
                [sys.executable, __file__, str(a.folder), "--child", v],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            got[v].append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps({"variant": v, "round": i + 1, **got[v][-1]}), flush=True)
    med = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in got.items()}
    print(
        f"median wall: while {med['while']['wall_s']:.1f} s, after {med['after']['wall_s']:.1f} s "
        f"({med['after']['wall_s'] / med['while']['wall_s']:.2f}x); CPU {med['while']['cpu_s']:.1f}"
        f" vs {med['after']['cpu_s']:.1f} s; peak RSS {med['while']['rss_mb']:.0f} vs "
        f"{med['after']['rss_mb']:.0f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
