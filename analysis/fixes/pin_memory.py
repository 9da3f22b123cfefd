"""Fix unit ``pin_memory``: host-to-device copies from pageable memory (slow, and staged by the host)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3
from gpuscope.vocabulary.causes import PAGEABLE_COPY

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import CriticalPath, Edge, Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Estimate, Variant

WORDS = Words(
    "Copy batches from pinned memory, asynchronously",
    "A copy from pageable memory is staged by the host through a bounce buffer and blocks it; "
    "from pinned memory it runs at full speed while the host goes on.",
    "loader = DataLoader(dataset, ..., pin_memory=True)\n"
    "x = x.to(device, non_blocking=True)\n"
    "y = y.to(device, non_blocking=True)",
)

PINNED_MEASURED_GBPS: dict[str, float] = {"H100 SXM": 54.5}
"""Pinned host-to-device bandwidth measured on the GPU (GB/s; 32 MB copies, H100 80GB HBM3,
2026-11-23, sample_traces/fixes/all.json); other GPUs: the trace's pinned copies, else the table of
:mod:`gpuscope.analysis.copies`."""

LAUNCH_CALL_NS = 10_000
"""An asynchronous copy call once pinned lasts at most this long (ns)."""


def blocked_ns(inp: Inputs) -> tuple[float, bool]:
    """The GPU work the host waited through in pageable copies (ns over the window,
    :class:`~gpuscope.analysis.phase_patterns.BlockingCopy`'s ``queued``: the lead over the GPU
    the host lost each time), profiler-capped (:func:`~gpuscope.analysis.fixes.base.host_cost`);
    (0, False) when no copy blocked."""
    bc = inp.phase.blocking_copy if inp.phase is not None else None
    if bc is None or bc.queued_ms <= 0:
        return 0.0, False
    return fx.host_cost(bc.queued_ms * 1e6 * max(1, inp.n_steps), inp)


def detect(inp: Inputs) -> Finding | None:
    idle_ns, capped = fx.host_cost(inp.idle.causes_ns.get(PAGEABLE_COPY, 0), inp)
    excess = max(0.0, inp.pageable_excess_ns)
    ns = idle_ns + excess
    lost_ns, lost_capped = blocked_ns(inp)
    blocks = fx.significant(lost_ns, inp.window_ns, inp.n_steps)
    if not fx.significant(ns, inp.window_ns, inp.n_steps) and not blocks:
        return None
    frame = inp.idle.evidence.get(PAGEABLE_COPY)
    pc = inp.pageable_copy
    n = int(frame["count"].sum()) if frame is not None and not frame.empty else 0
    nbytes = frame["bytes"].dropna().sum() if frame is not None and not frame.empty else 0
    if pc is not None and pc.copies:
        n, nbytes = int(pc.copies), float(pc.bytes or 0)
    ev: dict[str, Any] = {
        **fx.cost_evidence("cost", ns, inp),
        "idle_us_per_step": fx.per_step_us(idle_ns, inp.n_steps),
        "copy_excess_us_per_step": fx.per_step_us(excess, inp.n_steps),
        "copies_per_step": n / max(1, inp.n_steps),
        "bytes_per_step": float(nbytes) / max(1, inp.n_steps),
        "pageable_gbps": pc.pageable_gbps if pc is not None else None,
        "pinned_gbps": pc.pinned_gbps if pc is not None else None,
        "pinned_source": pc.pinned_source if pc is not None else None,
        "calls": fx.frame_rows(inp, PAGEABLE_COPY, 3),
    }
    rate = (
        f" at {ev['pageable_gbps']:.3g} GB/s against {ev['pinned_gbps']:.3g} GB/s pinned "
        f"({ev['pinned_source']})"
        if ev["pageable_gbps"] and ev["pinned_gbps"]
        else ""
    )
    ev["summary"] = (
        f"{ev['copies_per_step']:.1f} host-to-device copies per step "
        f"({sig3(ev['bytes_per_step'] / 1e6)} MB) come from pageable memory{rate}: they cost "
        f"{sig3(ev['cost_us_per_step'] / 1e3)} ms per step ({sig3(ev['share_pct'])}%), "
        f"{sig3(ev['copy_excess_us_per_step'] / 1e3)} ms of slower copying and "
        f"{sig3(ev['idle_us_per_step'] / 1e3)} ms of GPU idle while the host staged them."
    )
    bc = inp.phase.blocking_copy if inp.phase is not None else None
    if blocks and bc is not None:
        ev.update(
            pageable_copies_per_step=bc.copies_per_step,
            blocked_copies_per_step=bc.blocked_per_step,
            host_wait_ms_per_step=bc.wait_ms,
            queued_gpu_ms_per_step=bc.queued_ms,
        )
        ev["summary"] += (
            f" The host waited for the GPU in {sig3(bc.blocked_per_step)} of them per step "
            f"({sig3(bc.wait_ms)} ms per step, behind {sig3(bc.queued_ms)} ms of queued GPU "
            "work): each such copy is a sync that drains the GPU's queue."
        )
    fx.cap_note(ev, capped or (blocks and lost_capped), inp)
    cost = fx.host_gain_pct(idle_ns, inp) + (
        100.0 * excess / max(1, inp.n_steps) / inp.untraced_step_ns
        if inp.untraced_step_ns
        else fx.share(excess, inp.window_ns)
    )
    if blocks:  # the host's lost lead, where it is the larger cost
        cost = max(cost, fx.host_gain_pct(lost_ns, inp))
    # no proven bound: the host's staging also slows its other work (measured on
    # sample_traces/fixes/pin_memory: 71% gained against a 52% cost)
    return Finding(ev, min(100.0, cost))


def copy_waits(g: Graph) -> set[int]:
    """The tails of synchronizing calls that waited for a pageable host-to-device copy queued
    behind other GPU work (their ``wait`` edge comes from the copy, and the call began before the
    copy ran: phase_patterns' blocking copy): pinned and ``non_blocking``, the copy needs no
    sync and the host keeps its lead. A sync that began once its copy ran waits for the copy
    alone, which the pinned bandwidth re-times."""
    out = set()
    for v, n in enumerate(g.nodes):
        if "sync_tail" not in n.tags or "copy_call" in n.tags:
            continue
        heads = [g.nodes[ed.src].s for ed in g.preds[v] if ed.kind == "seq"]
        for ed in g.preds[v]:
            src = g.nodes[ed.src]
            if ed.kind == "wait" and "pageable_h2d" in src.tags and min(heads, default=n.s) < src.s:
                out.add(v)
    return out


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Pageable H→D copies at 0.6 / 1 / 1 × pinned bandwidth; their calls last at most
    :data:`LAUNCH_CALL_NS` and no longer wait for the GPU, nor do the synchronizing calls that
    waited for them (:func:`copy_waits`: their tails last 0)."""
    nodes = g.nodes
    corr = {
        n.event.correlation
        for n in nodes
        if n.kind == "gpu" and "pageable_h2d" in n.tags and isinstance(n.event, GpuEvent)
    }
    waits = copy_waits(g)

    def is_call(n: Node) -> bool:
        return (
            n.kind == "host"
            and "copy_call" in n.tags
            and n.event is not None
            and (getattr(n.event, "correlation", None) in corr)
        )

    def keep(v: int, ed: Edge) -> bool:
        return not (ed.kind == "wait" and (v in waits or is_call(nodes[v])))

    def pin(f: float) -> DurFn:
        bw = PINNED_MEASURED_GBPS.get(ctx.gpu_model or "", ctx.pinned_gbps or 0.0) * f

        def dur(v: int, n: Node) -> float:
            if n.kind == "gpu" and "pageable_h2d" in n.tags and isinstance(n.event, GpuEvent):
                b = n.event.bytes or 0
                return min(float(n.dur), b / bw) if bw > 0 and b > 0 else float(n.dur)
            if is_call(n):
                return 0.0 if "sync_tail" in n.tags else min(float(n.dur), LAUNCH_CALL_NS)
            return 0.0 if v in waits else float(n.dur)

        return dur

    return {"low": (pin(0.6), keep), "mid": (pin(1.0), keep), "high": (pin(1.0), keep)}


def copy_ns(g: Graph) -> float:
    """The pageable host-to-device copies' GPU time in the graph (ns)."""
    return float(sum(n.dur for n in g.nodes if n.kind == "gpu" and "pageable_h2d" in n.tags))


def top(est: Estimate, cp: CriticalPath, ctx: Context) -> Estimate:
    """The range's top, where the replayed planted step is longer than the untraced one: the
    strongest variant's saving (replayed step less its own, at each prior host scale) in
    absolute time, over the untraced step, with the planted step's pageable copies
    :data:`~gpuscope.analysis.gains.HOST_WAIT_VARIATION` slower. The profiler stretches kernels
    and host work, not a DMA copy, so the time the copies take is not stretched with the step (the
    replay's share of the longer traced step understates it); and a pageable copy's rate is the
    host memcpy's that stages it, which varies between processes and machines as the host's speed
    does: a pageable copy is a wait of the host on the GPU, whose planted step follows its host
    (the five timed pairs' planted steps ran 0.4-2.0 ms slower than their traced process's
    untraced step, the fixed ones within 0.1 ms of each other; timed again as advised on another
    machine, v74's and v138's gained 11.1 and 10.1 % against 8.2 and 8.5 by their recipes)."""
    u = ctx.untraced_step_ms
    if not u:
        return est
    g = cp.graph
    n = max(1, ctx.n_steps)
    u_ns = u * 1e6
    dur, keep = retime(g, ctx)["high"]
    rec, prof = GN._recorded(g)
    assert dur is not None and keep is not None
    durs = GN._durations(g, dur)
    drop = {(v, i) for v, es in enumerate(g.preds) for i, ed in enumerate(es) if not keep(v, ed)}
    scales = GN.HOST_SCALE_RANGE
    rows = [GN._scaled_np(rec, prof, s) for s in scales]
    rows += [GN._scaled_np(durs, prof, s) for s in scales]
    spans = GN.makespans(
        g, cp.window[0], np.stack(rows), [None] * len(scales) + [drop] * len(scales)
    )
    k = len(scales)
    slower = (GN.HOST_WAIT_VARIATION - 1.0) * copy_ns(g) / n
    best = est.high_pct
    for base, t in zip(spans[:k], spans[k:], strict=True):
        if base / n <= u_ns:
            continue  # the replay's share is of the untraced step already
        saved = (base - t) / n
        best = max(best, 100.0 * (saved + slower) / (u_ns + slower))
    return replace(est, high_pct=min(100.0, best))


UNIT = FixUnit("pin_memory", WORDS, detect, retime, staging=True, top=top)
