"""Causes found by phase and pattern (gpuscope.analysis.phase_patterns): hand-made traces of an
optimizer step looping over parameters (``foreach=False``), the same batched (``foreach=True``),
and forward ops re-run inside backward (activation checkpointing); answers computed by hand."""

from __future__ import annotations

import pytest
from gpuscope.analysis.phase_patterns import phase_patterns
from tracegen import TraceBuilder, ingest_one_rank

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

STEP_US = 10_000.0
N = 3


def optimizer_trace(batched: bool, busy_first_us: float = 0.0) -> TraceBuilder:
    """3 steps of 10 ms: a 2 ms forward kernel, then at 5,000 µs into the step an
    ``Optimizer.step#AdamW.step`` span of 1,250 µs. Looped: 60 launches (``aten::addcdiv_`` etc.),
    one every 20 µs from 10 µs in, each a 5 µs kernel 5 µs after its launch (last ends 1,200 µs
    in). Batched: 4 ``aten::_foreach_*`` ops each launching a 75 µs ``multi_tensor_apply_kernel``."""
    t = TraceBuilder(rank=0, world_size=1)
    for k in range(N):
        b = k * STEP_US
        t.step(k + 1, b, STEP_US)
        t.launch("volta_sgemm_128x64_nn", b + 10, b + 50, 2000.0)
        o = b + 5000.0
        if busy_first_us:  # another stream's kernel (e.g. a collective) in the optimizer's wall
            t.launch(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL", b + 4000, o, busy_first_us, stream=17
            )
        t.cpu_op("Optimizer.step#AdamW.step", o, 1250.0)
        if batched:
            for j in range(4):
                t.cpu_op("aten::_foreach_add_", o + 10 + 300 * j, 20.0)
                t.launch(
                    "void at::native::multi_tensor_apply_kernel<...>",
                    o + 15 + 300 * j,
                    o + 20 + 300 * j,
                    75.0,
                )
        else:
            for j in range(60):
                op = ("aten::mul_", "aten::lerp_", "aten::addcdiv_")[j % 3]
                t.cpu_op(op, o + 10 + 20 * j, 8.0)
                t.launch(
                    "void at::native::vectorized_elementwise_kernel<4, ...>",
                    o + 10 + 20 * j,
                    o + 15 + 20 * j,
                    5.0,
                )
    return t


def ingest(con, tmp_path, t: TraceBuilder) -> str:
    return ingest_one_rank(con, tmp_path, t)


@pytest.mark.slow
def test_optimizer_loop_by_hand(con, tmp_path):
    """Per optimizer step: 60 launches, kernels 60 x 5 = 300 µs, wall 1,250 µs (the span ends
    after its last kernel), idle 1,250 - 300 = 950 µs; median kernel 5 µs; a per-parameter loop."""
    run = ingest(con, tmp_path, optimizer_trace(batched=False))
    opt = phase_patterns(con, run, 0).optimizer
    assert opt is not None and opt.name == "Optimizer.step#AdamW.step" and opt.n == N
    assert opt.launches_per_step == 60
    assert opt.kernel_ms_per_step == pytest.approx(0.300)
    assert opt.wall_ms_per_step == pytest.approx(1.250)
    assert opt.idle_ms_per_step == pytest.approx(0.950)
    assert opt.median_kernel_us == pytest.approx(5.0)
    assert not opt.foreach and opt.looped
    assert len(opt.correlations) == 60 * N


@pytest.mark.slow
def test_batched_optimizer_is_no_loop(con, tmp_path):
    """foreach=True: 4 launches of multi_tensor_apply kernels, 300 µs: batched, not a loop."""
    run = ingest(con, tmp_path, optimizer_trace(batched=True))
    opt = phase_patterns(con, run, 0).optimizer
    assert opt is not None and opt.foreach and not opt.looped
    assert opt.launches_per_step == 4 and opt.kernel_ms_per_step == pytest.approx(0.300)


def recompute_trace(checkpointed: bool) -> TraceBuilder:
    """3 steps of 10 ms. Forward (main thread): ``aten::linear`` 100-400 µs launching a 200 µs
    kernel. Backward (thread 2): with checkpointing, ``evaluate_function:
    CheckpointFunctionBackward`` 5,000-6,000 µs holding the re-run ``aten::linear`` (5,100-5,400,
    holding ``aten::addmm`` 5,120-5,380 that launches a 200 µs kernel) and ``aten::gelu``
    (5,450-5,500, a 50 µs kernel); always ``evaluate_function: AddmmBackward0`` 6,100-6,300
    holding ``aten::mm`` (a 100 µs kernel): a backward op, not a re-run."""
    t = TraceBuilder(rank=0, world_size=1)
    for k in range(N):
        b = k * STEP_US
        t.step(k + 1, b, STEP_US)
        t.cpu_op("aten::linear", b + 100, 300.0)
        t.launch("ampere_sgemm_128x64_tn", b + 150, b + 200, 200.0)
        if checkpointed:
            bw = b + 5000.0
            t.cpu_op(
                "autograd::engine::evaluate_function: CheckpointFunctionBackward", bw, 1000.0, tid=2
            )
            t.cpu_op("aten::linear", bw + 100, 300.0, tid=2)
            t.cpu_op("aten::addmm", bw + 120, 260.0, tid=2)
            t.launch("ampere_sgemm_128x64_tn", bw + 130, bw + 600, 200.0, tid=2)
            t.cpu_op("aten::gelu", bw + 450, 50.0, tid=2)
            t.launch("vectorized_elementwise_kernel<gelu>", bw + 460, bw + 810, 50.0, tid=2)
        t.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", b + 6100, 200.0, tid=2)
        t.cpu_op("aten::mm", b + 6120, 150.0, tid=2)
        t.launch("ampere_sgemm_128x64_nt", b + 6130, b + 6400, 100.0, tid=2)
    return t


@pytest.mark.slow
def test_recompute_by_hand(con, tmp_path):
    """Per step: 2 re-run ops (linear holds addmm: counted once), host 300 + 50 = 350 µs, their
    kernels 200 + 50 = 250 µs; the forward linear and the backward mm are not re-runs."""
    run = ingest(con, tmp_path, recompute_trace(checkpointed=True))
    rc = phase_patterns(con, run, 0).recompute
    assert rc is not None and rc.annotated
    assert rc.ops_per_step == 2
    assert dict(rc.by_op) == {"aten::linear": 1.0, "aten::gelu": 1.0}
    assert rc.host_ms_per_step == pytest.approx(0.350)
    assert rc.kernel_ms_per_step == pytest.approx(0.250)
    assert len(rc.correlations) == 2 * N
    # the region: the 1,000 µs CheckpointFunctionBackward; its kernels 600-800 and 810-860 µs in:
    # the GPU idles 1,000 - 250 = 750 µs of it
    assert rc.region_ms_per_step == pytest.approx(1.0)
    assert rc.region_idle_ms_per_step == pytest.approx(0.750)


@pytest.mark.slow
def test_no_recompute_without_checkpointing(con, tmp_path):
    run = ingest(con, tmp_path, recompute_trace(checkpointed=False))
    pp = phase_patterns(con, run, 0)
    assert pp.recompute is None and pp.optimizer is None


AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def fsdp_trace() -> TraceBuilder:
    """3 steps of 10 ms. Forward: all-gather #1 100-1,100 µs alone (exposed 1,000), compute
    1,100-3,100 and 3,100-5,100 µs, all-gather #2 1,500-2,500 µs beside compute (hidden).
    Backward (thread 2, inside ``evaluate_function``): all-gather #3 5,200-5,700 µs alone
    (exposed 500), then compute 5,700-8,700 µs."""
    t = TraceBuilder(rank=0, world_size=2)
    for k in range(N):
        b = k * STEP_US
        t.step(k + 1, b, STEP_US)
        t.launch(AG, b + 10, b + 100, 1000.0, stream=21)
        t.launch("ampere_sgemm_128x64_tn", b + 20, b + 1100, 2000.0)
        t.launch(AG, b + 30, b + 1500, 1000.0, stream=21)
        t.launch("ampere_sgemm_128x64_tn", b + 40, b + 3100, 2000.0)
        t.cpu_op("autograd::engine::evaluate_function: MmBackward0", b + 5100, 200.0, tid=2)
        t.launch(AG, b + 5110, b + 5200, 500.0, stream=21, tid=2)
        t.launch("ampere_sgemm_128x64_nt", b + 5120, b + 5700, 3000.0, tid=2)
    return t


@pytest.mark.slow
def test_exposed_allgathers_by_hand(con, tmp_path):
    """Per step: forward 1.0 ms exposed, backward 0.5 ms, all communication exposed 1.5 ms;
    3 all-gathers, 2.5 ms of all-gather kernels."""
    run = ingest(con, tmp_path, fsdp_trace())
    ag = phase_patterns(con, run, 0).allgather
    assert ag is not None
    assert ag.forward_ms == pytest.approx(1.0) and ag.backward_ms == pytest.approx(0.5)
    assert ag.comm_exposed_ms == pytest.approx(1.5) and ag.exposed_ms == pytest.approx(1.5)
    assert ag.n_per_step == 3 and ag.kernel_ms_per_step == pytest.approx(2.5)


@pytest.mark.slow
def test_optimizer_idle_is_the_gpus_idle(con, tmp_path):
    """A 600 µs kernel of another stream at the start of the optimizer's wall: the GPU is busy
    600 µs + the 30 optimizer kernels after it (j = 30..59: 150 µs) = 750 µs of the 1,250 µs wall:
    idle 500 µs, not 950."""
    run = ingest(con, tmp_path, optimizer_trace(batched=False, busy_first_us=600.0))
    opt = phase_patterns(con, run, 0).optimizer
    assert opt is not None and opt.idle_ms_per_step == pytest.approx(0.500)
    assert opt.kernel_ms_per_step == pytest.approx(0.300) and opt.launches_per_step == 60
