"""`gpuscope analyze TARGET`: a bare word that names a stored run is the run, even where a file or
folder of that name sits in the working directory; a target written as a path is the path. The
CLI says which it took."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from clitools import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
from synth import training_trace

# Two small training loops of different bytes (the subject is which one a target names, not what
# they hold): one stored under a name, one in a folder of that name in the working directory.


@pytest.mark.slow
def test_run_name_wins_over_a_folder_only_when_written_as_a_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = ["--db", str(tmp_path / "store")]
    stored = training_trace("before").write(tmp_path / "before_rank0.pt.trace.json")
    code, out, err = run_cli(capsys, "ingest", str(stored), "--name", "big", *db)
    assert code == 0, err
    code, out, _ = run_cli(capsys, "runs", "--json", *db)
    [before] = [r["run_id"] for r in json.loads(out) if r["name"] == "big"]
    # a folder `big` in the working directory, holding another trace
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big").mkdir()
    training_trace("after").write(tmp_path / "big" / "after_rank0.pt.trace.json")

    code, out, err = run_cli(capsys, "analyze", "big", "--json", *db)
    assert code == 0, err
    assert json.loads(out)["run"]["id"] == before
    assert f"'big' is the stored run {before}" in err and "./big" in err

    code, out, err = run_cli(capsys, "analyze", "./big", "--json", *db)
    assert code == 0, err
    assert json.loads(out)["run"]["id"] != before  # the folder's trace, ingested
    assert "stored run" not in err

    # a word that names no run is still a path
    (tmp_path / "other").mkdir()
    training_trace("after").write(tmp_path / "other" / "after_rank0.pt.trace.json")
    code, out, err = run_cli(capsys, "analyze", "other", "--json", *db)
    assert code == 0, err
    assert "stored run" not in err
