"""The fixes gpuscope recommends: one unit per module (its rule, evidence, words, re-timing and
proven bound, :class:`~gpuscope.analysis.fixes.base.FixUnit`) and :data:`MODULES`, the one list
of them (docs/architecture.md, "How to add a fix")."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from gpuscope.analysis.fixes.base import (
    SHORT_KERNEL_US,
    FixUnit,
    Inputs,
    KernelStats,
    Recommendation,
)

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import CriticalPath
    from gpuscope.analysis.gains import Context

MODULES: tuple[str, ...] = (
    ".dataloader_workers",
    ".pin_memory",
    ".host_sync",
    ".mixed_precision",
    ".optimizer_fused",
    ".activation_checkpointing",
    ".dtensor_dispatch",
    ".kernel_fusion",
    ".cuda_graphs",
    ".compiled_overhead",
    ".batch_size",
    ".memory_near_full",
    ".cudnn_benchmark",
    ".fsdp_prefetch",
    ".overlap_communication",
    ".load_imbalance",
)
"""The registry: each module of this folder that holds a fix's ``UNIT`` (relative names), in
tie-break order. Adding a fix: its module here, and its line in this tuple."""

UNITS: tuple[FixUnit, ...] = tuple(import_module(m, __name__).UNIT for m in MODULES)
BY_ID: dict[str, FixUnit] = {u.id: u for u in UNITS}
FIX_IDS: tuple[str, ...] = tuple(BY_ID)
"""Every ``recommendations[].id``, in tie-break order."""

ORDER_NOTE = (
    "Largest estimated gain first, re-timed on the critical path. Every gain is a share of the "
    "time per sample: a fix that keeps the batch gains the same share of the step time. "
    "torch.compile and CUDA graphs come after the fix of a cause found in the step (recompute, "
    "optimizer loop), estimated on top of it."
)
"""How the faces say the fixes are ordered, and on which footing their gains compare."""

__all__ = [
    "BY_ID",
    "FIX_IDS",
    "ORDER_NOTE",
    "SHORT_KERNEL_US",
    "UNITS",
    "FixUnit",
    "Inputs",
    "KernelStats",
    "Recommendation",
]


def recommend(inp: Inputs) -> list[Recommendation]:
    """The fixes whose evidence holds, in registry order (:func:`estimate` orders them by gain)."""
    return [r for u in UNITS if (r := u.find(inp)) is not None]


def estimate(recs: list[Recommendation], cp: CriticalPath, ctx: Context) -> None:
    """Give each recommendation its estimate (re-timed on the critical path, clipped at its proven
    bound) and order the list in place by it, the largest first (ties: registry order)."""
    causes = tuple(BY_ID[r.id] for r in recs if BY_ID[r.id].cause)
    for r in recs:
        u = BY_ID[r.id]
        r.estimate = u.estimate(r, cp, ctx, causes if u.general else ())
    order(recs)


def order(recs: list[Recommendation]) -> None:
    """Order recommendations in place by their estimate's point value, the largest first; those
    without an estimate after them, in registry order. Every estimate is a share of the time per
    sample (a fix that keeps the batch gains the same share of the step), so they compare. A
    general remedy (:attr:`FixUnit.general`) comes after every fix of a cause found by phase
    (:attr:`FixUnit.cause`) in the list: its estimate is what it adds once they are applied."""
    rank = {i: n for n, i in enumerate(FIX_IDS)}
    has_cause = any(BY_ID[r.id].cause for r in recs if r.id in BY_ID)

    def key(r: Recommendation) -> tuple[bool, bool, float, int]:
        late = has_cause and r.id in BY_ID and BY_ID[r.id].general
        return (r.gain_pct is None, late, -(r.gain_pct or 0.0), rank.get(r.id, len(rank)))

    recs.sort(key=key)
