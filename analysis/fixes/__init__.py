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
from gpuscope.analysis.recommendation import ORDER_NOTE as ORDER_NOTE
from gpuscope.analysis.recommendation import SIGNIFICANT_PCT as SIGNIFICANT_PCT

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

__all__ = [
    "BY_ID",
    "FIX_IDS",
    "ORDER_NOTE",
    "SHORT_KERNEL_US",
    "SIGNIFICANT_PCT",
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
    bound) and order the list in place by it, the largest first (ties: registry order). A general
    remedy is estimated on top of the cause fixes in the list, unless it replays every one of
    them (:attr:`FixUnit.replays`): then each is estimated alone (either takes the other's work
    off the step) and the larger comes first."""
    causes = tuple(BY_ID[r.id] for r in recs if BY_ID[r.id].cause)
    for r in recs:
        u = BY_ID[r.id]
        r.estimate = u.estimate(r, cp, ctx, _before(u, causes))
    order(recs)


def _before(u: FixUnit, causes: tuple[FixUnit, ...]) -> tuple[FixUnit, ...]:
    """The fixes ``u``'s estimate takes as applied first: for a general remedy, the cause fixes
    in the list (``causes``), unless it replays every one of them (then none: it competes with
    them, :func:`order`); none for any other fix."""
    if not u.general or all(c.id in u.replays for c in causes):
        return ()
    return causes


def order(recs: list[Recommendation]) -> None:
    """Order recommendations in place by their estimate's point value, the largest first; those
    without an estimate after them, in registry order. Every estimate is a share of the time per
    sample (a fix that keeps the batch gains the same share of the step), so they compare. A
    general remedy (:attr:`FixUnit.general`) comes after every fix of a cause found by phase
    (:attr:`FixUnit.cause`) in the list: its estimate is what it adds once they are applied; where
    every such cause is one it replays (:attr:`FixUnit.replays`), it takes its place by its
    estimate among them. A fix
    that changes the training (:attr:`FixUnit.changes_training`: a larger batch) comes after
    every fix that keeps the training identical and is estimated at :data:`SIGNIFICANT_PCT` or
    more, and its title then reads "Then, ..." (:data:`THEN`), whether it was moved there or its
    estimate put it there; with no such fix it keeps its place by estimate, in its own words."""
    rank = {i: n for n, i in enumerate(FIX_IDS)}
    causes = {r.id for r in recs if r.id in BY_ID and BY_ID[r.id].cause}

    def key(r: Recommendation) -> tuple[bool, bool, float, int]:
        u = BY_ID.get(r.id)
        late = u is not None and u.general and any(c not in u.replays for c in causes)
        return (r.gain_pct is None, late, -(r.gain_pct or 0.0), rank.get(r.id, len(rank)))

    recs.sort(key=key)
    last = max((n for n, r in enumerate(recs) if _significant_identical(r)), default=-1)
    moved = [r for r in recs[: last + 1] if changes_training(r)]
    if moved:
        recs[: last + 1] = [r for r in recs[: last + 1] if not changes_training(r)] + moved
    for r in recs:
        _say_then(r, last >= 0 and changes_training(r))


THEN = "Then, "
"""How the title of a fix that changes the training begins where it follows such fixes."""


def changes_training(r: Recommendation) -> bool:
    """Whether ``r``'s fix changes the training itself (:attr:`FixUnit.changes_training`)."""
    u = BY_ID.get(r.id)
    return u is not None and u.changes_training


def _significant_identical(r: Recommendation) -> bool:
    g = r.gain_pct
    return g is not None and g >= SIGNIFICANT_PCT and not changes_training(r)


def _say_then(r: Recommendation, then: bool) -> None:
    """``r``'s title as "Then, use a larger batch ..." where it follows (``then``), as its unit
    words it otherwise (ordering twice says it once)."""
    if then and not r.title.startswith(THEN):
        r.title = THEN + r.title[:1].lower() + r.title[1:]
    elif not then and r.title.startswith(THEN):
        rest = r.title.removeprefix(THEN)
        r.title = rest[:1].upper() + rest[1:]
