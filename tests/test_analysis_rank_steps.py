"""Many ranks on one page (issue 20, part 4): the rank × step matrix (step time, wait) read from
the report (no events), ranks grouped by node, the spread across ranks, outliers; a synthetic
256-rank run built from the real DDP pair gives one heatmap, never a sawtooth per rank."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
from gpuscope.analysis.rank_row import RankRow
from gpuscope.analysis.ranks import RankLine, rank_step_matrix, step_spread

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def lines_of(rows: list[dict[str, Any]]) -> list[RankLine]:
    """The typed lines of rank rows written as ``analyze --json`` writes them (and the
    ``rank_row`` part stores them; keys left out read as None)."""
    return [RankLine.of(RankRow.from_stored(r)) for r in rows]


def test_matrix_spread_and_outlier_by_hand():
    """Four ranks, two steps; rank 3's step 8 is 20 ms against 10 ms on the others (median 10,
    MAD 0: an outlier), rank 2's 10.2 ms is within 5 % (not one)."""
    rows = [
        {"rank": r, "step_ms_by_step": {"7": 10.0, "8": s8}, "wait_ms_by_step": {"7": w, "8": 0.0}}
        for r, s8, w in ((0, 10.0, 4.0), (1, 10.0, 0.0), (2, 10.2, 1.0), (3, 20.0, 0.5))
    ]
    m = rank_step_matrix(lines_of(rows), {0: "b", 1: "b", 2: "a", 3: "a"})
    assert list(m["rank"].drop_duplicates()) == [2, 3, 0, 1]  # grouped by node, then rank
    assert m.loc[m["outlier"], ["rank", "step"]].values.tolist() == [[3, 8]]
    assert m.set_index(["rank", "step"]).loc[(0, 7), "wait_ms"] == 4.0
    sp = step_spread(m).set_index("step")
    assert sp.loc[8, "max_ms"] == 20.0 and sp.loc[8, "slowest_rank"] == 3
    assert sp.loc[8, "p50_ms"] == pytest.approx(10.1) and sp.loc[8, "outliers"] == 1
    assert sp.loc[7, "wait_p50_ms"] == pytest.approx(0.75) and sp.loc[7, "outliers"] == 0
    assert rank_step_matrix([]).empty and step_spread(rank_step_matrix([])).empty


def test_heatmap_click_target():
    from gpuscope.web.views import cell_target

    sel = {"selection": {"points": [{"x": "#8", "y": "rank 3", "customdata": [3, 8]}]}}
    assert cell_target(sel) == (3, 8)
    assert cell_target({"selection": {"points": [{"x": "#12", "y": "node03 · rank 17"}]}}) == (
        17,
        12,
    )
    assert cell_target({"selection": {"points": []}}) is None
    assert cell_target(None) is None


@pytest.fixture(scope="module")
def ddp_rows() -> list[RankRow]:
    """The real DDP pair's rank rows (``RunReport.ranks``)."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    con = connect(":memory:")
    try:
        [r] = ingest_paths(con, [SAMPLES / "ddp"])
        return analyze_run(con, r.run_id).ranks
    finally:
        con.close()


def many_ranks(pair: list[RankRow], n: int, slow: tuple[int, int]) -> list[RankLine]:
    """``n`` ranks made from the DDP pair's two rows (rank r copies row r % 2), with one step of
    one rank made twice as long (``slow`` = (rank, step))."""
    out = []
    for r in range(n):
        by_step = dict(pair[r % 2].step_ms_by_step)
        if r == slow[0]:
            by_step[slow[1]] *= 2
        out.append(RankLine.of(dataclasses.replace(pair[r % 2], rank=r, step_ms_by_step=by_step)))
    return out


@pytest.mark.slow
def test_256_ranks_from_the_ddp_pair_one_heatmap(ddp_rows):
    from gpuscope.web import figures

    steps = list(ddp_rows[0].step_ms_by_step)
    assert steps == [241, 242, 243, 244, 245]
    # the real pair: rank 0 waits in every step, rank 1 never
    assert all(v > 15 for v in ddp_rows[0].wait_ms_by_step.values())
    assert all(v == 0 for v in ddp_rows[1].wait_ms_by_step.values())
    lines = many_ranks(ddp_rows, 256, (137, 243))
    nodes = {r: f"node{r // 8:02d}" for r in range(256)}
    m = rank_step_matrix(lines, nodes)
    assert len(m) == 256 * 5 and m["rank"].nunique() == 256
    assert m.loc[m["outlier"], ["rank", "step"]].values.tolist() == [[137, 243]]
    sp = step_spread(m).set_index("step")
    assert sp.loc[243, "slowest_rank"] == 137 and (sp["ranks"] == 256).all()
    fig = figures.rank_step_heatmap(m, "step_ms")
    kinds = [t.type for t in fig.data]
    # one heatmap, its cells as click targets, the outlier ring: no trace per rank
    assert kinds == ["heatmap", "scatter", "scatter"] and len(fig.data[1].x) == 256 * 5
    assert fig.data[1].customdata[5 * 137 + 2][:2] == [137, 243]  # rank, step (then the value)
    heat = fig.data[0]
    assert len(heat.y) == 256 and heat.y[0] == "node00 · rank 0" and tuple(heat.x)[:1] == ("#241",)
    assert heat.customdata[137][2] == [137, 243]
    wait = figures.rank_step_heatmap(m, "wait_ms").data[0]
    assert wait.z[0][0] == pytest.approx(ddp_rows[0].wait_ms_by_step[241])
    assert wait.z[1][0] == 0.0
