"""Fix unit ``overlap_communication``: communication every rank pays, exposed on the step's path;
:func:`comm_floor_ns` is the part of it the load-imbalance unit leaves out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fixes.fsdp_prefetch import exposed_ns as fsdp_exposed_ns
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.rank_row import RankRow

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph
    from gpuscope.analysis.gains import Context, Variant

WORDS = Words(
    "Overlap gradient communication with compute",
    "Gradients can be sent while backward still computes; exposed communication is time the GPU "
    "does nothing else.",
    "model = DDP(model, device_ids=[local_rank], bucket_cap_mb=50,\n"
    "            gradient_as_bucket_view=True, static_graph=True)\n"
    "# with gradient accumulation, skip the all-reduce on inner micro-steps:\n"
    "with model.no_sync():\n    loss.backward()",
)


def comm_floor_ns(inp: Inputs) -> tuple[float, RankRow | None]:
    """Communication-only ns per step that every rank pays (the smallest across ranks: the rank
    that arrives last at a collective waits for no one), and that rank (None: this one)."""
    own = inp.comm_only_ns / max(1, inp.n_steps)
    slowest = None
    floor = own
    for p in inp.peers:
        v = p.comm_only_us_per_step
        if v is not None and v * 1e3 < floor:
            floor, slowest = v * 1e3, p
    return floor, slowest


def detect(inp: Inputs) -> Finding | None:
    floor, _ = comm_floor_ns(inp)
    comm_only = floor * inp.n_steps
    # the all-gathers exposed in FSDP's pattern are fsdp_prefetch's (prefetch, not DDP's buckets)
    comm_only = max(0.0, comm_only - fsdp_exposed_ns(inp))
    ns = inp.idle.causes_ns.get("communication", 0) + comm_only
    if not fx.significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        **fx.cost_evidence("exposed_comm", ns, inp),
        "idle_waiting_us_per_step": fx.per_step_us(
            inp.idle.causes_ns.get("communication", 0), inp.n_steps
        ),
        "comm_only_us_per_step": floor / 1e3,
    }
    ev["summary"] = (
        f"Communication was exposed {sig3(ev['exposed_comm_us_per_step'] / 1e3)} ms per step "
        f"({sig3(ev['share_pct'])}%): the host waited in collectives, or the GPU ran only "
        "communication kernels (the part every rank pays)."
    )
    gain = fx.host_gain_pct(ns, inp)  # per step over the untraced step when one is known
    return Finding(ev, gain, bound_pct=gain)


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Communication × 0.5 / 0.25 / 0. A rank's communication kernels also hold its wait for a
    slower rank, which overlapping does not remove: the estimate is clipped at the bound."""
    return fx.scaled_variants(lambda n: n.cat == "communication", 0.5, 0.25, 0.0)


UNIT = FixUnit(
    "overlap_communication",
    WORDS,
    detect,
    retime,
    proof="Overlapping can hide at most the communication that is exposed: the idle in "
    "collectives and the communication-only time every rank pays (the wait for a slower rank is "
    "load imbalance's).",
)
