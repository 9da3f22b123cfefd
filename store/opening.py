"""Opening a store from its spec (local, team, legacy DuckDB), moving an old DuckDB file over first."""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
from gpuscope.store import extensions
from gpuscope.store.connection import (
    ALLOCATOR_SETTINGS,
    LAKE,
    Store,
    _first_line,
    pid_alive,
    use_lake,
)
from gpuscope.store.cores import usable_cores
from gpuscope.store.credentials import _sql_text, postgres_conninfo, s3_secret_sql
from gpuscope.store.legacy import backup_name, copy_runs, is_duckdb_file
from gpuscope.store.lock import write_lock
from gpuscope.store.migrations import ensure_duckdb_schema, ensure_lake_schema
from gpuscope.store.spec import (
    CATALOG_FILE,
    DATA_DIR,
    LOCK_FILE,
    StoreSpec,
    default_db_path,
    legacy_default_path,
    parse_spec,
)
from gpuscope.vocabulary.errors import BadInput


def open_store(
    spec: str | os.PathLike[str] | StoreSpec | None = None,
    *,
    data_path: str | None = None,
    notice: Callable[[str], None] | None = None,
) -> Store:
    """Open (and create if needed) a store; see :func:`parse_spec` for ``spec``.

    A legacy DuckDB file where a local store should be (``--db FILE``, or the old default) is moved
    over first (``notice`` gets one line). Raises BadInput (one line) for a bad spec or a
    catalog that cannot be reached.
    """
    s = spec if isinstance(spec, StoreSpec) else parse_spec(spec, data_path)
    if s.kind == "duckdb":
        return _open_duckdb(s)
    if s.kind == "local":
        migrate_in_place(s, notice=notice)
    return _open_lake(s)


def _open_duckdb(s: StoreSpec) -> Store:
    if s.location != ":memory:":
        Path(s.location).parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(s.location, config={**extensions.OFFLINE, "threads": usable_cores()})
    except duckdb.Error as e:
        raise BadInput(s.location, f"cannot open ({_first_line(e)})") from None
    con.execute(f"SET temp_directory = {_sql_text(_spill_dir())}")
    for setting in ALLOCATOR_SETTINGS:
        con.execute(setting)
    counter: list[int] = [0]
    store = Store(s, con, write_lock(None, f"duckdb:{id(con)}"), counter=counter)
    ensure_duckdb_schema(store)
    return store


SPILL_PREFIX = "gpuscope-duckdb-"  # + pid + "-" + random: DuckDB's spill folder of one open store


def _spill_dir() -> str:
    """A spill folder of this database instance alone: DuckDB names its spill files the same in
    every process (``duckdb_temp_storage_S32K-0.tmp``), so a shared folder mixes their blocks.
    DuckDB creates it when it first spills and removes it on close; those of killed processes are
    swept here."""
    base = Path(tempfile.gettempdir())
    for old in base.glob(f"{SPILL_PREFIX}*"):
        pid = old.name[len(SPILL_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return str(base / f"{SPILL_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")


def _open_lake(s: StoreSpec) -> Store:
    needs = ["parquet", "sqlite_scanner" if s.kind == "local" else "postgres_scanner", "ducklake"]
    # A team store's files may be on S3 even when no --data-path says so (the catalog knows).
    remote = s.kind == "team" or bool(s.data_path and "://" in s.data_path)
    if remote:
        needs.insert(0, "httpfs")
    try:
        con = extensions.offline_connection(*needs)
    except (extensions.MissingExtension, duckdb.Error) as e:
        raise BadInput(s.shown(), f"cannot load DuckDB extensions: {_first_line(e)}") from None
    con.execute(f"SET temp_directory = {_sql_text(_spill_dir())}")  # not ./.tmp of the cwd
    for setting in ALLOCATOR_SETTINGS:
        con.execute(setting)
    if remote:
        secret = s3_secret_sql()
        if secret:
            con.execute(secret)
    if s.kind == "local":
        root = Path(s.location)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            con.close()
            raise BadInput(s.location, f"cannot create the store folder ({e.strerror})") from None
        if not root.is_dir():
            con.close()
            raise BadInput(s.location, "not a folder")
        lock = write_lock(root / LOCK_FILE, str(root.resolve()))
    else:
        lock = write_lock(None, s.location)
    store = Store(s, con, lock)
    try:
        with lock.held():  # concurrent first opens: one creates the catalog, the others wait
            _attach(store)
            store.retrying(lambda: ensure_lake_schema(store))
            store.recover()
    except duckdb.Error as e:
        con.close()
        raise BadInput(s.shown(), f"cannot open the store ({_first_line(e)})") from None
    except BaseException:
        con.close()
        raise
    return store


def _attach(store: Store) -> None:
    s = store.spec
    options = []
    if s.kind == "local":
        root = Path(s.location)
        target = f"sqlite:{root / CATALOG_FILE}"
        options += ["META_JOURNAL_MODE 'WAL'", "META_BUSY_TIMEOUT 30000"]
        data = s.data_path or str(root / DATA_DIR) + "/"
        # The folder may have moved since it was created: the data path follows it.
        options += [f"DATA_PATH {_sql_text(data)}", "OVERRIDE_DATA_PATH true"]
    else:
        target = f"postgres:{postgres_conninfo(s.location)}"
        if s.data_path:
            options += [f"DATA_PATH {_sql_text(s.data_path)}", "OVERRIDE_DATA_PATH true"]
    opts = f" ({', '.join(options)})" if options else ""
    store.con.execute(f"ATTACH {_sql_text('ducklake:' + target)} AS {LAKE}{opts}")
    use_lake(store.con)
    if s.kind == "team" and s.data_path and s.data_path.startswith("s3://"):
        # A missing bucket or refused credentials: one line now, not a failed write mid-ingest.
        # The pattern matches no file of the store, so S3 lists (almost) nothing.
        probe = s.data_path.rstrip("/") + "/.gpuscope-probe*"
        store.con.execute(f"SELECT count(*) FROM glob({_sql_text(probe)})").fetchall()


def connect(
    path: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
    data_path: str | None = None,
) -> Store:
    """Open (and create if needed) the store at ``path`` (a spec, see :func:`parse_spec`).
    ``":memory:"`` gives a private in-memory store. ``read_only`` is accepted for old callers:
    readers and writers share a store now."""
    del read_only
    return open_store(path, data_path=data_path)


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
            raise BadInput(root, "not a gpuscope store (neither a folder nor a DuckDB file)")
        building = root.parent / f".{root.name}.migrating"
        shutil.rmtree(building, ignore_errors=True)  # a crashed attempt's

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
