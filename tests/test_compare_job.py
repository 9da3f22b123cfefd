"""A comparison is of two jobs (analysis/compare.py): the jobs' step time, GPU busy over every
rank and MFU head it and its cards, the fixes compared are the jobs', and every per-rank figure is
the pace-setter's, so that ``gpuscope compare``, its JSON and the Compare page say of a run what
the Runs list, ``analyze`` and the Run page say."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app
from clitools import run_cli
from gpuscope.analysis.compare import compare_runs
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.job import diagnose, memo
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
from test_job import tiny_job

REPO = Path(__file__).resolve().parent.parent
MULTI = REPO / "sample_traces" / "multi_gpu"


def even_job(folder: Path) -> Path:
    """tiny_job with rank 1's kernels 11,000 µs each, back to back from 1,100 µs. By hand (µs):
    rank 1's GPU work ends 12,100, 23,100, 34,100, 45,100, after rank 0's steps (11,000, 21,000,
    31,000, 41,000), so each step completes then: periods 11,000 (steps 1-3). Step 3's span on
    rank 1 (31,000 to 45,100: 14.1 ms) is below 1.5 × 10 ms, so no drain is left out: the job
    step time is 11.0 ms (p90 11.0); rank 1 sets the pace; rank 0's own median step is 10 ms."""
    return tiny_job(folder, (11_000.0,) * 4)


@pytest.mark.slow
def test_two_tiny_jobs_compare_by_their_step_periods_and_pace_setters(tmp_path: Path) -> None:
    with connect(":memory:") as con:
        a = ingest_paths(con, [tiny_job(tmp_path / "a")])[0].run_id
        b = ingest_paths(con, [even_job(tmp_path / "b")])[0].run_id
        cmp = compare_runs(con, a, b)
        jobs = {
            r: diagnose(con, r, memo(lambda k, r=r: analyze_run(con, r, rank=k))) for r in (a, b)
        }
        named = compare_runs(con, a, b, rank=0)
    job = {d.metric: d for d in cmp.job}
    # tiny_job by hand (tests/test_job.py): 15.0 ms, p90 15.8; even_job: 11.0 ms
    assert job["job_step_time_ms"].a == pytest.approx(15.0)
    assert job["job_step_time_p90_ms"].a == pytest.approx(15.8)
    assert job["job_step_time_ms"].b == pytest.approx(11.0)
    assert job["job_step_time_ms"].verdict == "better"
    assert "job_wait_pct" in job  # two ranks: the wait for other ranks is compared
    # the per-rank figures are the pace-setter's (rank 1), not the lowest rank's (10 ms)
    assert (cmp.a.rank, cmp.a.pace_setter, cmp.a.ranks) == (1, 1, 2)
    assert (cmp.b.rank, cmp.b.pace_setter, cmp.b.ranks) == (1, 1, 2)
    assert cmp.a.label().endswith("rank 1: the pace-setter of 2 ranks)")
    # the fixes compared are the jobs', in each job's order
    ids_a = [str(f.id) for f in jobs[a].fixes]
    ids_b = [str(f.id) for f in jobs[b].fixes]
    assert cmp.recommendations["remaining"] == [i for i in ids_a if i in ids_b]
    assert cmp.recommendations["resolved"] == [i for i in ids_a if i not in ids_b]
    assert cmp.recommendations["new"] == [i for i in ids_b if i not in ids_a]
    # a rank named: its figures, under the same jobs' verdicts
    assert (named.a.rank, named.a.pace_setter) == (0, 1)
    assert named.a.label().endswith("rank 0 of 2 (the pace-setter is rank 1))")
    assert [d.a for d in named.job] == [d.a for d in cmp.job]
    text = cmp.table()
    assert text.splitlines()[0].endswith("rank 1: the pace-setter of 2 ranks)")
    assert "the job " in text and "metric (rank 1 of A, rank 1 of B)" in text


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """The real 2-GPU DDP runs (clean: rank 1 sets the pace; uneven: rank 0), ingested once:
    (store, clean, uneven)."""
    tmp = tmp_path_factory.mktemp("ddp")
    spec = f"duckdb:{tmp / 'store.duckdb'}"
    clean, uneven = ingest(spec, MULTI / "ddp_clean", MULTI / "ddp_uneven")  # type: ignore[arg-type]
    return spec, clean, uneven


@pytest.mark.slow
def test_compare_json_says_what_analyze_says_of_each_job(capsys, ddp, kept_analyses) -> None:
    spec, clean, uneven = ddp
    docs = {}
    for run in (clean, uneven):
        code, out, err = run_cli(capsys, "analyze", run, "--json", "--db", spec)
        assert code == 0, err
        docs[run] = json.loads(out)["job"]
    code, out, err = run_cli(capsys, "compare", clean, uneven, "--json", "--db", spec)
    assert code == 0, err
    cmp = json.loads(out)
    job = {d["metric"]: d for d in cmp["job"]}
    for side, run in (("a", clean), ("b", uneven)):
        doc = docs[run]
        assert job["job_step_time_ms"][side] == pytest.approx(doc["step_time_ms"]["p50"])
        assert job["job_gpu_busy_pct"][side] == pytest.approx(doc["split"]["busy_pct"])
        assert job["job_wait_pct"][side] == pytest.approx(doc["split"]["wait_pct"])
        assert job["job_mfu_pct"][side] == pytest.approx(doc["mfu_pct"])
        assert cmp[side]["pace_setter"] == doc["pace_setter"]
        assert cmp[side]["rank"] == doc["fix_rank"]
    assert (cmp["a"]["rank"], cmp["b"]["rank"]) == (1, 0)  # clean's pace-setter is rank 1
    fixes = {r: [f["id"] for f in docs[r]["findings"] if f["kind"] == "fix"] for r in docs}
    rec = cmp["recommendations"]
    assert rec["new"] == [i for i in fixes[uneven] if i not in fixes[clean]]
    assert "load_imbalance" in rec["new"]  # the uneven job's first fix, absent from its rank 0's


@pytest.mark.slow
def test_the_compare_page_cards_are_the_jobs(
    ddp, kept_analyses, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, clean, uneven = ddp
    app_store(tmp_path, monkeypatch, lake=False)
    monkeypatch.setenv("GPUSCOPE_DB", spec)
    at = open_app("screens/compare.py", {"a": clean, "b": uneven})
    assert not at.exception, at.exception
    with connect(spec) as con:
        jobs = {
            r: diagnose(con, r, memo(lambda k, r=r: analyze_run(con, r, rank=k)))
            for r in (clean, uneven)
        }
    cards = {m.label.split(" · ")[0]: m for m in at.metric}
    # both runs carry a step timed without the profiler: the step card is that (job-wide); the
    # MFU card too; GPU busy is the job's over every rank's window
    assert cards["GPU busy"].value == f"{jobs[uneven].split.busy_pct:.1f} %"
    captions = " ".join(c.value for c in at.caption)
    assert "each job's; the other figures and the fixes' details are its pace-setter's" in captions
    assert "A's rank 1, B's rank 0" in captions
    table = at.dataframe[0].value
    job_rows = table[table["section"] == "The job"]
    assert list(job_rows["metric"])[:2] == ["Job step time (median)", "Job step time (p90)"]


@pytest.mark.slow
def test_the_report_of_a_comparison_leads_with_the_jobs(ddp, kept_analyses) -> None:
    from gpuscope.reports import build_report

    spec, clean, uneven = ddp
    with connect(spec) as con:
        text = build_report(con, uneven, fmt="md", compare_to=clean)
        jobs = {
            r: diagnose(con, r, memo(lambda k, r=r: analyze_run(con, r, rank=k)))
            for r in (clean, uneven)
        }
    table = text.split("## Comparison", 1)[1].split("\n\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| job\\_step\\_time\\_ms (ms) |") or rows[1].startswith(
        "| job_step_time_ms (ms) |"
    )
    cells = [c.strip() for c in rows[1].strip("|").split("|")]
    assert cells[1:3] == [sig3(jobs[clean].step.p50_ms), sig3(jobs[uneven].step.p50_ms)]
    busy = next(r for r in rows if "job" in r and "gpu" in r and "busy" in r)
    assert busy.rstrip(" |").endswith("pp")  # a share changes in points, not "-"
    assert "new: load\\_imbalance" in text or "new: load_imbalance" in text
