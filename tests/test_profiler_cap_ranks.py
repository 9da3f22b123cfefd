"""The profiler's host-side cap of a rank that waits for another (docs/metrics.md, "Profiler
cost"): untraced step − the rank's OWN GPU work per step (compute + transfer), the wait in
collectives for the last rank left out. Counting that wait as busy collapsed the cap to 0 ms on
every waiting rank (issue 46: `analyze ddp` printed "capped at 0 ms per step").

A hand-made 2-rank trace, 4 steps, answers by hand. In each 3,400 µs step both ranks start a
matrix multiply at 100 µs, rank 0's lasting 1,000 µs and rank 1's 3,000 µs; each then enters an
all-reduce as its GEMM ends, which ends on both 200 µs after the last rank (rank 1) arrives:

* rank 0: GEMM 100-1,100, all-reduce 1,100-3,300 (2,200 µs: 2,000 waiting for rank 1, 200
  moving data). GPU busy 3,200 µs per step, its own work 1,000 + 200 = 1,200 µs.
* rank 1: GEMM 100-3,100, all-reduce 3,100-3,300 (200 µs, no wait). Busy = own = 3,200 µs.

Without the profiler the step takes 3.4 ms (given): rank 0's cap 3.4 − 1.2 = 2.2 ms per step
(it was 3.4 − 3.2 = 0.2 ms), rank 1's 3.4 − 3.2 = 0.2 ms (unchanged)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis.profiler_cost import own_busy_ms_per_step
from tracegen import ddp_job

N_STEPS, PERIOD, UNTRACED_MS = 4, 3400.0, 3.4
COMPUTE = (1000.0, 3000.0)


def write_pair(d: Path) -> None:
    ddp_job(d, COMPUTE, steps=N_STEPS, period=PERIOD)


@pytest.fixture
def run_id(con, tmp_path: Path) -> str:
    from gpuscope.ingest.loader import ingest_paths

    d = tmp_path / "pair"
    d.mkdir()
    write_pair(d)
    [res] = ingest_paths(con, [d])
    return str(res.run_id)


def test_the_cap_leaves_out_the_wait_for_the_other_rank(con, run_id: str) -> None:
    from gpuscope.analysis.report import analyze_run

    caps = {}
    for rank in (0, 1):
        rep = analyze_run(con, run_id, rank=rank, with_path=False, untraced_step_ms=UNTRACED_MS)
        assert rep.profiler is not None
        caps[rank] = (rep.profiler.gpu_busy_ms_per_step, rep.profiler.host_cap_ms_per_step)
    assert caps[0] == (pytest.approx(1.2), pytest.approx(2.2))  # was (3.2, 0.2)
    assert caps[1] == (pytest.approx(3.2), pytest.approx(0.2))


def test_own_busy_by_hand() -> None:
    # steps busy 3.0, 3.2, 5.0 ms (median 3.2); over the window 12 ms busy of which 3 ms waiting:
    # own work 3.2 x (1 - 3/12) = 2.4 ms per step
    got = own_busy_ms_per_step([3_000_000, 3_200_000, 5_000_000], 12_000_000, 3_000_000, 3)
    assert got == pytest.approx(2.4)
    assert own_busy_ms_per_step([1_000_000], 1_000_000, 0, 1) == pytest.approx(1.0)  # no wait
    assert own_busy_ms_per_step([1_000_000], 1_000_000, 5_000_000, 1) == 0.0  # never below 0
    # no per-step busy (a report without details): the window's mean, 9 ms / 2 x (1 - 1/9)
    assert own_busy_ms_per_step([None, None], 9_000_000, 1_000_000, 2) == pytest.approx(4.0)
    assert own_busy_ms_per_step([], 0, 0, 2) == 0.0  # no GPU activity


@pytest.mark.slow
def test_the_ddp_samples_waiting_rank_is_not_capped_at_0() -> None:
    """The real DDP pair's rank 0 (waits ~20 ms a step for rank 1; 11.2 ms per step untraced,
    its capture's metadata): its cap is the untraced step less its own work, not 0."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    con = connect(":memory:")
    try:
        [r] = ingest_paths(con, [Path(__file__).resolve().parent.parent / "sample_traces" / "ddp"])
        pc = analyze_run(con, r.run_id, rank=0, with_path=False).profiler
    finally:
        con.close()
    assert pc is not None and pc.untraced_step_ms is not None
    assert 0 < pc.gpu_busy_ms_per_step < pc.untraced_step_ms
    cap = pc.host_cap_ms_per_step
    assert cap is not None and cap == pytest.approx(pc.untraced_step_ms - pc.gpu_busy_ms_per_step)
    assert cap > 1.0
