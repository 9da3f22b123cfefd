"""The ingest's flush alone (its INSERT of sorted chunks into ``events``), per way of writing the
Parquet files: CPU seconds of the writes, bytes on disk, and the rows read back.

    .venv/bin/python benchmarks/ingest_flush_formats.py TRACE [--arms base,v2,...] [--rounds 3]
        [--chunks FILE]

The chunks are the ingest's own: TRACE is ingested once with the flush's ``_write`` wrapped to
keep each sorted chunk it writes (Arrow IPC, ``--chunks``, default ``/tmp/gpuscope-chunks-<name>
.arrow``, reused when there). Then each arm runs in a fresh process (``--worker``), the arms
interleaved ``--rounds`` times: a new DuckLake in a temporary folder with ``events`` and the
arm's options, then, in one transaction, the flush's statement (``INSERT INTO events SELECT
CAST('<id>' AS VARCHAR), * FROM chunk``) once per chunk, DuckDB on one thread, as the flush
thread does. Per arm and round: the CPU s (user + sys) of the INSERTs, the Parquet bytes, and a
digest of the rows read back (the same in every arm: the same rows).

Arms (``--arms``, comma-separated; ``NAME:KEY=VALUE:...`` adds DuckLake options to any):

- ``base``: the lake's defaults (snappy, Parquet version 1);
- ``v2``: ``parquet_version`` 2; ``zstd1``: ``parquet_compression`` zstd at level 1;
  ``zstd1v2``: both; ``uncompressed``; ``lz4``: lz4_raw;
- ``opt:KEY=VALUE[:KEY=VALUE]``: those DuckLake options only;
- ``x2``: the chunks two by two (fewer, larger files);
- ``json``: the JSON columns handed over typed as JSON (pyarrow's ``arrow.json``), so the INSERT
  does not parse them again to check them;
- ``pyarrow``: no INSERT: each chunk written by ``pyarrow.parquet.write_table`` (every column
  dictionary-encoded, pyarrow's default; the ingest's own choice is
  ``batch_insert.write_events_file``) and registered with ``ducklake_add_data_files``.

Prints one JSON line per run, then a table of the medians.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ARMS: dict[str, dict[str, str]] = {
    "base": {},
    "v2": {"parquet_version": "2"},
    "zstd1": {"parquet_compression": "zstd", "parquet_compression_level": "1"},
    "zstd1v2": {
        "parquet_compression": "zstd",
        "parquet_compression_level": "1",
        "parquet_version": "2",
    },
    "uncompressed": {"parquet_compression": "uncompressed"},
    "lz4": {"parquet_compression": "lz4_raw"},
    "opt": {},
    "x2": {},
    "json": {},
    "pyarrow": {},
}
JSON_COLUMNS = ("input_dims", "input_types", "concrete_inputs", "odd_args")


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def capture(trace: Path, out: Path) -> None:
    """Ingest ``trace`` into a temporary store, keeping each chunk the flush writes in ``out``."""
    import pyarrow as pa
    from gpuscope.ingest import batch_insert
    from stores import ingest_into_new_lake

    sink: list[Any] = []
    write = batch_insert.BatchInserter._write

    def keep(self: Any, chunk: Any) -> None:
        if not sink:
            sink.append(pa.ipc.new_file(str(out), chunk.schema))
        sink[0].write_table(chunk, max_chunksize=1 << 30)
        write(self, chunk)

    batch_insert.BatchInserter._write = keep  # type: ignore[method-assign]
    try:
        ingest_into_new_lake(trace, "gpuscope-flush-")
    finally:
        batch_insert.BatchInserter._write = write  # type: ignore[method-assign]
        if sink:
            sink[0].close()


def worker(arm: str, chunks_file: Path) -> dict[str, Any]:
    import pyarrow as pa
    from gpuscope.store import extensions
    from gpuscope.store.schema import EVENTS

    name, *extra = arm.split(":")
    options = dict(ARMS[name])
    options.update(dict(o.partition("=")[::2] for o in extra))  # type: ignore[misc]
    with pa.memory_map(str(chunks_file)) as src:
        reader = pa.ipc.open_file(src)
        chunks = [
            pa.Table.from_batches([reader.get_batch(i)]) for i in range(reader.num_record_batches)
        ]
    if name == "x2":
        chunks = [
            pa.concat_tables(chunks[i : i + 2]).combine_chunks() for i in range(0, len(chunks), 2)
        ]
    if name == "json":
        schema = chunks[0].schema
        for col in JSON_COLUMNS:
            at = schema.get_field_index(col)
            schema = schema.set(at, pa.field(col, pa.json_()))
        chunks = [c.cast(schema) for c in chunks]
    n_rows = sum(c.num_rows for c in chunks)
    with tempfile.TemporaryDirectory(prefix="gpuscope-flush-") as d:
        con = extensions.offline_connection("ducklake", "parquet")
        con.execute("SET threads = 1")
        con.execute(f"ATTACH 'ducklake:{d}/cat.ducklake' AS lk (DATA_PATH '{d}/data/')")
        con.execute("USE lk")
        con.execute(EVENTS.ddl(keys=False))
        for key, value in options.items():
            con.execute(f"CALL lk.set_option('{key}', '{value}')")
        con.execute("BEGIN")
        c0 = _cpu()
        if name == "pyarrow":
            _pyarrow_writes(con, chunks, Path(d, "data", "main", "events"))
        else:
            for _gs_chunk in chunks:
                con.execute(
                    "INSERT INTO events SELECT CAST('0123456789ab' AS VARCHAR), * FROM _gs_chunk"
                )
        c1 = _cpu()
        con.execute("COMMIT")
        files = sorted(Path(d, "data").rglob("*.parquet"))
        size = sum(p.stat().st_size for p in files)
        digest = con.execute("SELECT count(*), sum(hash(COLUMNS(*))) FROM events").fetchone()
        meta = con.execute(
            "SELECT DISTINCT compression, encodings FROM parquet_metadata(?) ORDER BY ALL",
            [str(files[0])],
        ).fetchall()
        con.close()
    return {
        "arm": arm,
        "insert_cpu_s": round(c1 - c0, 3),
        "parquet_mb": round(size / 1e6, 2),
        "files": len(files),
        "rows": n_rows,
        "digest": hashlib.sha256(repr(digest).encode()).hexdigest()[:16],
        "codecs_encodings": sorted({f"{c}/{e}" for c, e in meta}),
        "load1": round(os.getloadavg()[0], 2),
    }


def _pyarrow_writes(con: Any, chunks: list[Any], folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    schema = chunks[0].schema
    for col in JSON_COLUMNS:
        schema = schema.set(schema.get_field_index(col), pa.field(col, pa.json_()))
    for i, chunk in enumerate(chunks):
        chunk = chunk.cast(schema)
        ids = pa.DictionaryArray.from_arrays(
            pa.repeat(pa.scalar(0, pa.int32()), chunk.num_rows), pa.array(["0123456789ab"])
        )
        path = folder / f"gs-{i:05d}.parquet"
        pq.write_table(chunk.add_column(0, "run_id", ids), path, store_schema=False)
        con.execute(f"CALL ducklake_add_data_files('lk', 'events', '{path}')")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--arms", default="base,v2,zstd1,zstd1v2,json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunks", type=Path)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    chunks = args.chunks or Path(tempfile.gettempdir(), f"gpuscope-chunks-{args.trace.name}.arrow")
    if args.worker:
        print(json.dumps(worker(args.worker, chunks)))
        return 0
    if not chunks.exists():
        capture(args.trace, chunks)
    gb = args.trace.stat().st_size / 1e9
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        for arm in args.arms.split(","):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    str(args.trace),
                    "--chunks",
                    str(chunks),
                    "--worker",
                    arm,
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(json.dumps(r), flush=True)
            runs.setdefault(arm, []).append(r)
    print(f"\n{'arm':<44} {'CPU s/GB (median; min-max)':>28} {'MB':>7} files  same rows")
    first = next(iter(runs.values()))[0]["digest"]
    for arm, rs in runs.items():
        cpu = [r["insert_cpu_s"] / gb for r in rs]
        print(
            f"{arm:<44} {statistics.median(cpu):>10.2f} ({min(cpu):.2f}-{max(cpu):.2f})"
            f"{'':>8} {rs[0]['parquet_mb']:>7.1f} {rs[0]['files']:>5}  "
            f"{all(r['digest'] == first for r in rs)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
