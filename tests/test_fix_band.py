"""A fix's low end raised to the recorded pairs' lowest (analysis/fixes/band.py): the fit on
hand-made rows with answers by hand, the raise on hand-made estimates, the committed ``BAND``
equal to the fit of its committed rows (band_fit.json) whose measured gains are truth.json's, and
the raise in the live analysis of a real pair whose point is still the one fitted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.analysis.fixes import band
from gpuscope.analysis.recommendation import Estimate

VAL = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"


def row(rule: str, point: float, measured: float) -> dict:
    return {"rule": rule, "point_pct": point, "measured_pct": measured}


def test_the_fit_is_the_least_measured_over_point_less_the_margin() -> None:
    """Five pairs of rule a, measured / point 1.2, 1.25, 1.3, 1.4, 1.5: 1.2 - 0.15 = 1.05 is
    brought down to 1 (the low end never passes the point). Rule b: ratios 0.5 ... -0.2 (a pair
    that gained nothing, -1 % on a point of 5): -0.35. Rule c has four pairs (none); a point under
    5 % is not fitted (rule a's 4 % with a ratio of 10 changes nothing); load_imbalance is left
    out whatever its pairs."""
    rows = [row("a", 10, 10 * r) for r in (1.2, 1.25, 1.3, 1.4, 1.5)] + [row("a", 4, 40)]
    rows += [row("b", 20, 10), row("b", 20, 20), row("b", 10, 8), row("b", 10, 10)]
    rows += [row("b", 5, -1)]
    rows += [row("c", 10, 10)] * 4 + [row("load_imbalance", 10, 10)] * 6
    assert band.fit(rows) == {"a": (1.0, 5), "b": (-0.35, 5)}


BAND = {"r": (0.5, 5), "neg": (-0.3, 5)}


def test_the_low_end_is_raised_to_the_ratio_times_the_point_and_the_top_kept() -> None:
    est = Estimate(40.0, 10.0, 80.0, 60.0)
    cut = band.narrow(est, "r", BAND)
    assert (cut.gain_pct, cut.low_pct, cut.high_pct, cut.banded) == (40.0, 20.0, 80.0, True)
    assert cut.step_ms == 60.0
    # a ratio whose low end is below the replayed one leaves it: -0.3 x 40 = -12 < 10
    assert band.narrow(est, "neg", BAND) == est
    assert band.narrow(Estimate(40.0, 30.0, 50.0, None), "r", BAND).banded is False
    # never above the point: a ratio of 1 makes the low end the point
    assert band.narrow(est, "one", {"one": (1.0, 5)}).low_pct == 40.0
    # no ratio for the rule, or a point under 5 %: as replayed
    assert band.narrow(est, "other", BAND) is est
    small = Estimate(4.0, -10.0, 30.0, None)
    assert band.narrow(small, "r", BAND) is small


def fit_rows() -> list[dict]:
    return json.loads((VAL / "band_fit.json").read_text())["rows"]


def test_the_committed_band_is_the_fit_of_the_committed_rows_of_recorded_pairs() -> None:
    """BAND is fit(band_fit.json); each row is a recorded case of truth.json whose fix is the
    row's rule and whose measured gain is truth's, a timed first fix of truth.json's
    ``first_fixes`` (its fix, its measured gain), or a pair of sample_traces/fixes with the
    median of its timed rounds (a row cannot be edited to move a band)."""
    import statistics
    import sys

    sys.path.insert(0, str(VAL.parent.parent / "benchmarks"))
    from validate_gains import EXPERIMENTS, ROOT, measured_gains, rule_of

    rows = fit_rows()
    assert band.fit(rows) == band.BAND
    truth = {c["case"]: c for c in json.loads((VAL / "truth.json").read_text())["cases"]}
    assert len({r["case"] for r in rows}) == len(rows) >= 100
    fixes = [r for r in rows if r["group"] == "fixes"]
    assert [r["case"] for r in fixes] == [f"fixes/{e}" for e in EXPERIMENTS]
    for r, exp in zip(fixes, EXPERIMENTS, strict=True):
        assert r["rule"] == rule_of(exp)
        median = statistics.median(measured_gains(ROOT / exp))
        assert r["measured_pct"] == pytest.approx(median, abs=5e-4), r
    first = {c["case"]: c for c in json.loads((VAL / "truth.json").read_text())["first_fixes"]}
    for r in rows:
        if r["group"] == "fixes":
            continue
        if r["group"] == "first_fixes":
            f = first[r["case"]]
            assert r["rule"] == f["gpuscope_fix_id"], r
            assert r["measured_pct"] == pytest.approx(f["gain_pct"], abs=5e-4), r
            continue
        case = truth[r["case"]]
        assert r["rule"] == case["expected_fix"], r
        assert r["measured_pct"] == pytest.approx(case["gain_pct"], abs=5e-4), r
        assert r["group"] == case["group"], r


def test_a_real_pairs_low_end_is_raised_in_the_analysis_and_its_point_is_the_fitted_one() -> None:
    """v66 (an actor-critic MLP compiled without CUDA graphs, reduce-overhead measured 43.6 %):
    the replay of its compiled calls' host work puts the point at 54.1 (the top weighs the
    planted step on a slower host: cuda_graphs is ``host_free``); the low end raised to
    0.656 x 54.08 = 35.5, the top the replay's. Its point is still band_fit.json's (a rule
    whose point moved must be fitted again: benchmarks/fit_band.py)."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    truth = {c["case"]: c for c in json.loads((VAL / "truth.json").read_text())["cases"]}
    (fitted,) = [r for r in fit_rows() if r["case"] == "v66"]
    con = connect(":memory:")
    try:
        run = ingest_paths(con, [VAL / t for t in truth["v66"]["traces"]])[0].run_id
        recs = analyze_run(con, run).to_json()["recommendations"]
    finally:
        con.close()
    (rec,) = [r for r in recs if r["id"] == "cuda_graphs"]
    est = rec["estimate"]
    assert est["gain_pct"] == pytest.approx(fitted["point_pct"], abs=0.01)
    lo, _ = band.BAND["cuda_graphs"]
    assert est["banded"] is True
    assert est["low_pct"] == pytest.approx(lo * est["gain_pct"], abs=1e-6)
    assert est["low_pct"] == pytest.approx(35.5, abs=0.05)
    assert est["high_pct"] == pytest.approx(83.6, abs=0.05)
    assert est["low_pct"] <= truth["v66"]["gain_pct"] <= est["high_pct"]


def test_the_text_report_says_when_a_low_end_was_raised() -> None:
    from gpuscope.cli.analyze import render_fix

    rec = {"id": "x", "title": "T", "gain": "step time down 40% (range 20 to 56%)", "why": ""}
    rec |= {"evidence": {"summary": "s"}, "fix": "code"}
    cut = render_fix(rec | {"estimate": {"banded": True}})[1]
    assert cut.endswith(", low end raised to the recorded pairs' lowest")
    assert "lowest" not in render_fix(rec | {"estimate": {"banded": False}})[1]
