"""The run facade (``gpuscope.analysis.report.RunAnalysis``): one rank of a run, each analysis
computed once and shared by the report's parts; ``analyze_run`` reads its parts into the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuscope.analysis import report as REP
from gpuscope.analysis.report import AnalysisOptions, RunAnalysis, analyze_run
from gpuscope.ingest.loader import ingest_paths

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


def _counting(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> dict[str, int]:
    calls = dict.fromkeys(names, 0)
    for name in names:
        real = getattr(REP, name)

        def counted(*a: Any, _name: str = name, _real: Any = real, **k: Any) -> Any:
            calls[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(REP, name, counted)
    return calls


@pytest.mark.slow
def test_analyze_run_computes_each_analysis_once(con, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = ingest_paths(con, [SAMPLES / "fixes" / "dataloader_workers"])[0].run_id
    names = ["profiler_cost", "idle_analysis", "busy_summary", "find_window", "critical_path"]
    calls = _counting(monkeypatch, names)
    rep = analyze_run(con, run_id)
    # the profiler's cost once (it was computed twice: without and with the kernels' evidence)
    assert calls == dict.fromkeys(names, 1)
    assert rep.profiler is not None and rep.profiler.host_causes_ms_per_step  # the full one
    assert rep.critical_path is not None
    assert rep.recommendations and all(r.estimate is not None for r in rep.recommendations)
    calls.update(dict.fromkeys(names, 0))
    analyze_run(con, run_id, details=False)
    # headline only: no critical path; the profiler's cost without the kernels' evidence
    assert calls == {**dict.fromkeys(names, 1), "critical_path": 0}


@pytest.mark.slow
def test_the_facade_gives_the_parts_of_the_report(con) -> None:
    run_id = ingest_paths(con, [SAMPLES / "ddp"])[0].run_id
    rep = analyze_run(con, run_id, rank=1, with_path=False)
    a = RunAnalysis(con, run_id, 1, AnalysisOptions(with_path=False))
    assert a.rank == 1 and a.run["ranks"] == [0, 1]
    assert a.idle is a.idle  # computed once
    assert a.stats == rep.step_stats and a.window == rep.window
    assert a.profiler == rep.profiler and a.per_step == rep.per_step and a.ranks == rep.ranks
    assert [r.id for r in a.recommendations] == [r.id for r in rep.recommendations]
    assert a.critical_path is None and a.gain_context is None
    assert a.index is a.index  # the rank's shared index
    assert RunAnalysis(con, run_id).rank == 0  # default: the lowest rank


@pytest.mark.slow
def test_the_facade_refuses_an_unknown_rank_or_run(con) -> None:
    run_id = ingest_paths(con, [SAMPLES / "before"])[0].run_id
    with pytest.raises(ValueError, match=r"no rank 7 \(ranks: \[0\]\)"):
        RunAnalysis(con, run_id, 7)
    with pytest.raises(ValueError, match="no such run"):
        RunAnalysis(con, "nope")
    with pytest.raises(ValueError, match=r"--untraced-step-ms must be > 0 \(got 0\)"):
        analyze_run(con, run_id, untraced_step_ms=0.0)
