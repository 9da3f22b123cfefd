"""A pace-setter bound by its host's dispatch whose waiting rank's host works as long
(gpuscope.analysis.straggler_cause: ``host_work_per_step``, ``SAME_DISPATCH``; docs/metrics.md,
"The pace-setter's own cause"): hand-built traces and figures with the answers computed by hand,
and the real tensor-parallel pair v27 (eager DTensor on both ranks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis.straggler_cause import HOST, host_work_per_step, pace_setter_cause
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent


def _one_rank(d: Path) -> Path:
    """Two steps of 1,000 µs (ts 0 and 1,000).

    Step 1: aten::mm 100-400 launches a kernel that runs 200-700; aten::item 500-800 holds a
    cudaMemcpyAsync 510-790 whose copy runs 700-720: the kernel and the copy end inside the call,
    so the host is blocked 510-720 (210 µs). Host spans' union 300 + 300 = 600, work 390.
    Step 2: aten::add 1,100-1,300 holds cudaStreamSynchronize 1,150-1,250 (a sync: 100 µs
    blocked); aten::a 1,500-1,600 and aten::b 1,550-1,700 overlap (union 200). Work 400 - 100 =
    300. Per step: (390 + 300) / 2 = 345 µs = 0.345 ms."""
    t = TraceBuilder(rank=0, world_size=1)
    t.step(1, 0, 1000)
    t.cpu_op("aten::mm", 100, 300)
    t.launch("sm90_xmma_gemm_bf16bf16", 150, 200, 500)
    t.cpu_op("aten::item", 500, 300)
    corr = t.runtime("cudaMemcpyAsync", 510, 280)
    t.gpu("Memcpy DtoH (Device -> Pageable)", 700, 20, correlation=corr, cat="gpu_memcpy")
    t.step(2, 1000, 1000)
    t.cpu_op("aten::add", 1100, 200)
    t.launch("vectorized_elementwise_kernel", 1110, 1120, 20)
    t.runtime("cudaStreamSynchronize", 1150, 100)
    t.cpu_op("aten::a", 1500, 100)
    t.cpu_op("aten::b", 1550, 150)
    return t.write(d / "r0.json")


def test_host_work_per_step_by_hand(con, tmp_path):
    from gpuscope.ingest.loader import ingest_paths

    [res] = ingest_paths(con, [_one_rank(tmp_path)])
    assert host_work_per_step(con, res.run_id, 0) == pytest.approx(0.345, abs=1e-6)


def _figures(pace_host_ms: float | None, waiting_host_ms: float | None, ops: bool = False):
    """Rank 1 idles 10 ms per step on CPU overhead (rank 0: 0) and rank 0 waits 10 ms per step
    for it, job step 20 ms: removed, 20 - 10 = 10 ms."""
    from gpuscope.analysis.collectives import Straggler
    from gpuscope.analysis.rank_row import RankRow

    ns = 50_000_000  # 10 ms per step over 5 steps
    s = Straggler(1, ns, {1: ns}, 5, 5, {"backward": ns}, {}, 0, ns, 5)
    lines = [
        RankRow(0, 90.0, 20.0, 0.0, idle_by_cause_us_per_step={"cpu_overhead": 0.0}),
        RankRow(1, 50.0, 20.0, 0.0, idle_by_cause_us_per_step={"cpu_overhead": 10_000.0}),
    ]
    hw = {r: v for r, v in ((1, pace_host_ms), (0, waiting_host_ms)) if v is not None} or None
    host_ops = {1: 2000.0, 0: 1000.0} if ops else None
    return pace_setter_cause(s, lines, job_step_ms=20.0, host_work=hw, host_ops=host_ops)


def test_shared_dispatch_on_figures():
    """Rank 0's host works 16 ms per step (rank 1's 18): no step below 16 ms, gain 20 - 16 = 4 ms
    against 10 without the floor, under half of it: every rank's dispatch, said so. With 14 ms,
    gain 6 of 10: rank 1's own, the figures beside it. Unknown host work: 10 ms as before. Host
    work of its own (twice the host ops): not floored, not shared."""
    got = _figures(18.0, 16.0)
    assert got is not None and got.cause == HOST
    assert got.retimed_job_step_ms == pytest.approx(16.0)
    assert "every rank's host is busy for most of its step" in got.words
    assert "rank 1 18.0 ms, rank 0 16.0 ms" in got.words
    assert "look at rank 1's CPU" not in got.words
    assert got.to_json()["host_work_ms_per_step"] == {"0": 16.0, "1": 18.0}

    alone = _figures(18.0, 14.0)
    assert alone is not None and alone.retimed_job_step_ms == pytest.approx(14.0)
    assert "every rank's host" not in alone.words
    assert "look at rank 1's CPU" in alone.words
    assert "(traced host work per step: rank 1 18.0 ms, rank 0 14.0 ms)" in alone.words

    unknown = _figures(None, None)
    assert unknown is not None and unknown.retimed_job_step_ms == pytest.approx(10.0)
    assert "traced host work" not in unknown.words

    own = _figures(18.0, 16.0, ops=True)
    assert own is not None and own.retimed_job_step_ms == pytest.approx(10.0)
    assert "every rank's host" not in own.words


@pytest.mark.slow
def test_v27_every_rank_dispatches(con):
    """v27 (2 x H200, tensor parallel, eager DTensor, torch.compile timed 58.5 % faster): rank 1
    arrives last at 72 of 72 all-reduces and rank 0 waits 63.3 ms per step, yet rank 0's host works
    57.9 ms per step against rank 1's 62.1 (the same dispatch: its GPU waits in the all-reduces).
    Rank 1's excess removed alone would give 27.4 ms; no step goes below rank 0's 57.9 ms, 59.3
    ms: every rank's dispatch, and the first fix compiles the model on every rank."""
    from gpuscope.analysis.job import diagnose
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    [res] = ingest_paths(con, [ROOT / "sample_traces" / "validation" / "v27"])
    assert host_work_per_step(con, res.run_id, 0) == pytest.approx(57.9, abs=0.05)
    assert host_work_per_step(con, res.run_id, 1) == pytest.approx(62.1, abs=0.05)
    reps = {}

    def report_of(r: int):
        if r not in reps:
            reps[r] = analyze_run(con, res.run_id, rank=r)
        return reps[r]

    job = diagnose(con, res.run_id, report_of)
    cause = next(f for f in job.findings if f.kind == "pace_cause")
    assert cause.rank == 1 and "every rank's host is busy" in cause.detail
    assert job.retimed_step_ms == pytest.approx(59.3, abs=0.1)
    assert job.retimed_step_ms >= 57.9
    fix = next(f for f in job.findings if f.kind == "fix")
    assert fix.id == "dtensor_dispatch"
