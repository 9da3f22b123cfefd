"""What every fix unit is made of: the rules' inputs, the finding a rule returns, the fix unit itself
(:class:`FixUnit`: id, words, detection rule, re-timing, proven bound) and the helpers the rules
share (:func:`significant`, :func:`host_cost`, ...).

A cost is noise, and its rule stays silent, unless it is at least :data:`FLOOR_PCT` of the window
and either :data:`MIN_SHARE_PCT` of the window or :data:`MIN_PER_STEP_US` per step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.compiled import CompiledInfo
from gpuscope.analysis.critical_path import per_graph
from gpuscope.analysis.event_classes import OP_CATS, RUNTIME_CATS
from gpuscope.analysis.fixes import band
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.gains import (
    HOST_SCALE_MID,
    HOST_SCALE_PRIOR,
    Context,
    DurFn,
    Estimate,
    Scaled,
    Variant,
    node_mask,
    nodes_at,
    raw_durations,
    recorded_ns,
    replay_estimate,
)
from gpuscope.analysis.idle import IdleResult
from gpuscope.analysis.rank_row import RankRow
from gpuscope.analysis.recommendation import MEMORY as MEMORY
from gpuscope.analysis.recommendation import PER_SAMPLE_TIME as PER_SAMPLE_TIME
from gpuscope.analysis.recommendation import STEP_TIME as STEP_TIME
from gpuscope.analysis.recommendation import Recommendation as Recommendation

if TYPE_CHECKING:
    from gpuscope.analysis.copies import PageableCopies
    from gpuscope.analysis.critical_path import CriticalPath, Graph, Node
    from gpuscope.analysis.memory import MallocStats, MemoryResult
    from gpuscope.analysis.phase_patterns import PhasePatterns

MIN_SHARE_PCT = 2.0
"""A cost of at least this share of the window (%) is a finding ..."""
MIN_PER_STEP_US = 100.0
"""... and so is one of at least this many µs per step ..."""
FLOOR_PCT = 0.5
"""... as long as it is at least this share of the window (%): below, it is too small."""


@dataclass(frozen=True)
class Words:
    """A fix's words: ``title`` (imperative, one line), ``why`` (one line: why it helps) and
    ``code`` (copyable Python)."""

    title: str
    why: str
    code: str


@dataclass
class KernelStats:
    """Compute kernels of the window: count, approximate median duration (µs), time in kernels
    shorter than :data:`SHORT_KERNEL_US` (µs), time in kernels whose grid has fewer blocks than
    the GPU has SMs (µs) and the mean SM fill of those (0..1), convolution kernel time (µs) and the
    part of it in PyTorch's own convolution kernels (µs), whether cuDNN's algorithm search ran."""

    n_kernels: int = 0
    kernel_us: float = 0.0
    median_us: float | None = None
    short_us: float = 0.0
    n_short: int = 0
    small_grid_us: float = 0.0
    small_grid_fill: float | None = None
    conv_us: float = 0.0
    cudnn_find_seen: bool = False
    native_conv_us: float = 0.0
    """Of ``conv_us``, PyTorch's own convolution kernels (``event_classes.NATIVE_CONV_RE``)."""
    channels_last_bn_us: float = 0.0
    """PyTorch's own channels-last training BatchNorm kernels (µs over the window:
    ``event_classes.CHANNELS_LAST_BATCH_NORM_RE``)."""
    per_channel_grid_us: float = 0.0
    """Kernels with fewer blocks than SMs whose grid is one block per channel
    (``event_classes.PER_CHANNEL_GRID_RE``: NCHW training BatchNorm), µs over the window; left out
    of ``small_grid_us`` and ``small_grid_fill``, which count the kernels a larger batch fills."""


SHORT_KERNEL_US = 20.0
"""A kernel shorter than this (µs) is "short": launch and host overhead dominate it."""


@dataclass
class Inputs:
    """Everything the rules read, in the units named. ``peers``: the other ranks' lines of the run
    (their ``rank``, ``gpu_busy_pct``, ``step_time_ms``, ``comm_only_us_per_step`` are read)."""

    window_ns: int
    n_steps: int
    busy_pct: float
    idle: IdleResult
    kernels: KernelStats = field(default_factory=KernelStats)
    fp32_gemm_us: float | None = None
    # tensor-core kernel time by precision (µs over the window: ``tf32``, ``bf16``, ``fp16``...)
    tc_us_by_precision: Mapping[str, float] = field(default_factory=dict)
    tensor_core_pct: float | None = None
    gpu_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    tc_speedup: float | None = None
    comm_only_ns: int = 0
    peers: list[RankRow] = field(default_factory=list)
    mem_used_frac: float | None = None
    dataloader_kind: str | None = None
    untraced_step_ns: float | None = None
    host_cap_ns_per_step: float | None = None
    compiled: CompiledInfo | None = None
    # torch.backends.cudnn.benchmark as gpuscope.capture recorded it (gpuscope.torch_flags); None:
    # unknown (a trace from elsewhere)
    cudnn_benchmark: bool | None = None
    pageable_excess_ns: float = 0.0
    # the pageable host-to-device copies (analysis.copies) when there were some
    pageable_copy: PageableCopies | None = None
    # every host-to-device copy's bytes per step, pageable and pinned (analysis.copies)
    h2d_bytes_per_step: float = 0.0
    # the allocator's memory (analysis.memory) when the trace recorded it; a mapping of the same
    # names (a hand-built input, a stored ``memory`` document) reads alike (:func:`memory`)
    memory: MemoryResult | Mapping[str, Any] | None = None
    # the optimizer loop and the recompute found by phase (analysis.phase_patterns), when looked for
    phase: PhasePatterns | None = None
    # this rank's all-reduces matched across ranks, per step: bytes and transfer ns (None: no
    # matched all-reduce; :func:`gpuscope.analysis.fixes.overlap_communication.allreduce_per_step`)
    allreduce_bytes_per_step: float | None = None
    allreduce_ns_per_step: float | None = None
    # this rank's all-gathers matched across ranks: their transfer ns per step, from the last
    # rank's arrival to the kernel's end (None: no matched all-gather;
    # :func:`gpuscope.analysis.fixes.fsdp_prefetch.allgather_transfer_per_step`)
    allgather_transfer_ns_per_step: float | None = None


@dataclass
class Finding:
    """What a rule found: the evidence, the cost it measured (% of the step), the proven bound (%,
    only from a unit with a :attr:`FixUnit.proof`), and the title, why or code where the run's
    facts change the unit's words (None: the unit's)."""

    evidence: dict[str, Any]
    cost_pct: float
    bound_pct: float | None = None
    title: str | None = None
    code: str | None = None
    why: str | None = None


Retime = Callable[["Graph", Context], dict[str, Variant]]
"""A fix's re-timing: its ``low`` / ``mid`` / ``high`` variants of the graph's durations and edges."""


@dataclass(frozen=True)
class FixUnit:
    """One fix, whole: its ``id`` (``recommendations[].id``), its :class:`Words`, its detection
    rule (``detect``: :class:`Inputs` -> :class:`Finding`, None when the evidence is not there),
    its re-timing on the critical path (``retime``; None: no graph model, the estimate is taken
    from the proven bound), and ``proof``: why its bound is a hard ceiling (None: no bound is
    proven, the user sees the estimate alone). ``footing``: :data:`STEP_TIME`,
    :data:`PER_SAMPLE_TIME` or :data:`MEMORY`. ``batch_multiple``: the batch the re-timing grows
    to (per-sample footing); ``staging``: the fix removes host work the calibrated host scale
    holds but the fixed process does not run (a pageable copy's staging; the checkpoint
    machinery); ``host_free``: the strongest fix takes the host's work off the step (a replayed
    CUDA graph), so the range's top also weighs it against the planted step on a slower host
    (:func:`gpuscope.analysis.gains.replay_estimate`)."""

    id: str
    words: Words
    detect: Callable[[Inputs], Finding | None]
    retime: Retime | None = None
    proof: str | None = None
    footing: str = STEP_TIME
    batch_multiple: int = 1
    staging: bool = False
    host_free: bool = False
    host_ceiling: bool = False
    """The fix shortens host work (and never makes the host bind where it did not): where no host
    speed is fitted against a known untraced step, its replay takes no host scale slower than
    that step allows (:attr:`gpuscope.analysis.gains.Context.host_scale_max`). A fix that
    shortens the GPU's work (bf16, cuDNN's benchmark) keeps the prior's scales: after it the host
    may bind, and the replay's host chain at the ceiling was too fast there (v58)."""
    general: bool = False
    """A general remedy of host and launch overhead (torch.compile, CUDA graphs): it shortens the
    host work a fix of a cause found by phase (a :attr:`cause` unit) removes outright, so it is
    estimated on top of those fixes and listed after them (:func:`gpuscope.analysis.fixes.estimate`)."""
    cause: bool = False
    """A fix of one cause found by phase and pattern (the recompute, the optimizer's loop) whose
    host work a :attr:`general` remedy would also shorten."""
    replays: frozenset[str] = frozenset()
    """The :attr:`cause` fixes (ids) whose work this :attr:`general` remedy takes off the step as
    well, so that it competes with them rather than following them: beside those alone it is
    estimated alone, as they are, and the larger gain comes first
    (:func:`gpuscope.analysis.fixes.estimate`). CUDA graphs replay the recompute of activation
    checkpointing with the rest of the backward (sample_traces/validation, ``cuda_graphs_gate.json``
    calls 13-15)."""
    advised: Callable[[Recommendation, Graph, Context], dict[str, Variant]] | None = None
    """The re-timing of the fix the recommendation's words advise, where the finding chooses
    between fixes of one unit (activation checkpointing: drop it, or checkpoint fewer blocks);
    None: :attr:`retime` for every finding. A fix applied before a general remedy keeps
    :attr:`retime`'s ``mid``."""
    changes_training: bool = False
    """The fix changes the training itself, not only how fast its math runs (a larger batch: the
    learning rate, the convergence, the memory): it is listed after the fixes that keep the
    training identical and whose estimate is significant (:func:`gpuscope.analysis.fixes.order`)."""
    top: Callable[[Estimate, CriticalPath, Context], Estimate] | None = None
    """The re-timed estimate with the range's top raised where the unit knows of a larger gain
    the replay's footing leaves out (applied before the bound clips it, for a unit estimated
    alone, not on top of others); None: as replayed."""

    def find(self, inp: Inputs) -> Recommendation | None:
        """The recommendation when the rule's evidence holds (None: silent)."""
        f = self.detect(inp)
        if f is None:
            return None
        if (f.bound_pct is not None) != (self.proof is not None):
            raise AssertionError(f"{self.id}: a bound without its proof, or a proof without one")
        return Recommendation(
            self.id,
            f.title or self.words.title,
            f.why or self.words.why,
            f.evidence,
            f.code or self.words.code,
            f.cost_pct,
            f.bound_pct,
            self.footing,
        )

    def estimate(
        self,
        rec: Recommendation,
        cp: CriticalPath,
        ctx: Context,
        before: tuple[FixUnit, ...] = (),
    ) -> Estimate:
        """The fix's estimate: re-timed on the graph (else half the proven bound, 0 to the bound),
        clipped at the proven bound (``clipped`` says when it bit). ``before``: fixes applied
        first (their ``mid`` re-timing): the estimate is then what this fix adds on top of them,
        as a share of the step as it is now."""
        est = None
        if self.retime is not None:
            variants = (
                self.advised(rec, cp.graph, ctx)
                if self.advised is not None
                else self.retime(cp.graph, ctx)
            )
            first: Variant = (None, None)
            for u in before:
                if u.retime is not None:
                    first = after(u.retime(cp.graph, ctx)["mid"], {"x": first})["x"]
            if before:
                variants = after(first, variants)
            est = replay_estimate(
                variants,
                cp,
                ctx,
                multiple=self.batch_multiple,
                staging=self.staging,
                host_free=self.host_free,
                host_ceiling=self.host_ceiling,
            )
            if before and first != (None, None):
                done = replay_estimate(
                    {k: first for k in ("low", "mid", "high")},
                    cp,
                    ctx,
                    staging=self.staging,
                    host_ceiling=self.host_ceiling,
                )
                est = on_top(est, done, ctx)
            if self.top is not None and not before:
                est = self.top(est, cp, ctx)
        if est is None:
            if rec.bound_pct is None:  # the registry's test holds every unit to one of the two
                raise AssertionError(f"{self.id}: neither a re-timing nor a proven bound")
            return band.narrow(bound_estimate(rec.bound_pct, ctx), self.id)
        return band.narrow(clip(est, rec.bound_pct, ctx), self.id)


def after(first: Variant, variants: dict[str, Variant]) -> dict[str, Variant]:
    """``variants`` applied to the graph as ``first`` leaves it: each node's duration is first's,
    then the variant's on it; an edge stays when both keep it."""
    d0, k0 = first

    def compose(v: Variant) -> Variant:
        d1, k1 = v
        keep = k0 if k1 is None else k1 if k0 is None else (lambda i, ed: k0(i, ed) and k1(i, ed))
        return Composed(d0, d1), keep

    return {name: compose(v) for name, v in variants.items()}


@dataclass(frozen=True, eq=False)
class Composed:
    """The duration ``d1`` gives a node once ``d0`` has re-timed it (:func:`after`; None: as
    recorded). Node by node, or every node at once (:meth:`array`, what
    :func:`~gpuscope.analysis.gains.raw_durations` reads: ``d0``'s durations once per estimate,
    rounded as :meth:`__call__` rounds them, then ``d1`` on the nodes they leave)."""

    d0: DurFn | None
    d1: DurFn | None

    def __call__(self, i: int, n: Node) -> float:
        d0, d1 = self.d0, self.d1
        if d0 is None:
            m = n
        else:  # dataclasses.replace(n, e=...), without its per-call field walk
            e = n.s + max(0, round(d0(i, n)))
            m = type(n)(n.kind, n.cat, n.s, e, n.label, n.tags, n.event)
        return float(m.dur) if d1 is None else d1(i, m)

    def array(self, g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
        if self.d0 is None:
            mine = durs
        else:
            raw = raw_durations(g, self.d0, durs, picked)
            if not np.isfinite(raw).all() or np.abs(raw).max(initial=0.0) >= 2.0**62:
                # round() raises on these (or its ints outgrow int64): node by node, as called
                return np.fromiter(
                    (self(v, n) for v, n in enumerate(nodes_at(g, durs))),
                    dtype="float64",
                    count=len(g.nodes),
                )
            # max(0, round(x)): numpy's rint rounds half to even, as round() does
            rounded = np.rint(raw)
            mine = np.where(rounded > 0.0, rounded, 0.0).astype(np.int64)
        return raw_durations(g, self.d1, mine, picked)


def on_top(both: Estimate, first: Estimate, ctx: Context) -> Estimate:
    """What a fix adds once ``first``'s fixes are in (``both``: the two together), as a share of
    the step before any of them: each figure less ``first``'s point gain (never below 0 at the
    point, the range's ends kept in order)."""
    g0 = first.gain_pct
    gain = max(0.0, both.gain_pct - g0)
    low = min(gain, both.low_pct - g0)
    high = max(gain, both.high_pct - g0)
    ref = ctx.untraced_step_ms or ctx.step_ms
    step = ref * (1.0 - both.gain_pct / 100.0) if ref else None
    return replace(both, gain_pct=gain, low_pct=low, high_pct=high, step_ms=step)


def bound_estimate(bound_pct: float, ctx: Context) -> Estimate:
    """For a fix without a graph model: half the proven bound as the estimate, 0 to the bound."""
    ref = ctx.untraced_step_ms or ctx.step_ms
    mid = bound_pct / 2.0
    return Estimate(
        mid, 0.0, bound_pct, ref * (1 - mid / 100.0) if ref else None, method="bound", bound=True
    )


def clip(est: Estimate, bound_pct: float | None, ctx: Context) -> Estimate:
    """``est`` with no figure above the proven bound (unchanged without one). Where even its low
    end is above the bound, the re-timing is no guide to this step (its model of the step breaks
    the proof): the bound's own estimate (:func:`bound_estimate`: half of it, 0 to it), never a
    range of zero width at the bound."""
    if bound_pct is None or est.high_pct <= bound_pct:
        return est
    if est.low_pct > bound_pct:
        return replace(bound_estimate(bound_pct, ctx), clipped=True)
    gain = min(est.gain_pct, bound_pct)
    ref = ctx.untraced_step_ms or ctx.step_ms
    step = est.step_ms
    if step is not None and gain != est.gain_pct and ref:
        step = step * (1.0 - gain / 100.0) / (1.0 - est.gain_pct / 100.0)
    return replace(
        est,
        gain_pct=gain,
        low_pct=min(est.low_pct, bound_pct),
        high_pct=bound_pct,
        step_ms=step,
        bound=True,
        clipped=True,
    )


# -- helpers the rules share ------------------------------------------------------------------


def memory(inp: Inputs, name: str) -> Any:
    """One figure of the allocator's memory (``peak_reserved_bytes``, ``malloc``, ...) by its
    name in ``analyze --json``'s ``memory``; None when unknown."""
    m = inp.memory
    if m is None:
        return None
    return m.get(name) if isinstance(m, Mapping) else getattr(m, name, None)


def malloc_calls(m: MallocStats | Mapping[str, Any] | None) -> tuple[int, float, float]:
    """The allocator's driver calls inside the steps: (calls, µs, µs per step); zeros when
    unknown. ``m``: the typed :class:`MallocStats` or ``analyze --json``'s ``memory.malloc``."""
    if m is None:
        return 0, 0.0, 0.0
    if isinstance(m, Mapping):
        return m.get("calls", 0), float(m.get("us") or 0.0), m.get("us_per_step", 0.0)
    return m.calls, float(m.us), m.us_per_step


def host_cost(ns: float, inp: Inputs) -> tuple[float, bool]:
    """A host-side cost (ns over the window) capped by what can exist without the profiler:
    ``host_cap_ns_per_step`` × steps (untraced step − GPU busy per step). (cost, capped?)"""
    if inp.host_cap_ns_per_step is None:
        return ns, False
    cap = inp.host_cap_ns_per_step * max(1, inp.n_steps)
    return (cap, True) if ns > cap else (ns, False)


def host_bound_pct(ns: float, inp: Inputs) -> float:
    """A proven ceiling (% of the step) for a fix that removes at most ``ns`` of host time (over
    the window, traced): its share of the untraced step, profiler-capped (:func:`host_gain_pct`:
    the step cannot fall below its GPU's busy time); where the traced step is no longer than the
    untraced one, its share of the traced window too, the larger: the untraced step is timed on
    other steps than the trace's (a few, before it), and when those ran the slower, either
    footing may be the one the fixed run keeps. A traced step longer than the untraced one holds
    the profiler's own cost, and so does the traced share (v98: 28 % of the traced step inside
    the DataLoader, where the untraced step left 7.3 % to gain). Without an untraced step: the
    traced share."""
    capped, _ = host_cost(ns, inp)
    traced = share(ns, inp.window_ns)
    if not inp.untraced_step_ns:
        return min(100.0, traced)
    untraced = host_gain_pct(capped, inp)
    if inp.window_ns / max(1, inp.n_steps) > inp.untraced_step_ns:
        return min(100.0, untraced)
    return min(100.0, max(untraced, traced))


def host_gain_pct(ns: float, inp: Inputs) -> float:
    """A time (ns over the window, already capped) as % of the step: its share of the traced
    window, or, with an untraced step time, its per-step value over the untraced step (the step
    the user actually runs). At most 100."""
    if inp.untraced_step_ns:
        return min(100.0, 100.0 * ns / max(1, inp.n_steps) / inp.untraced_step_ns)
    return share(ns, inp.window_ns)


def cap_note(ev: dict[str, Any], capped: bool, inp: Inputs) -> None:
    """Record the profiler cap in the evidence, and say so in the summary when it bit."""
    if inp.host_cap_ns_per_step is None:
        return
    ev["profiler_cap_us_per_step"] = inp.host_cap_ns_per_step / 1e3
    ev["capped_by_profiler"] = capped
    if capped:
        ev["summary"] += (
            f" Without the profiler the step takes {sig3((inp.untraced_step_ns or 0) / 1e6)} ms, "
            f"so at most {sig3(inp.host_cap_ns_per_step / 1e6)} ms per step of it can be real "
            "(untraced step − GPU busy per step): the cost is capped there."
        )


def sharded_by(inp: Inputs) -> str | None:
    """What splits this rank's parameters across ranks, as its trace shows it: ``"FSDP"`` (its
    all-gathers matched across ranks: an all-gather in a training step is FSDP's, see
    :mod:`~gpuscope.analysis.fixes.fsdp_prefetch`), ``"DTensor"`` (DTensor's Python dispatch
    spans: tensor parallelism), ``"compiled collectives"`` (functional collectives inside the
    compiled graph, :attr:`~gpuscope.analysis.compiled.CompiledInfo.compiled_collectives_per_step`:
    a tensor-parallel model compiled after ``parallelize_module``, whose dispatch Dynamo traced
    away and whose all-reduces it kept in the graph; v171's and v190's fixed variants, traced on
    2 H200s: 48 and 18 a step), None for none of them. A functional collective the program
    calls outside compiled code (a metric's all-reduce) is no sign."""
    if inp.allgather_transfer_ns_per_step is not None:
        return "FSDP"
    sd = inp.phase.subclass if inp.phase is not None else None
    if sd is not None and sd.dtensor:
        return "DTensor"
    if inp.compiled is not None and inp.compiled.compiled_collectives_per_step > 0:
        return "compiled collectives"
    return None


def significant(cost_ns: float, window_ns: int, n_steps: int) -> bool:
    """Whether a cost (ns over the window) is a finding rather than noise."""
    if window_ns <= 0 or cost_ns <= 0:
        return False
    pct = 100.0 * cost_ns / window_ns
    per_step_us = cost_ns / max(1, n_steps) / 1e3
    return pct >= FLOOR_PCT and (pct >= MIN_SHARE_PCT or per_step_us >= MIN_PER_STEP_US)


def share(ns: float, window_ns: int) -> float:
    """``ns`` as % of the window."""
    return 100.0 * ns / window_ns if window_ns > 0 else 0.0


def per_step_us(ns: float, n_steps: int) -> float:
    """``ns`` over the window as µs per step."""
    return ns / max(1, n_steps) / 1e3


def evidence_json(part: Any, **figures: Any) -> dict[str, Any]:
    """A finding's evidence document: the pattern's own document (its ``to_json()``, as
    ``analyze --json`` prints it) with this fix's figures beside it."""
    return {**part.to_json(), **figures}


def cost_evidence(name: str, ns: float, inp: Inputs) -> dict[str, Any]:
    """``{name}_us_per_step`` and ``share_pct`` of a cost (ns over the window)."""
    return {
        f"{name}_us_per_step": per_step_us(ns, inp.n_steps),
        "share_pct": share(ns, inp.window_ns),
    }


def frame_rows(inp: Inputs, cls: str, limit: int = 5) -> list[dict[str, Any]]:
    """The host spans of an evidence class (``name``, ``op``, ``per_step``, ``host_us_per_step``),
    the longest first."""
    frame = inp.idle.evidence.get(cls)
    if frame is None or frame.empty:
        return []
    rows = []
    for r in frame.head(limit).to_dict("records"):
        op = r.get("op")
        rows.append(
            {
                "name": r["name"],
                "op": op if isinstance(op, str) else None,
                "per_step": float(r["count"]) / max(1, inp.n_steps),
                "host_us_per_step": float(r["host_ns"]) / max(1, inp.n_steps) / 1e3,
            }
        )
    return rows


def gib(b: float) -> str:
    """Bytes as ``"1.5 GiB"``."""
    return f"{b / 2**30:.3g} GiB"


# -- helpers the re-timings share -------------------------------------------------------------


def scaled(pred: Callable[[Node], bool], f: float) -> Callable[[int, Node], float]:
    """Durations with the nodes ``pred`` picks × ``f`` (:class:`~gpuscope.analysis.gains.Scaled`)."""
    return Scaled(pred, f)


def scaled_variants(
    pred: Callable[[Node], bool], low: float, mid: float, high: float
) -> dict[str, Variant]:
    """The ``low`` / ``mid`` / ``high`` re-timings of a fix that scales the nodes ``pred`` picks by
    these factors (edges kept)."""
    return {k: (scaled(pred, f), None) for k, f in (("low", low), ("mid", mid), ("high", high))}


OWN_CODE_NS = 1_000_000
"""A host segment on which no operator and no runtime call runs (untraced time, or time inside
an annotation or a Python function between their ops) lasting this long (ns) or more is code of
the user's own, not the dispatch between ops: a sleep, a batch made in Python, I/O, logging
(:func:`own_code`). Between the ops of an eager step the host spends microseconds; on the DDP
straggler sample (../multi_gpu) rank 1's planted 17.8 ms sleep is one such segment per step."""

OP_EVENT_CATS = frozenset((*OP_CATS, *RUNTIME_CATS))
"""The host events that are an operator or a runtime call (the rest: annotations, Python)."""


def own_code(n: Node) -> bool:
    """A host segment of :data:`OWN_CODE_NS` or more on which no operator or runtime call runs:
    code torch.compile, CUDA graphs or autocast leave as it is."""
    return (
        n.kind == "host"
        and n.cat == "cpu"
        and n.dur >= OWN_CODE_NS
        and (n.event is None or n.event.cat not in OP_EVENT_CATS)
    )


_NOT_HOST_WORK = frozenset(("dataloader", "optimizer"))


def is_host_work(n: Node) -> bool:
    """CPU ops and launch calls of the host, outside the DataLoader and the optimizer, and not
    code of the user's own (:func:`own_code`)."""
    # the cheaper tests first (the re-timings ask it of every node)
    return (
        n.kind == "host"
        and n.cat in ("cpu", "launch")
        and n.tags.isdisjoint(_NOT_HOST_WORK)
        and not own_code(n)
    )


def host_work_mask(g: Graph, durs: np.ndarray | None = None) -> np.ndarray:
    """:func:`is_host_work` of every node, with its duration ``durs[v]`` (int64 ns; None: as
    recorded), as a boolean array; what does not hang on the duration read once per graph."""
    nodes = g.nodes
    work, own = per_graph(
        g,
        "host_work",
        lambda: (
            np.fromiter(
                (
                    n.kind == "host"
                    and n.cat in ("cpu", "launch")
                    and n.tags.isdisjoint(_NOT_HOST_WORK)
                    for n in nodes
                ),
                dtype=bool,
                count=len(nodes),
            ),
            np.fromiter(  # own_code but for its duration
                (
                    n.kind == "host"
                    and n.cat == "cpu"
                    and (n.event is None or n.event.cat not in OP_EVENT_CATS)
                    for n in nodes
                ),
                dtype=bool,
                count=len(nodes),
            ),
        ),
    )
    return work & ~(own & ((recorded_ns(g) if durs is None else durs) >= OWN_CODE_NS))


@dataclass(frozen=True)
class HostWorkIn:
    """:func:`is_host_work` of the nodes tagged ``tag``, node by node or every node at once
    (:meth:`mask`)."""

    tag: str

    def __call__(self, n: Node) -> bool:
        return is_host_work(n) and self.tag in n.tags

    def mask(self, g: Graph, durs: np.ndarray | None = None) -> np.ndarray:
        tag = self.tag
        return host_work_mask(g, durs) & node_mask(g, "tag:" + tag, lambda n: tag in n.tags)


def host_mask(g: Graph, pred: Callable[[Node], bool], durs: np.ndarray | None) -> np.ndarray:
    """``pred`` of every node with its duration ``durs[v]`` (None: as recorded), as a boolean
    array: :func:`host_work_mask` for :func:`is_host_work`, the predicate's own ``mask`` where it
    has one (:class:`HostWorkIn`), else node by node."""
    if pred is is_host_work:
        return host_work_mask(g, durs)
    mask = getattr(pred, "mask", None)
    if mask is not None:
        return mask(g, durs)  # type: ignore[no-any-return]
    return np.fromiter(map(pred, nodes_at(g, durs)), dtype=bool, count=len(g.nodes))


def with_host_cost(
    variants: dict[str, Variant],
    g: Graph,
    ctx: Context,
    ms_per_step: float,
    levels: tuple[str, ...] = ("low", "mid"),
) -> dict[str, Variant]:
    """``variants`` with ``ms_per_step`` (ms of the untraced step) added to the host work
    (:func:`is_host_work`) at ``levels``, in proportion to each node's recorded duration, so it
    sits where that work does and hides where the host runs ahead of the GPU. Given in traced
    time (÷ the calibrated host scale, or the prior's middle), so that the replay's host scale
    brings it back to ``ms_per_step``: the host time a compiled or replayed step spends per step
    that no eager op of the planted trace shows."""
    total = int(recorded_ns(g)[host_work_mask(g)].sum())  # sum(n.dur ... if is_host_work(n))
    if total <= 0 or ctx.n_steps <= 0 or ms_per_step <= 0:
        return variants
    scale = ctx.host_scale_cal or (HOST_SCALE_PRIOR[1] if ctx.untraced_step_ms else HOST_SCALE_MID)
    per = ms_per_step * 1e6 * ctx.n_steps / scale / total  # ns added per ns of host work
    out = dict(variants)
    for level in levels:
        base, keep = variants[level]
        out[level] = (_plus_host(base, per), keep)
    return out


def _plus_host(
    base: Callable[[int, Node], float] | None, per: float
) -> Callable[[int, Node], float]:
    """``base`` (None: as recorded) with ``per`` × each host node's recorded duration added."""
    return PlusHost(base, per)


@dataclass(frozen=True, eq=False)
class PlusHost:
    """:func:`_plus_host`'s durations, node by node or every node at once (:meth:`array`)."""

    base: Callable[[int, Node], float] | None
    per: float

    def __call__(self, v: int, n: Node) -> float:
        d = float(n.dur) if self.base is None else self.base(v, n)
        return d + n.dur * self.per if is_host_work(n) else d

    def array(self, g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
        d = raw_durations(g, self.base, durs, picked)
        now = raw_durations(g, None, durs, picked)  # each node's duration, float
        return np.where(host_work_mask(g, durs), d + now * self.per, d)
