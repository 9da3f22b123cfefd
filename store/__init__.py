"""The store: the one door every face (CLI, web, sampler) and every layer (ingest, analysis) goes
through to read and write runs.

A store is a DuckLake (Parquet data files + a catalog database):

* **local** (the default): a folder holding ``catalog.sqlite`` (the catalog, SQLite) and ``data/``
  (Parquet). Any number of processes on the machine read and write it at once; writers take turns
  through an exclusive ``flock`` on ``write.lock`` in the folder, held for a whole write transaction
  (SQLite cannot commit a writer whose read snapshot went stale, so writers must not overlap).
* **team**: the catalog in PostgreSQL (``postgres://user:pw@host:5432/db``) and the data under
  ``--data-path`` (``s3://bucket/prefix`` or a shared folder); writers on many machines rely on
  DuckLake's own commit retry, and on :meth:`Store.retrying` for a transaction that conflicts.
* **duckdb** (legacy, single process): a plain DuckDB file (``duckdb:PATH``), or ``:memory:`` (tests).

:class:`Store` owns the connection; it answers ``execute`` like a DuckDB connection, so analysis
code takes either. One module per concept: :mod:`.spec` (where a store lives), :mod:`.credentials`
(PostgreSQL and S3 secrets), :mod:`.lock` (the write lock), :mod:`.connection` (the open store,
cursors per thread, the writer's transaction, faults), :mod:`.transactions` (transactions, read
snapshots), :mod:`.runs` (run CRUD), :mod:`.migrations` and :mod:`.schema` (the tables),
:mod:`.legacy` (moving an old DuckDB file over), :mod:`.opening` (opening from a spec),
:mod:`.errors` (store faults), :mod:`.stopping` (a stop asked for by a signal), :mod:`.extensions` (DuckDB's extensions, offline). This package
re-exports what callers use.
"""

from __future__ import annotations

from gpuscope.store.connection import (
    ALLOCATOR_SETTINGS,
    LAKE,
    ORPHAN_AGE_TEAM,
    Connection,
    Store,
    limit_bytes,
    pid_alive,
    rollback_quietly,
)
from gpuscope.store.cores import usable_cores
from gpuscope.store.credentials import postgres_conninfo, s3_secret_sql
from gpuscope.store.errors import StoreError, catalog_lost, store_fault
from gpuscope.store.free_memory import duckdb_resident_bytes, release_free_memory
from gpuscope.store.legacy import MigrationResult, copy_runs, is_duckdb_file
from gpuscope.store.lock import WriteLock, write_lock
from gpuscope.store.migrations import MIGRATIONS, ensure_schema, schema_version
from gpuscope.store.opening import connect, migrate_in_place, open_store
from gpuscope.store.runs import (
    RUN_TABLES,
    AmbiguousRunName,
    delete_run,
    list_runs,
    move_tag,
    now_utc,
    resolve_run,
    run_exists,
    runs_with_tag,
    set_name,
    set_tags,
    tags_of,
)
from gpuscope.store.spec import (
    ENV_DATA_PATH,
    ENV_DB,
    ENV_STORE,
    StoreSpec,
    default_db_path,
    legacy_default_path,
    parse_spec,
)
from gpuscope.store.stopping import forget_stop, raise_if_stopping, request_stop, stop_exit_code
from gpuscope.store.transactions import read_snapshot, settle_snapshot, transaction

__all__ = [
    "ALLOCATOR_SETTINGS",
    "ENV_DATA_PATH",
    "ENV_DB",
    "ENV_STORE",
    "LAKE",
    "MIGRATIONS",
    "ORPHAN_AGE_TEAM",
    "RUN_TABLES",
    "AmbiguousRunName",
    "Connection",
    "MigrationResult",
    "Store",
    "StoreError",
    "StoreSpec",
    "WriteLock",
    "catalog_lost",
    "connect",
    "copy_runs",
    "default_db_path",
    "delete_run",
    "duckdb_resident_bytes",
    "ensure_schema",
    "forget_stop",
    "is_duckdb_file",
    "legacy_default_path",
    "limit_bytes",
    "list_runs",
    "migrate_in_place",
    "move_tag",
    "now_utc",
    "open_store",
    "parse_spec",
    "pid_alive",
    "postgres_conninfo",
    "raise_if_stopping",
    "read_snapshot",
    "release_free_memory",
    "request_stop",
    "resolve_run",
    "rollback_quietly",
    "run_exists",
    "runs_with_tag",
    "s3_secret_sql",
    "schema_version",
    "set_name",
    "set_tags",
    "settle_snapshot",
    "stop_exit_code",
    "store_fault",
    "tags_of",
    "transaction",
    "usable_cores",
    "write_lock",
]
