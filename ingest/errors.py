"""Bad input as ingest reports it: :class:`IngestError` (the vocabulary's
:class:`~gpuscope.vocabulary.errors.BadInput` under the name every reader of a file has known) and
:class:`DuplicateRunError`. A store fault is :class:`gpuscope.store.errors.StoreError`, never bad
input.

Their text is made by :func:`gpuscope.vocabulary.redact.redact`: no password, key or token of a
store reaches ``str(err)``, whatever DuckDB, libpq or the caller put in it.
"""

from __future__ import annotations

from gpuscope.vocabulary.errors import BadInput

IngestError = BadInput
"""Bad input. ``str(err)`` is one line: ``<path>: <problem>``."""


class DuplicateRunError(IngestError):
    """The same content was ingested before; ``run_id`` names the existing run."""

    def __init__(self, path: object, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(path, f"already ingested as run {run_id}")
