"""The Run page's critical-path section: the bar per step (figure) and the page (AppTest)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app, texts
from gpuscope.web.critical_path_view import estimates_frame, gain_range
from gpuscope.web.figures_path import critical_path_bars
from synth import training_trace

STEPS = [
    {"number": 3, "bound_by_ms": {"cpu": 1.0, "kernels": 3.0, "sync": 0.5, "launch": 0.0}},
    {"number": 4, "bound_by_ms": {"cpu": 2.0, "kernels": 1.0, "sync": 0.0, "launch": 0.25}},
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
    report = {
        "recommendations": [
            {
                "id": "pin_memory",
                "bound": "step_time",
                "estimate": {"gain_pct": 50.4, "low_pct": 43.6, "high_pct": 70.9, "step_ms": 3.19},
            },
            {
                "id": "batch_size",
                "bound": "per_sample_time",
                "estimate": {"gain_pct": 30.0, "low_pct": 29.0, "high_pct": 35.0, "step_ms": None},
            },
            {"id": "host_sync", "bound": "step_time", "estimate": None},
        ]
    }
    df = estimates_frame(report)
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
    db = app_store(tmp_path, monkeypatch)
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
