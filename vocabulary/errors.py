"""The one error root: every error gpuscope reports to a person is a :class:`GpuscopeError`.

Each kind says what went wrong in one line (``<what>: <problem>``, secrets masked by
:func:`gpuscope.vocabulary.redact.redact`) and which exit code the CLI ends with. The faces
translate it once each: ``gpuscope.cli.main`` (one ``gpuscope: ...`` line on stderr, then
:attr:`GpuscopeError.exit_code`) and the page wrapper in ``gpuscope.web.main`` (one error box).

========================  ===========================================  =========
kind                      meaning                                      exit code
========================  ===========================================  =========
:class:`BadInput`         a file, option or reference that is wrong     2
:class:`NotFound`         a run (or tag) that no store holds            2
:class:`Ambiguous`        a reference that matches several runs         2
:class:`StoreFault`       the store failed, not the input (disk full,   1
                          PostgreSQL gone, a DuckDB fault)
========================  ===========================================  =========

``gpuscope.ingest.errors.IngestError`` is :class:`BadInput` under its historical name;
``StoreError`` is a :class:`StoreFault`, never bad input.
"""

from __future__ import annotations

from typing import ClassVar

from gpuscope.vocabulary.redact import redact


class GpuscopeError(Exception):
    """An error for a person. ``str(err)`` is one line, ``<path>: <problem>``, with no secret."""

    exit_code: ClassVar[int] = 1
    """What ``gpuscope`` exits with when this error ends a command."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = redact(path)
        self.problem = redact(" ".join(str(problem).split()))  # always one line, no secret
        super().__init__(f"{self.path}: {self.problem}")


class BadInput(GpuscopeError):
    """The input is wrong (a damaged file, a bad option or store spec): the user can fix it."""

    exit_code = 2


class NotFound(GpuscopeError):
    """What the user named does not exist (a run id, name or tag)."""

    exit_code = 2


class Ambiguous(GpuscopeError):
    """What the user named matches several things (a run name or id prefix); lists them."""

    exit_code = 2


class StoreFault(GpuscopeError):
    """The store (or a scratch file) failed, not the input: disk full, I/O error, a DuckDB fault,
    the team catalog's PostgreSQL gone. Trying again later may work."""

    exit_code = 1
