"""Issue 47: in a multi-node ingest (``gpuscope ingest --job ID``), a later node's ``--name`` does
not rename the job's run: the first name given stands, the later node's ranks are stored all the
same, and it is told so in one note."""

from __future__ import annotations

import json
from pathlib import Path

from clitools import run_cli
from gpuscope.ingest.job import job_run_id, job_run_name
from test_ingest_job import rank_file


def _run(capsys, db: str) -> dict:  # type: ignore[no-untyped-def]
    code, out, err = run_cli(capsys, "runs", "--json", "--db", db)
    assert code == 0, err
    (run,) = json.loads(out)
    return run


def test_a_later_nodes_name_does_not_rename_the_jobs_run(tmp_path: Path, capsys) -> None:
    db = str(tmp_path / "s")
    files = [rank_file(tmp_path / f"node{r}", r, 3) for r in range(3)]
    code, _, err = run_cli(
        capsys, "ingest", "--job", "77", str(files[0]), "--name", "llama-a", "--db", db
    )
    assert code == 0 and "not applied" not in err, err
    code, out, err = run_cli(
        capsys, "ingest", "--job", "77", str(files[1]), "--name", "evil", "--db", db
    )
    assert code == 0, err
    assert out.strip() == job_run_id("77")
    (note,) = [line for line in err.splitlines() if "not applied" in line]
    assert note == (
        f"gpuscope: note: --name 'evil' not applied: job 77's run keeps the name it was given "
        f"first, 'llama-a' (gpuscope runs --rename {job_run_id('77')} NAME renames it)"
    )
    run = _run(capsys, db)
    assert (run["name"], run["n_ranks"]) == ("llama-a", 2)  # the ranks are stored all the same
    # a rename since stands too; the same name again is no note
    code, _, err = run_cli(capsys, "runs", "--rename", run["run_id"], "llama-final", "--db", db)
    assert code == 0, err
    code, _, err = run_cli(
        capsys, "ingest", "--job", "77", str(files[2]), "--name", "llama-a", "--db", db
    )
    assert code == 0, err
    assert (_run(capsys, db)["name"], _run(capsys, db)["n_ranks"]) == ("llama-final", 3)


def test_a_job_run_under_its_default_name_takes_the_first_name_given(
    tmp_path: Path, capsys
) -> None:
    db = str(tmp_path / "s")
    files = [rank_file(tmp_path / f"node{r}", r, 3) for r in range(3)]
    assert run_cli(capsys, "ingest", "--job", "9", str(files[0]), "--db", db)[0] == 0
    assert _run(capsys, db)["name"] == "job 9"
    code, _, err = run_cli(
        capsys, "ingest", "--job", "9", str(files[1]), "--name", "bert", "--db", db
    )
    assert code == 0 and "not applied" not in err, err
    assert _run(capsys, db)["name"] == "bert"
    code, _, err = run_cli(
        capsys, "ingest", "--job", "9", str(files[2]), "--name", "gpt", "--db", db
    )
    assert code == 0 and "--name 'gpt' not applied" in err
    assert _run(capsys, db)["name"] == "bert"


def test_job_run_name_by_hand() -> None:
    assert job_run_name("1", None, None) == "job 1"
    assert job_run_name("1", None, "a") == "a"
    assert job_run_name("1", "job 1", "a") == "a"
    assert job_run_name("1", "job 1", None) == "job 1"
    assert job_run_name("1", "a", "b") == "a"
    assert job_run_name("1", "a", None) == "a"
