"""Memory and CPU of the modules and phase-pattern analyses alone, on one stored rank.

    GPUSCOPE_STORE=S python benchmarks/modules_memory.py RUN [--rank 0] [--out FILE.json]

In this process: opens the store, finds the rank's window and primary device as ``analyze`` does,
builds the rank's shared index tables (the GPU activity, runtime calls, host events and the idle
gaps, which other analyses build too), then runs :func:`module_analysis` and :func:`phase_patterns`
in turn. For each it prints the CPU seconds (user + sys of the process), the wall seconds and the
peak RSS while it ran (``VmHWM``, reset before each through ``/proc/self/clear_refs``), beside the
RSS it started from: the rise is the analysis's own memory (DuckDB's native memory included).
``--out`` writes both results' JSON (to compare the old code's results with the new's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any


def _kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split(f"{key}:")[1].split()[0])


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measured(label: str, fn: Any) -> Any:
    """Run ``fn()``; print its CPU s, wall s, starting RSS and peak RSS (MiB)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    rss0, c0, t0 = _kib("VmRSS"), _cpu(), time.perf_counter()
    out = fn()
    cpu, wall = _cpu() - c0, time.perf_counter() - t0
    peak = _kib("VmHWM")
    print(
        f"{label}: {cpu:.2f} CPU s, {wall:.2f} s wall, RSS {rss0 / 1024:.0f} -> peak "
        f"{peak / 1024:.0f} MiB (+{(peak - rss0) / 1024:.0f}), load {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    from gpuscope.analysis import modules, phase_patterns
    from gpuscope.analysis.busy import busy_summary
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.steps import find_window
    from gpuscope.store import open_store

    print(f"modules: {modules.__file__}", file=sys.stderr)
    con = open_store(os.environ.get("GPUSCOPE_STORE"))
    w = find_window(con, a.run, a.rank, None)
    dev = busy_summary(con, a.run, a.rank, w.start_ns, w.end_ns).device
    ix = RankIndex.shared(con, a.run, a.rank)

    def prepare() -> None:
        ix.gpu(), ix.runtime(), ix.host(), ix.gaps(w.start_ns, w.end_ns)

    measured("index tables", prepare)
    m = measured("module_analysis", lambda: modules.module_analysis(con, a.run, a.rank, w, dev))
    p = measured("phase_patterns", lambda: phase_patterns.phase_patterns(con, a.run, a.rank, w))
    if a.out is not None:
        a.out.write_text(json.dumps({"modules": m.to_json(), "phase": p.to_json()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
