"""Which kernels run on tensor cores, read from kernel names; and the tensor-core share of a window.

A kernel name is read for what it computes, not for the library that launched it: an
``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`` cuBLAS kernel is plain FP32 FMA on CUDA cores even
though it is an "xmma" GEMM, so explicit SIMT markers (``ffma``, ``simt``, ``sgemm``) are checked
before any tensor-core marker. Names that say nothing either way give ``tensor_core=None`` (unknown
precision) rather than a guess. docs/metrics.md lists every rule with a real example name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.event_classes import KERNEL_CATS
from gpuscope.analysis.json_row import JsonRow
from gpuscope.analysis.kernel_names import classify_kernel, short_name
from gpuscope.analysis.rank_index import NO_DEVICE, RankIndex
from gpuscope.analysis.store_access import OP_CATS_SQL, RUNTIME_CATS_SQL, execute, sql_list

if TYPE_CHECKING:
    from gpuscope.store import Connection

MATH_CATEGORIES = ("gemm", "convolution", "attention")


@dataclass(frozen=True)
class TensorCoreInfo:
    """Reading of one kernel name.

    tensor_core: True (runs on tensor cores / matrix cores), False (CUDA cores), None (name does not say).
    precision: math precision when the name says it: fp32 (plain FMA), tf32, 3xtf32 (fp32 accuracy
    emulated on TF32 tensor cores), bf16, fp16, fp8, int8, fp64; None when unknown.
    mma: the kernel does the matrix multiply itself (GEMM, implicit-GEMM/FFT/Winograd convolution,
    attention main loop); False for helpers (split-K reduction, epilogue, layout transforms,
    depthwise/direct convolutions). Eligible-but-not-on-tensor-cores time counts mma kernels only.
    rule: id of the rule that decided (see TC_RULES).
    """

    tensor_core: bool | None
    precision: str | None
    mma: bool
    rule: str


@dataclass(frozen=True)
class TcRule:
    rule: str
    reads: str
    example: str
    tensor_core: bool | None
    precision: str | None


# Documentation and test table: every rule of tensor_core_info with a real (or documented) example.
TC_RULES: tuple[TcRule, ...] = (
    TcRule(
        "not-math",
        "category is not gemm/convolution/attention",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
        False,
        None,
    ),
    TcRule(
        "helper",
        "split-K reduce, epilogue, cuBLAS scal, layout transform, workspace init, attention pre/post kernels",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float*, float const*, float const*, float const*, float*, void*, long, float*, int*)",
        False,
        None,
    ),
    TcRule(
        "simt-marker",
        "`ffma`/`hfma`/`simt`/`MmaSimt` in the name: FMA on CUDA cores, whatever else the name says",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
        False,
        "fp32",
    ),
    TcRule(
        "simt-marker",
        "CUTLASS SIMT GEMM",
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)",
        False,
        "fp32",
    ),
    TcRule(
        "simt-blas",
        "`sgemm`/`hgemm`/`dgemm` (no MMA shape), GEMV and small-N GEMM kernels",
        "void gemmSN_NN_kernel<float, 128, 2, 4, 8, 4, 4, false, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
        False,
        "fp32",
    ),
    TcRule(
        "simt-blas",
        "cuDNN SIMT implicit GEMM (`implicit_convolve_sgemm`, even with 16-bit inputs)",
        "void implicit_convolve_sgemm<__nv_bfloat16, __nv_bfloat16, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, __nv_bfloat16 const*, int, __nv_bfloat16*, __nv_bfloat16 const*, kernel_conv_params, unsigned long long, int, float, float, int, __nv_bfloat16 const*, __nv_bfloat16 const*, bool, int, int)",
        False,
        "bf16",
    ),
    TcRule(
        "simt-conv",
        "cuDNN legacy/FFT/Winograd convolution engines (`dgrad2d_alg`, `wgrad_alg`, `convolve_*_engine`, `fft2d_*`, `winograd`)",
        "void cudnn::detail::dgrad2d_alg1_1<float, 0, 6, 7, 5, 4, 5, false, true>(int, int, int, float const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, int)",
        False,
        "fp32",
    ),
    TcRule(
        "direct-conv",
        "depthwise and direct convolutions: CUDA cores, and not GEMM-shaped (not counted as eligible)",
        "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>(...)",
        False,
        "fp32",
    ),
    TcRule(
        "cudnn-simt",
        "cuDNN 7/8 legacy engines `{arch}_[{type}_]scudnn_*` / `hcudnn`: CUDA cores (`s` = fp32 math, `h` = fp16; a `fp16` type token wins); with an MMA shape (`s884cudnn`, `h1688cudnn`, `s16816cudnn`) see mma-shape",
        "volta_scudnn_128x64_relu_interior_nn_v1",
        False,
        "fp32",
    ),
    TcRule(
        "mma-shape",
        "cuDNN legacy tensor-core engine (Volta HMMA 8x8x4: fp16 inputs)",
        "volta_s884cudnn_fp16_256x128_ldg8_splitK_relu_exp_medium_nhwc_tn_v1",
        True,
        "fp16",
    ),
    TcRule(
        "rocm-miopen",
        "MIOpen xdlops implicit GEMM (`igemm_*_gtcx*`, `*xdlops*`): matrix cores; assembly/OpenCL direct, Winograd and naive solvers (`miopenSp3AsmConv*`, `gcnAsmConv*`, `MIOpenConv*`, `igemm_*_gtc_*`, `naive_conv_*`): vector ALU",
        "igemm_fwd_gtcx_nhwc_fp16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x4x1_1x4x1x32_tb1x8x1x1_1x4x1x32",
        True,
        "fp16",
    ),
    TcRule(
        "rocm-miopen",
        "MIOpen assembly convolution solver: vector ALU",
        "miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1",
        False,
        "fp32",
    ),
    TcRule(
        "xmma-mma-marker",
        "xmma name that names its MMA instruction: `hmma` (fp16/bf16 inputs), `imma` (int8) or a `tensorNNNN` / `tensorMxNxK` shape = tensor cores, whatever its type groups say (cuDNN's first-layer convolutions read `f16f16_f32_f32`)",
        "sm90_xmma_fprop_image_first_layer_f16f16_f32_f16_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_tile16x64x64_tensor1688_execute_kernel_kernel__5x_cudnn",
        True,
        "fp16",
    ),
    TcRule(
        "xmma-types",
        "cuBLAS/cuDNN xmma names: the 2nd type group is the math type: `tf32`->TF32, `bf16`, `f16`, `e4m3`/`e5m2`, `i8` = tensor cores; `f32f32` = FP32 FMA",
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        True,
        "tf32",
    ),
    TcRule(
        "xmma-types",
        "xmma convolution, bf16 math",
        "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x64x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
        True,
        "bf16",
    ),
    TcRule(
        "xmma-types",
        "xmma with FP32 math (no TF32) and no `ffma` token (shape of a name, not recorded): CUDA cores",
        "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize64x64x8_stage3_warpsize2x2x1_g1_execute_kernel__5x_cudnn",
        False,
        "fp32",
    ),
    TcRule(
        "nvjet",
        "cuBLASLt JIT kernels (Hopper/Blackwell) always use tensor cores; the first letter of the type group is the input type: h=fp16, t=bf16, q=fp8 e4m3, e=fp8 e5m2, i=int8, s=fp32 inputs (TF32 or emulated)",
        "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT",
        True,
        "bf16",
    ),
    TcRule(
        "nvjet", "nvjet with fp16 inputs", "nvjet_sm90_hsh_128x128_64x6_2x1_v_bz_NNT", True, "fp16"
    ),
    TcRule(
        "nvjet",
        "nvjet with fp8 inputs",
        "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_TNT",
        True,
        "fp8",
    ),
    TcRule(
        "mma-shape",
        "legacy cuBLAS/CUTLASS MMA-shape tokens: `h884`, `s884`, `h1688`, `s1688`, `s16816`, `i8816`, `s161616` (precision from `bf16`/`f16`/`tf32` tokens; `s1688` alone on sm80+ = TF32; `884` = Volta fp16)",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align4::Params)",
        True,
        "tf32",
    ),
    TcRule(
        "mma-shape", "Volta fp16 tensor-core GEMM", "volta_h884gemm_64x64_ldg8_nn", True, "fp16"
    ),
    TcRule(
        "mma-shape",
        "Ampere bf16 tensor-core GEMM (cuBLAS)",
        "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
        True,
        "bf16",
    ),
    TcRule(
        "tc-marker",
        "`tensorop`, `MmaTensorOp`, `wmma`, `wgmma`/`gmma`, `tcgen05`/`umma`, `tensor16x8x16`, `warpgroupsize`, `WarpSpecialized`, `imma`/`hmma`",
        "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi128ELi32EEENS4_52Conv2dWgradOutputGradientTileAccessIteratorOptimizedINS_11MatrixShapeILi64ELi32EEENS_10bfloat16_tENS_9transform29PitchLinearWarpRakedThreadMapINS_16PitchLinearShapeILi64ELi32EEELi128ENSF_ILi8ELi4EEELi8EEENS_12AlignedArrayISC_Li8ELi16EEEEENSD_11threadblock25RegularTileAccessIteratorISB_SC_NS_6layout40ColumnMajorTensorOpMultiplicandCongruousILi16ELi64EEE",
        True,
        "bf16",
    ),
    TcRule(
        "flash",
        "FlashAttention (fp16/bf16 only, always tensor cores)",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
        True,
        "bf16",
    ),
    TcRule(
        "fmha-cutlass",
        "memory-efficient attention `fmha_cutlass[FB]_<dtype>_..._sm<arch>`: bf16/f16 on sm75+ = tensor cores; f32 on sm80+ = tensor cores with 3xTF32 (fp32 accuracy, `OpMultiplyAddFastF32`); f32 before sm80 = CUDA cores",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        True,
        "3xtf32",
    ),
    TcRule(
        "fmha-cutlass",
        "memory-efficient attention fp32 on Volta: CUDA cores",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm70(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm70, true, 64, 64, 64, true, true>::Params)",
        False,
        "fp32",
    ),
    TcRule(
        "cudnn-sdpa",
        "cuDNN fused attention (`fort_native_sdpa`, `fmha_v2`, `mha_fwd`): tensor cores; `f16` in these names means 16-bit, so precision is left open",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
        True,
        None,
    ),
    TcRule(
        "rocm-tensile",
        "rocBLAS/hipBLASLt Tensile `Cijk_` names: `_MI<m>x<n>x<k>` = MFMA matrix cores (also for fp32), none = VALU; type code after the layouts: H=fp16, B=bf16, S=fp32, X=xf32, I8=int8, F8=fp8",
        "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_GRVW8_K1_TT2_64",
        True,
        "fp16",
    ),
    TcRule(
        "rocm-tensile",
        "Tensile without a MatrixInstruction token: vector ALU",
        "Cijk_Ailk_Bljk_SB_MT64x64x16_SN_GRVW4_K1_TT4_4",
        False,
        "fp32",
    ),
    TcRule(
        "rocm-ck",
        "Composable Kernel `xdl`/`xdlops`/`wmma` = matrix cores; `_dl_` = vector ALU",
        "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<...> >(...)",
        True,
        None,
    ),
    TcRule(
        "triton-template",
        "Inductor template GEMMs (`triton_tem_*`): the name does not say; refined per launch from the launching op's input types (bf16/fp16/fp8 = tensor cores; fp32 depends on allow_tf32 and stays unknown)",
        "triton_tem_fused_mm_t_2",
        None,
        None,
    ),
    TcRule(
        "unknown",
        "GEMM/conv/attention kernel whose name says nothing about the math unit: unknown precision (not guessed)",
        "my_custom_gemm_kernel",
        None,
        None,
    ),
)

_I = re.IGNORECASE
_HELPER = re.compile(
    r"splitkreduce|reducesplitk|reduce_splitk|epilogue::impl|epilogue_kernel|scal_kernel|init_device_workspace|convert_dq|dot_do_o|"
    r"reduce_wgrad|flip_filter|nchwtonhwc|nhwctonchw|nhwcaddpadding|converttensor|scale(?:packed)?tensor|"
    r"zero_?init|\bgemm_?prologue|computeoffsets|computeboffsets|computewgradoffsets|cudnn::gemm::",
    _I,
)
_SIMT_MARK = re.compile(r"ffma|hfma|_simt_|simt_|mmasimt|\bsimt\b|opclasssimt", _I)
_SIMT_BLAS = re.compile(
    r"(?<![a-z0-9])[sdhcz]gemm|gemv|gemmsn|gemmk1|\bdot_kernel|implicit_convolve", _I
)
_DIRECT_CONV = re.compile(r"depthwise|grouped_direct|conv2d_c1_k1|[dw]grad2d_c1_k1|direct_conv", _I)
_SIMT_CONV = re.compile(
    r"dgrad2d_alg|wgrad_alg|dgrad_engine|wgrad2d_shmem|wgrad2d_c1|convolve_\w*engine|fft2d_|"
    r"pointwise_mult_and_sum_complex|winograd",
    _I,
)
_XMMA_TYPES = re.compile(
    r"xmma_\w*?_((?:c?[a-z]*\d+){2})_((?:c?[a-z]*\d+){2})_(c?[a-z]*\d+)(?:_|$)", _I
)
# An MMA instruction named outright in an xmma name: hmma (half inputs), imma (int8), tensorNNNN.
_XMMA_MMA_MARK = re.compile(
    r"(?<![a-z])([hi])mma(?![a-z])|(?<![a-z])tensor(?:1688|16816|884|8816)(?!x)|tensor\d+x\d+x\d+",
    _I,
)
_NVJET = re.compile(r"nvjet_(?:sm\d+a?_)?([a-z]{3,6})_", _I)
_MMA_SHAPE = re.compile(
    r"(?<![a-z0-9])([hsidz])(884|1688|16816|161616|8816|16832|16816|1684|884)(gemm|fprop|dgrad|wgrad|conv|cudnn)",
    _I,
)
_TC_MARK = re.compile(
    r"tensorop|wmma|gmma|tcgen05|(?<![a-z])(?:utc)?umma|tensor\d+x\d+x\d+|warpgroupsize|warpspecialized|"
    r"(?<![a-z])[hid]mma",
    _I,
)
_FLASH = re.compile(r"flash_fwd|flash_bwd|flashattn|flash::|pytorch_flash|flashinfer", _I)
_FMHA_CUTLASS = re.compile(r"fmha_cutlass[fb]_(bf16|f16|f32)_\w*?_sm(\d+)", _I)
_CUDNN_SDPA = re.compile(
    r"fort_native_sdpa|fmha_v2|fused_mha|mha_fwd|mha_bwd|fmha_fwd|fmha_bwd", _I
)
_TENSILE = re.compile(r"cijk_a[a-z]+_b[a-z]+_([a-z0-9]+?)(?:_|$)", _I)
_TENSILE_MI = re.compile(r"_mi\d+x\d+x\d+|_miwt\d|mfma", _I)
# cuDNN legacy SIMT engines: volta_scudnn_..., maxwell_scudnn_winograd_..., volta_fp16_scudnn_fp16_...
_CUDNN_SIMT = re.compile(r"(?<![a-z0-9])([shd])cudnn_", _I)
# MIOpen: xdlops implicit GEMM (igemm_*_gtcx*, *xdlops*) runs on matrix cores; its assembly/OpenCL
# direct, Winograd and naive solvers run on the vector ALU.
_MIOPEN_TC = re.compile(r"igemm_\w*gtcx|xdlops|conv\w*_xdl_|_xdl_\w*conv", _I)
_MIOPEN_VALU = re.compile(
    r"miopen\w*(?:conv|cv|wino)|gcnasm|igemm_\w*gtc_|naive_conv|mlo(?:conv|cv)|bwdwrw", _I
)
_CK_TC = re.compile(r"xdl|xdlops|mfma|gtcx", _I)
_CK_DL = re.compile(r"gemm_dl|_dl_", _I)
_TRITON_TEM = re.compile(r"^triton_tem_", _I)

_PRECISION_TOKENS = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|float8|f8f8|_f8_", _I)),
    ("tf32", re.compile(r"tf32|tfloat32", _I)),
    ("bf16", re.compile(r"bf16|bfloat16|bhalf", _I)),
    ("fp16", re.compile(r"fp16|(?<![bt])f16|half_t|__half|(?<![a-z])half(?![a-z])|c10::half", _I)),
    ("int8", re.compile(r"int8|(?<![a-z])[iu]8(?![0-9])|\bs8\b|imma", _I)),
    ("fp64", re.compile(r"f64|fp64|double|dgemm|dmma", _I)),
    ("fp32", re.compile(r"f32|fp32|float|sgemm", _I)),
)


def precision_from_tokens(name: str) -> str | None:
    """The narrowest data type a kernel name mentions (fp8 > tf32 > bf16 > fp16 > int8 > fp64 > fp32)."""
    for prec, rx in _PRECISION_TOKENS:
        if rx.search(name):
            return prec
    return None


def _xmma_math(name: str) -> str | None:
    m = _XMMA_TYPES.search(name)
    if not m:
        return None
    math = m.group(2).lower()
    if "tf32" in math:
        return "tf32"
    if "bf16" in math:
        return "bf16"
    if "e4m3" in math or "e5m2" in math or "f8" in math:
        return "fp8"
    if "f16" in math:
        return "fp16"
    if "i8" in math or "s8" in math:
        return "int8"
    if "f64" in math:
        return "fp64"
    if "f32" in math:
        return "fp32"
    return None


_NVJET_LETTER = {
    "h": "fp16",
    "t": "bf16",
    "q": "fp8",
    "e": "fp8",
    "i": "int8",
    "s": "tf32",
    "o": "fp4",
}


def _mma_shape(m: re.Match[str], name: str) -> str | None:
    letter, shape = m.group(1).lower(), m.group(2)
    tok = precision_from_tokens(name.replace(m.group(0), " "))
    if letter == "h":
        return "fp16"
    if letter == "i":
        return "int8"
    if letter == "d":
        return "fp64"
    if tok in ("bf16", "fp16", "tf32", "fp8"):
        return tok
    if shape == "884":
        return "fp16"  # Volta tensor cores take fp16 only
    if shape == "1688" and re.search(r"(?:sm_?|cutlass_)(?:8\d|9\d|1\d\d)|ampere|hopper", name, _I):
        return "tf32"
    return None


@lru_cache(maxsize=65536)
def tensor_core_info(name: str, category: str) -> TensorCoreInfo:
    """Tensor-core reading of one kernel name of the given category (see TC_RULES for the order)."""
    if category not in MATH_CATEGORIES:
        return TensorCoreInfo(False, None, False, "not-math")
    if _HELPER.search(name):
        return TensorCoreInfo(False, None, False, "helper")
    if _SIMT_MARK.search(name):
        return TensorCoreInfo(False, precision_from_tokens(name) or "fp32", True, "simt-marker")
    if _DIRECT_CONV.search(name):
        return TensorCoreInfo(False, precision_from_tokens(name), False, "direct-conv")
    if _SIMT_BLAS.search(name) and not _MMA_SHAPE.search(name) and not _TC_MARK.search(name):
        return TensorCoreInfo(False, precision_from_tokens(name) or "fp32", True, "simt-blas")
    if _SIMT_CONV.search(name):
        return TensorCoreInfo(False, precision_from_tokens(name) or "fp32", True, "simt-conv")
    m = _CUDNN_SIMT.search(name)
    if m:
        letter = m.group(1).lower()
        prec: str | None = precision_from_tokens(name.replace(m.group(0), " ")) or {
            "h": "fp16",
            "d": "fp64",
        }.get(letter, "fp32")
        return TensorCoreInfo(False, prec, True, "cudnn-simt")
    if _MIOPEN_TC.search(name):
        return TensorCoreInfo(True, precision_from_tokens(name), True, "rocm-miopen")
    if _MIOPEN_VALU.search(name):
        return TensorCoreInfo(False, precision_from_tokens(name) or "fp32", True, "rocm-miopen")
    m = _XMMA_MMA_MARK.search(name) if "xmma" in name.lower() else None
    if m:
        if m.group(1) and m.group(1).lower() == "i":
            prec = "int8"
        else:
            prec = "bf16" if "bf16" in name.lower() else "fp16" if m.group(1) else None
            prec = prec or precision_from_tokens(name)
        return TensorCoreInfo(True, prec, True, "xmma-mma-marker")
    math = _xmma_math(name)
    if math is not None:
        return TensorCoreInfo(math not in ("fp32", "fp64"), math, True, "xmma-types")
    m = _NVJET.search(name)
    if m:
        return TensorCoreInfo(True, _NVJET_LETTER.get(m.group(1)[0].lower()), True, "nvjet")
    m = _FMHA_CUTLASS.search(name)
    if m:
        dtype, arch = m.group(1).lower(), int(m.group(2))
        if dtype == "f32":
            return TensorCoreInfo(
                arch >= 80, "3xtf32" if arch >= 80 else "fp32", True, "fmha-cutlass"
            )
        prec = "bf16" if dtype == "bf16" else "fp16"
        return TensorCoreInfo(arch >= 70, prec, True, "fmha-cutlass")
    m = _MMA_SHAPE.search(name)
    if m:
        return TensorCoreInfo(True, _mma_shape(m, name), True, "mma-shape")
    m = _TENSILE.search(name)
    if m:
        code = m.group(1).upper()
        prec = {
            "H": "fp16",
            "B": "bf16",
            "S": "fp32",
            "X": "tf32",
            "D": "fp64",
            "I": "int8",
            "F": "fp8",
        }.get(code[0])
        if code.startswith(("I8", "4XI8")):
            prec = "int8"
        elif code.startswith(("F8", "B8")):
            prec = "fp8"
        return TensorCoreInfo(bool(_TENSILE_MI.search(name)), prec, True, "rocm-tensile")
    if _CUDNN_SDPA.search(name):
        return TensorCoreInfo(True, None, True, "cudnn-sdpa")
    if _TC_MARK.search(name):
        return TensorCoreInfo(True, precision_from_tokens(name), True, "tc-marker")
    if _FLASH.search(name):
        return TensorCoreInfo(True, precision_from_tokens(name), True, "flash")
    if re.search(r"\bck::|composable_kernel|device_gemm", name, _I):
        if _CK_DL.search(name):
            return TensorCoreInfo(False, precision_from_tokens(name), True, "rocm-ck")
        if _CK_TC.search(name):
            return TensorCoreInfo(True, precision_from_tokens(name), True, "rocm-ck")
    if _TRITON_TEM.search(name):
        return TensorCoreInfo(None, None, True, "triton-template")
    return TensorCoreInfo(None, precision_from_tokens(name), True, "unknown")


def refine_with_input_types(info: TensorCoreInfo, input_types: list[str] | None) -> TensorCoreInfo:
    """Triton template kernels: bf16/fp16/fp8/int8 operands of the launching op mean tensor cores
    (``tl.dot`` on those types always lowers to MMA instructions). fp32 stays unknown (TF32 or not
    depends on ``allow_tf32`` when the kernel was compiled)."""
    if info.rule != "triton-template" or not input_types:
        return info
    dts = [dtype_of(t) for t in input_types]
    for d in ("fp8", "bf16", "fp16", "int8"):
        if d in dts:
            return TensorCoreInfo(True, d, True, "triton-template+types")
    return info


_DTYPES = {
    "c10::bfloat16": "bf16",
    "bfloat16": "bf16",
    "c10::half": "fp16",
    "half": "fp16",
    "float16": "fp16",
    "float": "fp32",
    "float32": "fp32",
    "double": "fp64",
    "float64": "fp64",
    "signed char": "int8",
    "char": "int8",
    "int8": "int8",
    "c10::qint8": "int8",
}


def dtype_of(type_name: str | None) -> str | None:
    """gpuscope dtype of a Kineto ``Input type`` entry (``c10::BFloat16`` -> bf16, ``float`` -> fp32, ...)."""
    if not type_name:
        return None
    t = type_name.strip().lower()
    if "float8" in t:
        return "fp8"
    return _DTYPES.get(t)


# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelTime(JsonRow):
    """A kernel's time in the window (µs): its full and its short name."""

    name: str
    short_name: str
    us: float


@dataclass
class TensorCoreSummary:
    """Tensor-core share of one rank's compute-kernel time in a window. Times in µs.

    kernel_us: all compute-kernel time (cat 'kernel'; memcpy/memset run on copy engines and are left out).
    tc_us: kernels that run on tensor cores. tensor_core_pct = 100 * tc_us / kernel_us.
    tc_eligible_not_tc_us: GEMM/conv/attention matrix-multiply kernels on CUDA cores.
    fp32_gemm_us: the part of that in plain fp32 (no TF32): the time TF32 or bf16 would move to tensor cores.
    unknown_precision_us: GEMM/conv/attention kernels whose names do not say (listed in unknown_kernels).
    """

    tensor_core_pct: float | None
    tc_us: float
    kernel_us: float
    tc_eligible_not_tc_us: float
    fp32_gemm_us: float
    unknown_precision_us: float
    math_us: float
    by_precision: dict[str, float] = field(default_factory=dict)
    unknown_kernels: list[KernelTime] = field(default_factory=list)
    eligible_kernels: list[KernelTime] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        kernel_lists = ("unknown_kernels", "eligible_kernels")
        return {
            k: [x.to_json() for x in getattr(self, k)] if k in kernel_lists else getattr(self, k)
            for k in self.__dataclass_fields__
        }


# GPU activity of the window, clipped to it (``in_ns``), from the rank's index
_GPU_IN_WINDOW = """
    SELECT name_id, cat, correlation, least(e, $end) - greatest(s, $start) AS in_ns
    FROM {gpu} WHERE s < $end AND e > $start AND dev = $dev
"""

_TC_SQL = """
    WITH g AS ({gpu}),
    per AS (SELECT name_id, count(*) AS n, sum(in_ns) AS ns FROM g WHERE cat IN {kernel_cats} GROUP BY name_id)
    SELECT per.name_id, n.name, per.n, per.ns FROM per JOIN names n ON n.run_id = $run AND n.name_id = per.name_id
"""

_TRITON_TYPES_SQL = """
    WITH g AS ({gpu}),
    tk AS (SELECT g.* FROM g WHERE g.name_id IN (
        SELECT name_id FROM names WHERE run_id = $run AND lower(name) LIKE 'triton_tem_%')),
    l AS (SELECT correlation, arg_min(pid, ts_ns) AS pid, arg_min(tid, ts_ns) AS tid, min(ts_ns) AS ts_ns
          FROM events WHERE run_id = $run AND rank = $rank AND cat IN {runtime}
            AND correlation IN (SELECT correlation FROM tk) GROUP BY correlation),
    tl AS (SELECT tk.name_id, tk.in_ns, l.pid, l.tid, l.ts_ns AS launch_ns FROM tk JOIN l USING (correlation)),
    ops AS (SELECT pid, tid, ts_ns, ts_ns + dur_ns AS end_ns, input_types FROM events
            WHERE run_id = $run AND rank = $rank AND cat IN {op_cats} AND dur_ns IS NOT NULL
              AND ts_ns <= (SELECT max(launch_ns) FROM tl) AND ts_ns + dur_ns >= (SELECT min(launch_ns) FROM tl)
              AND tid IN (SELECT tid FROM tl))
    SELECT tl.name_id, CASE WHEN launch_ns <= o.end_ns THEN o.input_types END AS types, sum(tl.in_ns)
    FROM tl ASOF LEFT JOIN ops o ON tl.pid = o.pid AND tl.tid = o.tid AND tl.launch_ns >= o.ts_ns
    GROUP BY ALL
"""


def tensor_core_summary(
    con: Connection,
    run_id: str,
    rank: int,
    window: Any,
    *,
    list_top: int = 10,
    device: int | None = None,
) -> TensorCoreSummary:
    """Tensor-core share of the window's compute-kernel time of ``device`` (default: the primary
    device), and GEMM-like time that missed tensor cores."""
    ix = RankIndex.shared(con, run_id, rank)
    if device is None:
        device = ix.primary_device(window.start_ns, window.end_ns)
    gpu = _GPU_IN_WINDOW.format(gpu=ix.gpu())
    params = ix.params(
        start=int(window.start_ns),
        end=int(window.end_ns),
        dev=NO_DEVICE if device is None else int(device),
    )
    rows = execute(
        con, _TC_SQL.format(gpu=gpu, kernel_cats=sql_list(KERNEL_CATS)), params
    ).fetchall()
    infos: dict[int, tuple[str, TensorCoreInfo]] = {}
    per_ns: dict[int, tuple[int, int]] = {}
    for name_id, name, n, ns in rows:
        infos[name_id] = (name, tensor_core_info(name, classify_kernel(name)))
        per_ns[name_id] = (n, ns)
    # Triton templates: split their time by the launching op's input types.
    refined: list[tuple[str, TensorCoreInfo, int, int]] = []
    triton_ids = {i for i, (_, tc) in infos.items() if tc.rule == "triton-template"}
    if triton_ids:
        trows = execute(
            con,
            _TRITON_TYPES_SQL.format(gpu=gpu, runtime=RUNTIME_CATS_SQL, op_cats=OP_CATS_SQL),
            params,
        ).fetchall()
        done: dict[int, int] = {}
        for name_id, types, ns in trows:
            name, tc = infos[name_id]
            try:
                tl = json.loads(types) if types else None
            except ValueError:
                tl = None
            refined.append((name, refine_with_input_types(tc, tl), 0, int(ns)))
            done[name_id] = done.get(name_id, 0) + int(ns)
        for i in triton_ids:
            n, ns = per_ns[i]
            rest = ns - done.get(i, 0)
            if rest > 0:
                refined.append((infos[i][0], infos[i][1], 0, rest))
    items = [
        (name, tc, n, ns)
        for i, (name, tc) in infos.items()
        if i not in triton_ids
        for n, ns in [per_ns[i]]
    ] + refined

    total = tc_ns = elig = fp32 = unknown = math_ns = 0
    by_prec: dict[str, float] = {}
    unknown_k: dict[str, float] = {}
    elig_k: dict[str, float] = {}
    for name, tc, _n, ns in items:
        total += ns
        if tc.rule != "not-math":
            math_ns += ns
        if tc.tensor_core:
            tc_ns += ns
            key = tc.precision or "unknown"
            by_prec[key] = by_prec.get(key, 0.0) + ns / 1e3
        elif tc.tensor_core is None:
            unknown += ns
            unknown_k[name] = unknown_k.get(name, 0.0) + ns / 1e3
        elif tc.mma:
            elig += ns
            elig_k[name] = elig_k.get(name, 0.0) + ns / 1e3
            if tc.precision == "fp32":
                fp32 += ns
    return TensorCoreSummary(
        tensor_core_pct=100.0 * tc_ns / total if total else None,
        tc_us=tc_ns / 1e3,
        kernel_us=total / 1e3,
        tc_eligible_not_tc_us=elig / 1e3,
        fp32_gemm_us=fp32 / 1e3,
        unknown_precision_us=unknown / 1e3,
        math_us=math_ns / 1e3,
        by_precision=dict(sorted(by_prec.items(), key=lambda kv: -kv[1])),
        unknown_kernels=_top_list(unknown_k, list_top),
        eligible_kernels=_top_list(elig_k, list_top),
    )


def _top_list(d: dict[str, float], n: int) -> list[KernelTime]:
    items = sorted(d.items(), key=lambda kv: -kv[1])[:n]
    return [KernelTime(k, short_name(k), v) for k, v in items]


def rules_markdown() -> str:
    """TC_RULES as a markdown table (docs/metrics.md)."""
    out = [
        "| rule | what it reads | example | tensor cores | precision |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in TC_RULES:
        ex = r.example if len(r.example) <= 110 else r.example[:109] + "…"
        tc = {True: "yes", False: "no", None: "unknown"}[r.tensor_core]
        out.append(f"| {r.rule} | {r.reads} | `{ex}` | {tc} | {r.precision or '—'} |")
    return "\n".join(out)
