"""The open store (:class:`Store`): the DuckDB connection with the lake attached, per-thread cursors, the one writer's transaction, fault recovery and maintenance."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import duckdb
from gpuscope.store.errors import catalog_lost, is_conflict, store_fault
from gpuscope.store.lock import WriteLock
from gpuscope.store.spec import DATA_DIR, WRITING_MARK, StoreSpec
from gpuscope.store.stopping import raise_if_stopping
from gpuscope.vocabulary.redact import redact

LAKE = "lake"  # the name the DuckLake is attached as
# A lake connection's name lookup: temporary tables, then DuckDB's own functions and views, then
# the lake. Every statement that looks a name up in the lake makes DuckLake read its catalog
# (5-15 ms a statement on a local lake); with the built-in functions found first, a statement
# over temporary tables alone (an analysis's working tables) reads nothing of it. The first entry
# is where an unqualified CREATE goes: only ``CREATE TEMP`` may leave the catalog out; the
# lake's own tables are created as ``lake.<name>``.
LAKE_SEARCH_PATH = f"temp.main,system.main,{LAKE}.main"


def use_lake(con: duckdb.DuckDBPyConnection) -> None:
    """Point a connection (or cursor) that has the lake attached at it, names looked up as
    :data:`LAKE_SEARCH_PATH` says."""
    con.execute(f"USE {LAKE}")
    con.execute(f"SET search_path = '{LAKE_SEARCH_PATH}'")


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


_UNITS = {"": 1, "B": 1, "BYTES": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip


def limit_bytes(text: str) -> int | None:
    """Bytes of a DuckDB memory setting as ``current_setting`` or ``SET`` writes it (``'18.6 GiB'``,
    ``'256MB'``); None for what is not a size."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = _UNITS.get(m[2].upper()) if m else None
    return None if m is None or unit is None else int(float(m[1]) * unit)


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
            use_lake(cur)
        return Store(self.spec, cur, self.lock, owner=False, counter=self._counter)

    def cap_memory_limit(self, limit: str) -> None:
        """DuckDB's memory limit of this instance (every cursor's) at most ``limit`` (``'1GB'``):
        set to it unless the instance's own is lower. Beyond it, working tables spill to the
        store's temp directory."""
        ((own,),) = self.con.execute("SELECT current_setting('memory_limit')").fetchall()
        own_bytes, cap = limit_bytes(str(own)), limit_bytes(limit)
        if cap is None:
            raise ValueError(f"not a memory size: {limit!r}")
        if own_bytes is None or own_bytes > cap:
            self.con.execute(f"SET memory_limit = '{limit}'")

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

    def local_table_folder(self, table: str) -> Path | None:
        """The folder of this machine where the lake keeps ``table``'s Parquet files (the data
        path, then the schema's and the table's relative paths from the catalog), for files
        written beside DuckLake's own and registered with ``ducklake_add_data_files``: inside the
        data path, the store's maintenance and a rolled-back write's cleanup
        (:meth:`delete_orphaned_files`) delete them as they delete DuckLake's own. None for
        anything but a local store whose data path is a folder (a team store's catalog is shared
        and its files may be on S3; a plain DuckDB file has none)."""
        root = self.root
        if root is None or (self.spec.data_path and "://" in self.spec.data_path):
            return None
        data = Path(self.spec.data_path) if self.spec.data_path else root / DATA_DIR
        meta, name = f"__ducklake_metadata_{LAKE}", table.replace("'", "''")
        row = self.con.execute(
            f"SELECT s.path, s.path_is_relative, t.path, t.path_is_relative "
            f"FROM {meta}.ducklake_table t JOIN {meta}.ducklake_schema s USING (schema_id) "
            f"WHERE t.table_name = '{name}' AND t.end_snapshot IS NULL "
            "AND s.end_snapshot IS NULL AND s.schema_name = 'main'"
        ).fetchone()
        if row is None or not (row[1] and row[3]):
            return None  # not a table of this gpuscope's making (paths relative to the data path)
        return data / row[0] / row[2]

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
                raise_if_stopping()  # a stop whose exception was lost on its way: no commit after it
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
            if not mark.exists() or _marked_by_this_process(mark):
                # this process writes now: the lock is reentrant, so a store opened in the thread
                # of an open transaction gets here, and would delete that transaction's files
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


Connection = Store | duckdb.DuckDBPyConnection


def _marked_by_this_process(mark: Path) -> bool:
    """Whether the write mark names this process (a transaction of ours is open)."""
    try:
        return int(mark.read_text().strip() or -1) == os.getpid()
    except (OSError, ValueError):  # gone meanwhile, or not a pid: not ours
        return False


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (this user's or another's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def _first_line(e: BaseException) -> str:
    """The error's first line, every secret masked (``redact``)."""
    line = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    return redact(line)


def rollback_quietly(con: Connection) -> None:
    """Roll back for cleanup: never raises (no transaction open, a closed or invalidated store).

    Cleanup runs while another exception is on its way; it must not replace that exception.
    """
    raw = con.con if isinstance(con, Store) else con
    with suppress(duckdb.Error, RuntimeError):
        raw.execute("ROLLBACK")
