"""RankBatch: the working tables, windows, busy summaries, split inputs, idle totals and collective
frames of several ranks from one statement of each kind give exactly what one rank at a time gives
(the same statements over a batch of one), also for ranks without steps or without GPU activity,
and for any subset of the run's ranks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpuscope.analysis import rank_frames
from gpuscope.analysis.busy import busy_summaries, busy_summary
from gpuscope.analysis.idle import batch_idle_totals, idle_totals
from gpuscope.analysis.rank_index import RankBatch, close_shared
from gpuscope.analysis.steps import find_window, find_windows
from gpuscope.ingest.loader import ingest_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

WORLD = 4


def rank_trace(rank: int, kind: str, shift: float) -> TraceBuilder:
    t = TraceBuilder(rank=rank, world_size=WORLD)
    if kind != "no_steps":
        t.step(1, 0 + shift, 200)
        t.step(2, 200 + shift, 150)
    if kind != "no_gpu":
        t.launch("ampere_sgemm_128x64_nn", 10 + shift, 20 + 2 * shift, 40)
        t.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 60 + shift, 70 + shift, 90)
        t.launch("volta_sgemm_128x64_nn", 70 + shift, 120 + shift, 30, stream=8)
        t.runtime("cudaStreamSynchronize", 160 + shift, 30)
        t.launch("elementwise_kernel", 230 + shift, 260 + 3 * shift, 20)
    else:
        t.runtime("cudaStreamSynchronize", 40 + shift, 30)
    return t


def ingest_ranks(con, folder: Path, kinds: list[str], shifts: list[float]) -> str:  # type: ignore[no-untyped-def]
    folder.mkdir(parents=True, exist_ok=True)
    for r, (kind, shift) in enumerate(zip(kinds, shifts, strict=True)):
        rank_trace(r, kind, shift).write(folder / f"rank{r}.json")
    return ingest_paths(con, [folder])[0].run_id


def one_at_a_time(con, run_id: str, ranks: list[int]) -> dict:  # type: ignore[no-untyped-def]
    out = {}
    for r in ranks:
        w = find_window(con, run_id, r)
        b = busy_summary(con, run_id, r, w.start_ns, w.end_ns, per_stream=False)
        s = rank_frames.split_inputs(con, run_id, r, w.start_ns, w.end_ns, b.device)
        out[r] = (w, b.device, b.busy_ns, b.busy_pct, b.devices.to_dict("list"), s)
    close_shared(con)
    return out


def batched(con, run_id: str, ranks: list[int]) -> dict:  # type: ignore[no-untyped-def]
    batch = RankBatch(con, run_id, ranks)
    try:
        windows = find_windows(batch)
        spans = {r: (w.start_ns, w.end_ns) for r, w in windows.items()}
        busy = busy_summaries(batch, spans)
        splits = rank_frames._splits(
            con, batch.gpu(), batch.comm_name_ids(), {r: (*spans[r], busy[r].device) for r in ranks}
        )
        return {
            r: (
                windows[r],
                busy[r].device,
                busy[r].busy_ns,
                busy[r].busy_pct,
                busy[r].devices.to_dict("list"),
                splits[r],
            )
            for r in ranks
        }
    finally:
        batch.close()
        close_shared(con)


KINDS = ["steps", "no_steps", "no_gpu", "steps"]


@pytest.mark.slow
def test_a_batch_gives_what_each_rank_gives_alone(con, tmp_path: Path) -> None:
    run_id = ingest_ranks(con, tmp_path / "job", KINDS, [0.0, 3.0, 5.0, 11.0])
    ranks = list(range(WORLD))
    alone = one_at_a_time(con, run_id, ranks)
    assert alone[1][0].source == "trace" and alone[2][1] is None  # the edge cases are there
    assert alone[0][0].source == "ProfilerStep" and alone[0][2] > 0
    assert batched(con, run_id, ranks) == alone
    assert batched(con, run_id, [3, 1]) == {r: alone[r] for r in (1, 3)}  # any subset


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kinds=st.lists(
        st.sampled_from(["steps", "no_steps", "no_gpu"]), min_size=WORLD, max_size=WORLD
    ),
    shifts=st.lists(st.integers(0, 400), min_size=WORLD, max_size=WORLD),
)
def test_any_mix_of_ranks_batched_is_each_rank_alone(
    tmp_path_factory: pytest.TempPathFactory, kinds: list[str], shifts: list[int]
) -> None:
    from gpuscope.store import connect

    # a fresh store per example: in memory as `con` is in this module (tests/conftest.py; the
    # lake with GPUSCOPE_TESTS_ON_LAKE=1; test_store_equivalence proves both answer the same)
    d = tmp_path_factory.mktemp("mix")
    with connect(d / "store" if os.environ.get("GPUSCOPE_TESTS_ON_LAKE") else ":memory:") as con:
        run_id = ingest_ranks(con, d / "job", kinds, [float(s) for s in shifts])
        ranks = list(range(WORLD))
        assert batched(con, run_id, ranks) == one_at_a_time(con, run_id, ranks)
        alone = {r: rank_frames.compute(con, run_id, r) for r in ranks}
        close_shared(con)
        batch = RankBatch(con, run_id, ranks)
        try:
            assert rank_frames.compute_batch(batch) == alone  # idle and frames too
        finally:
            batch.close()
            close_shared(con)


def idle_of(con, run_id: str, rank: int, w, dev):  # type: ignore[no-untyped-def]
    if dev is None:
        return None
    i = idle_totals(con, run_id, rank, w, device=dev)
    return (i.device, i.total_ns, i.n_gaps, i.causes_ns, i.gaps_by_cause)


@pytest.mark.slow
def test_a_batchs_cross_rank_parts_are_each_ranks_own(con, tmp_path: Path) -> None:
    """compute_batch gives every rank the part compute gives it alone: idle totals and the
    collective frame included. Rank 3 runs 250 µs later: a launch matched to another rank's
    call (the same correlation ids) would fall in no step."""
    run_id = ingest_ranks(con, tmp_path / "job", KINDS, [0.0, 3.0, 5.0, 250.0])
    alone = {r: rank_frames.compute(con, run_id, r) for r in range(WORLD)}
    idle = {}
    for r in range(WORLD):
        w = find_window(con, run_id, r)
        idle[r] = idle_of(con, run_id, r, w, alone[r]["device"])
    close_shared(con)
    assert [len(alone[r]["frame"]["start_ns"]) for r in range(WORLD)] == [1, 1, 0, 1]
    assert idle[0] is not None and idle[0][1] > 0 and idle[2] is None
    batch = RankBatch(con, run_id, range(WORLD))
    try:
        assert rank_frames.compute_batch(batch) == alone
        windows = find_windows(batch)
        devices = {r: alone[r]["device"] for r in range(WORLD) if alone[r]["device"] is not None}
        got = batch_idle_totals(batch, windows, devices)
        assert {
            r: (i.device, i.total_ns, i.n_gaps, i.causes_ns, i.gaps_by_cause)
            for r, i in got.items()
        } == {r: v for r, v in idle.items() if v is not None}
    finally:
        batch.close()
        close_shared(con)


def test_a_batch_asked_for_other_windows_and_devices_answers_each(con, tmp_path: Path) -> None:
    """Gaps, busy summaries and idle totals of a batch for a second set of windows (or devices)
    are tables of their own: each answer is the rank's alone for those windows."""
    run_id = ingest_ranks(con, tmp_path / "job", ["steps", "steps", "no_steps"], [0.0, 7.0, 2.0])
    ranks = [0, 1, 2]
    full = {r: find_window(con, run_id, r) for r in ranks}
    cut = {r: (w.start_ns + 20_000, w.end_ns - 30_000) for r, w in full.items()}
    alone = {}
    for r in ranks:
        b = busy_summary(con, run_id, r, *cut[r], per_stream=False)
        alone[r] = (b.device, b.busy_ns)
    idle_alone = {r: idle_of(con, run_id, r, full[r], 0) for r in (0, 1)}
    close_shared(con)
    batch = RankBatch(con, run_id, ranks)
    try:
        spans = {r: (w.start_ns, w.end_ns) for r, w in full.items()}
        busy_summaries(batch, spans)
        got = busy_summaries(batch, cut)
        assert {r: (b.device, b.busy_ns) for r, b in got.items()} == alone
        batch_idle_totals(batch, full, {0: 0})
        both = batch_idle_totals(batch, full, {0: 0, 1: 0})
        assert {
            r: (i.device, i.total_ns, i.n_gaps, i.causes_ns, i.gaps_by_cause)
            for r, i in both.items()
        } == idle_alone
    finally:
        batch.close()
        close_shared(con)
