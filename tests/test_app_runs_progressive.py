"""AppTest: the Runs page with many runs new to the server. Each run's figures are computed once
per server; the list is drawn first with the figures already known, the runs not yet analysed are
computed after it, a few per script run (data.SUMMARY_BUDGET_S), so the page shows at once however
many runs are new and however slow their analysis, says how many are still being analysed, and
reruns until every row has its figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app, texts
from synth import training_trace

N_RUNS = 4


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return app_store(tmp_path, monkeypatch, lake=False)


@pytest.fixture
def stored(db: Path, tmp_path: Path) -> list[str]:
    paths = []
    for i in range(N_RUNS):
        t = training_trace("after")
        t.extra_meta.update({"hostname": f"h{i}"})  # bytes of its own: a run of its own
        paths.append(t.write(tmp_path / f"h{i}.pt.trace.json"))
    return ingest(db, *paths)


@pytest.mark.slow
def test_many_new_runs_fill_in_over_reruns_each_analysed_once(
    stored: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuscope.web import data

    monkeypatch.setattr(data, "SUMMARY_BUDGET_S", 0.0)  # one new run per script run
    analysed: list[str] = []
    real = data.summary

    def counted(run_id: str) -> object:
        analysed.append(run_id)
        return real(run_id)

    monkeypatch.setattr(data, "summary", counted)
    at = open_app()
    assert not at.exception
    # every row has its figures in the end, each run analysed once, newest first
    table = at.dataframe[0].value
    assert table["step_ms"].notna().all() and table["busy_pct"].notna().all()
    assert sorted(analysed) == sorted(stored)
    assert analysed == list(table["run_id"])
    assert not any("run(s): their figures" in c for c in texts(at, "caption"))
    # a rerun analyses nothing again
    analysed.clear()
    at.run()
    assert analysed == []


@pytest.mark.slow
def test_the_first_script_run_shows_the_list_before_the_figures(
    stored: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user sees first: every run listed, no figure yet, and how many are pending; the one
    run analysed in that script run is analysed after the list is drawn."""
    import streamlit as st
    from gpuscope.web import data

    monkeypatch.setattr(data, "SUMMARY_BUDGET_S", 0.0)
    monkeypatch.setattr(st, "rerun", lambda *a, **k: None)  # stop after the first script run
    analysed: list[str] = []
    real = data.summary
    monkeypatch.setattr(data, "summary", lambda rid: analysed.append(rid) or real(rid))
    at = open_app()
    assert not at.exception
    table = at.dataframe[0].value
    assert len(table) == N_RUNS
    assert int(table["step_ms"].notna().sum()) == 0  # drawn before any analysis
    assert analysed == [table["run_id"].iloc[0]]  # then the newest run was analysed
    (caption,) = [c for c in texts(at, "caption") if "run(s): their figures" in c]
    assert f"Analysing {N_RUNS} run(s)" in caption
    at.run()  # the next script run shows it, and analyses the next one
    table = at.dataframe[0].value
    assert pd_notna(table["step_ms"].iloc[0]) and int(table["step_ms"].notna().sum()) == 1
    (caption,) = [c for c in texts(at, "caption") if "run(s): their figures" in c]
    assert f"Analysing {N_RUNS - 1} run(s)" in caption


@pytest.mark.slow
def test_a_slow_analysis_never_holds_back_the_list(
    stored: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under an analysis that takes seconds a run (a big run, a loaded machine: the Runs page stayed
    blank for 30 s, issue 46), the list with every run's name is on the page before the first
    analysis starts, the figure columns empty ("—"), the runs' names and ids read as they are."""
    import time

    import streamlit as st
    from gpuscope.web import data

    order: list[str] = []
    real_frame, real_summary = st.dataframe, data.summary

    def frame(df: object, *a: object, **k: object) -> object:
        order.append("list")
        assert k.get("placeholder") == "—"  # how an empty figure reads
        return real_frame(df, *a, **k)

    def slow(rid: str) -> object:
        order.append("analysis")
        time.sleep(1.0)
        return real_summary(rid)

    monkeypatch.setattr(st, "dataframe", frame)
    monkeypatch.setattr(data, "summary", slow)
    monkeypatch.setattr(st, "rerun", lambda *a, **k: None)  # the first script run only
    at = open_app(timeout=120)
    assert not at.exception
    assert order[:2] == ["list", "analysis"], order
    table = at.dataframe[0].value
    assert sorted(table["run_id"]) == sorted(stored) and table["name"].notna().all()
    assert table[["step_ms", "busy_pct", "wait_pct", "mfu_pct"]].isna().all().all()
    assert all(str(t) == "float64" for t in table[["step_ms", "busy_pct", "mfu_pct"]].dtypes)


def pd_notna(value: object) -> bool:
    import pandas as pd

    return bool(pd.notna(value))
