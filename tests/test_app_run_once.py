"""AppTest: the Run page analyses each (run, rank) once (app/web/data.py's facade per run, rank and
store generation): the cards, the fixes, the critical path and the job's verdict all read the
same analysis, and a second visit computes nothing again (nor builds the rank heatmap's figure
again: views._heatmap_figure, shared by every session)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app
from gpuscope.analysis import critical_path as CP
from gpuscope.analysis import report as R
from gpuscope.web import figures

REPO = Path(__file__).resolve().parent.parent
RUN = "screens/run.py"


@pytest.mark.slow
def test_the_run_page_analyses_each_rank_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import streamlit as st

    db = app_store(tmp_path, monkeypatch)
    (run_id,) = ingest(db, REPO / "sample_traces" / "ddp")  # two ranks: the job reads both
    made: Counter[tuple[str, int]] = Counter()
    paths: Counter[int] = Counter()
    init, critical_path = R.RunAnalysis.__init__, R.critical_path

    def counted_init(self: R.RunAnalysis, con: Any, rid: str, rank: Any = None, *a: Any) -> None:
        init(self, con, rid, rank, *a)
        made[(rid, self.rank)] += 1

    def counted_path(con: Any, rid: str, rank: int, *a: Any, **k: Any) -> Any:
        paths[rank] += 1
        return critical_path(con, rid, rank, *a, **k)

    heatmaps: Counter[tuple[str, int | None]] = Counter()
    heatmap = figures.rank_step_heatmap

    def counted_heatmap(m: Any, value: str = "step_ms", **k: Any) -> Any:
        heatmaps[(value, k.get("pace_setter"))] += 1
        return heatmap(m, value, **k)

    monkeypatch.setattr(figures, "rank_step_heatmap", counted_heatmap)
    monkeypatch.setattr(R.RunAnalysis, "__init__", counted_init)
    monkeypatch.setattr(R, "critical_path", counted_path)
    assert CP.critical_path is not counted_path  # the facade's own name is the one counted
    st.cache_resource.clear()
    st.cache_data.clear()
    for rank in (0, 1, 0):  # rank 0, the other rank, rank 0 again
        at = open_app(RUN, {"run": run_id, "rank": rank})
        assert not at.exception, at.exception
    assert made and all(n == 1 for n in made.values()), made
    assert set(made) <= {(run_id, 0), (run_id, 1)}
    assert paths and all(n == 1 for n in paths.values()), paths
    # the ranks' heatmap is the same job's for every rank shown: one figure per rank, and none
    # built again on the second visit of rank 0
    assert heatmaps and sum(heatmaps.values()) == 2, heatmaps
