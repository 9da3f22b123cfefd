"""Fix unit ``batch_size``: kernels too small for the GPU and per-step overheads: a larger batch
makes each sample cheaper (its gain is on the time per sample)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.critical_path import GpuEvent, per_graph
from gpuscope.analysis.event_classes import PER_CHANNEL_GRID_RE
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import (
    PER_SAMPLE_TIME,
    Finding,
    FixUnit,
    Inputs,
    Recommendation,
    Words,
)
from gpuscope.analysis.gains import ByNode, index_mask, node_mask, raw_durations
from gpuscope.analysis.phase_patterns import optimizer_nodes
from gpuscope.vocabulary.causes import CPU_OVERHEAD, HOST_SYNC, LAUNCH_OVERHEAD

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant

BATCH_MULTIPLE = 4
"""The batch multiple the estimate re-times (the code says 4 × B)."""

LARGER_MULTIPLES = (8, 16)
"""Larger batch multiples the range's top also re-times, each where the trace's memory shows room
for it (:func:`multiples`): users grow a batch as far as memory allows (the validation set's
pairs grew it 8× and 16×: v06, v12, v36, v60; v47)."""

MEMORY_FILL = 0.9
"""The share of the GPU's memory a larger batch may fill (the allocator's own slack and
fragmentation take the rest)."""

WORDS = Words(
    "Use a larger batch per step (lower time per sample)",
    "Kernels with fewer blocks than SMs leave the GPU part-empty and per-step overheads are paid "
    "per batch: a larger batch fills the GPU and pays them less often.",
    f"loader = DataLoader(dataset, batch_size={BATCH_MULTIPLE} * B, ...)   # as memory allows\n"
    "# scale the learning rate with the batch (e.g. linearly, with warm-up)",
)

AMORTISED: tuple[str, ...] = (LAUNCH_OVERHEAD, CPU_OVERHEAD, HOST_SYNC, "other")
"""Idle causes whose cost per step does not grow with the batch (a larger batch amortises them)."""

FIXED_KERNEL_NS = 3_000
"""The part of a kernel's time that does not grow with its work (ns; the high variant)."""


def multiples(used_frac: float | None) -> tuple[int, ...]:
    """The batch multiples the estimate spans: :data:`BATCH_MULTIPLE`, and each of
    :data:`LARGER_MULTIPLES` ``k`` with ``k`` × ``used_frac`` (the peak memory the step used,
    a share of the GPU's) within :data:`MEMORY_FILL` (activations grow at most linearly with the
    batch; weights, gradients and optimizer state do not: ``k`` × the peak is the most a ``k`` ×
    batch needs). Without the memory recorded (None), every one of them (the words say that
    memory decides)."""
    if used_frac is None or used_frac <= 0:
        return (BATCH_MULTIPLE, *LARGER_MULTIPLES)
    return (BATCH_MULTIPLE, *(k for k in LARGER_MULTIPLES if k * used_frac <= MEMORY_FILL))


def detect(inp: Inputs) -> Finding | None:
    k = inp.kernels
    if k.kernel_us <= 0 or k.small_grid_fill is None:
        return None
    small_share = 100.0 * k.small_grid_us / k.kernel_us
    if small_share < 30.0 or inp.busy_pct >= 90.0:
        return None
    if inp.mem_used_frac is not None and inp.mem_used_frac >= 0.6:
        return None  # little memory headroom: a larger batch may not fit
    unused_ns = k.small_grid_us * 1e3 * (1.0 - k.small_grid_fill)
    # per-step overheads amortise over a larger batch; data loading and copies grow with it
    idle_ns, _ = fx.host_cost(sum(inp.idle.causes_ns.get(c, 0) for c in AMORTISED), inp)
    if not fx.significant(unused_ns + idle_ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        "busy_pct": inp.busy_pct,
        "small_grid_kernel_share_pct": small_share,
        "small_grid_mean_sm_fill": k.small_grid_fill,
        "memory_used_frac": inp.mem_used_frac,
    }
    reserved, total = fx.memory(inp, "peak_reserved_bytes"), fx.memory(inp, "device_total_bytes")
    alloc = fx.memory(inp, "peak_allocated_bytes")
    used = alloc / total if alloc and total else inp.mem_used_frac
    ks = multiples(used)
    ev["batch_multiples"] = list(ks)
    if reserved and total:
        free = total - reserved
        allocated = fx.memory(inp, "peak_allocated_bytes")
        ev["headroom_bytes"] = free
        ev["peak_allocated_bytes"] = allocated
        mem = (
            f"the allocator reserved at most {fx.gib(reserved)} of {fx.gib(total)} "
            f"({100 * reserved / total:.0f}%; peak allocated "
            f"{fx.gib(allocated or 0)}), leaving {fx.gib(free)} of headroom"
        )
    elif inp.mem_used_frac is not None:
        mem = f"peak memory use was {100 * inp.mem_used_frac:.0f}% of the GPU"
    else:
        mem = "memory use was not recorded (record with profile_memory=True, or check torch.cuda.max_memory_allocated())"
    ev["summary"] = (
        f"The GPU was busy {inp.busy_pct:.0f}% of the time and {small_share:.0f}% of kernel time "
        f"went to kernels with fewer blocks than SMs (mean fill {100 * k.small_grid_fill:.0f}%); "
        f"{mem}. A larger batch makes each step longer but each sample cheaper: the gain is on "
        f"the time per sample ({BATCH_MULTIPLE}× the batch), the same footing as the other fixes' "
        "step-time gains, which keep the batch."
    )
    if len(ks) > 1 and used is not None:
        ev["summary"] += (
            f" The range's top is for {ks[-1]}× the batch, which the memory holds "
            f"({ks[-1]} × the peak use, {100 * used:.0f}% of the GPU, is within "
            f"{100 * MEMORY_FILL:.0f}%)."
        )
    elif len(ks) > 1:
        ev["summary"] += (
            f" The range's top is for {ks[-1]}× the batch, if it fits: the trace does not say "
            "how much memory the step used."
        )
    else:
        ev["summary"] += (
            f" The memory holds no more than {BATCH_MULTIPLE}× the batch in the range "
            f"({LARGER_MULTIPLES[0]} × the peak use, {100 * (used or 0):.0f}% of the GPU, is over "
            f"{100 * MEMORY_FILL:.0f}%)."
        )
    # no proven bound: how the kernels fill the GPU at a larger batch is a model
    return Finding(ev, min(100.0, fx.host_gain_pct(idle_ns + unused_ns, inp)))


PER_CHANNEL = re.compile(PER_CHANNEL_GRID_RE)
"""Kernels whose grid is one block per channel (:data:`~gpuscope.analysis.event_classes.
PER_CHANNEL_GRID_RE`): at ``k`` × the batch each block does ``k`` × the work, so they grow × k at
every level however few blocks they have. Timed: v131's planted step (a PeleeNet-style NCHW
CNN, bf16, 66 % of its kernel time PyTorch's per-channel BatchNorm kernels of ~30 blocks on 132
SMs) at four times the batch gained −0.8 % a sample (3 rounds, record_blind8.FIRST_FIXES), where
growing those kernels by SM fill had estimated 58.3 % (45.8-69.1)."""


def _grow(mode: str, k: int, sms: int, fixed: frozenset[int] = frozenset()) -> DurFn:
    """Durations at ``k`` × the batch: kernels × k (low), by SM fill (mid), with a
    :data:`FIXED_KERNEL_NS` fixed part too (high); per-channel kernels (:data:`PER_CHANNEL`)
    × k at the low and mid levels, with the fixed part at the high one; copies and data loading
    × k. The GPU work in ``fixed`` (node indices: the optimizer step's,
    :func:`per_parameter_work`) keeps its time at every level, as collectives and other GPU work
    do."""
    per_channel: dict[str, bool] = {}

    def by_channel(name: str) -> bool:
        got = per_channel.get(name)
        if got is None:
            got = per_channel[name] = PER_CHANNEL.search(name) is not None
        return got

    def dur(v: int, n: Node) -> float:
        if n.kind == "host":
            return n.dur * k if "dataloader" in n.tags else float(n.dur)
        if v in fixed:
            return float(n.dur)
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
        if sms and blocks and blocks < sms and ev is not None and not by_channel(ev.name):
            d = n.dur * max(1.0, k * blocks / sms)
        if mode == "high":
            c = min(float(n.dur), FIXED_KERNEL_NS)
            d = min(d, c + (n.dur - c) * k)
        return d

    def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
        d = raw_durations(g, None, durs, picked)
        host = node_mask(g, "kind:host", lambda n: n.kind == "host")
        grown = d * k
        if mode != "low" and sms:
            blocks = per_graph(g, "blocks", lambda: _blocks(g))
            per_ch = node_mask(g, "per_channel", _per_channel)
            fill = (blocks > 0) & (blocks < sms) & ~per_ch
            grown = np.where(fill, d * np.maximum(1.0, k * blocks / sms), grown)
        if mode == "high":
            c = np.minimum(d, FIXED_KERNEL_NS)
            grown = np.minimum(grown, c + (d - c) * k)
        gpu = ~host
        out = np.where(gpu & node_mask(g, "cat:kernels", lambda n: n.cat == "kernels"), grown, d)
        out = np.where(gpu & node_mask(g, "cat:copies", lambda n: n.cat == "copies"), d * k, out)
        if fixed:
            out = np.where(gpu & index_mask(g, fixed), d, out)
        loader = node_mask(g, "tag:dataloader", lambda n: "dataloader" in n.tags)
        return np.where(host & loader, d * k, out)

    return ByNode(dur, whole)


def _blocks(g: Graph) -> np.ndarray:
    """Each node's grid size in blocks (its GPU event's ``blocks``; 0: none known), int64."""
    return np.fromiter(
        ((n.event.blocks or 0) if isinstance(n.event, GpuEvent) else 0 for n in g.nodes),
        dtype=np.int64,
        count=len(g.nodes),
    )


def _per_channel(n: Node) -> bool:
    """A per-channel kernel (:data:`PER_CHANNEL`), by its GPU event's name."""
    return isinstance(n.event, GpuEvent) and PER_CHANNEL.search(n.event.name) is not None


def per_parameter_work(g: Graph) -> frozenset[int]:
    """The GPU nodes a larger batch leaves as they are: those the optimizer step launched
    (:func:`~gpuscope.analysis.phase_patterns.optimizer_nodes`), whose work is per parameter.
    On ddp_clean (h200, eager AdamW with foreach) they are 16 % of the GPU's time; grown 4 × with
    the rest, they kept the estimate of a 4 × batch at 59.0 % where 74.3 % was timed
    (sample_traces/multi_gpu/README.md, "Larger batches, timed"). The collectives of a
    data-parallel step (gradients: per parameter too) already keep their time."""
    return frozenset(optimizer_nodes(g)[1])


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """At :data:`BATCH_MULTIPLE` × the batch: kernels × k / SM-fill scaling / fill scaling with a
    :data:`FIXED_KERNEL_NS` fixed part; copies and data loading × k; the optimizer step's GPU work
    as it is (:func:`per_parameter_work`)."""
    sms = ctx.sms or 0
    fixed = per_parameter_work(g)
    return {m: (_grow(m, BATCH_MULTIPLE, sms, fixed), None) for m in ("low", "mid", "high")}


def advised(rec: Recommendation, g: Graph, ctx: Context) -> dict[str, Variant]:
    """:func:`retime`, plus the high variant at each larger multiple the memory holds (the
    finding's ``batch_multiples``), named ``high@k`` (the replay reads the multiple from the
    name: :func:`gpuscope.analysis.gains.variant_multiple`)."""
    out = retime(g, ctx)
    fixed = per_parameter_work(g)
    ks = (rec.evidence or {}).get("batch_multiples") or ()
    for k in ks:
        if int(k) > BATCH_MULTIPLE:
            out[f"high@{int(k)}"] = (_grow("high", int(k), ctx.sms or 0, fixed), None)
    return out


UNIT = FixUnit(
    "batch_size",
    WORDS,
    detect,
    retime,
    footing=PER_SAMPLE_TIME,
    batch_multiple=BATCH_MULTIPLE,
    changes_training=True,
    advised=advised,
    host_ceiling=True,
)
