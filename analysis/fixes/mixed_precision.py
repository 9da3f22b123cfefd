"""Fix unit ``mixed_precision``: matrix multiplies in plain fp32 on a tensor-core GPU."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.critical_path import GpuEvent
from gpuscope.analysis.event_classes import CUDNN_LAYOUT_RE, CUDNN_NO_SMEM_RE
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Recommendation, Words
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.gains import ByNode, index_mask, node_mask, nodes_at, raw_durations
from gpuscope.analysis.kernel_names import classify_kernel
from gpuscope.analysis.tensor_cores import tensor_core_info

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant

CHANNELS_LAST_HINT = (
    "# a 2-D convolution net: model = model.to(memory_format=torch.channels_last)\n"
    "# (cuDNN's bf16 convolutions want NHWC; a 3-D one: torch.channels_last_3d)\n"
)
"""The lines the bf16 code opens with where the window's convolutions take at least
:data:`CONV_HINT_SHARE` of its kernel time. They are measured: v72 (CSP-Darknet, Conv-BatchNorm-SiLU,
NCHW) gained 0.2 % in bf16 and 42.8 % in bf16 with the model in channels_last, timed side by side
on one lease (gpuscope tells 42.6, 29.7-52.3); v88 (AlexNet) 67.6 % and 74.2 (tells 74.4,
70.3-81.0): sample_traces/validation/README.md, "bf16 in channels_last". A comment, not a line
that runs: ``channels_last`` refuses a 3-D convolution's 5-D weights."""
CONV_HINT_SHARE = 0.05
"""Convolution kernel time (``KernelStats.conv_us``) over the window's kernel time from which the
fix's code names channels_last: a convolution net, not a transformer's stray 1x1 convolution."""
CONV_WHY = " (a convolution net's in channels_last, as the top of the range assumes)"
"""Added to the why where the code names channels_last."""
CODE_BF16 = (
    'with torch.autocast("cuda", dtype=torch.bfloat16):\n'
    "    loss = loss_fn(model(x), y)\n"
    "loss.backward()\n"
    "# or at least TF32 for fp32 matmuls:\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
    "torch.backends.cudnn.allow_tf32 = True"
)
CODE_FP16 = (
    'with torch.autocast("cuda", dtype=torch.float16):\n'
    "    loss = loss_fn(model(x), y)\n"
    "loss.backward()\n"
    "# fp16 needs a GradScaler: scaler.scale(loss).backward(); scaler.step(opt)"
)
FP16_TITLE = "Run matrix multiplies on tensor cores (fp16 autocast with a GradScaler)"
FP16_WHY = (
    "fp32 matrix multiplies run on CUDA cores; this GPU's tensor cores take fp16 (bf16 and TF32 "
    "need an Ampere or newer GPU), several times faster."
)
WORDS = Words(
    "Run matrix multiplies on tensor cores (bf16 autocast or TF32)",
    "fp32 matrix multiplies run on CUDA cores; in bf16 or TF32 they run on the tensor cores, "
    "several times faster.",
    CODE_BF16,
)

DEFAULT_TC_SPEEDUP = 8.0
"""Assumed speed-up of fp32 GEMM/conv time on tensor cores when the peak table has no bf16/fp32
pair for the GPU (H100 dense bf16 vs fp32 is ~15x; 8 is deliberately below that)."""

GEMM_RATIO: dict[str, tuple[float, float]] = {
    "H100 SXM": (2.43, 14.9),
    "H200": (2.43, 14.9),
}
"""Measured fp32 (no TF32) → bf16 matmul speed-up on the GPU, (at 1024³, at 4096³): H100 80GB
HBM3, torch 2.11+cu130, 2026-11-23 (sample_traces/fixes/all.json, ``gemm_and_copy``: 0.96 at
512³, 2.43 at 1024³, 13.0 at 2048³, 14.9 at 4096³). H200 is the same chip. Other GPUs: 2 and
the bf16/fp32 peak ratio of the peak table."""

CONV_DIV = 1.5
SMALL_GEMM_NS = 20_000
LARGE_GEMM_NS = 200_000

MEMORY_BOUND_KEEP = (1.0, 1.0, 0.5)
"""A plain-fp32 matmul that is memory-bound at the fp32 roof (its shapes' bytes at the memory roof
take longer than its FLOPs at the CUDA cores' peak: a skinny product such as a graph's adjacency
times a few columns) × this in bf16, low / mid / high: tensor cores cannot make it faster; bf16
halves its bytes at best (0.5), and autocast casts each fp32 operand that is not a parameter
(a model's input, a constant) at every call, reading its 4 bytes an element and writing 2, so
the product keeps its time or loses (1.0). v219 (APPNP: 2.5 ms a step of 8,192 × 8,192 by
8,192 × 16 products at ~2 TB/s) gained 1.5 % in bf16 where the GEMM-ratio re-timing told 30.4."""


TF32_SHARE = 0.2
"""The TF32 branch fires when TF32 tensor-core kernels hold at least this share of the window's
kernel time ..."""
HALF_OF_TF32 = 0.1
"""... and bf16/fp16 tensor-core kernels under this share of the TF32 time (the run is not in
mixed precision already) ..."""
FP32_OF_TF32 = 0.1
"""... and plain-fp32 matrix math on CUDA cores under this share of the TF32 time (a few fp32
kernels cuDNN picks beside TF32 ones, e.g. a 3- or 6-channel first convolution's gradient, leave
the run a TF32 one; more than that, and the fp32 branch reads it)."""
TF32_DIV = (0.65, 0.55, 0.45)
"""TF32 tensor-core kernel time × this in bf16, low / mid / high: the dense bf16 peak is 2× TF32's
(H100: 989 against 494 TFLOP/s), so 0.5 at the peaks; a kernel away from its peak keeps more
(0.65), and one that was bound by its fp32 operands' bytes can keep less (0.45)."""
NO_SMEM_TF32_DIV = (0.65, 0.3, 0.1)
"""A cuDNN convolution kernel that stages nothing in shared memory (``event_classes.
CUDNN_NO_SMEM_RE``: the heuristic's TF32 fallback) × this in bf16, low / mid / high: its bf16
heuristic picks a tuned kernel instead (no bf16 run of the validation set has one). v220 (C3D: 30 %
of its kernel time in one such weight gradient) gained 50.4 % in bf16 where TF32 × 0.45 told at
most 47.6; ``cudnn.benchmark``, which also replaces them, gained at least their share of the
kernel time on every recorded pair that has them (v109, v135, v136, v203, v220)."""
TF32_OTHER = (0.95, 0.85, 0.6)
"""The run's other compute kernels (elementwise, norms, reductions, copies; not the optimizer's)
× this, low / mid / high: bf16 activations halve their bytes where autocast runs them in bf16
(0.5 would be all of them), and autocast keeps softmax, norms and losses in fp32 (0.95: little
changes)."""

CUDNN_BN_RE = re.compile(r"cudnn::bn_|cudnn::\w*batch_?norm", re.IGNORECASE)
"""cuDNN's BatchNorm kernels (``cudnn::bn_fw_tr_1C11_kernel_NCHW``, ``cudnn::bn_bw_1C11_kernel_new``)."""
CUDNN_BN = (1.5, 1.2, 1.0)
"""cuDNN BatchNorm kernel time × this in bf16, low / mid / high: under autocast a convolution's
output is bf16, and PyTorch sends a bf16 input to its own BatchNorm kernels (cuDNN's take none),
which run slower than cuDNN's fp32 ones despite half the bytes. The fixed variants' traces
(sample_traces/validation/README.md, "What bf16 did to BatchNorm"): × 1.47 (v72, H100 against
H100), 1.16-1.64 (median 1.2) on v136, v175, v177, v178, v181, v182 timed on an H200 against their
H100 planted traces (an H200's bandwidth makes them faster still), 0.97 on v184's BatchNorm1d."""


_NO_SMEM = re.compile(CUDNN_NO_SMEM_RE)
_LAYOUT = re.compile(CUDNN_LAYOUT_RE, re.IGNORECASE)

CL_TF32_CONV = 0.35
"""A TF32 convolution kernel × this in bf16 at the high end where the code names channels_last
(:data:`CHANNELS_LAST_HINT`) and the model runs in it: cuDNN's bf16 NHWC kernels without a
transpose around them. Each case's fixed variant in channels_last, traced on the H200 against its
planted trace on the same GPU (sample_traces/validation/advised/; its README, "The fix as
advised on more cases"): × 0.30 (v104, SegNet), 0.34 (v135, ESRGAN), 0.35 (v205, DPN), 0.47
(v227, ConvLSTM); the median."""
CL_CUDNN_BN = 0.5
"""cuDNN's fp32 BatchNorm kernel time × this at the high end in channels_last bf16: PyTorch's
channels-last BatchNorm kernels take a bf16 input at half the bytes. The same traces: × 0.31
(v104), 0.45 (v45), 0.51 (v205)."""
CL_LAYOUT = 0.0
"""cuDNN's layout transforms (:data:`~gpuscope.analysis.event_classes.CUDNN_LAYOUT_RE`) × this
at the high end in channels_last: there are none (0 of 16.8 % of the kernel time on v104, of 20.1
on v135, of 11.3 on v205; 0.39 ms a step left of 4.49 on v227)."""


def _kernel_named(n: Node, rx: re.Pattern[str]) -> bool:
    """A GPU kernel node whose name ``rx`` finds."""
    return (
        n.kind == "gpu"
        and n.cat == "kernels"
        and isinstance(n.event, GpuEvent)
        and rx.search(n.event.name) is not None
    )


def _no_smem_conv(n: Node) -> bool:
    """A cuDNN convolution kernel without shared-memory staging (:data:`NO_SMEM_TF32_DIV`)."""
    return _kernel_named(n, _NO_SMEM)


def _conv_kernel(n: Node) -> bool:
    """A GPU kernel of a convolution (``kernel_names.classify_kernel``)."""
    return (
        n.kind == "gpu"
        and isinstance(n.event, GpuEvent)
        and classify_kernel(n.event.name, "kernel") == "convolution"
    )


def _cudnn_bn(n: Node) -> bool:
    """A cuDNN BatchNorm kernel (:data:`CUDNN_BN`)."""
    return _kernel_named(n, CUDNN_BN_RE)


def conv_net(inp: Inputs) -> bool:
    """Whether the window's convolutions take at least :data:`CONV_HINT_SHARE` of its kernel time
    (the bf16 code then names channels_last)."""
    k = inp.kernels
    return k.kernel_us > 0 and k.conv_us >= CONV_HINT_SHARE * k.kernel_us


def tf32_us(inp: Inputs) -> float:
    """The window's TF32 tensor-core kernel time (µs) when the run would take the TF32 branch:
    TF32 ≥ :data:`TF32_SHARE` of kernel time and bf16/fp16 tensor-core time under
    :data:`HALF_OF_TF32` of it; else 0."""
    by = inp.tc_us_by_precision or {}
    tf32 = float(by.get("tf32", 0.0))
    half = float(by.get("bf16", 0.0)) + float(by.get("fp16", 0.0))
    total = inp.kernels.kernel_us or 0.0
    if tf32 <= 0 or total <= 0 or tf32 < TF32_SHARE * total or half >= HALF_OF_TF32 * tf32:
        return 0.0
    return tf32


def _detect_tf32(inp: Inputs) -> Finding | None:
    """fp32 with TF32 on: matmuls already on tensor cores at half the bf16 rate."""
    cc = inp.compute_capability
    if cc is None or cc[0] < 8:  # bf16 tensor cores from sm80
        return None
    tf32_ns = tf32_us(inp) * 1e3
    cost_ns = tf32_ns * (1.0 - TF32_DIV[1])
    if tf32_ns <= 0 or not fx.significant(cost_ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        "tf32_us_per_step": fx.per_step_us(tf32_ns, inp.n_steps),
        "tf32_share_pct": fx.share(tf32_ns, inp.window_ns),
        "tensor_core_pct": inp.tensor_core_pct,
        "gpu": inp.gpu_name,
        "compute_capability": f"{cc[0]}.{cc[1]}",
    }
    ev["summary"] = (
        f"{sig3(ev['tf32_us_per_step'] / 1e3)} ms per step ({sig3(ev['tf32_share_pct'])}% of the "
        "run) of matrix multiplies and convolutions ran as TF32 on the tensor cores, with every "
        "activation in fp32: bf16 autocast runs them at twice TF32's peak rate and halves the "
        "bytes of the memory-bound kernels it runs in bf16."
    )
    conv = conv_net(inp)
    return Finding(
        ev,
        fx.share(cost_ns, inp.window_ns),
        title="Train in bf16 autocast: TF32 runs at half the bf16 rate",
        why="TF32 runs matrix multiplies on the tensor cores at half the bf16 rate, with every "
        "activation in fp32; bf16 autocast doubles that rate and halves the bytes of the kernels "
        "it runs in bf16" + (CONV_WHY if conv else "") + ".",
        code=(CHANNELS_LAST_HINT if conv else "")
        + CODE_BF16.split("# or at least TF32")[0].rstrip("\n")
        + "\n",
    )


def detect(inp: Inputs) -> Finding | None:
    fp32_us = inp.fp32_gemm_us or 0.0
    if fp32_us <= 0 or fp32_us < FP32_OF_TF32 * tf32_us(inp):
        return _detect_tf32(inp)
    cc = inp.compute_capability
    if cc is None or cc[0] < 7:  # no tensor cores (or unknown GPU): no evidence they would help
        return None
    speedup = inp.tc_speedup if inp.tc_speedup and inp.tc_speedup > 1 else DEFAULT_TC_SPEEDUP
    fp32_ns = fp32_us * 1e3
    gain_ns = fp32_ns * (1.0 - 1.0 / speedup)
    if not fx.significant(gain_ns, inp.window_ns, inp.n_steps):
        return None
    bf16 = cc[0] >= 8
    ev: dict[str, Any] = {
        "fp32_gemm_us_per_step": fx.per_step_us(fp32_ns, inp.n_steps),
        "fp32_gemm_share_pct": fx.share(fp32_ns, inp.window_ns),
        "tensor_core_pct": inp.tensor_core_pct,
        "gpu": inp.gpu_name,
        "compute_capability": f"{cc[0]}.{cc[1]}",
        "assumed_speedup": speedup,
    }
    ev["summary"] = (
        f"{sig3(ev['fp32_gemm_us_per_step'] / 1e3)} ms per step ({sig3(ev['fp32_gemm_share_pct'])}% of the "
        f"run) of matrix-multiply kernels ran in plain fp32 on CUDA cores of a tensor-core GPU "
        f"({inp.gpu_name or 'cc ' + ev['compute_capability']}); at {speedup:.1f}x on tensor cores "
        f"that time shrinks by {100 * (1 - 1 / speedup):.0f}%."
    )
    # no proven bound: the speed-up is assumed, and autocast also halves other kernels' bytes
    if bf16:
        if not conv_net(inp):
            return Finding(ev, fx.share(gain_ns, inp.window_ns))
        return Finding(
            ev,
            fx.share(gain_ns, inp.window_ns),
            code=CHANNELS_LAST_HINT + CODE_BF16,
            why=WORDS.why[:-1] + CONV_WHY + ".",
        )
    return Finding(
        ev, fx.share(gain_ns, inp.window_ns), title=FP16_TITLE, code=CODE_FP16, why=FP16_WHY
    )


def _gemm_fp32(n: Node) -> bool:
    if n.kind != "gpu" or not isinstance(n.event, GpuEvent) or "gemm" not in n.tags:
        return False
    info = tensor_core_info(n.event.name, "gemm")
    return info.tensor_core is False and info.mma and (info.precision in (None, "fp32"))


def _conv_math(n: Node) -> bool | None:
    """For a convolution's math kernel (cuDNN's implicit-GEMM, FFT, Winograd and engine
    kernels; not its layout or BatchNorm helpers, not a depthwise direct kernel): whether it
    ran on the tensor cores, and None for any other node."""
    if n.kind != "gpu" or not isinstance(n.event, GpuEvent) or "conv" not in n.tags:
        return None
    if classify_kernel(n.event.name, "kernel") != "convolution":
        return None
    info = tensor_core_info(n.event.name, "convolution")
    if not info.mma or info.rule in ("not-math", "helper", "direct-conv"):
        return None
    if info.tensor_core is True:
        return True
    return False if info.precision in (None, "fp32") else None


def convs_fp32_no_tf32(g: Graph) -> bool:
    """Whether the window's convolutions run in plain fp32 with cuDNN's TF32 off: some
    convolution math kernel runs fp32 on CUDA cores and none runs on the tensor cores. With
    TF32 allowed (PyTorch's default for cuDNN), cuDNN runs most fp32 convolutions as TF32
    tensor-core kernels, and an fp32 CUDA-core kernel beside them is one its heuristics chose
    over those (cudnn.benchmark=False): bf16 is not known to speed it up (v07: -25 %, v37: 12 %,
    sample_traces/validation/README.md, "bf16 autocast on v07 and v37")."""
    seen = False
    for n in g.nodes:
        c = _conv_math(n)
        if c is True:
            return False
        seen = seen or c is False
    return seen


ATTENTION_3XTF32_RATIO = (2.0, 3.0, 6.0)
"""fp32 attention (3xTF32 on the tensor cores, as PyTorch's memory-efficient kernel runs fp32 on
sm80+) → bf16, low / mid / high: 6 is the peaks' ratio (bf16 is 2× TF32; 3xTF32 does three TF32
products per product), 2 and 3 what a memory-bound kernel keeps of it (bf16 also halves the
bytes)."""


def _attention_fp32(n: Node) -> str | None:
    """``3xtf32`` or ``fp32`` for an attention kernel in fp32 math (None: not one)."""
    if n.kind != "gpu" or not isinstance(n.event, GpuEvent):
        return None
    if classify_kernel(n.event.name, "kernel") != "attention":
        return None
    info = tensor_core_info(n.event.name, "attention")
    if not info.mma or info.rule in ("not-math", "helper"):
        return None
    if info.precision == "3xtf32":
        return "3xtf32"
    if info.tensor_core is False and info.precision in (None, "fp32"):
        return "fp32"
    return None


def _ratio(ctx: Context, d_ns: float) -> float:
    lo, hi = GEMM_RATIO.get(ctx.gpu_model or "", (2.0, ctx.peak_ratio or 8.0))
    if d_ns <= SMALL_GEMM_NS:
        return lo
    if d_ns >= LARGE_GEMM_NS:
        return hi
    f = math.log(d_ns / SMALL_GEMM_NS) / math.log(LARGE_GEMM_NS / SMALL_GEMM_NS)
    return math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo)))


def _kernels(g: Graph) -> np.ndarray:
    """Which nodes are GPU kernels, as a boolean array (a copy: the caller may change it)."""
    return node_mask(g, "gpu_kernels", lambda n: n.kind == "gpu" and n.cat == "kernels").copy()


def _tf32(n: Node) -> bool:
    """A GPU kernel that runs on the tensor cores in TF32."""
    if n.kind != "gpu" or not isinstance(n.event, GpuEvent) or n.cat != "kernels":
        return False
    info = tensor_core_info(n.event.name, classify_kernel(n.event.name, "kernel"))
    return info.tensor_core is True and info.precision == "tf32"


def _fp32_math(n: Node) -> bool:
    """Matrix math in plain fp32 on CUDA cores: a GEMM, a convolution's math kernel or
    attention (what :func:`detect`'s first branch reads, ``fp32_gemm_us``)."""
    return _gemm_fp32(n) or _conv_math(n) is False or _attention_fp32(n) is not None


def _retime_tf32(g: Graph, channels_last: bool = False) -> dict[str, Variant]:
    """The TF32 branch's re-timing: TF32 tensor-core kernels × :data:`TF32_DIV` (cuDNN's
    fallback convolution kernels × :data:`NO_SMEM_TF32_DIV`), the other compute kernels (not the
    optimizer's) × :data:`TF32_OTHER` but cuDNN's BatchNorm kernels × :data:`CUDNN_BN`, host ×
    1.3 / 1.15 / 1 (the casts autocast adds), low / mid / high. ``channels_last`` (the code names
    it): at the high end the model runs in it, TF32 convolution kernels × :data:`CL_TF32_CONV`,
    cuDNN's BatchNorm × :data:`CL_CUDNN_BN`, its layout transforms × :data:`CL_LAYOUT`; low and
    mid stay those of an NCHW model (a user who leaves the layout as it is)."""
    tf = [_tf32(n) for n in g.nodes]
    conv = [t and _conv_kernel(n) for t, n in zip(tf, g.nodes, strict=True)]
    layout = [_kernel_named(n, _LAYOUT) for n in g.nodes]
    fallback = [_no_smem_conv(n) for n in g.nodes]
    bn = [_cudnn_bn(n) for n in g.nodes]
    opt = [
        n.kind == "gpu"
        and isinstance(n.event, GpuEvent)
        and classify_kernel(n.event.name, "kernel") == "optimizer"
        for n in g.nodes
    ]

    def mp(k: int, host: float, cl: bool = False) -> DurFn:
        def dur(v: int, n: Node) -> float:
            if fx.is_host_work(n):
                return n.dur * host
            if fallback[v]:
                return n.dur * NO_SMEM_TF32_DIV[k]
            if cl and conv[v]:
                return n.dur * CL_TF32_CONV
            if tf[v]:
                return n.dur * TF32_DIV[k]
            if bn[v]:
                return n.dur * (CL_CUDNN_BN if cl else CUDNN_BN[k])
            if cl and layout[v]:
                return n.dur * CL_LAYOUT
            if n.kind == "gpu" and n.cat == "kernels" and not opt[v]:
                return n.dur * TF32_OTHER[k]
            return float(n.dur)

        # every branch but the host's multiplies by a factor fixed per node: the first that
        # applies, set last below
        factor = np.ones(len(g.nodes))
        factor[_kernels(g) & ~np.array(opt, dtype=bool)] = TF32_OTHER[k]
        if cl:
            factor[np.array(layout, dtype=bool)] = CL_LAYOUT
        factor[np.array(bn, dtype=bool)] = CL_CUDNN_BN if cl else CUDNN_BN[k]
        factor[np.array(tf, dtype=bool)] = TF32_DIV[k]
        if cl:
            factor[np.array(conv, dtype=bool)] = CL_TF32_CONV
        factor[np.array(fallback, dtype=bool)] = NO_SMEM_TF32_DIV[k]

        def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
            d = raw_durations(g, None, durs, picked)
            return np.where(fx.host_work_mask(g, durs), d * host, d * factor)

        return ByNode(dur, whole)

    return {
        "low": (mp(0, 1.3), None),
        "mid": (mp(1, 1.15), None),
        "high": (mp(2, 1.0, channels_last), None),
    }


HALF_PRECISIONS = frozenset({"bf16", "fp16", "fp8"})
"""The tensor-core precisions of a run in mixed precision already (:func:`in_half_already`)."""


def _half_math(n: Node) -> bool:
    """A GPU kernel whose matrix math runs on the tensor cores in 16 bits or fewer."""
    if n.kind != "gpu" or not isinstance(n.event, GpuEvent) or n.cat != "kernels":
        return False
    info = tensor_core_info(n.event.name, classify_kernel(n.event.name, "kernel"))
    return info.tensor_core is True and info.precision in HALF_PRECISIONS


def in_half_already(g: Graph) -> bool:
    """Whether the window's matrix math runs mostly in half precision already: its tensor-core
    kernels in bf16/fp16/fp8 (:data:`HALF_PRECISIONS`) take at least as long as its fp32 math on
    CUDA cores (:func:`_fp32_math`). Autocast is on there, and the kernels it runs in bf16 have
    halved their bytes already; only the fp32 math left (a matmul outside the autocast region, a
    loss autocast keeps in fp32) has anything to gain (v86 replayed as CUDA graphs: 0.16 ms per
    step of fp32 GEMMs beside 6.4 ms of bf16 ones)."""
    half = fp32 = 0
    for n in g.nodes:
        if _half_math(n):
            half += n.dur
        elif _fp32_math(n):
            fp32 += n.dur
    return half > 0 and half >= fp32


def retime(g: Graph, ctx: Context, channels_last: bool = False) -> dict[str, Variant]:
    """fp32 GEMMs ÷ r/1.5 / r / r (r: the measured fp32→bf16 ratio for the GPU and the GEMM's
    duration, :data:`GEMM_RATIO`), but the share of a GEMM kernel's time in matmuls memory-bound
    at the fp32 roof (the roofline's, ``Context.memory_bound_fp32_matmul``) ×
    :data:`MEMORY_BOUND_KEEP`; attention kernels in fp32 math ÷ the
    :data:`ATTENTION_3XTF32_RATIO` (3xTF32) or as GEMMs (plain fp32); host × 1.3 / 1.15 / 1
    (casts), cuDNN's BatchNorm kernels × :data:`CUDNN_BN`, other kernels × 1 / 1 / 0.6: × 1 at
    every level where the run is in half precision already (:func:`in_half_already`)."""
    tf32_ns = sum(n.dur for n in g.nodes if _tf32(n))
    if tf32_ns > 0 and sum(n.dur for n in g.nodes if _fp32_math(n)) < FP32_OF_TF32 * tf32_ns:
        return _retime_tf32(g, channels_last)  # fp32 with TF32 on, no math on CUDA cores
    top_other = 1.0 if in_half_already(g) else 0.6
    att: dict[int, str] = {}
    conv = convs_fp32_no_tf32(g)
    for v, n in enumerate(g.nodes):
        if n.kind == "gpu" and not _gemm_fp32(n):
            a = _attention_fp32(n)
            if a is not None:
                att[v] = a

    bn = [_cudnn_bn(n) for n in g.nodes]

    membound = ctx.memory_bound_fp32_matmul

    cl_conv = [channels_last and _tf32(n) and _conv_kernel(n) for n in g.nodes]
    layout = [channels_last and _kernel_named(n, _LAYOUT) for n in g.nodes]
    gemm32 = node_mask(g, "gemm_fp32", _gemm_fp32)
    att32 = index_mask(g, [v for v, a in att.items() if a == "fp32"])
    conv_fp32 = node_mask(g, "conv_math_fp32", lambda n: _conv_math(n) is False)

    def mp(
        div: float,
        other: float,
        host: float,
        att_div: float,
        bn_f: float,
        mb_keep: float,
        cl: bool = False,
    ) -> DurFn:
        def dur(v: int, n: Node) -> float:
            if fx.is_host_work(n):  # autocast adds a cast op per matmul operand
                return n.dur * host
            if bn[v]:
                return n.dur * (CL_CUDNN_BN if cl else bn_f)
            if cl and cl_conv[v]:
                return n.dur * CL_TF32_CONV
            if cl and layout[v]:
                return n.dur * CL_LAYOUT
            if _gemm_fp32(n):  # memory-bound at the fp32 roof: the share tensor cores cannot help
                mb = membound.get(n.event.name, 0.0) if isinstance(n.event, GpuEvent) else 0.0
                sped = n.dur / max(1.0, _ratio(ctx, n.dur) / div)
                return mb * n.dur * mb_keep + (1.0 - mb) * sped
            if att.get(v) == "fp32":
                return n.dur / max(1.0, _ratio(ctx, n.dur) / div)
            if conv and _conv_math(n) is False:
                return n.dur / max(1.0, _ratio(ctx, n.dur) / (div * CONV_DIV))
            if v in att:
                return n.dur / att_div
            if n.kind == "gpu" and n.cat == "kernels":
                return n.dur * other
            return float(n.dur)

        # the branches that multiply or divide by a constant, as arrays; the GEMMs, fp32
        # attention and convolutions (scaled by their own duration) node by node
        factor = np.ones(len(g.nodes))
        factor[_kernels(g)] = other
        first = np.array(bn, dtype=bool)
        if cl:
            factor[np.array(layout, dtype=bool)] = CL_LAYOUT
            factor[np.array(cl_conv, dtype=bool)] = CL_TF32_CONV
            first |= np.array(cl_conv, dtype=bool) | np.array(layout, dtype=bool)
        factor[np.array(bn, dtype=bool)] = CL_CUDNN_BN if cl else bn_f
        own = ~first & (gemm32 | att32 | (conv_fp32 if conv else False))
        divided = ~first & ~own & index_mask(g, att)
        own_ids = np.flatnonzero(own).tolist()

        def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
            d = raw_durations(g, None, durs, picked)
            out = np.where(divided, d / att_div, d * factor)
            if own_ids:
                at = nodes_at(g, durs)
                out[own_ids] = [dur(v, at[v]) for v in own_ids]
            return np.where(fx.host_work_mask(g, durs), d * host, out)

        return ByNode(dur, whole)

    lo, mid, hi = ATTENTION_3XTF32_RATIO
    keep = MEMORY_BOUND_KEEP
    return {
        "low": (mp(1.5, 1.0, 1.3, lo, CUDNN_BN[0], keep[0]), None),
        "mid": (mp(1.0, 1.0, 1.15, mid, CUDNN_BN[1], keep[1]), None),
        "high": (mp(1.0, top_other, 1.0, hi, CUDNN_BN[2], keep[2], channels_last), None),
    }


def advised(rec: Recommendation, g: Graph, ctx: Context) -> dict[str, Variant]:
    """The fix the code gives: :func:`retime`, in channels_last at the high end where the code
    names it (:data:`CHANNELS_LAST_HINT`)."""
    return retime(g, ctx, channels_last=CHANNELS_LAST_HINT in rec.fix)


UNIT = FixUnit("mixed_precision", WORDS, detect, retime, advised=advised)
