"""Why the ingest's speed moves between machines: the CPU time of each of its kernels alone, on one
core, then the same in two processes at once (one per core), beside an interpreter-bound loop.

    .venv/bin/python benchmarks/ingest_machine.py TRACE [--mb 256] [--pair]

Kernels, each timed in CPU seconds of this thread (``time.thread_time``) over the first ``--mb`` MB
of TRACE (a Kineto JSON file), and reported as MB of JSON per CPU second:

- ``read``: the file's bytes into memory (4 MiB reads, page cache warm);
- ``split``: cutting them into batches (:class:`~gpuscope.ingest.json_stream.TraceSplitter`);
- ``parse``: the compiled parser's scan of each batch to Arrow;
- ``sort``: the writer's sort of 32,768-row chunks (:func:`~gpuscope.ingest.batch_insert.sort_order`
  and the take);
- ``parquet``: DuckDB writing those chunks to Parquet (snappy, one thread);
- ``python``: a pure-Python pass over the sample's events (dict lookups, HTA's kind of work),
  MB of that JSON per CPU second.

``--pair`` runs the same in two processes at once, pinned to two different cores of this
process's affinity: a kernel whose CPU time grows when its twin runs beside it shares something
with it (a core's other hyperthread, the caches, memory bandwidth). HTA runs on one core; the
ingest keeps two busy. Prints a table (alone, pair, pair/alone) and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KERNELS = ("read", "split", "parse", "sort", "parquet", "python")


def _kernels(trace: Path, limit: int) -> dict[str, float]:
    """CPU s per kernel over the first ``limit`` bytes of ``trace`` (and the bytes each saw)."""
    import duckdb
    import pyarrow as pa
    from gpuscope.ingest import batch_insert, compiled_parser, json_stream

    cpu: dict[str, float] = dict.fromkeys(KERNELS, 0.0)
    seen = 0

    def reads() -> Any:
        nonlocal seen
        with open(trace, "rb") as f:
            while True:
                t = time.thread_time()
                block = f.read(4 << 20)
                cpu["read"] += time.thread_time() - t
                if not block:
                    return
                seen += len(block)
                yield block

    tables: list[pa.Table] = []
    splitter = json_stream.TraceSplitter(
        trace, reads(), json_stream.BATCH_BYTES, prove_cuts=False
    )  # as the ingest cuts: each cut proven by its batch's parse
    batches = splitter.batches()
    parsed_bytes = 0
    while seen < limit:  # the batches read so far; the rest of the file is left
        t = time.thread_time()
        batch = next(batches, None)
        cpu["split"] += time.thread_time() - t
        if batch is None:
            break
        t = time.thread_time()
        got = compiled_parser.scan(batch.data)
        cpu["parse"] += time.thread_time() - t
        if got is None:
            raise SystemExit(f"{trace}: the compiled parser refused a batch")
        batch.tell(got.table.num_rows)
        parsed_bytes += len(batch.data)
        table = got.table.drop_columns(list(batch_insert.MAPPED_FROM))
        tables.append(table.set_column(1, "rank", pa.repeat(pa.scalar(0, pa.int32()), len(table))))
    chunks = []
    rows = pa.concat_tables(tables)
    for start in range(0, rows.num_rows, 32_768):
        part = rows.slice(start, 32_768)
        t = time.thread_time()
        part = part.combine_chunks()
        chunks.append(part.take(batch_insert.sort_order(part)))
        cpu["sort"] += time.thread_time() - t
    con = duckdb.connect(config={"threads": 1})
    with tempfile.TemporaryDirectory(prefix="gpuscope-machine-") as d:
        for i, _chunk in enumerate(chunks):
            t = time.thread_time()
            con.execute(f"COPY (SELECT * FROM _chunk) TO '{d}/{i}.parquet' (FORMAT parquet)")
            cpu["parquet"] += time.thread_time() - t
    con.close()
    cpu["python"], python_mb = _python_pass()
    mb = {k: parsed_bytes / 1e6 for k in KERNELS}
    mb["read"] = seen / 1e6
    mb["python"] = python_mb
    return {"cpu": cpu, "mb": mb}  # type: ignore[dict-item]


def _python_pass() -> tuple[float, float]:
    """CPU s of a pure-Python pass over the real sample's events, and its JSON's MB (x20)."""
    import gzip

    src = Path(__file__).resolve().parents[1] / "sample_traces/before/before_rank0.pt.trace.json.gz"
    text = gzip.decompress(src.read_bytes())
    events = json.loads(text)["traceEvents"]
    t = time.thread_time()
    for _ in range(20):
        by_name: dict[str, float] = {}
        for e in events:
            if e.get("ph") == "X":
                name = e.get("name", "")
                by_name[name] = by_name.get(name, 0.0) + float(e.get("dur", 0))
    return time.thread_time() - t, 20 * len(text) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--mb", type=float, default=256.0, help="MB of the trace to time (default 256)")
    ap.add_argument("--pair", action="store_true", help="also two processes at once, one a core")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    limit = int(a.mb * 1e6)
    if a.one:
        print(json.dumps(_kernels(a.trace, limit)))
        return 0
    cores = sorted(os.sched_getaffinity(0))
    cmd = [sys.executable, __file__, str(a.trace), "--mb", str(a.mb), "--one"]

    def run(n: int) -> list[dict[str, Any]]:
        procs = []
        for i in range(n):
            pin = {cores[i % len(cores)]}
            procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    text=True,
                    preexec_fn=lambda pin=pin: os.sched_setaffinity(0, pin),  # type: ignore[misc]
                )
            )
        return [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]

    alone = run(1)[0]
    pair = run(2) if a.pair and len(cores) >= 2 else None
    print(f"{'kernel':8} {'alone MB/CPU-s':>15} {'pair MB/CPU-s':>14} {'pair/alone CPU':>15}")
    out: dict[str, Any] = {"cores": len(cores), "alone": {}, "pair": {}}
    for k in KERNELS:
        rate = alone["mb"][k] / max(alone["cpu"][k], 1e-9)
        out["alone"][k] = round(rate)
        line = f"{k:8} {rate:15.0f}"
        if pair:
            cpu = sum(p["cpu"][k] for p in pair) / len(pair)
            prate = alone["mb"][k] / max(cpu, 1e-9)
            out["pair"][k] = round(prate)
            line += f" {prate:14.0f} {cpu / max(alone['cpu'][k], 1e-9):15.2f}"
        print(line)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
