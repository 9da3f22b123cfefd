"""Kernel categories, top kernels (+ folded others), regions and launching ops, on hand-built traces
whose answers are worked out by hand below. Kernel names are real ones (H100, PyTorch 2.11, CUDA 13)
unless said otherwise."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from gpuscope.analysis import kernels as K
from gpuscope.analysis.kernels import (
    CATEGORIES,
    CATEGORY_RULES,
    KernelRow,
    classify,
    classify_kernel,
    fold_rows,
    kernel_breakdown,
    short_name,
    top_kernels_df,
)
from gpuscope.ingest.loader import ingest_paths
from hypothesis import given, settings
from hypothesis import strategies as st
from tracegen import PID, TID, TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"
BWD = 1002  # autograd's backward thread

NVJET_BF16 = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT"
SIMT_SGEMM = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(cutlass_80_simt_sgemm_256x128_8x4_nt_align1::Params)"
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
    "std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)"
)
FOREACH = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
    "std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, "
    "at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)"
)
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AMPERE_SGEMM = (
    "ampere_sgemm_128x64_nn"  # Ampere cuBLAS SIMT name (documented, not from the H100 run)
)
MYSTERY = "my_mystery_kernel"  # made up: no rule matches


@dataclass
class Win:
    """A window as analysis.steps.Window presents it: start/end in ns and the steps."""

    start_ns: int
    end_ns: int
    steps: list[int] = field(default_factory=lambda: [1, 2])


def launch_on(
    tb: TraceBuilder,
    kernel: str,
    cpu_ts: float,
    gpu_ts: float,
    gpu_dur: float,
    *,
    tid: int = TID,
    cat: str = "kernel",
    api: str = "cudaLaunchKernel",
) -> int:
    """A runtime call on thread ``tid`` at cpu_ts that starts ``kernel`` at gpu_ts."""
    corr = tb.runtime(api, cpu_ts, 2.0, tid=tid)
    tb.gpu(kernel, gpu_ts, gpu_dur, correlation=corr, cat=cat)
    return corr


def training_trace(tb: TraceBuilder) -> TraceBuilder:
    """Two ProfilerSteps (0-1000 µs, 1000-2000 µs) of a tiny training loop. GPU times (µs):

    forward (main thread, step 1): aten::linear > aten::addmm -> NVJET 40; aten::gelu -> GELU 10;
      aten::copy_ -> memcpy 5;  nccl:all_reduce (step 2) -> NCCL 100; aten::mm (step 2) -> AMPERE_SGEMM
      1990-2010, 10 of it inside the window.
    backward (thread BWD): evaluate_function: AddmmBackward0 > AddmmBackward0 > aten::mm -> NVJET 30,
      aten::mm -> SIMT_SGEMM 20.
    optimizer: Optimizer.step#SGD.step > aten::_foreach_add_ -> FOREACH 25.
    other: MYSTERY 7, whose launch is not in the trace.
    """
    tb.step(1, 0, 1000)
    tb.step(2, 1000, 1000)
    tb.annotation("Optimizer.zero_grad#SGD.zero_grad", 2, 3)
    tb.cpu_op("aten::linear", 10, 50)
    tb.cpu_op("aten::addmm", 12, 40)
    launch_on(tb, NVJET_BF16, 20, 100, 40)
    tb.cpu_op("aten::gelu", 70, 10)
    launch_on(tb, GELU, 72, 150, 10)
    tb.cpu_op("aten::copy_", 85, 10)
    launch_on(
        tb, "Memcpy HtoD (Pageable -> Device)", 87, 165, 5, cat="gpu_memcpy", api="cudaMemcpyAsync"
    )
    tb.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", 300, 100, tid=BWD)
    tb.cpu_op("AddmmBackward0", 302, 90, tid=BWD)
    tb.cpu_op("aten::mm", 305, 30, tid=BWD)
    launch_on(tb, NVJET_BF16, 310, 400, 30, tid=BWD)
    tb.cpu_op("aten::mm", 340, 30, tid=BWD)
    launch_on(tb, SIMT_SGEMM, 345, 440, 20, tid=BWD)
    tb.annotation("Optimizer.step#SGD.step", 600, 100)
    tb.cpu_op("aten::_foreach_add_", 610, 20)
    launch_on(tb, FOREACH, 612, 650, 25)
    tb.cpu_op("nccl:all_reduce", 1500, 20)
    launch_on(tb, NCCL, 1505, 1520, 100)
    tb.cpu_op("aten::mm", 1900, 20)
    launch_on(tb, AMPERE_SGEMM, 1905, 1990, 20)
    tb.gpu(MYSTERY, 1700, 7, correlation=99999)
    return tb


def ingest(con, tb: TraceBuilder, tmp_path: Path, name: str = "t.json") -> str:
    return ingest_paths(con, [tb.write(tmp_path / name)])[0].run_id


WINDOW = Win(0, 2_000_000)


@pytest.fixture
def run(con, trace, tmp_path):
    return ingest(con, training_trace(trace), tmp_path)


# -- breakdown on the hand-built trace --------------------------------------------------------------


@pytest.mark.slow
def test_by_category_and_total(con, run):
    kb = kernel_breakdown(con, run, 0, WINDOW)
    assert kb.by_category == {
        "gemm": 40 + 30 + 20 + 10,
        "attention": 0.0,
        "convolution": 0.0,
        "elementwise": 10.0,
        "reduction_norm_softmax": 0.0,
        "optimizer": 25.0,
        "copy_memset": 5.0,
        "communication": 100.0,
        "other": 7.0,
    }
    assert kb.total_us == pytest.approx(247.0)
    assert kb.n_kernels == 9
    assert kb.window_us == 2000.0


@pytest.mark.slow
def test_by_region(con, run):
    kb = kernel_breakdown(con, run, 0, WINDOW)
    assert kb.by_region == pytest.approx(
        {"forward": 40 + 10 + 5 + 100 + 10, "backward": 30 + 20, "optimizer": 25, "other": 7}
    )
    assert sum(kb.by_region.values()) == pytest.approx(kb.total_us)


@pytest.mark.slow
def test_by_launching_op_is_outermost_cpu_op(con, run):
    kb = kernel_breakdown(con, run, 0, WINDOW)
    ops = {o.op: (o.count, o.kernels, o.kernel_us) for o in kb.by_op}
    assert ops == {
        "nccl:all_reduce": (1, 1, 100.0),
        "autograd::engine::evaluate_function: AddmmBackward0": (1, 2, 50.0),
        "aten::linear": (1, 1, 40.0),  # not aten::addmm: the outermost op on the thread
        "aten::_foreach_add_": (1, 1, 25.0),
        "aten::gelu": (1, 1, 10.0),
        "aten::mm": (1, 1, 10.0),
        "(no cpu op)": (1, 1, 7.0),
        "aten::copy_": (1, 1, 5.0),
    }
    assert [o.op for o in kb.by_op][:2] == [
        "nccl:all_reduce",
        "autograd::engine::evaluate_function: AddmmBackward0",
    ]


def test_top_kernels_and_folded_others(con, run):
    kb = kernel_breakdown(con, run, 0, WINDOW, top_n=3)
    top = {r.name: r for r in kb.top}
    assert [r.name for r in kb.top[:3]] == [NCCL, NVJET_BF16, FOREACH]
    nv = top[NVJET_BF16]
    assert (nv.count, nv.total_us, nv.mean_us, nv.min_us, nv.max_us) == (2, 70.0, 35.0, 30.0, 40.0)
    assert nv.tensor_core and nv.category == "gemm" and nv.precision == "bf16"
    others = kb.top[-1]
    # folded: SIMT_SGEMM 20, AMPERE_SGEMM 10 (clipped from 20), GELU 10, MYSTERY 7, memcpy 5
    assert others.name.startswith("others (5 kernels)")
    assert (others.count, others.total_us, others.min_us, others.max_us) == (5, 52.0, 5.0, 20.0)
    assert others.mean_us == pytest.approx(52 / 5)
    assert others.tensor_core is False
    assert sum(r.total_us for r in kb.top) == pytest.approx(kb.total_us)


@pytest.mark.slow
def test_kernel_partly_outside_window_counts_inside_part(con, run):
    kb = kernel_breakdown(con, run, 0, WINDOW, top_n=50)
    row = next(r for r in kb.top if r.name == AMPERE_SGEMM)
    assert (row.count, row.total_us, row.min_us, row.max_us) == (1, 10.0, 10.0, 10.0)
    only_step2 = kernel_breakdown(con, run, 0, Win(1_000_000, 2_000_000, [2]))
    assert only_step2.total_us == pytest.approx(100 + 10 + 7)
    assert only_step2.by_region["forward"] == pytest.approx(110)


@pytest.mark.slow
def test_to_json_and_dataframes(con, run):
    kb = kernel_breakdown(con, run, 0, WINDOW, top_n=2)
    j = kb.to_json()
    assert set(j) >= {"total_us", "by_category", "top", "by_region", "by_op"}
    assert set(j["top"][0]) >= {
        "name",
        "category",
        "count",
        "total_us",
        "mean_us",
        "min_us",
        "max_us",
        "tensor_core",
    }
    assert list(j["by_category"]) == list(CATEGORIES)
    df = top_kernels_df(con, run, 0, WINDOW, top_n=2)
    assert len(df) == 3 and df["total_us"].sum() == pytest.approx(247.0)
    assert K.kernel_categories_df(con, run, 0, WINDOW)["us"].sum() == pytest.approx(247.0)
    assert K.kernel_regions_df(con, run, 0, WINDOW)["pct"].sum() == pytest.approx(100.0)
    assert len(K.kernel_ops_df(con, run, 0, WINDOW, top_n=3)) == 3


def test_empty_window(con, run):
    kb = kernel_breakdown(con, run, 0, Win(5_000_000, 6_000_000, []))
    assert kb.total_us == 0 and kb.top == [] and kb.by_op == []
    assert set(kb.by_category.values()) == {0.0}


def test_backward_on_the_training_thread_is_told_by_op(con, trace, tmp_path):
    """Autograd on the caller's thread (CPU-style): the evaluate_function ops are top-level ops of the
    thread with the ProfilerStep, and only their kernels are backward."""
    trace.step(1, 0, 1000)
    trace.cpu_op("aten::mm", 10, 20)
    launch_on(trace, NVJET_BF16, 12, 100, 10)
    trace.cpu_op("autograd::engine::evaluate_function: MmBackward0", 200, 50)
    trace.cpu_op("aten::mm", 205, 20)
    launch_on(trace, NVJET_BF16, 210, 300, 30)
    run = ingest(con, trace, tmp_path)
    kb = kernel_breakdown(con, run, 0, Win(0, 1_000_000, [1]))
    assert kb.by_region == {"forward": 10.0, "backward": 30.0, "optimizer": 0.0, "other": 0.0}


@pytest.mark.slow
def test_backward_thread_found_by_fwdbwd_flow(con, trace, tmp_path):
    trace.step(1, 0, 1000)
    trace.cpu_op("MmBackward0", 200, 50, tid=BWD)
    launch_on(trace, NVJET_BF16, 210, 300, 30, tid=BWD)
    trace.events.append(
        {"ph": "s", "id": 7, "pid": PID, "tid": TID, "ts": 10, "cat": "fwdbwd", "name": "fwdbwd"}
    )
    trace.events.append(
        {
            "ph": "f",
            "id": 7,
            "pid": PID,
            "tid": BWD,
            "ts": 200,
            "cat": "fwdbwd",
            "name": "fwdbwd",
            "bp": "e",
        }
    )
    run = ingest(con, trace, tmp_path)
    assert kernel_breakdown(con, run, 0, Win(0, 1_000_000, [1])).by_region["backward"] == 30.0


# -- name rules ----------------------------------------------------------------------------------------

REAL_NAMES = [
    (
        "gemm",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
    ),
    (
        "gemm",
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    ),
    ("gemm", "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_bias_TNN"),
    ("gemm", "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_TNT"),
    (
        "gemm",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align4::Params)",
    ),
    (
        "gemm",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float*, float const*, float const*, float const*, float*, void*, long, float*, int*)",
    ),
    (
        "gemm",
        "void gemmSN_NN_kernel<float, 128, 2, 4, 8, 4, 4, false, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
    ),
    ("gemm", "triton_tem_fused__to_copy_addmm_relu_t_3"),
    (
        "attention",
        "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, float, true, false, false, 64, 64, 64, false>::Params)",
    ),
    (
        "attention",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
    ),
    (
        "attention",
        "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, float const*, float const*)",
    ),
    (
        "attention",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    ),
    (
        "convolution",
        "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
    ),
    (
        "convolution",
        "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)",
    ),
    (
        "convolution",
        "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)",
    ),
    (
        "convolution",
        "void cudnn::winograd_nonfused::winogradWgradDelta4x4<float, float>(cudnn::winograd_nonfused::WinogradDeltaParams<float, float>)",
    ),
    (
        "convolution",
        "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>(...)",
    ),
    (
        "convolution",
        "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi64ELi64EEE",
    ),
    (
        "convolution",
        "void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::reduction::kernel::ReduceSplitK<cutlass__5x_cudnn::MatrixShape<4, 256>, cutlass__5x_cudnn::epilogue::thread::LinearCombination<cutlass__5x_cudnn::bfloat16_t, 8, float, float> > >(...)",
    ),
    (
        "convolution",
        "void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<xmma__5x_cudnn::implicit_gemm::wgrad_indexed::Warp_specialized_params<xmma__5x_cudnn::Grid_constant_params> >(...)",
    ),
    ("elementwise", GELU),
    (
        "elementwise",
        "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, at::native::templates::cuda::normal_and_transform<float, float, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(...)",
    ),
    ("elementwise", "triton_poi_fused_gelu_gelu_backward_view_4"),
    ("elementwise", "triton_poi_fused_addmm_relu_0"),  # a pointwise epilogue, not a GEMM
    (
        "reduction_norm_softmax",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*, float const*, float const*, float*, float*, float*)",
    ),
    (
        "reduction_norm_softmax",
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, bool const*, int, bool)",
    ),
    (
        "reduction_norm_softmax",
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u, 32u, 256u, false, true, false>(long, long, float const*, float const*, float const*, float const*, float*, float*)",
    ),
    (
        "reduction_norm_softmax",
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
    ),
    (
        "reduction_norm_softmax",
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)",
    ),
    (
        "reduction_norm_softmax",
        "triton_red_fused__to_copy_native_layer_norm_native_layer_norm_backward_view_9",
    ),
    ("optimizer", FOREACH),
    (
        "optimizer",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float const*, double, double, double, double, double, bool, float const*, float const*>(...)",
    ),
    (
        "copy_memset",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<...>)",
    ),
    (
        "copy_memset",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
    ),
    (
        "copy_memset",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 4, 64, 64>(...)",
    ),
    (
        "copy_memset",
        "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)",
    ),
    (
        "copy_memset",
        "void nhwcAddPaddingKernel<float, float, float, true, (cudnnKernelDataType_t)0>(int, int, int, int, int, int, int, int, float const*, float*, int, int, int, int, float, float, cudnn::reduced_divisor, cudnn::reduced_divisor, cudnn::reduced_divisor, cudnn::reduced_divisor, cudnn::reduced_divisor, cudnn::reduced_divisor, int, int, int, int)",
    ),
    (
        "copy_memset",
        "void cudnn::engines_precompiled::convertTensor_kernel<float, float, float, (cudnnKernelDataType_t)2>(float, float const*, float, float*, unsigned long)",
    ),
    ("copy_memset", "triton_poi_fused__to_copy_0"),
    ("communication", NCCL),
    (
        "communication",
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    ),
    (
        "other",
        "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, long, int>::Policy900, true, long, long, int, int>(...)",
    ),
]


@pytest.mark.parametrize(("category", "name"), REAL_NAMES)
def test_category_of_real_names(category, name):
    assert classify_kernel(name) == category


def test_memcpy_and_memset_by_trace_category():
    assert classify_kernel("Memcpy DtoD (Device -> Device)", "gpu_memcpy") == "copy_memset"
    assert classify_kernel("Memset (Device)", "gpu_memset") == "copy_memset"
    assert classify_kernel(MYSTERY) == "other"


def test_convert_is_not_convolution():
    assert (
        classify_kernel("void fp8_convert_kernel<float>(float const*, __nv_fp8_e4m3*, int)")
        != "convolution"
    )
    assert classify_kernel("void my_conv1d_fwd_kernel<float>(...)") == "convolution"


def test_norm_is_not_normal_distribution():
    name = "void at::native::distribution_elementwise_grid_stride_kernel<float, 4, normal_and_transform<float>>(...)"
    assert classify_kernel(name) == "elementwise"


@pytest.mark.parametrize("rule", CATEGORY_RULES, ids=lambda r: f"{r.category}:{r.example[:30]}")
def test_every_rule_example_is_decided_by_its_rule(rule):
    assert K.matching_rule(rule.example) is rule
    assert classify_kernel(rule.example) == rule.category


def test_docs_list_every_category_rule():
    text = DOCS.read_text()
    for rule in CATEGORY_RULES:
        assert short_name(rule.example, 90) in text, rule.example
    assert K.rules_markdown() in text


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_classification_is_a_total_function(name):
    kc = classify(name)
    assert kc.category in CATEGORIES
    assert kc.tc.tensor_core in (True, False, None)
    # case does not matter: names are read case-insensitively
    assert classify_kernel(name.swapcase()) == kc.category or not name.isascii()


def test_short_name():
    assert short_name(GELU).startswith(
        "at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
    )
    assert (
        short_name("void at::native::(anonymous namespace)::foo_kernel<float>(float*)")
        == "at::native::foo_kernel<float>"
    )
    assert short_name("x" * 300, 50).endswith("…") and len(short_name("x" * 300, 50)) == 50


# -- folded others: property against brute force ----------------------------------------------------


@st.composite
def kernel_rows(draw):
    n = draw(st.integers(0, 30))
    rows = []
    for i in range(n):
        count = draw(st.integers(1, 50))
        durs = draw(st.lists(st.integers(0, 10_000), min_size=count, max_size=count))
        rows.append((f"k{i}", durs))
    return rows, draw(st.integers(0, 35))


@pytest.mark.slow
@given(kernel_rows())
@settings(max_examples=200, deadline=None)
def test_folded_others_row_equals_brute_force(data):
    rows, top_n = data
    krs = [
        KernelRow(
            name, "gemm", len(d), float(sum(d)), sum(d) / len(d), float(min(d)), float(max(d)), True
        )
        for name, d in rows
    ]
    out = fold_rows(krs, top_n)
    ranked = sorted(rows, key=lambda r: (-sum(r[1]), r[0]))
    if len(rows) <= top_n:
        assert [r.name for r in out] == [r[0] for r in ranked]
        return
    assert [r.name for r in out[:-1]] == [r[0] for r in ranked[:top_n]]
    folded = [x for _, d in ranked[top_n:] for x in d]
    o = out[-1]
    assert o.count == len(folded)
    assert o.total_us == sum(folded)
    assert o.min_us == min(folded) and o.max_us == max(folded)
    assert math.isclose(o.mean_us, sum(folded) / len(folded))
    assert sum(r.total_us for r in out) == sum(sum(d) for _, d in rows)


# -- top-level host spans: against the definition, span by span -------------------------------------


def _toplevel_by_definition(
    ts: list[int], end: list[int], names: list[int]
) -> tuple[list[int], list[int], list[int]]:
    """Spans in (start, longest first) order, the original order on a full tie; a span is top level
    when it starts at or after the end of every span before it."""
    order = sorted(range(len(ts)), key=lambda i: (ts[i], -end[i]))
    keep = [i for k, i in enumerate(order) if all(end[j] <= ts[i] for j in order[:k])]
    return [ts[i] for i in keep], [end[i] for i in keep], [names[i] for i in keep]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25), st.integers(0, 9)), max_size=40),
    st.sampled_from(["as drawn", "kineto", "by start"]),
)
def test_toplevel_spans_match_the_definition(spans: list[tuple[int, int, int]], order: str) -> None:
    from gpuscope.analysis.kernels import toplevel

    if (
        order == "kineto"
    ):  # as Kineto writes them: start ascending, the longer first (the fast path)
        spans = sorted(spans, key=lambda s: (s[0], -s[1]))
    elif order == "by start":  # ascending starts, ties as drawn: a shorter span may come first
        spans = sorted(spans, key=lambda s: s[0])
    ts = [s for s, _, _ in spans]
    end = [s + d for s, d, _ in spans]
    names = [n for _, _, n in spans]
    got = toplevel(
        np.asarray(ts, dtype=np.int64), np.asarray(end, dtype=np.int64), np.asarray(names)
    )
    want = _toplevel_by_definition(ts, end, names)
    assert [g.tolist() for g in got] == [list(w) for w in want]


def test_toplevel_spans_by_hand() -> None:
    from gpuscope.analysis.kernels import toplevel

    # [0,10) holds [2,5) and [5,10); [10,12) starts where [0,10) ends: top level; [11,20) starts
    # inside [10,12): not top level; of the two spans starting at 30, the longer one is
    ts = np.asarray([0, 2, 5, 10, 11, 30, 30], dtype=np.int64)
    end = np.asarray([10, 5, 10, 12, 20, 35, 31], dtype=np.int64)
    got = toplevel(ts, end, np.arange(7))
    assert [g.tolist() for g in got] == [[0, 10, 30], [10, 12, 35], [0, 3, 5]]
    # out of order (a tie listed shortest first): sorted first, the same spans kept
    got = toplevel(ts[::-1].copy(), end[::-1].copy(), np.arange(7)[::-1].copy())
    assert [g.tolist() for g in got] == [[0, 10, 30], [10, 12, 35], [0, 3, 5]]


def test_toplevel_spans_come_in_order_from_the_store(con, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The host spans of two categories come in time order from the query (the store keeps them
    by category), so a thread of ~1 M CPU ops is not sorted again in numpy; on a full tie (same
    start and length) the file's first one is the top-level one."""
    t = TraceBuilder()
    t.cpu_op("aten::first", 10, 5)  # a full tie: the first in the file is kept
    t.cpu_op("aten::second", 10, 5)
    t.cpu_op("aten::inner", 11, 2)
    t.cpu_op("Legacy::op", 0, 4, cat="Operator")  # another category, earlier in time
    t.cpu_op("Legacy::later", 20, 3, cat="Operator")
    t.cpu_op("aten::last", 30, 1)
    run_id = ingest(con, t, tmp_path)

    def no_sort(*a: object, **k: object) -> None:
        raise AssertionError("the spans came out of order")

    monkeypatch.setattr(K.np, "lexsort", no_sort)
    got = K.toplevel_intervals(con, run_id, 0, [(PID, TID)])[(PID, TID)]
    rows = con.execute("SELECT name_id, name FROM names WHERE run_id = ?", [run_id]).fetchall()
    names = dict(rows)
    kept = [names[int(i)] for i in got.name_id]
    assert kept == ["Legacy::op", "aten::first", "Legacy::later", "aten::last"]
    assert got.ts.tolist() == [0, 10_000, 20_000, 30_000]
    assert got.end.tolist() == [4_000, 15_000, 23_000, 31_000]


_ORDERED_LAUNCHED_SQL = K._LAUNCHED_SQL + "    ORDER BY l.rowid NULLS LAST, g.rid\n"
"""The oracle: the window's rows as DuckDB's ORDER BY puts them (the order :func:`K._launched`
gives by sorting the fetched columns instead)."""


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 400),  # launch time, µs
            st.integers(0, 2),  # launching thread
            st.integers(0, 3),  # kernel name
            st.sampled_from(["launched", "no launch", "two calls"]),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_launched_rows_come_in_the_order_duckdbs_order_by_gives(
    tmp_path_factory: pytest.TempPathFactory, kernels: list[tuple[int, int, int, str]]
) -> None:
    """Kernels launched from three threads in any order, some with no launch call in the trace
    (their correlation matches none) and some whose correlation two calls carry: the launched
    rows, sorted in numpy by (the launch's ``rowid``, ``rid``), equal DuckDB's ``ORDER BY l.rowid
    NULLS LAST, g.rid`` of the same join, column by column, each GPU row's first launch kept
    alike."""
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.store_access import execute
    from gpuscope.store import connect

    tb = TraceBuilder()
    for i, (t, th, k, how) in enumerate(kernels):
        name = (NVJET_BF16, GELU, FOREACH, MYSTERY)[k]
        gpu_ts = 500.0 + 3 * i
        if how == "no launch":
            tb.gpu(name, gpu_ts, 2.0, correlation=900_000 + i)
            continue
        corr = tb.launch(name, float(t), gpu_ts, 2.0, tid=TID + th)
        if how == "two calls":
            tb.runtime("cudaLaunchKernel", float(t) + 1, 1.0, correlation=corr, tid=TID + th)
    path = tb.write(tmp_path_factory.mktemp("launched") / "t.json")
    with connect(":memory:") as con:
        rid = ingest_paths(con, [path])[0].run_id
        ix = RankIndex.shared(con, rid, 0)
        got = K._launched(ix, 0, 10_000_000, None)
        sql = _ORDERED_LAUNCHED_SQL.format(
            gpu=ix.gpu(),
            runtime=ix.runtime(),
            copy_cats=K.sql_list(K.COPY_CATS),
            device_filter="",
        )
        p = {"start": 0, "end": 10_000_000, "no_launch": int(K._NO_LAUNCH)}
        want = execute(con, sql, p).fetchnumpy()
    uniq, first = np.unique(np.asarray(want["rid"]), return_index=True)
    keep = slice(None) if len(uniq) == len(want["rid"]) else first  # as K._launched keeps them
    assert len(got) == len(kernels)
    for c in ("name_id", "copy", "in_ns", "pid", "tid", "launch_ns", "has_launch"):
        assert np.asarray(getattr(got, c)).tolist() == np.asarray(want[c])[keep].tolist(), c


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, 12)), min_size=1, max_size=40
    ),
    st.randoms(use_true_random=False),
)
def test_fetched_rows_are_put_in_launch_order_whatever_order_they_came_in(
    rows: list[tuple[int, bool, int]], rnd
) -> None:
    """Rows as a parallel join may hand them over (any order): :func:`K.launched_rows` puts them
    by the launch's rowid (none last), then the GPU row's ``rid``, as the sorted list of the
    same rows is; every column moves with its row; a ``rid`` on two rows (its correlation id on
    two calls) is kept at its first in that order, and the rows are then by ``rid``."""
    pairs = {(r if launched else int(K._NO_LAUNCH), rid): None for r, launched, rid in rows}
    # a (launch, GPU row) pair is one row of the join
    given_rows = [(lr, rid, 1000 * i + 7) for i, (lr, rid) in enumerate(pairs)]
    rnd.shuffle(given_rows)
    fetched = {
        "lrow": np.array([r[0] for r in given_rows], dtype=np.int64),
        "rid": np.array([r[1] for r in given_rows], dtype=np.int64),
        "in_ns": np.array([r[2] for r in given_rows], dtype=np.int64),
    }
    (out,) = K.launched_rows(fetched, ["in_ns"])
    assert fetched == {}  # every column let go
    in_order = sorted(given_rows)
    rids = [r[1] for r in in_order]
    if len(set(rids)) == len(rids):
        want = [r[2] for r in in_order]
    else:
        first: dict[int, int] = {}
        for _lr, rid, ns in in_order:
            first.setdefault(rid, ns)
        want = [first[rid] for rid in sorted(first)]
    assert out.tolist() == want


def test_a_rank_on_one_device_holds_its_launches_once(tmp_path: Path) -> None:
    """The launches of a rank whose GPU work is all on one device are the same rows with the
    device's filter and without it: held once, for both (the FLOPs read every device, the kernel
    table and the roofline the primary one). A rank on two devices keeps each device's own."""
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.store import connect

    def rank(devices: tuple[int, ...], name: str) -> Path:
        tb = TraceBuilder()
        for i, d in enumerate(devices):
            tb.launch((NVJET_BF16, GELU)[i % 2], 10.0 * i, 500.0 + 10 * i, 5.0, device=d)
        return tb.write(tmp_path / name)

    with connect(":memory:") as con:
        one = ingest_paths(con, [rank((0, 0, 0), "one.json")])[0].run_id
        two = ingest_paths(con, [rank((0, 1, 0, 1), "two.json")])[0].run_id
        every = K.launched(con, one, 0, 0, 10_000_000)
        assert K.launched(con, one, 0, 0, 10_000_000, device=0) is every
        assert len(every) == 3
        assert len(K.launched(con, one, 0, 0, 10_000_000, device=1)) == 0  # not its device
        both = K.launched(con, two, 0, 0, 10_000_000)
        ix = RankIndex.shared(con, two, 0)
        for d in (0, 1):
            mine = K.launched(con, two, 0, 0, 10_000_000, device=d)
            assert mine is not both and len(mine) == 2
            assert mine.launch_ns.tolist() == K._launched(ix, 0, 10_000_000, d).launch_ns.tolist()
        assert len(both) == 4


_INTS = st.integers(-(2**40), 2**40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 5), _INTS), max_size=50))
def test_group_stats_is_pandas_groupby_in_first_row_order(rows: list[tuple[int, int]]) -> None:
    """group_stats against pandas' ``groupby(sort=False)`` (count, sum, min, max): the same
    groups in the same order, exact integer sums."""
    import pandas as pd

    key = np.array([k for k, _ in rows], dtype=np.int64)
    values = np.array([v for _, v in rows], dtype=np.int64)
    got = K.group_stats(key, values)
    want = (
        pd.DataFrame({"k": key, "v": values})
        .groupby("k", sort=False)["v"]
        .agg(["count", "sum", "min", "max"])
    )
    assert [a.tolist() for a in got] == [
        want.index.tolist(),
        want["count"].tolist(),
        want["sum"].tolist(),
        want["min"].tolist(),
        want["max"].tolist(),
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 9), st.integers(-(2**20), 2**20)), max_size=40))
def test_pairs_order_as_the_pairs_and_split_back(rows: list[tuple[int, int]]) -> None:
    """One integer per pair: equal pairs equal codes, codes ordered as the pairs, split back."""
    a = np.array([x for x, _ in rows], dtype=np.int64)
    b = np.array([y for _, y in rows], dtype=np.int64)
    p = K.Pairs.of(a, b)
    assert sorted(range(len(rows)), key=lambda i: (p.code[i], i)) == sorted(
        range(len(rows)), key=lambda i: (rows[i], i)
    )
    assert list(zip(*p.split(p.code), strict=True)) == rows


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 2**40), st.booleans()), min_size=1, max_size=30
    )
)
def test_launching_threads_are_the_distinct_pairs(rows: list[tuple[int, int, bool]]) -> None:
    """Launched.threads: the distinct (pid, tid) pairs of the rows with a launch, ascending."""
    n = len(rows)
    lx = K.Launched(
        name_id=np.zeros(n, dtype=np.int32),
        copy=np.zeros(n, dtype=np.int8),
        in_ns=np.ones(n, dtype=np.int64),
        pid=np.array([p for p, _, _ in rows], dtype=np.int64),
        tid=np.array([t for _, t, _ in rows], dtype=np.int64),
        launch_ns=np.zeros(n, dtype=np.int64),
        has_launch=np.array([h for _, _, h in rows], dtype=bool),
    )
    assert lx.threads() == sorted({(p, t) for p, t, h in rows if h})


def test_streamed_columns_are_what_fetchnumpy_gives() -> None:
    """A real rank's launches (the DDP sample's rank 1, 2,265) streamed 500 rows at a time: the
    same columns, types and values, in the same order, as the whole result fetched at once; an
    empty result keeps its types; a NULL is refused."""
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.store import connect

    trace = sorted((Path(__file__).resolve().parent.parent / "sample_traces" / "ddp").glob("*1.*"))
    with connect(":memory:") as con:
        run_id = ingest_paths(con, trace)[0].run_id
        ix = RankIndex.shared(con, run_id, 1)
        launched = K._LAUNCHED_SQL.format(
            gpu=ix.gpu(), runtime=ix.runtime(), copy_cats="('gpu_memcpy')", device_filter=""
        )
        params = {"start": 0, "end": 2**62, "no_launch": int(K._NO_LAUNCH)}
        sql = f"SELECT * FROM ({launched}) ORDER BY rid, lrow"
        want = con.execute(sql, params).fetchnumpy()
        got = K.streamed_columns(con.execute(sql, params), rows=500)
        assert len(want["rid"]) > 2000
        assert list(got) == list(want)
        for name, values in want.items():
            assert got[name].dtype == np.asarray(values).dtype, name
            assert np.array_equal(got[name], np.asarray(values)), name
        empty = K.streamed_columns(
            con.execute(sql.replace("ORDER BY", "WHERE rid < 0 ORDER BY"), params)
        )
        assert {n: a.dtype for n, a in empty.items()} == {n: a.dtype for n, a in got.items()}
        assert all(len(a) == 0 for a in empty.values())
        with pytest.raises(ValueError, match="holds NULLs"):
            K.streamed_columns(con.execute("SELECT CAST(NULL AS BIGINT) AS x"))
