"""The fused optimizer's re-timing factors (analysis/fixes/optimizer_fused.py: ``OPS_KEPT``,
``BOOKKEEPING_KEPT``, ``KERNELS_KEPT``) are the greatest, median and least fused ÷ loop ratios of
the recorded pairs in sample_traces/validation/optimizer_fused (``split.json``, written by
benchmarks/optimizer_fused_split.py from the traces beside it), and that file is what the traces
give."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
from gpuscope.analysis.fixes import optimizer_fused as OF

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import optimizer_fused_split as S  # noqa: E402

SPLIT = S.DIR / "split.json"


def _saved() -> dict:
    return json.loads(SPLIT.read_text())


def test_the_factors_are_the_recorded_pairs_greatest_median_and_least() -> None:
    saved = _saved()
    rows = saved["rows"]
    assert [r["case"] for r in rows] == [c for c, _, _ in S.pairs()]
    assert len(rows) == 16
    for r in rows:  # each ratio is the pair's own fused ÷ loop
        for k in S.PARTS:
            assert r["ratio"][k] == pytest.approx(r["fused_ms"][k] / r["planted_ms"][k])
    fit = S.factors(rows)
    assert fit == {k: tuple(v) for k, v in saved["factors"].items()}
    assert fit["ops"] == OF.OPS_KEPT
    assert fit["own"] == OF.BOOKKEEPING_KEPT
    assert fit["kernels"] == OF.KERNELS_KEPT
    # the fused step keeps less at the mid than the loop it replaces, at every part
    assert all(statistics.median(r["ratio"][k] for r in rows) < 0.2 for k in S.PARTS)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["v30", "v142"])
def test_the_saved_split_is_what_the_traces_give(case: str) -> None:
    """Two pairs read again from their traces (the smallest: v30 traced both variants on the
    H200, v142's planted trace is the one the set was judged on)."""
    [(c, planted, fused)] = [p for p in S.pairs() if p[0] == case]
    got = S.row(c, planted, fused)
    [saved] = [r for r in _saved()["rows"] if r["case"] == case]
    for side in ("planted_ms", "fused_ms"):
        for k, v in saved[side].items():
            assert got[side][k] == pytest.approx(v, rel=1e-9), (side, k)
