"""Transactions and read snapshots over a :class:`~gpuscope.store.connection.Store` or a bare DuckDB connection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import duckdb
from gpuscope.store.connection import Connection, Store, rollback_quietly
from gpuscope.store.stopping import raise_if_stopping

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
        raise_if_stopping()  # a stop whose exception was lost on its way: no commit after it
        con.execute("COMMIT")
    except BaseException:
        rollback_quietly(con)  # a failed COMMIT (disk full) may leave the transaction open
        raise
