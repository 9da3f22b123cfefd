"""The store: where it lives, opening it, the write lock, creating the tables, listing and deleting runs.

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
code takes either.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb
from gpuscope.ingest import extensions, schema
from gpuscope.ingest.errors import IngestError, catalog_lost, store_fault
from gpuscope.ingest.schema import META_DDL, SCHEMA_VERSION, TABLES
from gpuscope.vocabulary.redact import redact, remember, shown_url, url_password

ENV_DB = "GPUSCOPE_DB"  # the local store's folder
ENV_STORE = "GPUSCOPE_STORE"  # any store spec (see parse_spec)
ENV_DATA_PATH = "GPUSCOPE_DATA_PATH"  # where a team store's Parquet files live
LAKE = "lake"  # the name the DuckLake is attached as
CATALOG_FILE = "catalog.sqlite"
DATA_DIR = "data"
LOCK_FILE = "write.lock"
WRITING_MARK = "writing.pid"  # present while a write transaction is open: left behind by a crash
LEGACY_BACKUP_SUFFIX = ".pre-ducklake"  # a migrated DuckDB file is kept under this name
ORPHAN_AGE_TEAM = (
    "1 day"  # a team store's untracked files older than this are an ingest's that died
)
SNAPSHOT_KEEP = "1 day"
CLEANUP_AGE = "1 hour"  # files no snapshot needs are deleted when scheduled longer ago than this  # snapshots (time travel) kept; older ones expire in maintain()
# DuckDB's allocator keeps up to 128/512 MiB of freed memory by default; a long ingest that allocates
# and frees every batch then grows by ~0.4x the trace's size. Handing it back early keeps an ingest's
# peak RSS flat (0.37x the 1 GB benchmark trace instead of 0.67x).
ALLOCATOR_SETTINGS = (
    "SET allocator_flush_threshold = '32MB'",
    "SET allocator_bulk_deallocation_flush_threshold = '32MB'",
)
MAINTAIN_MEMORY_LIMIT = "192MB"
RETRIES = 4  # attempts of a write transaction that conflicts with another writer (team store)
T = TypeVar("T")

RUN_TABLES = (
    "rank_summaries",
    "threads",
    "names",
    "events",
    "memory_events",
    "ranks",
    "nvml_samples",
    "nvml_series",
    "runs",
)
RUN_COLUMNS = ", ".join(schema.RUN_COLUMNS)  # a SELECT list


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share"))


def default_db_path() -> Path:
    """The local store's folder: ``$GPUSCOPE_DB``, else ``$XDG_DATA_HOME/gpuscope/store``
    (``~/.local/share/gpuscope/store`` by default)."""
    env = os.environ.get(ENV_DB)
    if env:
        return Path(env).expanduser()
    return data_home() / "gpuscope" / "store"


def legacy_default_path() -> Path:
    """Where gpuscope before the DuckLake kept its DuckDB file (migrated on first open)."""
    return data_home() / "gpuscope" / "gpuscope.duckdb"


# ---------------------------------------------------------------------------------------------------
# Store specs


@dataclass(frozen=True)
class StoreSpec:
    """Where a store lives. ``kind``: ``local`` (folder), ``team`` (PostgreSQL URL), ``duckdb``."""

    kind: str
    location: str  # local: the folder; team: the PostgreSQL URL; duckdb: a file or ":memory:"
    data_path: str | None = None  # Parquet location (local: default <folder>/data/)

    def shown(self) -> str:
        """The spec as printed in messages: every secret masked (``***``; see ``redact``)."""
        return shown_url(self.location)


def parse_spec(
    spec: str | os.PathLike[str] | None = None, data_path: str | None = None
) -> StoreSpec:
    """A store spec -> :class:`StoreSpec`. ``None``: ``$GPUSCOPE_STORE``, else the local store at
    :func:`default_db_path`. Forms: a folder path (local DuckLake), ``postgres://...`` or
    ``postgresql://...`` (team DuckLake; ``data_path`` or ``$GPUSCOPE_DATA_PATH`` says where its
    Parquet files go), ``duckdb:PATH`` (legacy DuckDB file), ``:memory:``. Raises IngestError."""
    if data_path is None:
        data_path = os.environ.get(ENV_DATA_PATH) or None
    if spec is None:
        spec = os.environ.get(ENV_STORE) or default_db_path()
    text = str(spec)
    if text == ":memory:":
        return StoreSpec("duckdb", text)
    if text.startswith("duckdb:"):
        path = text[len("duckdb:") :]
        if not path:
            raise IngestError(text, "duckdb: needs a file path (duckdb:PATH)")
        return StoreSpec("duckdb", path if path == ":memory:" else str(Path(path).expanduser()))
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("postgres", "postgresql"):
        remember(url_password(text))  # masked verbatim in every message from now on
        u = urllib.parse.urlsplit(text)
        try:
            u.port  # noqa: B018 (raises ValueError for a port that is not a number in range)
        except ValueError:
            masked = re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", text)
            raise IngestError(masked, "the port is not a number from 1 to 65535") from None
        if not u.hostname and not u.path.strip("/"):
            raise IngestError(text, "a PostgreSQL store needs a host or a database name")
        return StoreSpec("team", text, data_path)
    if scheme:
        raise IngestError(
            text,
            "not a store: give a folder, postgres://user@host/db, duckdb:FILE or :memory:",
        )
    return StoreSpec("local", str(Path(text).expanduser().absolute()), data_path)


def postgres_conninfo(url: str) -> str:
    """A ``postgres://`` URL -> libpq's ``key=value`` string (what postgres_scanner reads)."""
    u = urllib.parse.urlsplit(url)
    parts = {
        "host": u.hostname,
        "port": str(u.port) if u.port else None,
        "user": urllib.parse.unquote(u.username) if u.username else None,
        "password": urllib.parse.unquote(u.password) if u.password else None,
        "dbname": urllib.parse.unquote(u.path.lstrip("/")) or None,
    }
    for key, values in urllib.parse.parse_qs(u.query).items():
        parts[key] = values[-1]

    def quoted(v: str) -> str:
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{k}={quoted(v)}" for k, v in parts.items() if v is not None)


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def s3_secret_sql(env: dict[str, str] | None = None) -> str | None:
    """``CREATE SECRET`` for an ``s3://`` data path from the standard AWS variables; None when no
    variable is set (a public bucket, or credentials DuckDB finds itself)."""
    env = dict(os.environ if env is None else env)
    fields: dict[str, str] = {}
    for var, key in (
        ("AWS_ACCESS_KEY_ID", "KEY_ID"),
        ("AWS_SECRET_ACCESS_KEY", "SECRET"),
        ("AWS_SESSION_TOKEN", "SESSION_TOKEN"),
    ):
        if env.get(var):
            fields[key] = _sql_text(env[var])
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        fields["REGION"] = _sql_text(region)
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        u = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        host = u.hostname or ""
        fields["ENDPOINT"] = _sql_text(f"{host}:{u.port}" if u.port else host)
        fields["USE_SSL"] = "true" if u.scheme == "https" else "false"
        fields["URL_STYLE"] = "'path'"
    if not fields:
        return None
    body = ", ".join(f"{k} {v}" for k, v in fields.items())
    return f"CREATE OR REPLACE SECRET gpuscope_s3 (TYPE s3, {body})"


# ---------------------------------------------------------------------------------------------------
# The cross-process write lock


class WriteLock:
    """Exclusive across processes (``flock`` on a file) and threads (a reentrant lock).

    One per lock file and process (:func:`write_lock`): two ``flock`` on separate descriptors of
    one process would block each other.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        with self.thread_lock:
            if self.depth == 0 and self.path is not None:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self.fd = fd
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1
                if self.depth == 0 and self.fd is not None:
                    os.close(self.fd)  # releases the flock
                    self.fd = None


_locks: dict[str, WriteLock] = {}
_locks_guard = threading.Lock()


def write_lock(path: Path | None, key: str) -> WriteLock:
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = WriteLock(path)
        return lock


# ---------------------------------------------------------------------------------------------------
# The store


class Store:
    """An open store: the DuckDB connection with the lake attached and in use, its write lock,
    and the run-level operations. Quacks like a ``duckdb.DuckDBPyConnection`` (``execute``,
    ``register``, ``cursor``...), so functions that read the store take either.
    """

    def __init__(
        self,
        spec: StoreSpec,
        con: duckdb.DuckDBPyConnection,
        lock: WriteLock,
        *,
        owner: bool = True,
        counter: list[int] | None = None,
    ) -> None:
        self.spec = spec
        self.con = con
        self.lock = lock
        self.owner = owner  # closes the database (not just a cursor) on close()
        self._tx = False
        self._counter = (
            counter if counter is not None else [0]
        )  # duckdb kind: this process's commits
        self.snapshot_seq = 0  # which read_snapshot block is open (0: none); see read_snapshot

    # -- connection-like --------------------------------------------------------------------------

    def execute(self, sql: str, params: Any = None) -> duckdb.DuckDBPyConnection:
        return self.con.execute(sql, params) if params is not None else self.con.execute(sql)

    def executemany(self, sql: str, params: Any) -> duckdb.DuckDBPyConnection:
        return self.con.executemany(sql, params)

    def register(self, name: str, obj: Any) -> duckdb.DuckDBPyConnection:
        return self.con.register(name, obj)

    def unregister(self, name: str) -> duckdb.DuckDBPyConnection:
        return self.con.unregister(name)

    def __getattr__(self, name: str) -> Any:  # sql, fetchone, description, ...
        return getattr(self.con, name)

    def cursor(self) -> Store:
        """A store on a new cursor of this connection (one per thread), sharing the write lock."""
        cur = self.con.cursor()
        if self.spec.kind != "duckdb":
            cur.execute(f"USE {LAKE}")
        return Store(self.spec, cur, self.lock, owner=False, counter=self._counter)

    def close(self) -> None:
        with suppress(duckdb.Error):
            self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_lake(self) -> bool:
        return self.spec.kind != "duckdb"

    @property
    def root(self) -> Path | None:
        """The local store's folder (None for other kinds)."""
        return Path(self.spec.location) if self.spec.kind == "local" else None

    def shown(self) -> str:
        return self.spec.shown()

    # -- writing ----------------------------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[Store]:
        """The write lock plus one transaction: commit on success, roll back on any exception.

        Nested use joins the open transaction. A local store's writers take turns for the whole
        transaction; a writer that died mid-transaction left files that the next one deletes.
        """
        with self.lock.held():
            if self._tx:
                yield self
                return
            mark = self._begin_mark()
            self.con.execute("BEGIN TRANSACTION")
            self._tx = True
            try:
                yield self
            except BaseException as e:
                self._tx = False
                rollback_quietly(self.con)
                self._end_mark(mark, clean=True)
                if isinstance(e, duckdb.Error) and catalog_lost(e):  # plain words, no secret
                    raise store_fault(e, self.shown(), during="the write") from None
                raise
            self._tx = False
            try:
                self.con.execute("COMMIT")
            except BaseException as e:
                rollback_quietly(self.con)  # a failed COMMIT may leave the transaction open
                self._end_mark(mark, clean=True)
                if isinstance(e, duckdb.Error) and catalog_lost(e):
                    raise store_fault(e, self.shown(), during="the commit") from None
                raise
            self._counter[0] += 1
            self._end_mark(mark, clean=False)

    def _begin_mark(self) -> Path | None:
        root = self.root
        if root is None:
            return None
        self.recover()  # a writer died mid-transaction (we hold the lock): its files go
        mark = root / WRITING_MARK
        mark.write_text(str(os.getpid()))
        return mark

    def _end_mark(self, mark: Path | None, *, clean: bool) -> None:
        if mark is None:
            return
        if clean:  # a rolled-back transaction's Parquet files are untracked: delete them now
            with suppress(duckdb.Error):
                self.delete_orphaned_files(all_ages=True)
        with suppress(OSError):
            mark.unlink()

    def recover(self) -> int:
        """A local store whose last writer died mid-transaction (its mark is still there): delete
        the Parquet files it left. Returns how many; 0 when there was nothing to do."""
        root = self.root
        if root is None or not (root / WRITING_MARK).exists():
            return 0
        with self.lock.held():
            mark = root / WRITING_MARK
            if not mark.exists():
                return 0
            n = self.delete_orphaned_files(all_ages=True)
            with suppress(OSError):
                mark.unlink()
            return n

    def retrying(self, work: Callable[[], T], attempts: int = RETRIES) -> T:
        """``work()`` (which writes through :meth:`writing`), again when it conflicted with a
        concurrent writer of a team store; other errors pass through."""
        for attempt in range(attempts):
            try:
                return work()
            except duckdb.Error as e:
                if attempt == attempts - 1 or not is_conflict(e):
                    raise
        raise AssertionError("unreachable")

    # -- freshness --------------------------------------------------------------------------------

    def generation(self) -> int:
        """A number that changes whenever any process commits to the store (the lake's latest
        snapshot id; for a plain DuckDB store, this process's commit count)."""
        if not self.is_lake:
            return self._counter[0]
        row = self.con.execute(
            f"SELECT max(snapshot_id) FROM __ducklake_metadata_{LAKE}.ducklake_snapshot"
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # -- maintenance ------------------------------------------------------------------------------

    def delete_orphaned_files(self, *, all_ages: bool = False) -> int:
        """Delete Parquet files the catalog does not track (a dead or failed writer's); returns
        how many. ``all_ages`` only under the write lock of a local store, where no writer runs."""
        if not self.is_lake:
            return 0
        age = (
            "cleanup_all => true"
            if all_ages
            else f"older_than => now() - INTERVAL '{ORPHAN_AGE_TEAM}'"
        )
        return self._count(f"ducklake_delete_orphaned_files('{LAKE}', {age})")

    def _count(self, table_function: str) -> int:
        """Run a DuckLake table function; the number of rows it returns. (Every column is
        fetched: under ``count(*)`` DuckDB prunes the columns and the function skips its work.)"""
        return int(self.con.execute(f"FROM {table_function}").to_arrow_table().num_rows)

    def maintain(self, *, compact: bool = False) -> dict[str, int]:
        """Expire snapshots older than a day, delete files no snapshot needs (scheduled over an
        hour ago: a reader may still scan them) and files of dead writers. Safe beside readers.

        ``compact``: also merge small files. Only when nothing reads the store: DuckLake's merge
        rewrites the files of runs already stored, and a reader in another process that scans a
        table while the merge commits can see none of its rows, neither the old files nor the
        merged one (measured: 1 read in ~100 during a merge read 0 of a run's 240,002 events).

        Returns counts per step (tables merged, snapshots expired, files deleted, orphans)."""
        if not self.is_lake:
            return {}
        out: dict[str, int] = {"merged": 0}
        meta = f"__ducklake_metadata_{LAKE}"
        ((memory,),) = self.con.execute("SELECT current_setting('memory_limit')").fetchall()
        self.con.execute(f"SET memory_limit = '{MAINTAIN_MEMORY_LIMIT}'")  # a merge spills beyond
        try:
            with self.lock.held():
                if compact:
                    out["merged"] = self._count(f"ducklake_merge_adjacent_files('{LAKE}')")
                self._maintain(out, meta)
        finally:
            self.con.execute(f"SET memory_limit = '{memory}'")
        return out

    def maintain_after_ingest(self) -> str | None:
        """:meth:`maintain` (no compaction) after a write that stored runs; None when done, else
        the one-line reason it was skipped: the runs are stored either way, and the next ingest
        maintains again."""
        try:
            self.maintain()
        except duckdb.Error as e:  # e.g. the object storage refused a delete
            return f"store maintenance skipped ({_first_line(e)})"
        return None

    def _maintain(self, out: dict[str, int], meta: str) -> None:
        out["expired"] = self._count(
            f"ducklake_expire_snapshots('{LAKE}', older_than => now() - INTERVAL '{SNAPSHOT_KEEP}')"
        )
        # Files replaced by a merge or expired are deleted once all were scheduled over an
        # hour ago (a reader in another process may still be scanning a recent one). Checked
        # here: ducklake_cleanup_old_files's own older_than also took files of a minute ago.
        recent = self.con.execute(
            f"SELECT count(*) FILTER (WHERE schedule_start::TIMESTAMPTZ > now() - INTERVAL "
            f"'{CLEANUP_AGE}'), count(*) FROM {meta}.ducklake_files_scheduled_for_deletion"
        ).fetchone()
        out["deleted"] = 0
        if recent and recent[1] and not recent[0]:
            out["deleted"] = self._count(
                f"ducklake_cleanup_old_files('{LAKE}', cleanup_all => true)"
            )
        out["orphans"] = self.delete_orphaned_files(all_ages=self.spec.kind == "local")

    # -- runs -------------------------------------------------------------------------------------

    def list_runs(self) -> list[dict[str, Any]]:
        return list_runs(self)

    def resolve_run(self, ref: str) -> str | None:
        return resolve_run(self, ref)

    def run_exists(self, run_id: str) -> bool:
        return run_exists(self, run_id)

    def delete_run(self, run_id: str) -> bool:
        return delete_run(self, run_id)

    def set_name(self, run_id: str, name: str) -> None:
        set_name(self, run_id, name)

    def set_tags(self, run_id: str, tags: list[str]) -> None:
        set_tags(self, run_id, tags)


def is_conflict(e: BaseException) -> bool:
    """Whether a DuckDB error is a write conflict between transactions (worth a retry)."""
    text = str(e).lower()
    return "conflict" in text or "database is locked" in text


Connection = Store | duckdb.DuckDBPyConnection


def open_store(
    spec: str | os.PathLike[str] | StoreSpec | None = None,
    *,
    data_path: str | None = None,
    notice: Callable[[str], None] | None = None,
) -> Store:
    """Open (and create if needed) a store; see :func:`parse_spec` for ``spec``.

    A legacy DuckDB file where a local store should be (``--db FILE``, or the old default) is moved
    over first (``notice`` gets one line). Raises IngestError (one line) for a bad spec or a
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
        con = duckdb.connect(s.location, config=dict(extensions.OFFLINE))
    except duckdb.Error as e:
        raise IngestError(s.location, f"cannot open ({_first_line(e)})") from None
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


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (this user's or another's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def _open_lake(s: StoreSpec) -> Store:
    needs = ["parquet", "sqlite_scanner" if s.kind == "local" else "postgres_scanner", "ducklake"]
    # A team store's files may be on S3 even when no --data-path says so (the catalog knows).
    remote = s.kind == "team" or bool(s.data_path and "://" in s.data_path)
    if remote:
        needs.insert(0, "httpfs")
    try:
        con = extensions.offline_connection(*needs)
    except (extensions.MissingExtension, duckdb.Error) as e:
        raise IngestError(s.shown(), f"cannot load DuckDB extensions: {_first_line(e)}") from None
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
            raise IngestError(
                s.location, f"cannot create the store folder ({e.strerror})"
            ) from None
        if not root.is_dir():
            con.close()
            raise IngestError(s.location, "not a folder")
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
        raise IngestError(s.shown(), f"cannot open the store ({_first_line(e)})") from None
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
    store.con.execute(f"USE {LAKE}")
    if s.kind == "team" and s.data_path and s.data_path.startswith("s3://"):
        # A missing bucket or refused credentials: one line now, not a failed write mid-ingest.
        # The pattern matches no file of the store, so S3 lists (almost) nothing.
        probe = s.data_path.rstrip("/") + "/.gpuscope-probe*"
        store.con.execute(f"SELECT count(*) FROM glob({_sql_text(probe)})").fetchall()


def _first_line(e: BaseException) -> str:
    """The error's first line, every secret masked (``redact``)."""
    line = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    return redact(line)


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
    try:
        row = store.con.execute(
            f"SELECT (SELECT value FROM {LAKE}.gpuscope_meta WHERE key = 'schema_version'), "
            f"(SELECT count(DISTINCT table_name) FROM __ducklake_metadata_{LAKE}.ducklake_table "
            f"WHERE end_snapshot IS NULL AND table_name IN ({wanted}))"
        ).fetchone()
    except duckdb.CatalogException:  # a new lake: no gpuscope_meta yet (binding fails, no scan)
        row = None
    if row is not None and row[0] == str(SCHEMA_VERSION) and row[1] == len(TABLES):
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
            raise IngestError(
                store.shown(),
                f"store schema version {version} is not {SCHEMA_VERSION} (this gpuscope's): "
                "use the gpuscope that wrote it, or a new store",
            )
        if {t.name for t in TABLES} <= tables:
            return  # the common case: nothing to write
    with store.writing():
        store.execute(META_DDL.replace(" PRIMARY KEY", ""))
        for table in TABLES:
            store.execute(table.ddl(keys=False))
        if schema_version(store) is None:
            store.execute(
                f"INSERT INTO gpuscope_meta VALUES ('schema_version', '{SCHEMA_VERSION}')"
            )


# ---------------------------------------------------------------------------------------------------
# Transactions on a store or a bare connection

_SNAPSHOT_SEQ = iter(range(1, 1 << 62))


def settle_snapshot(con: Connection) -> None:
    """Inside a :func:`read_snapshot` block: commit what the block made so far (temp tables) and
    go on in a new transaction. A temp table still in its transaction is read through
    transaction-local storage, which gives DuckDB other join plans (another row order) than the
    committed table the same statement reads outside a block: settling keeps results the same."""
    if isinstance(con, Store) and con.snapshot_seq:
        con.con.execute("COMMIT")
        con.con.execute("BEGIN TRANSACTION")


@contextmanager
def read_snapshot(con: Connection, on_rollback: Callable[[], None] | None = None) -> Iterator[int]:
    """Run a block of reads of a lake store in one transaction (one DuckLake snapshot).

    Outside a transaction every statement on a lake is a transaction of its own, and DuckLake looks
    up the latest snapshot in the catalog for each (a few ms per statement, ~50 in an analysis);
    inside one it is looked up once and every read sees the same store. Temp tables made in the
    block stay (the block commits, which writes nothing to the lake). On an exception the block
    rolls back, which also drops its temp tables: ``on_rollback`` then runs (callers that cache
    temp table names forget them there). Yields a number unique to the block (0: no block was
    opened: not a lake store, or a transaction is already open, which the block joins)."""
    if not isinstance(con, Store) or not con.is_lake or con._tx or con.snapshot_seq:
        yield 0
        return
    try:
        con.con.execute("BEGIN TRANSACTION")
    except duckdb.TransactionException:  # one opened with a bare BEGIN: join it
        yield 0
        return
    seq = next(_SNAPSHOT_SEQ)
    con.snapshot_seq = seq
    try:
        yield seq
    except (
        BaseException
    ):  # any failure inside the block: undo it, then the caller's error as it was
        con.snapshot_seq = 0
        rollback_quietly(con)
        if on_rollback is not None:
            on_rollback()
        raise
    con.snapshot_seq = 0
    try:
        con.con.execute("COMMIT")
    except BaseException:  # the COMMIT failed (catalog gone, disk): undo, then raise it as it was
        rollback_quietly(con)
        if on_rollback is not None:
            on_rollback()
        raise


@contextmanager
def transaction(con: Connection) -> Iterator[Connection]:
    """All or nothing: commit on success, roll back on any exception (the original is raised).
    On a :class:`Store` this is :meth:`Store.writing` (the write lock, nested use joins)."""
    if isinstance(con, Store):
        with con.writing() as s:
            yield s
        return
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


def rollback_quietly(con: Connection) -> None:
    """Roll back for cleanup: never raises (no transaction open, a closed or invalidated store).

    Cleanup runs while another exception is on its way; it must not replace that exception.
    """
    raw = con.con if isinstance(con, Store) else con
    with suppress(duckdb.Error, RuntimeError):
        raw.execute("ROLLBACK")


# ---------------------------------------------------------------------------------------------------
# Runs


def delete_run(con: Connection, run_id: str) -> bool:
    """Remove a run from every table, in one transaction; False when there was no such run."""

    def work() -> bool:
        with transaction(con):
            if not run_exists(con, run_id):
                return False
            for t in RUN_TABLES:
                con.execute(f"DELETE FROM {t} WHERE run_id = ?", [run_id])
        return True

    return con.retrying(work) if isinstance(con, Store) else work()


def run_exists(con: Connection, run_id: str) -> bool:
    return con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is not None


def resolve_run(con: Connection, ref: str) -> str | None:
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


def list_runs(con: Connection) -> list[dict[str, Any]]:
    """Every run, newest first, as plain dicts (JSON-ready); ``uploaded_by`` is None when unknown."""
    cur = con.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at DESC, run_id")
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        d = dict(zip(cols, row, strict=True))
        d["created_at"] = d["created_at"].isoformat() + "Z"
        d["tags"] = list(d["tags"] or [])
        out.append(d)
    return out


def _update_run(con: Connection, sql: str, params: list[Any]) -> None:
    def work() -> None:
        with transaction(con):
            con.execute(sql, params)

    if isinstance(con, Store):
        con.retrying(work)
    else:
        work()


def set_name(con: Connection, run_id: str, name: str) -> None:
    _update_run(con, "UPDATE runs SET name = ? WHERE run_id = ?", [name, run_id])


def set_tags(con: Connection, run_id: str, tags: list[str]) -> None:
    _update_run(con, "UPDATE runs SET tags = ? WHERE run_id = ?", [sorted(set(tags)), run_id])


def tags_of(con: Connection, run_id: str) -> list[str]:
    """The run's tags (empty for an unknown run)."""
    row = con.execute("SELECT tags FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return list(row[0] or []) if row else []


def runs_with_tag(con: Connection, tag: str) -> list[str]:
    """The ids of the runs that carry ``tag``, newest first."""
    rows = con.execute(
        "SELECT run_id FROM runs WHERE list_contains(tags, ?) ORDER BY created_at DESC, run_id",
        [tag],
    ).fetchall()
    return [str(r[0]) for r in rows]


def move_tag(con: Connection, run_id: str, tag: str) -> list[str]:
    """Give ``tag`` to ``run_id`` alone (a baseline tag names one run): it is taken from every
    other run that had it, in the same transaction. Returns the ids it was taken from."""
    holders = [r for r in runs_with_tag(con, tag) if r != run_id]

    def work() -> None:
        with transaction(con):
            con.execute(
                "UPDATE runs SET tags = list_filter(tags, t -> t <> ?) "
                "WHERE list_contains(tags, ?) AND run_id <> ?",
                [tag, tag, run_id],
            )
            con.execute(
                "UPDATE runs SET tags = list_sort(list_distinct(list_append(tags, ?))) "
                "WHERE run_id = ?",
                [tag, run_id],
            )

    if isinstance(con, Store):
        con.retrying(work)
    else:
        work()
    return holders


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
