"""What the busy-over-time plot shows (analysis.sawtooth), the NVML overlay and series
(analysis.nvml_run) and the run pages' reads (analysis.run_views), on hand-built traces with
answers computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gpuscope.analysis import nvml_run, run_views, sawtooth
from gpuscope.analysis.busy import busy_series
from gpuscope.ingest.nvml import ingest_series
from gpuscope.store import transaction
from test_analysis_busy import hand_trace, ingest
from tracegen import BASE_NS

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

# hand_trace (device 0, µs): gemm 10..30 (stream 7), relu 20..40 (stream 8), a memcpy 50..55, a
# memset 60..65, tail 90..110; a sync event and a GPU annotation that are not activity. The window
# is 0..110 µs, one step.


@pytest.fixture
def hand(con, tmp_path: Path) -> str:
    return ingest(con, hand_trace(), tmp_path / "t.json")


def test_window_view_is_the_window_and_its_steps(con, hand: str) -> None:
    w = sawtooth.window_view(con, hand, 0)
    assert (w.start_ns, w.end_ns, w.source) == (0, 110_000, "ProfilerStep")
    assert w.steps.to_dict("records") == [
        {"number": 1, "start_ns": 0, "end_ns": 110_000, "duration_ns": 110_000}
    ]
    assert (w.window.start_ns, w.window.end_ns) == (0, 110_000)


def test_activities_in_a_range_are_counted_clipped_and_categorised(con, hand: str) -> None:
    # [25, 62) µs: gemm, relu, the memcpy and the memset overlap it; the tail does not
    assert sawtooth.activity_count(con, hand, 0, 0, 25_000, 62_000) == 4
    assert sawtooth.activity_count(con, hand, 0, None, 25_000, 62_000) == 4
    assert sawtooth.activity_count(con, hand, 0, 1, 25_000, 62_000) == 0  # no such device
    assert sawtooth.activity_count(con, hand, 0, 0, 0, 110_000) == 5  # sync/annotation: not busy
    k = sawtooth.activities_in_range(con, hand, 0, 0, 25_000, 62_000, 10)
    assert list(zip(k["start_ns"], k["end_ns"], k["name"], k["category"], strict=True)) == [
        (25_000, 30_000, "gemm", "gemm"),
        (25_000, 40_000, "relu", "elementwise"),
        (50_000, 55_000, "Memcpy HtoD (Pinned -> Device)", "copy_memset"),
        (60_000, 62_000, "Memset (Device)", "copy_memset"),
    ]
    first = sawtooth.activities_in_range(con, hand, 0, 0, 25_000, 62_000, 2)
    assert list(first["name"]) == ["gemm", "relu"]  # by start, then end


def test_busy_envelope_folds_sub_buckets(con, hand: str) -> None:
    # one bucket of eleven 10 µs sub-buckets: busy 0,10,10,10,0,5,5,0,0,10,10 µs
    env = sawtooth.busy_envelope(con, hand, 0, 0, 110_000, 1, 11)
    assert env.to_dict("records") == [
        {"start_ns": 0, "end_ns": 110_000, "busy_frac": 60 / 110, "busy_min": 0.0, "busy_max": 1.0}
    ]
    # one sub-bucket each: the envelope is the series itself
    env = sawtooth.busy_envelope(con, hand, 0, 0, 110_000, 11, 1)
    series = busy_series(con, hand, 0, 0, 110_000, 11)
    np.testing.assert_allclose(env["busy_min"], series["busy_frac"])
    np.testing.assert_allclose(env["busy_max"], series["busy_frac"])


def _busy(edges: list[int], frac: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"start_ns": edges[:-1], "end_ns": edges[1:], "busy_frac": frac})


def test_fold_envelope_weights_by_length() -> None:
    folded = sawtooth.fold_envelope(_busy([0, 25, 50, 75, 100], [1.0, 0.0, 0.5, 0.5]), 2)
    assert folded.to_dict("records") == [
        {"start_ns": 0, "end_ns": 50, "busy_frac": 0.5, "busy_min": 0.0, "busy_max": 1.0},
        {"start_ns": 50, "end_ns": 100, "busy_frac": 0.5, "busy_min": 0.5, "busy_max": 0.5},
    ]
    # unequal sub-buckets: 10 ns fully busy and 30 ns idle is 25 % busy, not the mean 50 %
    assert sawtooth.fold_envelope(_busy([0, 10, 40], [1.0, 0.0]), 1)["busy_frac"][0] == 0.25
    # rows that do not fold into n equal groups stay as they are
    odd = sawtooth.fold_envelope(_busy([0, 1, 2, 3], [1.0, 0.0, 0.5]), 2)
    assert odd["busy_min"].tolist() == odd["busy_max"].tolist() == [1.0, 0.0, 0.5]


def test_idle_shares_are_exact_per_bucket() -> None:
    segments = pd.DataFrame(
        {
            "start_ns": [0, 150, 390],
            "end_ns": [50, 250, 400],
            "cause": ["data_loading", "data_loading", "host_sync"],
        }
    )
    shares = sawtooth.idle_shares(segments, [0, 100, 200, 300, 400])
    np.testing.assert_allclose(shares["data_loading"], [50, 50, 50, 0])
    np.testing.assert_allclose(shares["host_sync"], [0, 0, 0, 10])
    assert sawtooth.idle_shares(segments.iloc[:0], [0, 10]) == {}


def test_cause_segments_keep_each_causes_length() -> None:
    gaps = pd.DataFrame(
        {
            "start_ns": [100, 1000],
            "end_ns": [200, 1010],
            "data_loading_ns": [60, 0],
            "cpu_overhead_ns": [40, 10],
        }
    )
    seg = sawtooth.cause_segments(gaps, ["data_loading_ns", "cpu_overhead_ns"])
    assert seg.to_dict("records") == [
        {"start_ns": 100, "end_ns": 160, "cause": "data_loading"},
        {"start_ns": 160, "end_ns": 200, "cause": "cpu_overhead"},
        {"start_ns": 1000, "end_ns": 1010, "cause": "cpu_overhead"},
    ]


def _gaps() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "start_ns": [100, 300],
            "end_ns": [200, 400],
            "cause": ["data_loading", "host_sync"],
            "data_loading_ns": [60, 0],
            "host_sync_ns": [0, 100],
            "cpu_overhead_ns": [40, 0],
        }
    )


def test_gaps_in_a_view_are_clipped_and_keep_their_causes() -> None:
    g = sawtooth.gaps_in_view(_gaps(), 150, 350)
    assert list(zip(g["start_ns"], g["end_ns"], g["cause"], strict=True)) == [
        (150, 200, "data_loading"),
        (300, 350, "host_sync"),
    ]
    assert g["data_loading_ns"].tolist() == [60, 0]  # the whole gap's split, for its hover
    assert sawtooth.gaps_in_view(_gaps(), 200, 300).empty  # touching is not overlapping
    # the columns in the analysis's precedence order, whatever the frame's order
    assert sawtooth.cause_columns(_gaps()) == ["data_loading_ns", "host_sync_ns", "cpu_overhead_ns"]


def test_idle_shares_in_a_view_split_each_gap_by_cause() -> None:
    # the gap 100..200 lays out data loading 100..160 and CPU overhead 160..200; the view 150..250
    # in two buckets: [150, 200) holds 10 ns of data loading (20 %) and 40 of overhead (80 %)
    shares = sawtooth.idle_shares_in_view(_gaps(), 150, 250, 2)
    np.testing.assert_allclose(shares["data_loading"], [20, 0])
    np.testing.assert_allclose(shares["cpu_overhead"], [80, 0])
    assert "host_sync" not in shares  # its gap is outside the view
    assert sawtooth.bucket_edges(0, 110_000, 3).tolist() == [0, 36_666, 73_333, 110_000]


def test_busy_and_idle_causes_fill_every_bucket(con, hand: str) -> None:
    """On the real analysis: the idle gaps are the complement of busy time, so busy % plus the
    idle % of every cause is 100 in each bucket (buckets of busy_series)."""
    w = sawtooth.window_view(con, hand, 0)
    gaps = sawtooth.idle_gaps(con, hand, 0, w.window, 0)
    assert list(zip(gaps["start_ns"], gaps["end_ns"], strict=True)) == [
        (0, 10_000),
        (40_000, 50_000),
        (55_000, 60_000),
        (65_000, 90_000),
    ]
    cols = sawtooth.cause_columns(gaps)
    assert (gaps[cols].sum(axis=1) == gaps["end_ns"] - gaps["start_ns"]).all()
    assert set(gaps.columns) == {"start_ns", "end_ns", "cause", *cols}
    shares = sawtooth.idle_shares_in_view(gaps, 0, 110_000, 11)
    busy = busy_series(con, hand, 0, 0, 110_000, 11)["busy_frac"].to_numpy() * 100
    np.testing.assert_allclose(busy + sum(shares.values()), np.full(11, 100.0))


# -- NVML --------------------------------------------------------------------------------------------


def _samples(path: Path, utils: list[float], interval_ms: int = 10) -> Path:
    """A gpuscope-nvml file of GPU 0 from BASE_NS (the hand trace's clock origin), one sample per
    ``interval_ms``."""
    header = {
        "format": "gpuscope-nvml",
        "version": 1,
        "host": "h",
        "interval_ms": interval_ms,
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0"}],
        "started_ns": BASE_NS,
    }
    rows = [
        {"t_ns": BASE_NS + i * interval_ms * 1_000_000, "gpus": [{"gpu": 0, "gpu_util_pct": u}]}
        for i, u in enumerate(utils)
    ]
    path.write_text("\n".join(json.dumps(r) for r in [header, *rows]) + "\n")
    return path


def test_nvml_overlay_in_trace_time(con, hand: str, tmp_path: Path) -> None:
    assert nvml_run.nvml_overlay(con, hand, 0, 0, 0, 110_000, 10).empty  # no samples yet
    with transaction(con):
        ingest_series(con, _samples(tmp_path / "g.nvml.jsonl", [10, 20, 30, 40, 50]), run_id=hand)
    # the trace clock starts at BASE_NS: samples at 0, 10, 20, 30, 40 ms of trace time
    assert nvml_run.time_offset_ns(con, hand, 0) == BASE_NS
    ms = 1_000_000
    o = nvml_run.nvml_overlay(con, hand, 0, 0, 15 * ms, 35 * ms, 100)
    # the sample before the range (it holds until the next), then those inside
    assert o["t_ns"].tolist() == [10 * ms, 20 * ms, 30 * ms]
    assert o["gpu_util_pct"].tolist() == [20.0, 30.0, 40.0]
    # more samples than buckets: the range's are averaged, the one before stays apart
    o = nvml_run.nvml_overlay(con, hand, 0, 0, 15 * ms, 35 * ms, 1)
    assert o.to_dict("records") == [
        {"t_ns": 10 * ms, "gpu_util_pct": 20.0},
        {"t_ns": 20 * ms, "gpu_util_pct": 35.0},
    ]
    # a device without samples reads the run's first sampled GPU
    assert nvml_run.nvml_overlay(con, hand, 0, 5, 15 * ms, 35 * ms, 100)["t_ns"].size == 3


def test_nvml_series_is_thinned_evenly(con, tmp_path: Path) -> None:
    with transaction(con):
        rid = ingest_series(con, _samples(tmp_path / "solo.nvml.jsonl", [1, 2, 3, 4, 5, 6])).run_id
    assert nvml_run.nvml_series(con, rid)["gpu_util_pct"].tolist() == [1, 2, 3, 4, 5, 6]
    # 6 samples, at most 3: every second one (the 2nd, 4th, 6th)
    assert nvml_run.nvml_series(con, rid, max_points=3)["gpu_util_pct"].tolist() == [2, 4, 6]
    assert {"t_ns", "gpu", "gpu_util_pct"} <= set(nvml_run.nvml_series(con, rid).columns)


# -- the run pages' reads ----------------------------------------------------------------------------


def test_run_row_ranks_and_counts(con, hand: str) -> None:
    row = run_views.run_row(con, hand)
    assert row is not None and row["run_id"] == hand and row["kind"] == "trace"
    assert row["n_ranks"] == 1 and row["tags"] == []
    assert run_views.run_row(con, "nope") is None
    assert run_views.ranks_of(con, hand) == [0]
    assert run_views.row_count(con, "runs") == 1
    with pytest.raises(ValueError, match="not a table name"):
        run_views.row_count(con, "runs; DROP TABLE runs")


def test_run_summary_is_the_rank_the_run_page_opens_on() -> None:
    doc = {
        "rank": 0,
        "mfu_pct": 41.5,
        "step_time_ms": {"mean": 10.0},
        "gpu_busy_pct": 90.0,
        "ranks": [
            {"rank": 0, "step_time_ms": 10.0, "gpu_busy_pct": 90.0},
            {"rank": 1, "step_time_ms": 10.5, "gpu_busy_pct": 60.0},
        ],
    }
    # the rank the Run page opens on, with its wait beside its busy (issue 20: the list agrees
    # with the page), whichever rank is the least busy or the straggler
    doc = {**doc, "step_time_ms": {"mean": 10.0, "p50": 9.5}, "gpu_wait_pct": 30.0}
    assert run_views.run_summary(doc) == run_views.RunSummary(0, 9.5, 90.0, 41.5, 30.0)
    doc_sg = {**doc, "straggler": {"rank": 1}}
    assert run_views.run_summary(doc_sg) == run_views.RunSummary(0, 9.5, 90.0, 41.5, 30.0)
    one = {"rank": 0, "step_time_ms": {"mean": 8.0}, "gpu_busy_pct": None, "mfu_pct": None}
    assert run_views.run_summary(one) == run_views.RunSummary(0, 8.0, None, None)


def test_top_idle_cause_per_step_and_share() -> None:
    causes = {"launch_overhead": 2_000.0, "data_loading": 8_000.0, "other": 0.0}  # µs
    # 8 ms of data loading over 4 steps of a 40 ms window: 2 ms per step, 20 % of the time
    assert run_views.top_idle(causes, 4, 40_000.0) == run_views.TopIdleCause(
        "data_loading", 2.0, 20.0
    )
    tie = {"host_sync": 500.0, "other": 500.0}  # the first in precedence order; no window
    assert run_views.top_idle(tie, 1, None) == run_views.TopIdleCause("host_sync", 0.5, None)
    assert run_views.top_idle({"other": 0.0}, 1, 10.0) is None
    assert run_views.top_idle({}, 1, 10.0) is None
