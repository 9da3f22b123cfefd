"""The pace-setter's own cause across ranks (gpuscope.analysis.straggler_cause): hand-made 2-rank
traces, each with one planted cause, analysed from the store; the answers computed by hand.

Every trace: 5 steps. In a step, each rank idles 100 µs, then (where planted) loads data in the
main process (a DataLoader ``__next__`` span) and/or dispatches on the CPU (a host op with the
GPU idle), then computes (one kernel), then enters an all-reduce; the all-reduce ends 200 µs after
the last rank arrives and the step 100 µs later, on both ranks (the early rank waits)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.analysis.straggler_cause import (
    ABSTAINED,
    COMPUTE,
    DATA,
    HOST,
    PROFILER,
    CauseFigure,
    finding,
    pace_setter_cause,
)
from tracegen import TraceBuilder

KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
N_STEPS = 5

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


def write_pair(
    d: Path,
    compute_us: tuple[float, float],
    host_us: dict[tuple[int, int], float] | None = None,
    data_us: dict[tuple[int, int], float] | None = None,
    untraced_us: dict[tuple[int, int], float] | None = None,
) -> None:
    """``host_us`` / ``data_us`` / ``untraced_us``: (rank, step) -> µs of CPU dispatch (inside a
    host op) / data loading / host time in no traced op (e.g. a sleep) planted."""
    host_us, data_us = host_us or {}, data_us or {}
    for key, v in (untraced_us or {}).items():  # the same delay, with no op around it
        host_us[key] = host_us.get(key, 0.0) + v
    builders = [TraceBuilder(rank=r, world_size=2) for r in (0, 1)]
    start = 0.0
    for k in range(1, N_STEPS + 1):
        ready = [
            100.0 + host_us.get((r, k), 0.0) + data_us.get((r, k), 0.0) + compute_us[r]
            for r in (0, 1)
        ]
        last = max(ready)
        period = last + 300.0
        for r, t in enumerate(builders):
            data, host = data_us.get((r, k), 0.0), host_us.get((r, k), 0.0)
            t.step(k, start, period)
            if data:
                t.cpu_op(
                    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", start + 50, data
                )
            if host - (untraced_us or {}).get((r, k), 0.0) > 0:
                t.cpu_op("aten::index", start + 50 + data, host)
            t.launch(
                "volta_sgemm_128x64_nn",
                start + 60 + data + host,
                start + 100 + data + host,
                compute_us[r],
            )
            t.cpu_op(
                "record_param_comms",
                start + 70 + data + host,
                20.0,
                **{"Input Dims": [[[1048576]], [], []], "Input type": ["TensorList", "", ""]},
            )
            t.launch(
                KERNEL, start + 75 + data + host, start + ready[r], last + 200 - ready[r], stream=17
            )
        start += period
    for r, t in enumerate(builders):
        t.write(d / f"r{r}.json")


def analysed(con, tmp_path, rank: int = 1, untraced_step_ms: float | None = None, **plant):
    """The rank's report of the planted pair, ingested into ``con``."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    d = tmp_path / "run"
    d.mkdir()
    write_pair(d, **plant)
    [res] = ingest_paths(con, [d])
    return analyze_run(
        con, res.run_id, rank=rank, with_path=False, untraced_step_ms=untraced_step_ms
    )


@pytest.mark.slow
def test_host_bound_rank_1(con, tmp_path):
    """Rank 1 dispatches 3,000 µs per step with its GPU idle: rank 0 waits 3.0 ms per step.
    Rank 1's host idle (CPU overhead) 100 + 3,000 + 100 µs = 3.2 ms per step, rank 0's 0.2 ms:
    excess 3.0 ms. The job step 100 + 3,000 + 5,000 + 300 = 8.4 ms, re-timed 8.4 - 3.0 = 5.4 ms."""
    hosts = {(1, k): 3000.0 for k in range(1, N_STEPS + 1)}
    rep = analysed(con, tmp_path, compute_us=(5000.0, 5000.0), host_us=hosts)
    got = finding(rep)
    assert got is not None and got.rank == 1 and got.cause == HOST
    assert got.wait_ms_per_step == pytest.approx(3.0, abs=0.01)
    assert got.per_step_ms == pytest.approx(3.0, abs=0.05)
    assert got.job_step_ms == pytest.approx(8.4, abs=0.01)
    assert got.retimed_job_step_ms == pytest.approx(5.4, abs=0.05)
    assert got.fix_id == "cuda_graphs" and got.pattern == "steady"
    assert "rank 0 waits 3.00 ms per step for rank 1" in got.words
    assert got.gain_pct == pytest.approx(100 * 3.0 / 8.4, abs=0.7)


@pytest.mark.slow
def test_host_bound_under_the_profiler_is_the_profiler(con, tmp_path):
    """The same run timed at 5.5 ms per step without the profiler: rank 1's GPU is busy 5.2 ms
    per step (compute 5,000 + all-reduce 200 µs), so at most 0.3 ms of host idle can exist
    untraced, under half of its 3.2 ms: the profiler's own cost, no fix."""
    hosts = {(1, k): 3000.0 for k in range(1, N_STEPS + 1)}
    rep = analysed(con, tmp_path, compute_us=(5000.0, 5000.0), host_us=hosts, untraced_step_ms=5.5)
    got = finding(rep)
    assert got is not None and got.cause == PROFILER and got.fix_id is None
    assert got.retimed_job_step_ms == pytest.approx(5.5)  # measured, not modelled
    assert "profiler" in got.words


@pytest.mark.slow
def test_rank_1_computes_one_and_a_half_times(con, tmp_path):
    """Rank 1's kernel 7,500 µs, rank 0's 5,000: rank 0 waits 2.5 ms per step; rank 1 computes
    50 % more (7.5 vs 5 ms per step); the job step 100 + 7,500 + 300 = 7.9 ms -> 5.4 ms."""
    rep = analysed(con, tmp_path, compute_us=(5000.0, 7500.0))
    got = finding(rep)
    assert got is not None and got.rank == 1 and got.cause == COMPUTE
    assert got.per_step_ms == pytest.approx(2.5, abs=0.05)
    assert got.fix_id == "load_imbalance"
    assert got.retimed_job_step_ms == pytest.approx(5.4, abs=0.05)
    assert "rank 1 computes 50.0 % more per step (7.50 vs 5.00 ms" in got.words


@pytest.mark.slow
def test_data_stall_at_steps_2_and_4_only(con, tmp_path):
    """Rank 1 loads data 4,000 µs at steps 2 and 4: rank 0 waits 8 ms in all, 1.6 ms per step;
    rank 1's data-loading idle 1.6 ms per step, rank 0's 0; said as spikes at steps 2 and 4."""
    data = {(1, 2): 4000.0, (1, 4): 4000.0}
    rep = analysed(con, tmp_path, compute_us=(5000.0, 5000.0), data_us=data)
    got = finding(rep)
    assert got is not None and got.rank == 1 and got.cause == DATA
    assert got.wait_ms_per_step == pytest.approx(1.6, abs=0.01)
    assert got.per_step_ms == pytest.approx(1.6, abs=0.05)
    assert got.pattern == "spikes" and got.spike_steps == (2, 4)
    # the mean step (3 x 5.4 + 2 x 9.4) / 5 = 7.0 ms loses the stall: 5.4 ms, the unstalled step
    assert got.job_step_ms == pytest.approx(7.0, abs=0.01)
    assert got.retimed_job_step_ms == pytest.approx(5.4, abs=0.05)
    assert got.fix_id == "dataloader_workers"
    assert "at a few steps only (steps 2, 4)" in got.words


@pytest.mark.slow
def test_nothing_planted_no_pace_setter(con, tmp_path):
    """Both ranks alike: every all-reduce starts together, no rank waits: no straggler, None."""
    rep = analysed(con, tmp_path, rank=0, compute_us=(5000.0, 5000.0))
    assert rep.straggler is None
    assert finding(rep) is None


@pytest.mark.slow
def test_two_causes_alike_abstain(con, tmp_path):
    """Rank 1 loads data 1,500 µs and dispatches 1,500 µs every step: rank 0 waits 3 ms; data
    excess 1.5, host excess 1.5 ms: neither singles out the wait, so it abstains with no fix and
    no re-timing."""
    both = {(1, k): 1500.0 for k in range(1, N_STEPS + 1)}
    rep = analysed(con, tmp_path, compute_us=(5000.0, 5000.0), host_us=both, data_us=both)
    got = finding(rep)
    assert got is not None and got.cause == ABSTAINED
    assert got.fix_id is None and got.retimed_job_step_ms is None and got.gain_pct is None
    assert "abstained: two causes weigh alike" in got.words


@pytest.mark.slow
def test_a_straggler_that_moves_between_ranks(con, tmp_path):
    """Rank 1 dispatches 3,000 µs at steps 1-2, rank 0 at steps 3-5: rank 1 causes 6 ms of wait,
    rank 0 9 ms: the straggler (rank 0) causes 60 % < 75 %: said as moving, abstained."""
    hosts = {(1, 1): 3000.0, (1, 2): 3000.0, (0, 3): 3000.0, (0, 4): 3000.0, (0, 5): 3000.0}
    rep = analysed(con, tmp_path, rank=0, compute_us=(5000.0, 5000.0), host_us=hosts)
    got = finding(rep)
    assert got is not None and got.rank == 0 and got.pattern == "moving"
    assert got.cause == ABSTAINED
    assert dict(got.rank_shares) == pytest.approx({0: 60.0, 1: 40.0}, abs=0.5)
    assert "moves between ranks" in got.words


def test_rules_on_figures_alone():
    """The rule without a store: an excess under half the wait abstains; no other rank, None."""
    from gpuscope.analysis.collectives import Straggler
    from gpuscope.analysis.rank_row import RankRow

    s = Straggler(
        1, 10_000_000, {1: 10_000_000}, 5, 5, {"backward": 10_000_000}, {}, 0, 10_000_000, 5
    )
    idle = {"cpu_overhead": 500.0, "launch_overhead": 0.0}
    lines = [
        RankRow(0, 90.0, 10.0, 0.0, idle_by_cause_us_per_step={"cpu_overhead": 0.0}),
        RankRow(1, 90.0, 10.0, 0.0, idle_by_cause_us_per_step=idle),
    ]
    got = pace_setter_cause(s, lines, job_step_ms=10.0)
    assert got is not None and got.cause == ABSTAINED and "under 50%" in got.words
    assert pace_setter_cause(s, lines[1:]) is None
    assert pace_setter_cause(None, lines) is None
    assert CauseFigure("compute", 3.0, 2.0).excess_ms == 1.0


@pytest.mark.slow
def test_the_ddp_sample_rank_1_is_the_profilers(con):
    """The real DDP pair (2 x H200, torch 2.11): rank 0 waits 21.6 ms per step for rank 1, whose
    GPU idles 18.0 ms per step on CPU and launch overhead (rank 0: 1.0 ms). Rank 1 was timed at
    11.1 ms per step without the profiler (its metadata), GPU busy ~5.8 ms: at most 5.27 ms of host
    time can exist untraced, so the host time is the profiler's; the job's step without it is the
    measured 11.1 ms (the sample's unprofiled job: 12.9 ms mean, 12.8 median)."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    [res] = ingest_paths(con, [Path(__file__).parent.parent / "sample_traces" / "ddp"])
    got = finding(analyze_run(con, res.run_id, rank=1, with_path=False))
    assert got is not None and got.rank == 1 and got.cause == PROFILER
    assert got.wait_ms_per_step == pytest.approx(21.6, abs=0.05)
    assert got.retimed_job_step_ms == pytest.approx(11.112)
    # its 18.0 ms of host idle less what the cap leaves (5.27 ms) is the profiler's
    host = next(c for c in got.candidates if c.cause == HOST)
    assert host.pace_ms == pytest.approx(5.27, abs=0.01)
    assert got.per_step_ms == pytest.approx(18.04 - 5.27, abs=0.05)


def test_communication_and_sync_causes_on_figures():
    """Figures alone: rank 1 spends 4 ms more per step in its own transfers (20 % of a 20 ms
    step vs 0 %) while rank 0 waits 4 ms: communication, no fix; rank 1 idles 3 ms per step in a
    host sync while rank 0 waits 3 ms: host_sync, its unit."""
    from gpuscope.analysis.collectives import Straggler
    from gpuscope.analysis.rank_row import RankRow

    def strag(wait_ms: float) -> Straggler:
        ns = int(wait_ms * 5e6)
        return Straggler(1, ns, {1: ns}, 5, 5, {"backward": ns}, {}, 0, ns, 5)

    zero = {"cpu_overhead": 0.0}
    comm = [
        RankRow(0, 90.0, 20.0, 0.0, idle_by_cause_us_per_step=zero, comm_transfer_pct=0.0),
        RankRow(1, 90.0, 20.0, 0.0, idle_by_cause_us_per_step=zero, comm_transfer_pct=20.0),
    ]
    got = pace_setter_cause(strag(4.0), comm, job_step_ms=20.0)
    assert got is not None and got.cause == "communication" and got.fix_id is None
    assert got.per_step_ms == pytest.approx(4.0) and got.retimed_job_step_ms == pytest.approx(16.0)
    sync = [
        RankRow(0, 90.0, 20.0, 0.0, idle_by_cause_us_per_step={"host_sync": 0.0}),
        RankRow(1, 90.0, 20.0, 0.0, idle_by_cause_us_per_step={"host_sync": 3000.0}),
    ]
    got = pace_setter_cause(strag(3.0), sync, job_step_ms=20.0)
    assert got is not None and got.cause == "host_sync" and got.fix_id == "host_sync"
    assert got.retimed_job_step_ms == pytest.approx(17.0)


@pytest.mark.slow
def test_untraced_host_time_is_not_dispatch(con, tmp_path):
    """Rank 1's host is in no traced op for 3,000 µs per step (a sleep in its data path): with the
    store at hand the 3.0 ms of idle is untraced host time (3.178 vs 0.178 ms on rank 0), not
    dispatch (0 on both): host_untraced, no registered fix (CUDA graphs would not help); the
    profiler is not blamed even with a small host cap."""
    from gpuscope.analysis.straggler_cause import UNTRACED, untraced_idle_ms

    sleeps = {(1, k): 3000.0 for k in range(1, N_STEPS + 1)}
    rep = analysed(
        con, tmp_path, compute_us=(5000.0, 5000.0), untraced_us=sleeps, untraced_step_ms=5.5
    )
    run_id = rep.run["id"]
    # by hand, per step: the 200 µs gap around the step's start less the 22 µs of host ops in it
    # (a 2 µs launch, the 20 µs record_param_comms holding the other launch): 178 µs; rank 1: + 3,000
    assert untraced_idle_ms(con, run_id, 0) == pytest.approx(0.178, abs=1e-6)
    assert untraced_idle_ms(con, run_id, 1) == pytest.approx(3.178, abs=1e-6)
    got = finding(rep, con)
    assert got is not None and got.cause == UNTRACED and got.fix_id is None
    assert got.per_step_ms == pytest.approx(3.0, abs=0.05)
    assert "record_function or py-spy" in got.words
    # without the store the same idle reads as host dispatch, under the profiler's cap
    assert finding(rep).cause == PROFILER


MULTI_GPU = Path(__file__).parent.parent / "sample_traces" / "multi_gpu"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "pace", "named", "cause", "spikes", "note"),
    [
        # nothing planted: rank 1 is host-bound under the profiler only
        ("ddp_clean", 1, 1, PROFILER, (), None),
        # rank 1 sleeps in its data path (no traced op) every step
        ("ddp_straggler_every", 1, 1, "host_untraced", (), None),
        # ... at profiled steps 9 and 11 only (3 x the clean step)
        ("ddp_straggler_steps", 1, 1, "host_untraced", (9, 11), None),
        # rank 1's batch is 1.5 x: under the profiler rank 0 is late (the profiler's cost), and
        # once that is gone rank 1 sets the pace: its kernels 11.2 vs 7.40 ms per step (the chain's
        # segments), 50 % more counted FLOPs
        ("ddp_uneven", 0, 1, COMPUTE, (), "rank 1 computes 51.1 % more per step"),
    ],
)
def test_real_two_gpu_runs_with_a_planted_straggler(con, case, pace, named, cause, spikes, note):
    """The real 2 x H100 runs of sample_traces/multi_gpu (torch 2.11, DDP), each with its
    planted behaviour (record_multi_gpu.py): the pace-setter, its own cause, the steps."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    [res] = ingest_paths(con, [MULTI_GPU / case])
    got = finding(analyze_run(con, res.run_id, rank=pace, with_path=False), con)
    assert got is not None and got.rank == named and got.cause == cause, got
    assert got.spike_steps == spikes
    if note is None:
        assert "FLOPs per step" not in got.words
    else:
        assert note in got.words


def test_host_causes_together_explain_the_wait_on_figures():
    """Figures alone, rank 1 the straggler, rank 0 waiting 8 ms per step of a 20 ms job step.
    Rank 1 idles 3 ms per step in a sync and 2.5 ms on CPU overhead more than rank 0: neither
    alone is half the wait (4 ms), together 5.5 ms are: ``host_work``, fixed by taking the work off
    rank 1's step (``load_imbalance``), the step re-timed 20 − 5.5 = 14.5 ms. With 3 ms of data
    loading beside them (another cause, 5.5 < 2 × 3) it abstains; with the sync alone at 4.5 ms
    (over half the wait, 1.8 × the dispatch's 2.5: not singled out) the two together (7 ms,
    no other cause) name ``host_work`` too, and a sync of 6 ms alone names ``host_sync``. Without
    a sync (3 ms of dispatch, 2.5 ms of code no op holds) the two are not weighed together: it
    abstains, as before."""
    from gpuscope.analysis.collectives import Straggler
    from gpuscope.analysis.rank_row import RankRow
    from gpuscope.analysis.straggler_cause import HOST_WORK

    ns = int(8.0 * 5e6)
    s = Straggler(1, ns, {1: ns}, 5, 5, {"backward": ns}, {}, 0, ns, 5)

    def lines(**rank1_us: float) -> list:
        zero = {"cpu_overhead": 0.0, "host_sync": 0.0, "data_loading": 0.0}
        return [
            RankRow(0, 90.0, 20.0, 0.0, idle_by_cause_us_per_step=zero),
            RankRow(1, 90.0, 20.0, 0.0, idle_by_cause_us_per_step={**zero, **rank1_us}),
        ]

    got = pace_setter_cause(s, lines(host_sync=3000.0, cpu_overhead=2500.0), job_step_ms=20.0)
    assert got is not None and got.cause == HOST_WORK and got.fix_id == "load_imbalance"
    assert got.per_step_ms == pytest.approx(5.5)
    assert got.retimed_job_step_ms == pytest.approx(14.5)
    assert ".tolist()" in got.words
    split = lines(host_sync=3000.0, cpu_overhead=2500.0, data_loading=3000.0)
    assert pace_setter_cause(s, split, job_step_ms=20.0).cause == ABSTAINED
    both = pace_setter_cause(s, lines(host_sync=4500.0, cpu_overhead=2500.0), job_step_ms=20.0)
    assert both.cause == HOST_WORK and both.retimed_job_step_ms == pytest.approx(13.0)
    alone = pace_setter_cause(s, lines(host_sync=6000.0, cpu_overhead=500.0), job_step_ms=20.0)
    assert alone.cause == "host_sync" and alone.fix_id == "host_sync"
    # dispatch and code no op holds without a sync: not weighed together (v209, v39)
    u = {1: 2.5}
    no_sync = pace_setter_cause(s, lines(cpu_overhead=5500.0), job_step_ms=20.0, untraced_ms=u)
    assert no_sync.cause == ABSTAINED


@pytest.mark.slow
def test_v210_rank_0s_metric_on_the_host_is_its_own_host_work(con):
    """v210 (fifteenth blind part, 2 x H200, DDP): rank 0 alone reads its predictions with
    .tolist() after each step and scores them in Python; rank 1 waits 50.9 ms per step for it. As
    traced, rank 0's GPU idles 17.3 ms per step in the sync, 16.6 ms on dispatch and 2.4 ms in
    untraced code more than rank 1's: none half the wait, together 36.3 ms, capped at rank 0's
    26.3 ms of host time without the profiler. The job names that host work and takes it off rank
    0's step; the range holds the 36.7 % the metric kept on the GPU measured (5 rounds). Set after
    the part's judgement, which abstained: v210 is seen."""
    from gpuscope.analysis.job import diagnose, memo
    from gpuscope.analysis.report import analyze_run
    from gpuscope.analysis.straggler_cause import HOST_WORK
    from gpuscope.ingest.loader import ingest_paths

    val = Path(__file__).parent.parent / "sample_traces" / "validation"
    [res] = ingest_paths(con, [val / "v210"])
    got = finding(analyze_run(con, res.run_id, rank=0, with_path=False), con)
    assert got is not None and got.rank == 0 and got.cause == HOST_WORK
    assert got.wait_ms_per_step == pytest.approx(50.9, abs=0.05)
    j = diagnose(con, res.run_id, memo(lambda k: analyze_run(con, res.run_id, rank=k)))
    fix = j.first_fix
    assert fix is not None and fix.id == "load_imbalance", fix
    assert fix.title == "Take rank 0's own host work and syncs off its step"
    truth = {c["case"]: c for c in json.loads((val / "truth.json").read_text())["cases"]}
    measured = truth["v210"]["gain_pct"]
    assert fix.low_pct is not None and fix.high_pct is not None
    assert fix.low_pct <= measured <= fix.high_pct
