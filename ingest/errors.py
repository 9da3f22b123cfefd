"""The one error type ingest raises for bad input: a one-line reason that names the file."""

from __future__ import annotations


class IngestError(Exception):
    """Bad input. ``str(err)`` is one line: ``<path>: <problem>``."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = " ".join(str(problem).split())  # always one line
        super().__init__(f"{self.path}: {self.problem}")


class DuplicateRunError(IngestError):
    """The same content was ingested before; ``run_id`` names the existing run."""

    def __init__(self, path: object, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(path, f"already ingested as run {run_id}")


class StoreError(IngestError):
    """The store (or a scratch file) failed, not the input: disk full, I/O error, a DuckDB fault.

    Subclass of IngestError so every caller that reports bad input as one line reports this the
    same way; ``str(err)`` is ``<store path>: <what happened>: <DuckDB's or the OS's first line>``.
    """


_FAULTS = (
    (("no space left on device", "disk full", "errno 28"), "the disk holding {} is full"),
    (("file too large", "errno 27"), "{} hit the file-size limit of this process"),
    (("read-only file system", "errno 30"), "{} is on a read-only file system"),
    (("permission denied", "errno 13"), "no permission to write {}"),
    (("database has been invalidated", "invalidated"), "{} was invalidated by an earlier fault"),
    (("out of memory", "memory limit"), "{} ran out of memory"),
)


def store_fault(exc: BaseException, store: object) -> StoreError:
    """A one-line StoreError for an exception that is not bad input (``store``: the store path).

    A DuckDB error is about the store; an OSError is about the file it names, else about a
    temporary file (uploads and scratch batches may sit on another disk than the store).
    """
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    text = str(exc).lower()
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
