"""GPU time and idle by ``nn.Module`` and by phase (forward, backward, optimizer); kernel sequences
that repeat inside every step. Definitions: docs/metrics.md, "Modules and phases".

Times are integer ns of trace time. A kernel belongs to the module whose ``nn.Module: X`` span (the
``python_function`` events Kineto writes with ``with_modules`` and the Python tracer on) holds the
CPU call that launched it, innermost first, as a path ``GPT_0/Block_1/MLP_1/Linear_6``. A backward
kernel is launched from the autograd thread, outside any module: it belongs to the module of the
forward op with the same ``Sequence number`` as the backward op that launched it. An idle gap of the
GPU belongs to the module (and phase) of the activity that ends it: the GPU waited for that work.

Memory: the window's activity and idle gaps are read and summed a batch of :data:`BATCH_ROWS` rows
at a time, the backward ops only around the launches of a batch that need them; what is held for
the whole rank is the module spans' nesting (int arrays and the distinct paths) and each step's
kernel name ids (4 bytes a kernel, for the repeated sequences).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from gpuscope.analysis.event_classes import KERNEL_CATS, OPTIMIZER_RE
from gpuscope.analysis.rank_index import RankIndex, ids_param, in_ids, name_class
from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import execute, sql_list

if TYPE_CHECKING:
    from gpuscope.store import Connection

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "other")
MODULE_PREFIX = "nn.Module: "
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function"
_PHASE_ANNOTATION = re.compile(r"(?i)^(forward|backward|optimizer)$")
NO_MODULE = "(no module)"
WINDOW_END = "(end of window)"
MIN_REPEAT_KERNELS = 2  # a repeated unit has at least this many kernels
MAX_REPEATS = 3
BATCH_ROWS = 1 << 16
"""Rows of the window's activity (and of its idle gaps) read at a time (at 2.0 GB, 1 << 18 rows
held 128 MiB more at the batch's query, 1 << 16 none above the start, for the same CPU)."""


# -- intervals ------------------------------------------------------------------------------------


class SpanTree:
    """Spans of threads taken as nested (a thread's spans are its call stack), sorted by (thread,
    start, longest first), with each span's parent: the nearest earlier span of its thread that
    still holds its start. Built once, asked many times (:meth:`find`) in batches of queries."""

    def __init__(self, tids: Any, starts: Any, ends: Any) -> None:
        tids = np.asarray(tids, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        self.order = np.lexsort((-(ends - starts), starts, tids))
        self.t, self.s, self.e = tids[self.order], starts[self.order], ends[self.order]
        n = len(self.s)
        parent = np.full(n, -1, dtype=np.int64)
        stack: list[int] = []
        prev_tid = None
        t_l, s_l, e_l = self.t.tolist(), self.s.tolist(), self.e.tolist()
        for i in range(n):  # one pass: the open spans of the thread
            if t_l[i] != prev_tid:
                stack, prev_tid = [], t_l[i]
            while stack and e_l[stack[-1]] <= s_l[i]:
                stack.pop()
            parent[i] = stack[-1] if stack else -1
            stack.append(i)
        self.parent = parent
        self.threads, self.lo = np.unique(self.t, return_index=True)
        self.hi = np.append(self.lo[1:], n)

    def __len__(self) -> int:
        return len(self.s)

    def find(self, qtid: Any, qt: Any) -> np.ndarray:
        """For each query (thread ``qtid``, time ``qt``, ns): the sorted index of the innermost
        span of that thread holding ``qt`` (``[start, end)``), -1 for none. Every query starts at
        the last span that began at or before it and climbs to the first ancestor still open (as
        many numpy rounds as the nesting is deep)."""
        qtid = np.asarray(qtid, dtype=np.int64)
        qt = np.asarray(qt, dtype=np.int64)
        j = np.full(len(qt), -1, dtype=np.int64)
        if len(self.s) == 0 or len(qt) == 0:
            return j
        for tid in np.unique(
            qtid
        ):  # the last span of the query's thread that started at or before it
            w = int(np.searchsorted(self.threads, tid))
            if w >= len(self.threads) or self.threads[w] != tid:
                continue
            lo, hi = int(self.lo[w]), int(self.hi[w])
            m = qtid == tid
            k = np.searchsorted(self.s[lo:hi], qt[m], side="right") - 1
            j[m] = np.where(k >= 0, k + lo, -1)
        live = j >= 0
        while True:  # climb while the span has ended
            jj = np.where(live, j, 0)
            closed = live & (self.e[jj] <= qt)
            if not closed.any():
                break
            j = np.where(closed, self.parent[jj], j)
            live = j >= 0
        return j

    def paths(self, labels: list[str], join: str) -> tuple[np.ndarray, list[str]]:
        """Each sorted span's path (its ancestors' labels and its own, joined by ``join``;
        ``labels`` in the given order), as (a path id per sorted span, the distinct paths)."""
        ids = np.empty(len(self.s), dtype=np.int64)
        distinct: dict[str, int] = {}
        out: list[str] = []
        parent = self.parent.tolist()
        for i, k in enumerate(self.order.tolist()):
            p = parent[i]
            path = labels[k] if p < 0 else out[ids[p]] + join + labels[k]
            got = distinct.get(path)
            if got is None:
                got = distinct[path] = len(out)
                out.append(path)
            ids[i] = got
        return ids, out


def innermost(
    tids: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    labels: list[str],
    qtid: np.ndarray,
    qt: np.ndarray,
    *,
    join: str | None = "/",
) -> list[str | None]:
    """For each query (thread ``qtid``, time ``qt``), the label of the innermost span of that thread
    holding ``qt`` (``[start, end)``), or None. ``join``: labels of nested spans are joined into a
    path (``outer/inner``); None keeps the innermost label alone. Spans are taken as nested: each
    span's parent is the nearest earlier span of its thread that still holds its start
    (:class:`SpanTree`)."""
    out: list[str | None] = [None] * len(qt)
    if len(starts) == 0 or len(qt) == 0:
        return out
    tree = SpanTree(tids, starts, ends)
    j = tree.find(qtid, qt)
    if join is not None:
        ids, paths = tree.paths(labels, join)
        lab = [paths[i] for i in ids.tolist()]
    else:
        lab = [labels[k] for k in tree.order.tolist()]
    for q in np.flatnonzero(j >= 0).tolist():
        out[q] = lab[int(j[q])]
    return out


# -- phases ---------------------------------------------------------------------------------------


#: The names of the phases' spans (:func:`phase_spans`), and of the optimizer's among them.
_PHASE_NAMES = name_class(
    f"regexp_matches(name, '{OPTIMIZER_RE}') OR starts_with(name, '{BACKWARD_OP_PREFIX}') "
    "OR regexp_matches(name, '(?i)^(optimizer|backward)$')"
)
_OPTIMIZER_NAMES = name_class(
    f"regexp_matches(name, '{OPTIMIZER_RE}') OR lower(name) = 'optimizer'"
)


def phase_spans(con: Connection, run_id: str, rank: int, window: Window) -> pd.DataFrame:
    """The phases of each step as CPU-time spans ``s``, ``e`` (ns), ``phase``, ``step``; they tile
    the steps. In a step: ``optimizer`` inside an ``Optimizer.step#``/``Optimizer.zero_grad#``
    annotation (or one named ``optimizer``); ``backward`` from the first to the last end of the
    autograd engine's ops (``autograd::engine::evaluate_function: *``, or an annotation named
    ``backward``); ``forward`` before that; ``other`` after it. A step without backward ops (inference)
    is ``forward`` but for its optimizer spans."""
    ix = RankIndex.shared(con, run_id, rank)
    return ix.memo(
        ("phase_spans", window.start_ns, window.end_ns),
        lambda: _phase_spans(ix, window),
    )


def _phase_spans(ix: RankIndex, window: Window) -> pd.DataFrame:
    nums = [s.number for s in window.steps] or [0]
    bounds = window.step_bounds_ns()[: len(nums)]
    if not bounds:
        return pd.DataFrame([], columns=["s", "e", "phase", "step"])
    # the optimizer and backward spans overlapping the steps: the optimizer's (a few per step)
    # fetched, the backward ops' reduced to their first start and last end in each step
    names = ix.name_ids(_PHASE_NAMES)
    opt_ids = set(ix.name_ids(_OPTIMIZER_NAMES))
    o_ids = ids_param([i for i in names if i in opt_ids])
    b_ids = ids_param([i for i in names if i not in opt_ids])
    spans = f"""
        SELECT h.ts_ns AS s, h.ts_ns + h.dur_ns AS e
        FROM {ix.host()} h
        WHERE h.ph = 'X' AND h.dur_ns IS NOT NULL AND h.cat IN ('cpu_op', 'user_annotation')
          AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo"""
    params = ix.params(
        lo=min(a for a, _ in bounds),
        hi=max(b for _, b in bounds),
        oids=o_ids,
        bids=b_ids,
    )
    bwd = step_extents(ix.con, f"{spans} AND {in_ids('h.name_id', 'bids', b_ids)}", params, bounds)
    got = execute(
        ix.con, f"{spans} AND {in_ids('h.name_id', 'oids', o_ids)} ORDER BY s", params
    ).fetchnumpy()
    o_s = np.asarray(got["s"], dtype=np.int64)
    o_e = np.asarray(got["e"], dtype=np.int64)
    opt = (o_s, o_e, int((o_e - o_s).max()) if len(o_s) else 0)

    # spans sorted by start: those overlapping [a, b) start in [a - the longest span, b)
    def overlapping(
        arr: tuple[np.ndarray, np.ndarray, int], a: int, b: int
    ) -> tuple[np.ndarray, np.ndarray]:
        s_, e_, longest = arr
        lo, hi = np.searchsorted(s_, a - longest), np.searchsorted(s_, b)
        keep = e_[lo:hi] > a
        return s_[lo:hi][keep], e_[lo:hi][keep]

    rows: list[tuple[int, int, str, int]] = []
    for k, (num, (a, b)) in enumerate(zip(nums, bounds, strict=True)):
        has_bwd = k in bwd
        bs = max(a, bwd[k][0]) if has_bwd else b
        be = min(b, bwd[k][1]) if has_bwd else b
        step_phase_rows(rows, num, a, b, (bs, be) if has_bwd else None, overlapping(opt, a, b))
    return pd.DataFrame(rows, columns=["s", "e", "phase", "step"])


def step_extents(
    con: Connection, spans_sql: str, params: dict[str, Any], bounds: list[tuple[int, int]]
) -> dict[int, tuple[int, int]]:
    """For each range ``bounds[k]`` (``[a, b)``, ns) that a span of ``spans_sql`` (columns ``s``,
    ``e``; ``$``-parameters from ``params``) overlaps: k -> (the least start, the greatest end)
    of those spans. DuckDB keeps the spans that end later than every span before them (by
    start, then end), which is enough (:func:`overlap_extents`): one sort of the spans, not a
    range join of every span against every range."""
    rec = execute(
        con,
        f"""WITH sp AS ({spans_sql})
            SELECT s, e FROM (
                SELECT s, e, max(e) OVER (ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING
                                          AND 1 PRECEDING) AS pm
                FROM sp)
            WHERE pm IS NULL OR e > pm ORDER BY s, e""",
        params,
    ).fetchnumpy()
    return overlap_extents(
        np.asarray(rec["s"], dtype=np.int64),
        np.asarray(rec["e"], dtype=np.int64),
        np.asarray([a for a, _ in bounds], dtype=np.int64),
        np.asarray([b for _, b in bounds], dtype=np.int64),
    )


def overlap_extents(
    rs: np.ndarray, re_: np.ndarray, a: np.ndarray, b: np.ndarray
) -> dict[int, tuple[int, int]]:
    """For each range ``[a[k], b[k])`` (ns) that some span overlaps (``s < b`` and ``e > a``):
    k -> (the least start, the greatest end) of the spans overlapping it. ``rs``/``re_`` are
    the spans' records: sorted by start then end, those ending later than every span before
    them (ends strictly increasing). The first record ending after ``a`` is the first span
    (by start) that does, so its start is the least of the overlapping ones where it starts
    before ``b``; the last record starting before ``b`` ends last of every span starting
    before ``b``."""
    i = np.searchsorted(re_, a, side="right")  # the first record ending after a
    m = np.searchsorted(rs, b, side="left")  # the records starting before b
    hit = i < len(rs)
    hit[hit] = rs[i[hit]] < b[hit]
    return {int(k): (int(rs[i[k]]), int(re_[m[k] - 1])) for k in np.flatnonzero(hit).tolist()}


def step_phase_rows(
    rows: list[tuple[int, int, str, Any]],
    num: Any,
    a: int,
    b: int,
    bwd: tuple[int, int] | None,
    opt: tuple[Any, Any],
) -> None:
    """Append to ``rows`` the phase spans ``(s, e, phase, num)`` of step ``num`` (``a``..``b``,
    ns): ``optimizer`` inside one of the optimizer spans ``opt`` (starts, ends) that overlap it, else ``forward`` before the backward
    span ``bwd`` (all of the step without one), ``backward`` inside it, ``other`` after it;
    a span that continues the last row's phase extends it."""
    bs, be = bwd if bwd is not None else (b, b)
    o_s, o_e = opt
    ospans = [(max(a, int(s)), min(b, int(e))) for s, e in zip(o_s, o_e, strict=True)]
    cuts = sorted({a, b, *(x for sp in ospans for x in sp), bs, be})
    for x, y in itertools.pairwise(cuts):
        if y <= x:
            continue
        mid = (x + y) / 2
        if any(s <= mid < e for s, e in ospans):
            ph = "optimizer"
        elif bwd is None or mid < bs:
            ph = "forward"
        elif mid < be:
            ph = "backward"
        else:
            ph = "other"
        if rows and rows[-1][2] == ph and rows[-1][1] == x and rows[-1][3] == num:
            rows[-1] = (rows[-1][0], y, ph, num)
        else:
            rows.append((x, y, ph, num))


def phase_at(spans: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """The phase of each CPU time in ``t`` (ns); ``outside`` out of every step."""
    if spans.empty:
        return np.full(len(t), "outside", dtype=object)
    s = spans["s"].to_numpy(np.int64)
    e = spans["e"].to_numpy(np.int64)
    idx = np.searchsorted(s, np.asarray(t, dtype=np.int64), side="right") - 1
    ok = (idx >= 0) & (np.asarray(t) < e[np.clip(idx, 0, None)])
    ph = spans["phase"].to_numpy(object)[np.clip(idx, 0, None)]
    return np.where(ok, ph, "outside")


# -- the result -----------------------------------------------------------------------------------


@dataclass
class ModuleRow:
    """One module (a path of the module tree): GPU time of the activity it launched, inclusive of
    its children (``gpu_ns``, by phase in ``gpu_by_phase_ns``) and of its own (``self_gpu_ns``);
    GPU idle that ended with its work (``idle_ns``, inclusive); activities launched; depth (0 =
    top)."""

    path: str
    depth: int
    gpu_ns: int = 0
    self_gpu_ns: int = 0
    idle_ns: int = 0
    n_kernels: int = 0
    gpu_by_phase_ns: dict[str, int] = field(default_factory=dict)

    def per_step(self, n_steps: int, busy_ns: int) -> ModuleLine:
        """The module over ``n_steps`` steps, with its share of ``busy_ns`` (the window's kernel
        time, ns): what the Run page shows and ``analyze --json`` writes."""
        per = max(1, n_steps) * 1e3
        return ModuleLine(
            module=self.path,
            depth=self.depth,
            gpu_us_per_step=self.gpu_ns / per,
            self_gpu_us_per_step=self.self_gpu_ns / per,
            gpu_pct=100.0 * self.gpu_ns / busy_ns if busy_ns else None,
            idle_us_per_step=self.idle_ns / per,
            kernels_per_step=self.n_kernels / max(1, n_steps),
            gpu_us_per_step_by_phase={
                p: self.gpu_by_phase_ns.get(p, 0) / per
                for p in (*PHASES, "outside")
                if self.gpu_by_phase_ns.get(p)
            },
        )

    def to_json(self, n_steps: int, busy_ns: int) -> dict[str, Any]:
        return dataclasses.asdict(self.per_step(n_steps, busy_ns))


@dataclass(frozen=True)
class ModuleLine:
    """One module per step (``analyze --json``'s ``modules.modules[]``): its path and depth, GPU
    time inclusive of its children and of its own, GPU idle that ended with its work (µs per
    step), its share of the window's kernel time (%; None without kernels), activities launched
    per step, and its GPU time by phase (µs per step; the phases it has time in)."""

    module: str
    depth: int
    gpu_us_per_step: float
    self_gpu_us_per_step: float
    gpu_pct: float | None
    idle_us_per_step: float
    kernels_per_step: float
    gpu_us_per_step_by_phase: dict[str, float]


@dataclass(frozen=True)
class PhaseLine:
    """One phase per step (``modules.by_phase``): GPU time of the work launched in it (µs per
    step; % of the window's kernel time, None without kernels), idle that ended with it (µs per
    step), activities per step."""

    gpu_us_per_step: float
    gpu_pct: float | None
    idle_us_per_step: float
    kernels_per_step: float


@dataclass
class Repeat:
    """A kernel sequence of ``length`` kernels that runs ``times`` times back to back in a step, in
    ``steps`` of the window's steps; ``gpu_ns`` per step (mean) and its share of the step's kernel time."""

    length: int
    times: int
    steps: int
    gpu_ns_per_step: float
    share_pct: float
    first_kernels: list[str]
    module: str | None = None

    @property
    def gpu_us_per_step(self) -> float:
        """GPU time of the sequence per step (µs, mean)."""
        return self.gpu_ns_per_step / 1e3

    def to_json(self) -> dict[str, Any]:
        return {
            "kernels": self.length,
            "times_per_step": self.times,
            "steps": self.steps,
            "gpu_us_per_step": self.gpu_us_per_step,
            "share_pct": self.share_pct,
            "first_kernels": self.first_kernels,
            "module": self.module,
        }


@dataclass
class ModulesResult:
    """GPU time and idle by module and by phase over the window; repeated kernel sequences."""

    source: str | None  # "nn.Module" or None: no module spans in the trace
    n_steps: int
    busy_kernel_ns: int  # sum of the activities' durations on the device in the window
    modules: list[ModuleRow] = field(default_factory=list)
    by_phase: dict[str, dict[str, int]] = field(default_factory=dict)
    same_sequence_steps: int = 0
    kernels_per_step: int | None = None
    repeats: list[Repeat] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def view(self) -> ModulesView:
        """The modules per step, as the Run page shows them (and ``to_json`` writes them)."""
        per = max(1, self.n_steps) * 1e3
        busy = self.busy_kernel_ns
        return ModulesView(
            source=self.source,
            gpu_us_per_step=busy / per,
            modules=tuple(m.per_step(self.n_steps, busy) for m in self.modules),
            by_phase={
                p: PhaseLine(
                    gpu_us_per_step=v.get("gpu_ns", 0) / per,
                    gpu_pct=100.0 * v.get("gpu_ns", 0) / busy if busy else None,
                    idle_us_per_step=v.get("idle_ns", 0) / per,
                    kernels_per_step=v.get("n", 0) / max(1, self.n_steps),
                )
                for p, v in self.by_phase.items()
            },
            same_sequence_steps=self.same_sequence_steps,
            kernels_per_step=self.kernels_per_step,
            repeats=tuple(self.repeats),
            notes=tuple(self.notes),
        )

    def to_json(self) -> dict[str, Any]:
        v = self.view()
        return {
            "source": v.source,
            "gpu_us_per_step": v.gpu_us_per_step,
            "modules": [dataclasses.asdict(m) for m in v.modules],
            "by_phase": {p: dataclasses.asdict(x) for p, x in v.by_phase.items()},
            "same_sequence_steps": v.same_sequence_steps,
            "kernels_per_step": v.kernels_per_step,
            "repeats": [r.to_json() for r in v.repeats],
            "notes": list(v.notes),
        }


@dataclass(frozen=True)
class ModulesView:
    """The Run page's modules section (``analyze --json``'s ``modules``): where module spans
    come from (None: none in the trace), the window's kernel time (µs per step), every module
    (:class:`ModuleLine`, inclusive, tree order) and phase (:class:`PhaseLine`), how many steps
    launch the same kernel sequence and how many kernels that is, the repeated sequences
    (:class:`Repeat`), and the notes."""

    source: str | None
    gpu_us_per_step: float
    modules: tuple[ModuleLine, ...]
    by_phase: dict[str, PhaseLine]
    same_sequence_steps: int
    kernels_per_step: int | None
    repeats: tuple[Repeat, ...]
    notes: tuple[str, ...]


# -- the analysis ---------------------------------------------------------------------------------


def _activity_sql(ix: RankIndex, where: str = "") -> str:
    """The device's activity in the window (``$dev``, ``$ws``, ``$we``), clipped, with its launch
    (CPU time and thread), in the analysis's order; ``where``: more conditions (on ``g``, ``r``)."""
    return f"""SELECT greatest(g.s, $ws) AS s, least(g.e, $we) AS e, g.s AS s0, g.correlation,
                   g.name_id, g.cat, r.s AS launch_ns, r.tid AS launch_tid
            FROM {ix.gpu()} g
            LEFT JOIN {ix.runtime()} r ON r.correlation = g.correlation
            JOIN names n ON n.run_id = $run AND n.name_id = g.name_id
            WHERE g.dev = $dev AND g.s < $we AND g.e > $ws {where}
            ORDER BY g.s, g.correlation, g.rid, r.s, r.tid"""


def batch_bounds(
    con: Connection, sql: str, key: str, params: dict[str, Any], rows: int | None = None
) -> list[int]:
    """Values of ``key`` (a column of the rows of ``sql``) that cut those rows into batches of
    ``rows`` rows (default :data:`BATCH_ROWS`), ascending (the first is the least value): batch i is ``bounds[i] <=
    key < bounds[i + 1]``; rows of one value of ``key`` are in one batch. DuckDB's exact quantiles
    of ``key`` (its values alone, not the rows, are held)."""
    row = execute(con, f"SELECT count(*) FROM ({sql})", params).fetchone()
    n = int(row[0]) if row else 0
    if n == 0:
        return []
    size = BATCH_ROWS if rows is None else rows
    # the value at row i * size (of n, 0-based) is the quantile (i * size + 0.5) / n
    at = ", ".join(repr((i * size + 0.5) / n) for i in range(-(-n // size)))
    got = execute(con, f"SELECT quantile_disc({key}, [{at}]) FROM ({sql})", params).fetchone()
    return sorted({int(v) for v in got[0]}) if got else []


def _batches(
    con: Connection, sql: str, bounds_sql: str, key: str, params: dict[str, Any], where: str
) -> Iterator[dict[str, np.ndarray]]:
    """The rows of ``sql`` a batch at a time, as numpy columns, in the order of ``sql``: ``key``
    is a column of the rows of ``bounds_sql`` (the same rows, the key alone), ``where`` the same
    value inside ``sql`` (which holds ``{where}`` for the batch's condition on it); a batch is
    :data:`BATCH_ROWS` rows and those with the same value of ``key`` as its last (see
    :func:`batch_bounds`)."""
    bounds = batch_bounds(con, bounds_sql, key, params)
    for i, lo in enumerate(bounds):
        cond = f"AND {where} >= $b_lo" + (f" AND {where} < $b_hi" if i + 1 < len(bounds) else "")
        b = {**params, "b_lo": lo, "b_hi": bounds[i + 1] if i + 1 < len(bounds) else None}
        got = execute(con, sql.format(where=cond), b).fetchnumpy()
        yield dict(got)


def _ints(col: Any, fill: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """A fetched column as int64 (``fill`` where NULL) and where it is not NULL."""
    if isinstance(col, np.ma.MaskedArray):
        ok = ~np.ma.getmaskarray(col)
        return np.asarray(col.filled(fill), dtype=np.int64), ok
    arr = np.asarray(col)
    if arr.dtype == object or arr.dtype.kind == "f":
        ok = ~pd.isna(arr)
        return np.where(ok, arr, fill).astype(np.int64), ok
    return arr.astype(np.int64), np.ones(len(arr), dtype=bool)


_PHASE_CODES: tuple[str, ...] = (*PHASES, "outside")
_OUTSIDE = len(PHASES)


class _Charger:
    """Who launched an activity: the module path and the phase of each launch (CPU thread and
    time), a batch of launches at a time. The rank's module spans are read once (their nesting,
    a path per span); the backward ops and the forward op of each sequence number are read for a
    batch's launches outside every module only (the backward kernels)."""

    def __init__(self, ix: RankIndex, spans: pd.DataFrame) -> None:
        self.ix = ix
        self.step_s = spans["s"].to_numpy(np.int64)
        self.step_e = spans["e"].to_numpy(np.int64)
        self.step_ph = np.array([_PHASE_CODES.index(p) for p in spans["phase"]], dtype=np.int64)
        got = execute(
            ix.con,
            f"""SELECT h.tid, h.ts_ns AS s, h.ts_ns + h.dur_ns AS e, h.name_id
                FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
                WHERE h.ph = 'X' AND h.dur_ns IS NOT NULL AND h.cat = 'python_function'
                  AND starts_with(n.name, '{MODULE_PREFIX}')
                ORDER BY h.ts_ns""",
            ix.params(),
        ).fetchnumpy()
        ids = np.asarray(got["name_id"], dtype=np.int64)
        label = {
            int(i): str(nm)[len(MODULE_PREFIX) :]
            for i, nm in execute(
                ix.con,
                "SELECT name_id, name FROM names WHERE run_id = $run AND list_contains($ids, name_id)",
                {"run": ix.run_id, "ids": [int(x) for x in np.unique(ids)]},
            ).fetchall()
        }
        self.has_modules = len(ids) > 0
        self.tree = SpanTree(got["tid"], got["s"], got["e"])
        # every span's path, and the path of the innermost span holding its start (a forward op
        # inside it belongs there)
        self.span_path, self.paths = self.tree.paths([label[int(i)] for i in ids], "/")
        j = self.tree.find(self.tree.t, self.tree.s)
        self.start_path = np.where(j >= 0, self.span_path[np.maximum(j, 0)], -1)
        self._ops: str | None = None

    def path_id(self, path: str) -> int:
        """The id of ``path`` among :attr:`paths` (added when new)."""
        try:
            return self.paths.index(path)
        except ValueError:
            self.paths.append(path)
            return len(self.paths) - 1

    def __call__(
        self, tid: np.ndarray, t: np.ndarray, has: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(path id, -1 for none; phase code in :data:`_PHASE_CODES`) of each launch (thread,
        CPU time ns; ``has``: whether there is one; without, no path and ``outside``)."""
        ph = np.full(len(t), _OUTSIDE, dtype=np.int64)
        if has.any() and len(self.step_s):  # as phase_at, in codes
            tt = t[has]
            idx = np.searchsorted(self.step_s, tt, side="right") - 1
            at = np.clip(idx, 0, None)
            ph[has] = np.where((idx >= 0) & (tt < self.step_e[at]), self.step_ph[at], _OUTSIDE)
        pid = np.full(len(t), -1, dtype=np.int64)
        if not self.has_modules:
            return pid, ph
        j = self.tree.find(np.where(has, tid, -1), t)
        found = j >= 0
        pid[found] = self.span_path[j[found]]
        missing = np.flatnonzero(has & ~found)
        if missing.size:  # backward: through the autograd node's sequence number
            pid[missing] = self._backward(tid[missing], t[missing])
        return pid, ph

    def _ops_table(self) -> str:
        """The rank's backward ops (``kind`` 1: thread, span, sequence number) and the first
        forward op of each sequence number (``kind`` 2: thread, start) in one table."""
        if self._ops is None:
            self._ops = self.ix.table(
                ("modules_seq_ops",),
                f"""WITH o AS (
                        SELECT e.tid, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e, e.seq_num AS seq,
                               e.fwd_tid, n.name
                        FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
                        WHERE e.run_id = $run AND e.rank = $rank AND e.ph = 'X'
                          AND e.dur_ns IS NOT NULL AND e.cat = 'cpu_op' AND e.seq_num IS NOT NULL)
                    SELECT 1 AS kind, tid, s, e, seq FROM o
                    WHERE starts_with(name, '{BACKWARD_OP_PREFIX}')
                    UNION ALL
                    SELECT 2, arg_min(tid, s), min(s), NULL, seq FROM o
                    WHERE (fwd_tid IS NULL OR fwd_tid = 0)
                      AND NOT regexp_matches(name, 'Backward|autograd::engine')
                    GROUP BY seq
                    ORDER BY kind, s""",
                self.ix.params(),
            )
        return self._ops

    def _backward(self, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Path ids of launches outside every module: the module of the forward op with the
        sequence number of the innermost backward op holding the launch (-1: none)."""
        out = np.full(len(t), -1, dtype=np.int64)
        ops = self._ops_table()
        got = execute(
            self.ix.con,
            f"""SELECT tid, s, e, seq FROM {ops}
                WHERE kind = 1 AND list_contains($tids, tid) AND s <= $hi AND e > $lo""",
            {"tids": [int(x) for x in np.unique(tid)], "lo": int(t.min()), "hi": int(t.max())},
        ).fetchnumpy()
        if len(got["s"]) == 0:
            return out
        bops = SpanTree(got["tid"], got["s"], got["e"])
        j = bops.find(tid, t)
        seq = np.where(j >= 0, np.asarray(got["seq"], dtype=np.int64)[bops.order][j], -1)
        want = np.unique(seq[j >= 0])
        if want.size == 0:
            return out
        fwd = execute(
            self.ix.con,
            f"SELECT seq, tid, s FROM {ops} WHERE kind = 2 AND seq = ANY($seqs)",
            {"seqs": want.tolist()},
        ).fetchnumpy()
        f_seq = np.asarray(fwd["seq"], dtype=np.int64)
        k = self.tree.find(fwd["tid"], fwd["s"])
        f_path = np.where(k >= 0, self.start_path[np.maximum(k, 0)], -1)
        if len(f_seq) == 0:
            return out
        o = np.argsort(f_seq)
        f_seq, f_path = f_seq[o], f_path[o]
        at = np.clip(np.searchsorted(f_seq, seq), 0, len(f_seq) - 1)
        hit = (j >= 0) & (f_seq[at] == seq)
        out[hit] = f_path[at[hit]]
        return out


class _Sums:
    """Sums and counts by (path id, phase code), in the order each pair first came."""

    def __init__(self) -> None:
        self.by: dict[tuple[int, int], list[int]] = {}

    def add(self, pid: np.ndarray, ph: np.ndarray, v: np.ndarray) -> None:
        if len(v) == 0:
            return
        key = pid * len(_PHASE_CODES) + ph + len(_PHASE_CODES)  # pid >= -1
        uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
        o = np.argsort(inv, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(inv[o]) != 0])
        tot = np.add.reduceat(v[o], starts)
        cnt = np.diff(np.r_[starts, len(v)])
        for g in np.argsort(first, kind="stable").tolist():
            k = int(uniq[g]) - len(_PHASE_CODES)
            p, c = divmod(k, len(_PHASE_CODES))
            cur = self.by.setdefault((p, c), [0, 0])
            cur[0] += int(tot[g])
            cur[1] += int(cnt[g])


class _StepKernels:
    """The kernel name ids of each step in the analysis's order (a kernel belongs to the step
    that launched it; its GPU start when the launch is unknown), gathered batch by batch."""

    def __init__(self, window: Window) -> None:
        self.bounds = window.step_bounds_ns() if window.steps else []
        self.starts = np.array([a for a, _ in self.bounds], dtype=np.int64)
        self.ends = np.array([b for _, b in self.bounds], dtype=np.int64)
        self.tiled = bool(np.all(self.starts[1:] >= self.starts[:-1])) and bool(
            np.all(self.ends[:-1] == self.starts[1:])
        )
        self.pieces: list[list[np.ndarray]] = [[] for _ in self.bounds]
        self.any = False

    def add(self, kern: np.ndarray, t: np.ndarray, ids: np.ndarray) -> None:
        if not self.bounds or not kern.any():
            return
        self.any = True
        idx = np.flatnonzero(kern)
        tt, ii = t[idx], ids[idx].astype(np.int32)
        if self.tiled:
            k = np.searchsorted(self.starts, tt, side="right") - 1
            ok = (k >= 0) & (tt < self.ends[-1])
            k, ii = k[ok], ii[ok]
            o = np.argsort(k, kind="stable")
            k, ii = k[o], ii[o]
            cut = np.flatnonzero(np.r_[True, np.diff(k) != 0, True])
            for a, b in itertools.pairwise(cut.tolist()):
                self.pieces[int(k[a])].append(ii[a:b])
        else:
            for n, (a, b) in enumerate(self.bounds):
                m = (tt >= a) & (tt < b)
                if m.any():
                    self.pieces[n].append(ii[m])

    def sequences(self) -> list[np.ndarray]:
        """Each step's name ids (int64), in order; the pieces are let go."""
        out = [
            np.concatenate(p).astype(np.int64) if p else np.zeros(0, dtype=np.int64)
            for p in self.pieces
        ]
        self.pieces = []
        return out


def module_analysis(
    con: Connection, run_id: str, rank: int, window: Window, device: int | None
) -> ModulesResult:
    """GPU time and idle by module and phase, and repeated kernel sequences, on ``device`` over the
    window (see the module docstring). The window's activity and idle gaps are read a batch of
    :data:`BATCH_ROWS` rows at a time and summed: the memory does not grow with the rank's
    length (but for the module spans' nesting and each step's kernel name ids)."""
    n = window.n_steps
    res = ModulesResult(source=None, n_steps=n, busy_kernel_ns=0)
    if device is None:
        res.notes.append("no GPU activity in the window")
        return res
    ix = RankIndex.shared(con, run_id, rank)
    ws, we = window.start_ns, window.end_ns
    spans = phase_spans(con, run_id, rank, window)
    charge = _Charger(ix, spans)
    if charge.has_modules:
        res.source = "nn.Module"
    else:
        res.notes.append(
            "no nn.Module spans in the trace: record with with_modules=True and with_stack=True "
            "(Kineto writes module spans only with the Python tracer on)"
        )
    params = ix.params(ws=ws, we=we, dev=device)
    busy = _Sums()
    steps = _StepKernels(window)
    for b in _batches(
        con,
        _activity_sql(ix, "{where}"),
        f"SELECT g.s AS s0 FROM {ix.gpu()} g WHERE g.dev = $dev AND g.s < $we AND g.e > $ws",
        "s0",
        params,
        "g.s",
    ):
        dur = np.asarray(b["e"], dtype=np.int64) - np.asarray(b["s"], dtype=np.int64)
        launch, has = _ints(b["launch_ns"], 0)
        ltid, _ = _ints(b["launch_tid"], -1)
        pid, ph = charge(ltid, launch, has)
        busy.add(pid, ph, dur)
        s0 = np.asarray(b["s0"], dtype=np.int64)
        cats, cat_at = np.unique(
            np.asarray(b["cat"], dtype=object).astype(str), return_inverse=True
        )
        kern = np.isin(cats, KERNEL_CATS)[cat_at]
        steps.add(kern, np.where(has, launch, s0), np.asarray(b["name_id"], dtype=np.int64))
    # by module (inclusive over the tree) and by phase
    rows: dict[str, ModuleRow] = {}
    for (pi, pc), (d, c) in busy.by.items():
        p = charge.paths[pi] if pi >= 0 else ""
        phase = _PHASE_CODES[pc]
        res.busy_kernel_ns += d
        key = p or NO_MODULE
        parts = key.split("/") if p else [key]
        for k in range(1, len(parts) + 1):
            node = "/".join(parts[:k])
            r = rows.setdefault(node, ModuleRow(node, k - 1))
            r.gpu_ns += d
            r.n_kernels += c if k == len(parts) else 0
            r.gpu_by_phase_ns[phase] = r.gpu_by_phase_ns.get(phase, 0) + d
        rows[key].self_gpu_ns += d
        bp = res.by_phase.setdefault(phase, {"gpu_ns": 0, "idle_ns": 0, "n": 0})
        bp["gpu_ns"] += d
        bp["n"] += c
    # idle: each gap belongs to the activity that ends it (the phase and module of its launch)
    gaps_t, _ = ix.gaps(ws, we)
    gaps_sql = f"""SELECT gp.gs, gp.ge, gp.next_corr, r.s AS launch_ns, r.tid AS launch_tid
        FROM {gaps_t} gp
        LEFT JOIN (SELECT correlation, max(s) AS s, arg_max(tid, s) AS tid FROM {ix.runtime()}
                   GROUP BY correlation) r ON r.correlation = gp.next_corr
        WHERE gp.dev = $dev {{where}}
        ORDER BY gp.gs"""
    end_id = -2  # the window's end: a gap no activity ends
    idle = _Sums()
    for b in _batches(
        con, gaps_sql, f"SELECT gs FROM {gaps_t} WHERE dev = $dev", "gs", params, "gp.gs"
    ):
        g = np.asarray(b["ge"], dtype=np.int64) - np.asarray(b["gs"], dtype=np.int64)
        _, ended = _ints(b["next_corr"], -1)
        launch, has = _ints(b["launch_ns"], 0)
        ltid, _ = _ints(b["launch_tid"], -1)
        pid, ph = charge(ltid, launch, has & ended)
        pid = np.where(ended, pid, end_id)
        ph = np.where(ended, ph, PHASES.index("other"))
        idle.add(pid, ph, g)
    for (pi, pc), (gap_ns, _) in idle.by.items():
        phase = _PHASE_CODES[pc]
        at_end = pi == end_id
        p = charge.paths[pi] if pi >= 0 else ""
        key = WINDOW_END if at_end else (p or NO_MODULE)
        parts = key.split("/") if not at_end and p else [key]
        for k in range(1, len(parts) + 1):
            node = "/".join(parts[:k])
            rows.setdefault(node, ModuleRow(node, k - 1)).idle_ns += gap_ns
        bp = res.by_phase.setdefault(phase, {"gpu_ns": 0, "idle_ns": 0, "n": 0})
        bp["idle_ns"] += gap_ns
    res.modules = sorted(rows.values(), key=lambda r: (-r.gpu_ns, r.path))
    if steps.any:
        _repeats(res, ix, params, window, steps.sequences(), charge)
    return res


# -- repeated kernel sequences ---------------------------------------------------------------------


def tandem_repeats(
    seq: np.ndarray, min_len: int = MIN_REPEAT_KERNELS
) -> list[tuple[int, int, int]]:
    """Back-to-back repeats in ``seq`` (ints): (start, unit length, times), largest cover first, up
    to :data:`MAX_REPEATS` that do not overlap. Of equal covers the shorter unit wins: four
    transformer layers are one layer × 4, not two layers × 2 (a unit made of a shorter repeated
    unit always has the shorter one's cover too)."""
    n = len(seq)
    found: list[tuple[int, int, int]] = []  # (cover, -p, start) candidates
    for p in range(min_len, n // 2 + 1):
        eq = seq[p:] == seq[:-p]  # eq[i]: seq[i] == seq[i + p]
        if not eq.any():
            continue
        # runs of True of length >= p: a unit of length p repeated (run // p) + 1 times
        padded = np.concatenate(([False], eq, [False]))
        d = np.diff(padded.astype(np.int8))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        for st, en in zip(starts.tolist(), ends.tolist(), strict=True):
            run = en - st
            if run >= p:
                times = run // p + 1
                found.append((times * p, -p, st))
    found.sort(key=lambda f: (-f[0], -f[1], f[2]))
    out: list[tuple[int, int, int]] = []
    taken = np.zeros(n, dtype=bool)
    for cover, negp, s0 in found:
        s = int(s0)
        if taken[s : s + cover].any():
            continue
        p = -negp
        out.append((s, p, cover // p))
        taken[s : s + cover] = True
        if len(out) >= MAX_REPEATS:
            break
    return out


def _contains_run(seq: np.ndarray, unit: np.ndarray, times: int) -> bool:
    """Whether ``seq`` holds ``unit`` ``times`` times back to back."""
    pat = np.tile(unit, times)
    m = len(pat)
    if m > len(seq):
        return False
    w = np.lib.stride_tricks.sliding_window_view(seq, m)
    return bool((w == pat).all(axis=1).any())


def _repeats(
    res: ModulesResult,
    ix: RankIndex,
    params: dict[str, Any],
    window: Window,
    seqs: list[np.ndarray],
    charge: _Charger,
) -> None:
    """The steps' common kernel sequence and the repeats in it (:func:`tandem_repeats`), from each
    step's kernel name ids (``seqs``); the reference step's kernels (the first step with the
    common sequence) are read again for their times, modules and names."""
    # each distinct sequence once, with its number of steps, in the order they first come (the
    # tie between sequences as many and as long goes to the first of a set of them, as ever)
    distinct: dict[tuple[int, ...], int] = {}
    first: dict[tuple[int, ...], int] = {}
    for k, seq in enumerate(seqs):
        sig = tuple(seq.tolist())
        distinct[sig] = distinct.get(sig, 0) + 1
        first.setdefault(sig, k)
    seqs.clear()
    common = max(set(list(distinct)), key=lambda s: (distinct[s], len(s)))
    res.same_sequence_steps = distinct[common]
    res.kernels_per_step = len(common)
    ref = np.array(common, dtype=np.int64)
    a, b = window.step_bounds_ns()[first[common]]
    cats = sql_list(KERNEL_CATS)
    got = execute(
        ix.con,
        _activity_sql(
            ix,
            f"AND g.cat IN {cats} AND coalesce(r.s, g.s) >= $ra AND coalesce(r.s, g.s) < $rb",
        ),
        {**params, "ra": int(a), "rb": int(b)},
    ).fetchnumpy()
    dur = np.asarray(got["e"], dtype=np.int64) - np.asarray(got["s"], dtype=np.int64)
    launch, has = _ints(got["launch_ns"], 0)
    ltid, _ = _ints(got["launch_tid"], -1)
    pid, _ = charge(ltid, launch, has)
    paths = [charge.paths[p] if p >= 0 else None for p in pid.tolist()]
    ids = np.asarray(got["name_id"], dtype=np.int64)
    names = dict(
        execute(
            ix.con,
            "SELECT name_id, name FROM names WHERE run_id = $run AND list_contains($ids, name_id)",
            {"run": ix.run_id, "ids": [int(x) for x in np.unique(ids)]},
        ).fetchall()
    )
    arrays = [(np.array(sig, dtype=np.int64), n) for sig, n in distinct.items()]
    ref_total = float(dur.sum())
    for start, p, times in tandem_repeats(ref):
        unit = ref[start : start + p]
        steps = sum(n for seq, n in arrays if _contains_run(seq, unit, times))
        cover = range(start, start + p * times)
        total = float(dur[start : start + p * times].sum())
        mods = {paths[i].rsplit("/", 1)[0] if paths[i] else None for i in cover}  # type: ignore[union-attr]
        res.repeats.append(
            Repeat(
                length=p,
                times=times,
                steps=steps,
                gpu_ns_per_step=total,
                share_pct=100.0 * total / ref_total if ref_total else 0.0,
                first_kernels=[str(names[int(i)])[:80] for i in ids[start : start + min(p, 3)]],
                module=_common_prefix([m for m in mods if m]) if mods - {None} else None,
            )
        )


def _common_prefix(paths: list[str]) -> str | None:
    parts = [p.split("/") for p in paths]
    out = []
    for xs in zip(*parts, strict=False):
        if len(set(xs)) != 1:
            break
        out.append(xs[0])
    return "/".join(out) or None
