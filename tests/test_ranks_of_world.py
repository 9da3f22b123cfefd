"""A job whose nodes still report: its run says "n of world-size ranks" (issue 20) on the Run page,
in the Runs list and in ``analyze`` (text and JSON), and fills in as ``ingest --job`` adds ranks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from clitools import run_cli
from gpuscope.analysis.ranks import ranks_label, ranks_of_world

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, open_app, texts

REPO = Path(__file__).resolve().parent.parent
DDP = REPO / "sample_traces" / "ddp"
RUN = "screens/run.py"


def test_the_words_for_a_run_of_fewer_ranks_than_its_world() -> None:
    assert ranks_of_world(1, 2) == "1 of 2"
    assert ranks_of_world(2, 2) == "2"
    assert ranks_of_world(2, None) == "2"
    assert ranks_of_world(4, 2) == "4"  # more than the traces say: no "of"
    assert ranks_label(1, 2) == "1 of 2 ranks"
    assert ranks_label(1, None) == "1 rank"
    assert ranks_label(1, 1) == "1 rank"
    assert ranks_label(3, 3) == "3 ranks"
    assert ranks_label(0, 1) == "0 of 1 rank"


@pytest.mark.slow
def test_a_job_says_n_of_world_size_ranks_until_every_node_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(app_store(tmp_path, monkeypatch))

    def seen() -> tuple[dict, str, str, str]:
        code, out, err = run_cli(capsys, "analyze", run_id, "--json", "--db", db)
        assert code == 0, err
        code, text, err = run_cli(capsys, "analyze", run_id, "--db", db)
        assert code == 0, err
        at = open_app()
        assert not at.exception
        table = at.dataframe[0].value
        listed = str(table.loc[table["run_id"] == run_id, "ranks"].iloc[0])
        at = open_app(RUN, {"run": run_id})
        assert not at.exception
        caption = next(c for c in texts(at, "caption") if "events" in c)
        header = next(line for line in text.splitlines() if line.startswith(f"run {run_id}"))
        return json.loads(out)["run"], header, listed, caption

    code, run_id, err = run_cli(
        capsys, "ingest", "--job", "77", str(DDP / "ddp_rank0.pt.trace.json.gz"), "--db", db
    )
    assert code == 0, err
    run_id = run_id.strip()
    run, header, listed, caption = seen()
    assert (run["world_size"], run["ranks_of_world"], run["ranks"]) == (2, "1 of 2", [0])
    assert "(1 of 2 ranks reported)" in header
    assert listed == "1 of 2"
    assert "1 of 2 ranks" in caption

    code, _, err = run_cli(
        capsys, "ingest", "--job", "77", str(DDP / "ddp_rank1.pt.trace.json.gz"), "--db", db
    )
    assert code == 0, err
    run, header, listed, caption = seen()
    assert (run["world_size"], run["ranks_of_world"], run["ranks"]) == (2, "2", [0, 1])
    assert "reported" not in header
    assert listed == "2"
    assert "2 ranks" in caption and " of 2 ranks" not in caption
