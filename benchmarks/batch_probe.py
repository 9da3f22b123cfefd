"""How much of a rank's cross-rank part is the cost of running statements one rank at a time: the
same statements run once per rank on that rank's rows (Arrow, registered in an in-memory DuckDB,
as the ingest's part threads do) and once over a batch of ranks' rows (``GROUP BY rank`` /
``rank`` in the join keys). A probe for the design of batched parts (docs/benchmarks.md), not the product's code:
it prints CPU ms per rank for each way and checks that both give the same rows.

    .venv/bin/python benchmarks/batch_probe.py STORE [--ranks 16] [--rounds 5]

``STORE``: a store holding one run of several ranks (``gpuscope ingest benchmarks/out/ranks-16
--db STORE``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import duckdb
import pyarrow.compute as pc
from gpuscope.analysis.event_classes import KERNEL_CATS
from gpuscope.analysis.store_access import (
    COMM_KERNEL_RE,
    GPU_ACTIVITY_SQL,
    HOST_CATS_SQL,
    RUNTIME_CATS_SQL,
    sql_list,
)
from gpuscope.store import connect
from part_cost import first_run_ranks

#: The probe's statements, each with ``{where}`` (the rank filter, or none) and ``{by}`` (the
#: rank in the grouping and join keys, or none): a rank's working tables (host spans, GPU
#: activity) and the collective frame's kernel query.
STATEMENTS: dict[str, str] = {
    "host table": f"""
        SELECT rank, pid, tid, ph, cat, name_id, ts_ns, dur_ns, correlation, external_id
        FROM events WHERE {{where}} (cat IN {HOST_CATS_SQL} OR (cat = 'fwdbwd' AND ph = 'f'))""",
    "gpu table": f"""
        SELECT rank, coalesce(device, CAST(pid AS INTEGER)) AS dev, coalesce(stream, tid) AS stream,
               ts_ns AS s, ts_ns + dur_ns AS e, correlation, name_id, cat, bytes
        FROM events WHERE {{where}} {GPU_ACTIVITY_SQL}""",
    "comm kernels": f"""
        WITH kn AS (
            SELECT e.rank, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e, e.correlation, n.name
            FROM events e JOIN names n ON n.name_id = e.name_id
            WHERE {{where_e}} e.ph = 'X' AND e.cat IN {sql_list(KERNEL_CATS)} AND e.dur_ns > 0
              AND regexp_matches(n.name, '{COMM_KERNEL_RE}')
        ),
        rt AS (
            SELECT rank, correlation, min(ts_ns) AS ls, min(tid) AS ltid
            FROM events
            WHERE {{where}} ph = 'X' AND cat IN {RUNTIME_CATS_SQL}
              AND correlation IN (SELECT correlation FROM kn WHERE correlation IS NOT NULL)
            GROUP BY rank, correlation
        )
        SELECT kn.*, rt.ls, rt.ltid FROM kn LEFT JOIN rt USING (rank, correlation)""",
}


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.thread_time()
    out = fn()
    return time.thread_time() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    con = connect(a.store)
    run, ranks = first_run_ranks(con, a.ranks)
    events = con.execute(
        "SELECT * FROM events WHERE run_id = ? AND list_contains(?, rank)", [run, ranks]
    ).to_arrow_table()
    names = con.execute("SELECT * FROM names WHERE run_id = ?", [run]).to_arrow_table()
    scratch = duckdb.connect(":memory:")
    scratch.execute("SET threads = 1")
    own = {r: events.filter(pc.equal(events.column("rank"), r)) for r in ranks}
    scratch.register("names", names)
    print(f"{len(ranks)} ranks, {events.num_rows:,} events")
    seq = iter(range(10**9))
    for label, sql in STATEMENTS.items():
        one: list[float] = []
        batch: list[float] = []
        for _ in range(a.rounds):

            def per_rank(label: str = label, sql: str = sql) -> list[Any]:  # tables: names
                out: list[Any] = []
                for r in ranks:  # as the ingest does: the rank's own rows, registered
                    scratch.register("events", own[r])
                    w = f"rank = {r} AND"
                    q = sql.format(where=w, where_e=f"e.{w}")
                    if label.endswith("table"):
                        out.append(f"t{next(seq)}")
                        scratch.execute(f"CREATE TEMP TABLE {out[-1]} AS {q}")
                    else:
                        out += scratch.execute(q).fetchall()
                return out

            def batched(label: str = label, sql: str = sql) -> list[Any]:
                scratch.register("events", events)
                q = sql.format(where="", where_e="")
                if label.endswith("table"):
                    t = f"t{next(seq)}"
                    scratch.execute(f"CREATE TEMP TABLE {t} AS {q}")
                    return [t]
                return scratch.execute(q).fetchall()

            def rows(out: list[Any], label: str = label) -> list[Any]:  # read back, untimed
                if not label.endswith("table"):
                    return out
                got = [r for t in out for r in scratch.execute(f"SELECT * FROM {t}").fetchall()]
                for t in out:
                    scratch.execute(f"DROP TABLE {t}")
                return got

            dt1, out1 = _timed(per_rank)
            dt2, out2 = _timed(batched)
            rows1, rows2 = rows(out1), rows(out2)
            if sorted(rows1, key=repr) != sorted(rows2, key=repr):
                raise SystemExit(f"{label}: the batched statement gave other rows")
            one.append(dt1 / len(ranks) * 1e3)
            batch.append(dt2 / len(ranks) * 1e3)
        m1, m2 = statistics.median(one), statistics.median(batch)
        print(
            f"{label:>13}: one rank at a time {m1:6.2f} CPU ms/rank, "
            f"batched {m2:6.2f} CPU ms/rank ({m2 / m1:.2f}x); rows the same"
        )


if __name__ == "__main__":
    main()
