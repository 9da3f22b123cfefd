"""Peak memory of each phase of one big trace's ingest: the write (parse, sort, Parquet) and the
summary of a rank too big to copy, computed after the commit.

    .venv/bin/python benchmarks/ingest_phases.py TRACE [--repeat 3]

Each repeat is a fresh process (``--one``) that runs ``gpuscope ingest TRACE`` into a new store in a
temporary folder. At the start of the summary (``rank_summary.store_outside_transaction``) it
reads the process's peak RSS so far (``VmHWM``: the write phase), then resets it (``5`` written to
``/proc/self/clear_refs``, Linux; this resets ``ru_maxrss`` too), and reads it again at the end
(the summary), then once more when the command ends (the summary and the run's ``analyze``
document, which ``gpuscope ingest`` stores after the summary). Prints per repeat: wall s, the
write phase's peak, the summary's, the summary's and the document's together, and the whole
run's (the highest), in MiB and as a multiple of the file's size, then the medians.
``/usr/bin/time -f %M .venv/bin/gpuscope ingest TRACE`` gives the whole run's without the reset. The issue's target is 0.4x the file (whole run).

Beside them, once, the peers on the same file (``--no-peers`` leaves them out): a plain read
(``cat TRACE > /dev/null``, the page cache warm) and DuckDB's own JSON reader
(``benchmarks/naive_duckdb.py``: ``read_json`` of the whole file, DuckDB's default threads and
memory). Every figure is also given as MB of JSON per second of wall time and per CPU second
(user + sys, the process's own rusage): the CPU rate holds on a busy machine, the wall rate not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split(f"{key}:")[1].split()[0])


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _child(cmd: list[str], **kw: Any) -> dict[str, float]:
    """Run ``cmd``; its wall s, CPU s (user + sys, its own rusage) and peak RSS (KiB)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, **kw)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exited {p.returncode}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_kib": ru.ru_maxrss}


def peers(trace: Path) -> dict[str, dict[str, float]]:
    """A plain read of ``trace`` (``cat``, warm) and DuckDB's ``read_json`` of it (naive_duckdb.py)."""
    out = {}
    with open(os.devnull, "wb") as null:
        _child(["cat", str(trace)], stdout=null)  # warms the page cache
        out["read"] = _child(["cat", str(trace)], stdout=null)
        with tempfile.TemporaryDirectory(prefix="gpuscope-naive-") as d:
            naive = Path(__file__).with_name("naive_duckdb.py")
            out["duckdb"] = _child(
                [sys.executable, str(naive), str(trace), str(Path(d) / "naive.duckdb")], stdout=null
            )
    return out


def one(trace: Path, store: Path) -> dict[str, Any]:
    """Ingest ``trace`` into ``store`` in this process; the phases' peaks (KiB) and wall (s)."""
    from gpuscope.analysis import rank_summary as RS
    from gpuscope.cli.main import main

    seen: dict[str, Any] = {}
    after_commit = RS.store_outside_transaction
    t0 = time.perf_counter()

    def measured(*a: Any, **k: Any) -> int:
        seen["write_kib"] = _status_kib("VmHWM")
        seen["write_s"] = time.perf_counter() - t0
        seen["write_cpu_s"] = _cpu_s()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        try:
            return after_commit(*a, **k)
        finally:
            seen["summary_kib"] = _status_kib("VmHWM")

    RS.store_outside_transaction = measured
    code = main(["ingest", str(trace), "--db", str(store)])
    if code:
        raise SystemExit(f"{trace}: gpuscope ingest exited {code}")
    seen["wall_s"] = time.perf_counter() - t0
    seen["cpu_s"] = _cpu_s()
    # since the reset: the summary, then the run's stored analyze document (read at the end)
    seen["document_kib"] = _status_kib("VmHWM")
    # the reset lowers ru_maxrss too: the run's peak is the highest of the phases'
    seen["total_kib"] = max(
        seen.get("write_kib", 0), seen.get("summary_kib", 0), seen["document_kib"]
    )
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true", help="no cat / DuckDB read_json beside it")
    ap.add_argument("--one", type=Path, default=None, help=argparse.SUPPRESS)  # the store
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.trace, args.one)))
        return 0
    size = args.trace.stat().st_size
    peer = {} if args.no_peers else peers(args.trace)
    if peer:
        for label, r in peer.items():
            name = {"read": "cat > /dev/null", "duckdb": "DuckDB read_json"}[label]
            print(f"{name:17} {_rates(r['wall_s'], r['cpu_s'], size)} | peak "
                  f"{r['peak_kib'] / 1024:.0f} MiB", flush=True)  # fmt: skip
    rows = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="gpuscope-phases-") as d:
            done = subprocess.run(
                [sys.executable, __file__, str(args.trace), "--one", str(Path(d) / "store")],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        if done.returncode:  # what the ingest said (its one-line error), not just the exit code
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise SystemExit(f"{args.trace}: the ingest exited {done.returncode}:\n{tail}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        if "summary_kib" not in r:
            raise SystemExit(
                f"{args.trace}: no summary after the commit (a rank small enough to copy)"
            )
        rows.append(r)
        print(_line(r, size), flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print("median: " + _line(med, size))
    if peer:
        read, naive = peer["read"], peer["duckdb"]
        print(
            f"gpuscope ingest: {read['wall_s'] / med['wall_s']:.3f}x a plain read's speed; "
            f"{naive['wall_s'] / med['wall_s']:.1f}x DuckDB read_json's wall, "
            f"{naive['cpu_s'] / med['cpu_s']:.1f}x its CPU, "
            f"{naive['peak_kib'] / med['total_kib']:.1f}x less memory"
        )
    return 0


def _line(r: dict[str, Any], size: int) -> str:
    def mib(kib: float) -> str:
        return f"{kib / 1024:.0f} MiB ({kib * 1024 / size:.3f}x)"

    return (
        f"gpuscope ingest   {_rates(r['wall_s'], r['cpu_s'], size)} | write phase "
        f"{_rates(r['write_s'], r['write_cpu_s'], size)} | write {mib(r['write_kib'])} | "
        f"summary {mib(r['summary_kib'])} | then the document {mib(r['document_kib'])} | "
        f"whole run {mib(r['total_kib'])}"
    )


def _rates(wall: float, cpu: float, size: int) -> str:
    return (
        f"wall {wall:.2f} s ({size / 1e6 / wall:.0f} MB/s), CPU {cpu:.2f} s "
        f"({size / 1e6 / cpu:.0f} MB/CPU-s)"
    )


if __name__ == "__main__":
    sys.exit(main())
