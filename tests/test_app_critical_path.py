"""The Run page's critical-path section: the bar per step (figure) and the page (AppTest)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app, texts
from gpuscope.analysis.run_views import Estimate, FixEstimate, StepPath
from gpuscope.web.critical_path_view import estimates_frame, gain_range
from gpuscope.web.figures_path import critical_path_bars
from synth import training_trace

MS = 1_000_000  # ns
STEPS = [
    StepPath(3, 0, int(4.5 * MS), {"cpu": MS, "kernels": 3 * MS, "sync": MS // 2, "launch": 0}, []),
    StepPath(
        4, 0, int(3.25 * MS), {"cpu": 2 * MS, "kernels": MS, "sync": 0, "launch": MS // 4}, []
    ),
]


def test_bars_stack_to_the_step_time_per_step():
    fig = critical_path_bars(STEPS)
    names = [t.name for t in fig.data]
    assert names == ["CPU", "Launch overhead", "Kernels", "Sync"]  # empty categories left out
    per_step = [sum(t.x[i] for t in fig.data) for i in range(2)]
    assert per_step == [4.5, 3.25]
    assert list(fig.data[0].y) == ["step 3", "step 4"]
    assert fig.layout.barmode == "stack"


def test_estimates_frame_lists_fixes_with_an_estimate():
    estimates = [
        FixEstimate("pin_memory", "step_time", Estimate(50.4, 43.6, 70.9, 3.19)),
        FixEstimate("batch_size", "per_sample_time", Estimate(30.0, 29.0, 35.0, None)),
    ]
    df = estimates_frame(estimates)
    assert list(df["Fix"]) == ["pin_memory", "batch_size"]
    assert df.iloc[0]["Estimated gain"] == "50% of the step time"
    assert df.iloc[0]["Range"] == "44 to 71 %" and df.iloc[0]["Step after (ms)"] == "3.19"
    assert df.iloc[1]["Estimated gain"] == "30% of the per-sample time (4× batch)"


def test_a_range_that_may_slow_the_step_says_so_in_words():
    assert gain_range(43.6, 70.9) == "44 to 71 %"
    assert gain_range(-22.7, 40.8) == "23 % slower to 41 % faster"  # host_sync's measured range
    assert gain_range(-0.4, 71.6) == "0 to 72 %"  # rounds to no slowdown
    assert gain_range(-12.0, -3.0) == "3 to 12 % slower"


@pytest.mark.slow
def test_run_page_shows_the_critical_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    db = app_store(tmp_path, monkeypatch, lake=False)
    (rid,) = ingest(db, training_trace("before", steps=6).write(tmp_path / "b.pt.trace.json.gz"))
    at = open_app("screens/run.py", {"run": rid})
    assert not at.exception, at.exception
    assert "Critical path of each step" in texts(at, "subheader")
    cap = next(c for c in texts(at, "caption") if c.startswith("Bound by"))
    assert "% of the path" in cap
    spec = json.loads(at.get("plotly_chart")[-1].proto.spec)
    bars = [t for t in spec["data"] if t.get("type") == "bar"]
    assert bars and all(t["orientation"] == "h" for t in bars)
    steps = {y for t in bars for y in t["y"]}
    assert len(steps) == 6 and all(s.startswith("step ") for s in steps)
    # the fixes' gains re-timed along the path: the report's fixes that have an estimate
    from gpuscope.analysis.report import analyze_run
    from gpuscope.store import connect

    con = connect(db)
    try:
        recs = analyze_run(con, rid).recommendations
    finally:
        con.close()
    est = next(d.value for d in at.dataframe if "Estimated gain" in d.value.columns)
    want = [r for r in recs if r.estimate is not None]
    assert want and list(est["Fix"]) == [r.id for r in want]
    assert list(est["Range"]) == [gain_range(r.estimate.low_pct, r.estimate.high_pct) for r in want]
