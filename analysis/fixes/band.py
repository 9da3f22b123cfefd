"""A fix's range with its low end raised to how far below the estimate the measured gain has
landed on the recorded pairs (sample_traces/validation): the replayed range (:func:`gpuscope.
analysis.gains.replay_estimate`) stacks every uncertainty at its extreme at once (the fix's
weakest variant on the slowest host with the unexplained time kept), and its low end is often
far below any timed pair. Per rule, the least measured gain over the estimate's point, across
every recorded pair where that rule put its point at :data:`MIN_POINT_PCT` or more (the pairs
planted for it, those planted to gain nothing, and the first fixes gpuscope named where another
cause was planted, timed), is ``lo``; a new range's low end is raised to point × (``lo`` -
:data:`MARGIN`), never above the point nor below the replayed low. The top stays the replay's:
gains above the point keep landing past every earlier pair's ratio (v81 2.07 × its point, v120
1.43, v123 1.49 on parts not fitted), so a top cut the same way lost ranges where the low one
lost none.

:data:`BAND` is :func:`fit` of ``sample_traces/validation/band_fit.json`` (written by
``benchmarks/fit_band.py`` from a ``validate_gains_set.py --json`` judgement, with the pairs of
sample_traces/fixes; tests/test_fix_band.py holds them equal). Definitions: docs/metrics.md,
"Raised to the recorded pairs' lowest"."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpuscope.analysis.recommendation import Estimate
from gpuscope.vocabulary.causes import HOST_SYNC

MARGIN = 0.15
"""Taken off the rule's least measured / point (a ratio, not points)."""

MIN_CASES = 5
"""A rule gets a low end from this many recorded pairs on: below, they say too little."""

MIN_POINT_PCT = 5.0
"""Points under this (%) are neither fitted nor cut: a ratio to a point near 0 means nothing."""

LEFT_OUT = frozenset({"load_imbalance"})
"""Rules whose estimate is built three ways (the pace-setter's host ops, the graph of its extra
work, the proven bound), so one ratio does not describe them."""

BAND: dict[str, tuple[float, int]] = {
    "activation_checkpointing": (0.466, 15),
    "batch_size": (0.785, 15),
    "cuda_graphs": (0.656, 14),
    "cudnn_benchmark": (0.144, 12),
    "dataloader_workers": (-5.055, 14),
    HOST_SYNC: (-0.337, 9),
    "kernel_fusion": (-0.353, 20),
    "mixed_precision": (-0.677, 23),
    "optimizer_fused": (-0.08, 12),
    "pin_memory": (0.513, 11),
}
"""Rule -> (least measured / point less :data:`MARGIN`, at most 1; pairs fitted): :func:`fit` of
band_fit.json, rounded to 3 decimals. A rule not here keeps its replayed low end."""


def fit(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, int]]:
    """Each rule's low ratio from recorded pairs: ``rows`` of ``rule`` (the fix timed),
    ``point_pct`` (the rule's estimate on the pair's trace) and ``measured_pct`` (the timed gain).
    The least measured / point over the rule's rows with a point of at least
    :data:`MIN_POINT_PCT`, less :data:`MARGIN`, at most 1; rules with fewer than
    :data:`MIN_CASES` such rows, or in :data:`LEFT_OUT`, get none."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["rule"] in LEFT_OUT or r["point_pct"] < MIN_POINT_PCT:
            continue
        ratios[r["rule"]].append(r["measured_pct"] / r["point_pct"])
    return {
        rule: (round(min(min(v) - MARGIN, 1.0), 3), len(v))
        for rule, v in sorted(ratios.items())
        if len(v) >= MIN_CASES
    }


def narrow(est: Estimate, rule: str, band: Mapping[str, tuple[float, int]] = BAND) -> Estimate:
    """``est`` with its low end raised to ``rule``'s low ratio × its point (``banded`` true when it
    moved); unchanged for a rule without one or a point under :data:`MIN_POINT_PCT`."""
    b = band.get(rule)
    if b is None or est.gain_pct < MIN_POINT_PCT:
        return est
    low = max(est.low_pct, min(est.gain_pct * b[0], est.gain_pct))
    if low == est.low_pct:
        return est
    return replace(est, low_pct=low, banded=True)
