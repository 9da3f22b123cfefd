"""What several parts of one rank's analysis ask for is read once per rank index: the window
(steps.find_window) and the idle evidence (idle.idle_analysis); each caller gets its own copy, and
a run ingested again under the same id is read afresh."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis import idle as I
from gpuscope.analysis import steps as S
from gpuscope.analysis.idle import idle_analysis
from gpuscope.analysis.steps import find_window
from gpuscope.ingest.loader import ingest_paths
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


def trace(path: Path) -> Path:
    t = TraceBuilder()
    for n in range(3):
        t0 = 100.0 + 100.0 * n
        t.step(n, t0, 100.0)
        t.launch("volta_sgemm_128x64_nn", t0 + 10, t0 + 20, 30.0)
        t.runtime("cudaStreamSynchronize", t0 + 30, 40.0)  # the GPU waits on it: evidence
    return t.write(path)


def test_the_window_is_read_once_and_each_caller_gets_a_copy(con, tmp_path, monkeypatch) -> None:
    run_id = ingest_paths(con, [trace(tmp_path / "t.json")])[0].run_id
    calls: list[str | None] = []
    original = S._find_windows

    def counted(src, ranks, step_annotation):  # type: ignore[no-untyped-def]
        calls.append(step_annotation)
        return original(src, ranks, step_annotation)

    monkeypatch.setattr(S, "_find_windows", counted)
    a = find_window(con, run_id, 0)
    a.steps[0].gpu_end_ns = -1  # a caller changing its window
    a.steps.pop()
    b = find_window(con, run_id, 0)
    assert calls == [None]
    assert len(b.steps) == 3 and b.steps[0].gpu_end_ns != -1
    find_window(con, run_id, 0, "train_step")  # another annotation: read on its own
    assert calls == [None, "train_step"]


def test_the_idle_evidence_is_read_once_and_each_caller_gets_a_copy(
    con, tmp_path, monkeypatch
) -> None:
    run_id = ingest_paths(con, [trace(tmp_path / "t.json")])[0].run_id
    calls = []
    original = I._evidence_summary

    def counted(con, p, t):  # type: ignore[no-untyped-def]
        calls.append(p["ws"])
        return original(con, p, t)

    monkeypatch.setattr(I, "_evidence_summary", counted)
    w = find_window(con, run_id, 0)
    first = idle_analysis(con, run_id, 0, w, top_n=0)
    cls = next(c for c, frame in first.evidence.items() if not frame.empty)
    first.evidence[cls]["count"] = 99  # a caller changing its frame
    second = idle_analysis(con, run_id, 0, w, top_n=20)
    assert calls == [w.start_ns]
    assert list(second.evidence) == list(first.evidence)
    assert (second.evidence[cls]["count"] != 99).all()
