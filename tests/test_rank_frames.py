"""The cross-rank part of each rank's summary (gpuscope.analysis.rank_frames): stored at every
rank's ingest, it gives ``analyze`` the same run (ranks table, busy split per rank, straggler,
collectives) as the events do, without reading the other ranks' events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clitools import analysis_spec
from gpuscope.analysis import rank_frames as RF
from gpuscope.analysis import rank_summary as RS
from gpuscope.analysis import report
from gpuscope.analysis.busy import busy_split
from gpuscope.analysis.steps import find_window
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracegen import BASE_NS, TraceBuilder

REPO = Path(__file__).resolve().parent.parent
DDP = REPO / "sample_traces" / "ddp"
US = 1000
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "volta_sgemm_128x64_nn"


def analyze_both(con: Any, run_id: str, rank: int, monkeypatch: Any) -> tuple[dict, dict]:
    """``analyze --json`` of ``rank`` from the cross-rank parts, then from every rank's events."""
    parts = report.analyze_run(con, run_id, rank=rank, with_path=False).to_json()
    events = report.analyze_run(
        con, run_id, rank=rank, with_path=False, stored_parts=False
    ).to_json()
    return parts, events


def assert_same_run(parts: dict, events: dict) -> None:
    for key in ("ranks", "straggler", "collectives", "busy_split"):
        assert json.dumps(parts.get(key), sort_keys=True) == json.dumps(
            events.get(key), sort_keys=True
        ), key
    assert json.dumps(parts, sort_keys=True) == json.dumps(events, sort_keys=True)


def handmade_ranks(folder: Path, delays: list[float]) -> Path:
    """len(delays) ranks, 3 steps of 2 ms each: compute kernels on stream 7 that overlap each
    step's all-reduce (stream 17, launched ``delays[r]`` µs late) and an all-gather of a second
    group (stream 19); the traces start apart (base times differ); rank 1 has an all-reduce
    queued before its trace began (unlaunched); the last rank has a step with a compute kernel
    straddling the window's end."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(delays)
    for rank, delay in enumerate(delays):
        t = TraceBuilder(rank=rank, world_size=n, base_ns=BASE_NS + rank * 7_000)
        skew = -7.0 * rank  # the same absolute time on every rank
        if rank == 1:
            t.gpu(AR, 5.0 + skew, 40.0, correlation=90_000, stream=17)
        for step in range(3):
            t0 = 100.0 + 2000.0 * step + skew
            t.step(step, t0, 2000.0)
            t.launch(GEMM, t0 + 5, t0 + 20, 300.0 + 40 * rank)
            t.cpu_op("autograd::engine::evaluate_function: AccumulateGrad", t0 + 350, 400.0)
            ext = t.cpu_op(
                "record_param_comms",
                t0 + 400,
                50.0,
                **{"Input Dims": [[[262144]], [], []], "Input type": ["TensorList", "", ""]},
            )
            arrive = t0 + 500 + delay
            t.launch(AR, t0 + 420, arrive, 900.0 - delay, stream=17, external_id=ext)
            # compute in the middle of the all-reduce: its uncovered part is in pieces
            t.launch(GEMM, t0 + 450, arrive + 100, 60.0)
            t.launch(GEMM, t0 + 460, arrive + 300, 80.0)
            t.launch(AG, t0 + 1500, t0 + 1550 + delay / 2, 200.0, stream=19)
        if rank == n - 1:
            t.launch(GEMM, 100.0 + 6000 + skew - 50, 100.0 + 6000 + skew - 30, 100.0)
        t.write(folder / f"rank{rank}.json")
    return folder


@pytest.mark.slow
def test_parts_give_the_run_the_events_give_on_hand_made_ranks(
    tmp_path: Path, monkeypatch: Any
) -> None:
    folder = handmade_ranks(tmp_path / "t", [0.0, 150.0, 40.0, 0.0])
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingest_paths(con, [folder], after_trace=RS.store_after_ingest)[0].run_id
        assert RS.missing(con, run_id, RS.EVERY_RANK) == []  # every rank's part at ingest
        for rank in (0, 1, 3):
            parts, events = analyze_both(con, run_id, rank, monkeypatch)
            assert_same_run(parts, events)
    assert parts["straggler"]["rank"] == 1  # the planted late arriver
    assert parts["collectives"]["unlaunched_kernels"] == {"1": 1}
    waits = {r["rank"]: r["comm_wait_pct"] for r in parts["ranks"]}
    assert waits[1] == 0.0 and all(waits[r] > 0 for r in (0, 2, 3))


@pytest.mark.slow
def test_parts_give_the_run_the_events_give_on_the_real_ddp_pair(
    tmp_path: Path, monkeypatch: Any
) -> None:
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingest_paths(con, [DDP], after_trace=RS.store_after_ingest)[0].run_id
        assert RS.missing(con, run_id, RS.EVERY_RANK) == []
        for rank in (0, 1):
            parts, events = analyze_both(con, run_id, rank, monkeypatch)
            assert_same_run(parts, events)
    # the figures the issue quotes: rank 0 waits for rank 1 most of its step
    assert parts["straggler"]["rank"] == 1
    assert {r["rank"]: r["comm_wait_pct"] > 50 for r in parts["ranks"]} == {0: True, 1: False}


@pytest.mark.slow
def test_analyze_reads_no_other_ranks_events(tmp_path: Path) -> None:
    """With the other ranks' events gone from the store, rank 0's run is unchanged: it read
    their parts only (its own detail still comes from its events)."""
    folder = handmade_ranks(tmp_path / "t", [0.0, 150.0, 40.0])
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingest_paths(con, [folder], after_trace=RS.store_after_ingest)[0].run_id
        before = report.analyze_run(con, run_id, rank=0, with_path=False).to_json()
        con.execute("DELETE FROM events WHERE run_id = ? AND rank > 0", [run_id])
        after = report.analyze_run(con, run_id, rank=0, with_path=False).to_json()
    assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True)
    assert len(after["ranks"]) == 3 and after["straggler"]["rank"] == 1


def kernels_trace(folder: Path, compute: list[tuple[int, int]], comm: list[Any]) -> Path:
    """One step of 200 µs with compute kernels on stream 7 and NCCL all-reduces alternating on
    streams 17 and 18, each (start, duration) in µs, written to ``folder``."""
    t = TraceBuilder()
    t.step(1, 0.0, 200.0)
    for s, d in compute:
        t.launch(GEMM, s, s, d, stream=7)
    for i, (s, d) in enumerate(comm):
        t.launch(AR, s, s, d, stream=17 + i % 2)
    return t.write(folder / "t.json")


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    compute=st.lists(st.tuples(st.integers(0, 190), st.integers(1, 40)), max_size=6),
    comm=st.lists(
        st.tuples(st.integers(0, 190), st.integers(1, 60), st.integers(-1, 60)), max_size=6
    ),
    window=st.tuples(st.integers(0, 60), st.integers(120, 200)),
)
def test_split_of_the_part_equals_busy_split(tmp_path_factory, compute, comm, window) -> None:
    """Random compute and NCCL kernels (each matched with a wait, or unmatched: -1), overlapping
    anyhow, and a window that cuts them: the split from the stored part equals busy_split's from
    the events, and both sum to the window."""
    import pandas as pd

    path = kernels_trace(tmp_path_factory.mktemp("split"), compute, [c[:2] for c in comm])
    ws, we = window[0] * US, window[1] * US
    con = connect(":memory:")
    try:
        [res] = ingest_paths(con, [path])
        waits = pd.DataFrame(
            {
                "start_ns": [s * US for s, d, w in comm if w >= 0],
                "end_ns": [(s + d) * US for s, d, w in comm if w >= 0],
                "wait_ns": [min(w, d) * US for s, d, w in comm if w >= 0],
            }
        )
        want = busy_split(con, res.run_id, 0, ws, we, 0, waits)
        part = RF.compute(con, res.run_id, 0)
        part["window"]["start_ns"], part["window"]["end_ns"] = ws, we
        part["split"] = RF.split_inputs(con, res.run_id, 0, ws, we, 0)
        part = json.loads(json.dumps(part))  # as stored
        got = RF.split_of(part, waits)
        none = RF.split_of(part, None)
    finally:
        con.close()
    assert got == want
    # a part stored before the arrays were packed (lists of numbers) reads the same
    lists = json.loads(json.dumps(part))
    sp = lists["split"]
    sp["comm"] = [RF.unpacked(v).tolist() for v in sp["comm"]]
    sp["uncovered"] = [RF.unpacked(v).tolist() for v in sp["uncovered"]]
    assert RF.split_of(lists, waits) == got
    assert got.busy_ns + got.idle_ns == we - ws
    assert none.wait_ns == none.transfer_ns == 0
    in_window = sum(1 for s, d, w in comm if w >= 0 and s * US < we and (s + d) * US > ws)
    assert none.unmatched_comm_kernels == got.unmatched_comm_kernels + in_window


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    compute=st.lists(st.tuples(st.integers(0, 190), st.integers(1, 40)), max_size=5),
    comm=st.lists(st.tuples(st.integers(0, 190), st.integers(1, 60)), max_size=5),
    window=st.tuples(st.integers(0, 60), st.integers(61, 200)),
)
def test_comm_only_of_the_split_read_is_comm_only_ns(tmp_path_factory, compute, comm, window):
    """The part's communication-only time, taken from split_inputs' one read of the device, is
    busy.comm_only_ns of the same window: random compute and NCCL kernels on several streams,
    overlapping anyhow, none of either kind included, a window that cuts them."""
    from gpuscope.analysis.busy import busy_summary, comm_only_ns

    path = kernels_trace(tmp_path_factory.mktemp("comm_only"), compute, comm)
    ws, we = window[0] * US, window[1] * US
    con = connect(":memory:")
    try:
        [res] = ingest_paths(con, [path])
        b = busy_summary(con, res.run_id, 0, ws, we, per_stream=False)
        want = comm_only_ns(con, res.run_id, 0, ws, we, b.device, b.busy_ns)
        got = RF.comm_only_of(b.busy_ns, RF.split_inputs(con, res.run_id, 0, ws, we, b.device))
    finally:
        con.close()
    assert got == want
    if comm and not compute and b.device is not None:
        assert got == b.busy_ns  # only NCCL kernels: all of the busy time


def test_window_of_a_part_is_the_rank_window(tmp_path: Path) -> None:
    folder = handmade_ranks(tmp_path / "t", [0.0, 10.0])
    con = connect(":memory:")
    try:
        run_id = ingest_paths(con, [folder])[0].run_id
        part = json.loads(json.dumps(RF.compute(con, run_id, 1)))
        assert RF.window_of(part) == find_window(con, run_id, 1)
    finally:
        con.close()


# -- the vectorised helpers, against brute force ------------------------------------------------

_spans = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12)), max_size=8)


def _disjoint(spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    from gpuscope.analysis.busy import _merge

    s = np.array([a for a, _ in spans], dtype=np.int64)
    e = np.array([a + d for a, d in spans], dtype=np.int64)
    order = np.argsort(s, kind="stable")
    return _merge(s[order], e[order])


@settings(max_examples=300, deadline=None)
@given(a=_spans, b=_spans)
def test_difference_of_interval_sets_is_the_points_of_a_not_in_b(a, b) -> None:
    from gpuscope.analysis.rank_frames import _difference

    a_s, a_e = _disjoint(a)
    b_s, b_e = _disjoint(b)
    d_s, d_e = _difference(a_s, a_e, b_s, b_e)
    points = lambda s, e: {t for x, y in zip(s, e, strict=True) for t in range(x, y)}  # noqa: E731
    assert points(d_s, d_e) == points(a_s, a_e) - points(b_s, b_e)
    assert all(d_s[1:] > d_e[:-1])  # disjoint, sorted, merged
    assert all(d_e > d_s)


_op_rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(1, 4)), st.sampled_from([None, "", "[[4]]", "[[8]]"])
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(rows=_op_rows, wanted=st.lists(st.one_of(st.none(), st.integers(0, 5)), max_size=6))
def test_op_by_external_id_matches_the_row_by_row_rule(rows, wanted) -> None:
    from gpuscope.analysis.collectives import _op_by_external_id

    # (pid, tid, s, e, external_id, input_dims, name), in start order, as the query returns them
    ops = [(1, 1, i, i + 1, ext, dims, f"op{i}") for i, (ext, dims) in enumerate(rows)]
    want: dict[int, tuple] = {}
    for op in ops:  # the rule as it was first written
        if op[4] is not None and (int(op[4]) not in want or op[5]):
            want[int(op[4])] = op
    keep = {int(x) for x in wanted if x is not None}
    want = {k: v for k, v in want.items() if k in keep}
    got = _op_by_external_id(ops, keep)
    assert got == want


_int64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_int64, max_size=40))
def test_packed_int64_arrays_round_trip_exactly(values) -> None:
    """Any int64 values, extremes included (the differences wrap), come back as they went in,
    through JSON as the part is stored."""
    a = np.array(values, dtype=np.int64)
    text = json.loads(json.dumps(RF.packed(a)))
    back = RF.unpacked(text)
    assert back.dtype == np.int64
    assert back.tolist() == values


def test_the_split_of_a_part_is_stored_packed_not_as_numbers(tmp_path: Path) -> None:
    """The rank's communication kernels and uncovered intervals are stored as packed text (the
    1 GB benchmark rank's 185,500 intervals were 6.8 MB of JSON numbers): a worked case, the
    kernels ``[100, 300)`` and ``[400, 500)`` µs under compute ``[150, 200)`` µs."""
    t = TraceBuilder()
    t.step(1, 0.0, 1000.0)
    t.gpu(GEMM, 150.0, 50.0, correlation=1, stream=7)
    t.gpu(AR, 100.0, 200.0, correlation=2, stream=17)
    t.gpu(AR, 400.0, 100.0, correlation=3, stream=17)
    path = t.write(tmp_path / "r.json")
    con = connect(":memory:")
    try:
        [res] = ingest_paths(con, [path])
        part = json.loads(json.dumps(RF.compute(con, res.run_id, 0)))
    finally:
        con.close()
    sp = part["split"]
    assert all(isinstance(v, str) for v in (*sp["comm"], *sp["uncovered"]))
    t0 = part["window"]["start_ns"]
    rel = lambda v: (RF.unpacked(v) - t0).tolist()  # noqa: E731
    assert [rel(v) for v in sp["comm"]] == [[100 * US, 400 * US], [300 * US, 500 * US]]
    assert [rel(v) for v in sp["uncovered"]] == [
        [100 * US, 200 * US, 400 * US],
        [150 * US, 300 * US, 500 * US],
    ]
    assert sp["compute_ns"] == 50 * US
