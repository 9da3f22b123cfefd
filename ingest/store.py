"""The DuckDB store: where it lives, opening it, creating the tables, listing and deleting runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
from gpuscope.ingest.schema import META_DDL, SCHEMA_VERSION, TABLES

ENV_DB = "GPUSCOPE_DB"


def default_db_path() -> Path:
    """``$GPUSCOPE_DB``, else ``$XDG_DATA_HOME/gpuscope/gpuscope.duckdb`` (~/.local/share by default)."""
    env = os.environ.get(ENV_DB)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpuscope" / "gpuscope.duckdb"


def connect(
    path: str | os.PathLike[str] | None = None, *, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """Open (and create if needed) the store. ``":memory:"`` gives a private in-memory store."""
    target = str(path) if path is not None else str(default_db_path())
    if target != ":memory:":
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        if read_only and not Path(target).exists():
            read_only = False  # nothing to read yet: create it
    con = duckdb.connect(target, read_only=read_only)
    if not read_only:
        ensure_schema(con)
    return con


# Schema version -> the statements that bring a store of that version to the next one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE events ADD COLUMN IF NOT EXISTS odd_args VARCHAR",),
    2: ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS uploaded_by VARCHAR",),
}


def migrate(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Bring a store of an older schema version to this one, in one transaction (all or nothing)."""
    con.execute("BEGIN TRANSACTION")
    try:
        while version < SCHEMA_VERSION:
            for stmt in MIGRATIONS[version]:
                con.execute(stmt)
            version += 1
        con.execute(
            "UPDATE gpuscope_meta SET value = ? WHERE key = 'schema_version'", [str(version)]
        )
        con.execute("COMMIT")
    except BaseException:
        rollback_quietly(con)  # never replaces the error on its way
        raise


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(META_DDL)
    row = con.execute("SELECT value FROM gpuscope_meta WHERE key = 'schema_version'").fetchone()
    if row is not None and int(row[0]) in MIGRATIONS and int(row[0]) < SCHEMA_VERSION:
        migrate(con, int(row[0]))
        row = (str(SCHEMA_VERSION),)
    if row is not None and int(row[0]) != SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema version {row[0]} is not {SCHEMA_VERSION}; re-create it with this gpuscope"
        )
    for table in TABLES:
        con.execute(table.ddl())
    if row is None:
        con.execute("INSERT INTO gpuscope_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    for (run_id,) in con.execute("SELECT run_id FROM ingest_pending").fetchall():
        discard_run(con, run_id)  # left by an ingest that crashed


def discard_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Delete every row of a run, published or not (used to undo a failed ingest)."""
    with transaction(con):
        for t in (*RUN_TABLES, "ingest_pending"):
            con.execute(f"DELETE FROM {t} WHERE run_id = ?", [run_id])


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """All or nothing: commit on success, roll back on any exception (the original is raised)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        rollback_quietly(con)
        raise
    try:
        con.execute("COMMIT")
    except BaseException:
        rollback_quietly(con)  # a failed COMMIT (disk full) may leave the transaction open
        raise


def rollback_quietly(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back for cleanup: never raises (no transaction open, a closed or invalidated store).

    Cleanup runs while another exception is on its way; it must not replace that exception.
    """
    with suppress(duckdb.Error, RuntimeError):
        con.execute("ROLLBACK")


def discard_quietly(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """:func:`discard_run` for cleanup: never raises; False when it could not run.

    What it could not delete stays invisible (no ``runs`` row) and listed in ``ingest_pending``,
    so :func:`ensure_schema` deletes it the next time the store is opened.
    """
    try:
        discard_run(con, run_id)
    except (duckdb.Error, RuntimeError):
        rollback_quietly(con)
        return False
    return True


RUN_TABLES = ("threads", "names", "events", "ranks", "nvml_samples", "nvml_series", "runs")


def delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Remove a run from every table; False when there was no such run."""
    if not run_exists(con, run_id):
        return False
    discard_run(con, run_id)
    return True


def run_exists(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    return con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is not None


def resolve_run(con: duckdb.DuckDBPyConnection, ref: str) -> str | None:
    """A run id, a unique prefix of one, or a run name -> the run id; ``None`` when nothing
    matches. A name (or prefix) that matches several runs raises ``AmbiguousRunName``, which lists
    them (id and name), rather than reading as "no such run"."""
    from gpuscope.ingest.naming import AmbiguousRunName

    rows = con.execute(
        "SELECT run_id, name FROM runs WHERE run_id = ? OR name = ? OR starts_with(run_id, ?) "
        "ORDER BY created_at DESC, run_id",
        [ref, ref, ref],
    ).fetchall()
    exact = [r[0] for r in rows if r[0] == ref]
    if exact:
        return exact[0]
    matches = list(dict.fromkeys((str(r[0]), str(r[1])) for r in rows))
    if len(matches) > 1:
        raise AmbiguousRunName(ref, matches)
    return matches[0][0] if matches else None


def list_runs(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every run, newest first, as plain dicts (JSON-ready)."""
    cur = con.execute(
        "SELECT run_id, name, kind, created_at, n_ranks, n_events, source_bytes, gpu_name, "
        "torch_version, tags, start_ns, end_ns FROM runs ORDER BY created_at DESC, run_id"
    )
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        d = dict(zip(cols, row, strict=True))
        d["created_at"] = d["created_at"].isoformat() + "Z"
        d["tags"] = list(d["tags"] or [])
        out.append(d)
    return out


def set_name(con: duckdb.DuckDBPyConnection, run_id: str, name: str) -> None:
    con.execute("UPDATE runs SET name = ? WHERE run_id = ?", [name, run_id])


def set_tags(con: duckdb.DuckDBPyConnection, run_id: str, tags: list[str]) -> None:
    con.execute("UPDATE runs SET tags = ? WHERE run_id = ?", [sorted(set(tags)), run_id])
