"""Mixed precision on fp32 convolutions, and the side streams cuDNN runs them on: hand-built
event lists with answers computed by hand.

- A GPU op that starts after an idle gap on its stream, with no launch that explains its start,
  waited for the op of another stream that ended last before it (an event wait the trace does
  not show; cuDNN's FFT convolutions on side streams): shrinking the main stream's op moves it.
- cuDNN's fp32 convolutions on CUDA cores are re-timed by bf16 autocast only where no
  convolution of the window runs on the tensor cores (cuDNN's TF32 off); with TF32 kernels beside
  them (TF32 allowed, cudnn.benchmark off) they stay as recorded.
"""

from __future__ import annotations

import math

from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import build_graph, replay
from gpuscope.analysis.fixes import mixed_precision as MP

US = 1_000

FP32_CONV = (
    "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x32x8_stage3_"
    "warpsize2x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn"
)
FFT_R2C = "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int)"
TF32_CONV = (
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_"
    "warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn"
)
BN = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(float)"


def side_stream_step(main: str = FP32_CONV) -> list[G]:
    """No launches in the trace (cuDNN's own). Stream 7: A 0..100, B 170..300; stream 13 (a side
    stream): S1 130..160 (30 µs after A), S2 330..350 (30 µs after B). B starts 10 µs after S1."""
    return [
        G(main, "kernel", 0, 100 * US, 7),
        G(FFT_R2C, "kernel", 130 * US, 160 * US, 13),
        G(main, "kernel", 170 * US, 300 * US, 7),
        G(FFT_R2C, "kernel", 330 * US, 350 * US, 13),
    ]


def _graph(gpu: list[G]):
    host = [H("ProfilerStep#1", "user_annotation", 0, 350 * US, 1)]
    return build_graph(host, gpu, 1, 0, 350 * US)


def test_a_side_stream_op_waits_for_the_other_streams_op_before_it():
    g = _graph(side_stream_step())
    gpu = [v for v, n in enumerate(g.nodes) if n.kind == "gpu"]
    a, s1, b, s2 = sorted(gpu, key=lambda v: g.nodes[v].s)
    _, E, _ = replay(g)
    assert E[s2] == 350 * US  # the graph replays the trace as recorded
    # A halved (100 -> 50 µs): S1 waits for A (+30): 80..110; B waits for S1 (+10): 120..250;
    # S2 waits for B (+30): 280..300. With the recorded idle gaps held instead, S1 stayed at
    # 130..160 and S2 at 330..350 (160 + the 170 µs gap).
    d = [float(n.dur) for n in g.nodes]
    d[a] = 50 * US
    S, E, _ = replay(g, d)
    assert (S[s1], E[s1]) == (80 * US, 110 * US)
    assert (S[b], E[b]) == (120 * US, 250 * US)
    assert (S[s2], E[s2]) == (280 * US, 300 * US)


def _mid(g, ctx: GN.Context) -> list[float]:
    dur, _ = MP.retime(g, ctx)["mid"]
    assert dur is not None
    return [dur(v, n) for v, n in enumerate(g.nodes)]


def test_fp32_convolutions_shrink_where_no_convolution_runs_on_tensor_cores():
    g = _graph(side_stream_step())
    ctx = GN.Context(n_steps=1, step_ms=0.35, gpu_model="H100 SXM")
    assert MP.convs_fp32_no_tf32(g)
    d = _mid(g, ctx)
    at = {n.s: v for v, n in enumerate(g.nodes) if n.kind == "gpu"}
    # the GEMM ratio at a kernel's length t (20..200 µs): 2.43 * (14.9 / 2.43) ** log10(t / 20),
    # ÷ 1.5 for the layout transforms cuDNN's tensor-core kernels add around a convolution.
    # A (100 µs): 2.43 * 6.132 ** 0.699 = 8.632 -> ÷ 5.755 = 17.38 µs
    assert abs(d[at[0]] - 17_378) < 1.0
    r130 = 2.43 * (14.9 / 2.43) ** math.log10(130 / 20)  # B (130 µs): 9.870
    assert abs(d[at[170 * US]] - 130 * US / (r130 / 1.5)) < 1.0
    r30 = 2.43 * (14.9 / 2.43) ** math.log10(30 / 20)  # S1, the FFT op (30 µs): 3.197
    assert abs(d[at[130 * US]] - 30 * US / (r30 / 1.5)) < 1.0
    # S2 (20 µs): the small end, 2.43 ÷ 1.5 = 1.62 -> 12.35 µs
    assert abs(d[at[330 * US]] - 20 * US / 1.62) < 1.0


def test_fp32_convolutions_stay_where_cudnn_runs_tf32_beside_them():
    gpu = side_stream_step()
    gpu.append(G(TF32_CONV, "kernel", 300 * US, 320 * US, 7))
    g = _graph(gpu)
    assert not MP.convs_fp32_no_tf32(g)
    ctx = GN.Context(n_steps=1, step_ms=0.35, gpu_model="H100 SXM")
    d = _mid(g, ctx)
    for v, n in enumerate(g.nodes):
        if n.kind == "gpu":
            assert d[v] == n.dur, n.label


def test_batchnorm_and_depthwise_kernels_are_not_convolution_math():
    g = _graph(
        [
            G(BN, "kernel", 0, 100 * US, 7),
            G(
                "void at::native::conv_depthwise2d_forward_kernel<float>(float)",
                "kernel",
                100 * US,
                200 * US,
                7,
            ),
        ]
    )
    assert not MP.convs_fp32_no_tf32(g)
    assert all(MP._conv_math(n) is None for n in g.nodes)
