"""The app's access to the store (a DuckLake, see :mod:`gpuscope.ingest.store`).

The server opens ONE connection (``st.cache_resource``) and every thread that runs a session's
script gets its own ``con.cursor()`` (DuckDB cursors are not shared between threads). Writes
(ingest, rename, tag, delete) take the store's write lock (shared with every other process that
writes the store). ``generation`` changes with every commit, of this process or another, and is
part of every cached query's key, so no page shows stale rows.

A store fault that is not bad input (disk full, I/O error, an invalidated database) is raised as
one line (:class:`StoreError`); the connection is closed and dropped, so the next action opens a
fresh one instead of every page of every session failing until a restart.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd
import streamlit as st
from gpuscope.ingest.errors import IngestError, StoreError, store_fault
from gpuscope.ingest.store import Store as LakeStore
from gpuscope.ingest.store import list_runs, open_store, parse_spec


@dataclass
class Store:
    """The shared connection of the store, and a counter of this process's writes."""

    path: str
    con: LakeStore
    lock: threading.RLock = field(default_factory=threading.RLock)
    generation: int = 0


_local = threading.local()


def db_path() -> str:
    """The store's spec: ``$GPUSCOPE_STORE`` (set by ``gpuscope ui``), else ``$GPUSCOPE_DB``, else the
    default local store."""
    return parse_spec(None).location


class StoreUnavailable(RuntimeError):
    """The store cannot be opened (bad spec, unreachable catalog); one line."""


_generations = [0]  # carried over when a faulted store is reopened, so caches stay keyed apart


@st.cache_resource(show_spinner=False)
def _open_store(path: str) -> Store:
    try:
        return Store(path, open_store(parse_spec(None)), generation=_generations[0])
    except IngestError as e:  # a bad spec, an unreachable catalog: one line
        raise StoreUnavailable(f"{e}. Reload to retry.") from None
    except duckdb.Error as e:  # e.g. the disk is still full: pending rows cannot be discarded yet
        raise StoreUnavailable(
            f"cannot open the store: {store_fault(e, path)}. Reload to retry."
        ) from None


def store() -> Store:
    return _open_store(db_path())


def drop(s: Store) -> None:
    """Close a faulted store's connection (and every cursor on it); the next use reopens the file."""
    with s.lock:
        _generations[0] = max(_generations[0], s.generation) + 1
        _open_store.clear()
        with contextlib.suppress(duckdb.Error):
            s.con.close()  # closes the cursors of every thread too


def fault(e: BaseException, s: Store | None = None) -> StoreError:
    """Drop the store after a fault that is not bad input; the one-line error to show."""
    s = s or store()
    err = store_fault(e, s.path)
    drop(s)
    return err


def cursor() -> LakeStore:
    """This thread's cursor on the shared connection (created on first use)."""
    s = store()
    cursors: dict[int, tuple[LakeStore, LakeStore]] = getattr(_local, "cursors", None) or {}
    _local.cursors = cursors
    entry = cursors.get(id(s.con))
    if entry is None or entry[0] is not s.con:  # an id may be reused by a reopened connection
        entry = (s.con, s.con.cursor())
        cursors.clear()  # cursors of a dropped connection are closed: forget them
        cursors[id(s.con)] = entry
    return entry[1]


@contextmanager
def writing() -> Iterator[LakeStore]:
    """Serialise a write and invalidate cached reads afterwards (even when it fails).

    Bad input (IngestError) passes through; any other store error (DuckDB, or the OS writing a
    scratch file) drops the connection and is raised as a one-line StoreError.
    """
    s = store()
    with s.lock:
        try:
            yield cursor()
        except IngestError:
            raise
        except (duckdb.Error, OSError) as e:
            raise fault(e, s) from None
        finally:
            s.generation += 1


def generation() -> int:
    """Changes with every write of this process (even a failed one) and every commit of any
    process (the lake's latest snapshot)."""
    s = store()
    try:
        return s.generation + cursor().generation()
    except duckdb.Error as e:
        raise fault(e, s) from None


def query_df(sql: str, params: list[Any] | None = None) -> pd.DataFrame:
    try:
        return cursor().execute(sql, params or []).df()
    except duckdb.FatalException as e:  # the database is invalidated: reopen on the next action
        raise fault(e) from None


def count_rows(table: str) -> int:
    try:
        row = cursor().execute(f"SELECT count(*) FROM {table}").fetchone()
    except duckdb.FatalException as e:
        raise fault(e) from None
    return int(row[0]) if row else 0


# -- cached reads: the first two arguments (path, generation) are the cache key's freshness --------


@st.cache_data(show_spinner=False, max_entries=16)
def runs_df(path: str, gen: int) -> pd.DataFrame:
    """Every run (newest first), one row each, as a DataFrame."""
    rows = list_runs(cursor())
    cols = [
        "run_id",
        "name",
        "kind",
        "created_at",
        "n_ranks",
        "n_events",
        "source_bytes",
        "gpu_name",
        "torch_version",
        "tags",
        "start_ns",
        "end_ns",
        "uploaded_by",
    ]
    return pd.DataFrame(rows, columns=cols)


@st.cache_data(show_spinner=False, max_entries=256)
def run_row(path: str, gen: int, run_id: str) -> dict[str, Any] | None:
    cur = cursor().execute(
        "SELECT run_id, name, kind, created_at, n_ranks, n_events, source_bytes, gpu_name, "
        "torch_version, tags, start_ns, end_ns, uploaded_by FROM runs WHERE run_id = ?",
        [run_id],
    )
    cols = [d[0] for d in cur.description]
    row = cur.fetchone()
    if row is None:
        return None
    d = dict(zip(cols, row, strict=True))
    d["tags"] = list(d["tags"] or [])
    return d


@st.cache_data(show_spinner=False, max_entries=256)
def ranks_of(path: str, gen: int, run_id: str) -> list[int]:
    rows = (
        cursor()
        .execute("SELECT rank FROM ranks WHERE run_id = ? ORDER BY rank", [run_id])
        .fetchall()
    )
    return [int(r[0]) for r in rows]


@st.cache_data(show_spinner=False, max_entries=256)
def time_offset_ns(path: str, gen: int, run_id: str, rank: int) -> int:
    row = (
        cursor()
        .execute("SELECT time_offset_ns FROM ranks WHERE run_id = ? AND rank = ?", [run_id, rank])
        .fetchone()
    )
    return int(row[0]) if row and row[0] is not None else 0


def resolve(ref: str | None) -> str | None:
    """A run id (or unique prefix, or exact name) from a URL -> the run id, or None.

    Cached per store generation: every session opening the same run page asks the same question.
    """
    if not ref:
        return None
    return _resolve(db_path(), generation(), ref.strip())


@st.cache_data(show_spinner=False, max_entries=1024)
def _resolve(path: str, gen: int, ref: str) -> str | None:
    from gpuscope.ingest.store import resolve_run

    return resolve_run(cursor(), ref)
