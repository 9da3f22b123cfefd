"""The ingest's two Parquet writers end to end, A/B in fresh processes: the write phase's CPU
(and its flush thread's), the store's bytes, and the reads of the run it stored.

    .venv/bin/python benchmarks/ingest_writer_ab.py TRACE [--writers pyarrow,duckdb] [--rounds 3]
        [--reads 2] [--keep DIR]

Per round, per writer (``$GPUSCOPE_PARQUET_WRITER``, alternated: A B A B ...):

1. ingest: a fresh process ingests TRACE into a new local store (``loader.ingest_paths``, no
   summary parts: the write phase, as ``ingest_write_cpu.py``): its CPU s (user + sys, imports
   included), the flush thread's CPU s (``BatchInserter._write`` timed with
   ``time.thread_time``), wall, peak RSS; then the store's Parquet bytes and files of ``events``;
2. read (``--reads`` times, fresh processes): ``analyze_run(con, run, stored_parts=False)`` and
   its JSON, computed from the run's events (not the document stored at ingest): CPU s and
   wall; and ``gpuscope analyze RUN --json`` (the CLI, which reads the stored document).

The analysis JSON of every store must be the same (it is compared), as the rows (a digest of
every column). Prints one JSON line per measurement, then the medians per writer; the 1-minute
load average beside each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def ingest_worker(trace: Path, store: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    from gpuscope.ingest import batch_insert, loader
    from gpuscope.store import connect

    flush = [0.0]
    write = batch_insert.BatchInserter._write

    def timed(self: Any, chunk: Any) -> None:
        c0 = time.thread_time()
        try:
            write(self, chunk)
        finally:
            flush[0] += time.thread_time() - c0

    batch_insert.BatchInserter._write = timed  # type: ignore[method-assign]
    con = connect(str(store))
    try:
        [r] = loader.ingest_paths(con, [trace])
    finally:
        con.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "run_id": r.run_id,
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "flush_cpu_s": round(flush[0], 2),
        "peak_rss_mb": ru.ru_maxrss // 1024,
    }


def read_worker(store: Path, run_id: str) -> dict[str, Any]:
    t0, c0 = time.perf_counter(), _cpu()
    from gpuscope.analysis import report
    from gpuscope.store import connect

    con = connect(str(store))
    try:
        doc = json.dumps(report.analyze_run(con, run_id, stored_parts=False).to_json(), default=str)
        digest = con.execute("SELECT count(*), sum(hash(COLUMNS(*))) FROM events").fetchone()
    finally:
        con.close()
    return {
        "analyze_cpu_s": round(_cpu() - c0, 2),
        "analyze_wall_s": round(time.perf_counter() - t0, 2),
        "json_sha": hashlib.sha256(doc.encode()).hexdigest()[:12],
        "rows_sha": hashlib.sha256(repr(digest).encode()).hexdigest()[:12],
    }


def _child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True, env=env
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cli(store: Path, run_id: str, env: dict[str, str]) -> float:
    before = os.times()
    subprocess.run(
        [sys.executable, "-m", "gpuscope", "analyze", run_id, "--json", "--db", str(store)],
        check=True,
        capture_output=True,
        env=env,
    )
    after = os.times()
    return round(
        after.children_user - before.children_user + after.children_system - before.children_system,
        2,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path, nargs="?")
    ap.add_argument("--writers", default="pyarrow,duckdb")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reads", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="keep each writer's last store under this folder")
    ap.add_argument("--ingest-worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--read-worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ingest_worker:
        print(json.dumps(ingest_worker(Path(args.ingest_worker[0]), Path(args.ingest_worker[1]))))
        return 0
    if args.read_worker:
        print(json.dumps(read_worker(Path(args.read_worker[0]), args.read_worker[1])))
        return 0
    gb = args.trace.stat().st_size / 1e9
    rows: dict[str, list[dict[str, Any]]] = {}
    shas = set()
    base = Path(tempfile.mkdtemp(prefix="gpuscope-writer-ab-"))
    try:
        for rnd in range(args.rounds):
            for writer in args.writers.split(","):
                env = {**os.environ, "GPUSCOPE_PARQUET_WRITER": writer}
                store = base / f"{writer}-{rnd}"
                r = {"writer": writer, "round": rnd, "load1": round(os.getloadavg()[0], 2)}
                r.update(_child(["--ingest-worker", str(args.trace), str(store)], env))
                files = list((store / "data").glob("**/events/*.parquet"))
                r["events_files"] = len(files)
                r["events_mb"] = round(sum(p.stat().st_size for p in files) / 1e6, 2)
                reads = [
                    _child(["--read-worker", str(store), r["run_id"]], env)
                    for _ in range(args.reads)
                ]
                r["analyze_cpu_s"] = min(x["analyze_cpu_s"] for x in reads)
                r["analyze_wall_s"] = min(x["analyze_wall_s"] for x in reads)
                r["cli_cpu_s"] = min(_cli(store, r["run_id"], env) for _ in range(args.reads))
                shas |= {(x["json_sha"], x["rows_sha"]) for x in reads}
                print(json.dumps(r), flush=True)
                rows.setdefault(writer, []).append(r)
                if args.keep and rnd == args.rounds - 1:
                    dest = args.keep / writer
                    shutil.rmtree(dest, ignore_errors=True)
                    shutil.move(str(store), dest)
                else:
                    shutil.rmtree(store)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nmedians over {args.rounds} rounds ({args.trace.name}, {gb:.3f} GB):")
    keys = ("cpu_s", "flush_cpu_s", "wall_s", "peak_rss_mb", "events_mb", "analyze_cpu_s")
    print(f"{'writer':<8} " + " ".join(f"{k:>14}" for k in (*keys, "cli_cpu_s")))
    for writer, rs in rows.items():
        med = [statistics.median(r[k] for r in rs) for k in (*keys, "cli_cpu_s")]
        print(f"{writer:<8} " + " ".join(f"{v:>14.2f}" for v in med))
    print("the same rows and analysis in every store:", len(shas) == 1)
    return 0 if len(shas) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
