"""A rank's line (``RunReport.ranks``) is a typed :class:`RankRow` (issue 21): built the same from
the rank's own analysis, the other ranks' cross-rank parts, their stored ``rank_row`` parts and
their events; its JSON is what ``analyze --json`` wrote before it was typed (the golden files), and
a stored line reads back into an equal row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import analysis_spec
from gpuscope.analysis import rank_summary as RS
from gpuscope.analysis import report
from gpuscope.analysis.rank_row import RankRow
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect

REPO = Path(__file__).resolve().parent.parent
DDP = REPO / "sample_traces" / "ddp"
GOLDEN = REPO / "tests" / "golden" / "analyze"


def EVERY_RUN(con, result) -> None:  # type: ignore[no-untyped-def]
    """Every part of every rank stored (the default hook stores a run of several ranks'
    cross-rank parts only)."""
    RS.write_rank_summaries(con, str(result.run_id))


def as_text(line: dict) -> str:
    """A line as the JSON output writes it: its keys in order, its numbers as written."""
    return json.dumps(line)


def test_a_row_round_trips_through_its_stored_json() -> None:
    row = RankRow(
        rank=3,
        gpu_busy_pct=41.5,
        step_time_ms=12.0,
        comm_only_us_per_step=7.25,
        idle_us_per_step=30.0,
        idle_by_cause_us_per_step={"launch_overhead": 10.0, "other": 20.0},
        step_p50_ms=11.0,
        step_p90_ms=14.0,
        step_max_ms=15.5,
        compute_pct=30.0,
        comm_transfer_pct=1.5,
        comm_wait_pct=10.0,
        comm_wait_us_per_step=1200.0,
        step_ms_by_step={7: 11.0, 8: 15.5},
        wait_ms_by_step={7: 1.0, 8: 0.0},
    )
    doc = row.to_json()
    assert list(doc) == [
        "rank",
        "gpu_busy_pct",
        "step_time_ms",
        "comm_only_us_per_step",
        "idle_us_per_step",
        "idle_by_cause_us_per_step",
        "step_p50_ms",
        "step_p90_ms",
        "step_max_ms",
        "compute_pct",
        "comm_transfer_pct",
        "comm_wait_pct",
        "comm_wait_us_per_step",
        "step_ms_by_step",
        "wait_ms_by_step",
    ]
    assert doc["step_ms_by_step"] == {"7": 11.0, "8": 15.5}  # JSON keys: the step as text
    assert RankRow.from_stored(json.loads(json.dumps(doc))) == row


def test_a_line_stored_before_the_split_and_the_per_step_maps_reads() -> None:
    """A ``rank_row`` part stored by an older gpuscope (version 1 before the busy split and the
    per-step maps were added) reads with those figures unknown."""
    old = {
        "rank": 1,
        "gpu_busy_pct": None,
        "step_time_ms": 0.1,
        "comm_only_us_per_step": 0.0,
        "idle_us_per_step": None,
        "idle_by_cause_us_per_step": None,
    }
    row = RankRow.from_stored(old)
    assert (row.rank, row.step_time_ms, row.comm_wait_pct, row.step_p50_ms) == (1, 0.1, None, None)
    assert row.step_ms_by_step == {} and row.wait_ms_by_step == {}
    assert row.to_json() == {
        **old,
        **dict.fromkeys(
            ["step_p50_ms", "step_p90_ms", "step_max_ms", "compute_pct", "comm_transfer_pct"]
        ),
        **dict.fromkeys(["comm_wait_pct", "comm_wait_us_per_step"]),
        "step_ms_by_step": {},
        "wait_ms_by_step": {},
    }


@pytest.mark.slow
@pytest.mark.skipif(not DDP.is_dir(), reason="sample traces not recorded")
def test_the_rows_json_is_the_line_analyze_json_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real DDP pair, rank 0 (``tests/golden/analyze/ddp_rank0.json``, written while the lines
    were dicts): its own line and rank 1's from its cross-rank part, then rank 1's from its
    events, write the golden lines byte for byte."""
    want = [as_text(line) for line in json.loads((GOLDEN / "ddp_rank0.json").read_text())["ranks"]]
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingest_paths(con, [DDP], after_trace=RS.store_after_ingest)[0].run_id
        a = report.RunAnalysis(con, run_id, rank=0)
        assert a.parts is not None  # rank 1 from its part
        assert all(isinstance(r, RankRow) for r in a.ranks)
        assert [as_text(r.to_json()) for r in a.ranks] == want
        # rank 1 from its events
        b = report.RunAnalysis(
            con, run_id, rank=0, options=report.AnalysisOptions(stored_parts=False)
        )
        assert b.parts is None
        assert [as_text(r.to_json()) for r in b.ranks] == want


@pytest.mark.slow
@pytest.mark.skipif(not DDP.is_dir(), reason="sample traces not recorded")
def test_a_stored_line_reads_back_into_an_equal_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank's ``rank_row`` part as the current rank_summary stores it reads back
    (:meth:`RankRow.from_stored`) into the row the analysis builds; ``analyze`` shows it for the
    other rank when it needs no cross-rank match."""
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingest_paths(con, [DDP], after_trace=EVERY_RUN)[0].run_id
        built = {r: report.rank_row(con, run_id, r) for r in (0, 1)}
        docs = dict(
            con.execute(
                "SELECT rank, doc FROM rank_summaries WHERE run_id = ? AND part = 'rank_row'",
                [run_id],
            ).fetchall()
        )
        for r in (0, 1):
            assert json.loads(docs[r]) == built[r].to_json()
            assert RankRow.from_stored(json.loads(docs[r])) == built[r]
        assert report._stored_lines(con, run_id) == built
        assert built[0].step_ms_by_step and built[0] != built[1]

        # the analysis reads rank 1's stored line where it reads no cross-rank part (no match:
        # details off)
        monkeypatch.setattr(report.RunAnalysis, "parts", None)
        shown = report.analyze_run(con, run_id, rank=0, details=False).ranks
        assert shown[1] == built[1]
        con.execute(
            "UPDATE rank_summaries SET doc = ? WHERE run_id = ? AND rank = 1 AND part = 'rank_row'",
            [json.dumps({**json.loads(docs[1]), "gpu_busy_pct": 12.5}), run_id],
        )
        shown = report.analyze_run(con, run_id, rank=0, details=False).ranks
        assert shown[1].gpu_busy_pct == 12.5  # the stored line, not the events
