"""``cudnn_benchmark``'s re-timing (analysis/fixes/cudnn_benchmark.py; docs/metrics.md, the fixes'
table): benchmark mode re-picks the algorithm of each cuDNN convolution, so only the kernels a
convolution operator launches move (its math and its layout transposes), never the BatchNorm,
cast or bias kernels beside them, and a convolution kernel on CUDA cores (fp32 FMA: the
heuristic's pick where tensor-core algorithms exist) moves more than one already on the tensor
cores. Before, every kernel whose name held ``cudnn`` shrank, BatchNorm's included: v124 (RepVGG,
BatchNorm 40 % of its kernel time) was told 16.7 % and gained 1.9 %. Answers computed by hand on
hand-built graphs, then the real v124."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import build_graph, load_events
from gpuscope.analysis.fixes import cudnn_benchmark as CB
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths

US = 1_000
TC = (
    "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_"
    "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
)
FFMA = (
    "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x32x8_stage3_"
    "warpsize2x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn"
)
TRANSPOSE = (
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, "
    "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>)"
)
BN = (
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>"
    "(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*)"
)
CAST = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const"
)
CTX = GN.Context(n_steps=1, step_ms=0.7)


def _launch(s: int, corr: int) -> H:
    return H("cudaLaunchKernel", "cuda_runtime", s * US, (s + 2) * US, 1, corr)


def launched_graph():
    """A 700 µs step on thread 1. ``aten::conv2d`` (0-60 µs) holds ``aten::to`` > ``aten::copy_``
    launching a cast (corr 4), then ``aten::convolution`` > ``aten::cudnn_convolution``
    launching a layout transpose (1), a tensor-core fprop (2) and an fp32-FMA fprop (3);
    ``aten::cudnn_batch_norm`` (60-80 µs) launches a BatchNorm kernel (5). On the GPU, stream 7,
    back to back from 100 µs: cast 100, transpose 100, TF32 fprop 200, FFMA fprop 200 (from
    500), BatchNorm 100 (the FFMA kernel ends at 700 µs, after it: ordered by start)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 700 * US, 1),
        H("aten::conv2d", "cpu_op", 0, 60 * US, 1),
        H("aten::to", "cpu_op", 1 * US, 9 * US, 1),
        H("aten::copy_", "cpu_op", 2 * US, 8 * US, 1),
        _launch(3, 4),
        H("aten::convolution", "cpu_op", 10 * US, 59 * US, 1),
        H("aten::cudnn_convolution", "cpu_op", 11 * US, 58 * US, 1),
        _launch(12, 1),
        _launch(20, 2),
        _launch(30, 3),
        H("aten::cudnn_batch_norm", "cpu_op", 60 * US, 80 * US, 1),
        _launch(62, 5),
    ]
    gpu = [
        G(CAST, "kernel", 100 * US, 200 * US, 7, 4),
        G(TRANSPOSE, "kernel", 200 * US, 300 * US, 7, 1),
        G(TC, "kernel", 300 * US, 500 * US, 7, 2),
        G(FFMA, "kernel", 500 * US, 700 * US, 7, 3),
        G(BN, "kernel", 700 * US, 800 * US, 7, 5),
    ]
    return build_graph(host, gpu, 1, 0, 800 * US)


def _by_name(g, variant) -> dict[str, float]:
    dur, keep = variant
    assert dur is not None and keep is None
    return {n.event.name: dur(v, n) for v, n in enumerate(g.nodes) if n.kind == "gpu"}


def test_only_the_kernels_a_convolution_operator_launches_are_its_own() -> None:
    g = launched_graph()
    tagged = {n.event.name for n in g.nodes if n.kind == "gpu" and "conv_call" in n.tags}
    # the cast launched inside aten::conv2d is aten::copy_'s (the innermost operator), and
    # BatchNorm's kernel holds "cudnn" in its name but is aten::cudnn_batch_norm's
    assert tagged == {TRANSPOSE, TC, FFMA}


def test_cuda_core_kernels_move_most_tensor_core_kernels_and_transposes_little() -> None:
    """mid: FFMA 200 × 0.5 = 100, TF32 200 × 0.9 = 180, transpose 100 × 0.9 = 90; high: 20, 100,
    50; low: every kernel as recorded. Cast and BatchNorm stay 100 in every variant."""
    g = launched_graph()
    v = CB.retime(g, CTX)
    # (transpose, TF32, FFMA, BatchNorm) µs per level
    want = {"low": (100, 200, 200, 100), "mid": (90, 180, 100, 100), "high": (50, 100, 20, 100)}
    for level, (transpose, tc, ffma, bn) in want.items():
        got = {k: round(x / US, 6) for k, x in _by_name(g, v[level]).items()}
        assert got == {CAST: 100, TRANSPOSE: transpose, TC: tc, FFMA: ffma, BN: bn}, level


def test_without_host_events_the_kernels_named_as_convolutions_move() -> None:
    """A trace of kernels only (``activities=[CUDA]``): nothing says who launched what, so the
    convolution kernels by name move (TF32 × 0.9, FFMA × 0.5 at mid); the transpose, whose name
    is not a convolution's, and BatchNorm stay."""
    gpu = [
        G(TRANSPOSE, "kernel", 0, 100 * US, 7),
        G(TC, "kernel", 100 * US, 300 * US, 7),
        G(FFMA, "kernel", 300 * US, 500 * US, 7),
        G(BN, "kernel", 500 * US, 600 * US, 7),
    ]
    g = build_graph([H("ProfilerStep#1", "user_annotation", 0, 600 * US, 1)], gpu, 1, 0, 600 * US)
    assert not any("conv_call" in n.tags for n in g.nodes)
    assert _by_name(g, CB.retime(g, CTX)["mid"]) == {
        TRANSPOSE: 100 * US,
        TC: pytest.approx(180 * US),
        FFMA: pytest.approx(100 * US),
        BN: 100 * US,
    }


V124 = Path(__file__).resolve().parents[1] / "sample_traces" / "validation" / "v124"


@pytest.mark.slow
@pytest.mark.memory_store
def test_v124s_batchnorm_kernels_keep_their_time(con) -> None:
    """v124 (RepVGG, fp32, cuDNN TF32): cuDNN's BatchNorm kernels (``cudnn::bn_*``) hold ~40 %
    of its kernel time. None of them is a convolution operator's kernel, and the mid re-timing
    leaves each at its recorded length while every TF32 convolution kernel shrinks."""
    [res] = ingest_paths(con, [V124])
    r = analyze_run(con, res.run_id)
    host, gpu, main = load_events(con, res.run_id, 0, r.window, 0)
    g = build_graph(host, gpu, main, r.window.start_ns, r.window.end_ns)
    dur, _ = CB.retime(g, CTX)["mid"]
    assert dur is not None
    seen_bn = seen_conv = 0
    for v, n in enumerate(g.nodes):
        if n.kind != "gpu":
            continue
        if n.event.name.startswith("void cudnn::bn_"):
            seen_bn += 1
            assert "conv_call" not in n.tags and dur(v, n) == n.dur
        elif "xmma" in n.event.name and "tf32" in n.event.name and "conv_call" in n.tags:
            seen_conv += 1
            assert dur(v, n) == pytest.approx(0.9 * n.dur)
    assert seen_bn > 100 and seen_conv > 100, (seen_bn, seen_conv)
