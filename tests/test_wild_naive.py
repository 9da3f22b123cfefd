"""Profiles as a user writes them with torch.profiler alone (sample_traces/record_naive.py, one
H100, torch 2.11): a loop one iteration short of its schedule leaves a stub last step, and a
compiled model profiled from its first call puts compilation and CUDA-graph capture in the window.
Neither is a step that repeats: the window leaves them out and says so."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths

pytestmark = [pytest.mark.memory_store, pytest.mark.slow]

WILD = Path(__file__).resolve().parent.parent / "sample_traces" / "wild"


def steps_in(case: str) -> dict[str, float]:
    """ProfilerStep name -> its CPU duration (µs), read from the raw trace."""
    doc = json.loads(gzip.decompress((WILD / case / f"{case}_rank0.pt.trace.json.gz").read_bytes()))
    return {
        e["name"]: e["dur"]
        for e in doc["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"
    }


def test_the_stub_the_profiler_closed_as_it_began_is_not_a_step(con) -> None:
    raw = steps_in("naive_stub")
    assert list(raw) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert raw["ProfilerStep#4"] < 50 < 4000 < min(raw["ProfilerStep#2"], raw["ProfilerStep#3"])
    [res] = ingest_paths(con, [WILD / "naive_stub"])
    r = analyze_run(con, res.run_id)
    assert [s.number for s in r.window.steps] == [2, 3]
    assert r.to_json()["window"]["steps"] == 2


def test_compilation_and_capture_are_warm_up_left_out(con) -> None:
    raw = steps_in("naive_capture")
    assert raw["ProfilerStep#0"] > 1e6  # compiling and autotuning: 16 s on a cold cache
    [res] = ingest_paths(con, [WILD / "naive_capture"])
    r = analyze_run(con, res.run_id)
    assert r.window.warmup == (0, 1)
    assert [s.number for s in r.window.steps] == [2, 3, 4]
    assert r.step_stats.max_ms < 20  # the replayed steps only: 6-12 ms
    assert r.compiled.cuda_graphs and r.compiled.graph_captures == 0  # none left in the window
    ids = [x.id for x in r.recommendations]
    assert "cuda_graphs" not in ids and "kernel_fusion" not in ids
    from gpuscope.cli.analyze import render

    assert "warm-up steps left out: 0, 1" in render(r.to_json())
    # a warning every face shows (the CLI's stderr, the Run page's notes, the reports)
    assert any(w.startswith("warm-up steps left out of the window: 0, 1") for w in r.warnings)
