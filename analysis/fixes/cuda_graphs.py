"""Fix unit ``cuda_graphs``: a step bound by launches replayed as CUDA graphs: a compiled step not
replayed yet, or an eager step whose GPU works so little of it that the launches are the step
(:data:`EAGER_MAX_BUSY_PCT`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fixes.kernel_fusion import BREAKS_FIX, launch_bound
from gpuscope.analysis.fmt import sig3

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph
    from gpuscope.analysis.gains import Context, Variant

CODE = (
    'model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs: one launch\n'
    "# static shapes help: drop_last=True in the DataLoader, pad to fixed lengths"
)
WORDS = Words(
    "Replay the compiled step as CUDA graphs (reduce-overhead)",
    "A CUDA graph launches the whole compiled step at once, so the host's launches no longer "
    "leave the GPU idle.",
    CODE,
)


EAGER_MAX_BUSY_PCT = 20.0
"""An uncompiled launch-bound step whose GPU is busy under this share (%) of the untraced step
(unknown: the rule abstains) gets this fix beside ``kernel_fusion``: its kernels end
before the host can launch the next, so fusing some still leaves the rest bound by their launches.
Chosen between the one such timed pair, v93 (9.6 %: CUDA graphs gained 88.9 %), and the eager pairs
whose torch.compile was timed (v05, v22, v35, v46: 35-64 %, torch.compile gained 51-65 %)."""

EAGER_TITLE = "Capture the step as a CUDA graph: its launches are the step"
EAGER_CODE = (
    'model = torch.compile(model, mode="reduce-overhead")   # fuses, then replays CUDA graphs\n'
    "# or capture the eager step by hand (static shapes, no host syncs inside it,\n"
    "# Adam/AdamW(capturable=True) when the optimizer step is captured too):\n"
    "#   g = torch.cuda.CUDAGraph()\n"
    "#   with torch.cuda.graph(g): loss = train_step(static_x, static_y)\n"
    "#   each step: static_x.copy_(x); static_y.copy_(y); g.replay()"
)


def gpu_busy_of_step_pct(inp: Inputs) -> float | None:
    """The GPU's busy time per step as % of the untraced step (the step the user runs: the
    profiler slows the host, not the kernels); None without an untraced step, where the traced
    share says only that the real one is larger."""
    if not inp.untraced_step_ns:
        return None
    busy_ns = inp.busy_pct / 100.0 * inp.window_ns / max(1, inp.n_steps)
    return 100.0 * busy_ns / inp.untraced_step_ns


def detect(inp: Inputs) -> Finding | None:
    """A compiled model not replayed as CUDA graphs; or an uncompiled one whose GPU is busy under
    :data:`EAGER_MAX_BUSY_PCT` of the untraced step."""
    lb = launch_bound(inp)
    if lb is None or lb.graphs:
        return None
    # no proven bound: the graph replay shortens the host's whole launch work, not only the idle
    if lb.compiled:
        code = (CODE + "\n" + BREAKS_FIX).rstrip("\n") if lb.breaks else None
        return Finding(lb.evidence, fx.host_gain_pct(lb.ns, inp), code=code)
    busy = gpu_busy_of_step_pct(inp)
    if busy is None or busy >= EAGER_MAX_BUSY_PCT:
        return None
    ev = {**lb.evidence, "gpu_busy_of_step_pct": busy}
    ev["summary"] += (
        f" The GPU works {sig3(busy)}% of the step: each kernel ends before the host can launch "
        "the next, so fused kernels would still wait for their launches; a CUDA graph launches "
        "the whole step at once."
    )
    why = (
        "The kernels are shorter than their launches: the GPU idles between them whatever their "
        "number, and fusing some leaves the rest bound by the host. A CUDA graph replays the "
        "whole step with one launch."
    )
    return Finding(ev, fx.host_gain_pct(lb.ns, inp), title=EAGER_TITLE, code=EAGER_CODE, why=why)


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Host and launches × 0.5 / 0.2 / 0.05 (``compiled_overhead``: a compiled step's remaining
    Python and guards)."""
    return fx.scaled_variants(fx.is_host_work, 0.5, 0.2, 0.05)


def retime_replayed(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Host and launches × 0.5 / 0.2 / 0: at the top, the replayed graph launches the whole step
    at once and no host work per kernel is left. The kernels' launch latencies stay in the graph,
    so the top is not the GPU's work alone (v123, a SchNet-style step captured whole by
    ``torch.cuda.graph``, measured 6.9 → 0.76 ms, 89.1 %: top 85.4 % either way)."""
    return fx.scaled_variants(fx.is_host_work, 0.5, 0.2, 0.0)


UNIT = FixUnit("cuda_graphs", WORDS, detect, retime_replayed, general=True, host_free=True)
"""``host_free``: the replayed step no longer follows its host's speed while the planted one does;
the timed planted steps of the two eager pairs ran 20-37 % slower than the capture's untraced step
(v123 measured 89.1 % against a top of 85.4 %, v141 90.6 % against 87.8 %)."""
