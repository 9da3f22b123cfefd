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
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, Variant

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


def exposed_ns(inp: Inputs) -> float:
    """The all-gathers' exposed time over the window (ns), 0 without all-gathers: what
    :mod:`overlap_communication` leaves to this unit. An all-gather in the step is FSDP's
    (DDP reduces gradients, it gathers no parameters), whatever other communication is
    exposed beside it: prefetching hides the all-gathers, overlapping the rest is another fix."""
    ag = inp.phase.allgather if inp.phase is not None else None
    if ag is None or ag.exposed_ms <= 0:
        return 0.0
    return ag.exposed_ms * 1e6 * max(1, inp.n_steps)


def detect(inp: Inputs) -> Finding | None:
    ns = exposed_ns(inp)
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    ag = inp.phase.allgather if inp.phase is not None else None
    assert ag is not None
    share = 100.0 * ns / inp.window_ns
    # GPU time the profiler does not stretch: as a share of the untraced step it is larger, and
    # either footing may be the fixed run's (fixes.base.host_bound_pct)
    untraced = 100.0 * ag.exposed_ms * 1e6 / inp.untraced_step_ns if inp.untraced_step_ns else 0.0
    bound = min(100.0, max(share, untraced))
    ev = evidence_json(ag, share_pct=share, bound_pct=bound)
    backward = ag.backward_ms > ag.forward_ms
    room = inp.mem_used_frac is not None and inp.mem_used_frac < MEMORY_ROOM
    ev["summary"] = (
        f"{sig3(ag.n_per_step)} all-gathers per step ran {sig3(ag.exposed_ms)} ms per step with no "
        f"compute beside them ({sig3(share)}% of the step: forward {sig3(ag.forward_ms)} ms, "
        f"backward {sig3(ag.backward_ms)} ms), {sig3(100 * ag.exposed_ms / ag.comm_exposed_ms)}% "
        "of the exposed communication."
    )
    keep = backward and room
    return Finding(
        ev,
        share,
        bound_pct=bound,
        title=BACKWARD_TITLE if keep else None,
        code=BACKWARD_CODE if keep else None,
    )


def _is_allgather(n: Node) -> bool:
    return n.kind == "gpu" and n.cat == "communication" and coll_of(n.label) == "allgather"


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """All-gather kernels × 0.5 / 0.25 / 0 (hidden behind compute); clipped at the bound."""
    return {
        k: (scaled(_is_allgather, f), None) for k, f in (("low", 0.5), ("mid", 0.25), ("high", 0.0))
    }


UNIT = FixUnit(
    "fsdp_prefetch",
    WORDS,
    detect,
    retime,
    proof="Prefetching hides at most the all-gather time that runs with no compute beside it.",
)
