"""One rank's rows, handed over as soon as the rank is written, so that its summary is computed on
another thread while the ingest parses the next ranks (:class:`RankSink`).

The ingest keeps a rank's event rows (Arrow, as they are written) only while the rank has at most
:data:`MAX_KEPT_EVENTS` events; a bigger rank is not handed over, and its summary is computed from
the store after the ingest (the serial way), so memory stays bounded by the sink's queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa

#: A rank with more events than this is not kept in memory for its sink.
MAX_KEPT_EVENTS = 1_000_000


@dataclass
class RankRows:
    """What the store holds of one rank once it is written, inside the ingest's transaction:
    rows of ``events`` (``events``, its rows only; the sink's :attr:`RankSink.columns` of them,
    ``run_id`` dictionary-encoded), ``threads`` (its rows), ``ranks`` (its own
    row: a part reads no other rank's, and handing every rank written so far to each rank cost
    a quadratic copy, 17 ms a rank at 128 ranks) and ``names`` (every name of the run known so
    far: a superset of those its events use), each in the store's column order."""

    run_id: str
    rank: int
    events: pa.Table
    threads: list[tuple[Any, ...]]
    ranks: list[list[Any]]
    names: pa.Table


class RankSink(Protocol):
    """Takes the ranks of one trace run as they are written (:meth:`rank_written`, in the
    writer's thread, in file order) and, once every rank is written, stores what it made of
    them in the ingest's transaction (:meth:`store`, which raises the first error of any rank).
    :meth:`close` stops it and frees it whatever happened (never raises).

    A sink may say which columns of ``events`` it reads (``columns``, a tuple of names; without
    the attribute, or None: every column): only those are kept for it, so that more of a rank's
    rows fit in the memory the ingest allows its sink."""

    def rank_written(self, rows: RankRows) -> None: ...

    def store(self, con: Any) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class RankSinks(Protocol):
    """An ``after_trace`` hook that also gives each trace run of several rank files a
    :class:`RankSink` (``rank_sink(run_id, jobs)``, ``jobs``: the ingest's parse threads, the
    threads the sink may use; None: no sink for this run)."""

    def __call__(self, con: Any, result: Any) -> Any: ...

    def rank_sink(self, run_id: str, jobs: int) -> RankSink | None: ...
