"""A rank's cross-rank summary part, CPU ms per rank, as the ingest computes it while it parses the
next ranks (``rank_summary.PartsWhileIngesting._compute`` on the rows the ingest hands over, read
back here from a store). Prints the per-round figures and a hash of the parts (the same hash for
two versions: the same parts).

    .venv/bin/python benchmarks/part_cost.py STORE [--rounds N] [--statements]

``STORE``: a store holding one run of several ranks (``gpuscope ingest benchmarks/out/ranks-16
--db STORE``). To compare two versions, install each one's wheel into a folder
(``pip install --no-deps --target DIR WHEEL``) and run this with ``PYTHONPATH=DIR``, alternating.

``--statements``: also time every statement the part threads' scratch database runs (CPU ms per
rank, grouped by the statement's first words with the working tables' unique prefixes taken
out); the wrapper adds its own cost.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import time
from collections import defaultdict
from typing import Any, ClassVar

from gpuscope.analysis import rank_summary
from gpuscope.ingest.rank_rows import RankRows
from gpuscope.store import connect


def first_run_ranks(con: Any, limit: int | None = None) -> tuple[str, list[int]]:
    """The store's first trace run and its ranks, ascending (the first ``limit`` of them)."""
    run = con.execute("SELECT run_id FROM runs WHERE kind = 'trace' LIMIT 1").fetchone()[0]
    rows = con.execute("SELECT rank FROM ranks WHERE run_id = ? ORDER BY rank", [run]).fetchall()
    return run, [int(r[0]) for r in rows][:limit]


class TimedScratch:
    """A part thread's scratch connection whose ``execute`` calls are timed (CPU s of the thread)
    into ``totals`` by statement head; everything else goes to the connection."""

    totals: ClassVar[dict[str, list[float]]] = defaultdict(lambda: [0, 0.0])

    def __init__(self, con: Any) -> None:
        object.__setattr__(self, "_con", con)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def __hash__(self) -> int:
        return id(self)

    def execute(self, sql: str, params: Any = None) -> Any:
        t = time.thread_time()
        out = self._con.execute(sql) if params is None else self._con.execute(sql, params)
        head = re.sub(r"_r[ib]\d+_[0-9a-f]+_", "_rx_", " ".join(sql.split()))[:70]
        self.totals[head][0] += 1
        self.totals[head][1] += time.thread_time() - t
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--statements", action="store_true", help="time each statement too")
    a = ap.parse_args()
    if a.statements:
        new_scratch = rank_summary._new_scratch
        rank_summary._new_scratch = lambda viewed=(): TimedScratch(new_scratch(viewed))
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
    columns = getattr(sink, "columns", None)  # what the ingest keeps for the sink (newer wheels)
    if columns is not None:
        from gpuscope.ingest.batch_insert import rows_kept

        for rr in rows:
            rr.events = rows_kept(rr.events, columns, run)
    # the ingest's batches of ranks (one rank each, for a version before them)
    per_batch = hasattr(rank_summary, "batch_is_full")
    batches: list[list[RankRows]] = [[]]
    for rr in rows:
        if batches[-1] and (not per_batch or rank_summary.batch_is_full(batches[-1])):
            batches.append([])
        batches[-1].append(rr)
    docs: dict[int, list[str]] = {}
    per_rank_ms = []
    try:
        for _ in range(a.rounds):
            t = time.thread_time()
            docs.clear()
            for batch in batches:
                for row in sink._compute(batch if per_batch else batch[0]):
                    docs.setdefault(row[1], []).append(row[4])
            per_rank_ms.append((time.thread_time() - t) / len(rows) * 1e3)
    finally:
        sink.close()
    digest = hashlib.sha256(json.dumps(sorted(docs.items())).encode()).hexdigest()[:16]
    print(
        f"{len(rows)} ranks, CPU ms per rank: "
        + ", ".join(f"{x:.1f}" for x in per_rank_ms)
        + f" (median {statistics.median(per_rank_ms):.1f}); parts {digest}"
    )
    if a.statements:
        n = len(rows) * a.rounds
        stats = sorted(TimedScratch.totals.items(), key=lambda kv: -kv[1][1])
        print(
            f"statements: {sum(c for c, _ in TimedScratch.totals.values()) / n:.1f} a rank, "
            f"{sum(t for _, t in TimedScratch.totals.values()) * 1e3 / n:.1f} CPU ms a rank"
        )
        for head, (count, secs) in stats[:25]:
            print(f"{secs * 1e3 / n:7.2f} ms {count / n:4.1f}x  {head}")


if __name__ == "__main__":
    main()
