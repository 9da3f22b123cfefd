"""Moving a legacy store (one DuckDB file, schema 1-2) into a DuckLake store, losing nothing."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import duckdb
from gpuscope.store.connection import Store
from gpuscope.store.schema import TABLES
from gpuscope.store.spec import LEGACY_BACKUP_SUFFIX
from gpuscope.vocabulary.errors import BadInput

# -- moving a legacy store (one DuckDB file, schema 1-2) into a DuckLake store, losing nothing --

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

    candidate = path.with_name(path.name + LEGACY_BACKUP_SUFFIX)
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}{LEGACY_BACKUP_SUFFIX}.{n}")
    return candidate


def copy_runs(store: Store, legacy: Path) -> MigrationResult:
    """Copy every run of the DuckDB file ``legacy`` into ``store`` (one transaction; runs already
    there are skipped). The file is only read. Raises BadInput when it is not a gpuscope store."""
    if not legacy.is_file():
        raise BadInput(legacy, "no such file")
    if not is_duckdb_file(legacy):
        raise BadInput(legacy, "not a DuckDB file")
    path = str(legacy).replace("'", "''")
    con = store.con
    try:
        con.execute(f"ATTACH '{path}' AS {LEGACY} (READ_ONLY)")
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0]
        raise BadInput(legacy, f"cannot open it ({first})") from None
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
        raise BadInput(legacy, "not a gpuscope store (no runs table)")
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
