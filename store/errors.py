"""Store faults: :class:`StoreError` (a :class:`~gpuscope.vocabulary.errors.StoreFault`, never bad input) and the one-line text of a DuckDB or OS error (:func:`store_fault`)."""

from __future__ import annotations

from gpuscope.vocabulary.errors import StoreFault


def is_conflict(e: BaseException) -> bool:
    """Whether a DuckDB error is a write conflict between transactions (worth a retry)."""
    text = str(e).lower()
    return "conflict" in text or "database is locked" in text


class StoreError(StoreFault):
    """The store (or a scratch file) failed, not the input: disk full, I/O error, a DuckDB fault.

    Not bad input (exit code 1, "nothing was stored" on a page); ``str(err)`` is
    ``<store path>: <what happened>: <DuckDB's or the OS's first line>``.
    """


_FAULTS = (
    (("no space left on device", "disk full", "errno 28"), "the disk holding {} is full"),
    (("file too large", "errno 27"), "{} hit the file-size limit of this process"),
    (("read-only file system", "errno 30"), "{} is on a read-only file system"),
    (("permission denied", "errno 13"), "no permission to write {}"),
    (("database has been invalidated", "invalidated"), "{} was invalidated by an earlier fault"),
    (("out of memory", "memory limit"), "{} ran out of memory"),
)


# What DuckDB's postgres_scanner and libpq say when the catalog's PostgreSQL went away
_CATALOG_LOST = (
    "unable to connect to postgres",
    "server closed the connection",
    "terminating connection",
    "no connection to the server",
    "could not receive data from server",
    "could not send data to server",
    "connection to server at",
    "the database system is shutting down",
    "the database system is starting up",
    "the database system is in recovery mode",
    "ssl syscall error",
    'failed to execute query "rollback"',
    'failed to execute query "commit"',
)
# The last words of libpq's reason, the plain part (e.g. "Connection refused")
_REASONS = (
    "connection refused",
    "server closed the connection unexpectedly",
    "terminating connection due to administrator command",
    "no connection to the server",
    "the database system is shutting down",
    "the database system is starting up",
)


# ... but these are a store that cannot be used (wrong password, no such database), not an outage
_CATALOG_REFUSED = ("authentication failed", "does not exist", "pg_hba.conf", "ssl is not enabled")
# ... nor is a write that conflicted with another writer (Store.retrying tries it again)
_CONFLICT = ("conflict", "could not serialize", "deadlock detected", "database is locked")


def catalog_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says a team store's PostgreSQL stopped answering (not bad input, not a
    bug: the next attempt works once it is back)."""
    text = str(exc).lower()
    if any(n in text for n in (*_CATALOG_REFUSED, *_CONFLICT)):
        return False
    return any(n in text for n in _CATALOG_LOST)


def store_fault(exc: BaseException, store: object, *, during: str | None = None) -> StoreError:
    """A one-line StoreError for an exception that is not bad input (``store``: the store path).

    A DuckDB error is about the store; an OSError is about the file it names, else about a
    temporary file (uploads and scratch batches may sit on another disk than the store). A team
    store whose PostgreSQL stopped answering reads so, in plain words; ``during`` (e.g. ``"the
    commit"``) says when, for a write: then nothing was stored. Every secret is masked
    (every :class:`~gpuscope.vocabulary.errors.GpuscopeError` redacts its text).
    """
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    text = str(exc).lower()
    if not isinstance(exc, OSError) and catalog_lost(exc):
        reason = next((r for r in _REASONS if r in text), "")
        when = f" during {during}" if during else ""
        tail = "; nothing was stored" if during else "; try again once it is back"
        why = f" ({reason})" if reason else ""
        return StoreError(store, f"the team store's PostgreSQL stopped answering{when}{tail}{why}")
    if isinstance(exc, OSError):
        where: object = exc.filename or "a temporary file"
        subject = "it"
        first = exc.strerror or first
    else:
        where, subject = store, "the store"
    what = f"{subject} failed"
    for needles, label in _FAULTS:
        if any(n in text for n in needles):
            what = label.format(subject)
            break
    return StoreError(where, f"{what}: {first}")
