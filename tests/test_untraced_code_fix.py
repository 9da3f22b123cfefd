"""The job's fix for a pace-setter held by code no traced op holds (analysis/fixes/load_imbalance.py
``untraced_work_estimate``, docs/metrics.md "The pace-setter's own cause"): answers by hand."""

from __future__ import annotations

import pytest
from gpuscope.analysis.fixes import load_imbalance as li


def test_the_code_taken_off_is_its_share_of_the_step_with_the_hosts_spread() -> None:
    """20 ms off a 40 ms step, the GPU's own work 10 ms: 50 %; low 20 / 1.23 = 16.26 ms
    (40.65 %), high 20 × 1.23 = 24.6 ms (61.5 %), both under the bound (40 - 10) / 40 = 75 %."""
    est = li.untraced_work_estimate(20.0, 40.0, 10.0)
    assert est.gain_pct == pytest.approx(50.0)
    assert est.low_pct == pytest.approx(100 * 20 / 1.23 / 40)
    assert est.high_pct == pytest.approx(61.5)
    assert est.step_ms == pytest.approx(20.0)
    assert est.method == "untraced_code" and not est.clipped


def test_the_step_stops_at_the_gpus_own_work() -> None:
    """32 ms off a 40 ms step whose GPU works 10 ms: the point 80 % passes the bound 75 %: it is
    75 %, the top too; the low end 32 / 1.23 = 26.02 ms (65.04 %) stays."""
    est = li.untraced_work_estimate(32.0, 40.0, 10.0)
    assert est.gain_pct == pytest.approx(75.0)
    assert est.high_pct == pytest.approx(75.0)
    assert est.low_pct == pytest.approx(100 * 32 / 1.23 / 40)
    assert est.clipped and est.method == "untraced_code"


def test_the_fix_says_what_it_takes_off_and_on_which_rank() -> None:
    rec = li.untraced_work_fix(1, 20.4, 20.6, 37.4, 8.2)
    assert rec.id == "load_imbalance"
    assert rec.title == "Take the code no op holds off rank 1's step"
    assert rec.estimate is not None and rec.estimate.gain_pct == pytest.approx(100 * 20.6 / 37.4)
    assert rec.bound_pct == pytest.approx(100 * (37.4 - 8.2) / 37.4)
    assert "Rank 1's GPU idles 20.4 ms per step" in rec.evidence["summary"]
    assert "py-spy" in rec.fix
