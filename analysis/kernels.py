"""GPU kernel time: categories from kernel names, top kernels, regions and launching ops.

Names are classified once per distinct name (``names`` table, thousands of rows) in Python; every
per-event step (clipping to the window, joining launches, finding the launching CPU op) runs in
DuckDB and numpy, never per event in Python.

Times: the kernel time of a window is the sum of the durations of one device's GPU activity
(docs/metrics.md "Event classes": kernels, memcpy, memset with a positive duration; by default the
rank's primary device, as in busy time) clipped to the window, so a kernel half inside the window counts half. Kernels that run at the same
time on different streams each count in full; this is kernel time, not GPU-busy time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from copy import deepcopy
from dataclasses import asdict, dataclass, field
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
from gpuscope.analysis.event_classes import (
    COPY_CATS,
    KERNEL_CATS,
    MEMCPY_CATS,
    OP_CATS,
    OPTIMIZER_RE,
    PROFILER_STEP_RE,
)
from gpuscope.analysis.kernel_names import (  # re-exported: the kernel-name vocabulary
    CATEGORIES,
    CATEGORY_RULES,
    Rule,
    classify_kernel,
    matching_rule,
    rules_markdown,
    short_name,
)
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.store_access import execute, regex, sql_list
from gpuscope.analysis.tensor_cores import TensorCoreInfo, tensor_core_info

if TYPE_CHECKING:
    from gpuscope.store import Connection

__all__ = [
    "CATEGORIES",
    "CATEGORY_RULES",
    "REGIONS",
    "KernelBreakdown",
    "KernelClass",
    "KernelRow",
    "OpRow",
    "Rule",
    "classify",
    "classify_kernel",
    "kernel_breakdown",
    "launched",
    "matching_rule",
    "rules_markdown",
    "short_name",
]

REGIONS: tuple[str, ...] = ("forward", "backward", "optimizer", "other")


class WindowLike(Protocol):
    """Anything with ``start_ns``/``end_ns`` (trace time, ns), e.g. ``analysis.steps.Window``."""

    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class KernelClass:
    category: str
    tc: TensorCoreInfo


@lru_cache(maxsize=65536)
def classify(name: str, cat: str = "kernel") -> KernelClass:
    """Category and tensor-core reading of one kernel name."""
    category = classify_kernel(name, cat)
    return KernelClass(category, tensor_core_info(name, category))


# --------------------------------------------------------------------------------------------------
# Data: GPU events of the window with their launch call, and host intervals (numpy, no per-row Python)


#: The window's GPU rows with their launches, unordered: :func:`_launched` puts them in a fixed
#: order, the same on every run whatever DuckDB's threads (the breakdown's float sums add up in
#: it): the launched rows in their launch's order in the store (the runtime table's ``rowid``,
#: ``lrow``), then those without one in theirs (``rid``; ``lrow`` :data:`_NO_LAUNCH`), the order
#: of a one-thread DuckDB's join. A GPU row on several launches has the first of them first. The
#: sort is numpy's, on the fetched columns: DuckDB's ORDER BY of a 10 GB rank's 2.2 M rows ran
#: out of memory under the parts' 160 MB (``rank_summary.PARTS_MEMORY_LIMITS``), where the
#: join alone fits.
_LAUNCHED_SQL = """
    WITH g AS (
        SELECT rid, name_id, cat, correlation, least(e, $end) - greatest(s, $start) AS in_ns
        FROM {gpu} WHERE s < $end AND e > $start {device_filter}
    )
    SELECT g.rid, g.name_id, (g.cat IN {copy_cats})::TINYINT AS copy, g.in_ns,
           coalesce(l.pid, 0) AS pid, coalesce(l.tid, 0) AS tid, coalesce(l.s, -1) AS launch_ns,
           l.s IS NOT NULL AS has_launch, coalesce(l.rowid, $no_launch) AS lrow
    FROM g LEFT JOIN {runtime} l ON g.correlation = l.correlation
"""
_NO_LAUNCH = np.iinfo(np.int64).max
"""``lrow`` of a GPU row without a launch: after every launched row."""


@dataclass
class Launched:
    """GPU events of a window (one row each) and the CPU call that launched them (numpy arrays).

    in_ns: time inside the window, ns. pid/tid/launch_ns: the runtime/driver call (valid where has_launch).
    """

    name_id: np.ndarray
    copy: np.ndarray
    in_ns: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    launch_ns: np.ndarray
    has_launch: np.ndarray

    def __len__(self) -> int:
        return len(self.in_ns)

    def threads(self) -> list[tuple[int, int]]:
        """The (pid, tid) pairs that launched GPU work, ascending."""
        if not self.has_launch.any():
            return []
        pid, tid = self.pid[self.has_launch], self.tid[self.has_launch]
        return [
            (int(p), int(t))
            for p in np.unique(pid).tolist()
            for t in np.unique(tid[pid == p]).tolist()
        ]


def launched(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    *,
    device: int | None = None,
) -> Launched:
    """GPU activity in ``[start_ns, end_ns)`` (docs/metrics.md "Event classes": zero-length
    events are not activity) of ``device`` (None: every device of the rank) with their launches;
    kept by the rank's index per window and device. A rank whose GPU activity is all on
    ``device`` keeps one copy for ``device`` and None (the filter selects every row): a 10 GB
    rank's 2.2 M kernels, read by the FLOPs (every device) and the kernel table and roofline
    (the primary device), are held once."""
    ix = RankIndex.shared(con, run_id, rank)
    if device is not None and ix.memo(("devices",), lambda: _devices(ix)) == (device,):
        device = None
    key = ("launched", int(start_ns), int(end_ns), device)
    return ix.memo(key, lambda: _launched(ix, start_ns, end_ns, device), keep=4, large=True)


def _devices(ix: RankIndex) -> tuple[int | None, ...]:
    """The devices of the rank's GPU activity, ascending (None last: activity without one)."""
    rows = execute(ix.con, f"SELECT DISTINCT dev FROM {ix.gpu()} ORDER BY dev").fetchall()
    return tuple(None if r[0] is None else int(r[0]) for r in rows)


def _launched(ix: RankIndex, start_ns: int, end_ns: int, device: int | None) -> Launched:
    sql = _LAUNCHED_SQL.format(
        gpu=ix.gpu(),
        runtime=ix.runtime(),
        copy_cats=sql_list(COPY_CATS),
        device_filter="" if device is None else "AND dev = $dev",
    )
    p = {"start": int(start_ns), "end": int(end_ns), "dev": device, "no_launch": int(_NO_LAUNCH)}
    names = ("name_id", "copy", "in_ns", "pid", "tid", "launch_ns", "has_launch")
    res = Launched(*launched_rows(streamed_columns(execute(ix.con, sql, p)), names))
    res.has_launch = res.has_launch.astype(bool)
    return res


#: Rows a result is streamed in by :func:`streamed_columns`.
STREAM_BATCH_ROWS = 1 << 18


def streamed_columns(result: Any, rows: int = STREAM_BATCH_ROWS) -> dict[str, np.ndarray]:
    """A DuckDB result's columns as numpy arrays (the types ``fetchnumpy`` gives; columns without
    NULLs), read ``rows`` at a time: DuckDB holds one batch, not the whole result beside its
    arrays (the 10 GB rank's 2.2 M launches: ~60 MB less at the analysis's peak)."""
    reader = result.to_arrow_reader(rows)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in reader.schema.names}
    for batch in reader:
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            if column.null_count:
                raise ValueError(f"streamed_columns: {name} holds NULLs")
            parts[name].append(column.to_numpy(zero_copy_only=False))
    out: dict[str, np.ndarray] = {}
    for name in list(parts):
        pieces = parts.pop(name)
        dtype = reader.schema.field(name).type.to_pandas_dtype()
        out[name] = np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)
    return out


def launched_rows(fetched: dict[str, Any], names: Sequence[str]) -> list[np.ndarray]:
    """The columns ``names`` of :data:`_LAUNCHED_SQL`'s fetched rows (``rid`` and ``lrow`` among
    ``fetched``), the rows in launch order: by ``lrow``, then ``rid`` (``ORDER BY l.rowid NULLS
    LAST, g.rid``); a ``rid`` on two rows (a correlation id on two calls) is kept at its first,
    and the rows are then by ``rid``. ``fetched`` is emptied as its columns are taken: the 10 GB
    rank's 2.2 M launches were held fetched, in launch order and kept, all at once."""
    order = np.lexsort((np.asarray(fetched["rid"]), np.asarray(fetched.pop("lrow"))))
    rid = np.asarray(fetched.pop("rid"))[order]
    first = np.unique(rid, return_index=True)[1]
    del rid
    keep = order if len(first) == len(order) else order[first]
    del order, first
    return [np.asarray(fetched.pop(c))[keep] for c in names]


@dataclass
class Intervals:
    """Top-level intervals of one thread, sorted by start: ``ts``/``end`` ns and ``name_id``."""

    ts: np.ndarray
    end: np.ndarray
    name_id: np.ndarray

    def lookup(self, t: np.ndarray) -> np.ndarray:
        """Index of the interval containing each time in ``t`` (start <= t <= end), -1 where none."""
        if len(self.ts) == 0:
            return np.full(len(t), -1, dtype=np.int64)
        i = np.searchsorted(self.ts, t, side="right") - 1
        ok = (i >= 0) & (t <= self.end[np.maximum(i, 0)])
        return np.where(ok, i, -1)


def toplevel(ts: np.ndarray, end: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, ...]:
    """Keep the intervals not nested in another (one thread). Sorts by (start, longest first) unless
    already in that order, as Kineto writes them. Besides the result it holds one int64 and two
    bool arrays of the input's length (the main thread of a 1 GB rank: ~1 M CPU ops)."""
    n = len(ts)
    if n == 0:
        return (ts, end, *cols)
    ordered = bool(np.greater_equal(ts[1:], ts[:-1]).all())
    if ordered:  # on a tie of starts, the longer first
        tie = np.flatnonzero(np.equal(ts[1:], ts[:-1]))
        ordered = bool(np.less_equal(end[tie + 1], end[tie]).all())
    if not ordered:
        order = np.lexsort((-end, ts))
        ts, end, cols = ts[order], end[order], tuple(c[order] for c in cols)
    prev_end = np.maximum.accumulate(end)
    top = np.empty(n, dtype=bool)
    top[0] = True
    np.greater_equal(ts[1:], prev_end[:-1], out=top[1:])
    del prev_end
    return (ts[top], end[top], *(c[top] for c in cols))


# In (start, longest first) order, the host table's on a full tie (rowid: the store's), so that
# :func:`toplevel` keeps them as they come. The store's order is by category first; DuckDB sorts
# (spilling beyond its limit) and Python reads the sorted spans in batches.
_HOST_SQL = """
    SELECT ts_ns, dur_ns, name_id FROM {host}
    WHERE pid = $pid AND tid = $tid AND cat IN {cats} AND dur_ns IS NOT NULL
      {extra}
    ORDER BY ts_ns, dur_ns DESC, rowid
"""

#: Rows of a thread's sorted host spans that :func:`toplevel_intervals` holds at a time: what it
#: keeps is the top-level spans alone (the main thread of a 2 GB rank: 1.8 M CPU ops, ~0.2 M
#: top-level ones).
TOPLEVEL_BATCH_ROWS = 1 << 16


def toplevel_of_batches(batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Intervals:
    """:func:`toplevel` of one thread's spans that come in (start, longest first) order, in
    batches of (ts, dur, name_id) arrays (ns): the running maximum of the ends carries from one
    batch to the next, so the result is that of the whole at once."""
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    prev: int | None = None  # the latest end of the spans before the batch
    for ts, dur, nid in batches:
        if not len(ts):
            continue
        end = ts + dur
        run = np.maximum.accumulate(end)
        if prev is not None:
            np.maximum(run, prev, out=run)
        top = np.empty(len(ts), dtype=bool)
        top[0] = prev is None or bool(ts[0] >= prev)
        np.greater_equal(ts[1:], run[:-1], out=top[1:])
        prev = int(run[-1])
        kept.append((ts[top], end[top], nid[top]))
    if not kept:
        empty = np.zeros(0, dtype=np.int64)
        return Intervals(empty, empty.copy(), empty.copy())
    return Intervals(*(np.concatenate([k[i] for k in kept]) for i in range(3)))


def _span_batches(
    con: Connection, sql: str, params: dict[str, Any], rows: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The rows of ``sql`` (``ts_ns``, ``dur_ns``, ``name_id``) as int64 arrays, ``rows`` at a
    time."""
    reader = execute(con, sql, params).to_arrow_reader(rows)
    for b in reader:
        yield tuple(  # type: ignore[misc]
            np.asarray(b.column(c).to_numpy(zero_copy_only=False), dtype=np.int64)
            for c in ("ts_ns", "dur_ns", "name_id")
        )


def toplevel_intervals(
    con: Connection,
    run_id: str,
    rank: int,
    threads: list[tuple[int, int]],
    *,
    cats: tuple[str, ...] = OP_CATS,
    name_ids: list[int] | None = None,
) -> dict[tuple[int, int], Intervals]:
    """Per thread, its top-level host spans (CPU ops by default); ``name_ids`` keeps only spans of
    those names (e.g. optimizer annotations). Kept per thread by the rank's index; read
    :data:`TOPLEVEL_BATCH_ROWS` spans at a time."""
    if not threads or (name_ids is not None and not name_ids):
        return {}
    extra = (
        f"AND name_id IN ({', '.join(str(int(i)) for i in name_ids)})"
        if name_ids is not None
        else ""
    )
    ix = RankIndex.shared(con, run_id, rank)
    sql = _HOST_SQL.format(host=ix.host(), cats=sql_list(cats), extra=extra)

    def load(p: int, t: int) -> Intervals:
        params = ix.params(pid=p, tid=t)
        return toplevel_of_batches(_span_batches(con, sql, params, TOPLEVEL_BATCH_ROWS))

    return {
        (p, t): ix.memo(("toplevel", p, t, cats, extra), partial(load, p, t), large=True)
        for p, t in threads
    }


def name_ids_where(con: Connection, run_id: str, cond: str) -> list[int]:
    """name_ids of one run whose ``name`` satisfies the SQL condition ``cond``."""
    return [
        r[0]
        for r in con.execute(
            f"SELECT name_id FROM names WHERE run_id = ? AND ({cond})", [run_id]
        ).fetchall()
    ]


OPTIMIZER_NAMES_SQL = regex(OPTIMIZER_RE)
EVALUATE_FN_SQL = "name LIKE 'autograd::engine::evaluate_function:%'"
BACKWARD_NAMES_SQL = f"{EVALUATE_FN_SQL} OR regexp_matches(name, 'Backward[0-9]*$')"


def threads_with(
    con: Connection,
    run_id: str,
    rank: int,
    name_ids: list[int],
    cats: tuple[str, ...],
    *,
    fwdbwd_ends: bool = False,
) -> set[tuple[int, int]]:
    """Threads that hold events of the given names (and, with ``fwdbwd_ends``, ends of fwd->bwd flows)."""
    conds = []
    if name_ids:
        conds.append(
            f"(cat IN {sql_list(cats)} AND name_id IN ({', '.join(str(int(i)) for i in name_ids)}))"
        )
    if fwdbwd_ends:
        conds.append("(cat = 'fwdbwd' AND ph = 'f')")
    if not conds:
        return set()
    host = RankIndex.shared(con, run_id, rank).host()
    rows = con.execute(
        f"SELECT DISTINCT pid, tid FROM {host} WHERE {' OR '.join(conds)}"
    ).fetchall()
    return {(int(p), int(t)) for p, t in rows}


def _cached_threads(con: Connection, run_id: str, rank: int, kind: str) -> set[tuple[int, int]]:
    def find() -> set[tuple[int, int]]:
        if kind == "backward":
            return threads_with(
                con,
                run_id,
                rank,
                name_ids_where(con, run_id, EVALUATE_FN_SQL),
                OP_CATS,
                fwdbwd_ends=True,
            )
        return threads_with(
            con,
            run_id,
            rank,
            name_ids_where(con, run_id, regex(PROFILER_STEP_RE)),
            ("user_annotation",),
        )

    return RankIndex.shared(con, run_id, rank).memo(("threads", kind), find)


def backward_threads(con: Connection, run_id: str, rank: int) -> set[tuple[int, int]]:
    """Threads that run only autograd's backward: they hold ``autograd::engine::evaluate_function`` ops
    or receive fwd->bwd flows, and no ``ProfilerStep#`` (on the training-loop thread itself, backward
    is told op by op)."""
    return _cached_threads(con, run_id, rank, "backward") - step_threads(con, run_id, rank)


def step_threads(con: Connection, run_id: str, rank: int) -> set[tuple[int, int]]:
    """Threads holding ``ProfilerStep#`` annotations (the training loop)."""
    return _cached_threads(con, run_id, rank, "step")


REGION_CODES = {r: i for i, r in enumerate(REGIONS)}


def attribute(
    con: Connection, run_id: str, rank: int, lx: Launched
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per GPU event: region code (index in REGIONS), outermost launching CPU op name_id (-1: none) and
    a key of that op instance (-1: none)."""
    n = len(lx)
    region = np.full(n, REGION_CODES["other"], dtype=np.int8)
    op_name = np.full(n, -1, dtype=np.int64)
    op_key = np.full(n, -1, dtype=np.int64)
    threads = lx.threads()
    if not threads:
        return region, op_name, op_key
    tops = toplevel_intervals(con, run_id, rank, threads)
    opt = toplevel_intervals(
        con,
        run_id,
        rank,
        threads,
        cats=("user_annotation", *OP_CATS),
        name_ids=name_ids_where(con, run_id, OPTIMIZER_NAMES_SQL),
    )
    bwd_names = np.asarray(name_ids_where(con, run_id, BACKWARD_NAMES_SQL), dtype=np.int64)
    bwd_threads = backward_threads(con, run_id, rank)
    steps = step_threads(con, run_id, rank)
    base = 0
    for th in threads:
        m = lx.has_launch & (lx.pid == th[0]) & (lx.tid == th[1])
        t = lx.launch_ns[m]
        reg = np.full(len(t), REGION_CODES["other"], dtype=np.int8)
        iv = tops.get(th)
        has_ops = iv is not None and len(iv.ts) > 0
        # Forward is the default only where CPU ops say what ran: a thread with none (a trace
        # recorded with activities=[CUDA]) gives no evidence of any region, so its kernels stay "other".
        if has_ops and (th in steps or not steps):
            reg[:] = REGION_CODES["forward"]
        if iv is not None and has_ops:
            i = iv.lookup(t)
            inside = i >= 0
            names = np.where(inside, iv.name_id[np.maximum(i, 0)], -1)
            op_name[m] = names
            op_key[m] = np.where(inside, base + i, -1)
            base += len(iv.ts)
            bwd_op = inside & np.isin(names, bwd_names)
            reg[bwd_op] = REGION_CODES["backward"]
        if th in bwd_threads:
            reg[:] = REGION_CODES["backward"]
        ov = opt.get(th)
        if ov is not None:
            reg[ov.lookup(t) >= 0] = REGION_CODES["optimizer"]
        region[m] = reg
    return region, op_name, op_key


# --------------------------------------------------------------------------------------------------
# Results


@dataclass
class KernelRow:
    """Aggregate of one kernel name (or the folded 'others' row). Times in µs, of the window."""

    name: str
    category: str
    count: int
    total_us: float
    mean_us: float
    min_us: float
    max_us: float
    tensor_core: bool
    short_name: str = ""
    precision: str | None = None
    share_pct: float = 0.0


@dataclass
class OpRow:
    """A launching CPU op: the outermost ``cpu_op`` around the launch call, on the same thread."""

    op: str
    count: int  # op invocations that launched GPU work in the window
    kernels: int  # GPU events they launched
    kernel_us: float


@dataclass
class KernelBreakdown:
    """Where the window's GPU kernel time went. All times in µs (sum of clipped kernel durations)."""

    total_us: float
    n_kernels: int
    by_category: dict[str, float]
    top: list[KernelRow]
    by_region: dict[str, float]
    by_op: list[OpRow]
    window_us: float
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "total_us": self.total_us,
            "n_kernels": self.n_kernels,
            "window_us": self.window_us,
            "by_category": dict(self.by_category),
            "top": [asdict(r) for r in self.top],
            "by_region": dict(self.by_region),
            "by_op": [asdict(r) for r in self.by_op],
            "notes": list(self.notes),
        }

    def top_df(self) -> pd.DataFrame:
        cols = [f.name for f in KernelRow.__dataclass_fields__.values()]
        return pd.DataFrame([asdict(r) for r in self.top], columns=cols)

    def category_df(self) -> pd.DataFrame:
        return _share_df(self.by_category, "category", self.total_us)

    def region_df(self) -> pd.DataFrame:
        return _share_df(self.by_region, "region", self.total_us)

    def op_df(self) -> pd.DataFrame:
        return pd.DataFrame(
            [asdict(r) for r in self.by_op], columns=["op", "count", "kernels", "kernel_us"]
        )


def _share_df(d: dict[str, float], key: str, total: float) -> pd.DataFrame:
    rows = [
        {key: k, "us": v, "pct": (100.0 * v / total) if total > 0 else 0.0} for k, v in d.items()
    ]
    return pd.DataFrame(rows, columns=[key, "us", "pct"])


def _params(run_id: str, rank: int, window: WindowLike) -> dict[str, Any]:
    return {
        "run": run_id,
        "rank": int(rank),
        "start": int(window.start_ns),
        "end": int(window.end_ns),
    }


def name_lookup(con: Connection, run_id: str, ids: set[int]) -> dict[int, str]:
    """name_id -> name for a set of ids of one run."""
    if not ids:
        return {}
    rows = con.execute(
        "SELECT name_id, name FROM names WHERE run_id = ? AND list_contains(?, name_id)",
        [run_id, sorted(int(i) for i in ids)],
    ).fetchall()
    return dict(rows)


def fold_rows(rows: list[KernelRow], top_n: int) -> list[KernelRow]:
    """The ``top_n`` rows by total time, then one 'others' row whose count/total/min/max/mean are those
    of all the folded kernels together (min of mins, max of maxes, mean = total / count)."""
    rows = sorted(rows, key=lambda r: (-r.total_us, r.name))
    if top_n < 0 or len(rows) <= top_n:
        return rows
    keep, rest = rows[:top_n], rows[top_n:]
    count = sum(r.count for r in rest)
    total = sum(r.total_us for r in rest)
    cats = {r.category for r in rest}
    others = KernelRow(
        name=f"others ({len(rest)} kernels)",
        category=cats.pop() if len(cats) == 1 else "mixed",
        count=count,
        total_us=total,
        mean_us=total / count if count else 0.0,
        min_us=min(r.min_us for r in rest),
        max_us=max(r.max_us for r in rest),
        tensor_core=all(r.tensor_core for r in rest),
        short_name=f"others ({len(rest)} kernels)",
        precision=None,
        share_pct=sum(r.share_pct for r in rest),
    )
    return [*keep, others]


#: The kernel breakdowns a rank index keeps (the last asked for; each range, device and row
#: counts is one).
MEMO_KEEP = 8


def kernel_breakdown(
    con: Connection,
    run_id: str,
    rank: int,
    window: WindowLike,
    *,
    top_n: int = 15,
    top_ops: int = 15,
    device: int | None = None,
) -> KernelBreakdown:
    """Kernel time of one device of a rank in ``window`` (default: the primary device, as in
    busy time): by category, top kernels (+ folded others), region, launching op. Computed once
    per rank index, range, device and row counts (the ingest's ``kernels`` part, then its
    ``analyze`` document: ~0.6 CPU s at 1 GB); each call gets a copy of its own."""
    ix = RankIndex.shared(con, run_id, rank)
    if device is None:
        device = ix.primary_device(window.start_ns, window.end_ns)
    ws, we = int(window.start_ns), int(window.end_ns)
    key = ("kernel_breakdown", ws, we, device, int(top_n), int(top_ops))
    compute = partial(_kernel_breakdown, con, run_id, rank, ws, we, top_n, top_ops, device)
    return deepcopy(ix.memo(key, compute, keep=MEMO_KEEP))


@dataclass(frozen=True)
class Pairs:
    """Each (a, b) pair of two integer arrays as one int64, ordered as the pairs are:
    ``code = (a − a_lo) · span + (b − b_lo)``."""

    code: np.ndarray
    a_lo: int
    b_lo: int
    span: int

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray) -> Pairs:
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        if not len(a):
            return cls(a, 0, 0, 1)
        a_lo, b_lo = int(a.min()), int(b.min())
        span = int(b.max()) - b_lo + 1
        return cls((a - a_lo) * span + (b - b_lo), a_lo, b_lo, span)

    def split(self, codes: np.ndarray) -> tuple[list[int], list[int]]:
        """The (a, b) values of ``codes``, as two lists."""
        return (codes // self.span + self.a_lo).tolist(), (codes % self.span + self.b_lo).tolist()


def group_stats(
    key: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct ``key``, in the order of its first row: the key, its rows, and the sum, min
    and max of ``values`` over them (int64, exact). What pandas' ``groupby(key, sort=False)``
    gives, from one stable sort of the keys (the 10 GB rank's 2.2 M kernels: pandas' two
    groupbys held their factorizations and copies beside the launches)."""
    key, values = np.asarray(key), np.asarray(values)
    if not len(key):
        empty = np.zeros(0, dtype=np.int64)
        return key[:0], empty, values[:0], values[:0], values[:0]
    order = np.argsort(key, kind="stable")
    sk = key[order]
    starts = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1])))
    sv = values[order]
    rows = np.diff(np.append(starts, len(sk)))
    by_first = np.argsort(
        order[starts], kind="stable"
    )  # a stable sort: order[start] is the first row
    return (
        sk[starts][by_first],
        rows[by_first],
        np.add.reduceat(sv, starts)[by_first],
        np.minimum.reduceat(sv, starts)[by_first],
        np.maximum.reduceat(sv, starts)[by_first],
    )


def _kernel_breakdown(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    top_n: int,
    top_ops: int,
    device: int | None,
) -> KernelBreakdown:
    """:func:`kernel_breakdown` computed."""
    lx = launched(con, run_id, rank, start_ns, end_ns, device=device)
    region, op_name, op_key = attribute(con, run_id, rank, lx)
    ns = np.asarray(lx.in_ns, dtype=np.int64)
    by_name = Pairs.of(lx.name_id, lx.copy)
    codes, n_of, sum_of, min_of, max_of = group_stats(by_name.code, ns)
    per_name = list(
        zip(
            zip(*by_name.split(codes), strict=True),
            zip(n_of.tolist(), sum_of.tolist(), min_of.tolist(), max_of.tolist(), strict=True),
            strict=True,
        )
    )
    # per launching op name: its kernels, their time, and its distinct instances (op keys)
    op_ids, op_kernels, op_ns, _, _ = group_stats(op_name, ns)
    instances = Pairs.of(op_name, op_key)
    op_of_instance = np.unique(instances.code) // instances.span + instances.a_lo
    op_u, op_n = np.unique(op_of_instance, return_counts=True)
    n_instances = dict(zip(op_u.tolist(), op_n.tolist(), strict=True))
    ops = [
        (op, n, tot, n_instances[op])
        for op, n, tot in zip(op_ids.tolist(), op_kernels.tolist(), op_ns.tolist(), strict=True)
    ]
    region_ns = (
        np.bincount(region, weights=lx.in_ns, minlength=len(REGIONS))
        if len(lx)
        else np.zeros(len(REGIONS))
    )
    names = name_lookup(
        con,
        run_id,
        {nid for (nid, _), _ in per_name} | {o[0] for o in ops if o[0] >= 0},
    )

    by_category = dict.fromkeys(CATEGORIES, 0.0)
    total_ns = 0
    n_kernels = 0
    merged: dict[tuple[str, str], list[float]] = {}
    for (nid, is_copy), (n, tot, mn, mx) in per_name:
        name = names.get(nid, f"<name {nid}>")
        kc = classify(name, MEMCPY_CATS[0] if is_copy else KERNEL_CATS[0])
        by_category[kc.category] += tot / 1e3
        total_ns += tot
        n_kernels += n
        key = (name, kc.category)  # a memcpy and a kernel of one name stay apart
        m = merged.get(key)
        if m is None:
            merged[key] = [n, tot, mn, mx]
        else:
            m[0] += n
            m[1] += tot
            m[2] = min(m[2], mn)
            m[3] = max(m[3], mx)
    total_us = total_ns / 1e3
    krows = []
    for (name, category), (n, tot, mn, mx) in merged.items():
        tc = classify(name).tc if category != "copy_memset" else None
        krows.append(
            KernelRow(
                name=name,
                category=category,
                count=int(n),
                total_us=tot / 1e3,
                mean_us=tot / 1e3 / n if n else 0.0,
                min_us=mn / 1e3,
                max_us=mx / 1e3,
                tensor_core=bool(tc and tc.tensor_core),
                short_name=short_name(name),
                precision=tc.precision if tc else None,
                share_pct=100.0 * tot / total_ns if total_ns else 0.0,
            )
        )
    by_region = {r: float(region_ns[i]) / 1e3 for i, r in enumerate(REGIONS)}
    orows = [
        OpRow(
            op=names.get(i, f"<name {i}>") if i >= 0 else "(no cpu op)",
            count=count,
            kernels=n,
            kernel_us=float(tot) / 1e3,
        )
        for i, n, tot, count in ops
    ]
    orows.sort(key=lambda o: (-o.kernel_us, o.op))
    notes = []
    no_op_us = sum(o.kernel_us for o in orows if o.op == "(no cpu op)")
    if total_us and no_op_us > 0.5 * total_us:
        notes.append(
            f"{100 * no_op_us / total_us:.0f}% of kernel time was launched by no CPU op (a trace "
            "recorded without CPU activity, e.g. activities=[CUDA]): no region or launching op "
            "can be given for it"
        )
    elif n_kernels and by_region["other"] > 0.5 * total_us:
        notes.append(
            "most kernel time has no forward/backward/optimizer region: no launch events or annotations"
        )
    return KernelBreakdown(
        total_us=total_us,
        n_kernels=n_kernels,
        by_category=by_category,
        top=fold_rows(krows, top_n),
        by_region=by_region,
        by_op=orows[:top_ops] if top_ops >= 0 else orows,
        window_us=(end_ns - start_ns) / 1e3,
        notes=notes,
    )


def top_kernels_df(
    con: Connection, run_id: str, rank: int, window: WindowLike, *, top_n: int = 15
) -> pd.DataFrame:
    """Top kernels (+ folded 'others' row) as a DataFrame: one row per kernel name, times in µs."""
    return kernel_breakdown(con, run_id, rank, window, top_n=top_n).top_df()


def kernel_categories_df(
    con: Connection, run_id: str, rank: int, window: WindowLike
) -> pd.DataFrame:
    """Kernel time by category (every category, zeros included): columns category, us, pct."""
    return kernel_breakdown(con, run_id, rank, window, top_n=0).category_df()


def kernel_regions_df(con: Connection, run_id: str, rank: int, window: WindowLike) -> pd.DataFrame:
    """Kernel time by region (forward / backward / optimizer / other): columns region, us, pct."""
    return kernel_breakdown(con, run_id, rank, window, top_n=0).region_df()


def kernel_ops_df(
    con: Connection, run_id: str, rank: int, window: WindowLike, *, top_n: int = 15
) -> pd.DataFrame:
    """Top launching CPU ops: columns op, count, kernels, kernel_us."""
    return kernel_breakdown(con, run_id, rank, window, top_n=0, top_ops=top_n).op_df()
