"""Moving a legacy store (one DuckDB file, schema 1-2) into a DuckLake store, losing nothing.

:func:`copy_runs` copies every published run of a DuckDB file into an open store, in one
transaction, skipping runs the store already has (same id = same content). :func:`migrate_in_place`
turns a local store's location that still holds a DuckDB file (``--db FILE`` of old, or the old
default ``~/.local/share/gpuscope/gpuscope.duckdb``) into a DuckLake folder: the lake is built
beside it, then the file is renamed to ``<name>.pre-ducklake`` (kept as a backup) and the lake
takes its place.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.schema import TABLES

if TYPE_CHECKING:
    from gpuscope.ingest.store import Store, StoreSpec

DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of a DuckDB database file
LEGACY = "legacy_store"  # the name a legacy file is attached under while it is copied


@dataclass
class MigrationResult:
    """What :func:`copy_runs` did: runs copied, runs the store had already, rows per table."""

    source: str
    copied: list[str]
    skipped: list[str]
    rows: dict[str, int]


def is_duckdb_file(path: Path) -> bool:
    """Whether ``path`` is a DuckDB database file (by its header)."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return head[8:12] == DUCKDB_MAGIC


def backup_name(path: Path) -> Path:
    """Where a migrated file is kept: ``<name>.pre-ducklake`` (numbered when taken)."""
    from gpuscope.ingest.store import LEGACY_BACKUP_SUFFIX

    candidate = path.with_name(path.name + LEGACY_BACKUP_SUFFIX)
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}{LEGACY_BACKUP_SUFFIX}.{n}")
    return candidate


def copy_runs(store: Store, legacy: Path) -> MigrationResult:
    """Copy every run of the DuckDB file ``legacy`` into ``store`` (one transaction; runs already
    there are skipped). The file is only read. Raises IngestError when it is not a gpuscope store."""
    if not legacy.is_file():
        raise IngestError(legacy, "no such file")
    if not is_duckdb_file(legacy):
        raise IngestError(legacy, "not a DuckDB file")
    path = str(legacy).replace("'", "''")
    con = store.con
    try:
        con.execute(f"ATTACH '{path}' AS {LEGACY} (READ_ONLY)")
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0]
        raise IngestError(legacy, f"cannot open it ({first})") from None
    try:
        return _copy_attached(store, legacy)
    finally:
        with suppress(duckdb.Error):
            con.execute(f"DETACH {LEGACY}")


def _copy_attached(store: Store, legacy: Path) -> MigrationResult:
    con = store.con
    have = {
        r[0]: {
            c[0]
            for c in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE database_name = ? "
                "AND table_name = ?",
                [LEGACY, r[0]],
            ).fetchall()
        }
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [LEGACY]
        ).fetchall()
    }
    if "runs" not in have:
        raise IngestError(legacy, "not a gpuscope store (no runs table)")
    legacy_ids = [r[0] for r in con.execute(f"SELECT run_id FROM {LEGACY}.runs").fetchall()]
    copied: list[str] = []
    skipped: list[str] = []
    rows: dict[str, int] = {}
    with store.writing():
        present = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
        for rid in legacy_ids:
            (skipped if rid in present else copied).append(rid)
        if copied:
            con.execute("CREATE OR REPLACE TEMPORARY TABLE _gs_migrating (run_id VARCHAR)")
            con.executemany("INSERT INTO temp._gs_migrating VALUES (?)", [[r] for r in copied])
            for table in TABLES:
                cols = have.get(table.name)
                if cols is None:
                    continue
                names = table.column_names
                select = ", ".join(c if c in cols else f"NULL AS {c}" for c in names)
                order = " ORDER BY rank, cat, ts_ns" if table.name == "events" else ""
                n = con.execute(
                    f"INSERT INTO {table.name} ({', '.join(names)}) SELECT {select} "
                    f"FROM {LEGACY}.{table.name} WHERE run_id IN (FROM temp._gs_migrating){order}"
                ).fetchone()
                rows[table.name] = int(n[0]) if n else 0
            con.execute("DROP TABLE temp._gs_migrating")
    return MigrationResult(str(legacy), copied, skipped, rows)


@contextmanager
def _flocked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def migrate_in_place(spec: StoreSpec, *, notice: Callable[[str], None] | None = None) -> None:
    """Before a local store opens: a DuckDB file at its location (or, for the default location,
    at the old default) becomes a DuckLake folder with the same runs; the file is kept renamed.
    Concurrent opens wait for one migration; a crash mid-way leaves the file where it was."""
    from gpuscope.ingest.store import StoreSpec, default_db_path, legacy_default_path

    root = Path(spec.location)
    if root.is_file():
        source = root
    elif not root.exists() and root == default_db_path().absolute():
        source = legacy_default_path()
        if not source.is_file():
            return
    else:
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    with _flocked(root.parent / f".{root.name}.migrate.lock"):
        if not source.is_file() or (source != root and root.exists()):
            return  # another process finished it while we waited
        if not is_duckdb_file(source):
            raise IngestError(root, "not a gpuscope store (neither a folder nor a DuckDB file)")
        building = root.parent / f".{root.name}.migrating"
        shutil.rmtree(building, ignore_errors=True)  # a crashed attempt's
        from gpuscope.ingest.store import _open_lake

        lake = _open_lake(StoreSpec("local", str(building), spec.data_path))
        try:
            result = copy_runs(lake, source)
        finally:
            lake.close()
        backup = backup_name(source)
        os.replace(source, backup)
        wal = source.with_name(source.name + ".wal")  # DuckDB's log, if it was not checkpointed
        if wal.exists():
            os.replace(wal, backup.with_name(backup.name + ".wal"))
        os.replace(building, root)  # the lake re-points its data path when next opened
        if notice:
            notice(
                f"moved the DuckDB store {source} to a DuckLake store at {root} "
                f"({len(result.copied)} runs); the old file is kept as {backup}"
            )
