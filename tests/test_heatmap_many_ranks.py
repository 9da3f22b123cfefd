"""The rank × step heatmap of a many-rank run read at a glance (issue 46): rows labelled (a subset
above 64 ranks, the pace-setter's always, named and framed), a colour scale that the profiler's
drain step does not set (clipped at a high percentile of the other cells, the drain's column
greyed and named), a hover with the value on every cell (ringed ones too), and the rank table
sorted by the wait each rank causes. A hand-made 128-rank matrix whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from gpuscope.analysis.collectives import Straggler
from gpuscope.analysis.ranks import RankLine, RankOverview, rank_step_matrix
from gpuscope.web import figures, views

N, SLOW, STEPS, DRAIN = 128, 77, (11, 12, 13, 14, 15), 15


def lines() -> list[RankLine]:
    """128 ranks: every step 17 ms (+0.1 ms per step number past 11, so the cells differ) and
    the last (the profiler's drain) 84 ms, waiting 20 ms a step; rank 77 steps 25 ms, waits
    none, and drains in 22 ms."""
    out = []
    for r in range(N):
        slow = r == SLOW
        step = {s: (25.0 if slow else 17.0 + 0.1 * (s - 11)) for s in STEPS}
        step[DRAIN] = 22.0 if slow else 84.0
        out.append(
            RankLine(
                rank=r, step_p50_ms=step[13], step_p90_ms=None, step_max_ms=step[DRAIN],
                gpu_busy_pct=90.0, comm_wait_pct=0.0 if slow else 60.0,
                comm_only_us_per_step=None, idle_us_per_step=1000.0 + r,
                step_ms_by_step=step, wait_ms_by_step={s: 0.0 if slow else 20.0 for s in STEPS},
            )
        )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def matrix() -> pd.DataFrame:
    return rank_step_matrix(lines())


def test_the_drain_step_is_the_last_one_far_above_a_ranks_median(matrix: pd.DataFrame) -> None:
    assert figures.drain_step(matrix) == DRAIN
    # no drain: the last step within 1.5x of the median (rank 77 alone: 22 < 1.5 x 25)
    assert figures.drain_step(matrix[matrix["rank"] == SLOW]) is None
    assert figures.drain_step(matrix[matrix["step"] <= 12]) is None  # under 3 steps: no rule


def test_the_colour_scale_ends_at_the_99th_percentile_of_the_cells_outside_the_drain(
    matrix: pd.DataFrame,
) -> None:
    heat = figures.rank_step_heatmap(matrix, "step_ms", pace_setter=SLOW).data[0]
    kept = matrix.loc[matrix["step"] != DRAIN, "step_ms"].to_numpy()
    assert heat.zmax == pytest.approx(np.percentile(kept, 99.0))
    assert heat.zmax < 25.0  # the slow rank's 4 cells (0.8 %) take the top colour ...
    assert heat.zmin == pytest.approx(17.0)  # ... and the 84 ms drain sets nothing
    wait = figures.rank_step_heatmap(matrix, "wait_ms", pace_setter=SLOW).data[0]
    assert (wait.zmin, wait.zmax) == (0.0, 20.0)
    assert wait.z[SLOW][0] == 0.0 and wait.z[0][0] == 20.0  # the pace-setter: the light row
    fig = figures.rank_step_heatmap(matrix, "step_ms")
    [drain] = [s for s in fig.layout.shapes if s.yref == "paper"]  # the drain column greyed
    assert (drain.x0, drain.x1) == (3.5, 4.5) and drain.layer == "above"
    assert [a.text for a in fig.layout.annotations] == ["profiler drain"]


def test_rows_labelled_and_the_pace_setter_named_and_framed(matrix: pd.DataFrame) -> None:
    fig = figures.rank_step_heatmap(matrix, "wait_ms", pace_setter=SLOW)
    y = fig.layout.yaxis
    assert 30 <= len(y.tickvals) <= 40  # every 4th of 128 rows, the last and the pace-setter's
    assert "rank 77" in y.tickvals and "rank 0" in y.tickvals and "rank 127" in y.tickvals
    [named] = [t for t in y.ticktext if "pace-setter" in t]
    assert named == "<b>rank 77 ◀ pace-setter</b>"
    [frame] = [s for s in fig.layout.shapes if s.yref == "y"]
    assert (frame.y0, frame.y1) == (SLOW - 0.5, SLOW + 0.5)  # row 77 (rows in rank order)
    small = rank_step_matrix(lines()[:8])
    assert list(figures.rank_step_heatmap(small).layout.yaxis.tickvals) == [
        f"rank {r}" for r in range(8)
    ]  # a few ranks: every row


def test_every_ringed_cell_hovers_its_value(matrix: pd.DataFrame) -> None:
    fig = figures.rank_step_heatmap(matrix, "step_ms", pace_setter=SLOW)
    _, cells, rings = fig.data
    assert rings.hoverinfo == "skip"  # the ring never hides the cell's hover
    assert len(rings.x) == 4  # rank 77's four steps (not the drain: 22 ms < its 84 ms median)
    ringed = [c for c in cells.customdata if "outlier" in c[3]]
    assert [(c[0], c[1], c[2]) for c in ringed] == [(SLOW, s, 25.0) for s in STEPS[:4]]
    assert (
        "%{customdata[2]:.2f}" in cells.hovertemplate and "%{customdata[3]}" in cells.hovertemplate
    )
    drained = [c for c in cells.customdata if c[1] == DRAIN]
    assert len(drained) == N and all("drain" in c[3] for c in drained)


def test_the_rank_table_opens_sorted_by_the_wait_each_rank_causes() -> None:
    ls = lines()
    caused = {SLOW: 127 * 20 * 5 * 10**6, 3: 5 * 10**6}  # ns over 5 steps
    sg = Straggler(
        rank=SLOW, caused_wait_ns=caused[SLOW], per_rank_caused_ns=caused, last_arrivals=5,
        instances=5, by_phase_ns={}, by_step_ns={}, waiting_rank=0, waiting_ns=100 * 10**6,
        n_steps=5,
    )  # fmt: skip
    t = views.rank_table(RankOverview(0, tuple(ls), sg))
    assert list(t["rank"][:4]) == [SLOW, 3, 0, 1]  # by caused wait, then rank
    assert t["caused wait / step"][0] == pytest.approx(127 * 20.0)  # ms per step
    assert t["caused wait / step"][1] == pytest.approx(1.0)
    assert t["idle / step"][0] == pytest.approx(1.077)  # ms (µs / 1000), a number: sorts as one
    assert t["p90"].isna().all()  # not measured: empty, never "None"
    assert all(pd.api.types.is_numeric_dtype(t[c]) for c in t.columns)


def test_a_click_reads_the_cell_even_without_customdata() -> None:
    sel = {"selection": {"points": [{"x": "#15", "y": "node1 · rank 77"}]}}
    assert views.cell_target(sel) == (77, 15)
