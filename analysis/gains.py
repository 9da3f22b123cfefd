"""Gains from the critical path: each fix's step time re-timed along the dependency graph.

A fix changes some nodes' durations or drops some edges of the graph of
:mod:`gpuscope.analysis.critical_path`; the graph is replayed (every node starts at the latest of
its constraints) and the window's new length over the old one gives the gain. Each fix is
replayed in a few variants (``low``, ``mid``, ``high``: how strongly the fix acts, below), and, when
the untraced step time is known, also on a **calibrated** graph whose host durations are scaled by
one factor so that the replayed window matches the untraced step (the profiler slows the host);
host time is also replayed at 0.3, 0.4 and 0.5 of its recorded length (1.0 too without an untraced
step), because the calibrated factor is the traced process's host speed and the processes that
time the fix run at others (docs/metrics.md, "Host speed"); the weakest variant is also replayed on a host :data:`HOST_VARIATION` times slower, the
strongest on one that much faster (the fix runs in another process than the trace's);
``gain_pct`` is the mid variant at the calibrated scale (else 0.4; a fix that removes host
staging, ``staging`` of :func:`replay_estimate`, is never replayed at the calibrated scale), ``low_pct`` and
``high_pct`` the least and the most over all of these; a fix that drops a wait of the host on the
GPU is also weighed against the planted graph on a host :data:`HOST_WAIT_VARIATION` times slower. ``bound`` is False for every graph
estimate (host speed and each fix's strength are assumptions) until it is clipped at the fix's
proven bound. docs/metrics.md, "Gains from the path".

Each fix's models (its ``low`` / ``mid`` / ``high`` variants) live with the fix, in its unit of
:mod:`gpuscope.analysis.fixes` (``retime``); this module replays them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from gpuscope.analysis.critical_path import (
    CHAIN,
    CriticalPath,
    Edge,
    Graph,
    Node,
    gc_paused,
    per_graph,
    replay,
    replay_schedule,
)
from gpuscope.analysis.recommendation import Estimate as Estimate

HOST_SCALE_MID = 0.4
HOST_SCALE_RANGE = (0.3, 0.5)
"""Untraced / traced host time (CPU ops, Python, launch calls) under ``torch.profiler`` with
``record_shapes``: 0.43 and 0.37 on the two host-bound traces of sample_traces/fixes (host_sync,
batch_size; found by replaying the graph until its window matched the untraced step). The
estimates replay the graph at these host scales, plus the trace's own calibrated scale when the
untraced step allows one; where no scale is fitted (:attr:`Context.host_scale_cal` None),
:data:`HOST_SCALE_PRIOR` in their place, plus 1.0 (the trace as recorded) when the untraced step is
unknown. :func:`calibrate` still asks whether the host binds between these two."""

HOST_SCALE_PRIOR = (0.38, 0.55, 0.72)
"""Where the host's speed cannot be fitted (no untraced step, or the planted step's host does not
bind at :data:`HOST_SCALE_RANGE`: :attr:`Context.host_scale_cal` None), the host scales the
estimate replays at instead, (low, point, high): the 10th, 50th and 90th percentiles of the
scale fitted on the 81 one-GPU pairs of sample_traces/validation (v01-v159) whose planted host
binds, to the median planted step timed without the profiler in fresh processes
(``benchmarks/host_scales.py``: 0.38 / 0.55 / 0.72, min 0.15, max 0.90). The two traces
:data:`HOST_SCALE_RANGE` came from sat below most of these; on a GPU-bound step a fix that lets
the host bind (bf16 on an fp32 step) met it that slow: v148 measured 68.1 % against a range of
76.6-84.7 replayed at 0.3-0.5 (73.3-84.7 at these scales). They are the timed processes' own
spread, so against a known untraced step :data:`HOST_VARIATION` is not stacked on them (it is on
a fitted scale, and where no untraced step pins the planted step)."""

HOST_VARIATION = 1.23
"""How much faster or slower the host of the process that runs the fix may be than the host of the
traced process (a factor; the fixed graph is also replayed with host time × and ÷ it). Host-bound
steps vary between fresh processes on one machine: max/min of the untraced step over 4 fresh
processes, H100 VM, 2026-11-23 (sample_traces/fixes/*/timing.json, planted variants):
``host_sync`` 1.19, ``kernel_fusion`` 1.23, ``dataloader_workers`` 1.34 (median 1.23); GPU-bound
steps do not (``cudnn_benchmark`` 1.01, ``mixed_precision`` 1.00), and the replay lets the factor
move them as little. Taken from the rules other than ``batch_size`` and ``pin_memory``, whose
ranges it had to fix; :data:`HOST_VARIATION` is checked on a second recording (docs/benchmarks.md)."""

HOST_WAIT_VARIATION = 1.48
"""How much slower the host of the process that times the **planted** step may be than the
traced process's, for a fix that removes a wait of the host on the GPU (a dropped ``wait`` edge):
the wait drains the GPU's queue every step, so the planted step follows its host's speed while
the fixed one, queued ahead, does not. The largest max/min of a timed variant's step over fresh
processes among the host-sensitive pairs of sample_traces/validation's calibration part (v01,
v02, v05, v08, v10, planted and fixed: 1.09-1.48, median 1.23 like :data:`HOST_VARIATION`;
v05's fixed 1.48, v08's planted 1.40, v10's planted over 8 processes 1.30). The range's top
replays the planted graph on a host this much slower against the strongest fix on the traced
host."""


@dataclass
class Context:
    """What the fix models need beyond the graph: the untraced step (ms, None when unknown), the
    steps in the window, pinned bandwidth (GB/s), the GPU model and its bf16/fp32 peak ratio,
    SMs, and the step time the estimate's ``step_ms`` starts from (ms)."""

    n_steps: int
    step_ms: float
    untraced_step_ms: float | None = None
    pinned_gbps: float | None = None
    gpu_model: str | None = None
    peak_ratio: float | None = None
    sms: int | None = None
    host_scale_cal: float | None = None
    host_scale_max: float | None = None
    """Where no scale is fitted but the untraced step is known: the slowest host scale at which
    the planted replay still fits in it (:func:`host_scale_ceiling`); None: every scale does."""
    base_ns: dict[float, float] = field(default_factory=dict)
    """Replayed window (ns) per host scale, shared by the estimates of one report."""
    memory_bound_fp32_matmul: Mapping[str, float] = field(default_factory=dict)
    """Kernel name -> the share of its time in plain-fp32 matmuls that are memory-bound at the
    fp32 roof (:attr:`gpuscope.analysis.roofline.Roofline.memory_bound_fp32_matmul`; empty
    without a roofline)."""
    """The calibrated host scale (:func:`calibrated_scale`), computed once per report."""


DurFn = Callable[[int, Node], float]
KeepFn = Callable[[int, Edge], bool]


def profiled(n: Node) -> bool:
    """Host time the profiler inflates: CPU ops, Python and launch calls (not copies, waits or
    the DataLoader's own work)."""
    return n.kind == "host" and n.cat in ("cpu", "launch") and "dataloader" not in n.tags


def _host_scale(g: Graph, s: float) -> DurFn:
    def dur(v: int, n: Node) -> float:
        return n.dur * s if profiled(n) else float(n.dur)

    return dur


def makespan(
    g: Graph,
    start_ns: int,
    dur: DurFn | list[float] | None = None,
    keep: KeepFn | None = None,
    drop: set[tuple[int, int]] | None = None,
) -> float:
    """Length (ns) of the replayed window from ``start_ns``."""
    _, E, _ = replay(g, dur, keep, drop=drop)
    return max(E) - start_ns if E else 0.0


@gc_paused()
def makespans(
    g: Graph,
    start_ns: int,
    durs: Sequence[Sequence[float]] | np.ndarray,
    drops: Sequence[set[tuple[int, int]] | None],
) -> list[float]:
    """:func:`makespan` of K replays of one graph at once (K duration lists, K sets of dropped
    edges): one pass over the graph's
    :func:`~gpuscope.analysis.critical_path.replay_schedule` with each node's start and end held
    as a vector over the K replays (numpy), instead of K passes in Python. Every node's start and
    end are the sums and maxima :func:`replay` takes, in its order (bit for bit)."""
    n, kk = len(g.nodes), len(durs)
    if kk == 0:
        return []
    if n == 0:
        return [0.0] * kk
    d = np.maximum(np.asarray(durs, dtype="float64"), 0.0).T.copy()  # (n, K)
    kept: dict[tuple[int, int], np.ndarray] = {}
    for j, dr in enumerate(drops):
        for key in dr or ():
            kept.setdefault(key, np.ones(kk, dtype=bool))[j] = False
    steps = replay_schedule(g, frozenset(v for v, _ in kept))
    add, maximum, where, isneginf = np.add, np.maximum, np.where, np.isneginf
    rows: list[np.ndarray] = []  # per step: its nodes' starts and ends, (rows, K)
    last: list[np.ndarray] = []  # per step: the latest end of its nodes, (K,)
    for st in steps:
        if st[0] is CHAIN:
            _, h_step, h_row, members, ws, _src, _from_start = st
            buf = np.empty((2 * len(members) + 1, kk))
            buf[0] = rows[h_step][h_row]
            buf[1::2] = ws
            buf[2::2] = d[members]
            np.add.accumulate(buf, axis=0, out=buf)
            rows.append(buf)
            last.append(buf[2::2].max(axis=0))
            continue
        _, v, edges, release = st
        best = None
        masked = False
        for e_step, e_row, w, key in edges:
            t = add(rows[e_step][e_row], w)
            if kept:
                m = kept.get(key)
                if m is not None:
                    t = where(m, t, -np.inf)
                    masked = True
            best = t if best is None else maximum(best, t, out=best)
        buf = np.empty((2, kk))
        if best is None:
            buf[0] = release
        elif masked:
            buf[0] = where(isneginf(best), release, best)
        else:
            buf[0] = best
        add(buf[0], d[v], out=buf[1])
        rows.append(buf)
        last.append(buf[1])
    return [float(x) - start_ns for x in np.max(last, axis=0)]


def _scaled(base: list[float], prof: list[bool], s: float) -> list[float]:
    return [x * s if p else x for x, p in zip(base, prof, strict=True)]


def _scaled_np(base: np.ndarray, prof: np.ndarray, s: float) -> np.ndarray:
    """``base`` with the profiled nodes' durations × ``s`` (:func:`_scaled` on arrays)."""
    return np.where(prof, base * s, base)


MAX_HOST_SCALE = 1.0
"""The profiler slows the host, never speeds it up: a host scale above 1 would say the untraced
step holds time the trace does not (its few steps timed before the trace, still warming up:
v01's untraced 67.5 ms against a traced 57.2 ms and a timed 44.4 ms), so the calibration stops at
1 and that time is the replay's unexplained remainder (kept or gone with the fix)."""


IDENTIFIABLE = 0.01
"""The host speed is fitted only where the replayed window moves by at least this share between
the host scales of :data:`HOST_SCALE_RANGE`: on a GPU-bound step the host does not bind there, and
a fit would turn a small unexplained difference (another warm-up, clocks) into a large host scale
(v07: 0.95, which made its host bind and its convolution fix worth 0.7 % against a measured
18.2 %)."""


@gc_paused()
def calibrate(g: Graph, start_ns: int, target_ns: float) -> float | None:
    """The factor on host durations that makes the replayed window ``target_ns`` long (bisection
    over [0.02, :data:`MAX_HOST_SCALE`]); None when no factor reaches it (the GPU alone is
    longer, or the host alone), when the host does not bind at the usual scales, or when the
    target is within :data:`IDENTIFIABLE` of the window at the smallest scale (the GPU's own
    length: v58's untraced 28.14 ms against 28.1, which fitted a host scale of 0.15 where the
    fixed process's host ran at about 0.45). The window at each scale is :func:`makespan`'s;
    the replays go to :func:`makespans` in two batches (the bisection's next
    :data:`_BISECT_LEVELS` halvings, every way they can go, with the four fixed scales first; the
    first batch once per graph)."""
    base, prof = _recorded(g)
    lo, hi = 0.02, MAX_HOST_SCALE
    fixed = (*HOST_SCALE_RANGE, lo, hi)
    todo = _BISECT_STEPS
    depth = min(_BISECT_LEVELS, todo)
    mids = _bisection_tree(lo, hi, depth)
    # the first batch hangs on the graph alone: once per graph (host_scale_ceiling's
    # calibration, after one that found no host speed, replays the same scales)
    spans = per_graph(
        g,
        f"calibrate_first@{start_ns}",
        lambda: _spans_at(g, start_ns, base, prof, (*fixed, *mids)),
    )
    r_lo, r_hi, f_lo, f_hi = spans[:4]
    if r_hi - r_lo < IDENTIFIABLE * r_lo:
        return None  # the host does not bind at the profiler's usual scales: no host speed to fit
    if not f_lo * (1.0 + IDENTIFIABLE) <= target_ns <= f_hi:
        # within IDENTIFIABLE of the GPU's own length, the untraced step is the GPU's: it says
        # the host did not bind there, not how fast it was (any scale up to the fit gives it)
        return None
    spans = spans[4:]
    while True:
        j = 0
        for _ in range(depth):  # the bisection's halvings, read off the tree of its midpoints
            if spans[j] < target_ns:
                lo = mids[j]
                j = 2 * j + 2
            else:
                hi = mids[j]
                j = 2 * j + 1
        todo -= depth
        if todo <= 0:
            return 0.5 * (lo + hi)
        depth = min(_BISECT_LEVELS, todo)
        mids = _bisection_tree(lo, hi, depth)
        spans = _spans_at(g, start_ns, base, prof, mids)


_BISECT_STEPS = 10
"""Halvings of :func:`calibrate`'s bisection."""
_BISECT_LEVELS = 5
"""Halvings replayed in one batch (2**5 - 1 midpoints: every way the next five can go)."""


def _bisection_tree(lo: float, hi: float, depth: int) -> list[float]:
    """The midpoints ``0.5 * (lo + hi)`` a bisection of ``[lo, hi]`` can take in its next
    ``depth`` halvings, as a heap (node ``j``'s lower half at ``2j + 1``, upper at ``2j + 2``):
    the same floats the halvings compute one by one."""
    halves = [(lo, hi)]
    mids: list[float] = []
    for a, b in halves:
        m = 0.5 * (a + b)
        mids.append(m)
        if len(mids) == 2**depth - 1:
            return mids
        halves += [(a, m), (m, b)]
    return mids


def _spans_at(
    g: Graph, start_ns: int, base: np.ndarray, prof: np.ndarray, scales: Sequence[float]
) -> list[float]:
    """:func:`makespan` with the profiled nodes' durations × each of ``scales``."""
    rows = np.stack([_scaled_np(base, prof, s) for s in scales])
    return makespans(g, start_ns, rows, [None] * len(scales))


def _recorded(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Each node's recorded duration (ns, float) and whether it is :func:`profiled`, as arrays,
    read once per graph."""
    got = g.memo.get("recorded")
    if got is None:
        nodes, count = g.nodes, len(g.nodes)
        got = g.memo["recorded"] = (
            np.fromiter((n.e - n.s for n in nodes), dtype="float64", count=count),
            np.fromiter(map(profiled, nodes), dtype=bool, count=count),
        )
    return got  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Scaled:
    """Durations with the nodes ``pred`` picks × ``f``: a duration function (``(v, n) -> ns``)
    that :func:`_durations` also applies to the whole graph at once (``pred`` read once per graph
    and node, then one multiply per variant)."""

    pred: Callable[[Node], bool]
    f: float

    def __call__(self, v: int, n: Node) -> float:
        return n.dur * self.f if self.pred(n) else float(n.dur)


def _durations(g: Graph, dur: DurFn, picked: dict[Any, Any] | None = None) -> np.ndarray:
    """``max(0.0, float(dur(v, n)))`` of every node (ns), as an array: ``x > 0.0`` picks ``x``,
    else ``0.0`` (as ``max`` does: ``-0.0`` and NaN give ``0.0``). A :class:`Scaled` duration is
    applied to the whole array, its predicate read once per node (the same floats: ``n.dur * f``
    and ``float(n.dur)``); so is a duration that has an ``array`` method (:class:`WholeGraph`:
    the re-timings composed in :mod:`gpuscope.analysis.fixes.base`). ``picked``: what one estimate
    has read already (the predicates' node masks, the durations of each function), kept by the
    caller for the re-timings of one estimate (never in ``Graph.memo``: a graph is pickled with
    its memo, and a predicate may be a closure)."""
    raw = raw_durations(g, dur, None, {} if picked is None else picked)
    return np.where(raw > 0.0, raw, 0.0)


class WholeGraph(Protocol):
    """A duration function (``(v, n) -> ns``) that also gives every node's duration at once:
    ``array(g, durs, picked)`` is ``float(self(v, m))`` of every node ``v``, where ``m`` is the
    node with its duration set to ``durs[v]`` (its end moved: ``durs`` None, the node as
    recorded), the same floats bit for bit (:func:`raw_durations` reads the functions it holds)."""

    def __call__(self, v: int, n: Node) -> float: ...

    def array(self, g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class ByNode:
    """A duration function given node by node (``each``: ``(v, n) -> ns``) and for every node at
    once (``whole``: ``(g, durs, picked) -> float64 array``, as :meth:`WholeGraph.array`), the
    two giving the same floats bit for bit: a fix's re-timing handed to the replay reads no node
    in Python (:func:`raw_durations`). ``each`` stays the definition; ``whole`` its vector
    form (tests/test_retime_arrays.py holds them equal on real graphs)."""

    each: DurFn
    whole: Callable[[Graph, np.ndarray | None, dict[Any, Any]], np.ndarray]

    def __call__(self, v: int, n: Node) -> float:
        return self.each(v, n)

    def array(self, g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
        return self.whole(g, durs, picked)


def node_mask(g: Graph, key: str, pred: Callable[[Node], bool]) -> np.ndarray:
    """``pred`` of every node as a boolean array, read once per graph under ``key``: ``pred``
    must read what a re-timing never changes (kind, category, tags, label, event), not the
    duration. The array must not be changed by the caller."""
    return per_graph(
        g,
        "mask:" + key,
        lambda: np.fromiter(map(pred, g.nodes), dtype=bool, count=len(g.nodes)),
    )


def index_mask(g: Graph, ids: Collection[int]) -> np.ndarray:
    """The nodes ``ids`` (indices) as a boolean array over the graph's nodes."""
    m = np.zeros(len(g.nodes), dtype=bool)
    if ids:
        m[np.fromiter(ids, dtype=np.int64, count=len(ids))] = True
    return m


def recorded_ns(g: Graph) -> np.ndarray:
    """Each node's recorded duration (ns, int64), read once per graph."""
    nodes = g.nodes
    return per_graph(
        g,
        "recorded_ns",
        lambda: np.fromiter((n.e - n.s for n in nodes), dtype=np.int64, count=len(nodes)),
    )


def nodes_at(g: Graph, durs: np.ndarray | None) -> list[Node]:
    """The graph's nodes with durations ``durs`` (int64 ns, each end moved; None: as recorded):
    a node whose duration is its recorded one is the graph's own."""
    if durs is None:
        return g.nodes
    out = list(g.nodes)
    for v in np.flatnonzero(durs != recorded_ns(g)).tolist():
        n = out[v]  # dataclasses.replace(n, e=...), without its per-call field walk
        out[v] = type(n)(n.kind, n.cat, n.s, n.s + int(durs[v]), n.label, n.tags, n.event)
    return out


def raw_durations(
    g: Graph, dur: DurFn | None, durs: np.ndarray | None, picked: dict[Any, Any]
) -> np.ndarray:
    """``float(dur(v, m))`` of every node, unclamped, where ``m`` is node ``v`` with its duration
    ``durs[v]`` (int64 ns; its end moved; None: the nodes as recorded); ``dur`` None: ``m``'s
    duration. Each (function, durations) pair is read once per ``picked`` (one estimate): a
    :class:`Scaled` or :class:`WholeGraph` function as a whole array, any other node by node, a
    node whose duration is its recorded one passed as it is (a re-timing reads a node's fields
    and its index, never its identity)."""
    if dur is None:
        if durs is None:
            return _recorded(g)[0]
        return durs.astype("float64")
    key = ("raw", id(dur), None if durs is None else id(durs))
    got = picked.get(key)
    if got is not None:
        return got[2]  # type: ignore[no-any-return]
    nodes, count = g.nodes, len(g.nodes)
    if isinstance(dur, Scaled) and durs is None:
        mask = picked.get(dur.pred)
        if mask is None:
            mask = picked[dur.pred] = np.fromiter(map(dur.pred, nodes), dtype=bool, count=count)
        rec, _ = _recorded(g)
        return np.where(mask, rec * dur.f, rec)  # its mask kept: one multiply per variant
    if (array := getattr(dur, "array", None)) is not None:
        raw = array(g, durs, picked)
    else:
        at = nodes_at(g, durs)
        raw = np.fromiter((dur(v, n) for v, n in enumerate(at)), dtype="float64", count=count)
    picked[key] = (dur, durs, raw)  # the function and durations held: their ids stay theirs
    return raw


Variant = tuple[DurFn | None, KeepFn | None]
"""One re-timing of the graph: each node's new duration (None: as recorded) and which edges stay
(None: all)."""


def variant_multiple(name: str, multiple: int) -> int:
    """The batch multiple a variant re-times: ``k`` for a variant named ``<name>@k`` (a fix that
    grows the batch, re-timed at a larger multiple too), else the fix's ``multiple``."""
    _, sep, k = name.partition("@")
    return int(k) if sep and k.isdigit() and int(k) > 0 else multiple


@gc_paused()
def replay_estimate(
    variants: dict[str, Variant],
    cp: CriticalPath,
    ctx: Context,
    *,
    multiple: int = 1,
    staging: bool = False,
    host_free: bool = False,
    host_ceiling: bool = False,
) -> Estimate:
    """A fix's estimate: its ``low`` / ``mid`` / ``high`` variants replayed on the graph.
    ``multiple``: the batch multiple of a fix that grows the batch (the gain is then on the time
    per sample); ``staging``: the fix removes host staging, which the calibrated host scale holds
    (a pageable ``cudaMemcpyAsync`` copies the tensor through a pinned bounce buffer, and the
    CPU's memcpy of every byte evicts the caches the host's other work uses): the fixed graph is
    replayed at :data:`HOST_SCALE_RANGE` only, and the untraced time those scales leave
    unexplained goes with the fix; the range's top also replays the planted graph on a host
    :data:`HOST_VARIATION` slower than the traced one (the calibrated scale × it: the planted
    step follows its own process's host). The same holds for any host work the calibrated scale
    holds and the fixed process does not run (activation checkpointing's machinery).
    ``host_free``: the strongest variant takes the host's work off the step (a replayed CUDA
    graph), so the planted step follows its host's speed and the fixed one does not: as for a fix
    that drops a wait, the range's top also weighs the strongest fix against the planted graph
    on a host :data:`HOST_WAIT_VARIATION` slower. ``host_ceiling``: the fix shortens host work;
    where no scale is fitted, none above :attr:`Context.host_scale_max` is replayed."""
    g = cp.graph
    ws = cp.window[0]
    s_cal = ctx.host_scale_cal
    staging = staging and s_cal is not None
    s_planted = s_cal  # the traced process's host speed, for the planted step on a slower host
    if staging:  # the calibrated factor holds the staging the fix removes
        s_cal = None
    # the host's speed fitted (the traced process's: :func:`calibrated_scale`), or the prior
    # the pairs whose host binds put it in (:data:`HOST_SCALE_PRIOR`)
    unfitted = ctx.host_scale_cal is None
    s_mid = HOST_SCALE_PRIOR[1] if unfitted else HOST_SCALE_MID
    prior = (HOST_SCALE_PRIOR[0], HOST_SCALE_PRIOR[2]) if unfitted else HOST_SCALE_RANGE
    ceiling = ctx.host_scale_max if unfitted and host_ceiling else None
    if ceiling is not None:  # no host slower than the planted step's own untraced time allows
        s_mid = min(s_mid, ceiling)
        prior = (min(prior[0], ceiling), min(prior[1], ceiling))
    scales = sorted({*prior, s_mid, *([s_cal] if s_cal is not None else [])})
    if not ctx.untraced_step_ms:
        scales.append(1.0)
    k = multiple
    u = ctx.untraced_step_ms * 1e6 * ctx.n_steps if ctx.untraced_step_ms else None
    gains: dict[tuple[str, float, bool, float], float] = {}
    # the host of the process that runs the fix varies from the traced one's by HOST_VARIATION
    # around a fitted scale; against a known untraced step (the planted step, its host not
    # binding), the prior's scales are already the timed processes' own spread (fitted to fresh
    # processes, one per pair), so they take none on top
    hv = 1.0 if unfitted and ctx.untraced_step_ms else HOST_VARIATION
    # (variant, host factor of the fixed process against the traced one): every variant as
    # traced; the weakest fix on a slower host, the strongest on a faster one (the range's ends)
    runs = [(name, 1.0) for name in variants] + [("low", hv), ("high", 1.0 / hv)]
    runs += [(name, 1.0 / hv) for name in variants if name.startswith("high@")]
    rec_np, prof_np = _recorded(g)
    # each variant's durations and dropped edges, once (once per function: variants may share
    # one); then scaled per host speed
    durs_of: dict[int, np.ndarray] = {}
    picked: dict[Any, Any] = {}  # Scaled predicates' masks, each function's durations
    drops_of: dict[int, set[tuple[int, int]]] = {}
    by_name: dict[str, tuple[np.ndarray, set[tuple[int, int]] | None]] = {}
    for name, (dur, keep) in variants.items():
        if dur is None:
            d = rec_np
        elif (d_ := durs_of.get(id(dur))) is not None:
            d = d_
        else:
            d = durs_of[id(dur)] = _durations(g, dur, picked)
        drop = None
        if keep is not None:
            drop = drops_of.get(id(keep))
            if drop is None:
                drop = drops_of[id(keep)] = {
                    (v, i)
                    for v, es in enumerate(g.preds)
                    for i, ed in enumerate(es)
                    if not keep(v, ed)
                }
        by_name[name] = (d, drop)
    # a fix that drops a wait of the host on the GPU: the planted step follows its host's speed
    hw = HOST_WAIT_VARIATION
    # so does one whose strongest variant takes the host off the step (``host_free``)
    waits = host_free or any(
        g.preds[v][i].kind == "wait" for _, dr in by_name.values() for v, i in (dr or ())
    )
    # every replay of this estimate (and the old step at each host scale not yet known) at once
    arr = {name: d for name, (d, _) in by_name.items()}
    rows: list[tuple[tuple[str, float, float], np.ndarray, set[tuple[int, int]] | None]] = [
        (("", sc, 1.0), _scaled_np(rec_np, prof_np, sc), None)
        for sc in scales
        if sc not in ctx.base_ns
    ]
    for sc in scales:
        for name, f in runs:
            rows.append(((name, sc, f), _scaled_np(arr[name], prof_np, sc * f), by_name[name][1]))
        if waits:  # the planted graph on a slower host (the range's top)
            rows.append((("", sc * hw, 1.0), _scaled_np(rec_np, prof_np, sc * hw), None))
    if staging and s_planted is not None:  # the planted step on a host hv slower (the top)
        sp = s_planted * hv
        rows.append((("", sp, 1.0), _scaled_np(rec_np, prof_np, sp), None))
    spans = dict(
        zip(
            (r[0] for r in rows),
            makespans(g, ws, np.stack([r[1] for r in rows]), [r[2] for r in rows]),
            strict=True,
        )
    )
    for sc in scales:
        ctx.base_ns.setdefault(sc, spans.get(("", sc, 1.0), 0.0))
    for sc in scales:
        base = ctx.base_ns[sc]
        for name, f in runs:
            t = spans[(name, sc, f)]
            # the old step: the untraced one when known (what the user runs), or the replayed
            # one when longer (GPU work queued before the window); time the replay does not
            # explain (untraced − replayed) either stays (keep) or goes with the fix (drop;
            # always, for a fix that removes host staging)
            ref = max(u or base, base)
            extra = max(0.0, (u or 0.0) - base)
            kn = variant_multiple(name, k)
            for gone in (True,) if staging else (False, True):
                t_new = t + (0.0 if gone else extra)
                gains[(name, sc, gone, f)] = 100.0 * (1.0 - t_new / (kn * ref)) if ref > 0 else 0.0
        if waits:  # the strongest fix against the planted step on a host hw slower
            slow = spans[("", sc * hw, 1.0)] + max(0.0, (u or 0.0) - base)
            t = spans[("high", sc, 1.0)]
            for gone in (True,) if staging else (False, True):
                t_new = t + (0.0 if gone else max(0.0, (u or 0.0) - base))
                gains[("slow_planted", sc, gone, hw)] = (
                    100.0 * (1.0 - t_new / (k * slow)) if slow > 0 else 0.0
                )
    if staging and s_planted is not None:
        # the planted step follows its own process's host speed (the host binds there: the
        # calibrated scale is identifiable), which varies between processes as the fixed one's
        # does: the strongest fix at each prior scale against the planted step on a host hv
        # slower than the traced one (no time left unexplained at the calibrated scale)
        slow = spans[("", s_planted * hv, 1.0)]
        for sc in scales:
            t = spans[("high", sc, 1.0)]
            gains[("slow_planted", sc, True, hv)] = 100.0 * (1.0 - t / (k * slow)) if slow else 0.0
    mid_s = s_cal if s_cal is not None else s_mid
    mid = gains[("mid", mid_s, staging, 1.0)]
    low, high = min(gains.values()), max(gains.values())
    ref_ms = ctx.untraced_step_ms or ctx.step_ms
    step = ref_ms * (1.0 - mid / 100.0) * k if ref_ms else None
    return Estimate(mid, low, high, step, bound=False, calibrated=s_cal is not None)


def host_scale_ceiling(cp: CriticalPath, ctx: Context) -> float | None:
    """Where the untraced step is known but no host speed is fitted (:func:`calibrated_scale`
    None: within :data:`IDENTIFIABLE` of the GPU's own length, the untraced step says the host did
    not bind, not how fast it ran): the slowest host scale at which the planted replay is still no
    longer than the untraced step (× 1 + :data:`IDENTIFIABLE`). A slower host would have made the
    planted step longer than it was timed, so no scale of the estimate goes above it: the prior's
    scales (:data:`HOST_SCALE_PRIOR`) replay the planted step longer than measured there, and every
    gain against that longer step was inflated by it (v156, a GPU-bound VoVNet: its planted step
    untraced 21.5 ms against 20.9 of GPU work, replayed at 0.55 longer still; torch.compile was
    estimated at 9.5 %, 2.5-17.8, and timed at -11.5 %). None: unknown untraced step, a fitted
    scale, or no scale up to :data:`MAX_HOST_SCALE` reaches it (or the host does not bind at
    :data:`HOST_SCALE_RANGE`: calibrate's own None)."""
    if not ctx.untraced_step_ms or ctx.host_scale_cal is not None:
        return None
    target = ctx.untraced_step_ms * 1e6 * ctx.n_steps * (1.0 + IDENTIFIABLE)
    return calibrate(cp.graph, cp.window[0], target)


def calibrated_scale(cp: CriticalPath, ctx: Context) -> float | None:
    """The host scale that makes the replayed window match the untraced step (None: unknown
    untraced step, or no scale reaches it)."""
    if not ctx.untraced_step_ms:
        return None
    return calibrate(cp.graph, cp.window[0], ctx.untraced_step_ms * 1e6 * ctx.n_steps)
