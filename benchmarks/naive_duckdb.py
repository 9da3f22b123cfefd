"""Naive DuckDB contender: the one-statement load a DuckDB user would write first.

    python benchmarks/naive_duckdb.py TRACE DB

    CREATE TABLE events AS
    SELECT unnest(traceEvents, recursive := true)
    FROM read_json(TRACE, maximum_object_size = <file size + 1 MiB>)

``read_json`` must see the whole trace (one JSON object) at once, infers one struct type for all
events (``args`` becomes a wide struct of every key seen; pid/tid become JSON when strings occur) and
the recursive unnest flattens it to one column per key. DuckDB's default settings (threads = cores,
memory_limit = 80 % of RAM). Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time

import duckdb

path, db = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
con = duckdb.connect(db)
size = os.path.getsize(path)
con.execute(
    "CREATE TABLE events AS SELECT unnest(traceEvents, recursive := true) "
    f"FROM read_json(?, maximum_object_size = {size + (1 << 20)})",
    [path],
)
n = con.execute("SELECT count(*) FROM events").fetchone()[0]
ncols = len(con.execute("DESCRIBE events").fetchall())
con.close()
print(
    json.dumps(
        {"ok": n > 0, "n_rows": n, "columns": ncols, "load_s": round(time.perf_counter() - t0, 2)}
    )
)
