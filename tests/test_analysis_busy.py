"""GPU busy time: union per device and per stream, the bucketed series, against hand-computed
answers and a brute-force union (property test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis.busy import (
    busy_in_ranges,
    busy_series,
    busy_summary,
    comm_only_ns,
    merged_intervals,
    primary_device,
)
from gpuscope.analysis.steps import find_window
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


def ingest(con, t: TraceBuilder, path: Path) -> str:
    return ingest_paths(con, [t.write(path)])[0].run_id


def hand_trace() -> TraceBuilder:
    t = TraceBuilder()
    t.step(1, 0, 100)  # window 0..100 µs
    t.launch("gemm", 1, 10, 20)  # stream 7: 10..30
    t.launch("relu", 2, 20, 20, stream=8)  # stream 8: 20..40 (overlaps: union 10..40)
    t.launch("Memcpy HtoD (Pinned -> Device)", 3, 50, 5, api="cudaMemcpyAsync", cat="gpu_memcpy")
    t.launch("Memset (Device)", 4, 60, 5, api="cudaMemsetAsync", cat="gpu_memset")  # 60..65
    t.launch("tail", 5, 90, 20)  # 90..110, clipped to the window: 90..100 (window end is 110?)
    # not busy: a sync event and a GPU-side annotation on the device
    t.events.append(
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Stream Sync",
            "pid": 0,
            "tid": 7,
            "ts": 66,
            "dur": 20,
            "args": {"device": 0, "stream": 7},
        }
    )
    t.events.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "fwd",
            "pid": 0,
            "tid": 7,
            "ts": 0,
            "dur": 100,
            "args": {"device": 0, "stream": 7},
        }
    )
    return t


@pytest.mark.slow
def test_busy_union_across_streams_hand_computed(con, tmp_path):
    rid = ingest(con, hand_trace(), tmp_path / "t.json")
    w = find_window(con, rid, 0)
    # the step's last GPU activity ends at 110: window 0..110 µs
    assert (w.start_ns, w.end_ns) == (0, 110_000)
    b = busy_summary(con, rid, 0, w.start_ns, w.end_ns)
    # union: 10..40 (30) + 50..55 (5) + 60..65 (5) + 90..110 (20) = 60 µs of 110
    assert b.device == 0 and b.busy_ns == 60_000
    assert b.busy_pct == 100.0 * 60 / 110
    streams = {int(r.stream): int(r.busy_ns) for r in b.streams.itertuples()}
    # stream 7: 10..30, 50..55, 60..65, 90..110 = 50 µs; stream 8: 20..40 = 20 µs
    assert streams == {7: 50_000, 8: 20_000}
    # clipped to a narrower window: 0..100 -> the tail counts 10 µs
    assert busy_summary(con, rid, 0, 0, 100_000).busy_ns == 50_000
    m = merged_intervals(con, rid, 0, 0, 110_000)
    assert list(zip(m["s"], m["e"], strict=True)) == [
        (10_000, 40_000),
        (50_000, 55_000),
        (60_000, 65_000),
        (90_000, 110_000),
    ]


def test_busy_series_and_ranges_hand_computed(con, tmp_path):
    rid = ingest(con, hand_trace(), tmp_path / "t.json")
    s = busy_series(con, rid, 0, 0, 110_000, 11)  # 10 µs buckets
    # busy µs per bucket: [0,10) 0, [10,20) 10, [20,30) 10, [30,40) 10, [40,50) 0, [50,60) 5,
    # [60,70) 5, [70,80) 0, [80,90) 0, [90,100) 10, [100,110) 10
    assert s["busy_ns"].tolist() == [x * 1000 for x in [0, 10, 10, 10, 0, 5, 5, 0, 0, 10, 10]]
    assert s["busy_frac"].tolist()[5] == 0.5
    assert s["start_ns"].iloc[0] == 0 and s["end_ns"].iloc[-1] == 110_000
    # uneven buckets: bounds 0 + 110000*i//3
    s3 = busy_series(con, rid, 0, 0, 110_000, 3)
    assert s3["end_ns"].tolist() == [36_666, 73_333, 110_000]
    assert s3["busy_ns"].sum() == 60_000
    assert busy_in_ranges(con, rid, 0, [(0, 25_000), (25_000, 62_000), (0, 110_000)]) == [
        15_000,
        22_000,
        60_000,
    ]
    assert busy_series(con, rid, 0, 0, 0, 5).empty


def test_devices_and_primary(con, tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("a", 1, 10, 10, device=0)
    t.launch("b", 2, 10, 40, device=1)  # device 1 is busier: the primary device
    t.launch("c", 3, 30, 10, device=1)  # overlaps b: union 10..50
    rid = ingest(con, t, tmp_path / "t.json")
    b = busy_summary(con, rid, 0, 0, 100_000)
    assert b.device == 1 and b.busy_ns == 40_000
    assert {int(r.device): int(r.busy_ns) for r in b.devices.itertuples()} == {0: 10_000, 1: 40_000}
    assert primary_device(con, rid, 0, 0, 100_000) == 1
    # without the streams: the same devices and busy time, no stream rows (and none computed)
    lean = busy_summary(con, rid, 0, 0, 100_000, per_stream=False)
    assert (lean.device, lean.busy_ns, lean.busy_pct) == (b.device, b.busy_ns, b.busy_pct)
    assert lean.devices.equals(b.devices) and len(b.streams) == 2
    assert lean.streams.empty and list(lean.streams.columns) == list(b.streams.columns)
    lean.streams.loc[0] = [9, 9, 9, 9, 9.0]  # a caller's change stays its own
    assert busy_summary(con, rid, 0, 0, 100_000, per_stream=False).streams.empty
    assert busy_series(con, rid, 0, 0, 100_000, 2, device=0)["busy_ns"].tolist() == [10_000, 0]
    assert busy_series(con, rid, 0, 0, 100_000, 2, device=5)["busy_ns"].tolist() == [0, 0]


def test_comm_only_time(con, tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("gemm", 1, 10, 20)  # 10..30
    t.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 2, 20, 40, stream=9)  # 20..60
    rid = ingest(con, t, tmp_path / "t.json")
    b = busy_summary(con, rid, 0, 0, 100_000)
    assert b.busy_ns == 50_000
    # only NCCL runs 30..60
    assert comm_only_ns(con, rid, 0, 0, 100_000, 0, b.busy_ns) == 30_000


# -- property test against a brute-force union ------------------------------------------------

interval = st.tuples(
    st.integers(0, 300),  # start, µs
    st.integers(1, 60),  # duration, µs
    st.sampled_from([7, 8, 9]),  # stream
    st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"]),
)


def brute(intervals: list[tuple[int, int]], lo: int, hi: int) -> set[int]:
    """The covered µs cells (cell t = [t, t+1)) within [lo, hi)."""
    cells: set[int] = set()
    for s, e in intervals:
        cells.update(range(max(s, lo), min(e, hi)))
    return cells


@pytest.mark.slow
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    acts=st.lists(interval, min_size=0, max_size=25),
    win=st.tuples(st.integers(0, 200), st.integers(1, 250)),
    n=st.integers(1, 9),
)
def test_busy_matches_brute_force(tmp_path_factory, acts, win, n):
    tmp = tmp_path_factory.mktemp("busy")
    t = TraceBuilder()
    t.cpu_op("aten::x", 0, 1)  # at least one event
    for s, d, stream, cat in acts:
        t.launch("k", max(0, s - 1), s, d, stream=stream, cat=cat)
    con = connect(":memory:")
    try:
        rid = ingest(con, t, tmp / "t.json")
        lo, hi = win[0], win[0] + win[1]
        b = busy_summary(con, rid, 0, lo * 1000, hi * 1000)
        spans = [(s, s + d) for s, d, _, _ in acts]
        assert b.busy_ns == 1000 * len(brute(spans, lo, hi))
        per_stream = {int(r.stream): int(r.busy_ns) for r in b.streams.itertuples()}
        for stream in {a[2] for a in acts}:
            mine = [(s, s + d) for s, d, st_, _ in acts if st_ == stream]
            want = 1000 * len(brute(mine, lo, hi))
            assert per_stream.get(stream, 0) == want
        series = busy_series(con, rid, 0, lo * 1000, hi * 1000, n)
        assert series["busy_ns"].sum() == b.busy_ns
        cells = brute(spans, lo, hi)
        for r in series.itertuples():
            # bucket bounds are whole ns: count covered ns brute force through µs cells
            want = sum(
                max(0, min(r.end_ns, (c + 1) * 1000) - max(r.start_ns, c * 1000)) for c in cells
            )
            assert r.busy_ns == want
        ranges = [(lo * 1000, hi * 1000), (lo * 1000 + 500, (lo + hi) * 500 + 1)]
        got = busy_in_ranges(con, rid, 0, ranges, window=(lo * 1000, hi * 1000))
        for (a, z), v in zip(ranges, got, strict=True):
            assert v == sum(max(0, min(z, (c + 1) * 1000) - max(a, c * 1000)) for c in cells)
    finally:
        con.close()
