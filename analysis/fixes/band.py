"""A fix's range cut to how far the measured gain has landed from the estimate on the recorded
pairs (sample_traces/validation): the replayed range (:func:`gpuscope.analysis.gains.
replay_estimate`) stacks every uncertainty at its extreme at once (the fix's weakest variant on
the slowest host with the unexplained time kept), and is often wider than any timed pair ever
needed. Per rule, the measured gain over the estimate's point, across every recorded pair where
that rule was the pair's fix and put its point at :data:`MIN_POINT_PCT` or more (pairs planted to
gain nothing included: where the rule fired on them, their ~0 is part of its spread), spans
``lo``..``hi``; a new range is cut to point × (``lo`` - :data:`MARGIN`) .. point ×
(``hi`` + :data:`MARGIN`), never wider than replayed and always holding its point.

:data:`BAND` is :func:`fit` of ``sample_traces/validation/band_fit.json`` (written by
``benchmarks/fit_band.py`` from a ``validate_gains_set.py --json`` judgement;
with the pairs of sample_traces/fixes; tests/test_fix_band.py holds them equal). Definitions: docs/metrics.md, "Cut to the recorded
pairs' spread"."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpuscope.analysis.recommendation import Estimate

MARGIN = 0.15
"""Added to each end of a rule's spread of measured / point (a ratio, not points)."""

MIN_CASES = 5
"""A rule gets a band from this many recorded pairs on: below, its spread says too little."""

MIN_POINT_PCT = 5.0
"""Points under this (%) are neither fitted nor cut: a ratio to a point near 0 means nothing."""

LEFT_OUT = frozenset({"load_imbalance"})
"""Rules whose estimate is built three ways (the pace-setter's host ops, the graph of its extra
work, the proven bound), so one spread does not describe them."""

BAND: dict[str, tuple[float, float, int]] = {
    "activation_checkpointing": (0.478, 2.224, 11),
    "batch_size": (0.785, 1.415, 11),
    "cuda_graphs": (0.463, 1.355, 6),
    "cudnn_benchmark": (-1.92, 2.364, 7),
    "dataloader_workers": (-0.233, 1.361, 9),
    "host_sync": (-0.337, 1.871, 7),
    "kernel_fusion": (0.911, 1.502, 8),
    "mixed_precision": (-0.124, 1.273, 13),
    "optimizer_fused": (-0.065, 1.475, 8),
    "pin_memory": (0.513, 1.659, 8),
}
"""Rule -> (low ratio, high ratio, pairs fitted): :func:`fit` of band_fit.json, rounded to 3
decimals. A rule not here keeps its replayed range."""


def fit(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[float, float, int]]:
    """Each rule's band from recorded pairs: ``rows`` of ``rule`` (the pair's fix),
    ``point_pct`` (the rule's estimate on the pair's trace) and ``measured_pct`` (the timed gain).
    Ratio spread of measured / point over the rule's rows with a point of at least
    :data:`MIN_POINT_PCT`, widened by :data:`MARGIN` each side and stretched to hold 1; rules with
    fewer than :data:`MIN_CASES` such rows, or in :data:`LEFT_OUT`, get none."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["rule"] in LEFT_OUT or r["point_pct"] < MIN_POINT_PCT:
            continue
        ratios[r["rule"]].append(r["measured_pct"] / r["point_pct"])
    return {
        rule: (
            round(min(min(v) - MARGIN, 1.0), 3),
            round(max(max(v) + MARGIN, 1.0), 3),
            len(v),
        )
        for rule, v in sorted(ratios.items())
        if len(v) >= MIN_CASES
    }


def narrow(
    est: Estimate, rule: str, band: Mapping[str, tuple[float, float, int]] = BAND
) -> Estimate:
    """``est`` with its range cut to ``rule``'s band around its point (``banded`` true when an
    end moved); unchanged for a rule without a band or a point under :data:`MIN_POINT_PCT`."""
    b = band.get(rule)
    if b is None or est.gain_pct < MIN_POINT_PCT:
        return est
    low = max(est.low_pct, min(est.gain_pct * b[0], est.gain_pct))
    high = min(est.high_pct, max(est.gain_pct * b[1], est.gain_pct))
    if low == est.low_pct and high == est.high_pct:
        return est
    return replace(est, low_pct=low, high_pct=high, banded=True)
