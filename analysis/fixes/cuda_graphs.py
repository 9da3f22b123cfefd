"""Fix unit ``cuda_graphs``: a compiled step still bound by launches: replay it as CUDA graphs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fixes.kernel_fusion import BREAKS_FIX, launch_bound

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


def detect(inp: Inputs) -> Finding | None:
    """A compiled model not replayed as CUDA graphs."""
    lb = launch_bound(inp)
    if lb is None or not lb.compiled or lb.graphs:
        return None
    code = (CODE + "\n" + BREAKS_FIX).rstrip("\n") if lb.breaks else None
    # no proven bound: the graph replay shortens the host's whole launch work, not only the idle
    return Finding(lb.evidence, fx.host_gain_pct(lb.ns, inp), code=code)


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Host and launches × 0.5 / 0.2 / 0.05."""
    return fx.scaled_variants(fx.is_host_work, 0.5, 0.2, 0.05)


UNIT = FixUnit("cuda_graphs", WORDS, detect, retime, general=True)
