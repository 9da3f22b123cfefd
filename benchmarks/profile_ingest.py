"""Where gpuscope's ingest spends its time: per-phase wall clock, without touching ingest/.

    .venv/bin/python benchmarks/profile_ingest.py TRACE [--batch-mb 16] [--db OUT.duckdb] [--cprofile FILE]

Wraps, at run time, the functions the loader calls (the originals in ingest/ are not edited) and
sums the wall time spent in each: reading/inflating (``iter_json_bytes``), the structural scan
(``TraceSplitter.batches`` less its reading), typed decoding (``decode_batch``), Arrow column
building (``to_arrow``), the DuckDB INSERTs, the file's SHA-256, the final COMMIT, and the rest.
``--batch-mb`` changes ``TraceSplitter.batch_bytes`` to see its effect; ``--serial`` replaces the
loader's ``pipelined`` (decode thread running one batch ahead of the inserts) with a plain ``map``,
so that each phase's time is its own (with the thread, the main thread's INSERT time also holds the
waits for the GIL that the decode thread has, and phases overlap). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

from gpuscope import store
from gpuscope.ingest import json_stream, loader, source

T: dict[str, float] = defaultdict(float)
N: dict[str, int] = defaultdict(int)
C: dict[str, float] = defaultdict(
    float
)  # CPU seconds: the process's when serial, else the thread's
CPU = {"clock": time.thread_time}


def _cpu() -> float:
    return CPU["clock"]()


def timed(name: str, fn):  # type: ignore[no-untyped-def]
    def wrap(*a, **k):  # type: ignore[no-untyped-def]
        t, c = time.perf_counter(), _cpu()
        try:
            return fn(*a, **k)
        finally:
            T[name] += time.perf_counter() - t
            C[name] += _cpu() - c
            N[name] += 1

    return wrap


def timed_gen(name: str, fn):  # type: ignore[no-untyped-def]
    """Time spent inside a generator (between its resumptions), excluding the consumer's time."""

    def wrap(*a, **k):  # type: ignore[no-untyped-def]
        it = fn(*a, **k)
        while True:
            t, c = time.perf_counter(), _cpu()
            try:
                item = next(it)
            except StopIteration:
                T[name] += time.perf_counter() - t
                C[name] += _cpu() - c
                return
            T[name] += time.perf_counter() - t
            C[name] += _cpu() - c
            N[name] += 1
            yield item

    return wrap


class TimedCon:
    """Times the connection's execute() calls: INSERT of a batch, COMMIT, others."""

    def __init__(self, con) -> None:  # type: ignore[no-untyped-def]
        self._con = con

    def execute(self, sql: str, *a, **k):  # type: ignore[no-untyped-def]
        s = " ".join(sql.split()).upper()
        name = (
            "insert_events"
            if s.startswith("INSERT INTO EVENTS SELECT")
            else "commit"
            if s.startswith("COMMIT")
            else "other_sql"
        )
        t, c = time.perf_counter(), _cpu()
        try:
            return self._con.execute(sql, *a, **k)
        finally:
            T[name] += time.perf_counter() - t
            C[name] += _cpu() - c
            N[name] += 1

    def __getattr__(self, k):  # type: ignore[no-untyped-def]
        return getattr(self._con, k)


DECODE_THREAD = ("read_inflate", "scan", "strict_json")

# (module, attribute, phase): the functions timed where the loader looks them up. The ingest code
# changes often: a missing one is skipped (and reported), never an error.
FUNCS = [
    (loader, "file_sha256", "sha256"),
    (loader, "strict_json", "strict_json"),  # syntax pass on the scan thread
    (loader, "decode_batch", "decode"),  # earlier loaders: msgspec on every batch
    (loader, "to_arrow", "to_arrow"),
    (loader, "metadata_labels", "metadata_labels"),
    (loader, "_extent", "extent"),
]


def install(batch_mb: float | None, serial: bool) -> list[str]:
    skipped = []
    if serial:
        CPU["clock"] = time.process_time
        loader.pipelined = lambda items, work, depth=1: map(work, items)
    loader.iter_json_bytes = timed_gen("read_inflate", source.iter_json_bytes)
    orig_batches = json_stream.TraceSplitter.batches
    json_stream.TraceSplitter.batches = timed_gen("scan_incl_read", orig_batches)
    for mod, attr, phase in FUNCS:
        if hasattr(mod, attr):
            setattr(mod, attr, timed(phase, getattr(mod, attr)))
        else:
            skipped.append(f"{mod.__name__}.{attr}")
    try:  # DuckDB-JSON loaders: parse a batch with read_json, then map ids and INSERT
        from gpuscope.ingest import batch_insert as bi

        bi.BatchInserter.insert = timed("batch_total", bi.BatchInserter.insert)
        bi.BatchInserter.insert_arrow = timed("ids_and_insert", bi.BatchInserter.insert_arrow)
        from gpuscope.ingest import kineto as kt  # the fallback decoder (imported at its use)

        kt.decode_batch = timed("fallback_decode", kt.decode_batch)
        kt.to_raw = timed("fallback_to_raw", kt.to_raw)
        bi.BatchInserter.flush = timed("flush", bi.BatchInserter.flush)
        bi.BatchInserter.finish = timed("names_threads", bi.BatchInserter.finish)
    except ImportError:
        skipped.append("gpuscope.ingest.batch_insert")
    if batch_mb:
        orig_init = json_stream.TraceSplitter.__init__

        def init(self, *a, **k):  # type: ignore[no-untyped-def]
            orig_init(self, *a, **k)
            self.batch_bytes = int(batch_mb * 2**20)

        json_stream.TraceSplitter.__init__ = init
    return skipped


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--db", type=Path, default=Path("benchmarks/out/profile.duckdb"))
    ap.add_argument("--batch-mb", type=float, default=None)
    ap.add_argument("--cprofile", type=Path, default=None)
    ap.add_argument("--serial", action="store_true", help="no decode thread: clean per-phase times")
    ap.add_argument(
        "--duckdb-threads", type=int, default=None, help="SET threads = N on the connection"
    )
    a = ap.parse_args()
    for p in (a.db, Path(str(a.db) + ".wal")):
        p.unlink(missing_ok=True)
    skipped = install(a.batch_mb, a.serial)
    t0 = time.perf_counter()
    con = store.connect(a.db)
    T["open_db"] = time.perf_counter() - t0
    if a.duckdb_threads:
        con.execute(f"SET threads = {a.duckdb_threads}")
    con_threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    tcon = TimedCon(con)
    prof = cProfile.Profile() if a.cprofile else None
    t1, c1 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    res = loader.ingest_paths(tcon, [a.trace])  # type: ignore[arg-type]
    if prof:
        prof.disable()
        prof.dump_stats(a.cprofile)
    t2 = time.perf_counter()
    cpu_run = time.process_time() - c1
    con.close()
    T["close"] = time.perf_counter() - t2
    total = time.perf_counter() - t0
    size = a.trace.stat().st_size
    T["scan"] = T.pop("scan_incl_read") - T["read_inflate"]
    for D in (T, C):  # nested timers -> exclusive phases
        if "batch_total" in D:
            D["duckdb_read_json"] = (
                D.pop("batch_total")
                - D.get("ids_and_insert", 0)
                - D.get("fallback_decode", 0)
                - D.get("fallback_to_raw", 0)
            )
        if "ids_and_insert" in D:
            D["id_mapping"] = D.pop("ids_and_insert") - D.get("insert_events", 0)
    C["scan"] = C.pop("scan_incl_read") - C["read_inflate"]
    known = sum(v for k, v in T.items() if k not in ("open_db", "close"))
    if a.serial:
        T["other_python"] = (t2 - t1) - known
        C["other_python"] = cpu_run - sum(v for k, v in C.items() if k not in ("open_db", "close"))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu = sum(os.times()[:2])
    mode = "serial" if a.serial else "pipelined (decode thread)"
    print(
        f"{a.trace}: {size / 1e6:.0f} MB, {res[0].n_events:,} events, batch "
        f"{a.batch_mb or json_stream.BATCH_BYTES / 2**20:g} MiB, {mode}, DuckDB threads {con_threads}, total {total:.2f} s "
        f"({size / 1e6 / total:.1f} MB/s), CPU {cpu:.1f} s, peak RSS {rss:.0f} MB"
    )
    print(
        f"{'phase':<16} {'thread':<7} {'wall s':>8} {'share':>6} {'CPU s':>7} {'CPU s/GB':>8} {'calls':>6}"
    )
    for k, v in sorted(T.items(), key=lambda kv: -C.get(kv[0], kv[1])):
        th = "decode" if k in DECODE_THREAD and not a.serial else "main"
        c = C.get(k, float("nan"))
        print(
            f"{k:<16} {th:<7} {v:8.2f} {v / total:6.1%} {c:7.2f} {c / size * 1e9:8.1f} {N.get(k, 1):6d}"
        )
    doc = {
        "trace_bytes": size,
        "total_s": round(total, 3),
        "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(rss),
        "batch_mb": a.batch_mb,
        "serial": a.serial,
        "duckdb_threads": a.duckdb_threads or con_threads,
        "phases_s": {k: round(v, 3) for k, v in T.items()},
        "phases_cpu_s": {k: round(v, 3) for k, v in C.items()},
    }
    print(json.dumps(doc))
    if skipped:
        print(f"(not in this ingest version, not timed: {', '.join(skipped)})")
    for p in (a.db, Path(str(a.db) + ".wal")):
        p.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
