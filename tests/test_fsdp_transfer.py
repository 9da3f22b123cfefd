"""FSDP's exposed all-gathers are prefetching's to hide only up to their transfer
(gpuscope.analysis.fixes.fsdp_prefetch; docs/metrics.md, `fsdp_prefetch`): the part of an
all-gather kernel that waited for a later rank is load imbalance's, and DDP's bucket overlap has
no part of an FSDP step. Hand-built inputs and graphs, answers by hand; the real v191 (the twelfth
blind part: explicit prefetch on FSDP2's defaults, timed at 1.8 %)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from collective_steps import chain_through_collective
from gpuscope.analysis import fixes as R
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of
from gpuscope.analysis.fixes import fsdp_prefetch as fp
from gpuscope.analysis.gains import Context, makespan
from gpuscope.analysis.idle import CAUSES, IdleResult
from gpuscope.analysis.phase_patterns import ExposedAllGather, PhasePatterns

US = 1_000
MS = 1_000_000
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
VALIDATION = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"


def inputs(transfer_ms: float | None, **kw: float) -> R.Inputs:
    """2 steps of 10 ms; per step 3 ms of all-gather kernels, 2 ms of them with no compute
    beside them (forward 1.5, backward 0.5), all of the exposed communication; their transfer
    ``transfer_ms`` per step (None: not matched across ranks)."""
    idle = IdleResult(20 * MS, 2, 0, 0, 0, dict.fromkeys(CAUSES, 0))
    ag = ExposedAllGather(1.5, 0.5, 2.0, 4.0, 3.0)
    return R.Inputs(
        window_ns=20 * MS,
        n_steps=2,
        busy_pct=80.0,
        idle=idle,
        comm_only_ns=4 * MS,
        phase=PhasePatterns(2, 20 * MS, allgather=ag),
        allgather_transfer_ns_per_step=None if transfer_ms is None else transfer_ms * MS,
        **kw,
    )


def test_the_exposed_all_gathers_are_capped_at_their_transfer() -> None:
    """2 ms exposed per 10 ms step: 20 % without a match, 20 % with 2.5 ms of transfer (it does
    not cap); with 0.5 ms of transfer (the rest of the kernels waited for a later rank) 0.5 ms:
    5 %, cost and bound, the evidence saying why."""
    unit = R.BY_ID["fsdp_prefetch"]
    for transfer, want in ((None, 20.0), (2.5, 20.0), (0.5, 5.0)):
        rec = unit.find(inputs(transfer))
        assert rec is not None
        assert rec.cost_pct == pytest.approx(want) and rec.bound_pct == pytest.approx(want)
        assert rec.evidence["exposed_transfer_ms_per_step"] == pytest.approx(want / 10)
        capped = "waited for a later rank" in rec.evidence["summary"]
        assert capped is (transfer == 0.5), rec.evidence["summary"]


def test_overlap_leaves_an_fsdp_step_alone() -> None:
    """The same step, all-gathers and no all-reduce (FSDP reduce-scatters its gradients): DDP's
    bucket overlap stays silent; the same communication with a matched all-reduce and no
    all-gather (DDP: 500 MiB in 2 ms a step, the last 50 MiB bucket's 0.2 ms stays exposed) is
    overlap's: 4 ms of communication alone over 20 ms, cost 20 %, bound 18 %."""
    unit = R.BY_ID["overlap_communication"]
    assert unit.find(inputs(0.5)) is None
    ddp = inputs(None)
    ddp.phase = None
    ddp.allreduce_bytes_per_step, ddp.allreduce_ns_per_step = 500 * 2**20, 2 * MS
    rec = unit.find(ddp)
    assert rec is not None and rec.cost_pct == pytest.approx(20.0)
    assert rec.bound_pct == pytest.approx(18.0)


TINY = ((20, 4), (22, 5), (24, 6))
"""(launch call's start µs, correlation id) of three tiny kernels, each starting 5 µs after its
launch on a stream of its own: the typical launch latency is a real one (5 µs)."""


def gated() -> tuple[list[H], list[G]]:
    """Step 0..415 µs: the host launches compute A (1 µs), an all-gather (2 µs) and compute B
    (3 µs), three tiny kernels (20-24 µs) and waits in a sync 30..415. A runs 5..105 on stream 7,
    the all-gather 107.6..307.6 on stream 22 (it waited for A: 2.6 µs, a missed event wait), B
    310.2..410.2 on stream 7 (it waited for the all-gather); the sync's tail 410.2..415."""
    return chain_through_collective(
        415,
        ((1, 2), (2, 3), (3, 4)),
        (
            ("A_gemm", 5 * US, 105 * US, 7),
            (AG, 107_600, 307_600, 22),
            ("B_gemm", 310_200, 410_200, 7),
        ),
        30,
        TINY,
    )


def test_only_the_transfer_shrinks_in_the_replay() -> None:
    """The all-gather's 200 µs kernel, with 50 µs of transfer per 200 of kernel (ρ = 0.25 moved):
    at the point (half the transfer left) it loses 0.5 × 50 = 25 µs and the step ends at
    415 − 25 = 390 µs; at the top all 50 µs: 365; at the low end none: 415. Without the transfer
    known the whole kernel is prefetch's (× 0.5: 100 µs off, 315)."""
    host, gpu = gated()
    g = critical_path_of(host, gpu, 1, [(0, 415 * US)], [1]).graph
    ctx = Context(n_steps=1, step_ms=0.415)
    rec = R.Recommendation("fsdp_prefetch", "t", "w", {}, "c", 1.0)
    rec.evidence = {"allgather_transfer_ms_per_step": 0.05, "allgather_kernel_ms_per_step": 0.2}
    got = {k: makespan(g, 0, d) for k, (d, _) in fp.advised(rec, g, ctx).items()}
    assert got == pytest.approx({"low": 415_000, "mid": 390_000, "high": 365_000})
    rec.evidence = {"allgather_kernel_ms_per_step": 0.2}
    assert makespan(g, 0, fp.advised(rec, g, ctx)["mid"][0]) == pytest.approx(315_000)


@pytest.mark.slow
def test_v191s_prefetch_is_no_false_promise() -> None:
    """v191 (FSDP2 with its default prefetching; the explicit prefetch gpuscope's code gives
    timed at -6.6 %, five rounds from 12.5 to -16.6): its exposed all-gathers mostly waited for
    the other rank; the estimate stays under 5 % (it was 15.8 %, a false promise) and at most
    the gain plus 10 points; DDP's overlap is not offered."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    truth = {c["case"]: c for c in json.loads((VALIDATION / "truth.json").read_text())["cases"]}
    case = truth["v191"]
    con = connect(":memory:")
    run = ingest_paths(con, [VALIDATION / "v191"])[0].run_id
    recs = {r.id: r for r in analyze_run(con, run).recommendations}
    con.close()
    assert "overlap_communication" not in recs
    est = recs["fsdp_prefetch"].estimate
    assert est is not None and est.gain_pct < 5.0
    assert est.gain_pct <= case["gain_pct"] + 10.0, est
