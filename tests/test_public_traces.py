"""benchmarks/public_traces.py: every trace file of a folder ingested and analysed in its own
store, one line each; a clear one-line refusal passes, anything else fails the run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tracegen import TraceBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import public_traces as PT

pytestmark = pytest.mark.slow  # real gpuscope processes


def test_a_folder_of_traces_is_read_file_by_file(tmp_path: Path, capsys, monkeypatch) -> None:
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 100)
    t.launch("k", 10, 20, 30)
    t.launch("k", 110, 120, 30)
    t.write(tmp_path / "good.json")
    (tmp_path / "nope.json").write_text('{"schema": 1}')
    (tmp_path / "notes.txt").write_text("not read")
    monkeypatch.setattr(sys, "argv", ["public_traces.py", str(tmp_path)])
    assert PT.main() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "2 traces, 0 crashed or failed"
    good = next(line for line in out if "good.json" in line)
    assert good.startswith("ok ") and "step 0.1 ms" in good
    nope = next(line for line in out if "nope.json" in line)
    assert nope.startswith("ok ") and "not a trace" in nope


def test_a_failure_that_is_not_one_clear_line_fails_the_run(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "t.json").write_text("{}")
    monkeypatch.setattr(
        PT, "one", lambda p, g: {"file": str(p), "ingest_exit": 1, "error": "Traceback"}
    )
    monkeypatch.setattr(sys, "argv", ["public_traces.py", str(tmp_path)])
    assert PT.main() == 1
