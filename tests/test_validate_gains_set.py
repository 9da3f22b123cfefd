"""benchmarks/validate_gains_set.py's judgement (a range holds a measured gain; "nothing" agrees
with "nothing"), its tolerance of a ``job`` object in the report, and the validation set's
truth.json against the timings it was made from."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "sample_traces" / "validation"))

from validate_gains_set import NULL_PCT, TRUTH, holds, recommendations  # noqa: E402


def test_a_range_holds_the_gain_inside_it() -> None:
    assert holds(30.0, 50.0, 40.0)
    assert holds(30.0, 50.0, 30.0) and holds(30.0, 50.0, 50.0)
    assert not holds(30.0, 50.0, 55.0)
    assert not holds(30.0, 50.0, 1.0)


def test_nothing_agrees_with_nothing_but_a_promise_does_not() -> None:
    assert holds(0.0, 0.0, -1.8)  # fix absent (0-0), measured ~0
    assert holds(0.3, 0.7, 1.0)  # both ~0
    assert not holds(6.0, 15.0, 1.0)  # a gain promised where nothing was gained
    assert not holds(0.0, 0.0, NULL_PCT + 0.1)  # a real gain the estimate missed


def test_recommendations_read_the_job_object_when_there_is_one() -> None:
    doc = {"recommendations": [{"id": "a"}], "job": {"recommendations": [{"id": "b"}]}}
    assert [r["id"] for r in recommendations(doc)] == ["a", "b"]
    assert [r["id"] for r in recommendations({"recommendations": [{"id": "a"}]})] == ["a"]
    assert recommendations({"job": {"id": "x"}, "recommendations": []}) == []
    assert recommendations({"job": "not an object"}) == []


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_truth_matches_its_timings_and_holds_a_third_out() -> None:
    from record_validation import ORDER

    cases = json.loads(TRUTH.read_text())["cases"]
    assert len(cases) >= 12
    assert sum(c["null"] for c in cases) >= 2  # pairs where the fix gains nothing
    for c in cases:
        t = c["timings"]
        assert len(t["planted"]) == len(t["fixed"]) == len(c["gain_pct_by_round"]) >= 3
        for p, f, g in zip(t["planted"], t["fixed"], c["gain_pct_by_round"], strict=True):
            assert g == pytest.approx(100 * (1 - f / p))
        assert c["gain_pct"] == pytest.approx(statistics.median(c["gain_pct_by_round"]))
        assert c["null"] == (abs(c["gain_pct"]) < NULL_PCT)
        for tr in c["traces"]:
            assert (TRUTH.parent / tr).is_file(), tr
    held = {c["case"] for c in cases if c["held_out"]}
    assert held == {c for i, c in enumerate(ORDER) if i % 3 == 2}
