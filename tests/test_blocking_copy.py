"""A pageable host-to-device copy that makes the host wait behind queued GPU work (v10 of
sample_traces/validation: 33 KB of token ids gained 13.5 % once pinned): phase_patterns' blocking
copy, the ``pin_memory`` unit that now sees it, and its re-timing; answers computed by hand."""

from __future__ import annotations

import pytest
from tracegen import TraceBuilder, ingest_one_rank

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

COPY = "Memcpy HtoD (Pageable -> Device)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_kernel__5x_cublas"


def blocking_copy_trace() -> TraceBuilder:
    """3 steps on one thread (µs). Each step at host time b: ``aten::copy_`` holds a
    ``cudaMemcpyAsync`` (b+1, 4 µs) of 32,768 bytes from pageable memory, a 10 µs copy on the GPU
    at m = max(b+5, the GPU's end of the last step), and a ``cudaStreamSynchronize`` from b+6 to
    m+13; the copy_ ends 2 µs later (e0 = m+15). Then ``aten::mm`` e0..e0+400 launches an 800 µs
    GEMM at e0+390 (on the GPU at e0+395), ``aten::mm`` e0+400..e0+420 launches a second at
    e0+410 (on the GPU when the first ends, e0+1195..e0+1995), ``aten::add_`` e0+420..e0+520;
    the next step starts at e0+520.

    Step 1: b=0, m=5, e0=20, GPU ends 2015. Step 2: b=540, m=2015 (the sync, from 546, waits
    through 1,469 µs of queued GEMMs), e0=2030, GPU ends 4025. Step 3: b=2550, m=4025 (from 2556:
    1,469 µs), e0=4040, GPU ends 6035; the step ends at 6040."""
    t = TraceBuilder(rank=0, world_size=1)
    b, gpu_free = 0.0, 0.0
    for k in range(3):
        m = max(b + 5, gpu_free)
        sync_end = m + 13
        e0 = sync_end + 2
        nxt = e0 + 520
        t.step(k + 1, b, (nxt if k < 2 else 6040.0) - b)
        t.cpu_op("aten::copy_", b, e0 - b)
        t.launch(COPY, b + 1, m, 10.0, cpu_dur=4.0, api="cudaMemcpyAsync", cat="gpu_memcpy",
                 bytes=32768)  # fmt: skip
        t.runtime("cudaStreamSynchronize", b + 6, sync_end - (b + 6))
        t.cpu_op("aten::mm", e0, 400.0)
        t.launch(GEMM, e0 + 390, e0 + 395, 800.0, grid=[264, 1, 1])
        t.cpu_op("aten::mm", e0 + 400, 20.0)
        t.launch(GEMM, e0 + 410, e0 + 1195, 800.0, grid=[264, 1, 1])
        t.cpu_op("aten::add_", e0 + 420, 100.0)
        gpu_free = e0 + 1995
        b = nxt
    return t


def ingest(con, tmp_path, t: TraceBuilder) -> str:
    return ingest_one_rank(con, tmp_path, t)


@pytest.mark.slow
def test_blocking_copy_by_hand(con, tmp_path):
    """One pageable copy per step; in steps 2 and 3 the sync began (546, 2556) before the copy
    ran (2015, 4025): 2 blocked copies, each a 1,482 µs wait behind 1,469 µs of queued GPU work.
    Per step: 2/3 blocked, wait 2 x 1,482 / 3 = 988 µs, queued 2 x 1,469 / 3 = 979.33 µs. In
    step 1 the copy ran (5) before the sync began (6): nothing was queued."""
    from gpuscope.analysis.phase_patterns import phase_patterns

    run = ingest(con, tmp_path, blocking_copy_trace())
    bc = phase_patterns(con, run, 0).blocking_copy
    assert bc is not None
    assert bc.copies_per_step == pytest.approx(1.0)
    assert bc.blocked_per_step == pytest.approx(2 / 3)
    assert bc.wait_ms == pytest.approx(2 * 1.482 / 3)
    assert bc.queued_ms == pytest.approx(2 * 1.469 / 3)


@pytest.mark.slow
def test_pin_memory_sees_the_copy_that_waits_behind_queued_work(con, tmp_path):
    """The copies are tiny (32 KB: ~9 µs slower than pinned each) and no idle gap is the copy's,
    yet each blocked copy drains the queue: the 400 µs of host work before the first GEMM then
    leaves the GPU idle. ``pin_memory`` fires on the host's lost lead: 2 x 1,469 µs of queued
    work over the 6,040 µs window = 48.64 % (the rule's cost; no untraced step, so no cap).

    Re-timed (mid: pinned, non_blocking, the syncs that waited for the queued copies gone), at the
    recorded host speed: step 1 stays (its GPU work ends at 2015), then the GPU runs back to back,
    1,610 µs a step (copy 10 + 2 x 800): 2,015 + 2 x 1,610 = 5,235 µs against the 6,040 µs
    replayed as traced, a 13.3 % gain; less, for the copies of steps 2 and 3, the 10 µs each
    lasted less its 32,768 bytes at the pinned bandwidth, and 9 µs in step 1 (its sync, which
    began after its copy ran and stays, now ends at 9 instead of 18: the host reaches it at 6
    and its tail lasts 3 µs), which moves the whole step 1 earlier."""
    from gpuscope.analysis.fixes import pin_memory
    from gpuscope.analysis.gains import makespan, replay_estimate
    from gpuscope.analysis.report import RunAnalysis

    run = ingest(con, tmp_path, blocking_copy_trace())
    a = RunAnalysis(con, run, 0)
    rec = next((r for r in a.recommendations if r.id == "pin_memory"), None)
    assert rec is not None, [r.id for r in a.recommendations]
    assert rec.cost_pct == pytest.approx(100 * 2 * 1469 / 6040, abs=0.01)
    assert rec.evidence["blocked_copies_per_step"] == pytest.approx(2 / 3)
    assert "drains the GPU's queue" in rec.evidence["summary"]

    cp, ctx = a.critical_path, a.gain_context
    assert cp is not None and ctx is not None
    g, ws = cp.graph, cp.window[0]
    assert makespan(g, ws) == pytest.approx(6_040_000, abs=1_000)
    assert len(pin_memory.copy_waits(g)) == 2  # steps 2 and 3; step 1's sync began after its copy
    dur, keep = pin_memory.retime(g, ctx)["mid"]
    bw = pin_memory.PINNED_MEASURED_GBPS.get(ctx.gpu_model or "", ctx.pinned_gbps or 0.0)
    assert bw > 0
    pinned_ns = 32768 / bw  # bytes / (GB/s) = ns
    assert makespan(g, ws, dur, keep) == pytest.approx(
        5_235_000 - 9_000 - 2 * (10_000 - pinned_ns), abs=50
    )

    # the range's top: the planted step on a slower host (its sync exposes the host's speed)
    est = replay_estimate(pin_memory.retime(g, ctx), cp, ctx, staging=True)
    assert est.high_pct > 100 * (1 - 5235 / 6040)
