"""The working tables of one rank of one run, on one DuckDB connection: one object owns them.

The analysis reads a rank's GPU activity and runtime calls many times (busy time, idle gaps, steps,
kernels), so :class:`RankIndex` copies them once into temp tables and builds the derived tables
(gaps of a range, the idle attribution of a window) on demand. It owns

- their **names**: every table carries a prefix unique to the index (``_ri<n>_<hex>_``), so two
  ranks, runs or windows never share a table, also on one connection or its cursors;
- their **cache**: a table (or a Python value) is built once per key, the key being what it holds
  (``("gaps", start_ns, end_ns)``), never an object id; the index checks the run's ``runs`` row
  (``created_at``, ``n_events``) whenever :meth:`RankIndex.shared` hands it out (every analysis
  function starts there), before every build and in :meth:`RankIndex.refresh`, and drops
  everything when the run was deleted or ingested again under the same id;
- their **lifetime**: :meth:`RankIndex.close` (or leaving a ``with`` block) drops them; the
  indexes that :meth:`RankIndex.shared` hands out (the last :data:`MAX_SHARED` per connection) are
  closed when pushed out, by :func:`close_shared`, or die with their connection.

Nothing outside this module creates or names a temp table; callers get table names from the index.
Times are integer ns of trace time.
"""

from __future__ import annotations

import itertools
import re
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
from gpuscope.analysis.store_access import (
    COMM_KERNEL_RE,
    DEVICE_SQL,
    GPU_ACTIVITY_SQL,
    HOST_CATS_SQL,
    RUNTIME_CATS_SQL,
    execute,
    regex,
)
from gpuscope.store import LAKE, Store, limit_bytes, settle_snapshot

if TYPE_CHECKING:
    from gpuscope.store import Connection

T = TypeVar("T")

#: A device id that no event has (stands for "no device" in SQL parameters).
NO_DEVICE = -(2**31)
#: A name id that no name has (an empty set of name ids in SQL parameters).
NO_NAME = -1
#: A rank that no rank has (an empty batch in SQL parameters).
NO_RANK = -(2**31)

#: Families of tables of one kind (e.g. gaps of different ranges) an index keeps; the least
#: recently used one is dropped first.
MAX_PER_KIND = 4
#: Shared indexes kept per connection (least recently used ones are closed first).
MAX_SHARED = 4

_SEQ = itertools.count(1)
_SHARED: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, int], RankIndex]] = (
    weakref.WeakKeyDictionary()
)
_SHARED_LOCK = threading.Lock()
#: Connections whose rows do not change for now (:func:`unchanging`): their indexes skip the
#: run-row check of :meth:`RankIndex.refresh`.
_UNCHANGING: weakref.WeakSet[Any] = weakref.WeakSet()
#: The classes of names every rank's analysis asks for (:func:`name_class`), in order.
_NAME_CLASSES: dict[str, None] = {}
#: Connections whose ``names`` change only where :func:`names_changed` is called
#: (:func:`keep_name_ids`), with the name ids read on them: (run, condition, parameters) -> ids.
_KEPT_NAME_IDS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], list[int]]] = (
    weakref.WeakKeyDictionary()
)


class RankIndex:
    """Per-rank working tables of run ``run_id`` on ``con`` (see the module docstring).

    ``window`` (start_ns, end_ns) is the default range of :meth:`gaps`. Tables:
    :meth:`gpu` (GPU activity), :meth:`runtime` (runtime calls), :meth:`gaps` (idle gaps of a
    range), and :meth:`tables` for the families of tables other modules build through the index.
    """

    def __init__(
        self,
        con: Connection,
        run_id: str,
        rank: int,
        window: tuple[int, int] | None = None,
    ) -> None:
        self.con = con
        self.run_id = str(run_id)
        self.rank = int(rank)
        self.window = None if window is None else (int(window[0]), int(window[1]))
        self.prefix = f"_ri{next(_SEQ)}_{uuid.uuid4().hex[:8]}_"
        self._tables: OrderedDict[tuple[Any, ...], dict[str, str]] = OrderedDict()
        self._memo: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._large: set[tuple[Any, ...]] = set()  # keys of the memo's large values
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self._generation = _private_generation(con)  # read before the stamp: see refresh
        self._stamp = self._run_stamp()
        self._checked_in = getattr(con, "snapshot_seq", 0)  # read_snapshot block of the last check
        self.closed = False

    # -- lifetime ---------------------------------------------------------------------------------

    def __enter__(self) -> RankIndex:
        self.refresh()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop every table of the index (idempotent); the index can still be used afterwards
        (tables are rebuilt on demand)."""
        with self._lock:
            self._drop_all()

    def table_names(self) -> list[str]:
        """The temp tables and views the index holds now."""
        with self._lock:
            return [n for names in self._tables.values() for n in names.values()]

    def _drop_all(self) -> None:
        for names in reversed(list(self._tables.values())):
            for name in reversed(list(names.values())):
                _drop(self.con, name)
        self._tables.clear()
        self._memo.clear()
        self._large.clear()

    # -- freshness --------------------------------------------------------------------------------

    def _run_stamp(self) -> tuple[Any, ...] | None:
        try:
            row = self.con.execute(
                "SELECT created_at, n_events FROM runs WHERE run_id = ?", [self.run_id]
            ).fetchone()
        except duckdb.CatalogException:
            return None
        return None if row is None else tuple(row)

    def refresh(self) -> None:
        """Drop everything when the run's ``runs`` row changed (deleted, ingested again). Checked
        once per :func:`~gpuscope.store.read_snapshot` block: within one, the store does not
        change."""
        with self._lock:
            if self.con in _UNCHANGING:
                return
            seq = getattr(self.con, "snapshot_seq", 0)
            if seq and seq == self._checked_in:
                return
            generation = _private_generation(self.con)
            if generation is not None and generation == self._generation:
                return  # nothing was committed to this private store since the last check
            self._checked_in = seq
            self._generation = generation
            stamp = self._run_stamp()
            if stamp != self._stamp:
                self._drop_all()
                self._stamp = stamp

    # -- caches -----------------------------------------------------------------------------------

    def tables(
        self,
        key: tuple[Any, ...],
        parts: Sequence[str],
        build: Callable[[dict[str, str]], None],
    ) -> dict[str, str]:
        """Unique names for the family of tables ``parts`` that holds ``key``; ``build(names)``
        creates them (temp tables or views), once per key (``key[0]`` names the kind; the last
        :data:`MAX_PER_KIND` keys of a kind are kept). A build that fails leaves nothing."""
        with self._lock:
            hit = self._tables.get(key)
            if hit is not None:
                self._tables.move_to_end(key)
                return hit
            self.refresh()
            k = next(self._seq)
            names = {p: f"{self.prefix}{_ident(str(key[0]))}{k}_{p}" for p in parts}
            try:
                build(names)
            except BaseException:
                for n in names.values():
                    _drop(self.con, n)
                raise
            settle_snapshot(self.con)
            self._tables[key] = names
            same = [k for k in self._tables if k[0] == key[0]]
            for old in same[: max(0, len(same) - MAX_PER_KIND)]:
                for n in reversed(list(self._tables.pop(old).values())):
                    _drop(self.con, n)
            return names

    def drop(self, key: tuple[Any, ...]) -> None:
        """Drop the family of tables that holds ``key`` (none: nothing)."""
        with self._lock:
            for n in reversed(list(self._tables.pop(key, {}).values())):
                _drop(self.con, n)

    def table(self, key: tuple[Any, ...], sql: str, params: dict[str, Any] | None = None) -> str:
        """A temp table ``AS sql`` (``$``-parameters from ``params``), built once per ``key``."""

        def build(n: dict[str, str]) -> None:
            execute(self.con, f"CREATE TEMP TABLE {n['t']} AS {sql}", params)

        return self.tables(key, ("t",), build)["t"]

    def memo(
        self, key: tuple[Any, ...], compute: Callable[[], T], *, keep: int = 0, large: bool = False
    ) -> T:
        """A Python value computed from the rank's rows, once per ``key``; with ``keep`` > 0 only
        the last ``keep`` values of the kind ``key[0]`` stay (for large values). ``large``: arrays
        per event, which :func:`forget_values` lets go (``compute`` must have no side effect on
        the database: it may run again)."""
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]  # type: ignore[no-any-return]
            self.refresh()
            value = compute()
            self._memo[key] = value
            if large:
                self._large.add(key)
            if keep > 0:
                same = [k for k in self._memo if k[0] == key[0]]
                for old in same[: max(0, len(same) - keep)]:
                    del self._memo[old]
            return value

    # -- the working set --------------------------------------------------------------------------

    def params(self, **kw: Any) -> dict[str, Any]:
        """``$run``/``$rank`` plus ``kw``, for queries over this rank."""
        return {"run": self.run_id, "rank": self.rank, **kw}

    def gpu(self) -> str:
        """GPU activity of the rank (docs/metrics.md "GPU activity"): ``rank``, ``dev``,
        ``stream``, ``s``, ``e`` (ns), ``correlation``, ``external_id``, ``name_id``, ``cat``,
        ``bytes``, ``blocks`` (grid x*y*z), ``rid`` (a row number)."""
        return self.table(("gpu",), gpu_sql(ONE_RANK), self.params())

    def runtime(self) -> str:
        """Runtime/driver calls of the rank with a correlation id: ``rank``, ``correlation``,
        ``s``, ``e``, ``name_id``, ``pid``, ``tid``, in the store's order (``rowid``)."""
        return self.table(("runtime",), runtime_sql(self.host()))

    def host(self) -> str:
        """Host-side events of the rank, every phase: the host spans' categories (``HOST_CATS``)
        and the ends of fwd->bwd flows (``cat = 'fwdbwd'``, ``ph = 'f'``); columns ``rank``,
        ``pid``, ``tid``, ``ph``, ``cat``, ``name_id``, ``ts_ns``, ``dur_ns`` (ns),
        ``correlation``, ``external_id``, in the store's order. Read by the analyses instead of
        scanning ``events`` for each (on a lake store every scan reads the run's Parquet files);
        a query over it keeps its own filters on ``ph``/``cat``, so it selects the same rows as
        over ``events``."""
        return self.table(("host",), host_sql(ONE_RANK), self.params())

    def activity_sql(self, device_filter: str = "") -> str:
        """GPU activity overlapping ``[$ws, $we)``, clipped to it: ``dev``, ``stream``, ``s``,
        ``e``, ``correlation``, ``name_id``, ``cat``."""
        return f"""
            SELECT dev, stream, greatest(s, $ws) AS s, least(e, $we) AS e, correlation, name_id, cat
            FROM {self.gpu()} WHERE s < $we AND e > $ws {device_filter}
        """

    def gaps(self, start_ns: int | None = None, end_ns: int | None = None) -> tuple[str, str]:
        """(gaps, devices) tables of ``[start_ns, end_ns)`` (default: the index's window).

        gaps: every gap of every device with activity: ``dev``, ``gs``, ``ge`` (the gap
        ``[gs, ge)``), ``next_corr``/``next_name`` (the activity that ends it; NULL for the tail
        gap). devices: per device and stream ``dev``, ``stream``, ``active_ns`` (sum of activity
        durations), ``n_events``, ``first_s``, ``last_e``. A device without activity in the range
        is in neither (its whole range is one gap)."""
        if start_ns is None or end_ns is None:
            if self.window is None:
                raise ValueError("RankIndex.gaps: no range given and the index has no window")
            start_ns, end_ns = self.window
        ws, we = int(start_ns), int(end_ns)

        def build(n: dict[str, str]) -> None:
            windows = "(SELECT $rank AS rank, $ws AS ws, $we AS we)"
            build_gaps(self.con, self.gpu(), windows, n, self.params(ws=ws, we=we))

        names = self.tables(("gaps", ws, we), ("dev", "gaps"), build)
        return names["gaps"], names["dev"]

    def name_ids(self, cond: str, params: dict[str, Any] | None = None) -> list[int]:
        """The ids of the run's names that satisfy the SQL condition ``cond`` on the column
        ``name`` (``$``-parameters from ``params``), ascending: read once per index, or once per
        connection and run where the names change only with :func:`names_changed` (a part
        thread's scratch database, :func:`keep_name_ids`), instead of a regular expression over
        the names in every statement that asks (~1 ms each on a DDP rank's 203 names). The
        classes of :func:`name_class` are read together, in one statement (on a lake store each
        is a scan of its catalog and files). Queries take the ids through :func:`ids_param` and
        :func:`in_ids`."""
        key = (cond, tuple(sorted((params or {}).items())))
        with _SHARED_LOCK:
            kept = _KEPT_NAME_IDS.get(self.con)
        with self._lock:
            cache: MutableMapping[tuple[Any, ...], Any]
            if kept is None:
                self.refresh()  # the index's own cache: dropped with the run's tables
                cache, pre = self._memo, ("names",)
            else:
                cache, pre = kept, (self.run_id,)
            hit = cache.get((*pre, *key))
            if hit is not None:
                return list(hit)
            with_it = [key]
            if not params and cond in _NAME_CLASSES:
                with_it += [
                    (c, ()) for c in _NAME_CLASSES if c != cond and (*pre, c, ()) not in cache
                ]
            for k, ids in zip(with_it, self._read_name_ids(with_it, params or {}), strict=True):
                cache[(*pre, *k)] = ids
            return list(cache[(*pre, *key)])

    def _read_name_ids(
        self, conds: list[tuple[str, tuple[Any, ...]]], params: dict[str, Any]
    ) -> list[list[int]]:
        """The name ids of each condition of ``conds`` (ascending), in one statement."""
        flags = ", ".join(f"coalesce(({c}), false) AS c{i}" for i, (c, _) in enumerate(conds))
        rows = execute(
            self.con,
            f"""SELECT * FROM (SELECT name_id, {flags} FROM names WHERE run_id = $run)
                WHERE {" OR ".join(f"c{i}" for i in range(len(conds)))}""",
            {"run": self.run_id, **params},
        ).fetchall()
        return [sorted(int(r[0]) for r in rows if r[i + 1]) for i in range(len(conds))]

    def comm_name_ids(self) -> list[int]:
        """The ids of the run's names of communication kernels (``COMM_KERNEL_RE``), ascending
        (:meth:`name_ids`): every analysis that splits communication from compute asks."""
        return self.name_ids(_COMM_KERNELS)

    def primary_device(self, start_ns: int | None = None, end_ns: int | None = None) -> int | None:
        """The device with the most activity time in the range (ties: lowest id), None if none."""
        _, dev = self.gaps(start_ns, end_ns)
        row = self.con.execute(
            f"SELECT dev FROM {dev} GROUP BY dev ORDER BY sum(active_ns) DESC, dev LIMIT 1"
        ).fetchone()
        return None if row is None else int(row[0])

    # -- sharing ----------------------------------------------------------------------------------

    @classmethod
    def shared(cls, con: Connection, run_id: str, rank: int) -> RankIndex:
        """The index of ``(run_id, rank)`` that the analysis functions share on ``con`` (one per
        connection object: a cursor gets its own). At most :data:`MAX_SHARED` stay per connection;
        the least recently used one is closed."""
        key = (str(run_id), int(rank))
        with _SHARED_LOCK:
            per = _SHARED.get(con)
            if per is None:
                per = OrderedDict()
                _SHARED[con] = per
            ix = per.get(key)
            existing = ix is not None
            if ix is None:
                ix = cls(con, run_id, rank)
            per[key] = ix
            per.move_to_end(key)
            evicted = []
            while len(per) > MAX_SHARED:
                evicted.append(per.popitem(last=False)[1])
        for old in evicted:
            old.close()
        if existing:
            ix.refresh()  # a run deleted or ingested again since: nothing of it is read
        return ix


#: The rank filter of a working table's statement: one rank (``$rank``), or a batch (``$ranks``).
ONE_RANK = "rank = $rank"
MANY_RANKS = "list_contains($ranks, rank)"


def gpu_sql(ranks: str) -> str:
    """The GPU activity of the ranks that ``ranks`` (:data:`ONE_RANK`, :data:`MANY_RANKS`)
    selects: the one definition of :meth:`RankIndex.gpu`'s rows, for one rank or a batch."""
    return f"""SELECT rank, {DEVICE_SQL} AS dev, coalesce(stream, tid) AS stream, ts_ns AS s,
                   ts_ns + dur_ns AS e, correlation, external_id, name_id, cat, bytes,
                   CAST(grid[1] AS BIGINT) * grid[2] * grid[3] AS blocks,
                   row_number() OVER () AS rid
            FROM events
            WHERE run_id = $run AND {ranks} AND {GPU_ACTIVITY_SQL}"""


def cat_among(cats_sql: str) -> str:
    """``cat IN cats_sql`` (a parenthesised list of constants) as a condition that keeps the rows
    in their order: DuckDB makes a long ``IN`` list a join (its ``in_clause`` optimizer), whose
    rows come out in another order on every run with more than one thread; a working table
    made through it has its rows, and ``rowid``, in that order."""
    return f"list_contains([{cats_sql.strip()[1:-1]}], cat)"


def host_sql(ranks: str) -> str:
    """The host-side events of the selected ranks (:meth:`RankIndex.host`'s rows), in the
    store's order (:func:`cat_among`)."""
    return f"""SELECT rank, pid, tid, ph, cat, name_id, ts_ns, dur_ns, correlation, external_id
            FROM events
            WHERE run_id = $run AND {ranks}
              AND ({cat_among(HOST_CATS_SQL)} OR (cat = 'fwdbwd' AND ph = 'f'))"""


def runtime_sql(host: str) -> str:
    """The runtime calls with a correlation id among the host events ``host``
    (:meth:`RankIndex.runtime`'s rows), in their order."""
    return f"""SELECT rank, correlation, ts_ns AS s, ts_ns + dur_ns AS e, name_id, pid, tid
            FROM {host}
            WHERE ph = 'X' AND {cat_among(RUNTIME_CATS_SQL)}
              AND correlation IS NOT NULL AND dur_ns IS NOT NULL"""


def build_gaps(
    con: Connection, gpu: str, windows: str, n: dict[str, str], params: dict[str, Any]
) -> None:
    """Create the tables ``n["dev"]`` and ``n["gaps"]`` (:meth:`RankIndex.gaps`, with ``rank``)
    of the GPU activity ``gpu`` in each rank's window: ``windows`` is a relation of ``rank``,
    ``ws``, ``we`` (one row for one rank, or one per rank of a batch). The activity overlapping
    ``[ws, we)`` is clipped to it; one sorted pass per rank and device (the running maximum of
    the earlier ends) gives every gap."""
    act = f"""
        SELECT g.rank, g.dev, g.stream, greatest(g.s, w.ws) AS s, least(g.e, w.we) AS e,
               g.correlation, g.name_id, w.ws
        FROM {gpu} g JOIN {windows} w ON g.rank = w.rank
        WHERE g.s < w.we AND g.e > w.ws
    """
    execute(
        con,
        f"""CREATE TEMP TABLE {n["dev"]} AS
            SELECT rank, dev, stream, sum(e - s)::BIGINT AS active_ns, count(*) AS n_events,
                   min(s) AS first_s, max(e) AS last_e
            FROM ({act}) GROUP BY rank, dev, stream""",
        params,
    )
    execute(
        con,
        f"""CREATE TEMP TABLE {n["gaps"]} AS
        WITH a AS (
            SELECT rank, dev, s, e, correlation, name_id, ws,
                   max(e) OVER (PARTITION BY rank, dev ORDER BY s, e, correlation, name_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm
            FROM ({act})
        )
        SELECT rank, dev, coalesce(pm, ws) AS gs, s AS ge, correlation AS next_corr,
               name_id AS next_name
        FROM a WHERE s > coalesce(pm, ws)
        UNION ALL
        SELECT d.rank, d.dev, max(d.last_e), w.we, NULL, NULL
        FROM {n["dev"]} d JOIN {windows} w ON d.rank = w.rank
        GROUP BY d.rank, d.dev, w.we HAVING max(d.last_e) < w.we""",
        params,
    )


class RankBatch:
    """The working tables of several ranks of one run at once, on one connection (a part
    thread's scratch database, which holds the batch's rows): :meth:`gpu`, :meth:`host`,
    :meth:`runtime` and :meth:`gaps` hold every rank's rows, with ``rank``, from the same
    statements as a :class:`RankIndex`'s (one statement a table for the batch: on a small rank
    a statement's cost is mostly fixed); :meth:`tables` makes the analyses' own tables of the
    batch (the idle attribution's). A rank's index is a batch of one: the analyses run the same
    statements over either.

    Its tables live until :meth:`close`, or the end of the transaction that made them."""

    def __init__(self, con: Connection, run_id: str, ranks: Sequence[int]) -> None:
        self.con = con
        self.run_id = str(run_id)
        self.ranks = sorted({int(r) for r in ranks})
        self.prefix = f"_rb{next(_SEQ)}_{uuid.uuid4().hex[:8]}_"
        self._tables: dict[tuple[Any, ...], dict[str, str]] = {}
        self._seq = itertools.count(1)

    def params(self, **kw: Any) -> dict[str, Any]:
        """``$run``/``$ranks`` plus ``kw``, for queries over the batch."""
        return {"run": self.run_id, "ranks": self.ranks or [NO_RANK], **kw}

    def tables(
        self, key: tuple[Any, ...], parts: Sequence[str], build: Callable[[dict[str, str]], None]
    ) -> dict[str, str]:
        """Unique names for the batch's family of tables ``parts`` that holds ``key``;
        ``build(names)`` creates them, once per key (as :meth:`RankIndex.tables`)."""
        hit = self._tables.get(key)
        if hit is None:
            k = next(
                self._seq
            )  # tables of one kind for other keys (windows) get names of their own
            hit = {p: f"{self.prefix}{_ident(str(key[0]))}{k}_{p}" for p in parts}
            build(hit)
            self._tables[key] = hit
        return hit

    def name_ids(self, cond: str, params: dict[str, Any] | None = None) -> list[int]:
        """:meth:`RankIndex.name_ids` (the run's names: the same for every rank)."""
        return RankIndex.shared(self.con, self.run_id, self.ranks[0]).name_ids(cond, params)

    def comm_name_ids(self) -> list[int]:
        """:meth:`RankIndex.comm_name_ids`."""
        return self.name_ids(_COMM_KERNELS)

    def _ctas(self, kind: str, sql: str, params: dict[str, Any] | None = None) -> str:
        """A table of the batch ``AS sql``, built once per kind."""

        def build(n: dict[str, str]) -> None:
            execute(self.con, f"CREATE TEMP TABLE {n['t']} AS {sql}", params)

        return self.tables((kind,), ("t",), build)["t"]

    def gpu(self) -> str:
        """:meth:`RankIndex.gpu` of every rank of the batch."""
        return self._ctas("gpu", gpu_sql(MANY_RANKS), self.params())

    def host(self) -> str:
        """:meth:`RankIndex.host` of every rank of the batch."""
        return self._ctas("host", host_sql(MANY_RANKS), self.params())

    def runtime(self) -> str:
        """:meth:`RankIndex.runtime` of every rank of the batch."""
        return self._ctas("runtime", runtime_sql(self.host()))

    def gaps(self, windows: dict[int, tuple[int, int]]) -> tuple[str, str]:
        """(gaps, devices) tables of each rank's ``[start_ns, end_ns)`` (``windows``: rank ->
        range; ranks left out have no rows), as :meth:`RankIndex.gaps` gives them for one."""
        key = ("gaps", tuple(sorted((int(r), int(a), int(b)) for r, (a, b) in windows.items())))
        rows = [(r, a, b) for r, a, b in key[1]]

        def build(n: dict[str, str]) -> None:
            w = (
                "(SELECT unnest($wr) AS rank, unnest($wa) AS ws, unnest($wb) AS we)"
                if rows
                else "(SELECT NULL::INTEGER AS rank, NULL::BIGINT AS ws, NULL::BIGINT AS we LIMIT 0)"
            )
            p = {"wr": [r[0] for r in rows], "wa": [r[1] for r in rows], "wb": [r[2] for r in rows]}
            build_gaps(self.con, self.gpu(), w, n, p if rows else {})

        names = self.tables(key, ("dev", "gaps"), build)
        return names["gaps"], names["dev"]

    def close(self) -> None:
        """Drop the batch's tables (idempotent)."""
        for names in reversed(list(self._tables.values())):
            for name in reversed(list(names.values())):
                _drop(self.con, name)
        self._tables.clear()


def close_shared(con: Connection) -> None:
    """Close the shared indexes of ``con`` (drops their tables; they are rebuilt when needed)."""
    with _SHARED_LOCK:
        per = _SHARED.pop(con, None)
    for ix in (per or {}).values():
        ix.close()


def forget_shared(con: Connection) -> None:
    """Let go of the shared indexes of ``con`` without a statement, once the transaction that made
    their tables is about to be rolled back (which drops every one of them at once): a part
    thread's scratch database ends each rank that way instead of one DROP per table (about 20
    statements of ~0.3 ms a rank)."""
    with _SHARED_LOCK:
        per = _SHARED.pop(con, None)
    for ix in (per or {}).values():
        with ix._lock:
            ix._tables.clear()
            ix._memo.clear()
            ix._large.clear()


def forget_values(con: Connection, kinds: Sequence[str] | None = None) -> None:
    """Let the shared indexes of ``con`` forget their large Python values (:meth:`RankIndex.memo`
    with ``large``: a 1 GB rank's top-level spans and launches are ~20 MB), keeping their tables
    and other values; a value is computed again when next asked for. ``kinds``: only the values
    whose key starts with one of these (None: every large value)."""
    with _SHARED_LOCK:
        indexes = list((_SHARED.get(con) or {}).values())
    for ix in indexes:
        with ix._lock:
            gone = [k for k in ix._large if kinds is None or k[0] in kinds]
            for key in gone:
                ix._memo.pop(key, None)
                ix._large.discard(key)


@contextmanager
def unchanging(con: Connection) -> Iterator[None]:
    """A block in which nothing writes to ``con``'s tables (a part thread's scratch database
    while it computes one rank's parts): the indexes on it check the run's row when they are
    made, not again before every table (13 checks of ~0.35 ms each in a rank's part)."""
    _UNCHANGING.add(con)
    try:
        yield
    finally:
        _UNCHANGING.discard(con)


def ids_param(ids: list[int]) -> list[int]:
    """Name ids as a SQL list parameter (see :func:`in_ids`): ``[NO_NAME]`` for none, since
    DuckDB cannot type an empty list."""
    return ids or [NO_NAME]


#: Longest list of ids that :func:`in_ids` tests with ``list_contains``.
SHORT_IDS = 32


def in_ids(column: str, param: str, ids: list[int]) -> str:
    """SQL: whether ``column`` is one of the ids of the list parameter ``$param`` (``ids`` as
    :func:`ids_param` gives them). ``list_contains`` reads the whole list for each row: cheapest
    for a few ids; ``= ANY`` is a hash join, for long lists (the 625 step names of a long trace:
    0.13 s against 0.93 s over 2 M host events)."""
    if len(ids) <= SHORT_IDS:
        return f"list_contains(${param}, {column})"
    return f"{column} = ANY(${param})"


def name_class(cond: str) -> str:
    """Register ``cond`` (a SQL condition on ``name``, no parameters) as a class of names that
    the analysis of every rank asks for: :meth:`RankIndex.name_ids` reads the ids of all of
    them in one statement. Returns ``cond``."""
    with _SHARED_LOCK:
        _NAME_CLASSES.setdefault(cond, None)
    return cond


_COMM_KERNELS = name_class(regex(COMM_KERNEL_RE))


def keep_name_ids(con: Connection) -> None:
    """Keep the name ids that :meth:`RankIndex.name_ids` reads on ``con`` across its indexes (the
    ranks of a part thread's scratch database share the run's names), until
    :func:`names_changed`: whoever calls this must call that whenever ``con``'s ``names`` rows
    change."""
    with _SHARED_LOCK:
        _KEPT_NAME_IDS.setdefault(con, {})


def names_changed(con: Connection) -> None:
    """``con``'s ``names`` rows changed: the name ids kept for it (:func:`keep_name_ids`) are
    read again when next asked for."""
    with _SHARED_LOCK:
        kept = _KEPT_NAME_IDS.get(con)
        if kept is not None:
            kept.clear()


#: DuckDB's memory while an analysis builds and reads a rank's working tables, tried in order:
#: beyond it they spill to the store's temp directory (``SET temp_directory``, store/opening.py);
#: a limit DuckDB runs out of (an operator that cannot spill) is tried again at the next. Never
#: above the connection's own limit. The 2.0 GB rank's ``analyze --json``: peak 0.51 GB at
#: 128 MB, 0.63 GB at 256 MB, the same CPU (docs/benchmarks.md, "bounded: part A").
WORKING_MEMORY_LIMITS = ("128MB", "256MB", "1GB")


def set_memory_limit_back(con: Connection, own: str) -> None:
    """Set DuckDB's memory limit back to ``own`` (as ``current_setting`` wrote it, rounded down to
    its last digit): where that text reads back lower, half its last digit more, so that the
    limit reads back as ``own`` (not a little lower after each document)."""
    con.execute(f"SET memory_limit = '{own}'")
    row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?\s*([A-Za-z]+)", own.strip())
    if row is not None and str(row[0]) != own and m is not None:
        up = float(f"{m[1]}.{m[2] or 0}") + 0.5 * 10 ** -len(m[2] or "")
        con.execute(f"SET memory_limit = '{up} {m[3]}'")


#: DuckDB working memory a rank's analysis needs per event of the rank, bytes: a limit below
#: ``events × this`` is not tried (:func:`within_working_memory`'s ``run_ids``). Its sorts and
#: window functions spill, but not every operator: at 128 MB the 10.0 GB rank of
#: docs/benchmarks.md (30.1 M events) ran out of memory 15 s into its analysis and began it again
#: at 256 MB; its 6.7 GB cut (20.2 M) and 4.0 GB cut (12.0 M) ran whole at 128 MB.
WORKING_BYTES_PER_EVENT = 6


def largest_rank_events(con: Connection, run_ids: Sequence[str]) -> int:
    """The most events of one rank among ``run_ids``' ranks (0: none stored)."""
    if not run_ids:
        return 0
    row = con.execute(
        "SELECT max(n_events) FROM ranks WHERE list_contains(?, run_id)", [list(run_ids)]
    ).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def within_working_memory(
    con: Connection,
    compute: Callable[[], T],
    limits: Sequence[str] | None = None,
    *,
    run_ids: Sequence[str] = (),
) -> T:
    """``compute()`` with DuckDB's memory limit at each of ``limits`` in turn (default
    :data:`WORKING_MEMORY_LIMITS`; where one is not below the connection's own limit, the own
    is tried instead of it and those after), the connection's own limit set back after. On
    running out of memory at a limit, the shared indexes of ``con`` are closed (their tables are
    made again at the next); at the last, the error propagates. ``run_ids``: the runs that
    ``compute`` analyses; a limit below their largest rank's events ×
    :data:`WORKING_BYTES_PER_EVENT` is not tried (the last always is)."""
    limits = WORKING_MEMORY_LIMITS if limits is None else limits
    need = largest_rank_events(con, run_ids) * WORKING_BYTES_PER_EVENT
    if need:
        limits = [lim for lim in limits[:-1] if (limit_bytes(lim) or 0) >= need] + [limits[-1]]
    row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    own = str(row[0]) if row else None
    own_bytes = limit_bytes(own) if own is not None else None
    tries: list[str | None] = [  # None: the connection's own
        lim for lim in limits if own_bytes is None or (limit_bytes(lim) or own_bytes) < own_bytes
    ]
    if own is not None and len(tries) < len(limits):
        tries.append(None)
    if not tries:
        return compute()
    try:
        for limit in tries[:-1]:
            con.execute(f"SET memory_limit = '{limit}'")
            try:
                return compute()
            except duckdb.OutOfMemoryException:
                close_shared(con)
        last = tries[-1]
        if last is None:
            set_memory_limit_back(con, str(own))
        else:
            con.execute(f"SET memory_limit = '{last}'")
        return compute()
    finally:
        if own is not None:
            set_memory_limit_back(con, own)


@contextmanager
def rank_index(
    con: Connection, run_id: str, rank: int, window: tuple[int, int] | None = None
) -> Iterator[RankIndex]:
    """A private :class:`RankIndex` for one block; its tables are dropped when it ends."""
    ix = RankIndex(con, run_id, rank, window)
    try:
        yield ix
    finally:
        ix.close()


@contextmanager
def run_names(con: Connection, run_id: str) -> Iterator[bool]:
    """Inside a :func:`~gpuscope.store.read_snapshot` block of a lake store: the run's rows
    of ``names`` copied once into a temp table ``names`` that shadows the lake's (DuckDB looks up
    an unqualified name in ``temp`` first) for the block's statements on ``con``. An analysis
    looks names up ~25 times, each a lake scan with its catalog queries (5-8 ms); every lookup
    filters on the run, so the answers are the same. Dropped when the block ends, also on an
    error. Yields whether it was made (not outside a block, nor when a ``names`` temp table is
    there already: a nested block keeps the outer one's)."""
    seq = getattr(con, "snapshot_seq", 0)
    if not seq or con in _NAMES_SHADOW:
        yield False
        return
    quoted = "'" + str(run_id).replace("'", "''") + "'"
    con.execute(
        f"CREATE TEMP TABLE names AS SELECT * FROM {LAKE}.main.names WHERE run_id = {quoted} "
        "ORDER BY name_id"
    )
    _NAMES_SHADOW[con] = seq
    try:
        yield True
    finally:
        drop_run_names(con)


def _private_generation(con: Connection) -> int | None:
    """The commit count of a private in-memory store (``":memory:"``: no other connection reaches
    it, its cursors share the count, and every write commits through :meth:`Store.writing`),
    which :meth:`RankIndex.refresh` reads instead of asking the store (~1 ms a statement, ~60
    an analysis); None for any other store, and inside a write transaction (its rows change
    before its commit is counted), where the store is asked."""
    if (
        isinstance(con, Store)
        and con.spec.kind == "duckdb"
        and con.spec.location == ":memory:"
        and not con._tx
    ):
        return con.generation()
    return None


#: The connections whose ``names`` shadow (:func:`run_names`) is there, and the block that made
#: it: a nested block keeps it without asking DuckDB (``duckdb_tables()`` lists the lake's tables
#: too, through its catalog: 13 ms a call on a local lake).
_NAMES_SHADOW: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def drop_run_names(con: Connection) -> None:
    """Drop the ``names`` shadow of :func:`run_names` (also after its block rolled back: a shadow
    committed mid-block survives a ROLLBACK)."""
    _NAMES_SHADOW.pop(con, None)
    try:
        con.execute("DROP TABLE IF EXISTS temp.main.names")
    except duckdb.TransactionException:
        return  # the block's transaction is aborted: its ROLLBACK (or close) drops it


def _ident(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)[:16]


def _drop(con: Connection, name: str) -> None:
    for kind in ("TABLE", "VIEW"):
        try:
            con.execute(f"DROP {kind} IF EXISTS {name}")
            return
        except duckdb.CatalogException:
            continue  # a view dropped as a table, or the other way round
        except duckdb.Error:
            return  # the connection is closed: its temp tables are gone with it
