"""Convolution, cuDNN and ROCm kernel names (issue 8): category, tensor-core use and precision.

One row per real-looking name, Volta -> Blackwell, cuDNN 7 -> 9, MIOpen / hipBLASLt / Composable Kernel.
A ``relu`` (or ``bias``, ``scale``) in a convolution's name must never make it elementwise.
"""

from __future__ import annotations

import pytest
from gpuscope.analysis.kernels import classify

# (name, category, tensor_core, precision)
NAMES: list[tuple[str, str, bool | None, str | None]] = [
    # cuDNN 7 legacy engines (Volta / Turing): SIMT `scudnn`, tensor-core `s884cudnn` / `h884cudnn`
    ("volta_scudnn_128x64_relu_interior_nn_v1", "convolution", False, "fp32"),
    ("volta_scudnn_128x128_stridedB_splitK_interior_nn_v1", "convolution", False, "fp32"),
    ("volta_scudnn_128x32_sliced1x4_ldg4_relu_exp_small_nhwc_tn_v1", "convolution", False, "fp32"),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "convolution", False, "fp32"),
    ("maxwell_scudnn_128x64_relu_small_nn", "convolution", False, "fp32"),
    ("volta_fp16_scudnn_fp16_128x64_relu_interior_nn_v1", "convolution", False, "fp16"),
    (
        "volta_s884cudnn_fp16_256x128_ldg8_splitK_relu_exp_medium_nhwc_tn_v1",
        "convolution",
        True,
        "fp16",
    ),
    ("volta_h884cudnn_256x64_ldg8_relu_exp_small_nhwc_tn_v1", "convolution", True, "fp16"),
    (
        "volta_fp16_s884cudnn_fp16_128x128_ldg8_dgrad_f2f_exp_small_nhwc2nchw_tt_v1",
        "convolution",
        True,
        "fp16",
    ),
    (
        "turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1",
        "convolution",
        True,
        "fp16",
    ),
    ("turing_h1688cudnn_128x128_ldg8_relu_exp_interior_nhwc_tn_v1", "convolution", True, "fp16"),
    # cuDNN 8 on Ampere: legacy names and xmma implicit GEMM
    ("ampere_scudnn_128x64_relu_small_nn_v1", "convolution", False, "fp32"),
    ("ampere_s16816cudnn_bf16_128x128_ldg8_relu_exp_small_nhwc_tn_v1", "convolution", True, "bf16"),
    (
        "ampere_fp16_s16816cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1",
        "convolution",
        True,
        "fp16",
    ),
    ("ampere_s1688cudnn_128x128_ldg8_relu_exp_interior_nhwc_tn_v1", "convolution", True, "tf32"),
    (
        "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x32x32_stage4_"
        "warpsize4x1x1_g1_tensor16x8x16_t1r3s3_execute_kernel__5x_cudnn",
        "convolution",
        True,
        "bf16",
    ),
    (
        "sm80_xmma_dgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x32x64_stage5_"
        "warpsize2x2x1_g1_tensor16x8x16_execute_kernel__5x_cudnn",
        "convolution",
        True,
        "fp16",
    ),
    (
        "sm86_xmma_wgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x32_stage4_"
        "warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn",
        "convolution",
        True,
        "tf32",
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize64x64x8_stage3_"
        "warpsize2x2x1_g1_ffma_execute_kernel__5x_cudnn",
        "convolution",
        False,
        "fp32",
    ),
    (
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4>"
        "(cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4::Params)",
        "convolution",
        True,
        "tf32",
    ),
    (
        "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>"
        "(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, "
        "int, float, float, int, float const*, float const*, bool, int, int)",
        "convolution",
        False,
        "fp32",
    ),
    (
        "void cudnn::detail::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int)",
        "convolution",
        False,
        "fp32",
    ),
    (
        "void fft2d_r2c_32x32<float, false, 1u, false>(float2*, float const*, int)",
        "convolution",
        False,
        "fp32",
    ),
    (
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
        "convolution",
        False,
        "fp32",
    ),
    # cuDNN 9 first-layer kernels (7x7, 4 input channels): fp32 output types but HMMA tensor cores
    (
        "sm90_xmma_fprop_image_first_layer_f16f16_f32_f16_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_"
        "tile16x64x64_tensor16x8x16_execute_kernel__5x_cudnn",
        "convolution",
        True,
        "fp16",
    ),
    (
        "sm90_xmma_wgrad_image_first_layer_f16f16_f32_f32_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_"
        "tile16x64x64_tensor16x8x16_execute_kernel__5x_cudnn",
        "convolution",
        True,
        "fp16",
    ),
    (
        "void cudnn::cnn::reduce_wgrad_nchw_helper<float, __nv_bfloat16>(void*, void const*, float, int, int)",
        "convolution",
        False,
        None,
    ),
    # cuDNN helpers: convolution time, not matrix math
    (
        "void cudnn::gemm::computeOffsetsKernel<false, false>(cudnn::gemm::ComputeOffsetsParams)",
        "convolution",
        False,
        None,
    ),
    # Hopper / Blackwell (cuDNN 9)
    (
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
        "convolution",
        True,
        "bf16",
    ),
    (
        "sm100_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize256x128x64_cga2x1x1_"
        "execute_segment_k_off_kernel__5x_cudnn",
        "convolution",
        True,
        "fp16",
    ),
    # non-convolution cuDNN kernels keep their category
    (
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)",
        "reduction_norm_softmax",
        False,
        None,
    ),
    (
        "void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true, (cudnnKernelDataType_t)0>(cudnn::ops::nchw2nhwc_params_t<float>, __half const*, __half*)",
        "copy_memset",
        False,
        None,
    ),
    # plain GEMMs with relu epilogues stay GEMMs
    ("volta_sgemm_128x64_relu_nn", "gemm", False, "fp32"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_relu_f2f_stages_64x4_tn", "gemm", True, "bf16"),
    # ROCm: MIOpen solvers, hipBLASLt / Tensile, Composable Kernel
    ("miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1", "convolution", False, "fp32"),
    ("gcnAsmConv1x1U", "convolution", False, "fp32"),
    ("MIOpenConvUni", "convolution", False, "fp32"),
    ("naive_conv_fwd_nchw_half_double_half", "convolution", False, "fp16"),
    (
        "igemm_fwd_gtcx_nhwc_fp16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x4x1_1x4x1x32_tb1x8x1x1_1x4x1x32",
        "convolution",
        True,
        "fp16",
    ),
    ("igemm_bwd_gtcx_nhwc_bf16_bx0_ex0_bt256x128x32_wt32x32x8", "convolution", True, "bf16"),
    ("igemm_wrw_gtc_nchw_fp32_bx0_ex0_bt128x128x16", "convolution", False, "fp32"),
    ("MIOpenBatchNormFwdTrainSpatial", "reduction_norm_softmax", False, None),
    ("MIOpenSoftmax", "reduction_norm_softmax", False, None),
    (
        "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_GRVW8_K1_TT2_64",
        "gemm",
        True,
        "fp16",
    ),
    (
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MIWT8_8_SE_1LDSB1",
        "gemm",
        True,
        "bf16",
    ),
    ("Cijk_Ailk_Bljk_SB_MT64x64x16_SN_GRVW4_K1_TT4_4", "gemm", False, "fp32"),
    (
        "void ck::kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffle<ck::GridwiseGemmMultipleABD_xdl_cshuffle<ck::half_t>>(...)",
        "convolution",
        True,
        "fp16",
    ),
    (
        "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::bhalf_t>>(...)",
        "gemm",
        True,
        "bf16",
    ),
]


@pytest.mark.parametrize(
    ("name", "category", "tc", "precision"), NAMES, ids=[n[0][:60] for n in NAMES]
)
def test_conv_and_rocm_names(
    name: str, category: str, tc: bool | None, precision: str | None
) -> None:
    kc = classify(name)
    assert kc.category == category
    assert kc.tc.tensor_core is tc
    assert kc.tc.precision == precision


@pytest.mark.parametrize(
    "name",
    [n for n, c, _, _ in NAMES if c == "convolution" and ("relu" in n or "bias" in n.lower())],
)
def test_relu_in_a_conv_name_is_not_elementwise(name: str) -> None:
    assert classify(name).category == "convolution"
