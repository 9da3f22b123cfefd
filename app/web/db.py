"""The app's access to the store, shared with every other gpuscope process.

The store is a DuckLake (or a legacy DuckDB file, ``duckdb:PATH``): the server opens it once
(``st.cache_resource``) and every thread that runs a session's script gets its own cursor on that
connection (DuckDB cursors are not shared between threads). ``gpuscope ingest``, ``delete`` and the
sampler write the same store from other processes at the same time.

Writes (upload, rename, tag, delete) go through :func:`writing`: the store's cross-process write
lock, held around a writer connection of its own (a second DuckDB instance on the same store, see
:func:`writer`), so an upload's settings (one thread, a memory limit) and its long transaction never
touch the connection that pages read from. Every cached query is keyed by :func:`generation`, the store's snapshot
id (it changes whenever any process commits), read once per script run (``main.py`` calls
:func:`begin_script_run`) and again after a write of this run: a run ingested or deleted by another
process shows on the next rerun or refresh, with no restart.

A store fault that is not bad input (disk full, I/O error, an invalidated database) is raised as
one line (:class:`StoreError`); the connection is closed and dropped, so the next action opens a
fresh one instead of every page of every session failing until a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd
import streamlit as st
from gpuscope.analysis import run_views
from gpuscope.store import Store, StoreSpec, list_runs, open_store, parse_spec
from gpuscope.store.errors import StoreError, store_fault
from gpuscope.store.schema import RUN_COLUMNS
from gpuscope.vocabulary.errors import GpuscopeError
from streamlit.runtime.scriptrunner import get_script_run_ctx

# Generations of the store opened after a drop are offset by EPOCH * (drops so far), so a cache
# entry of the dropped connection is never served again (a legacy DuckDB store counts this
# process's commits, which start again from 0 on a reopen).
EPOCH = 10**12


@dataclass
class _ServerStore:
    """What this server holds of the store besides the reading connection (which
    ``st.cache_resource`` keeps): each thread's cursor and pinned generation, the writer of each
    store spec, and how many times a faulted store was dropped. One object, :data:`_server`."""

    local: threading.local = field(default_factory=threading.local)
    writers: dict[tuple[str, str, str | None], Store] = field(default_factory=dict)
    drops: int = 0


_server = _ServerStore()


class StoreUnavailable(RuntimeError):
    """The store cannot be opened (catalog unreachable, disk fault, a legacy file held by another
    process); one line."""


def spec() -> StoreSpec:
    """The store ``gpuscope ui`` named: ``$GPUSCOPE_STORE``, else the local store at
    ``$GPUSCOPE_DB``, else the default local store."""
    return parse_spec(None)


def db_path() -> str:
    """The store as shown to users (a password in a URL is ``***``); also the store part of every
    cache key."""
    return spec().shown()


def _open(kind: str, location: str, data_path: str | None) -> Store:
    """Open the store; a failure is one line (StoreUnavailable)."""
    s = StoreSpec(kind, location, data_path)
    try:
        return open_store(s)
    except GpuscopeError as e:  # one line already: bad spec, catalog unreachable, legacy file held
        hint = " Reload to retry."
        if kind == "duckdb" and "lock" in str(e).lower():
            hint = (
                " A legacy DuckDB store is one process's; a store folder (the default) is shared "
                "by every process. Reload to retry."
            )
        raise StoreUnavailable(f"{e}.{hint}") from None
    except (duckdb.Error, OSError) as e:  # e.g. the disk is still full
        raise StoreUnavailable(
            f"cannot open the store: {store_fault(e, s.shown())}. Reload to retry."
        ) from None


#: DuckDB's memory limit of the reading instance, shared by every session's analyses (the
#: working tables spill to the store's temp directory beyond it), unless the store's own is
#: lower. DuckDB's default, 80 % of RAM, let one big run's analysis take the machine.
READING_MEMORY_LIMIT = "1GB"


@st.cache_resource(show_spinner=False)
def _open_store(kind: str, location: str, data_path: str | None) -> Store:
    store = _open(kind, location, data_path)
    store.cap_memory_limit(READING_MEMORY_LIMIT)
    return store


def store() -> Store:
    """The server's open store (opened on first use; reopened after a fault)."""
    s = spec()
    return _open_store(s.kind, s.location, s.data_path)


def writer() -> Store:
    """The connection this server writes with: a DuckDB instance of its own on the same lake
    (as another process's would be), used only under the write lock, one thread at a time.

    Pages read through :func:`cursor` on the reading instance meanwhile. Sharing one instance
    hung uploads: the ingest's instance-wide settings (``threads = 1``, its memory limit) and its
    transaction held the readers' catalog access (issue 11). A legacy DuckDB file has one
    instance per process, so there the writer is this thread's cursor.
    """
    s = spec()
    if s.kind == "duckdb":
        return cursor()
    key = (s.kind, s.location, s.data_path)
    with store().lock.thread_lock:
        w = _server.writers.get(key)
        if w is None:
            w = _server.writers[key] = _open(*key)
        return w


def drop(s: Store) -> None:
    """Close a faulted store's connections (the reading one, every cursor on it, and the writer);
    the next use reopens them. Waits for a write of this server's other threads (not for other
    processes' writers)."""
    with s.lock.thread_lock:
        _server.drops += 1
        _open_store.clear()
        s.close()  # closes the cursors of every thread too
        w = _server.writers.pop((s.spec.kind, s.spec.location, s.spec.data_path), None)
        if w is not None:
            w.close()


def fault(e: BaseException, s: Store | None = None) -> StoreError:
    """Drop the store after a fault that is not bad input; the one-line error to show."""
    s = s or store()
    err = store_fault(e, s.shown())
    drop(s)
    return err


def cursor() -> Store:
    """This thread's cursor on the shared store (created on first use)."""
    s = store()
    entry: tuple[Store, Store] | None = getattr(_server.local, "cursor", None)
    if entry is None or entry[0] is not s:  # none yet, or one of a dropped store (closed)
        entry = (s, s.cursor())
        _server.local.cursor = entry
    return entry[1]


@contextmanager
def writing() -> Iterator[Store]:
    """The store's cross-process write lock, held for the block: other processes' writers (and
    this server's other sessions) wait for it. Each write in the block is its own transaction (an
    ingest is one: all its runs or nothing). The next :func:`generation` of this script run is
    read afresh (even after a failure).

    Bad input (a GpuscopeError) passes through; any other store error (DuckDB, or the OS writing a
    scratch file) drops the connection and is raised as a one-line StoreError.
    """
    s = store()
    try:
        w = writer()
        with w.lock.held():
            yield w
    except StoreError:  # a fault made one line already (PostgreSQL gone mid-commit): reopen next
        drop(s)
        raise
    except GpuscopeError:  # bad input: the store is fine
        raise
    except (duckdb.Error, OSError) as e:
        raise fault(e, s) from None
    finally:
        _server.local.pin = None


def _run_marker() -> object | None:
    """An object that is new for each script run (Streamlit's per-run ``cursors`` dict), else
    None outside a script run."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return getattr(ctx, "cursors", None) if ctx is not None else None


def _pinned() -> int | None:
    pin = getattr(_server.local, "pin", None)
    marker = _run_marker()
    if pin is None or marker is None or pin[0] is not marker:
        return None
    return int(pin[1])


def _read_generation() -> int:
    s = store()
    try:
        g = cursor().generation()
    except duckdb.Error as e:  # the catalog failed: one line, reopen on the next action
        raise fault(e, s) from None
    return _server.drops * EPOCH + g


def begin_script_run() -> int:
    """Read the store's generation for this script run (one catalog query); returns it."""
    _server.local.pin = None
    return generation()


def generation() -> int:
    """A number that changes whenever any process commits to the store. In a script run it is
    read once (at the start, and again after the run's own write) and kept for the run; outside
    one it is read on every call."""
    pinned = _pinned()
    if pinned is not None:
        return pinned
    gen = _read_generation()
    marker = _run_marker()
    _server.local.pin = (marker, gen) if marker is not None else None
    return gen


def query_df(sql: str, params: list[Any] | None = None) -> pd.DataFrame:
    try:
        return cursor().execute(sql, params or []).df()
    except duckdb.FatalException as e:  # the database is invalidated: reopen on the next action
        raise fault(e) from None


def count_rows(table: str) -> int:
    try:
        return run_views.row_count(cursor(), table)
    except duckdb.FatalException as e:
        raise fault(e) from None


# -- cached reads: the first two arguments (path, generation) are the cache key's freshness --------


@st.cache_data(show_spinner=False, max_entries=16)
def runs_df(path: str, gen: int) -> pd.DataFrame:
    """Every run (newest first), one row each, as a DataFrame."""
    return pd.DataFrame(list_runs(cursor()), columns=list(RUN_COLUMNS))


@st.cache_data(show_spinner=False, max_entries=256)
def run_row(path: str, gen: int, run_id: str) -> dict[str, Any] | None:
    """``run_views.run_row``: the run's row of ``runs``, or None."""
    return run_views.run_row(cursor(), run_id)


@st.cache_data(show_spinner=False, max_entries=256)
def ranks_of(path: str, gen: int, run_id: str) -> list[int]:
    """``run_views.ranks_of``: the run's ranks, ascending."""
    return run_views.ranks_of(cursor(), run_id)


def resolve(ref: str | None) -> str | None:
    """A run id (or unique prefix, or exact name) from a URL -> the run id, or None.

    Cached per store generation: every session opening the same run page asks the same question.
    """
    if not ref:
        return None
    return _resolve(db_path(), generation(), ref.strip())


@st.cache_data(show_spinner=False, max_entries=1024)
def _resolve(path: str, gen: int, ref: str) -> str | None:
    from gpuscope.store import resolve_run

    return resolve_run(cursor(), ref)
