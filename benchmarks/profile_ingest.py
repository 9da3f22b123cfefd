"""Where gpuscope's ingest spends its time, phase by phase and thread by thread, without touching
ingest/.

    .venv/bin/python benchmarks/profile_ingest.py TRACE_OR_FOLDER [--jobs N] [--no-parts]
        [--batch-mb MB] [--parser-bulk-flush MB] [--cprofile FILE]

Wraps, at run time, the functions the ingest calls on each of its threads (the originals are not
edited) and sums, per phase, the wall time and the CPU time of the thread it ran on
(``time.thread_time``):

- **split** thread: reading and inflating the file (``read_inflate``), cutting it into batches
  (``split``, the reading excluded), the strict-JSON syntax pass (``strict_json``);
- **sha** threads: the files' SHA-256 (``sha256``, the run id);
- **parse** threads: a batch to Arrow (``parse``: the compiled parser, or DuckDB's JSON reader for
  the batches it refuses; ``fallback_decode``: the msgspec decoder, for batches DuckDB refuses);
  ``$GPUSCOPE_COMPILED_PARSER=0`` sends every batch to DuckDB's reader;
- **writer** (the main thread): waiting for the next parsed batch (``wait_for_parse``), mapping
  names and ids (``map_ids``), sorting the buffered rows and handing them to the flush thread
  (``insert_events``: it waits for the chunk before), names and thread labels (``names_threads``), handing a rank's rows to the
  part threads (``hand_over``: it waits when they fall behind), storing the parts
  (``store_parts``), the parts computed after the ingest (``parts_after``: ranks too big to keep,
  one-rank runs), those of ranks too big to copy, once the ingest has committed
  (``parts_after_commit``), and the rest (``other``: the run row, the commit, the store's
  maintenance);
- **parts** threads: each rank's summary parts (``parts``), computed while the next ranks parse;
- **flush** thread: writing a sorted chunk (``write_chunk``: the INSERT, a Parquet file each)
  while the writer maps and sorts the next ones.

Worker phases sum over their threads, so they can exceed the wall time. Prints a table, then one
JSON line.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import resource
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpuscope.analysis import rank_summary
from gpuscope.ingest import batch_insert, json_stream, loader, parse_pool, source
from gpuscope.store import connect

WALL: dict[str, float] = defaultdict(float)
CPU: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
THREAD = {
    "read_inflate": "split",
    "split": "split",
    "strict_json": "split",
    "sha256": "sha",
    "parse": "parse",
    "fallback_decode": "parse",
    "parts": "parts",
    "write_chunk": "flush",
}


def timed(phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrap(*a: Any, **k: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            WALL[phase] += time.perf_counter() - t
            CPU[phase] += time.thread_time() - c
            CALLS[phase] += 1

    return wrap


def timed_gen(phase: str, fn: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    """Time spent inside a generator between its resumptions (its consumer's time excluded)."""

    def wrap(*a: Any, **k: Any) -> Iterator[Any]:
        it = fn(*a, **k)
        while True:
            t, c = time.perf_counter(), time.thread_time()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                WALL[phase] += time.perf_counter() - t
                CPU[phase] += time.thread_time() - c
            CALLS[phase] += 1
            yield item

    return wrap


def less_inner(phase: str, inner: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`timed`, less the time the call spent in phase ``inner`` (same thread)."""

    def wrap(*a: Any, **k: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        w0, c0 = WALL[inner], CPU[inner]
        try:
            return fn(*a, **k)
        finally:
            WALL[phase] += time.perf_counter() - t - (WALL[inner] - w0)
            CPU[phase] += time.thread_time() - c - (CPU[inner] - c0)
            CALLS[phase] += 1

    return wrap


def install(batch_mb: float | None, parser_bulk_flush_mb: int | None = None) -> None:
    """Wrap the ingest's functions where they are looked up (module attributes, methods)."""
    bi, pp, rs = batch_insert, parse_pool, rank_summary
    pp.iter_json_bytes = timed_gen("read_inflate", source.iter_json_bytes)
    json_stream.TraceSplitter.batches = timed_gen(
        "split_incl_read", json_stream.TraceSplitter.batches
    )
    bi.strict_json = timed("strict_json", bi.strict_json)
    pp.file_sha256 = timed("sha256", pp.file_sha256)
    bi.BatchParser.parse = timed("parse_total", bi.BatchParser.parse)
    bi.BatchParser._decode = staticmethod(timed("fallback_decode", bi.BatchParser._decode))
    pp.ParsePool.batches = timed_gen("wait_for_parse", pp.ParsePool.batches)
    bi.BatchInserter.flush = timed("insert_events", bi.BatchInserter.flush)
    bi.BatchInserter._write = timed("write_chunk", bi.BatchInserter._write)
    bi.BatchInserter.insert_parsed = less_inner(
        "map_ids", "insert_events", bi.BatchInserter.insert_parsed
    )
    bi.BatchInserter.finish = less_inner("names_threads", "insert_events", bi.BatchInserter.finish)
    loader.TraceRunWriter._hand_over = timed("hand_over", loader.TraceRunWriter._hand_over)
    rs.PartsWhileIngesting._compute = timed("parts", rs.PartsWhileIngesting._compute)
    rs.PartsWhileIngesting.store = timed("store_parts", rs.PartsWhileIngesting.store)
    rs.write_rank_summaries = timed("parts_after", rs.write_rank_summaries)
    rs.store_outside_transaction = timed("parts_after_commit", rs.store_outside_transaction)
    if batch_mb:
        json_stream.BATCH_BYTES = int(batch_mb * 2**20)
    if parser_bulk_flush_mb:  # the parse threads' DuckDB only (the store keeps its settings)
        flush, _bulk = batch_insert.ALLOCATOR_SETTINGS
        bulk = f"SET allocator_bulk_deallocation_flush_threshold = '{parser_bulk_flush_mb}MB'"
        batch_insert.ALLOCATOR_SETTINGS = (flush, bulk)


def exclusive() -> None:
    """Nested timers -> exclusive phases."""
    for old, new in (
        ("split_incl_read", "split"),
        ("parse_total", "parse"),
    ):
        CALLS[new] = CALLS.pop(old, 0)
    for d in (WALL, CPU):
        d["split"] = d.pop("split_incl_read", 0.0) - d.get("read_inflate", 0.0)
        d["parse"] = d.pop("parse_total", 0.0) - d.get("fallback_decode", 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, help="a trace file, or a folder of rank files")
    ap.add_argument("--jobs", type=int, default=None, help="parse threads (default: the cores)")
    ap.add_argument("--no-parts", action="store_true", help="ingest without summary parts")
    ap.add_argument("--batch-mb", type=float, default=None)
    ap.add_argument(
        "--parser-bulk-flush",
        type=int,
        default=None,
        metavar="MB",
        help="the parse threads' DuckDB allocator_bulk_deallocation_flush_threshold (default: "
        "the ingest's, 32 MB)",
    )
    ap.add_argument("--cprofile", type=Path, default=None, help="cProfile of the main thread")
    a = ap.parse_args()
    install(a.batch_mb, a.parser_bulk_flush)
    work = Path(tempfile.mkdtemp(prefix="profile-ingest-"))
    prof = cProfile.Profile() if a.cprofile else None
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        main_c0 = time.thread_time()
        with connect(work / "store") as con:
            if prof:
                prof.enable()
            res = loader.ingest_paths(
                con,
                [a.trace],
                jobs=a.jobs,
                after_trace=None if a.no_parts else rank_summary.store_after_ingest,
            )
            if prof:
                prof.disable()
                prof.dump_stats(a.cprofile)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        main_cpu = time.thread_time() - main_c0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    exclusive()
    writer = [k for k in WALL if THREAD.get(k, "writer") == "writer"]
    WALL["other"] = wall - sum(WALL[k] for k in writer)
    CPU["other"] = main_cpu - sum(CPU[k] for k in writer)
    files = loader.split_trace_files(a.trace)[0]
    size = sum(p.stat().st_size for p in files)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{a.trace}: {size / 1e9:.3f} GB in {len(files)} file(s), {res[0].n_events:,} events, "
        f"{res[0].n_ranks} rank(s); wall {wall:.2f} s, CPU {cpu:.2f} s, peak RSS {rss:.0f} MB"
    )
    print(f"{'phase':<18} {'thread':<7} {'wall s':>8} {'CPU s':>7} {'CPU s/GB':>8} {'calls':>6}")
    for k in sorted(WALL, key=lambda k: -CPU.get(k, 0.0)):
        th = THREAD.get(k, "writer")
        print(
            f"{k:<18} {th:<7} {WALL[k]:8.2f} {CPU[k]:7.2f} {CPU[k] / size * 1e9:8.2f} "
            f"{CALLS.get(k, 1):6d}"
        )
    doc = {
        "trace_bytes": size,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(rss),
        "jobs": a.jobs,
        "parts": not a.no_parts,
        "phases_wall_s": {k: round(v, 3) for k, v in WALL.items()},
        "phases_cpu_s": {k: round(v, 3) for k, v in CPU.items()},
    }
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
