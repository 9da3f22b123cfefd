"""The schema: creating the tables, the schema version, and bringing an older plain DuckDB store up to date."""

from __future__ import annotations

import duckdb
from gpuscope.store.connection import LAKE, Connection, Store, rollback_quietly
from gpuscope.store.credentials import _sql_text
from gpuscope.store.lock import write_lock
from gpuscope.store.runs import RUN_TABLES
from gpuscope.store.schema import META_DDL, SCHEMA_VERSION, TABLES
from gpuscope.store.spec import StoreSpec
from gpuscope.store.stopping import raise_if_stopping
from gpuscope.store.transactions import transaction
from gpuscope.vocabulary.errors import BadInput

# ---------------------------------------------------------------------------------------------------
# Schema


# Schema version -> the statements that bring a plain DuckDB store of that version to the next one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE events ADD COLUMN IF NOT EXISTS odd_args VARCHAR",),
    2: (
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS uploaded_by VARCHAR",
        "DROP TABLE IF EXISTS ingest_pending",
    ),
}


def schema_version(con: Connection) -> int | None:
    row = con.execute("SELECT value FROM gpuscope_meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row is not None else None


def migrate(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Bring a plain DuckDB store of an older schema version to this one, in one transaction."""
    if version < 3:  # runs an ingest left half-written (schema 1-2 staged them) go first
        pending = con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'ingest_pending'"
        ).fetchone()
        if pending and pending[0]:
            for (run_id,) in con.execute("SELECT run_id FROM ingest_pending").fetchall():
                with transaction(con):
                    for t in RUN_TABLES:
                        if t != "rank_summaries":  # new in schema 3: made after the migration
                            con.execute(f"DELETE FROM {t} WHERE run_id = ?", [run_id])
    con.execute("BEGIN TRANSACTION")
    try:
        while version < SCHEMA_VERSION:
            for stmt in MIGRATIONS[version]:
                con.execute(stmt)
            version += 1
        con.execute(
            "UPDATE gpuscope_meta SET value = ? WHERE key = 'schema_version'", [str(version)]
        )
        raise_if_stopping()  # a stop whose exception was lost on its way: no commit after it
        con.execute("COMMIT")
    except BaseException:
        rollback_quietly(con)  # never replaces the error on its way
        raise


def ensure_duckdb_schema(store: Store) -> None:
    con = store.con
    con.execute(META_DDL)
    version = schema_version(con)
    if version is not None and version in MIGRATIONS and version < SCHEMA_VERSION:
        migrate(con, version)
        version = SCHEMA_VERSION
    if version is not None and version != SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema version {version} is not {SCHEMA_VERSION}; re-create it with this gpuscope"
        )
    for table in TABLES:
        con.execute(table.ddl())
    if version is None:
        con.execute("INSERT INTO gpuscope_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])


def ensure_schema(con: Connection) -> None:
    """Create the tables of a store (kept for callers holding a bare DuckDB connection)."""
    if isinstance(con, Store):
        if con.is_lake:
            ensure_lake_schema(con)
        else:
            ensure_duckdb_schema(con)
        return
    ensure_duckdb_schema(Store(StoreSpec("duckdb", ":memory:"), con, write_lock(None, "bare")))


def ensure_lake_schema(store: Store) -> None:
    """Create the lake's tables (no keys: DuckLake has none; run ids are content hashes).

    Fast path, every open of a current store: one catalog query (the schema version and how many
    of gpuscope's tables exist). A new store, an incomplete one or another version goes the long
    way (creates the tables, or refuses the version)."""
    # Literal SQL, no parameters: binding one makes duckdb import pandas (0.3-0.4 s), which a
    # command that only opens the store (``gpuscope runs``) never needs otherwise.
    wanted = ", ".join(_sql_text(t.name) for t in TABLES)
    meta = f"__ducklake_metadata_{LAKE}"
    try:
        row = store.con.execute(
            f"SELECT (SELECT value FROM {LAKE}.gpuscope_meta WHERE key = 'schema_version'), "
            f"(SELECT count(DISTINCT table_name) FROM {meta}.ducklake_table "
            f"WHERE end_snapshot IS NULL AND table_name IN ({wanted})), "
            f"(SELECT count(*) FROM {meta}.ducklake_table WHERE end_snapshot IS NULL "
            f"AND table_name IN ({wanted}) "
            f"AND table_id NOT IN (SELECT table_id FROM {meta}.ducklake_table_stats))"
        ).fetchone()
    except duckdb.CatalogException:  # a new lake: no gpuscope_meta yet (binding fails, no scan)
        row = None
    if row is not None and row[0] == str(SCHEMA_VERSION) and row[1] == len(TABLES):
        if row[2]:
            with store.writing():
                seed_table_stats(store)
        return  # the common case: one query, nothing to write
    tables = {
        r[0]
        for r in store.con.execute(
            f"SELECT table_name FROM duckdb_tables() WHERE database_name = {_sql_text(LAKE)}"
        ).fetchall()
    }
    if "gpuscope_meta" in tables:
        version = schema_version(store)
        if version != SCHEMA_VERSION:
            raise BadInput(
                store.shown(),
                f"store schema version {version} is not {SCHEMA_VERSION} (this gpuscope's): "
                "use the gpuscope that wrote it, or a new store",
            )
    if not {t.name for t in TABLES} <= tables:
        with store.writing():
            store.execute(
                META_DDL.replace(" PRIMARY KEY", "").replace(
                    " gpuscope_meta ", f" {LAKE}.gpuscope_meta "
                )
            )
            for table in TABLES:
                if table.name not in tables:  # new, hence empty: its statistics row made with it
                    store.execute(table.ddl(keys=False, catalog=LAKE))
                    columns = [(c.type, "NOT NULL" not in c.type) for c in table.columns]
                    _placeholder_row(store, table.name, columns)
            if schema_version(store) is None:
                store.execute(
                    f"INSERT INTO gpuscope_meta VALUES ('schema_version', '{SCHEMA_VERSION}')"
                )
    else:  # every table there: those empty and without statistics get them
        with store.writing():
            seed_table_stats(store)


# A NOT NULL column's placeholder value, by what its type's name holds (the first match).
_PLACEHOLDER = (
    ("[]", "[]"),
    ("INT", "0"),
    ("TIMESTAMP", "TIMESTAMP '1970-01-01'"),
    ("JSON", "'{}'"),
)


def _placeholder(kind: str) -> str:
    return next((value for end, value in _PLACEHOLDER if end in kind), "''")


def _placeholder_row(store: Store, name: str, columns: list[tuple[str, bool]]) -> None:
    """Insert one row into the empty lake table ``name`` and delete it, in the caller's write
    transaction: the table's statistics row (0 records) stays once it commits, and no data.
    ``columns``: each column's (type, nullable), in order."""
    values = [
        "NULL" if nullable else f"CAST({_placeholder(kind)} AS {kind.replace(' NOT NULL', '')})"
        for kind, nullable in columns
    ]
    store.execute(f"INSERT INTO {LAKE}.{name} VALUES ({', '.join(values)})")
    store.execute(f"DELETE FROM {LAKE}.{name}")


def seed_table_stats(store: Store) -> None:
    """Give every empty table of the lake that has none a statistics row, inside the caller's
    write transaction (a store made before gpuscope did so at creation).

    DuckLake (the extension pinned with duckdb 1.5.5) keeps no negative result for a table without
    statistics: every scan of a never-written table re-reads the catalog's statistics once per
    column it binds, 60-100 ms a statement on a local lake against 5-15 ms for a table that has
    held a row. A table holding rows is never touched."""
    meta = f"__ducklake_metadata_{LAKE}"
    wanted = ", ".join(_sql_text(t.name) for t in TABLES)
    bare = store.execute(
        f"SELECT table_name FROM {meta}.ducklake_table WHERE end_snapshot IS NULL "
        f"AND table_name IN ({wanted}) "
        f"AND table_id NOT IN (SELECT table_id FROM {meta}.ducklake_table_stats)"
    ).fetchall()
    for (name,) in bare:
        if store.execute(f"SELECT count(*) FROM {LAKE}.{name}").fetchone() != (0,):
            continue
        columns = store.execute(
            "SELECT data_type, is_nullable FROM information_schema.columns "
            f"WHERE table_catalog = {_sql_text(LAKE)} AND table_name = {_sql_text(name)} "
            "ORDER BY ordinal_position"
        ).fetchall()
        _placeholder_row(store, name, [(kind, nullable == "YES") for kind, nullable in columns])
