"""Gains from the critical path: each fix's step time re-timed along the dependency graph.

A fix changes some nodes' durations or drops some edges of the graph of
:mod:`gpuscope.analysis.critical_path`; the graph is replayed (every node starts at the latest of
its constraints) and the window's new length over the old one gives the gain. Each fix is
replayed in a few variants (``low``, ``mid``, ``high``: how strongly the fix acts, below), and, when
the untraced step time is known, also on a **calibrated** graph whose host durations are scaled by
one factor so that the replayed window matches the untraced step (the profiler slows the host);
host time is also replayed at 0.3, 0.4 and 0.5 of its recorded length (1.0 too without an untraced
step); the weakest variant is also replayed on a host :data:`HOST_VARIATION` times slower, the
strongest on one that much faster (the fix runs in another process than the trace's);
``gain_pct`` is the mid variant at the calibrated scale (else 0.4; a fix that removes host
staging, :data:`STAGING_FIXES`, is never replayed at the calibrated scale), ``low_pct`` and
``high_pct`` the least and the most over all of these. ``bound`` is False for every graph
estimate (host speed and each fix's strength are assumptions); True only for
:func:`bound_estimate`. docs/metrics.md, "Gains from the path".

Fix models (factor on the duration; "host" = CPU segments outside DataLoader and optimizer):

=====================  ========================================================
fix                    change (low / mid / high)
=====================  ========================================================
dataloader_workers     DataLoader segments × 0.2 / 0.05 / 0
pin_memory             pageable H→D copies at 0.6 / 1 / 1 × pinned bandwidth; their
                       calls ≤ 10 µs and no longer wait
host_sync              synchronizing calls no longer wait (tails 1 / 0 / 0)
mixed_precision        fp32 GEMMs ÷ r/1.5 / r / r (r: measured fp32→bf16 ratio for the
                       GPU and GEMM duration), host × 1.3 / 1.15 / 1 (casts), other
                       kernels × 1 / 1 / 0.6
kernel_fusion          host × 0.6 / 0.3 / 0.1; launches and short kernels × 1 / 0.5 / 0.25
cuda_graphs,           host and launches × 0.5 / 0.2 / 0.05
compiled_overhead
batch_size (×k)        kernels × k / SM-fill scaling / fill scaling with a 3 µs fixed
                       part; copies and data loading × k; per-sample time
cudnn_benchmark        convolution kernels × 1 / 0.8 / 0
overlap_communication  communication × 0.5 / 0.25 / 0
=====================  ========================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gpuscope.analysis.critical_path import CriticalPath, Edge, GpuEvent, Graph, Node, replay
from gpuscope.analysis.tensor_cores import tensor_core_info
from gpuscope.vocabulary.causes import HOST_SYNC

HOST_SCALE_MID = 0.4
HOST_SCALE_RANGE = (0.3, 0.5)
"""Untraced / traced host time (CPU ops, Python, launch calls) under ``torch.profiler`` with
``record_shapes``: 0.43 and 0.37 on the two host-bound traces of sample_traces/fixes (host_sync,
batch_size; found by replaying the graph until its window matched the untraced step). The
estimates replay the graph at these host scales, plus the trace's own calibrated scale when the
untraced step allows one, plus 1.0 (the trace as recorded) when the untraced step is unknown."""

HOST_VARIATION = 1.23
"""How much faster or slower the host of the process that runs the fix may be than the host of the
traced process (a factor; the fixed graph is also replayed with host time × and ÷ it). Host-bound
steps vary between fresh processes on one machine: max/min of the untraced step over 4 fresh
processes, H100 VM, 2026-11-23 (sample_traces/fixes/*/timing.json, planted variants):
``host_sync`` 1.19, ``kernel_fusion`` 1.23, ``dataloader_workers`` 1.34 (median 1.23); GPU-bound
steps do not (``cudnn_benchmark`` 1.01, ``mixed_precision`` 1.00), and the replay lets the factor
move them as little. Taken from the rules other than ``batch_size`` and ``pin_memory``, whose
ranges it had to fix; :data:`HOST_VARIATION` is checked on a second recording (docs/benchmarks.md)."""

STAGING_FIXES = frozenset({"pin_memory"})
"""Fixes that remove host staging the calibration folds into its host factor: a pageable
``cudaMemcpyAsync`` copies the tensor through a pinned bounce buffer on the host (the call lasts
as long as the copy, and the CPU's memcpy of every byte evicts the caches the host's other work
uses). The calibrated factor of such a trace (0.77 on ``pin_memory``'s, against 0.37-0.43 on
host-bound traces without pageable copies) is not the host's speed once the copies are pinned:
the fixed graph is replayed at :data:`HOST_SCALE_RANGE` only, and the untraced time the replay at
those scales leaves unexplained (the staging's cost) goes with the fix."""

BATCH_MULTIPLE = 4
"""The batch multiple the ``batch_size`` estimate re-times (its fix snippet says 4 × B)."""

GEMM_RATIO: dict[str, tuple[float, float]] = {
    "H100 SXM": (2.43, 14.9),
    "H200": (2.43, 14.9),
}
"""Measured fp32 (no TF32) → bf16 matmul speed-up on the GPU, (at 1024³, at 4096³): H100 80GB
HBM3, torch 2.11+cu130, 2026-11-23 (sample_traces/fixes/all.json, ``gemm_and_copy``: 0.96 at
512³, 2.43 at 1024³, 13.0 at 2048³, 14.9 at 4096³). H200 is the same chip. Other GPUs: 2 and
the bf16/fp32 peak ratio of the peak table."""

PINNED_MEASURED_GBPS: dict[str, float] = {"H100 SXM": 54.5}
"""Pinned host-to-device bandwidth measured on the GPU (GB/s; 32 MB copies, H100 80GB HBM3,
2026-11-23, sample_traces/fixes/all.json); other GPUs: the trace's pinned copies, else the table of
:mod:`gpuscope.analysis.copies`."""

SMALL_GEMM_NS = 20_000
LARGE_GEMM_NS = 200_000
SHORT_KERNEL_NS = 20_000
FIXED_KERNEL_NS = 3_000
LAUNCH_CALL_NS = 10_000


@dataclass
class Estimate:
    """A fix's estimated reduction of the step time (per-sample time for ``batch_size``), %:
    ``gain_pct`` (best estimate), ``low_pct``..``high_pct`` (range), ``step_ms`` (the step time
    after the fix), ``bound``: whether ``high_pct`` is proven."""

    gain_pct: float
    low_pct: float
    high_pct: float
    step_ms: float | None
    method: str = "critical_path"
    bound: bool = False
    calibrated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "gain_pct": self.gain_pct,
            "low_pct": self.low_pct,
            "high_pct": self.high_pct,
            "step_ms": self.step_ms,
            "method": self.method,
            "bound": self.bound,
            "calibrated": self.calibrated,
        }


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
    base_ns: dict[float, float] = field(default_factory=dict)
    """Replayed window (ns) per host scale, shared by the estimates of one report."""
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


def makespans(
    g: Graph,
    start_ns: int,
    durs: Sequence[Sequence[float]] | np.ndarray,
    drops: Sequence[set[tuple[int, int]] | None],
) -> list[float]:
    """:func:`makespan` of K replays of one graph at once (K duration lists, K sets of dropped
    edges): one pass over the graph in topological order with each node's start and end held as
    a vector over the K replays (numpy), instead of K passes in Python."""
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
    S: list[np.ndarray] = [d[0]] * n
    E: list[np.ndarray] = [d[0]] * n
    add, maximum, where, isneginf = np.add, np.maximum, np.where, np.isneginf
    nodes = g.nodes
    for v in g.order:
        es = g.preds[v]
        best = None
        masked = False
        for i, ed in enumerate(es):
            t = add(S[ed.src] if ed.from_start else E[ed.src], ed.w)
            if kept:
                m = kept.get((v, i))
                if m is not None:
                    t = where(m, t, -np.inf)
                    masked = True
            best = t if best is None else maximum(best, t, out=best)
        if best is None:
            best = np.full(kk, float(nodes[v].s))
        elif masked:
            best = where(isneginf(best), float(nodes[v].s), best)
        S[v] = best
        E[v] = add(best, d[v])
    return [float(x) - start_ns for x in np.max(E, axis=0)]


def _scaled(base: list[float], prof: list[bool], s: float) -> list[float]:
    return [x * s if p else x for x, p in zip(base, prof, strict=True)]


def _scaled_np(base: np.ndarray, prof: np.ndarray, s: float) -> np.ndarray:
    """``base`` with the profiled nodes' durations × ``s`` (:func:`_scaled` on arrays)."""
    return np.where(prof, base * s, base)


def calibrate(g: Graph, start_ns: int, target_ns: float) -> float | None:
    """The factor on host durations that makes the replayed window ``target_ns`` long (bisection
    over [0.02, 4]); None when no factor reaches it (the GPU alone is longer, or the host alone)."""
    base = [float(n.dur) for n in g.nodes]
    prof = [profiled(n) for n in g.nodes]
    lo, hi = 0.02, 4.0
    f_lo = makespan(g, start_ns, _scaled(base, prof, lo))
    f_hi = makespan(g, start_ns, _scaled(base, prof, hi))
    if not f_lo <= target_ns <= f_hi:
        return None
    for _ in range(10):
        mid = 0.5 * (lo + hi)
        if makespan(g, start_ns, _scaled(base, prof, mid)) < target_ns:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# -- fix models ------------------------------------------------------------------------------------


def _is_host_work(n: Node) -> bool:
    return (
        n.kind == "host"
        and not ({"dataloader", "optimizer"} & n.tags)
        and n.cat in ("cpu", "launch")
    )


def _gemm_fp32(n: Node) -> bool:
    if n.kind != "gpu" or not isinstance(n.event, GpuEvent) or "gemm" not in n.tags:
        return False
    info = tensor_core_info(n.event.name, "gemm")
    return info.tensor_core is False and info.mma and (info.precision in (None, "fp32"))


def _ratio(ctx: Context, d_ns: float) -> float:
    lo, hi = GEMM_RATIO.get(ctx.gpu_model or "", (2.0, ctx.peak_ratio or 8.0))
    if d_ns <= SMALL_GEMM_NS:
        return lo
    if d_ns >= LARGE_GEMM_NS:
        return hi
    f = math.log(d_ns / SMALL_GEMM_NS) / math.log(LARGE_GEMM_NS / SMALL_GEMM_NS)
    return math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo)))


Variant = tuple[DurFn | None, KeepFn | None]


def fix_variants(rec_id: str, g: Graph, ctx: Context) -> dict[str, Variant] | None:
    """The low/mid/high re-timings of a fix (None: no graph model for it)."""
    nodes = g.nodes

    def scale(pred: Callable[[Node], bool], f: float) -> DurFn:
        return lambda v, n: n.dur * f if pred(n) else float(n.dur)

    if rec_id == "dataloader_workers":
        return {
            k: (scale(lambda n: "dataloader" in n.tags, f), None)
            for k, f in (("low", 0.2), ("mid", 0.05), ("high", 0.0))
        }
    if rec_id == "pin_memory":
        corr = {
            n.event.correlation
            for n in nodes
            if n.kind == "gpu" and "pageable_h2d" in n.tags and isinstance(n.event, GpuEvent)
        }

        def is_call(n: Node) -> bool:
            return (
                n.kind == "host"
                and "copy_call" in n.tags
                and n.event is not None
                and (getattr(n.event, "correlation", None) in corr)
            )

        def keep(v: int, ed: Edge) -> bool:
            return not (ed.kind == "wait" and is_call(nodes[v]))

        def pin(f: float) -> DurFn:
            bw = PINNED_MEASURED_GBPS.get(ctx.gpu_model or "", ctx.pinned_gbps or 0.0) * f

            def dur(v: int, n: Node) -> float:
                if n.kind == "gpu" and "pageable_h2d" in n.tags and isinstance(n.event, GpuEvent):
                    b = n.event.bytes or 0
                    return min(float(n.dur), b / bw) if bw > 0 and b > 0 else float(n.dur)
                if is_call(n):
                    return 0.0 if "sync_tail" in n.tags else min(float(n.dur), LAUNCH_CALL_NS)
                return float(n.dur)

            return dur

        return {"low": (pin(0.6), keep), "mid": (pin(1.0), keep), "high": (pin(1.0), keep)}
    if rec_id == HOST_SYNC:

        def sync_tail(n: Node) -> bool:
            return "sync_tail" in n.tags and not (
                "copy_call" in n.tags and n.event is not None and "HtoD" in n.label
            )

        def keep(v: int, ed: Edge) -> bool:
            return not (ed.kind == "wait" and sync_tail(nodes[v]))

        return {
            "low": (None, keep),
            "mid": (scale(sync_tail, 0.0), keep),
            "high": (scale(sync_tail, 0.0), keep),
        }
    if rec_id == "mixed_precision":

        def mp(div: float, other: float, host: float) -> DurFn:
            def dur(v: int, n: Node) -> float:
                if _is_host_work(n):  # autocast adds a cast op per matmul operand
                    return n.dur * host
                if _gemm_fp32(n):
                    return n.dur / max(1.0, _ratio(ctx, n.dur) / div)
                if n.kind == "gpu" and n.cat == "kernels":
                    return n.dur * other
                return float(n.dur)

            return dur

        return {
            "low": (mp(1.5, 1.0, 1.3), None),
            "mid": (mp(1.0, 1.0, 1.15), None),
            "high": (mp(1.0, 0.6, 1.0), None),
        }
    if rec_id == "kernel_fusion":

        def short_k(n: Node) -> bool:
            return (
                n.kind == "gpu"
                and n.cat == "kernels"
                and n.dur < SHORT_KERNEL_NS
                and not ({"gemm", "conv"} & n.tags)
            )

        def fuse(fh: float, fk: float) -> DurFn:
            def dur(v: int, n: Node) -> float:
                if _is_host_work(n):
                    return n.dur * (fk if n.cat == "launch" else fh)
                if short_k(n):
                    return n.dur * fk
                return float(n.dur)

            return dur

        return {
            "low": (fuse(0.6, 1.0), None),
            "mid": (fuse(0.3, 0.5), None),
            "high": (fuse(0.1, 0.25), None),
        }
    if rec_id in ("cuda_graphs", "compiled_overhead"):
        return {
            k: (scale(_is_host_work, f), None)
            for k, f in (("low", 0.5), ("mid", 0.2), ("high", 0.05))
        }
    if rec_id == "batch_size":
        k = BATCH_MULTIPLE
        sms = ctx.sms or 0

        def grow(mode: str) -> DurFn:
            def dur(v: int, n: Node) -> float:
                if n.kind == "host":
                    return n.dur * k if "dataloader" in n.tags else float(n.dur)
                if n.cat == "copies":
                    return float(n.dur * k)
                if n.cat != "kernels":
                    return float(n.dur)
                lin = float(n.dur * k)
                if mode == "low":
                    return lin
                ev = n.event
                blocks = ev.blocks if isinstance(ev, GpuEvent) else None
                d = lin
                if sms and blocks and blocks < sms:
                    d = n.dur * max(1.0, k * blocks / sms)
                if mode == "high":
                    c = min(float(n.dur), FIXED_KERNEL_NS)
                    d = min(d, c + (n.dur - c) * k)
                return d

            return dur

        return {
            "low": (grow("low"), None),
            "mid": (grow("mid"), None),
            "high": (grow("high"), None),
        }
    if rec_id == "cudnn_benchmark":
        return {
            k: (scale(lambda n: n.kind == "gpu" and "conv" in n.tags, f), None)
            for k, f in (("low", 1.0), ("mid", 0.8), ("high", 0.0))
        }
    if rec_id == "overlap_communication":
        return {
            k: (scale(lambda n: n.cat == "communication", f), None)
            for k, f in (("low", 0.5), ("mid", 0.25), ("high", 0.0))
        }
    return None


PER_SAMPLE = frozenset({"batch_size"})


def estimate(rec_id: str, cp: CriticalPath, ctx: Context) -> Estimate | None:
    """The fix's estimate re-timed on the graph (None: no graph model for this fix)."""
    g = cp.graph
    variants = fix_variants(rec_id, g, ctx)
    if variants is None:
        return None
    ws = cp.window[0]
    s_cal = ctx.host_scale_cal
    staging = rec_id in STAGING_FIXES and s_cal is not None
    if staging:  # the calibrated factor holds the staging the fix removes
        s_cal = None
    scales = sorted({*HOST_SCALE_RANGE, HOST_SCALE_MID, *([s_cal] if s_cal is not None else [])})
    if not ctx.untraced_step_ms:
        scales.append(1.0)
    k = BATCH_MULTIPLE if rec_id in PER_SAMPLE else 1
    u = ctx.untraced_step_ms * 1e6 * ctx.n_steps if ctx.untraced_step_ms else None
    gains: dict[tuple[str, float, bool, float], float] = {}
    hv = HOST_VARIATION
    # (variant, host factor of the fixed process against the traced one): every variant as
    # traced; the weakest fix on a slower host, the strongest on a faster one (the range's ends)
    runs = [(name, 1.0) for name in variants] + [("low", hv), ("high", 1.0 / hv)]
    rec = [float(n.dur) for n in g.nodes]
    prof = [profiled(n) for n in g.nodes]
    # each variant's durations and dropped edges, once; then scaled per host speed
    prepared = []
    for name, (dur, keep) in variants.items():
        d = rec if dur is None else [max(0.0, float(dur(v, n))) for v, n in enumerate(g.nodes)]
        drop = (
            {(v, i) for v, es in enumerate(g.preds) for i, ed in enumerate(es) if not keep(v, ed)}
            if keep is not None
            else None
        )
        prepared.append((name, d, drop))
    by_name = {name: (d, drop_set) for name, d, drop_set in prepared}
    # every replay of this estimate (and the old step at each host scale not yet known) at once
    prof_np = np.asarray(prof, dtype=bool)
    arr = {name: np.asarray(d, dtype="float64") for name, (d, _) in by_name.items()}
    rec_np = np.asarray(rec, dtype="float64")
    rows: list[tuple[tuple[str, float, float], np.ndarray, set[tuple[int, int]] | None]] = [
        (("", sc, 1.0), _scaled_np(rec_np, prof_np, sc), None)
        for sc in scales
        if sc not in ctx.base_ns
    ]
    for sc in scales:
        for name, f in runs:
            rows.append(((name, sc, f), _scaled_np(arr[name], prof_np, sc * f), by_name[name][1]))
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
            for gone in (True,) if staging else (False, True):
                t_new = t + (0.0 if gone else extra)
                gains[(name, sc, gone, f)] = 100.0 * (1.0 - t_new / (k * ref)) if ref > 0 else 0.0
    mid_s = s_cal if s_cal is not None else HOST_SCALE_MID
    mid = gains[("mid", mid_s, staging, 1.0)]
    low, high = min(gains.values()), max(gains.values())
    ref_ms = ctx.untraced_step_ms or ctx.step_ms
    step = ref_ms * (1.0 - mid / 100.0) * k if ref_ms else None
    return Estimate(mid, low, high, step, bound=False, calibrated=s_cal is not None)


def calibrated_scale(cp: CriticalPath, ctx: Context) -> float | None:
    """The host scale that makes the replayed window match the untraced step (None: unknown
    untraced step, or no scale reaches it)."""
    if not ctx.untraced_step_ms:
        return None
    return calibrate(cp.graph, cp.window[0], ctx.untraced_step_ms * 1e6 * ctx.n_steps)


def bound_estimate(max_gain_pct: float, ctx: Context) -> Estimate:
    """For a fix without a graph model (``load_imbalance``): the rule's bound as the high end, half
    of it as the estimate, 0 as the low end."""
    ref = ctx.untraced_step_ms or ctx.step_ms
    mid = max_gain_pct / 2.0
    return Estimate(
        mid, 0.0, max_gain_pct, ref * (1 - mid / 100.0) if ref else None, method="bound", bound=True
    )
