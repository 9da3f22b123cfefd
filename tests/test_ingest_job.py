"""Many nodes, one run: ``gpuscope ingest --job ID`` adds each node's ranks to the job's run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import analysis_store, run_cli
from gpuscope.capture import job_id
from gpuscope.ingest.job import job_run_id, ranges_text
from gpuscope.store import RUN_TABLES, connect
from tracegen import TraceBuilder

REPO = Path(__file__).resolve().parent.parent
DDP = REPO / "sample_traces" / "ddp"
RANK0 = DDP / "ddp_rank0.pt.trace.json.gz"
RANK1 = DDP / "ddp_rank1.pt.trace.json.gz"


def counts(db: Path | str) -> dict[str, int]:
    with connect(db) as con:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES}


def rank_file(folder: Path, rank: int, world: int, kernel: str = "volta_sgemm_128x64_nn") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    t = TraceBuilder(rank=rank, world_size=world)
    for n in range(2):
        t0 = 1000.0 + 100.0 * n
        t.step(n, t0, 100.0)
        t.launch(f"{kernel}_r{rank}", t0 + 1.0, t0 + 5.0, 10.0 * (rank + 1))
    return t.write(folder / f"rank{rank}.json")


def one_name_per_id(db: Path | str, run_id: str) -> bool:
    with connect(db) as con:
        bad = con.execute(
            "SELECT name_id FROM names WHERE run_id = ? GROUP BY name_id HAVING count(*) > 1",
            [run_id],
        ).fetchall()
    return not bad


@pytest.mark.slow
def test_nodes_fill_in_one_run_with_the_figures_of_a_folder_ingest(tmp_path: Path, capsys) -> None:
    # the job's run and the folder's in DuckDB files (clitools.analysis_store; the lake under
    # GPUSCOPE_TESTS_ON_LAKE=1): the figures a job's run gets are the subject here; the job's run
    # on the lake is the subject of the tests below (refusals, a failed first call, nodes at once)
    (tmp_path / "job").mkdir()
    (tmp_path / "folder").mkdir()
    db = str(analysis_store(tmp_path / "job"))
    code, out0, err0 = run_cli(capsys, "ingest", "--job", "4242", str(RANK0), "--db", db)
    assert code == 0, err0
    assert out0.strip() == job_run_id("4242")
    assert "job 4242: added rank(s) 0; the run holds 1 rank(s) of world size 2" in err0
    code, runs_json, _ = run_cli(capsys, "runs", "--json", "--db", db)
    assert [r["n_ranks"] for r in json.loads(runs_json)] == [1]
    code, out1, err1 = run_cli(capsys, "ingest", "--job", "4242", str(RANK1), "--db", db)
    assert code == 0, err1
    assert out1 == out0
    assert "the run holds 2 rank(s) of world size 2" in err1
    code, runs_json, _ = run_cli(capsys, "runs", "--json", "--db", db)
    (run,) = json.loads(runs_json)
    assert (run["n_ranks"], run["name"], run["tags"]) == (2, "job 4242", ["job:4242"])
    assert one_name_per_id(db, run["run_id"])
    code, job_doc, err = run_cli(capsys, "analyze", run["run_id"], "--json", "--db", db)
    assert code == 0, err
    # the same two files as one folder: the same figures for every rank
    folder_db = analysis_store(tmp_path / "folder")
    code, folder_doc, err = run_cli(capsys, "analyze", str(DDP), "--json", "--db", str(folder_db))
    assert code == 0, err
    job, folder = json.loads(job_doc), json.loads(folder_doc)
    assert job["ranks"] == folder["ranks"]
    assert (job["gpu_busy_pct"], job["kernels"]) == (folder["gpu_busy_pct"], folder["kernels"])
    assert run["n_events"] == sum(counts(folder_db)[t] for t in ("events",))


@pytest.mark.slow
def test_a_rank_stored_twice_is_refused_in_one_line_and_changes_nothing(
    tmp_path: Path, capsys
) -> None:
    # small rank files of a world of two: the refusal is the subject, not what the ranks hold
    db = tmp_path / "s"
    rank0, rank1 = (rank_file(tmp_path / "node1", r, 2) for r in (0, 1))
    assert run_cli(capsys, "ingest", "--job", "j1", str(rank0), "--db", str(db))[0] == 0
    before = counts(db)
    other = tmp_path / "copy" / "node2_rank0.json"  # the same rank from another path
    other.parent.mkdir()
    other.write_bytes(rank0.read_bytes())
    for path in (rank0, other):
        code, out, err = run_cli(capsys, "ingest", "--job", "j1", str(path), "--db", str(db))
        assert (code, out) == (2, "")
        assert err.strip().splitlines() == [
            f"gpuscope: {path}: rank 0 of job j1 is stored already (from {rank0}); nothing was stored"
        ]
        assert counts(db) == before
    # a call holding a new rank and a stored one stores neither
    code, _, err = run_cli(capsys, "ingest", "--job", "j1", str(rank1), str(other), "--db", str(db))
    assert code == 2 and "rank 0 of job j1 is stored already" in err
    assert counts(db) == before


@pytest.mark.slow
def test_a_first_call_that_fails_leaves_no_run(tmp_path: Path, capsys) -> None:
    db = tmp_path / "s"
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": ')
    code, _, err = run_cli(capsys, "ingest", "--job", "j2", str(bad), "--db", str(db))
    assert code == 2 and err.startswith(f"gpuscope: {bad}: ")
    assert counts(db) == dict.fromkeys(RUN_TABLES, 0)


@pytest.mark.slow
def test_job_without_an_id_takes_the_launchers(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    # any rank and a DuckDB file for the store (clitools.analysis_store; the lake under
    # GPUSCOPE_TESTS_ON_LAKE=1): where the job's id comes from is the subject
    db = str(analysis_store(tmp_path))
    rank0 = rank_file(tmp_path / "node", 0, 2)
    code, _, err = run_cli(capsys, "ingest", "--job", "--db", db, str(rank0))
    assert code == 2
    assert "neither $TORCHELASTIC_RUN_ID nor $SLURM_JOB_ID is set" in err
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    code, out, err = run_cli(capsys, "ingest", str(rank0), "--db", db, "--job")
    assert code == 0, err
    assert out.strip() == job_run_id("777")


def test_the_job_id_comes_from_torchrun_then_slurm() -> None:
    assert job_id({"TORCHELASTIC_RUN_ID": "abc", "SLURM_JOB_ID": "9"}) == "abc"
    assert job_id({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "9"}) == "9"  # torchrun's default
    assert job_id({"SLURM_JOB_ID": " 9 "}) == "9"
    assert job_id({}) is None


def test_rank_ranges_are_written_compactly() -> None:
    assert ranges_text([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert ranges_text([3]) == "3"


def _gpuscope(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCOPE_", "AWS_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "gpuscope", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**base, **(env or {})},
    )


def _nodes_at_once(tmp_path: Path, store: list[str], env: dict[str, str] | None = None) -> str:
    """Four processes, one per 'node', each ingesting its own two ranks of job 'big' at once."""
    folders = []
    for node in range(4):
        f = tmp_path / f"node{node}"
        for local in range(2):
            rank_file(f, 2 * node + local, 8)
        folders.append(f)
    procs = [_gpuscope("ingest", "--job", "big", str(f), *store, env=env) for f in folders]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert out.strip() == job_run_id("big")
    return job_run_id("big")


@pytest.mark.slow
def test_nodes_reporting_at_once_fill_one_run_on_a_local_store(tmp_path: Path) -> None:
    db = tmp_path / "s"
    run_id = _nodes_at_once(tmp_path, ["--db", str(db)])
    with connect(db) as con:
        runs = con.execute("SELECT n_ranks, n_events FROM runs").fetchall()
        ranks = [r[0] for r in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
        n_events = con.execute("SELECT count(*) FROM events").fetchone()[0]
        summaries = con.execute(
            "SELECT DISTINCT rank, part FROM rank_summaries ORDER BY ALL"
        ).fetchall()
    assert runs == [(8, n_events)]
    assert ranks == list(range(8))
    # each node's ranks get their cross-rank part in the node's own ingest (issue 20); the run's
    # analyze document (report_part) at most once, under rank 0: a node's is not stored when
    # another node's ranks landed while it was computed
    assert [s for s in summaries if s[1] != "report"] == [(r, "cross_rank") for r in range(8)]
    assert [s for s in summaries if s[1] == "report"] in ([], [(0, "report")])
    assert one_name_per_id(db, run_id)


@pytest.mark.slow
def test_nodes_reporting_at_once_fill_one_run_on_the_team_store(
    tmp_path: Path, team_store, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # the store exists before the job (made once, as a team's admin does: a fresh catalog that
    # several processes create at the same moment is DuckLake's own race, not this test's). The
    # nodes are processes of their own (the point); the admin's call and the reads after them run
    # in this process (clitools.run_cli; team_store set the AWS_* variables for it)
    code, _, err = run_cli(capsys, "runs", *team_store.args())
    assert code == 0, err
    run_id = _nodes_at_once(tmp_path, team_store.args(), env=team_store.s3.env())
    code, out, err = run_cli(capsys, "runs", "--json", *team_store.args())
    assert code == 0, err
    (run,) = json.loads(out)
    assert (run["run_id"], run["n_ranks"]) == (run_id, 8)
    code, out, err = run_cli(capsys, "analyze", run_id, "--json", *team_store.args())
    assert code == 0, err
    doc = json.loads(out)
    # each rank r ran one kernel of 10·(r+1) µs per 100 µs step: its own name, its own busy %
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    names = {k["name"] for k in doc["kernels"]["top"]}
    assert names == {"volta_sgemm_128x64_nn_r0"}
    for k, v in team_store.s3.env().items():
        monkeypatch.setenv(k, v)
    with connect(team_store.url, data_path=team_store.data_path) as con:
        clash = con.execute(
            "SELECT name_id FROM names WHERE run_id = ? GROUP BY name_id HAVING count(*) > 1",
            [run_id],
        ).fetchall()
        per_rank = con.execute(
            "SELECT count(DISTINCT rank) FROM rank_summaries WHERE run_id = ?", [run_id]
        ).fetchone()
    assert clash == []
    assert per_rank == (8,)  # every rank's cross-rank part, stored by its node's ingest
