"""A rank's cross-rank summary part, CPU ms per rank, as the ingest computes it while it parses the
next ranks (``rank_summary.PartsWhileIngesting._compute`` on the rows the ingest hands over, read
back here from a store). Prints the per-round figures and a hash of the parts (the same hash for
two versions: the same parts).

    .venv/bin/python benchmarks/part_cost.py STORE [--rounds N]

``STORE``: a store holding one run of several ranks (``gpuscope ingest benchmarks/out/ranks-16
--db STORE``). To compare two versions, install each one's wheel into a folder
(``pip install --no-deps --target DIR WHEEL``) and run this with ``PYTHONPATH=DIR``, alternating.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from typing import Any

from gpuscope.analysis import rank_summary
from gpuscope.ingest.rank_rows import RankRows
from gpuscope.store import connect


def first_run_ranks(con: Any, limit: int | None = None) -> tuple[str, list[int]]:
    """The store's first trace run and its ranks, ascending (the first ``limit`` of them)."""
    run = con.execute("SELECT run_id FROM runs WHERE kind = 'trace' LIMIT 1").fetchone()[0]
    rows = con.execute("SELECT rank FROM ranks WHERE run_id = ? ORDER BY rank", [run]).fetchall()
    return run, [int(r[0]) for r in rows][:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    con = connect(a.store)
    run, ranks = first_run_ranks(con)
    names = con.execute("SELECT * FROM names WHERE run_id = ?", [run]).to_arrow_table()
    rank_rows = [
        list(r)
        for r in con.execute("SELECT * FROM ranks WHERE run_id = ? ORDER BY rank", [run]).fetchall()
    ]
    rows = []
    for r in ranks:
        events = con.execute(
            "SELECT * FROM events WHERE run_id = ? AND rank = ?", [run, r]
        ).to_arrow_table()
        threads = [
            tuple(t)
            for t in con.execute(
                "SELECT * FROM threads WHERE run_id = ? AND rank = ?", [run, r]
            ).fetchall()
        ]
        own = [row for row in rank_rows if row[1] == r]  # the ingest hands a rank its own row
        rows.append(RankRows(run, r, events, threads, own, names))
    sink = rank_summary.PartsWhileIngesting(run, rank_summary.EVERY_RANK, 1)
    docs: dict[int, list[str]] = {}
    per_rank_ms = []
    try:
        for _ in range(a.rounds):
            t = time.thread_time()
            for rr in rows:
                docs[rr.rank] = [row[4] for row in sink._compute(rr)]
            per_rank_ms.append((time.thread_time() - t) / len(rows) * 1e3)
    finally:
        sink.close()
    digest = hashlib.sha256(json.dumps(sorted(docs.items())).encode()).hexdigest()[:16]
    print(
        f"{len(rows)} ranks, CPU ms per rank: "
        + ", ".join(f"{x:.1f}" for x in per_rank_ms)
        + f" (median {statistics.median(per_rank_ms):.1f}); parts {digest}"
    )


if __name__ == "__main__":
    main()
