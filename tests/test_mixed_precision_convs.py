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
from pathlib import Path

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import build_graph, replay
from gpuscope.analysis.fixes import mixed_precision as MP
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths
from hypothesis import given, settings
from hypothesis import strategies as st

US = 1_000
VAL = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"

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


TF32_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x256x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
ELEMWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>(int)"
ADAM = (
    "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float, 4>>(float)"
)


def test_tf32_runs_take_the_tf32_branch_by_hand():
    """fp32 with TF32 on (a TF32 GEMM 0..200 µs, a GELU 200..300, the fused AdamW 300..350, one
    stream, back to back): bf16 halves the TF32 rate. mid: the GEMM × 0.55 = 110 µs, the GELU ×
    0.85 = 85 µs, the optimizer as recorded (50 µs); low: × 0.65 and × 0.95; high: × 0.45 and ×
    0.6. Window 350 µs -> mid 245 µs (30 % shorter)."""
    gpu = [
        G(TF32_GEMM, "kernel", 0, 200 * US, 7),
        G(ELEMWISE, "kernel", 200 * US, 300 * US, 7),
        G(ADAM, "kernel", 300 * US, 350 * US, 7),
    ]
    g = _graph(gpu)
    assert [MP._tf32(n) for n in g.nodes if n.kind == "gpu"] == [True, False, False]
    assert not any(MP._fp32_math(n) for n in g.nodes)
    variants = MP.retime(g, GN.Context(n_steps=1, step_ms=0.35, gpu_model="H100 SXM"))
    want = {"low": (130, 95), "mid": (110, 85), "high": (90, 60)}
    for name, (gemm_us, gelu_us) in want.items():
        dur, keep = variants[name]
        assert keep is None
        got = {
            g.nodes[v].s: dur(v, g.nodes[v])
            for v in range(len(g.nodes))
            if g.nodes[v].kind == "gpu"
        }
        assert abs(got[0] - gemm_us * US) < 1.0, name
        assert abs(got[200 * US] - gelu_us * US) < 1.0, name
        assert got[300 * US] == 50 * US, name  # the optimizer's kernel keeps its fp32 state


def test_the_tf32_branch_fires_only_on_tf32_runs():
    """tf32_us: TF32 600 of 1,000 µs of kernels, no bf16: 600; TF32 150 of 1,000 (under 20 %): 0;
    TF32 600 with bf16 100 (over 10 % of it: mixed precision already): 0."""
    from gpuscope.analysis.fixes.base import Inputs, KernelStats
    from gpuscope.analysis.idle import CAUSES, IdleResult

    def inp(by: dict[str, float]) -> Inputs:
        return Inputs(
            window_ns=1_000_000,
            n_steps=1,
            busy_pct=100.0,
            idle=IdleResult(1_000_000, 1, 0, 0, 0, dict.fromkeys(CAUSES, 0)),
            kernels=KernelStats(kernel_us=1_000.0),
            fp32_gemm_us=0.0,
            tc_us_by_precision=by,
            compute_capability=(9, 0),
        )

    assert MP.tf32_us(inp({"tf32": 600.0})) == 600.0
    assert MP.tf32_us(inp({"tf32": 150.0})) == 0.0
    assert MP.tf32_us(inp({"tf32": 600.0, "bf16": 100.0})) == 0.0
    assert MP.tf32_us(inp({"tf32": 600.0, "bf16": 50.0})) == 600.0
    f = MP.detect(inp({"tf32": 600.0}))
    assert f is not None and "TF32" in (f.title or "")
    assert "autocast" in (f.code or "") and "allow_tf32" not in (f.code or "")
    assert "half the bf16 rate" in (f.why or "") and "CUDA cores" not in (f.why or "")
    # 600 µs × (1 - 0.55) = 270 µs of the 1 ms window
    assert abs(f.cost_pct - 27.0) < 1e-6
    assert MP.detect(inp({"tf32": 150.0})) is None


def test_a_few_fp32_kernels_beside_tf32_ones_stay_a_tf32_run():
    """v73's case: a 20 µs fp32 convolution (cuDNN's pick for a 6-channel first layer's gradient)
    beside a 300 µs TF32 GEMM: 20 < 10 % of 300, so the TF32 branch re-times the run (the GEMM ×
    0.55 at mid); at 40 µs of fp32 (over 10 %), the fp32 branch does, and the TF32 GEMM stays."""
    ctx = GN.Context(n_steps=1, step_ms=0.35, gpu_model="H100 SXM")
    for fp32_us, branch in ((20, "tf32"), (40, "fp32")):
        g = _graph(
            [
                G(TF32_GEMM, "kernel", 0, 300 * US, 7),
                G(FP32_CONV, "kernel", 300 * US, (300 + fp32_us) * US, 7),
            ]
        )
        dur, _ = MP.retime(g, ctx)["mid"]
        gemm = next(v for v, n in enumerate(g.nodes) if n.kind == "gpu" and n.s == 0)
        got = dur(gemm, g.nodes[gemm])
        assert abs(got - (165 * US if branch == "tf32" else 300 * US)) < 1.0, (fp32_us, got)


BN_BW = "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float)"


def test_cudnn_batchnorm_slows_under_bf16_in_both_branches():
    """Under autocast a convolution's output is bf16, and PyTorch sends a bf16 input to its own
    BatchNorm kernels (cuDNN's take none): cuDNN's BatchNorm kernels × 1.5 / 1.2 / 1.0 (low /
    mid / high). TF32 branch: a TF32 GEMM 0..200 µs, cuDNN's BatchNorm forward 200..300 and
    backward 300..350 -> mid 110, 120, 60 µs; low 130, 150, 75; high 90, 100, 50. fp32 branch
    (an FFMA convolution 0..100 µs, then the two BatchNorm kernels 100..200, 200..250): the
    BatchNorm kernels 120 and 60 µs at mid, 150 and 75 at low, as recorded at high."""
    g = _graph(
        [
            G(TF32_GEMM, "kernel", 0, 200 * US, 7),
            G(BN, "kernel", 200 * US, 300 * US, 7),
            G(BN_BW, "kernel", 300 * US, 350 * US, 7),
        ]
    )
    ctx = GN.Context(n_steps=1, step_ms=0.35, gpu_model="H100 SXM")
    gpu = [v for v, n in enumerate(g.nodes) if n.kind == "gpu"]
    want = {"low": (130, 150, 75), "mid": (110, 120, 60), "high": (90, 100, 50)}
    for level, (gemm, fw, bw) in want.items():
        dur, _ = MP.retime(g, ctx)[level]
        assert dur is not None
        got = [round(dur(v, g.nodes[v]) / US, 6) for v in gpu]
        assert got == [gemm, fw, bw], (level, got)
    g = _graph(
        [
            G(FP32_CONV, "kernel", 0, 100 * US, 7),
            G(BN, "kernel", 100 * US, 200 * US, 7),
            G(BN_BW, "kernel", 200 * US, 250 * US, 7),
        ]
    )
    assert MP.convs_fp32_no_tf32(g)
    gpu = [v for v, n in enumerate(g.nodes) if n.kind == "gpu"]
    for level, (fw, bw) in {"low": (150, 75), "mid": (120, 60), "high": (100, 50)}.items():
        dur, _ = MP.retime(g, ctx)[level]
        assert dur is not None
        assert [round(dur(v, g.nodes[v]) / US, 6) for v in gpu[1:]] == [fw, bw], level


SGEMM = "ampere_sgemm_128x64_tn"
BF16_GEMM = "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"


def _top(gemm_bf16_us: int) -> dict[str, float]:
    """One stream: an fp32 SGEMM 0..50 µs, a bf16 tensor-core GEMM of ``gemm_bf16_us`` after it,
    then an elementwise add of 40 µs: each kernel's duration at the top of the fp32 branch (ns)."""
    t = 50 + gemm_bf16_us
    gpu = [
        G(SGEMM, "kernel", 0, 50 * US, 7),
        G(BF16_GEMM, "kernel", 50 * US, t * US, 7),
        G(ADD, "kernel", t * US, (t + 40) * US, 7),
    ]
    host = [H("ProfilerStep#1", "user_annotation", 0, (t + 40) * US, 1)]
    g = build_graph(host, gpu, 1, 0, (t + 40) * US)
    dur, _ = MP.retime(g, GN.Context(n_steps=1, step_ms=(t + 40) / 1e3, gpu_model="H100 SXM"))[
        "high"
    ]
    assert dur is not None
    return {n.event.name: dur(v, n) for v, n in enumerate(g.nodes) if n.kind == "gpu"}


def test_a_run_in_half_precision_already_keeps_its_other_kernels_at_the_top():
    """The fp32 branch's top halves the bytes of the other kernels (× 0.6) where autocast would
    run them in bf16; where the bf16 tensor-core math already takes as long as the fp32 math
    (60 µs against 50) autocast is on, and only the fp32 GEMM shrinks: the add stays 40 µs. With
    30 µs of bf16 math against 50 of fp32 the run is an fp32 one: the add goes to 24 µs."""
    half = _top(60)
    assert half[ADD] == 40 * US
    assert half[BF16_GEMM] == 60 * US
    assert half[SGEMM] < 50 * US / 2  # the SGEMM on tensor cores
    fp32 = _top(30)
    assert fp32[ADD] == 0.6 * 40 * US
    assert fp32[BF16_GEMM] == 0.6 * 30 * US


@pytest.mark.memory_store
def test_a_bf16_step_replayed_as_cuda_graphs_is_promised_no_more_than_its_fp32_gemms(con):
    """sample_traces/validation/compiled_steps/v86_cuda_graphs (a Swin-T step under bf16
    autocast, compiled with reduce-overhead, recorded on an H200): 0.16 ms per step of fp32
    GEMMs (0.7 % of the run) beside 6.4 ms of bf16 ones. mixed_precision may name them, but its
    range stays under 1 % (the top once halved every other kernel's bytes: 38.2 %)."""
    [res] = ingest_paths(con, [VAL / "compiled_steps" / "v86_cuda_graphs_rank0.pt.trace.json.gz"])
    r = analyze_run(con, res.run_id)
    mp = next(x for x in r.recommendations if x.id == "mixed_precision")
    assert mp.estimate is not None
    assert 0.0 < mp.estimate.high_pct < 1.0


@settings(max_examples=40, deadline=None)
@given(
    durs=st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=12),
    f=st.floats(min_value=-1.0, max_value=3.0, allow_nan=False),
)
def test_a_scaled_retiming_applied_at_once_is_the_one_applied_node_by_node(durs, f) -> None:
    """``gains._durations`` applies a :class:`gains.Scaled` re-timing to the whole graph at once
    (its predicate read once per node): the same floats as calling it on each node, the
    negative ones floored at 0 alike; a second re-timing with the same predicate reads the
    caller's masks; the graph stays picklable (a closure's mask is never in its memo)."""
    import pickle

    gpu, t = [], 0
    for i, d in enumerate(durs):
        gpu.append(G(SGEMM if i % 2 else ADD, "kernel", t * US, (t + d) * US, 7))
        t += d + 3
    host = [H("ProfilerStep#1", "user_annotation", 0, t * US, 1)]
    g = build_graph(host, gpu, 1, 0, t * US)

    def pred(n) -> bool:  # type: ignore[no-untyped-def]
        return n.kind == "gpu" and n.event.name == ADD

    sc = GN.Scaled(pred, f)
    picked: dict = {}
    at_once = GN._durations(g, sc, picked)
    one_by_one = GN._durations(g, lambda v, n: sc(v, n))
    assert at_once.tolist() == one_by_one.tolist()
    assert set(picked) == {pred}
    again = GN._durations(g, GN.Scaled(pred, 2 * f), picked)
    assert again.tolist() == GN._durations(g, lambda v, n: GN.Scaled(pred, 2 * f)(v, n)).tolist()
    pickle.dumps(g)


LAYOUT = (
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, "
    "(cudnnKernelDataType_t)0>(int)"
)


def _one_stream(*kernels: tuple[str, int, int]):
    """The graph of ``kernels`` (name, start µs, end µs) on stream 7, under one step."""
    return _graph([G(name, "kernel", s * US, e * US, 7) for name, s, e in kernels])


def _durs(variants: dict, g, name: str) -> dict[int, float]:
    dur, keep = variants[name]
    assert keep is None
    return {
        g.nodes[v].s: dur(v, g.nodes[v]) for v in range(len(g.nodes)) if g.nodes[v].kind == "gpu"
    }


def test_channels_last_moves_only_the_high_end_of_a_tf32_conv_net_by_hand():
    """A TF32 run of an NCHW convolution net, one stream back to back: cuDNN's layout transform
    0..100 µs, a TF32 convolution 100..300, cuDNN's BatchNorm 300..400. As an NCHW model in bf16
    (``channels_last`` False): the transform is another kernel (× 0.95 / 0.85 / 0.6), the
    convolution × 0.65 / 0.55 / 0.45, the BatchNorm × 1.5 / 1.2 / 1.0. In channels_last, the high
    end only: no transform (× 0), the convolution × 0.35 = 70 µs, the BatchNorm × 0.5 = 50 µs."""
    g = _one_stream((LAYOUT, 0, 100), (TF32_CONV, 100, 300), (BN, 300, 400))
    ctx = GN.Context(n_steps=1, step_ms=0.4, gpu_model="H100 SXM")
    nchw = MP.retime(g, ctx)
    cl = MP.retime(g, ctx, channels_last=True)
    want_nchw = {"low": (95, 130, 150), "mid": (85, 110, 120), "high": (60, 90, 100)}
    for name, want in want_nchw.items():
        got = _durs(nchw, g, name)
        assert [round(got[s * US] / US, 6) for s in (0, 100, 300)] == list(want), name
        if name != "high":
            assert _durs(cl, g, name) == got, name
    got = _durs(cl, g, "high")
    assert [round(got[s * US] / US, 6) for s in (0, 100, 300)] == [0, 70, 50]


def test_channels_last_high_end_in_the_fp32_branch_by_hand():
    """fp32 convolutions on CUDA cores (TF32 off) beside cuDNN's BatchNorm 200..300 µs and a TF32
    convolution that the fp32 branch reads as another kernel: in channels_last the high end takes
    the BatchNorm × 0.5 (not × 1.0) and the TF32 convolution × 0.35 (not × 0.6); the fp32
    convolution is re-timed as without it."""
    g = _one_stream((FP32_CONV, 0, 200), (BN, 200, 300), (TF32_CONV, 300, 310))
    ctx = GN.Context(n_steps=1, step_ms=0.31, gpu_model="H100 SXM")
    assert MP._tf32(g.nodes[[n.s for n in g.nodes].index(300 * US)])
    nchw, cl = _durs(MP.retime(g, ctx), g, "high"), _durs(MP.retime(g, ctx, True), g, "high")
    assert nchw[0] == cl[0] < 200 * US
    assert (nchw[200 * US], cl[200 * US]) == (100 * US, 50 * US)
    assert (round(nchw[300 * US] / US, 6), round(cl[300 * US] / US, 6)) == (6.0, 3.5)


def test_the_estimate_takes_channels_last_where_the_code_names_it():
    """``advised``: the recommendation whose code opens with the channels_last hint is re-timed
    in channels_last at the high end; the plain bf16 code, as an NCHW model."""
    from gpuscope.analysis.recommendation import Recommendation

    g = _one_stream((LAYOUT, 0, 100), (TF32_CONV, 100, 300))
    ctx = GN.Context(n_steps=1, step_ms=0.3, gpu_model="H100 SXM")

    def high(code: str) -> dict[int, float]:
        rec = Recommendation("mixed_precision", "t", "w", {}, code, 1.0)
        return _durs(MP.advised(rec, g, ctx), g, "high")

    assert high(MP.CHANNELS_LAST_HINT + MP.CODE_BF16)[0] == 0.0
    assert high(MP.CODE_BF16)[0] == 60 * US
    assert MP.UNIT.advised is MP.advised
