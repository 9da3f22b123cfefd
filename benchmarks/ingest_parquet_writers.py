"""The ingest's Parquet write alone, three ways, on the events of a stored run: CPU and bytes of
each, and whether the lake then holds the same rows.

    .venv/bin/python benchmarks/ingest_parquet_writers.py STORE [--rows 38000] [--repeat 2]
        [--arms insert,insert_v2,pyarrow]

STORE is a gpuscope store holding one run (e.g. the 1 GB trace ingested with
``benchmarks/ingest_write_cpu.py``'s code, or ``gpuscope ingest TRACE --db STORE``). Its ``events``
are read into memory and cut into chunks of ``--rows`` rows (the ingest writes ~32,768-38,000 a
file), then written, in one transaction, into a new DuckLake in a temporary folder, by:

- ``insert``: ``INSERT INTO events SELECT * FROM chunk`` per chunk, DuckDB on one thread (what
  the ingest's flush thread does on a team store);
- ``insert_v2``: the same with the lake's ``parquet_version`` option at 2 (V2 data pages);
- ``insert:KEY=VALUE[:KEY=VALUE...]``: the same with those DuckLake options
  (``insert:parquet_compression=zstd:parquet_compression_level=1``);
- ``pyarrow``: ``pyarrow.parquet.write_table`` per chunk (snappy, as DuckLake's default), then
  ``ducklake_add_data_files`` registers each file in the transaction (its footer read for the
  catalog's statistics). The ingest's own pyarrow writer (a local store's) is
  ``batch_insert.write_events_file``, measured on the ingest's chunks by
  ``benchmarks/ingest_flush_formats.py`` and end to end by ``benchmarks/ingest_writer_ab.py``.

Arms alternate ``--repeat`` times in this process. Per arm: process CPU s (user + sys) of the
write and of the registration, the Parquet bytes, and the rows' digest (``count(*)`` and each
column's sum of row hashes, read back through the lake): equal digests, the same rows.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def write(arm: str, chunks: list[Any], folder: Path) -> dict[str, Any]:
    """Write ``chunks`` into a new lake under ``folder`` as ``arm`` does; its figures."""
    import pyarrow.parquet as pq
    from gpuscope.store import extensions

    con = extensions.offline_connection("ducklake", "parquet")
    try:
        con.execute("SET threads = 1")
        con.execute(f"ATTACH 'ducklake:{folder}/cat.ducklake' AS lk (DATA_PATH '{folder}/data')")
        first = chunks[0].slice(0, 0)  # noqa: F841 - read by the statement below
        con.execute("CREATE TABLE lk.events AS SELECT * FROM first")
        if arm == "insert_v2":
            con.execute("CALL lk.set_option('parquet_version', '2')")
        for opt in arm.split(":")[1:]:  # insert:KEY=VALUE[:KEY=VALUE]: the lake's options
            key, _, value = opt.partition("=")
            con.execute("CALL lk.set_option(?, ?)", [key, value])
        own = folder / "data" / "added"
        own.mkdir(parents=True)
        con.execute("BEGIN")
        c0 = _cpu()
        files = []
        for i, _gs_chunk in enumerate(chunks):
            if arm == "pyarrow":
                path = own / f"{i:05d}.parquet"
                pq.write_table(_gs_chunk, path, compression="snappy")
                files.append(path)
            else:
                con.execute("INSERT INTO lk.events SELECT * FROM _gs_chunk")
        c1 = _cpu()
        for path in files:
            con.execute("CALL ducklake_add_data_files('lk', 'events', ?)", [str(path)])
        con.execute("COMMIT")
        c2 = _cpu()
        rows = con.execute("SELECT count(*), sum(hash(COLUMNS(*))) FROM lk.events").fetchone()
    finally:
        con.close()
    size = sum(p.stat().st_size for p in (folder / "data").rglob("*.parquet"))
    return {
        "arm": arm,
        "write_cpu_s": round(c1 - c0, 2),
        "register_commit_cpu_s": round(c2 - c1, 2),
        "all_cpu_s": round(c2 - c0, 2),
        "parquet_mb": round(size / 1e6, 1),
        "rows": rows[0] if rows else None,
        "digest": hashlib.sha256(repr(rows).encode()).hexdigest()[:16],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("store")
    ap.add_argument("--rows", type=int, default=38_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--arms", default="insert,insert_v2,pyarrow", help="comma-separated")
    args = ap.parse_args()
    from gpuscope.store import connect

    src = connect(args.store)
    try:
        events = src.execute("SELECT * FROM events").to_arrow_table()
    finally:
        src.close()
    chunks = [
        events.slice(i, args.rows).combine_chunks() for i in range(0, events.num_rows, args.rows)
    ]
    del events
    print(f"{sum(c.num_rows for c in chunks):,} events in {len(chunks)} chunks", flush=True)
    digests = set()
    for _ in range(args.repeat):
        for arm in args.arms.split(","):
            with tempfile.TemporaryDirectory(prefix="gpuscope-writers-") as d:
                r = write(arm, chunks, Path(d))
            digests.add(r["digest"])
            print(r, flush=True)
    print("the same rows in every arm:", len(digests) == 1)
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
