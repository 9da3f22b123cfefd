"""Fix unit ``cudnn_benchmark``: convolutions without cuDNN's algorithm search."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph
    from gpuscope.analysis.gains import Context, Variant

WORDS = Words(
    "Let cuDNN pick the fastest convolution algorithms",
    "Benchmark mode times cuDNN's algorithms once for fixed input shapes and keeps the fastest, "
    "instead of a heuristic's pick.",
    "torch.backends.cudnn.benchmark = True   # before the first step; input shapes fixed",
)


def detect(inp: Inputs) -> Finding | None:
    k = inp.kernels
    if k.conv_us <= 0 or k.cudnn_find_seen or inp.cudnn_benchmark is True:
        return None  # benchmark mode searched (in the trace, or before it: the capture says so)
    ns = k.conv_us * 1e3
    if fx.share(ns, inp.window_ns) < 5.0 or not fx.significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        "conv_us_per_step": fx.per_step_us(ns, inp.n_steps),
        "conv_share_pct": fx.share(ns, inp.window_ns),
    }
    ev["cudnn_benchmark"] = inp.cudnn_benchmark
    known = (
        "the run had torch.backends.cudnn.benchmark = False (recorded by gpuscope.capture)"
        if inp.cudnn_benchmark is False
        else "the trace cannot tell whether benchmark mode is on (its algorithm search runs "
        "before the profiled steps; gpuscope.capture records the setting): if it is off"
    )
    ev["summary"] = (
        f"Convolutions take {sig3(ev['conv_us_per_step'] / 1e3)} ms per step "
        f"({sig3(ev['conv_share_pct'])}%) and {known}, benchmark mode would time the algorithms "
        "once for these fixed input shapes and keep the fastest. The bound is all convolution "
        "time: how much of it a faster algorithm saves is not knowable from the trace."
    )
    gain = fx.host_gain_pct(ns, inp)  # per step over the untraced step when one is known
    return Finding(ev, gain, bound_pct=gain)


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Convolution kernels × 1 / 0.8 / 0."""
    return fx.scaled_variants(lambda n: n.kind == "gpu" and "conv" in n.tags, 1.0, 0.8, 0.0)


UNIT = FixUnit(
    "cudnn_benchmark",
    WORDS,
    detect,
    retime,
    proof="The fix changes only the convolution kernels, so the step loses at most their time.",
)
