"""The chain across ranks (gpuscope.analysis.straggler_cause: step_segments, cross_rank_chain, the
verdict built on it; gpuscope.analysis.job: the job's critical path by step and its re-timed
step): hand-made 2-rank traces, one planted cause each, analysed from a real store; the answers
computed by hand in the docstrings.

Every trace: 5 steps. In step k each rank's GPU idles 100 µs, then (where planted) the rank spends
the planted µs (on the host in a DataLoader ``__next__``, a host op, a sync, nothing traced, or
on its GPU in a collective of its own), then computes (one kernel), then enters an all-reduce that
ends 200 µs after the last rank arrives; the step ends 100 µs later on both ranks. So a step lasts
``300 + max over ranks of (100 + planted + compute)`` µs, and the rank that arrives first waits the
difference in the all-reduce.

A step's segment (:func:`step_segments`) runs from the end of the previous step's all-reduce to
the end of its own: the same length on both ranks (the step's period), step 1 has none (nothing in
the window ends a collective before it), so the chain holds steps 2-5. On the late rank a segment
is: 100 µs idle (end of the previous step) + 100 µs idle (start of this one) + planted + compute +
200 µs all-reduce transfer. On a rank with nothing planted the 200 µs of idle holds its 2 µs
launch of the kernel (dispatch), its 20 µs ``record_param_comms`` (communication called on the
host) and 178 µs in no traced op but the step (untraced host time). On a rank with time planted
before its compute, that launch and ``record_param_comms`` fall inside the planted time: its 200
µs of idle are all untraced, and the planted gap holds the 20 µs of ``record_param_comms`` (as
communication, which comes before dispatch and a sync in the idle causes' precedence; a
DataLoader span comes before it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis.straggler_cause import (
    ABSTAINED,
    COMM,
    COMPUTE,
    DATA,
    HOST,
    PROFILER,
    SYNC,
    UNTRACED,
    cross_rank_chain,
    finding,
    step_segments,
)
from tracegen import TraceBuilder

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "volta_sgemm_128x64_nn"
N_STEPS = 5
EVERY = range(1, N_STEPS + 1)
DIMS = {"Input Dims": [[[1048576]], [], []], "Input type": ["TensorList", "", ""]}

pytestmark = [pytest.mark.slow, pytest.mark.memory_store]  # `con`: in memory (tests/conftest.py)


def write_pair(
    d: Path,
    compute_us: tuple[float, float],
    plant: dict[tuple[int, int], tuple[str, float]] | None = None,
) -> None:
    """``plant``: (rank, step) -> (kind, µs) with kind ``host`` (a host op, GPU idle), ``data``
    (a DataLoader ``__next__``), ``sync`` (``aten::item`` around a ``cudaStreamSynchronize``),
    ``untraced`` (no traced op: a sleep) or ``comm`` (a broadcast of the rank's own on another
    stream: its GPU busy in communication)."""
    plant = plant or {}
    builders = [TraceBuilder(rank=r, world_size=2) for r in (0, 1)]
    start = 0.0
    for k in EVERY:
        ready = [100.0 + plant.get((r, k), ("", 0.0))[1] + compute_us[r] for r in (0, 1)]
        last = max(ready)
        period = last + 300.0
        for r, t in enumerate(builders):
            kind, us = plant.get((r, k), ("", 0.0))
            t.step(k, start, period)
            at = start + 100.0
            if kind == "data":
                t.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", at, us)
            elif kind == "host":
                t.cpu_op("aten::index", at, us)
            elif kind == "sync":
                t.cpu_op("aten::item", at, us)
                t.runtime("cudaStreamSynchronize", at + 1.0, us - 2.0)
            elif kind == "comm":
                t.cpu_op("record_param_comms", at, 10.0, **DIMS)
                t.launch(BROADCAST, at + 1.0, at, us, stream=19)
            compute_then_allreduce(t, start, us, compute_us[r], ready[r], last)
        start += period
    for r, t in enumerate(builders):
        t.write(d / f"r{r}.json")


def compute_then_allreduce(
    t: TraceBuilder, start: float, us: float, compute_us: float, ready: float, last: float
) -> None:
    """A step's end on one rank (µs from the step's ``start``): the GEMM launched at 60 + ``us``
    runs from 100 + ``us`` for ``compute_us``; the all-reduce launched at 75 + ``us`` starts when
    the rank is ``ready`` and ends 200 µs after the ``last`` rank is."""
    t.launch(GEMM, start + 60.0 + us, start + 100.0 + us, compute_us)
    t.cpu_op("record_param_comms", start + 70.0 + us, 20.0, **DIMS)
    t.launch(ALLREDUCE, start + 75.0 + us, start + ready, last + 200.0 - ready, stream=17)


def ingested(con, tmp_path: Path, compute_us=(5000.0, 5000.0), plant=None) -> str:
    from gpuscope.ingest.loader import ingest_paths

    d = tmp_path / "run"
    d.mkdir()
    write_pair(d, compute_us, plant)
    [res] = ingest_paths(con, [d])
    return res.run_id


def verdict(con, run_id: str, rank: int, untraced_step_ms: float | None = None):
    """The pace-setter's cause from ``rank``'s report with the store at hand (the chain)."""
    from gpuscope.analysis.report import analyze_run

    rep = analyze_run(con, run_id, rank=rank, with_path=False, untraced_step_ms=untraced_step_ms)
    return finding(rep, con)


def job_of(con, run_id: str, untraced_step_ms: float | None = None):
    from gpuscope.analysis.job import diagnose, memo
    from gpuscope.analysis.report import analyze_run

    return diagnose(
        con,
        run_id,
        memo(
            lambda r: analyze_run(
                con, run_id, rank=r, with_path=False, untraced_step_ms=untraced_step_ms
            )
        ),
    )


def test_segments_of_a_host_bound_rank_by_hand(con, tmp_path):
    """Rank 1 dispatches 3,000 µs per step (a host op, GPU idle). Each step lasts 300 + 100 +
    3,000 + 5,000 = 8,400 µs. Rank 1's segment: compute 5,000, transfer 200, dispatch 3,000 - 20,
    communication idle 20, untraced 200: 8,400. Rank 0's: compute 5,000, wait 3,000 (it arrives
    3,000 µs early), transfer 200, dispatch 2, communication idle 20, untraced 178: 8,400. Steps
    2-5 (step 1 has no segment). The verdict: host dispatch on rank 1, 2,980 - 2 = 2.978 ms per
    step more than rank 0's; the job's critical path runs through rank 1 in every step, bound by
    compute 5.0 / host 2.98 + 0.2 = 3.18 / comm 0.2 + 0.02 = 0.22 ms; each step re-timed 8.4 ->
    8.4 - 2.978 = 5.422 ms (rank 1's extra dispatch as rank 0's; not below rank 0's own work,
    8.4 - its 3.0 ms wait = 5.4)."""
    from gpuscope.analysis.report import analyze_run

    run_id = ingested(con, tmp_path, plant={(1, k): ("host", 3000.0) for k in EVERY})
    rep = analyze_run(con, run_id, rank=1, with_path=False)
    seg1 = step_segments(con, run_id, 1, rep.collectives)
    seg0 = step_segments(con, run_id, 0, rep.collectives)
    assert sorted(seg1) == sorted(seg0) == [2, 3, 4, 5]
    for s in (2, 3, 4, 5):
        one, zero = seg1[s], seg0[s]
        assert sum(one.values()) == pytest.approx(8_400_000, abs=1)
        assert sum(zero.values()) == pytest.approx(8_400_000, abs=1)
        assert one[COMPUTE] == pytest.approx(5_000_000) and zero[COMPUTE] == pytest.approx(5e6)
        assert one[HOST] == pytest.approx(2_980_000, abs=1)
        assert one[UNTRACED] == pytest.approx(200_000, abs=1)
        assert one["comm_idle"] == zero["comm_idle"] == pytest.approx(20_000, abs=1)
        assert one["wait"] == 0 and zero["wait"] == pytest.approx(3_000_000, abs=1)
        assert one["transfer"] == zero["transfer"] == pytest.approx(200_000, abs=1)
        assert zero[HOST] == pytest.approx(2_000, abs=1)
        assert zero[UNTRACED] == pytest.approx(178_000, abs=1)
    chain = cross_rank_chain(con, run_id, rep.collectives, 1, 0)
    assert chain is not None and chain.late_by_step == {2: 1, 3: 1, 4: 1, 5: 1}
    got = finding(rep, con)
    assert got is not None and got.rank == 1 and got.cause == HOST and got.fix_id == "cuda_graphs"
    assert got.per_step_ms == pytest.approx(2.978, abs=1e-6)
    assert got.retimed_job_step_ms == pytest.approx(5.422, abs=1e-6)
    job = job_of(con, run_id)
    assert [p.step for p in job.path] == [2, 3, 4, 5]
    for p in job.path:
        assert p.late_rank == 1 and p.step_ms == pytest.approx(8.4, abs=1e-6)
        assert p.bound_by_ms == pytest.approx(
            {"compute": 5.0, "host": 3.18, "data": 0.0, "comm": 0.22, "wait": 0.0}, abs=1e-6
        )
        assert p.retimed_ms == pytest.approx(5.422, abs=1e-6)
    assert job.bound_by_pct == pytest.approx(
        {"compute": 500 / 8.4, "host": 318 / 8.4, "data": 0.0, "comm": 22 / 8.4, "wait": 0.0}
    )
    assert job.cause_rank == 1
    assert job.retimed_from_ms == pytest.approx(8.4)
    assert job.retimed_step_ms == pytest.approx(5.422)
    # the cause's fix comes first, on the rank it names
    assert job.first_fix is not None and job.first_fix.id == "cuda_graphs"
    assert job.first_fix.rank == 1
    doc = job.to_json()
    assert doc["critical_path"]["by_step"][0]["bound_by_ms"]["host"] == pytest.approx(3.18)
    assert doc["retimed_step_ms"] == pytest.approx(5.422) and doc["cause_rank"] == 1
    from gpuscope.analysis.job import headline_rows

    rows = {r.label: r for r in headline_rows(job)}
    assert rows["Critical path"].value == "compute-bound (59.5 %)"
    assert "rank 1 at steps 2, 3, 4, 5" in rows["Critical path"].note
    assert "2: 8.40 = compute 5.00 + host 3.18 + comm 0.220" in rows["Critical path"].note
    assert rows["Re-timed"].value == "8.40 → 5.42 ms"
    assert "2: 8.40 → 5.42" in rows["Re-timed"].note


def test_host_dispatch_partly_the_profilers(con, tmp_path):
    """Rank 1 dispatches 3,000 µs per step, and was timed at 7.0 ms per step without the profiler:
    its own GPU work 5.2 ms leaves 1.8 ms of host time, 0.2 of it untraced, so at most 1.6 of its
    2.98 ms of dispatch is real (1.38 the profiler's). The wait left, 3.0 - 1.38 = 1.62 ms, is
    over a quarter of the wait: host dispatch, excess 1.6 - 0.002 = 1.598 ms. Each step re-timed
    with that part only (each step's 2.978 ms of extra dispatch scaled by 1.598 / 2.978): 8.4 ->
    6.802 ms; the job's mean step likewise."""
    run_id = ingested(con, tmp_path, plant={(1, k): ("host", 3000.0) for k in EVERY})
    got = verdict(con, run_id, 1, untraced_step_ms=7.0)
    assert got is not None and got.rank == 1 and got.cause == HOST, got
    assert got.per_step_ms == pytest.approx(1.598, abs=1e-6)
    assert got.retimed_job_step_ms == pytest.approx(6.802, abs=1e-6)
    assert dict(got.step_retimed) == pytest.approx({k: 6.802 for k in (2, 3, 4, 5)}, abs=1e-6)


@pytest.mark.parametrize(
    ("kind", "cause", "fix", "excess", "bound"),
    [
        # rank 1 loads data 3,000 µs per step in the main process (its record_param_comms inside
        # the DataLoader span counts as data): data 3.0 ms more than rank 0's 0; on the path data
        # 3.0, host 0.2 (untraced), comm 0.2 (transfer)
        ("data", DATA, "dataloader_workers", 3.0, {"data": 3.0, "host": 0.2, "comm": 0.2}),
        # rank 1's host waits in a cudaStreamSynchronize from 1 µs into aten::item to 1 µs before
        # its end: 2,998 µs, less the 20 µs of record_param_comms inside it (communication):
        # 2.978 ms of sync; host on the path 2.978 + 0.002 (the op's ends) + 0.2 untraced
        ("sync", SYNC, "host_sync", 2.978, {"data": 0.0, "host": 3.18, "comm": 0.22}),
        # rank 1 runs a 3,000 µs broadcast of its own per step, its GPU busy in communication:
        # 3.2 ms of transfer vs rank 0's 0.2 + 0.02 of communication idle: 2.98 more
        ("comm", COMM, None, 2.98, {"data": 0.0, "host": 0.2, "comm": 3.2}),
    ],
)
def test_each_host_or_communication_cause_on_the_chain(
    con, tmp_path, kind, cause, fix, excess, bound
):
    """Rank 1 spends 3,000 µs per step on ``kind`` (steps of 8.4 ms): rank 0 waits 3.0 ms per
    step; the excess of rank 1's segment over rank 0's in that cause (``excess``, ms per step) is
    named, with its fix; each step re-timed 8.4 -> 8.4 - excess (not below rank 0's own work,
    5.4); the path (rank 1's segment) bound by compute 5.0 and ``bound``."""
    run_id = ingested(con, tmp_path, plant={(1, k): (kind, 3000.0) for k in EVERY})
    got = verdict(con, run_id, 1)
    assert got is not None and got.rank == 1 and got.cause == cause, got
    assert got.fix_id == fix
    assert got.per_step_ms == pytest.approx(excess, abs=1e-6)
    assert got.retimed_job_step_ms == pytest.approx(8.4 - excess, abs=1e-6)
    job = job_of(con, run_id)
    want = {"compute": 5.0, "wait": 0.0, **bound}
    for p in job.path:
        assert p.late_rank == 1
        assert p.bound_by_ms == pytest.approx(want, abs=1e-6), p
        assert p.retimed_ms == pytest.approx(8.4 - excess, abs=1e-6)


def test_longer_compute_on_the_chain(con, tmp_path):
    """Rank 1's kernel 7,500 µs, rank 0's 5,000: rank 0 waits 2.5 ms per step; rank 1's segment
    7.9 ms = 7.5 compute + 0.2 host + 0.2 comm; it computes 50 % more (7.5 vs 5.0 ms); each step
    re-timed 7.9 -> 5.4 ms."""
    run_id = ingested(con, tmp_path, compute_us=(5000.0, 7500.0))
    got = verdict(con, run_id, 1)
    assert got is not None and got.rank == 1 and got.cause == COMPUTE
    assert got.fix_id == "load_imbalance"
    assert "rank 1 computes 50.0 % more per step (7.50 vs 5.00 ms" in got.words
    job = job_of(con, run_id)
    assert job.bound_by_pct is not None
    assert job.bound_by_pct["compute"] == pytest.approx(100 * 7.5 / 7.9)
    assert [p.retimed_ms for p in job.path] == pytest.approx([5.4] * 4)
    assert job.retimed_step_ms == pytest.approx(5.4)


def test_spikes_at_a_few_steps(con, tmp_path):
    """Rank 1 sleeps 6,000 µs (no traced op) at steps 2 and 4 only: those steps last 11.4 ms,
    the others 5.4. The straggler's caused wait (12 ms over 5 steps) sits at steps 2 and 4: said
    as spikes. The chain's steps 2-5: untraced host time 3.0 ms per step more on rank 1 (12 ms
    over 4 segments). Re-timed by step: 11.4 -> 5.4 at steps 2 and 4, 5.4 stays at 3 and 5; the
    job's mean step (its 4 periods: 11.4, 5.4, 11.4, 5.4) 8.4 -> 5.4 ms."""
    run_id = ingested(
        con, tmp_path, plant={(1, 2): ("untraced", 6000.0), (1, 4): ("untraced", 6000.0)}
    )
    got = verdict(con, run_id, 1)
    assert got is not None and got.rank == 1 and got.cause == UNTRACED
    assert got.pattern == "spikes" and got.spike_steps == (2, 4)
    assert got.per_step_ms == pytest.approx(3.0, abs=0.01)
    assert "at a few steps only (steps 2, 4)" in got.words
    job = job_of(con, run_id)
    by = {p.step: (p.step_ms, p.retimed_ms) for p in job.path}
    assert by == {
        2: pytest.approx((11.4, 5.4), abs=0.01),
        3: pytest.approx((5.4, 5.4), abs=0.01),
        4: pytest.approx((11.4, 5.4), abs=0.01),
        5: pytest.approx((5.4, 5.4), abs=0.01),
    }
    assert job.retimed_from_ms == pytest.approx(8.4, abs=0.01)
    assert job.retimed_step_ms == pytest.approx(5.4, abs=0.01)


def test_a_straggler_that_moves_is_said_as_such(con, tmp_path):
    """Rank 1 dispatches 3,000 µs at steps 2 and 3, rank 0 at steps 4 and 5: each causes 6 ms of
    wait (the tie goes to rank 0, 50 % of all caused wait < 75 %): moving, abstained, and the
    words say which rank sets the pace at which steps; the job's path changes rank with them."""
    plant = {(1, 2): ("host", 3000.0), (1, 3): ("host", 3000.0)}
    plant |= {(0, 4): ("host", 3000.0), (0, 5): ("host", 3000.0)}
    run_id = ingested(con, tmp_path, plant=plant)
    got = verdict(con, run_id, 0)
    assert got is not None and got.rank == 0 and got.pattern == "moving"
    assert got.cause == ABSTAINED and got.fix_id is None
    assert "it sets the pace rank 0 at steps 4, 5; rank 1 at steps 2, 3" in got.words
    job = job_of(con, run_id)
    assert {p.step: p.late_rank for p in job.path} == {2: 1, 3: 1, 4: 0, 5: 0}
    assert job.retimed_step_ms is None
    from gpuscope.analysis.job import headline_rows

    rows = {r.label: r for r in headline_rows(job)}
    assert "rank 0 at steps 4, 5; rank 1 at steps 2, 3" in rows["Critical path"].note
    assert "Re-timed" not in rows


def test_more_compute_hidden_by_the_profiler(con, tmp_path):
    """Rank 0 dispatches 4,000 µs per step under the profiler (its host op), rank 1 computes
    7,500 µs to rank 0's 5,000: under the profiler rank 0 arrives last (100 + 4,000 + 5,000 =
    9,100 vs 7,600 µs), rank 1 waits 1.5 ms per step. Rank 0 was timed at 7.9 ms per step without
    the profiler (the job's step with rank 1 computing 7.5 ms): its own GPU work 5.2 ms (5.0 + the
    0.2 ms transfer) leaves 2.7 ms of host time, 0.2 of it untraced, so at most 2.5 of its 3.98 ms
    of dispatch (4,000 less its record_param_comms' 20 µs) is real: 1.48 ms is the profiler's,
    all but 0.02 ms of the wait (left: 1 % < 25 %). Once it is gone rank 1
    sets the pace: it computes 50 % more (7.5 vs 5.0 ms; no FLOPs counted, kernel time 50 % >
    25 %). Re-timed on the measured 7.9 ms: 7.9 - 2.5 = 5.4 ms (not below rank 0's 5.2 ms of own
    work). Its fix (load_imbalance) comes first, on rank 1."""
    run_id = ingested(
        con, tmp_path, compute_us=(5000.0, 7500.0), plant={(0, k): ("host", 4000.0) for k in EVERY}
    )
    got = verdict(con, run_id, 0, untraced_step_ms=7.9)
    assert got is not None and got.rank == 1 and got.cause == COMPUTE, got
    assert got.profiled_rank == 0 and got.fix_id == "load_imbalance"
    assert "rank 1 computes 50.0 % more per step (its kernels take 7.50 vs 5.00 ms on rank 0)" in (
        got.words
    )
    assert "1.48 ms per step of rank 0's dispatch is the profiler's own cost" in got.words
    assert got.job_step_ms == pytest.approx(7.9) and got.retimed_job_step_ms == pytest.approx(5.4)
    job = job_of(con, run_id, untraced_step_ms=7.9)
    assert job.pace_setter == 0 and job.cause_rank == 1
    assert job.first_fix is not None and job.first_fix.id == "load_imbalance"
    assert job.first_fix.rank == 1
    from gpuscope.analysis.job import headline_rows

    rows = {r.label: r for r in headline_rows(job)}
    assert "once its cost is gone rank 1 sets the pace" in rows["Pace-setter"].note
    assert rows["Re-timed"].value == "7.90 → 5.40 ms"
    assert rows["Why"].value.startswith("Rank 1 sets the pace once the profiler's cost is gone")


def test_a_waiting_ranks_slower_kernels_are_not_more_work(con, tmp_path):
    """The same, but rank 1's kernel only 10 % longer (5,500 µs: what a waiting rank's kernels
    lose beside the collective kernels spinning on its SMs): under 25 % without counted FLOPs, so
    the profiler stays the cause (rank 0 timed at 5.9 ms: at most 0.7 - 0.2 = 0.5 of its 3.98 ms
    of dispatch is real, 3.48 ms of the 3.5 it makes rank 1 wait is the profiler's)."""
    run_id = ingested(
        con, tmp_path, compute_us=(5000.0, 5500.0), plant={(0, k): ("host", 4000.0) for k in EVERY}
    )
    got = verdict(con, run_id, 0, untraced_step_ms=5.9)
    assert got is not None and got.rank == 0 and got.cause == PROFILER, got
    assert got.profiled_rank is None
    assert got.retimed_job_step_ms == pytest.approx(5.9)
