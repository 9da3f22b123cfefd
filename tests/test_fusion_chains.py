"""Memory-bound elementwise chains (analysis/phase_patterns.py ``FusableChains``, the
``kernel_fusion`` unit's :func:`memory_bound` rule and :func:`retime_chains`): hand-made traces,
inputs and graphs with answers by hand; and the real v64 trace (BigVGAN-style Snake blocks,
eager -> torch.compile measured 60.3 %), where ``kernel_fusion`` is offered first."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis import fixes as R
from gpuscope.analysis.compiled import CompiledInfo
from gpuscope.analysis.critical_path import GpuEvent, HostEvent, Node
from gpuscope.analysis.fixes import kernel_fusion as kf
from gpuscope.analysis.gains import Context
from gpuscope.analysis.idle import CAUSES, IdleResult
from gpuscope.analysis.phase_patterns import (
    FusableChains,
    PhasePatterns,
    kernel_op,
    phase_patterns,
    rnn_host_nodes,
)
from tracegen import TraceBuilder, ingest_one_rank

ROOT = Path(__file__).resolve().parent.parent
MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
    "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >"
)
SIN = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::sin_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda(float)#1}, "
    "std::array<char*, 2ul> >"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >"
)
COPY = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>"
)
SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()("
    "at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >"
)
CONV = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"
TRITON = "triton_poi_fused_add_mul_sin_0"
STEP_US = 10_000.0
N = 3


def test_kernel_op_reads_what_the_kernel_computes() -> None:
    assert [kernel_op(k) for k in (MUL, SIN, ADD, COPY, SUM)] == [
        "mul",
        "sin",
        "add",
        "direct_copy",
        "sum",
    ]
    assert kernel_op("void cudnn::engines_precompiled::nchwToNhwcKernel<float>(...)") == (
        "nchwtonhwc"
    )


def chains_trace() -> TraceBuilder:
    """3 steps of 10 ms, the main thread launching in this order (GPU µs): a 1,000 µs conv;
    mul 30, sin 40, add 50 (a chain of 3); a 1,000 µs conv; copy 20, sum 60 (a chain of 2); a
    conv; a lone add 10 before a Triton kernel 10 (fused already: no chain member, so the add
    stays alone); then an optimizer step launching mul, mul (its kernels: no chain)."""
    t = TraceBuilder(rank=0, world_size=1)
    for k in range(N):
        b = k * STEP_US
        t.step(k + 1, b, STEP_US)
        g = b + 100.0  # GPU time, back to back
        at = b + 10.0  # launch time, 10 µs apart
        for name, d in (
            (CONV, 1000.0),
            (MUL, 30.0),
            (SIN, 40.0),
            (ADD, 50.0),
            (CONV, 1000.0),
            (COPY, 20.0),
            (SUM, 60.0),
            (CONV, 1000.0),
            (ADD, 10.0),
            (TRITON, 10.0),
        ):
            t.launch(name, at, g, d)
            at += 10.0
            g += d
        o = b + 8000.0
        t.cpu_op("Optimizer.step#AdamW.step", o, 500.0)
        t.launch(MUL, o + 10, o + 20, 5.0)
        t.launch(MUL, o + 20, o + 30, 5.0)
    return t


@pytest.mark.memory_store
def test_chains_by_hand(con, tmp_path) -> None:
    """Per step: 2 chains (mul-sin-add, copy-sum), 5 kernels, 30+40+50+20+60 = 200 µs of GPU
    time; fused, each costs its longest kernel: 50 + 60 = 110 µs; longest 3; the typical chain
    (most GPU time: 120 µs against 80) mul -> sin -> add, once per step. The lone add, the Triton
    kernel and the optimizer's two muls are in no chain."""
    run = ingest_one_rank(con, tmp_path, chains_trace())
    ch = phase_patterns(con, run, 0).chains
    assert ch is not None
    assert ch.chains_per_step == 2 and ch.kernels_per_step == 5
    assert ch.kernel_ms_per_step == pytest.approx(0.200)
    assert ch.fused_ms_per_step == pytest.approx(0.110)
    assert ch.saved_ms_per_step == pytest.approx(0.090)
    assert ch.longest == 3
    assert ch.typical == ("mul", "sin", "add") and ch.typical_per_step == 1
    # of it, elementwise math alone: mul-sin-add (copy and sum are no math): 120 - 50 = 70 µs
    assert ch.math_saved_ms_per_step == pytest.approx(0.070)


def idle(window_ns: int, n_steps: int) -> IdleResult:
    return IdleResult(window_ns, n_steps, 0, 0, 1, dict.fromkeys(CAUSES, 0))


CHAINS = FusableChains(
    chains_per_step=40.0,
    kernels_per_step=500.0,
    kernel_ms_per_step=6.0,
    fused_ms_per_step=1.0,
    longest=24,
    typical=("mul", "sin", "pow", "div", "add"),
    typical_per_step=12.0,
    math_saved_ms_per_step=4.0,
)
"""Per 10 ms step: chains whose 6 ms of GPU time would cost 1 ms fused (5 ms saved, 4 ms of it in
chains of elementwise math alone)."""


def inputs(busy: float = 95.0, compiled: CompiledInfo | None = None) -> R.Inputs:
    """1 step of 10 ms, 600 kernels, 9 ms of kernel time, median 38 µs (not launch-bound)."""
    w = 10_000_000
    return R.Inputs(
        window_ns=w,
        n_steps=1,
        busy_pct=busy,
        idle=idle(w, 1),
        kernels=R.KernelStats(n_kernels=600, kernel_us=9000.0, median_us=38.0),
        compiled=compiled,
        phase=PhasePatterns(1, w, chains=CHAINS),
    )


def test_memory_bound_chains_are_kernel_fusion() -> None:
    """Elementwise math saves 4 ms of a 10 ms window: cost 40 %; the chains are 6 of 9 ms of kernel
    time (66.7 %);
    the title and code are the memory-bound ones, the evidence says the typical chain."""
    rec = R.BY_ID["kernel_fusion"].find(inputs())
    assert rec is not None
    assert rec.cost_pct == pytest.approx(40.0)
    assert rec.evidence["memory_bound_chains"] is True
    assert rec.evidence["chain_share_of_gpu_pct"] == pytest.approx(66.667, abs=0.01)
    assert rec.evidence["kernels_per_step"] == 600
    assert rec.title == kf.MEMORY_TITLE and "torch.compile(model)" in rec.fix
    assert rec.why == kf.MEMORY_WHY
    assert "mul → sin → pow → div → add" in rec.evidence["summary"]
    assert rec.bound_pct is None


def test_memory_bound_chains_silent_when_compiled_or_host_bound() -> None:
    """A compiled model (or one running Triton kernels) is never told to compile; a step whose
    GPU idles (busy 50 % < 80 %) is not bound by its kernels; 0.5 ms saved of 10 ms (5 %) is
    under the 10 % floor; 5 ms saved by chains of fills, adds, copies and sums (the backward's
    bookkeeping) with no elementwise-math chain is no memory-bound math: silent."""
    unit = R.BY_ID["kernel_fusion"]
    assert unit.find(inputs(compiled=CompiledInfo(1, compiled_regions_per_step=1.0))) is None
    assert unit.find(inputs(compiled=CompiledInfo(1, triton_kernels_per_step=3.0))) is None
    assert unit.find(inputs(busy=50.0)) is None
    small = inputs()
    small.phase = PhasePatterns(
        1, small.window_ns, chains=FusableChains(4.0, 8.0, 0.6, 0.1, 2, ("mul", "add"), 4.0, 0.5)
    )
    assert unit.find(small) is None
    small.phase = PhasePatterns(
        1, small.window_ns, chains=FusableChains(40.0, 500.0, 6.0, 1.0, 7, ("fill", "add"), 12.0)
    )
    assert unit.find(small) is None
    assert unit.find(inputs(compiled=CompiledInfo(1))) is not None  # looked at: not compiled


def kernel(name: str, start_us: int, dur_us: int, stream: int = 7) -> Node:
    s, e = start_us * 1000, (start_us + dur_us) * 1000
    return Node("gpu", "kernels", s, e, name, frozenset(), GpuEvent(name, "kernel", s, e, stream))


def graph(nodes: list[Node]) -> object:
    return type("G", (), {"nodes": nodes, "preds": [[] for _ in nodes]})()


def test_retime_chains_by_hand() -> None:
    """Stream 7: mul 30, sin 40, add 50 (a chain: sum 120, longest 50), a conv 100, copy 20
    (alone), triton 10; 6 kernels, 2 removed launches: ρ = 1/3. Fused chain = 50 + f × 70:
    low (f 0.5) 85 µs, mid (0.25) 67.5, high (0) 50; each kernel scaled by that / 120. Host op
    1000 ns: mid × (1 - 0.7 ρ); a launch call 100 ns: mid × (1 - 0.5 ρ). The conv, the lone
    copy and the Triton kernel stay."""
    nodes = [
        kernel(MUL, 0, 30),
        kernel(SIN, 30, 40),
        kernel(ADD, 70, 50),
        kernel(CONV, 120, 100),
        kernel(COPY, 220, 20),
        kernel(TRITON, 240, 10),
    ]
    host = Node(
        "host",
        "cpu",
        0,
        1000,
        "aten::mul",
        frozenset(),
        HostEvent("aten::mul", "cpu_op", 0, 1000, 1),
    )
    launch = Node("host", "launch", 0, 100, "cudaLaunchKernel", frozenset(), None)
    g = graph([*nodes, host, launch])
    chains, total = kf.fusable_chains(g)  # type: ignore[arg-type]
    assert chains == [[0, 1, 2]] and total == 6
    v = kf.retime_chains(g, Context(n_steps=1, step_ms=1.0))  # type: ignore[arg-type]
    rho = 1 / 3
    for name, fused in (("low", 85.0), ("mid", 67.5), ("high", 50.0)):
        dur = v[name][0]
        assert dur is not None
        got = sum(dur(i, g.nodes[i]) for i in range(3))  # type: ignore[attr-defined]
        assert got == pytest.approx(fused * 1000)
        assert dur(1, nodes[1]) == pytest.approx(40_000 * fused / 120)
        for i in (3, 4, 5):
            assert dur(i, nodes[i]) == nodes[i].dur
    mid = v["mid"][0]
    assert mid is not None
    assert mid(6, host) == pytest.approx(1000 * (1 - 0.7 * rho))
    assert mid(7, launch) == pytest.approx(100 * (1 - 0.5 * rho))


@pytest.mark.slow
@pytest.mark.memory_store
def test_v64_offers_kernel_fusion_first(con) -> None:
    """v64 (eager Snake 1-D conv blocks, GPU busy 96 %, median kernel 38 µs: not launch-bound):
    ``kernel_fusion`` is the first fix, from its memory-bound chains, with a range holding the
    measured 60.3 %."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    trace = ROOT / "sample_traces/validation/v64/v64_kernel_fusion_rank0.pt.trace.json.gz"
    run = ingest_paths(con, [trace])[0].run_id
    rep = analyze_run(con, run, rank=0)
    first = rep.recommendations[0]
    assert first.id == "kernel_fusion", [r.id for r in rep.recommendations]
    assert first.evidence["memory_bound_chains"] is True
    assert first.estimate is not None
    assert first.estimate.low_pct <= 60.3 <= first.estimate.high_pct


def test_memory_bound_cost_is_the_windows_share() -> None:
    """The cost is the saved GPU time's share of the traced window, never of the untraced step
    (a trace without steps is one 10 ms window holding several 4 ms untraced steps): 4 ms saved
    is 40 %, not 4 / 4 of a step; with 1.2 ms saved (12 %) it still speaks, with 0.8 ms (8 %)
    it does not."""
    inp = inputs()
    inp.n_steps, inp.untraced_step_ns = 0, 4_000_000
    rec = R.BY_ID["kernel_fusion"].find(inp)
    assert rec is not None and rec.cost_pct == pytest.approx(40.0)
    for saved, speaks in ((1.2, True), (0.8, False)):
        inp.phase = PhasePatterns(
            1,
            inp.window_ns,
            chains=FusableChains(4.0, 8.0, 1.0 + saved, 1.0, 2, ("mul",), 4.0, saved),
        )
        assert (R.BY_ID["kernel_fusion"].find(inp) is not None) is speaks


def test_launch_bound_retime_keeps_an_rnn_layers_host_work() -> None:
    """An ``aten::_cudnn_rnn`` op (thread 1, 0-1,000 ns) and a launch call inside it (100-200)
    keep their time in every variant (Dynamo leaves the RNN layer eager); an ``aten::add`` after
    it (2,000-3,000) keeps its time at low and mid too (a step with RNN layers: compiling such a
    model was timed at -0.5 and 1.0 %, and v110's compiled step ran no compiled region) and
    shrinks at high: ρ = 1/2 (add, add on stream 7), × (1 - 0.9 ρ) = 550 ns."""
    rnn = HostEvent("aten::_cudnn_rnn", "cpu_op", 0, 1000, 1)
    call = HostEvent("cudaLaunchKernel", "cuda_runtime", 100, 200, 1)
    add = HostEvent("aten::add", "cpu_op", 2000, 3000, 1)
    nodes = [
        Node("host", "cpu", 0, 100, rnn.name, frozenset(), rnn),
        Node("host", "launch", 100, 200, call.name, frozenset(), call),
        Node("host", "cpu", 200, 1000, rnn.name, frozenset(), rnn),
        Node("host", "cpu", 2000, 3000, add.name, frozenset(), add),
        kernel(ADD, 10, 5),
        kernel(ADD, 15, 5),
    ]
    g = graph(nodes)
    assert rnn_host_nodes(g) == {0, 1, 2}  # type: ignore[arg-type]
    for name in ("low", "mid", "high"):
        dur = kf.retime(g, Context(n_steps=1, step_ms=1.0))[name][0]  # type: ignore[arg-type]
        assert dur is not None
        assert [dur(i, nodes[i]) for i in range(3)] == [100, 100, 800]
    v = kf.retime(g, Context(n_steps=1, step_ms=1.0))  # type: ignore[arg-type]
    mid, high = v["mid"][0], v["high"][0]
    assert mid is not None and mid(3, nodes[3]) == 1000
    assert high is not None and high(3, nodes[3]) == pytest.approx(1000 * (1 - 0.9 * 0.5))
