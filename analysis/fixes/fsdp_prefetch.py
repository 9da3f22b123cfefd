"""Fix unit ``fsdp_prefetch``: FSDP's all-gathers run exposed (no compute beside them): prefetch
the next module's parameters, or keep them gathered after forward."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuscope.analysis.collectives import coll_of
from gpuscope.analysis.fixes.base import (
    Finding,
    FixUnit,
    Inputs,
    Words,
    evidence_json,
    scaled,
    significant,
)
from gpuscope.analysis.fmt import sig3

if TYPE_CHECKING:
    from gpuscope.analysis.collectives import CollectiveMatch
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, Variant
    from gpuscope.analysis.recommendation import Recommendation

WORDS = Words(
    "Prefetch FSDP's all-gathers so they run beside compute",
    "Each all-gather of a module's parameters runs while the GPU computes nothing; prefetching the "
    "next module's parameters hides it behind the current module's compute.",
    "# FSDP2 (fully_shard): gather the next block while this one computes\n"
    "for cur, nxt in zip(model.layers, model.layers[1:]):\n"
    "    cur.set_modules_to_forward_prefetch([nxt])\n"
    "for cur, prev in zip(model.layers[1:], model.layers):\n"
    "    cur.set_modules_to_backward_prefetch([prev])\n"
    "# FSDP1: FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE)",
)
BACKWARD_TITLE = "Keep FSDP's parameters gathered after forward (reshard_after_forward=False)"
BACKWARD_CODE = (
    "fully_shard(block, reshard_after_forward=False)   # no re-gather in backward; more memory\n"
    "# or keep resharding and prefetch in backward:\n"
    "# block.set_modules_to_backward_prefetch([previous_block])"
)

MEMORY_ROOM = 0.85
"""Keeping parameters gathered is advised only under this memory peak (share of the GPU)."""


def allgather_transfer_per_step(
    match: CollectiveMatch | None, rank: int, n_steps: int
) -> float | None:
    """This rank's all-gathers matched across ranks: their transfer ns per step (each from the
    last rank's arrival to the kernel's end); None without a matched all-gather."""
    if match is None or match.rows.empty:
        return None
    r = match.rows
    mine = r[(r["rank"] == rank) & (r["coll"] == "allgather") & (r["n_present"] >= 2)]
    if mine.empty:
        return None
    return float(mine["transfer_ns"].sum()) / max(1, n_steps)


def exposed_ns(inp: Inputs, *, transfer_only: bool = True) -> float:
    """The all-gathers' exposed time over the window (ns), 0 without all-gathers: what
    :mod:`overlap_communication` leaves to this unit. An all-gather in the step is FSDP's
    (DDP reduces gradients, it gathers no parameters), whatever other communication is
    exposed beside it: prefetching hides the all-gathers, overlapping the rest is another fix.
    At most their transfer (matched across ranks: from the last rank's arrival to the kernel's
    end): the part of an all-gather kernel spent waiting for a later rank is no prefetch's to hide
    (the rank that arrives later sets it: load imbalance's). v191 (the twelfth blind part, FSDP2
    with its default prefetching, explicit prefetch timed at 1.8 %): 7.41 ms per step of
    all-gather kernels ran with no compute beside them on rank 0, their transfer 0.06 ms each
    of 13 a step, the rest waiting for rank 1. ``transfer_only`` False: all of it (what
    :mod:`overlap_communication` leaves out: no part of it is DDP's buckets')."""
    ag = inp.phase.allgather if inp.phase is not None else None
    if ag is None or ag.exposed_ms <= 0:
        return 0.0
    n = max(1, inp.n_steps)
    ns = ag.exposed_ms * 1e6 * n
    if transfer_only and inp.allgather_transfer_ns_per_step is not None:
        ns = min(ns, inp.allgather_transfer_ns_per_step * n)
    return ns


def detect(inp: Inputs) -> Finding | None:
    ns = exposed_ns(inp)
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    ag = inp.phase.allgather if inp.phase is not None else None
    assert ag is not None
    share = 100.0 * ns / inp.window_ns
    # GPU time the profiler does not stretch: as a share of the untraced step it is larger, and
    # either footing may be the fixed run's (fixes.base.host_bound_pct)
    per_step = ns / max(1, inp.n_steps)
    untraced = 100.0 * per_step / inp.untraced_step_ns if inp.untraced_step_ns else 0.0
    bound = min(100.0, max(share, untraced))
    ev = evidence_json(ag, share_pct=share, bound_pct=bound)
    transfer = inp.allgather_transfer_ns_per_step
    ev["allgather_transfer_ms_per_step"] = transfer / 1e6 if transfer is not None else None
    ev["exposed_transfer_ms_per_step"] = ns / 1e6 / max(1, inp.n_steps)
    backward = ag.backward_ms > ag.forward_ms
    room = inp.mem_used_frac is not None and inp.mem_used_frac < MEMORY_ROOM
    ev["summary"] = (
        f"{sig3(ag.n_per_step)} all-gathers per step ran {sig3(ag.exposed_ms)} ms per step with no "
        f"compute beside them (forward {sig3(ag.forward_ms)} ms, backward "
        f"{sig3(ag.backward_ms)} ms), {sig3(100 * ag.exposed_ms / ag.comm_exposed_ms)}% of the "
        "exposed communication"
    )
    if transfer is not None and ns < CAPPED * ag.exposed_ms * 1e6 * max(1, inp.n_steps):
        ev["summary"] += (
            f"; their transfer, once every rank had arrived, was {sig3(transfer / 1e6)} ms per "
            f"step, so at most {sig3(ns / 1e6 / max(1, inp.n_steps))} ms per step "
            f"({sig3(share)}% of the step) is prefetching's to hide: the rest waited for a later "
            "rank."
        )
    else:
        ev["summary"] += f" ({sig3(share)}% of the step)."
    keep = backward and room
    return Finding(
        ev,
        share,
        bound_pct=bound,
        title=BACKWARD_TITLE if keep else None,
        code=BACKWARD_CODE if keep else None,
    )


CAPPED = 0.95
"""The evidence says the transfer capped the exposed time when it cut it below this share."""


def _is_allgather(n: Node) -> bool:
    return n.kind == "gpu" and n.cat == "communication" and coll_of(n.label) == "allgather"


HIDDEN_LEFT = (("low", 1.0), ("mid", 0.5), ("high", 0.0))
"""The share of the all-gathers' transfer the step still pays once prefetched, per level: at the
low end all of it (a prefetched all-gather's NCCL kernel runs on the SMs and the memory bandwidth
the compute beside it would use, as an overlapped all-reduce does: `overlap_communication`), at
the point half. Of the five timed pairs (FSDP2's default prefetch against all-gathers gated by the
compute before them), three lost time: v54 −10.4 %, v185 −17.7 %, v186 −5.4 %; v14 gained 11.0 %
and v170 17.6 % (0.5 / 0.25 / 0 before)."""


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """All-gather kernels × 1 / 0.5 / 0 (hidden behind compute); clipped at the bound."""
    return {k: (scaled(_is_allgather, f), None) for k, f in HIDDEN_LEFT}


def advised(rec: Recommendation, g: Graph, ctx: Context) -> dict[str, Variant]:
    """:func:`retime` on the transfer only: each all-gather kernel keeps its share of waiting
    for a later rank, ρ = 1 − transfer ÷ kernel time (the rank's all-gathers, per step), and
    loses (1 − f) of the rest: × 1 − (1 − f)(1 − ρ)."""
    ev = rec.evidence if isinstance(rec.evidence, dict) else {}
    transfer, kernel = (
        ev.get("allgather_transfer_ms_per_step"),
        ev.get("allgather_kernel_ms_per_step"),
    )
    moved = 1.0
    if transfer is not None and kernel:
        moved = min(1.0, max(0.0, float(transfer) / float(kernel)))
    return {k: (scaled(_is_allgather, 1.0 - (1.0 - f) * moved), None) for k, f in HIDDEN_LEFT}


UNIT = FixUnit(
    "fsdp_prefetch",
    WORDS,
    detect,
    retime,
    advised=advised,
    proof="Prefetching hides at most the all-gather time that runs with no compute beside it.",
)
