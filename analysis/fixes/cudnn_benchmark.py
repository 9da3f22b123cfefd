"""Fix unit ``cudnn_benchmark``: convolutions without cuDNN's algorithm search."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.event_classes import NATIVE_CONV_RE
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph
    from gpuscope.analysis.gains import Context, Variant

_NATIVE = re.compile(NATIVE_CONV_RE)

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
        "time: how much of it a faster algorithm saves is not knowable from the trace."
        + (
            f" PyTorch's own convolution kernels (depthwise, im2col) take {sig3(native / 1e3)} ms "
            "more per step: benchmark mode does not choose them, so they are left out."
            if native > 0
            else ""
        )
    )
    gain = fx.host_gain_pct(ns, inp)  # per step over the untraced step when one is known
    return Finding(ev, gain, bound_pct=gain)


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """cuDNN's convolution kernels × 1 / 0.8 / 0 (PyTorch's own, :func:`native_conv`, stay)."""
    return fx.scaled_variants(
        lambda n: (
            n.kind == "gpu"
            and "conv" in n.tags
            and not (n.event is not None and native_conv(n.event.name))
        ),
        1.0,
        0.8,
        0.0,
    )


UNIT = FixUnit(
    "cudnn_benchmark",
    WORDS,
    detect,
    retime,
    proof="The fix changes only cuDNN's convolution kernels, so the step loses at most their time.",
)
