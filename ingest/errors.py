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
