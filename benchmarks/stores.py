"""The two stores the benchmarks compare side by side, in one work folder.

* ``lake``: the DuckLake store, a folder (SQLite catalog + Parquet data): what gpuscope uses by
  default, shared by every process;
* ``duckdb``: the legacy single-file DuckDB store (``duckdb:FILE``), one process's.

Every benchmark takes ``--store lake|duckdb|both`` (default both) and names the store on the
command line with ``--store SPEC`` (the CLI) or ``$GPUSCOPE_STORE`` (the dashboard).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KINDS = ("lake", "duckdb")


def add_store_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--store",
        choices=(*KINDS, "both"),
        default="both",
        help="which store to measure: the DuckLake (lake), the legacy DuckDB file (duckdb), "
        "or both side by side (default)",
    )


def chosen(arg: str) -> list[str]:
    """``--store``'s value -> the store kinds to run, the lake first."""
    return list(KINDS) if arg == "both" else [arg]


def location(kind: str, work: Path, stem: str) -> Path:
    """Where a store of this kind lives under ``work``: ``<stem>-lake/`` or ``<stem>.duckdb``."""
    return work / (f"{stem}-lake" if kind == "lake" else f"{stem}.duckdb")


def spec(kind: str, work: Path, stem: str) -> str:
    """The store spec (``--store``, ``$GPUSCOPE_STORE``) of a store of this kind under ``work``."""
    path = location(kind, work, stem)
    return str(path) if kind == "lake" else f"duckdb:{path}"


def remove(kind: str, work: Path, stem: str) -> None:
    """Delete the store (a fresh one is made on the next open)."""
    path = location(kind, work, stem)
    if kind == "lake":
        shutil.rmtree(path, ignore_errors=True)
    else:
        for p in (path, Path(f"{path}.wal")):
            p.unlink(missing_ok=True)


def size_bytes(kind: str, work: Path, stem: str) -> int:
    """Bytes the store takes on disk (every file of the lake's folder)."""
    path = location(kind, work, stem)
    if kind != "lake":
        return sum(p.stat().st_size for p in (path, Path(f"{path}.wal")) if p.exists())
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum((Path(root) / f).stat().st_size for f in files)
    return total


def ratio(lake: float | None, duckdb: float | None) -> str:
    """``lake / duckdb`` as ``0.85x`` (below 1: the lake is faster / smaller), or empty."""
    if lake is None or duckdb is None or duckdb <= 0:
        return ""
    return f"{lake / duckdb:.2f}x"


def ingest_into_new_lake(trace: Path, prefix: str) -> None:
    """Ingest ``trace`` in this process (the write phase: no summary parts) into a new lake store
    in a temporary folder named from ``prefix``, removed after."""
    import tempfile

    from gpuscope.ingest import loader
    from gpuscope.store import connect

    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        con = connect(str(Path(d) / "store"))
        try:
            loader.ingest_paths(con, [trace])
        finally:
            con.close()


@contextlib.contextmanager
def analysed(path: Path) -> Iterator[tuple[Any, Any]]:
    """``path`` (one rank's trace) ingested into a memory store: (its ``RunAnalysis``, its critical
    path); the store is closed on leaving. Exits naming the file when it has no critical path."""
    from gpuscope.analysis.report import AnalysisOptions, RunAnalysis
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    con = connect(":memory:")
    try:
        [res] = ingest_paths(con, [path])
        a = RunAnalysis(con, res.run_id, None, AnalysisOptions())
        cp = a.critical_path
        if cp is None:
            raise SystemExit(f"{path}: no critical path")
        yield a, cp
    finally:
        con.close()
