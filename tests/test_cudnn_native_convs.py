"""``cudnn_benchmark`` counts only cuDNN's convolutions: PyTorch's own convolution kernels
(``at::native::conv_depthwise2d_*``, im2col-based ``slow_conv``), which cuDNN's algorithm search
does not pick, neither fire the fix nor shrink in its re-timing. v113 (an Xception whose
depthwise convolutions run in PyTorch's own kernels, 91 of its 105 ms of convolution per step)
was told cudnn.benchmark would gain 11.1 %; timed, it gained 1.0 %. Answers computed by hand."""

from __future__ import annotations

import json

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import build_graph
from gpuscope.analysis.fixes import cudnn_benchmark as CB
from gpuscope.analysis.report import analyze_run
from tracegen import TraceBuilder, ingest_one_rank

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

US = 1_000
CUDNN = (
    "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
    "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
)
DEPTHWISE = (
    "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, c10::BFloat16, "
    "int>(at::GenericPackedTensorAccessor<c10::BFloat16 const, 4ul, at::DefaultPtrTraits, int>)"
)
IM2COL = "void at::native::im2col_kernel<float>(long, float const*, long, long, long, float*)"


def test_pytorchs_own_convolution_kernels_are_read_as_such() -> None:
    assert CB.native_conv(DEPTHWISE) and CB.native_conv(IM2COL)
    assert not CB.native_conv(CUDNN)
    # cuDNN's own depthwise engines are cuDNN's: benchmark mode may pick among them
    assert not CB.native_conv("void cudnn::cnn::conv2d_grouped_direct_kernel<float>(float)")


def conv_trace(cudnn_us: float, native_us: float) -> TraceBuilder:
    """3 steps of 1,000 µs (one thread), cudnn.benchmark recorded off. In each step at b: a
    ``aten::cudnn_convolution`` launching a cuDNN kernel of ``cudnn_us`` at b+10, then an
    ``aten::_conv_depthwise2d`` launching PyTorch's depthwise kernel of ``native_us`` right
    after it on the GPU."""
    flags = json.dumps({"cudnn_benchmark": False})
    t = TraceBuilder(rank=0, world_size=1, extra_meta={"gpuscope.torch_flags": flags})
    for k in range(3):
        b = 1_000.0 * k
        t.step(k + 1, b, 1_000.0)
        t.cpu_op("aten::cudnn_convolution", b + 1, 20.0)
        t.launch(CUDNN, b + 5, b + 10, cudnn_us, grid=[264, 1, 1])
        t.cpu_op("aten::_conv_depthwise2d", b + 25, 20.0)
        t.launch(DEPTHWISE, b + 30, b + 10 + cudnn_us, native_us, grid=[264, 1, 1])
    return t


def test_the_fix_counts_cudnns_convolutions_alone(con, tmp_path) -> None:
    """cuDNN 200 µs and native 600 µs per 1,000 µs step: the evidence is 200 µs per step (20.0 %
    of the window), the native 600 µs said apart; the cost is the cuDNN time."""
    run = ingest_one_rank(con, tmp_path, conv_trace(200.0, 600.0))
    rep = analyze_run(con, run).to_json()
    [rec] = [r for r in rep["recommendations"] if r["id"] == "cudnn_benchmark"]
    ev = rec["evidence"]
    assert ev["conv_us_per_step"] == pytest.approx(200.0)
    assert ev["native_conv_us_per_step"] == pytest.approx(600.0)
    assert ev["conv_share_pct"] == pytest.approx(20.0)
    assert "PyTorch's own convolution kernels (depthwise, im2col) take 0.600 ms" in ev["summary"]
    assert rec["bound_pct"] == pytest.approx(20.0)


def test_no_fix_where_every_convolution_is_pytorchs_own(con, tmp_path) -> None:
    """Native 800 µs per step (80 % of the window), cuDNN 1 µs: cuDNN's share is 0.1 %, under the
    rule's 5 %: no cudnn_benchmark (counting every convolution, it fired at 80 %)."""
    run = ingest_one_rank(con, tmp_path, conv_trace(1.0, 800.0))
    rep = analyze_run(con, run).to_json()
    assert "cudnn_benchmark" not in {r["id"] for r in rep["recommendations"]}


def test_the_re_timing_shrinks_cudnns_convolutions_only() -> None:
    """A cuDNN kernel (100 µs, bf16 on the tensor cores) then a depthwise one (100 µs): at the mid
    variant the cuDNN kernel is × 0.9 (90 µs: ``OTHER_FACTORS``), the depthwise one stays 100
    µs; both are convolutions by name."""
    gpu = [G(CUDNN, "kernel", 0, 100 * US, 7), G(DEPTHWISE, "kernel", 100 * US, 200 * US, 7)]
    g = build_graph([H("ProfilerStep#1", "user_annotation", 0, 200 * US, 1)], gpu, 1, 0, 200 * US)
    ctx = GN.Context(n_steps=1, step_ms=0.2)
    dur, _ = CB.retime(g, ctx)["mid"]
    assert dur is not None
    by_name = {n.event.name: dur(v, n) for v, n in enumerate(g.nodes) if n.kind == "gpu"}
    assert all("conv" in n.tags for n in g.nodes if n.kind == "gpu")
    assert by_name == {CUDNN: pytest.approx(90 * US), DEPTHWISE: pytest.approx(100 * US)}
