"""Critical path and gain estimates on real H100 traces (sample_traces/fixes: one bottleneck
planted per fix rule, timed against its fix without the profiler in fresh processes,
interleaved). The estimated range must contain the measured median gain of every rule
(``pin_memory`` and ``batch_size`` missed it before the host staging and the host variation
between processes entered the model: docs/history/benchmarks-2026-11.md, "Gains from the path")."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from validate_gains import EXPERIMENTS, ROOT, estimate_for, measured_gains


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):
    """In memory: the estimates are the subject, not the store (the lake under
    ``GPUSCOPE_TESTS_ON_LAKE=1``)."""
    from clitools import analysis_spec
    from gpuscope.store import connect

    c = connect(analysis_spec(tmp_path_factory.mktemp("gains"), "store"))
    yield c
    c.close()


@pytest.mark.slow
@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_estimate_range_holds_the_measured_gain(con, exp: str) -> None:
    r = estimate_for(con, exp)
    gains = measured_gains(ROOT / exp)
    assert len(gains) >= 3  # at least three interleaved planted/fixed pairs
    e = r["estimate"]
    assert e is not None and e["low_pct"] <= e["gain_pct"] <= e["high_pct"]
    assert e["low_pct"] <= statistics.median(gains) <= e["high_pct"], (e, gains)


@pytest.mark.slow
def test_critical_path_of_real_traces_tiles_every_step(con) -> None:
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    trace = ROOT / "pin_memory" / "pin_memory_rank0.pt.trace.json.gz"
    rid = ingest_paths(con, [trace])[0].run_id
    doc = analyze_run(con, rid).to_json()
    cp = doc["critical_path"]
    assert [s["number"] for s in cp["steps"]] == [s["number"] for s in doc["steps"]]
    for s, st in zip(cp["steps"], doc["steps"], strict=True):
        assert sum(s["bound_by_ms"].values()) == pytest.approx(st["duration_ms"], abs=1e-9)
    assert cp["dominant"] == "copies"  # 33.6 MB from pageable memory per step
    assert cp["steps"][0]["top"][0]["what"] == "Memcpy HtoD (Pageable -> Device)"
    pin = next(r for r in doc["recommendations"] if r["id"] == "pin_memory")
    assert pin["estimate"]["method"] == "critical_path" and pin["estimate"]["bound"] is False


def test_sample_traces_are_small() -> None:
    for f in ROOT.glob("*/*.gz"):
        assert f.stat().st_size < 2_000_000, f
