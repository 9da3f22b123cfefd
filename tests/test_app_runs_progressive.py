"""AppTest: the Runs page with many runs new to the server. Each run's figures are computed once
per server; runs not yet analysed are computed a few per script run (data.SUMMARY_BUDGET_S), so
the page shows at once however many runs are new, says how many are still being analysed, and
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
    return app_store(tmp_path, monkeypatch)


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
    assert not any("more run(s)" in c for c in texts(at, "caption"))
    # a rerun analyses nothing again
    analysed.clear()
    at.run()
    assert analysed == []


@pytest.mark.slow
def test_the_first_script_run_shows_the_list_before_the_figures(
    stored: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user sees first: every run listed, one run's figures, and how many are pending."""
    import streamlit as st
    from gpuscope.web import data

    monkeypatch.setattr(data, "SUMMARY_BUDGET_S", 0.0)
    monkeypatch.setattr(st, "rerun", lambda *a, **k: None)  # stop after the first script run
    at = open_app()
    assert not at.exception
    table = at.dataframe[0].value
    assert len(table) == N_RUNS
    assert int(table["step_ms"].notna().sum()) == 1  # the newest run
    assert pd_notna(table["step_ms"].iloc[0])
    (caption,) = [c for c in texts(at, "caption") if "more run(s)" in c]
    assert f"Analysing {N_RUNS - 1} more run(s)" in caption


def pd_notna(value: object) -> bool:
    import pandas as pd

    return bool(pd.notna(value))
