"""The Run page's page models (issue 21: typed page models, ``to_json()`` never read back): the
ranks, roofline, modules and critical-path sections are frozen dataclasses built by
``gpuscope.analysis.run_views`` from the typed report. On real samples each says what
``analyze --json`` says under the same names (one owner computes both), and none is built
through a ``to_json``: every serializer on the way raises while they are built."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpuscope.analysis import (
    collectives,
    critical_path,
    fixes,
    gains,
    modules,
    report,
    run_views,
)
from gpuscope.analysis import roofline as roofline_mod

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"

#: Every ``to_json`` of the parts these page models are built from.
SERIALIZERS = (
    report.RunReport,
    roofline_mod.Roofline,
    roofline_mod.RoofRow,
    modules.ModulesResult,
    modules.ModuleRow,
    modules.Repeat,
    critical_path.CriticalPath,
    critical_path.StepPath,
    collectives.Straggler,
    fixes.Recommendation,
    gains.Estimate,
)


@pytest.fixture(scope="module")
def reports() -> Iterator[dict[str, report.RunReport]]:
    """The reports (with the critical path) of the allocator sample (roofline, modules, fixes
    with estimates) and of rank 0 of the 2×H200 DDP pair (two ranks, a straggler)."""
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    con = connect(":memory:")
    try:
        [mem] = ingest_paths(con, [SAMPLES / "memory" / "gpt_mem.pt.trace.json.gz"])
        [ddp] = ingest_paths(con, [SAMPLES / "ddp"])
        yield {
            "memory": report.analyze_run(con, mem.run_id),
            "ddp": report.analyze_run(con, ddp.run_id, rank=0),
        }
    finally:
        con.close()


def _no_json(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: object, *a: object, **k: object) -> Any:
        raise AssertionError(f"{type(self).__name__}.to_json read while building a page model")

    for cls in SERIALIZERS:
        monkeypatch.setattr(cls, "to_json", refuse)


@pytest.mark.slow
def test_page_models_say_what_analyze_json_says_and_never_read_it(
    reports: dict[str, report.RunReport], monkeypatch: pytest.MonkeyPatch
) -> None:
    mem, ddp = reports["memory"], reports["ddp"]
    docs = {name: r.to_json() for name, r in reports.items()}  # before the serializers refuse
    _no_json(monkeypatch)
    with pytest.raises(AssertionError, match="read while building"):
        mem.to_json()  # the guard works
    roof = run_views.roofline(mem)
    mods = run_views.modules(mem)
    path = run_views.critical_path_section(mem)
    ranks = run_views.rank_overview(ddp)
    monkeypatch.undo()

    doc = docs["memory"]
    assert roof is not None and len(roof.ops) == len(doc["roofline"]["ops"]) > 0
    assert [dataclasses.asdict(o) for o in roof.ops] == doc["roofline"]["ops"]
    assert roof.lost_us_per_step == doc["roofline"]["lost_us_per_step"]
    assert (
        roof.memory_tbs == doc["roofline"]["memory_tbs"]
        and list(roof.notes) == (doc["roofline"]["notes"])
    )

    assert mods is not None and len(mods.modules) == len(doc["modules"]["modules"]) > 0
    assert [dataclasses.asdict(m) for m in mods.modules] == doc["modules"]["modules"]
    assert {p: dataclasses.asdict(v) for p, v in mods.by_phase.items()} == doc["modules"][
        "by_phase"
    ]
    assert [(r.length, r.times, r.steps, r.gpu_us_per_step, r.share_pct) for r in mods.repeats] == [
        (r["kernels"], r["times_per_step"], r["steps"], r["gpu_us_per_step"], r["share_pct"])
        for r in doc["modules"]["repeats"]
    ]
    assert mods.same_sequence_steps == doc["modules"]["same_sequence_steps"]

    cp = doc["critical_path"]
    assert len(path.steps) == len(cp["steps"]) > 0
    assert [(s.number, s.bound_by_ms) for s in path.steps] == [
        (s["number"], s["bound_by_ms"]) for s in cp["steps"]
    ]
    assert path.dominant == cp["dominant"] and path.bound_by_pct == cp["bound_by_pct"]
    assert [(f.fix, f.footing, f.estimate.gain_pct) for f in path.estimates] == [
        (r["id"], r["footing"], r["estimate"]["gain_pct"])
        for r in doc["recommendations"]
        if r["estimate"]
    ]
    assert path.estimates  # the allocator sample's fixes have estimates

    d = docs["ddp"]
    assert ranks.rank == d["rank"] == 0 and [x.rank for x in ranks.lines] == [0, 1]
    for line, row in zip(ranks.lines, d["ranks"], strict=True):
        assert line.step_p50_ms == row["step_p50_ms"] and line.comm_wait_pct == row["comm_wait_pct"]
        assert line.idle_us_per_step == row["idle_us_per_step"]
        assert {str(k): v for k, v in line.step_ms_by_step.items()} == row["step_ms_by_step"]
        assert {str(k): v for k, v in line.wait_ms_by_step.items()} == row["wait_ms_by_step"]
    assert ranks.straggler is not None
    assert (ranks.straggler.rank, ranks.straggler.evidence) == (
        d["straggler"]["rank"],
        d["straggler"]["evidence"],
    )


@pytest.mark.slow
def test_sections_without_their_analysis(reports: dict[str, report.RunReport]) -> None:
    """A report without a path, roofline or modules (``with_path=False``, no ``details``) gives
    empty sections, and a fix without an estimate is not in the path's table."""
    mem = reports["memory"]
    bare = dataclasses.replace(mem, critical_path=None, roofline=None, modules=None)
    assert run_views.roofline(bare) is None and run_views.modules(bare) is None
    recs = mem.recommendations
    no_est = dataclasses.replace(bare, recommendations=[
        dataclasses.replace(recs[0], estimate=None), *recs[1:]
    ])  # fmt: skip
    section = run_views.critical_path_section(no_est)
    assert section.steps == () and section.dominant is None and section.bound_by_pct == {}
    assert [f.fix for f in section.estimates] == [r.id for r in recs[1:]]
    one = run_views.rank_overview(dataclasses.replace(mem, ranks=mem.ranks[:1], straggler=None))
    assert len(one.lines) == 1 and one.straggler is None
