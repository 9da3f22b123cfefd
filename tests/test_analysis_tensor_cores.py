"""Tensor-core reading of kernel names, and the tensor-core share of a window.

Names marked H100 were recorded by PyTorch 2.11 / CUDA 13 on an H100 (fp32 with and without TF32,
bf16 and fp16 autocast, SDPA flash / memory-efficient / cuDNN backends, cuDNN convolutions,
torch.compile max-autotune, fp8 _scaled_mm). Volta/Ampere/Blackwell/ROCm names follow the naming
schemes of cuBLAS, CUTLASS, Tensile and Composable Kernel."""

from __future__ import annotations

import pytest
from gpuscope.analysis.kernels import classify, classify_kernel
from gpuscope.analysis.tensor_cores import (
    TC_RULES,
    dtype_of,
    precision_from_tokens,
    refine_with_input_types,
    rules_markdown,
    tensor_core_info,
    tensor_core_summary,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_analysis_kernels import DOCS, TID, Win, ingest, launch_on

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


def tc(name: str) -> tuple[bool | None, str | None]:
    info = classify(name).tc
    return info.tensor_core, info.precision


H100 = [
    # fp32, TF32 off: cuBLAS picks FFMA xmma kernels and CUTLASS SIMT sgemm
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
        False,
        "fp32",
    ),
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_split_k_kernel__5x_cublas",
        False,
        "fp32",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)",
        False,
        "fp32",
    ),
    (
        "void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>(float*, float const*, float const*, int, int, int, int, int, int, float const*, float const*, float, float, int, int, int*, int*)",
        False,
        "fp32",
    ),
    (
        "sm80_xmma_gemm_cf32cf32_f32f32_cf32_nt_n_tilesize32x32x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_execute_kernel__5x_cublas",
        False,
        "fp32",
    ),
    # fp32 with TF32
    (
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        True,
        "tf32",
    ),
    (
        "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize32x32x64_stage3_warpsize2x2x1_tensor16x8x8_aligna4_alignc4_execute_kernel__5x_cublas",
        True,
        "tf32",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align4::Params)",
        True,
        "tf32",
    ),
    # bf16 / fp16 / fp8: cuBLASLt nvjet (letters: t = bf16, h = fp16, q = fp8; s = fp32 accumulate/out)
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", True, "bf16"),
    ("nvjet_sm90_tss_8x64_64x16_4x1_v_bz_TNN", True, "bf16"),
    ("nvjet_sm90_hsh_64x128_64x8_2x1_v_bz_NTN", True, "fp16"),
    ("nvjet_sm90_hss_8x64_64x16_4x1_v_bz_TNN", True, "fp16"),
    ("nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_TNT", True, "fp8"),
    (
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align2>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align2::Params)",
        True,
        "bf16",
    ),
    (
        "void cutlass::Kernel2<cutlass_75_tensorop_f16_s1688gemm_f16_64x64_nn_align1>(cutlass_75_tensorop_f16_s1688gemm_f16_64x64_nn_align1::Params)",
        True,
        "fp16",
    ),
    # small-N GEMM and split-K helpers
    (
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
        False,
        "fp32",
    ),
    (
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float*, float const*, float const*, float const*, float*, void*, long, float*, int*)",
        False,
        None,
    ),
    # attention
    (
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        True,
        "3xtf32",
    ),
    (
        "fmha_cutlassB_bf16_aligned_64x64_k64_seqaligned_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 64, 64, 64, true>::Params)",
        True,
        "bf16",
    ),
    (
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, false, cutlass::half_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::half_t> >, false, true, false, false, false, true, false>(pytorch_flash::Flash_bwd_params)",
        True,
        "fp16",
    ),
    (
        "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params)",
        False,
        None,
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
        True,
        None,
    ),
    # convolutions (cuDNN)
    (
        "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x32x8_stage3_warpsize2x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn",
        False,
        "fp32",
    ),
    (
        "sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize1x1x4_g2_tensor16x8x8_execute_kernel__5x_cudnn",
        True,
        "tf32",
    ),
    (
        "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
        True,
        "tf32",
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize2x2x1_g1_tensor16x8x16_execute_kernel__5x_cudnn",
        True,
        "fp16",
    ),
    (
        "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn",
        True,
        "bf16",
    ),
    (
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_256x64_16x4_nhwc_align4>(cutlass_tensorop_s1688dgrad_optimized_tf32_256x64_16x4_nhwc_align4::Params)",
        True,
        "tf32",
    ),
    (
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_64x64_64x5_nhwc_align8>(cutlass_tensorop_bf16_s16816fprop_optimized_bf16_64x64_64x5_nhwc_align8::Params)",
        True,
        "bf16",
    ),
    (
        "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi64ELi32EEENS4_52Conv2dWgradOutputGradientTileAccessIteratorOptimizedINS_11MatrixShapeILi64ELi32EEENS_10tfloat32_tENS_9transform29PitchLinearWarpRakedThreadMapINS_6layout40ColumnMajorTensorOpMultiplicandCongruousILi32ELi32EEE",
        True,
        "tf32",
    ),
    (
        "void implicit_convolve_sgemm<__nv_bfloat16, __nv_bfloat16, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, __nv_bfloat16 const*, int, __nv_bfloat16*, __nv_bfloat16 const*, kernel_conv_params, unsigned long long, int, float, float, int, __nv_bfloat16 const*, __nv_bfloat16 const*, bool, int, int)",
        False,
        "bf16",
    ),
    (
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, int, int)",
        False,
        "fp32",
    ),
    (
        "void fft2d_c2r_32x32<float, false, false, 0u, false, false>(float*, float2 const*, int, int, int, int, int, int, int, int, int, float, float, cudnn::reduced_divisor, bool, float*, float*, int2, cudnnActivationStruct, int, int)",
        False,
        "fp32",
    ),
    (
        "void cudnn::winograd_nonfused::winogradForwardData9x9_5x5<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
        False,
        "fp32",
    ),
    (
        "sm90_xmma_depthwise_convolution_wgrad_tiling_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize1x8x8_1x3x3_1x1x1_1x1x1_stage3_warpsize4x1x1_g32_betaTrue_execute_kernel__5x_cudnn",
        False,
        "fp32",
    ),
    ("conv2d_c1_k1_nhwc_specialized", False, None),
    # torch.compile max-autotune templates: the name does not say
    ("triton_tem_fused__to_copy_mm_t_threshold_backward_4", None, None),
    # not math
    (
        "triton_per_fused__to_copy_add_native_layer_norm_native_layer_norm_backward_view_7",
        False,
        None,
    ),
]

OTHER_ARCHS = [
    # Volta (cuBLAS): h884 = fp16 tensor cores; s884 = fp16 in, fp32 accumulate, tensor cores; sgemm = FFMA
    ("volta_h884gemm_64x64_ldg8_nn", True, "fp16"),
    ("volta_s884gemm_fp16_128x128_ldg8_f2f_nn", True, "fp16"),
    ("volta_sgemm_128x64_nn", False, "fp32"),
    (
        "fmha_cutlassF_f32_aligned_64x64_rf_sm70(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm70, true, 64, 64, 64, true, true>::Params)",
        False,
        "fp32",
    ),
    (
        "fmha_cutlassF_f16_aligned_64x64_rf_sm70(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cutlass::arch::Sm70, true, 64, 64, 64, true, true>::Params)",
        True,
        "fp16",
    ),
    # Turing / Ampere (cuBLAS)
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn", True, "fp16"),
    ("ampere_sgemm_128x64_nn", False, "fp32"),
    ("ampere_h16816gemm_256x128_ldg8_stages_32x3_nn", True, "fp16"),
    ("ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", True, "fp16"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", True, "bf16"),
    ("ampere_tf32_s1688gemm_tf32_256x128_16x3_nt", True, "tf32"),
    ("ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn", True, "fp16"),
    ("ampere_i8816gemm_int8_128x128_ldg16_stages_64x3_nt", True, "int8"),
    (
        "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_execute_kernel__5x_cublas",
        True,
        "bf16",
    ),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8", True, "bf16"),
    ("cutlass_80_simt_sgemm_128x128_8x2_nn_align1", False, "fp32"),
    # Hopper / Blackwell
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
        True,
        "bf16",
    ),
    (
        "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma",
        True,
        "bf16",
    ),
    ("sm90_gemm_bf16_bf16_f32_tma_warpspecialized_pingpong", True, "bf16"),
    ("nvjet_sm100_tst_256x256_64x4_2x1_2cta_h_bz_TNT", True, "bf16"),
    (
        "sm100_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_cgasize2x1x1_execute_segment_k_off_kernel__5x_cublas",
        True,
        "bf16",
    ),
    ("my_tcgen05_bf16_gemm_kernel", True, "bf16"),
    (
        "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t> >(Flash_fwd_params)",
        True,
        "fp16",
    ),
    # ROCm
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_GRVW8_K1_TT2_64", True, "fp16"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_SN_LDSB1", True, "bf16"),
    ("Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_GRVW4", True, "fp32"),
    ("Cijk_Ailk_Bljk_SB_MT64x64x16_SN_GRVW4_K1_TT4_4", False, "fp32"),
    (
        "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::half_t> >(...)",
        True,
        "fp16",
    ),
    ("void ck::kernel_gemm_dl_v1r3<ck::GridwiseGemmDl_km_kn_mn_v1r3<float> >(...)", False, "fp32"),
    # unknown: a GEMM-like kernel whose name says nothing about the math unit
    ("my_custom_gemm_kernel", None, None),
]


@pytest.mark.parametrize(
    ("name", "expect_tc", "precision"), H100 + OTHER_ARCHS, ids=lambda x: str(x)[:60]
)
def test_tensor_core_reading(name, expect_tc, precision):
    assert tc(name) == (expect_tc, precision)


def test_misleading_xmma_name_with_ffma_is_plain_fp32():
    """'xmma_gemm' suggests tensor cores; 'ffma' says FP32 FMA on CUDA cores: ffma wins."""
    name = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
    info = classify(name).tc
    assert (info.tensor_core, info.precision, info.mma, info.rule) == (
        False,
        "fp32",
        True,
        "simt-marker",
    )
    assert tensor_core_info("cutlass_tensorop_ffma_gemm", "gemm").tensor_core is False
    assert tensor_core_info("some_tensorop_kernel_with_simt_epilogue", "gemm").tensor_core is False


def test_nvjet_t_is_bf16_not_tf32():
    """The lead guessed 't' might be TF32; a bf16 autocast run uses only nvjet 'tst' kernels and an fp16
    one only 'hsh' (recorded on H100), so 't' is bf16."""
    assert tc("nvjet_sm90_tst_64x32_64x16_2x4_h_bz_NTT") == (True, "bf16")


def test_fp32_memory_efficient_attention_on_ampere_plus_uses_tensor_cores():
    """PyTorch's mem-efficient attention picks OpClassTensorOp with OpMultiplyAddFastF32 (3xTF32) for
    float on Sm80+ (gemm_kernel_utils.h DefaultGemmType): tensor cores, fp32 accuracy."""
    assert tc("fmha_cutlassB_f32_aligned_64x64_k64_sm80(...)") == (True, "3xtf32")


@pytest.mark.parametrize("rule", TC_RULES, ids=lambda r: f"{r.rule}:{r.example[:30]}")
def test_every_tc_rule_example(rule):
    info = classify(rule.example).tc
    assert (info.tensor_core, info.precision) == (rule.tensor_core, rule.precision)
    assert info.rule.split("+")[0] == rule.rule


def test_docs_hold_the_tc_table():
    assert rules_markdown() in DOCS.read_text()


def test_non_math_kernels_never_count_as_tensor_core():
    assert tensor_core_info("nvjet_looking_elementwise_kernel", "elementwise").tensor_core is False
    assert (
        classify(
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(...)"
        ).tc.mma
        is False
    )


def test_refine_triton_template_by_input_types():
    info = classify("triton_tem_fused_mm_t_2").tc
    assert (
        refine_with_input_types(info, ["c10::BFloat16", "c10::BFloat16", "Scalar"]).tensor_core
        is True
    )
    assert refine_with_input_types(info, ["float", "float"]).tensor_core is None
    assert refine_with_input_types(info, ["c10::Float8_e4m3fn", "float"]).precision == "fp8"
    nv = classify("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT").tc
    assert refine_with_input_types(nv, ["float"]) is nv


def test_dtype_and_precision_tokens():
    assert (
        dtype_of("c10::BFloat16") == "bf16"
        and dtype_of("c10::Half") == "fp16"
        and dtype_of("float") == "fp32"
    )
    assert (
        dtype_of("c10::Float8_e4m3fn") == "fp8"
        and dtype_of("double") == "fp64"
        and dtype_of("long int") is None
    )
    assert (
        precision_from_tokens("foo_bf16_bar") == "bf16"
        and precision_from_tokens("foo_f16_") == "fp16"
    )
    assert precision_from_tokens("x_e4m3_y") == "fp8" and precision_from_tokens("abc") is None


@given(
    st.text(max_size=200),
    st.sampled_from(["gemm", "convolution", "attention", "elementwise", "other"]),
)
@settings(max_examples=300, deadline=None)
def test_tc_rules_are_total_and_simt_markers_win(name, category):
    info = tensor_core_info(name, category)
    assert info.tensor_core in (True, False, None)
    if category in ("elementwise", "other"):
        assert info.tensor_core is False and not info.mma
    marked = tensor_core_info(name + "_tensorop_wgmma_ffma", "gemm")
    assert marked.tensor_core is False  # an explicit FMA marker is never read as tensor cores


# -- summary on a hand-built trace ----------------------------------------------------------------------

NVJET = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT"
FFMA = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
SPLITK = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>(cublasLt::cublasSplitKParams<float>, float const*)"


def test_tensor_core_summary(con, trace, tmp_path):
    """kernel time (memcpy left out) = 100 nvjet + 50 ffma + 30 add + 20 custom GEMM + 10 split-K
    + 15 + 5 Triton templates = 230 µs. On tensor cores: nvjet 100 + the template launched with bf16
    operands 15 = 115 (50 %). Eligible but on CUDA cores: the ffma GEMM, 50 (fp32). Unknown: the
    custom GEMM 20 and the fp32 template 5."""
    trace.step(1, 0, 1000)
    for name, ts, dur in [
        (NVJET, 100, 100),
        (FFMA, 210, 50),
        (ADD, 270, 30),
        ("my_custom_gemm_kernel", 310, 20),
        (SPLITK, 340, 10),
    ]:
        trace.cpu_op("aten::op", ts - 90, 10)
        launch_on(trace, name, ts - 88, ts, dur)
    trace.cpu_op("aten::copy_", 5, 5)
    launch_on(
        trace,
        "Memcpy HtoD (Pageable -> Device)",
        6,
        360,
        40,
        cat="gpu_memcpy",
        api="cudaMemcpyAsync",
    )
    trace.cpu_op(
        "triton_tem_fused_mm_0",
        400,
        10,
        **{"Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]},
    )
    launch_on(trace, "triton_tem_fused_mm_0", 405, 500, 15, api="cuLaunchKernel")
    trace.cpu_op("triton_tem_fused_mm_0", 420, 10, **{"Input type": ["float", "float", "Scalar"]})
    launch_on(trace, "triton_tem_fused_mm_0", 425, 520, 5, api="cuLaunchKernel")
    run = ingest(con, trace, tmp_path)
    s = tensor_core_summary(con, run, 0, Win(0, 1_000_000, [1]))
    assert s.kernel_us == pytest.approx(230)
    assert s.tc_us == pytest.approx(115)
    assert s.tensor_core_pct == pytest.approx(50.0)
    assert s.tc_eligible_not_tc_us == pytest.approx(50)
    assert s.fp32_gemm_us == pytest.approx(50)
    assert s.unknown_precision_us == pytest.approx(25)
    assert s.math_us == pytest.approx(200)
    assert s.by_precision == pytest.approx({"bf16": 115.0})
    assert {k.name for k in s.unknown_kernels} == {
        "my_custom_gemm_kernel",
        "triton_tem_fused_mm_0",
    }
    assert [k.name for k in s.eligible_kernels] == [FFMA]
    assert set(s.to_json()) >= {
        "tensor_core_pct",
        "tc_us",
        "kernel_us",
        "tc_eligible_not_tc_us",
        "fp32_gemm_us",
    }


def test_tensor_core_summary_empty(con, trace, tmp_path):
    trace.step(1, 0, 100)
    trace.cpu_op("aten::copy_", 5, 5)
    run = ingest(con, trace, tmp_path)
    s = tensor_core_summary(con, run, 0, Win(0, 100_000, [1]))
    assert s.tensor_core_pct is None and s.kernel_us == 0


def test_tensor_core_summary_uses_only_compute_kernels(con, trace, tmp_path):
    trace.step(1, 0, 1000)
    trace.cpu_op("aten::mm", 10, 10)
    launch_on(trace, NVJET, 12, 100, 10)
    trace.cpu_op("aten::copy_", 30, 10)
    launch_on(trace, "Memset (Device)", 32, 200, 90, cat="gpu_memset", api="cudaMemsetAsync")
    run = ingest(con, trace, tmp_path)
    assert tensor_core_summary(con, run, 0, Win(0, 1_000_000, [1])).tensor_core_pct == 100.0
    assert classify_kernel("Memset (Device)", "gpu_memset") == "copy_memset"
    assert TID  # the main thread of tracegen
