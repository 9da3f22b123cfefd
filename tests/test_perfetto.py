"""Issue 24: a rank's events, trimmed to a window, rebuilt from the store as Kineto JSON for
Perfetto: the file re-ingests to the same figures for its window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.analysis.report import analyze_run
from gpuscope.analysis.steps import find_window
from gpuscope.analysis.trace_export import trimmed_trace, trimmed_trace_bytes
from gpuscope.ingest.loader import ingest_paths
from test_analysis_recommendations import before_like

SAMPLES = (
    Path(__file__).resolve().parent.parent / "sample_traces"
)  # (not from conftest: tests/e2e has one too)

FIGURES = ("step_time_ms", "gpu_busy_pct", "mfu_pct", "tensor_core_pct", "throughput")

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


def _same_figures(a: dict, b: dict) -> None:
    for k in FIGURES:
        assert a[k] == b[k], k
    assert a["idle"]["causes"] == b["idle"]["causes"]
    assert a["kernels"]["total_us"] == b["kernels"]["total_us"]
    assert a["kernels"]["by_category"] == b["kernels"]["by_category"]
    assert [r["id"] for r in a["recommendations"]] == [r["id"] for r in b["recommendations"]]
    assert [r["cost_pct"] for r in a["recommendations"]] == pytest.approx(
        [r["cost_pct"] for r in b["recommendations"]]
    )


@pytest.mark.slow
def test_whole_window_reingests_to_the_same_figures(tmp_path, con):
    [r] = ingest_paths(con, [str(before_like().write(tmp_path / "b.json"))])
    w = find_window(con, r.run_id, 0)
    path = tmp_path / "trim.json"
    path.write_bytes(trimmed_trace_bytes(con, r.run_id, 0, w.start_ns, w.end_ns))
    [r2] = ingest_paths(con, [str(path)], name="trimmed")
    _same_figures(analyze_run(con, r.run_id).to_json(), analyze_run(con, r2.run_id).to_json())


@pytest.mark.slow
def test_a_zoomed_window_keeps_its_steps(tmp_path, con):
    """Steps 1-2 of four 8 ms steps: the file holds those two steps, and their per-step figures
    are the original run's for the same steps."""
    [r] = ingest_paths(con, [str(before_like(n_steps=4).write(tmp_path / "b.json"))])
    full = analyze_run(con, r.run_id).to_json()
    w = find_window(con, r.run_id, 0)
    (s1, _), (_, e2) = w.step_bounds_ns()[1], w.step_bounds_ns()[2]
    doc = trimmed_trace(con, r.run_id, 0, s1, e2)
    steps = sorted(e["name"] for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#1", "ProfilerStep#2"]
    path = tmp_path / "zoom.json"
    path.write_text(json.dumps(doc))
    [r2] = ingest_paths(con, [str(path)], name="zoom")
    part = analyze_run(con, r2.run_id).to_json()
    keep = ("number", "duration_ms", "cpu_ms", "busy_pct")
    assert [{k: s[k] for k in keep} for s in part["steps"]] == [
        {k: s[k] for k in keep} for s in full["steps"][1:3]
    ]


@pytest.mark.slow
def test_metadata_and_names_survive(tmp_path, con):
    [r] = ingest_paths(con, [str(before_like().write(tmp_path / "b.json"))])
    doc = trimmed_trace(con, r.run_id, 0)
    assert doc["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert doc["samples_per_step"] == 8 and "baseTimeNanoseconds" in doc
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert {"process_name", "thread_name"} <= names
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert {"correlation", "device", "stream", "grid", "block"} <= set(kernel["args"])
    with pytest.raises(ValueError, match="no rank 5"):
        trimmed_trace(con, r.run_id, 5)
    with pytest.raises(ValueError, match="zoom in"):
        trimmed_trace(con, r.run_id, 0, max_events=10)


@pytest.mark.slow
def test_the_sample_run_reingests_to_the_same_figures(tmp_path, con):
    [r] = ingest_paths(con, [str(SAMPLES / "before")])
    w = find_window(con, r.run_id, 0)
    path = tmp_path / "trim.json"
    path.write_bytes(trimmed_trace_bytes(con, r.run_id, 0, w.start_ns, w.end_ns))
    [r2] = ingest_paths(con, [str(path)], name="trimmed")
    _same_figures(analyze_run(con, r.run_id).to_json(), analyze_run(con, r2.run_id).to_json())
