"""Fix unit ``pin_memory``: host-to-device copies from pageable memory (slow, and staged by the host)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuscope.analysis.critical_path import GpuEvent
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3
from gpuscope.vocabulary.causes import PAGEABLE_COPY

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Edge, Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant

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


def detect(inp: Inputs) -> Finding | None:
    idle_ns, capped = fx.host_cost(inp.idle.causes_ns.get(PAGEABLE_COPY, 0), inp)
    excess = max(0.0, inp.pageable_excess_ns)
    ns = idle_ns + excess
    if not fx.significant(ns, inp.window_ns, inp.n_steps):
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
    fx.cap_note(ev, capped, inp)
    cost = fx.host_gain_pct(idle_ns, inp) + (
        100.0 * excess / max(1, inp.n_steps) / inp.untraced_step_ns
        if inp.untraced_step_ns
        else fx.share(excess, inp.window_ns)
    )
    # no proven bound: the host's staging also slows its other work (measured on
    # sample_traces/fixes/pin_memory: 71% gained against a 52% cost)
    return Finding(ev, min(100.0, cost))


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Pageable H→D copies at 0.6 / 1 / 1 × pinned bandwidth; their calls last at most
    :data:`LAUNCH_CALL_NS` and no longer wait for the GPU."""
    nodes = g.nodes
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


UNIT = FixUnit("pin_memory", WORDS, detect, retime, staging=True)
