"""Fix unit ``cudnn_benchmark``: convolutions without cuDNN's algorithm search."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.critical_path import GpuEvent
from gpuscope.analysis.event_classes import CUDNN_NO_SMEM_RE, NATIVE_CONV_RE
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.gains import ByNode, raw_durations
from gpuscope.analysis.kernel_names import classify_kernel
from gpuscope.analysis.tensor_cores import tensor_core_info

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant

_NATIVE = re.compile(NATIVE_CONV_RE)
_NO_SMEM = re.compile(CUDNN_NO_SMEM_RE)

WORDS = Words(
    "Let cuDNN pick the fastest convolution algorithms",
    "Benchmark mode times cuDNN's algorithms once for fixed input shapes and keeps the fastest, "
    "instead of a heuristic's pick.",
    "torch.backends.cudnn.benchmark = True   # before the first step; input shapes fixed",
)


def native_conv(name: str) -> bool:
    """Whether a kernel is one of PyTorch's own convolution kernels (depthwise, im2col-based),
    which cuDNN's algorithm search does not pick (``event_classes.NATIVE_CONV_RE``)."""
    return _NATIVE.search(name) is not None


def detect(inp: Inputs) -> Finding | None:
    k = inp.kernels
    if k.conv_us <= 0 or k.cudnn_find_seen or inp.cudnn_benchmark is True:
        return None  # benchmark mode searched (in the trace, or before it: the capture says so)
    # only cuDNN's convolutions: PyTorch's own kernels are not among the algorithms it times
    ns = max(0.0, k.conv_us - k.native_conv_us) * 1e3
    if fx.share(ns, inp.window_ns) < 5.0 or not fx.significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        "conv_us_per_step": fx.per_step_us(ns, inp.n_steps),
        "conv_share_pct": fx.share(ns, inp.window_ns),
        "native_conv_us_per_step": fx.per_step_us(k.native_conv_us * 1e3, inp.n_steps),
    }
    ev["cudnn_benchmark"] = inp.cudnn_benchmark
    known = (
        "the run had torch.backends.cudnn.benchmark = False (recorded by gpuscope.capture)"
        if inp.cudnn_benchmark is False
        else "the trace cannot tell whether benchmark mode is on (its algorithm search runs "
        "before the profiled steps; gpuscope.capture records the setting): if it is off"
    )
    native = ev["native_conv_us_per_step"]
    ev["summary"] = (
        f"cuDNN's convolutions take {sig3(ev['conv_us_per_step'] / 1e3)} ms per step "
        f"({sig3(ev['conv_share_pct'])}%) and {known}, benchmark mode would time the algorithms "
        "once for these fixed input shapes and keep the fastest. The bound is all their "
        "time: how much of it a faster algorithm saves is not knowable from the trace. The estimate "
        "expects most from the convolution kernels that ran on CUDA cores, where tensor-core "
        "algorithms exist, and little from those already on the tensor cores."
        + (
            f" PyTorch's own convolution kernels (depthwise, im2col) take {sig3(native / 1e3)} ms "
            "more per step: benchmark mode does not choose them, so they are left out."
            if native > 0
            else ""
        )
    )
    gain = fx.host_gain_pct(ns, inp)  # per step over the untraced step when one is known
    return Finding(ev, gain, bound_pct=gain)


CUDA_CORE_FACTORS = (1.0, 0.5, 0.1)
"""Low / mid / high factor on a convolution's kernels that ran on CUDA cores (fp32 FMA, FFT,
Winograd without MMA) on a tensor-core GPU: the heuristic's pick where tensor-core algorithms
exist, the kernels benchmark mode replaces most (v37, v07, v142: 0.55-0.85 of their time saved;
v124: none). High: a TF32 tensor-core kernel runs the same convolution ~8x faster."""

FALLBACK_FACTORS = (1.0, 0.5, 0.1)
"""Low / mid / high factor on cuDNN's convolution kernels that stage nothing in shared memory
(``event_classes.CUDNN_NO_SMEM_RE``, tensor-core kernels all): the heuristic's fallback, which
the search replaces as it does CUDA-core picks. Benchmark mode gained at least their share of the
kernel time on every recorded pair with them: v220 30 % of the kernel time → 23.3 % of the step,
v136 10.4 → 15.9, v135 10.3 → 9.9, v109 4.0 → 5.8, v203 3.5 → 3.6."""

OTHER_FACTORS = (1.0, 0.9, 0.5)
"""Low / mid / high factor on a convolution's other kernels (tensor-core math, the algorithm's
layout transposes and FFT steps): the heuristic's tensor-core picks are near the fastest (a
median 0.1 of their time saved on the recorded pairs, 0.33 at most: v136's Conv3d)."""


def conv_kernel_class(n: Node, by_launch: bool) -> str | None:
    """``cuda_core``, ``fallback`` (:data:`FALLBACK_FACTORS`) or ``other`` for a kernel of a
    cuDNN convolution, None for any other node.
    ``by_launch``: the graph knows each kernel's launching operator (``conv_call``); without it
    (a trace with no host events), the kernels named as convolutions. PyTorch's own convolution
    kernels (:func:`native_conv`) are never benchmark mode's."""
    ev = n.event
    if n.kind != "gpu" or n.cat != "kernels" or not isinstance(ev, GpuEvent):
        return None
    cat = classify_kernel(ev.name, "kernel")
    if not ("conv_call" in n.tags if by_launch else cat == "convolution") or native_conv(ev.name):
        return None
    info = tensor_core_info(ev.name, cat)
    if cat in ("convolution", "gemm") and info.mma and info.tensor_core is False:
        return "cuda_core"
    return "fallback" if _NO_SMEM.search(ev.name) else "other"


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """The kernels of cuDNN's convolutions (launched by a convolution operator; BatchNorm, casts
    and bias adds are not theirs) × :data:`CUDA_CORE_FACTORS` where they ran on CUDA cores,
    × :data:`FALLBACK_FACTORS` for its fallback kernels and × :data:`OTHER_FACTORS` otherwise; PyTorch's own convolution kernels stay."""
    by_launch = any("conv_call" in n.tags for n in g.nodes)
    cls = [conv_kernel_class(n, by_launch) for n in g.nodes]

    def variant(k: int) -> DurFn:
        f = {
            "cuda_core": CUDA_CORE_FACTORS[k],
            "fallback": FALLBACK_FACTORS[k],
            "other": OTHER_FACTORS[k],
        }

        def dur(v: int, n: Node) -> float:
            c = cls[v]
            return float(n.dur) if c is None else n.dur * f[c]

        factor = np.array([1.0 if c is None else f[c] for c in cls], dtype="float64")
        picks = np.array([c is not None for c in cls], dtype=bool)

        def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
            d = raw_durations(g, None, durs, picked)
            return np.where(picks, d * factor, d)

        return ByNode(dur, whole)

    return {name: (variant(k), None) for k, name in enumerate(("low", "mid", "high"))}


UNIT = FixUnit(
    "cudnn_benchmark",
    WORDS,
    detect,
    retime,
    proof="The fix changes only cuDNN's convolution kernels, so the step loses at most their time.",
)
