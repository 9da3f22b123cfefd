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


def test_the_parse_and_part_databases_start_on_one_thread(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A DuckDB database opened without ``threads`` first starts a thread per core of the machine
    (not of the process): 15 threads started and stopped again per database on a 16-core host
    pinned to 2 cores. The parse threads' and the summary parts' databases ask for one at once."""
    import duckdb
    from gpuscope.analysis import rank_summary
    from gpuscope.ingest import batch_insert

    asked: list[object] = []
    real = duckdb.connect

    def connect(database: str = ":memory:", *a: object, **kw: object) -> object:
        config = kw.get("config") or (a[1] if len(a) > 1 else None)
        asked.append(dict(config).get("threads") if isinstance(config, dict) else None)
        return real(database, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(duckdb, "connect", connect)
    parser = batch_insert.BatchParser()
    try:
        assert int(parser.db.execute("SELECT current_setting('threads')").fetchone()[0]) == 1
    finally:
        parser.close()
    scratch = rank_summary._new_scratch()
    assert int(scratch.execute("SELECT current_setting('threads')").fetchone()[0]) == 1
    scratch.close()
    assert asked == [1, 1]
