"""Per-rank summaries: each rank's analysis computed where its data lands, stored with the rank.

A summary is a set of named **parts** (:class:`SummaryPart`), each a JSON document about one rank
of one run, computed from that rank's events only. The orchestrating code (``gpuscope ingest``,
the dashboard's upload) calls :func:`write_rank_summaries` inside the ingest's transaction, so a
rank is never stored without its summary (a part that fails rolls the whole ingest back), but for
a rank too big to copy into memory (:func:`too_big_to_copy`): its parts are computed right after
the ingest commits, outside any transaction, where DuckDB can spill their working tables
(:func:`store_outside_transaction`); until they are stored, :func:`load` computes them. A run's
page and ``analyze`` then read :func:`load` (one row per rank) instead of every rank's events.

Every row carries its part's ``version``. A part whose definition changes bumps its version; rows
of another version are stale: :func:`load` recomputes them in memory (analyses only read), and
:func:`refresh`, when called, recomputes and stores them, so the cost is paid once per run and
version.

New parts plug in with :func:`register` (e.g. a per-rank collective table)::

    register(SummaryPart("collectives", 1, "per collective instance ...", compute_fn))

``compute_fn(con, run_id, rank)`` returns JSON-ready data (dicts, lists, numbers, strings, None);
it must read only that rank's rows.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
from gpuscope.analysis import rank_frames, rank_row, report, report_part
from gpuscope.analysis.rank_index import (
    RankBatch,
    close_shared,
    forget_shared,
    forget_values,
    keep_name_ids,
    names_changed,
    unchanging,
)
from gpuscope.analysis.store_access import ranks_of
from gpuscope.analysis.stored_parts import TABLE, read
from gpuscope.analysis.stored_parts import finite as _finite
from gpuscope.store import Store, now_utc, release_free_memory, transaction

if TYPE_CHECKING:
    from concurrent.futures import Future

    from gpuscope.ingest.rank_rows import RankRows
    from gpuscope.store import Connection


Compute = Callable[["Connection", str, int], Any]
ComputeBatch = Callable[["RankBatch"], dict[int, Any]]


@dataclass(frozen=True)
class SummaryPart:
    """One named part of a rank's summary: ``compute(con, run_id, rank)`` -> JSON-ready data;
    ``version`` is bumped whenever what it computes changes (stored rows of another version are
    recomputed when next read)."""

    name: str
    version: int
    doc: str
    compute: Compute
    #: The same part of every rank of a batch (:class:`RankBatch`, rank -> data), its statements
    #: run once for the batch, on the connection that holds every rank's rows of the batch. None:
    #: :attr:`compute`, rank by rank (each rank's own rows under ``events``).
    compute_batch: ComputeBatch | None = None
    #: The columns of ``events`` it reads (None: any): the ingest keeps only the columns its
    #: parts read of the rows it hands to :class:`PartsWhileIngesting`.
    columns: tuple[str, ...] | None = None


PARTS: dict[str, SummaryPart] = {}


def register(part: SummaryPart) -> SummaryPart:
    """Add a part to the registry (every later ingest computes it; runs stored before get it when
    next read). Raises ValueError for a name already taken by another part."""
    have = PARTS.get(part.name)
    if have is not None and have is not part:
        raise ValueError(f"summary part {part.name!r} is registered already")
    if part.version < 1:
        raise ValueError(f"summary part {part.name!r}: version must be >= 1")
    PARTS[part.name] = part
    return part


def _parts(names: Iterable[str] | None) -> list[SummaryPart]:
    if names is None:
        return list(PARTS.values())
    out = []
    for n in names:
        if n not in PARTS:
            raise ValueError(f"no summary part {n!r} (parts: {', '.join(PARTS)})")
        out.append(PARTS[n])
    return out


def current(
    con: Connection, run_id: str, parts: Iterable[str] | None = None
) -> set[tuple[int, str]]:
    """The (rank, part) pairs of ``run_id`` stored at their part's current version."""
    want = {p.name: p.version for p in _parts(parts)}
    rows = con.execute(
        f"SELECT rank, part, version FROM {TABLE} WHERE run_id = ?", [run_id]
    ).fetchall()
    return {(int(r), str(p)) for r, p, v in rows if want.get(str(p)) == int(v)}


def missing(
    con: Connection, run_id: str, parts: Iterable[str] | None = None
) -> list[tuple[int, SummaryPart]]:
    """The (rank, part) pairs of ``run_id`` not stored at the current version (rank order)."""
    have = current(con, run_id, parts)
    return [(r, p) for r in ranks_of(con, run_id) for p in _parts(parts) if (r, p.name) not in have]


def write_rank_summaries(
    con: Connection, run_id: str, parts: Iterable[str] | None = None, *, big_ranks: bool = True
) -> int:
    """Compute and store every part (or ``parts``) of every rank of ``run_id`` that is missing or
    stale, inside the caller's transaction (stale rows are replaced). Returns the rows written.
    An exception propagates: the caller's transaction then rolls back with the ingest.

    ``big_ranks=False`` leaves out the ranks too big to copy (:func:`too_big_to_copy`): computed
    on the store inside a transaction, their working tables cannot spill, so they are for
    :func:`store_outside_transaction` once the ingest has committed."""
    todo = missing(con, run_id, parts)
    if not big_ranks:
        big = set(too_big_to_copy(con, run_id))
        todo = [(r, p) for r, p in todo if r not in big]
    rows = _compute_rows(con, run_id, todo)
    _store_rows(con, run_id, todo, rows)
    return len(rows)


def too_big_to_copy(con: Connection, run_id: str) -> list[int]:
    """The ranks of ``run_id`` with more than :data:`MAX_IN_MEMORY_EVENTS` events (or no count):
    their parts are computed on the store, not on an in-memory copy."""
    rows = con.execute("SELECT rank, n_events FROM ranks WHERE run_id = ?", [run_id]).fetchall()
    return sorted(int(r) for r, n in rows if _too_big(n))


def _too_big(n_events: Any) -> bool:
    """Whether a rank of ``n_events`` events (None: unknown) is too big to copy into memory."""
    return n_events is None or int(n_events) > MAX_IN_MEMORY_EVENTS


def store_outside_transaction(
    con: Connection, run_id: str, parts: Iterable[str] | None = None, *, keep_indexes: bool = False
) -> int:
    """Compute the missing or stale parts of ``run_id`` outside any transaction, then store them in
    one of their own. Returns the rows written (0 if the run was deleted or ingested again
    meanwhile: nothing is stored for it).

    Outside a transaction DuckDB can spill the working tables of a rank too big to copy to disk.
    Inside the ingest's transaction it could not: a 6 GB one-rank trace (18.2 M events) failed
    with "Out of Memory" under the ingest's memory limit (docs/benchmarks.md). The run's rows
    no longer change once it is committed, so the statements need no common snapshot. DuckDB's
    memory is the first of :data:`PARTS_MEMORY_LIMITS`, the next one for parts that ran out.

    ``con`` must not be inside a transaction (a store in one, or in a read snapshot, is refused;
    a bare DuckDB connection cannot be told apart and is the caller's to vouch for).

    ``keep_indexes``: the rank indexes the parts built on ``con`` (their working tables) stay open
    once the parts are computed, for the caller's next analysis of the run to reuse (the ingest's
    ``analyze`` document: the 1 GB rank's window, GPU, host and runtime tables are not built
    twice); the caller closes them (:func:`~gpuscope.analysis.rank_index.close_shared`). Made
    outside any transaction, they survive it. Otherwise, and whenever computing fails, they are
    closed here."""
    if isinstance(con, Store) and (con._tx or con.snapshot_seq):
        raise ValueError("store_outside_transaction: the connection is inside a transaction")
    todo = missing(con, run_id, parts)
    if not todo:
        return 0
    stamp = _run_stamp(con, run_id)
    release_free_memory()  # what the ingest's parse and flush threads freed (docs/benchmarks.md)
    row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    own = str(row[0]) if row else None
    rows: list[list[Any]] = []
    try:
        for i, limit in enumerate(PARTS_MEMORY_LIMITS):
            con.execute(f"SET memory_limit = '{limit}'")
            try:
                rows = _compute_rows(con, run_id, todo, keep_indexes=keep_indexes)
                break
            except duckdb.OutOfMemoryException:
                if i == len(PARTS_MEMORY_LIMITS) - 1:
                    raise  # nothing was stored: the run's parts are computed when read
    finally:
        if own is not None:  # the write needs the store's own: a 6 GB rank's part is ~43 MB
            con.execute(f"SET memory_limit = '{own}'")

    def work() -> int:
        with transaction(con):
            if stamp is None or _run_stamp(con, run_id) != stamp:
                return 0  # deleted or ingested again since: these parts are of another run
            _store_rows(con, run_id, todo, rows)
            return len(rows)

    return con.retrying(work) if isinstance(con, Store) else work()


def _run_stamp(con: Connection, run_id: str) -> tuple[Any, ...] | None:
    row = con.execute("SELECT created_at, n_events FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return tuple(row) if row is not None else None


def _compute_rows(
    con: Connection,
    run_id: str,
    todo: list[tuple[int, SummaryPart]],
    *,
    keep_indexes: bool = False,
) -> list[list[Any]]:
    """The rows of ``todo``'s (rank, part) pairs, computed on copies of small ranks and on ``con``
    for the others (:func:`_rank_copies`). The shared rank indexes of ``con`` are closed after,
    but with ``keep_indexes`` once every part is computed (see :func:`store_outside_transaction`)."""
    rows: list[list[Any]] = []
    if not todo:
        return rows
    by_rank: dict[int, list[SummaryPart]] = {}
    for rank, part in todo:
        by_rank.setdefault(rank, []).append(part)
    done = False
    try:
        for rank, on in _rank_copies(con, run_id, list(by_rank)):
            # nothing writes the run's rows while its parts are computed: its indexes check the
            # run row once (on a lake each check is a catalog query: ~24 ms, 37 of them for a
            # 3 M-event rank's parts)
            with unchanging(on):
                for part in by_rank[rank]:
                    doc = json.dumps(_finite(part.compute(on, run_id, rank)), allow_nan=False)
                    rows.append([run_id, rank, part.name, part.version, doc, now_utc()])
                    if on is con:  # a rank too big to copy: the next part starts from less
                        forget_values(on)
                        release_free_memory()
        done = True
    finally:
        if not (done and keep_indexes):
            close_shared(con)  # the working tables die with a rolled-back transaction
    return rows


def _store_rows(
    con: Connection, run_id: str, todo: list[tuple[int, SummaryPart]], rows: list[list[Any]]
) -> None:
    """Replace the rows of ``todo``'s (rank, part) pairs with ``rows`` (the caller's transaction):
    one DELETE for every pair (on a lake each statement is a catalog round: ~50 ms)."""
    if todo:
        con.execute(
            f"DELETE FROM {TABLE} WHERE run_id = ? AND list_contains(?, (rank, part)::"
            "STRUCT(r INTEGER, p VARCHAR))",
            [run_id, [{"r": int(rank), "p": part.name} for rank, part in todo]],
        )
    if rows:
        con.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", rows)


class StoreAfterIngest:
    """``ingest_paths``'s ``after_trace`` hook, inside the ingest's transaction: every rank just
    written gets the parts of :data:`EVERY_RANK` (the cross-rank part, from which ``analyze``
    matches the run's collectives and splits each rank's busy time); a run of ONE rank gets every
    other part (the Runs list reads its ``rank_row`` and ``headline``), and the cross-rank part too
    when its trace names a world size above 1 (``ingest --job``: the other ranks come later). The
    other parts of a run of several ranks would never be read and cost about 1 CPU s per rank
    (docs/benchmarks.md, "Many ranks"); :func:`write_rank_summaries` stores them for any run when
    called.

    A run of several rank files computes its ranks' parts while it is ingested: the ingest hands
    each rank's rows to :meth:`rank_sink`'s :class:`PartsWhileIngesting` as soon as the rank is
    written, which computes them on other threads while the next ranks are parsed (a rank too big
    to keep in memory is computed here, after the ingest, from the store; one too big to copy,
    once the ingest has committed: what this hook returns)."""

    def __init__(self, *, document: bool = False) -> None:
        #: Whether the run's ``analyze --json`` document is stored once the ingest has committed
        #: (:func:`gpuscope.analysis.report_part.store`): ``gpuscope ingest`` does, where
        #: ``analyze`` follows; uploads and the sample runs do not (the Run page does not read
        #: it, and it costs a full analysis: 1.5-4.6 CPU s on the sample runs).
        self.document = document

    def __call__(self, con: Connection, result: Any) -> Callable[[Connection], int] | None:
        """Store the parts of the ranks small enough to copy now; return what computes and stores
        the others once the ingest has committed (:func:`store_outside_transaction`), then, with
        :attr:`document`, the run's ``analyze`` document where its lowest rank has at most
        :data:`DOCUMENT_MAX_EVENTS` events."""
        run_id = str(result.run_id)
        if int(getattr(result, "n_ranks", 0) or 0) != 1:
            parts: list[str] = list(EVERY_RANK)
        else:
            from gpuscope.analysis.ranks import world_sizes

            # one rank of a job of several (its other nodes report later): its cross-rank part too
            several = (world_sizes(con, [run_id]).get(run_id) or 1) > 1
            parts = [p for p in PARTS if several or p not in EVERY_RANK]
        write_rank_summaries(con, run_id, parts, big_ranks=False)
        big = bool(too_big_to_copy(con, run_id))

        def after_commit(after: Connection) -> int:
            document = self.document and document_fits(after, run_id)
            try:
                # the document reuses the working tables the parts built on the store
                n = (
                    store_outside_transaction(after, run_id, parts, keep_indexes=document)
                    if big
                    else 0
                )
                if not document:
                    return n
                # the run's analyze document last: it reads the parts stored above; on the
                # store where a rank too big to copy left its working tables there, else on an
                # in-memory copy of the ranks it reads
                return n + int(report_part.store(after, run_id, copy=not big))
            finally:
                close_shared(after)

        return after_commit

    def rank_sink(self, run_id: str, jobs: int) -> PartsWhileIngesting:
        return PartsWhileIngesting(run_id, EVERY_RANK, jobs)


store_after_ingest = StoreAfterIngest()
#: ``gpuscope ingest``'s hook: the parts, then the run's ``analyze --json`` document.
store_after_ingest_with_document = StoreAfterIngest(document=True)


class SummaryLater:
    """``ingest_paths``' ``after_trace`` hook ``hook``, whose work once the ingest has committed
    (the summary parts of ranks too big to copy, the run's ``analyze`` document) is left to
    the run's reader where DuckDB runs out of memory there: the runs are stored and whole by
    then, and whatever summary is not stored is computed when the run is read (``analyze``, its
    page). ``failed``: (run id, the error's first line) of each run it was left for, for the
    face's note (the CLI's, the upload's, the sample loader's log)."""

    def __init__(self, hook: Callable[[Any, Any], Callable[[Any], int] | None]) -> None:
        self.hook = hook
        self.failed: list[tuple[str, str]] = []

    def __call__(self, con: Any, result: Any) -> Callable[[Any], int] | None:
        later = self.hook(con, result)
        if later is None:
            return None
        run_id = str(result.run_id)

        def after(after_con: Any) -> int:
            try:
                return later(after_con)
            except duckdb.OutOfMemoryException as e:
                self.failed.append((run_id, (str(e).splitlines() or [""])[0]))
                return 0

        return after

    def rank_sink(self, run_id: str, jobs: int) -> Any:
        """``hook``'s sink for a run of several rank files (its parts computed while the next
        ranks parse: ``ingest.rank_rows.RankSinks``), None where it has none."""
        sink = getattr(self.hook, "rank_sink", None)
        return sink(run_id, jobs) if sink is not None else None


#: The most events of a run's lowest rank for which the ingest stores its ``analyze`` document:
#: the largest rank whose whole analysis was measured in bounded memory (the 10.0 GB rank of
#: ``benchmarks/big_rank_device.sh``, 30.1 M events: ``analyze --json`` from its events peaked at
#: 888 MiB, 164 CPU s, under DuckDB's working limits and the analyses' batches). A bigger rank's
#: document is computed when ``analyze`` asks, or stored by ``gpuscope maintain --analyses``.
DOCUMENT_MAX_EVENTS = 32_000_000


def document_fits(con: Connection, run_id: str) -> bool:
    """Whether ``run_id``'s lowest rank has at most :data:`DOCUMENT_MAX_EVENTS` events."""
    row = con.execute(
        "SELECT n_events FROM ranks WHERE run_id = ? ORDER BY rank LIMIT 1", [run_id]
    ).fetchone()
    return row is not None and row[0] is not None and int(row[0]) <= DOCUMENT_MAX_EVENTS


class PartsWhileIngesting:
    """A :class:`~gpuscope.ingest.rank_rows.RankSink`: each rank's ``parts``, computed from its
    rows on ``jobs`` threads (the ingest's parse threads' number) while the ingest goes on.
    Ranks go in batches (:data:`BATCH_RANKS` ranks, :data:`BATCH_EVENTS` events at most), each
    in an in-memory database of its thread's (:func:`_new_scratch`; each batch in a transaction
    of its own, rolled back after it), where a part's :attr:`SummaryPart.compute_batch` runs its
    statements once for the batch; :meth:`store` waits for them and writes their rows. At most
    ``jobs + 1`` batches wait or are computed at a time (the writer waits for the oldest beyond
    that), so memory stays bounded."""

    def __init__(self, run_id: str, parts: Iterable[str], jobs: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.run_id = run_id
        self.parts = _parts(parts)
        #: the event columns the parts read (None: every one), all the ingest keeps for them
        self.columns = _columns_of(self.parts)
        self.jobs = max(1, int(jobs))
        self._pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="gpuscope-parts")
        self._futures: list[Future[list[list[Any]]]] = []
        self._batch: list[RankRows] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._scratches: list[Any] = []

    def rank_written(self, rows: RankRows) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        if any(r.rank == rows.rank for r in self._batch):
            self._submit()  # a batch holds a rank once (its tables are keyed by rank)
        self._batch.append(rows)
        if not batch_is_full(self._batch):
            return
        self._submit()
        while True:
            for f in self._futures:  # a batch that failed fails the ingest now, not at its end
                if f.done() and f.exception() is not None:
                    f.result()
            pending = [f for f in self._futures if not f.done()]
            if len(pending) <= self.jobs:
                return
            wait(pending, return_when=FIRST_COMPLETED)

    def _submit(self) -> None:
        if self._batch:
            batch, self._batch = self._batch, []
            self._futures.append(self._pool.submit(self._compute, batch))

    def _compute(self, batch: list[RankRows]) -> list[list[Any]]:
        import pyarrow as pa

        on = self._thread_scratch()
        self._sync_names(on, batch[-1].names)  # the run's names so far: every rank's of the batch
        by_rank = {rows.rank: rows for rows in batch}
        # One transaction a batch, rolled back at its end: the batch's rows (registered and
        # inserted) and every working table its parts made are gone in one statement, and the
        # scratch is as _new_scratch left it, also after a part failed.
        every = pa.concat_tables([r.events for r in batch])
        on.execute("BEGIN TRANSACTION")
        try:
            _fill(
                on,
                {"events": every},
                {
                    "threads": [t for r in batch for t in r.threads],
                    "ranks": [x for r in batch for x in r.ranks],
                },
            )
            out = []
            with unchanging(on):  # the scratch's rows stay as filled until the rollback
                events = None  # whose rows ``events`` holds: None, the batch's
                docs: dict[str, dict[int, Any]] = {}
                for part in self.parts:
                    if part.compute_batch is not None:
                        if events is not None:
                            forget_shared(on)
                            on.register("events", every)
                            events = None
                        docs[part.name] = part.compute_batch(
                            RankBatch(on, self.run_id, list(by_rank))
                        )
                        continue
                    docs[part.name] = {}
                    for rank, rows in by_rank.items():
                        forget_shared(on)  # the last rank's index: its tables are of its rows
                        on.register("events", rows.events)  # the rank's own rows
                        events = rank
                        docs[part.name][rank] = part.compute(on, self.run_id, rank)
                for rank in by_rank:
                    for part in self.parts:
                        doc = json.dumps(_finite(docs[part.name][rank]), allow_nan=False)
                        out.append([self.run_id, rank, part.name, part.version, doc, now_utc()])
            return out
        finally:
            forget_shared(on)  # their tables go with the rollback
            on.execute("ROLLBACK")

    def _sync_names(self, on: Any, names: Any) -> None:
        """Make the scratch's ``names`` table (a table of its own, outside the ranks'
        transactions) hold the rows of ``names``: the run's names known so far, which only grow
        during an ingest, in the order their ids were given (the ingest's ``IdMap``). Only the rows
        added since the thread's last rank are inserted; anything else (fewer rows, another id at
        the last row held) refills the table. A native table, not registered Arrow rows: the
        parts read it about eight times a rank, each Arrow scan ~0.5 ms dearer. The name ids
        that the ranks' parts read from it are kept across ranks (:func:`keep_name_ids`) and
        forgotten here whenever the table changes."""
        held, last = getattr(self._local, "names", (0, None))
        n = names.num_rows
        ids = names.column("name_id")
        if n < held or (held and ids[held - 1].as_py() != last):
            names_changed(on)
            on.execute("DELETE FROM names")
            held = 0
        if n > held:
            names_changed(on)  # also if the insert fails: the next rank refills the table
            on.register("_gpuscope_new_names", names.slice(held))
            try:
                on.execute("INSERT INTO names SELECT * FROM _gpuscope_new_names")
            finally:
                on.unregister("_gpuscope_new_names")
        self._local.names = (n, ids[n - 1].as_py() if n else None)

    def _thread_scratch(self) -> Any:
        """This thread's scratch database (:func:`_new_scratch`), made on its first rank and
        emptied after each by a rollback (a new database per rank cost ~30 ms of a DDP rank's ~170 ms)."""
        on = getattr(self._local, "scratch", None)
        if on is None:
            on = _new_scratch(_THREAD_VIEWED)
            keep_name_ids(on)  # its ranks share the run's names: :meth:`_sync_names` tells changes
            with self._lock:
                self._scratches.append(on)
            self._local.scratch = on
        return on

    def store(self, con: Connection) -> None:
        self._submit()
        rows = [r for f in self._futures for r in f.result()]
        if rows:
            con.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        for f in self._futures:
            f.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._futures = []
        with self._lock:
            scratches, self._scratches = self._scratches, []
        for on in scratches:
            close_shared(on)
            on.close()


def _columns_of(parts: list[SummaryPart]) -> tuple[str, ...] | None:
    """Every column of ``events`` the parts read, in the table's order (None: one reads any)."""
    from gpuscope.store.schema import EVENTS

    if any(p.columns is None for p in parts):
        return None
    want = {c for p in parts for c in p.columns or ()}
    return tuple(c.name for c in EVENTS.columns if c.name in want)


#: The most ranks, and events, in one batch of :class:`PartsWhileIngesting`: a batch is handed to
#: a part thread once it holds either. A DDP rank of 24,656 events is ~2.9 MB of kept Arrow rows
#: (the part's columns, :attr:`SummaryPart.columns`), held until its batch is computed: ten a
#: batch; small ranks sixteen. A DDP rank's part, CPU ms (this project's 2-core VM,
#: benchmarks/part_cost.py): 94 alone, 45 in threes, 28 in eights, 25 in sixteens. 128 DDP ranks'
#: ingest (VM, three runs each): 8.7-9.9 s and 630-660 MB at 120k events, 8.3-8.5 s and 725-740
#: MB at 240k, 8.2 s and 785-810 MB at 400k (docs/benchmarks.md).
BATCH_RANKS = 16
BATCH_EVENTS = 240_000


def batch_is_full(batch: list[RankRows]) -> bool:
    """Whether :class:`PartsWhileIngesting` hands ``batch`` to a part thread now: it holds
    :data:`BATCH_RANKS` ranks, or :data:`BATCH_EVENTS` events."""
    return len(batch) >= BATCH_RANKS or sum(r.events.num_rows for r in batch) >= BATCH_EVENTS


#: A rank with at most this many events is copied into a database of its own for its parts.
MAX_IN_MEMORY_EVENTS = 1_000_000
#: DuckDB's memory while :func:`store_outside_transaction` computes parts on the store, tried in
#: order: the working tables of a rank too big to copy spill to disk beyond it, but some of its
#: statements need more than the first limit on the largest ranks (a 6 GB one-rank trace, 18 M
#: events, ran out at 64 MB in the idle attribution; 1 GB and 3 GB ranks do not), so parts that
#: run out of memory are computed again at the next one. The first keeps the 1 GB trace's ingest
#: at its parse peak (docs/benchmarks.md); the second gave the 6 GB rank about 1 GB peak RSS and
#: holds the 10 GB one (30 M events); the last is there so that a statement which outgrows the
#: second costs memory, not the ingest (at 160 MB alone a 10 GB rank's ingest failed when one
#: statement sorted its 2.2 M launched kernels in DuckDB).
PARTS_MEMORY_LIMITS = ("64MB", "160MB", "1GB")
_COPIED = ("runs", "ranks", "names", "threads", "events")  # the rank's rows; others stay empty
SCRATCH_MEMORY_LIMIT = "512MB"


@contextmanager
def _rank_copy(con: Connection, run_id: str, rank: int) -> Iterator[Any]:
    """The connection to compute one rank's parts on: a new in-memory DuckDB database holding the
    store's tables with only this rank's rows of ``events``/``threads`` and the run's of ``runs``,
    ``ranks``, ``names`` (every part filters on the run and rank, so it reads the same rows).

    Why: the parts make ~20 working tables per rank; made inside the ingest's transaction, DuckDB
    keeps each one's memory until the commit, so a folder of many ranks ran out of memory (1,024
    small ranks: 152 MiB, the ingest's limit); and each statement on a lake goes through the
    catalog and Parquet files. The copy is closed (all its memory freed) after the rank. A rank
    with more than :data:`MAX_IN_MEMORY_EVENTS` events is computed on ``con`` itself."""
    row = con.execute(
        "SELECT n_events FROM ranks WHERE run_id = ? AND rank = ?", [run_id, rank]
    ).fetchone()
    if row is None or _too_big(row[0]):
        yield con
        return
    with _copy_of(con, run_id, [rank]) as on:
        yield on


def _rank_copies(con: Connection, run_id: str, ranks: list[int]) -> Iterator[tuple[int, Any]]:
    """(rank, connection to compute its parts on) for every rank of ``ranks``, in order: as
    :func:`_rank_copy`, but ranks are copied in batches of at most :data:`MAX_IN_MEMORY_EVENTS`
    events together, with one read of the store per batch (a read per rank scans the events of
    every rank written in the ingest's transaction again: quadratic in a folder of many ranks).
    The parts filter on the rank, so a batch's database serves each of its ranks; the working
    tables of one rank are dropped before the next (:func:`close_shared`)."""
    sizes = dict(
        con.execute(
            "SELECT rank, coalesce(n_events, 0) FROM ranks WHERE run_id = ?", [run_id]
        ).fetchall()
    )
    batch: list[int] = []
    held = 0

    def flush() -> Iterator[tuple[int, Any]]:
        with _copy_of(con, run_id, batch) as on:
            for r in batch:
                yield r, on
                close_shared(on)

    for rank in ranks:
        n = sizes.get(rank)
        if n is None or _too_big(n):  # too big to copy: computed on con
            yield rank, con
            continue
        if batch and held + int(n) > MAX_IN_MEMORY_EVENTS:
            yield from flush()
            batch, held = [], 0
        batch.append(rank)
        held += int(n)
    if batch:
        yield from flush()


@contextmanager
def _copy_of(con: Connection, run_id: str, ranks: list[int]) -> Iterator[Any]:
    """A new in-memory database holding the store's tables with the rows of ``ranks`` (events,
    threads) and of the run (runs, ranks, names): :func:`_rank_copy` for several ranks at once."""
    tables = {}
    for name in _COPIED:
        per_rank = " AND list_contains($ranks, rank)" if name in ("events", "threads") else ""
        params = {"run": run_id, "ranks": list(ranks)} if per_rank else {"run": run_id}
        tables[name] = con.execute(
            f"SELECT * FROM {name} WHERE run_id = $run{per_rank}", params
        ).to_arrow_table()
    with _scratch(tables, {}) as scratch:
        yield scratch


#: The tables a part thread's scratch reads straight from the rank's Arrow rows (its ``names`` is
#: a table of its own: :meth:`PartsWhileIngesting._sync_names`).
_THREAD_VIEWED = ("events",)


def _new_scratch(viewed: Iterable[str] = ()) -> Any:
    """A new in-memory DuckDB database (one thread, :data:`SCRATCH_MEMORY_LIMIT`) with the store's
    tables, empty, but for ``viewed``: those are Arrow rows that :func:`_fill` registers under
    the table's name (read in place, not copied: the copy of a DDP rank's 24,656 events was
    14 ms of its part's ~135 ms)."""
    from gpuscope.store.schema import TABLES

    scratch = duckdb.connect(":memory:", config={"threads": 1})  # not a thread per core first
    scratch.execute(f"SET memory_limit = '{SCRATCH_MEMORY_LIMIT}'")
    # A list of constants (``cat IN ('kernel', ...)``) stays a comparison, not a join against the
    # list: on one small rank's rows the join's fixed cost is the larger (a DDP rank's part: ~6 %
    # less CPU; the same rows, benchmarks/part_cost.py). The store's own connection keeps it.
    scratch.execute("SET disabled_optimizers = 'in_clause'")
    for table in TABLES:
        if table.name not in viewed:
            scratch.execute(table.ddl(keys=False))
    return scratch


def _fill(scratch: Any, tables: dict[str, Any], rows: dict[str, list[Any]]) -> None:
    """Give ``scratch`` the rank's rows: ``tables`` (Arrow, by table name; the dict is emptied
    once they are in) are registered under their table's name, which :func:`_new_scratch` left
    out, and ``rows`` (lists of rows, by table name) inserted into its empty tables."""
    for name, arrow in tables.items():
        scratch.register(name, arrow)  # the scratch database's own name for the rows
    for name, values in rows.items():
        if values:
            one = "(" + ", ".join(["?"] * len(values[0])) + ")"
            scratch.execute(
                f"INSERT INTO {name} VALUES " + ", ".join([one] * len(values)),
                [v for row in values for v in row],
            )
    tables.clear()


@contextmanager
def _scratch(tables: dict[str, Any], rows: dict[str, list[Any]]) -> Iterator[Any]:
    """A new in-memory DuckDB database with the store's tables (empty), filled with ``tables``
    and ``rows`` (:func:`_fill`); closed at the end."""
    scratch = _new_scratch(tables)
    try:
        _fill(scratch, tables, rows)
        yield scratch
    finally:
        close_shared(scratch)
        scratch.close()


def refresh(con: Connection, run_id: str, parts: Iterable[str] | None = None) -> int:
    """Store the missing or stale parts of ``run_id`` in a transaction of their own (the lazy
    recomputation after a version change, or for a run stored before the part existed). Returns
    the rows written; 0 without a write (nothing stale, ``con`` is a bare DuckDB connection, or a
    store inside a transaction or a read snapshot: :func:`load` computes them in memory there)."""
    if not isinstance(con, Store) or con._tx or con.snapshot_seq:
        return 0  # a bare connection may be inside a transaction that cannot be told apart
    return store_outside_transaction(con, run_id, parts)


def load(con: Connection, run_id: str, part: str, *, compute: bool = True) -> dict[int, Any]:
    """Part ``part`` of every rank of ``run_id``, by rank: the stored rows of the current version;
    a rank without one is computed from its events (not stored; see :func:`refresh`) when
    ``compute``, else left out."""
    p = _parts([part])[0]
    return read(con, run_id, p.name, p.version, p.compute if compute else None)


# ---------------------------------------------------------------------------------------------------
# The parts gpuscope computes


def _rank_row(con: Connection, run_id: str, rank: int) -> dict[str, Any]:
    return report.rank_row(con, run_id, rank).to_json()  # read back by RankRow.from_stored


def _headline(con: Connection, run_id: str, rank: int) -> dict[str, Any]:
    doc = report.analyze_run(con, run_id, rank=rank, all_ranks=False, details=False).to_json()
    for key in ("run", "ranks", "straggler", "recommendations"):
        doc.pop(key, None)
    doc["steps"] = []  # the steps part holds them
    return doc


def _steps(con: Connection, run_id: str, rank: int) -> list[dict[str, Any]]:
    from gpuscope.analysis.busy import busy_in_ranges, busy_summary
    from gpuscope.analysis.steps import find_window
    from gpuscope.analysis.store_access import ms, pct

    w = find_window(con, run_id, rank)
    bounds = w.step_bounds_ns()
    device = busy_summary(con, run_id, rank, w.start_ns, w.end_ns, per_stream=False).device
    busy = (
        busy_in_ranges(con, run_id, rank, bounds, device=device, window=(w.start_ns, w.end_ns))
        if device is not None
        else [None] * len(bounds)
    )
    return [
        {
            "number": s.number,
            "start_ns": b[0],
            "end_ns": s.end_ns,
            "duration_ms": ms(b[1] - b[0]),
            "busy_pct": pct(sb, b[1] - b[0]) if sb is not None else None,
        }
        for s, b, sb in zip(w.steps, bounds, busy, strict=True)
    ]


def _kernels(con: Connection, run_id: str, rank: int) -> dict[str, Any] | None:
    from gpuscope.analysis.kernels import kernel_breakdown
    from gpuscope.analysis.steps import find_window

    k = kernel_breakdown(con, run_id, rank, find_window(con, run_id, rank))
    doc = k.to_json()
    return {"by_category": doc.get("by_category"), "total_us": doc.get("total_us")}


RANK_ROW = register(
    SummaryPart(
        rank_row.PART,
        rank_row.VERSION,
        "the rank's line of `analyze`'s `ranks`: GPU busy %, mean step ms, communication-only "
        "and idle µs per step, idle by cause",
        _rank_row,
    )
)
HEADLINE = register(
    SummaryPart(
        "headline",
        1,
        "`analyze --json` of the rank without details: window, step time, busy, idle by cause, "
        "tensor cores, FLOPs, MFU",
        _headline,
    )
)
STEPS = register(
    SummaryPart(
        "steps",
        2,
        "per step: number, start and end (trace ns: the later of its CPU end and the end of the "
        "GPU work it launched), duration (ms), GPU busy (%)",
        _steps,
    )
)
KERNELS = register(
    SummaryPart("kernels", 1, "kernel time by category (µs) over the window", _kernels)
)


CROSS_RANK = register(
    SummaryPart(
        rank_frames.NAME,
        rank_frames.VERSION,
        "what the run's cross-rank figures need of the rank (gpuscope.analysis.rank_frames): its "
        "window, busy, idle by cause, collective frame and the parts of its communication kernels "
        "not covered by compute",
        rank_frames.compute,
        rank_frames.compute_batch,
        rank_frames.COLUMNS,
    )
)
#: The parts every rank of every run gets at its ingest; the others only a run of one rank's.
EVERY_RANK = (CROSS_RANK.name,)
