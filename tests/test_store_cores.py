"""A store runs DuckDB on the cores its process may use (its CPU affinity), not on the machine's:
DuckDB's default thread count is the machine's, which oversubscribes a process pinned to a few
cores (``taskset``, a container's cpuset)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import os, sys
from gpuscope.store import connect
os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(",")})
with connect(sys.argv[1]) as con:
    print(con.execute("SELECT current_setting('threads')").fetchone()[0])
"""


def threads_when_pinned(store: Path | str, cpus: set[int]) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(store), ",".join(map(str, sorted(cpus)))],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def test_a_store_uses_as_many_duckdb_threads_as_the_process_has_cores(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    assert threads_when_pinned(tmp_path / "s", {cpus[0]}) == 1
    assert threads_when_pinned(tmp_path / "s", set(cpus)) == len(cpus)
    assert threads_when_pinned(":memory:", {cpus[0]}) == 1  # a DuckDB store (tests, legacy)
