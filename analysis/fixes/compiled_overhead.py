"""Fix unit ``compiled_overhead``: a compiled step replayed as CUDA graphs and still bound by the
host: amortise the per-step overhead."""

from __future__ import annotations

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes import cuda_graphs
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fixes.kernel_fusion import BREAKS_FIX, launch_bound

LARGER_BATCH = "loader = DataLoader(dataset, batch_size=2 * B, ...)   # as memory allows\n"
COMPILE_OPT = "# the optimizer step can be compiled too: torch.compile(opt.step)"
WORDS = Words(
    "Amortise the remaining per-step overhead (larger batch, fewer graph breaks)",
    "The step is compiled and replayed as CUDA graphs already: what remains per step is paid "
    "once per batch, so fewer, larger steps pay it less.",
    LARGER_BATCH + COMPILE_OPT,
)


def detect(inp: Inputs) -> Finding | None:
    """A compiled model replayed as CUDA graphs in the window (a window that only captures them
    records a warm-up: its host work is not the replayed step's)."""
    lb = launch_bound(inp)
    if lb is None or not lb.compiled or not lb.graphs:
        return None
    if inp.compiled is None or inp.compiled.graph_launches_per_step <= 0:
        return None
    code = LARGER_BATCH + BREAKS_FIX + COMPILE_OPT if lb.breaks else None
    return Finding(lb.evidence, fx.host_gain_pct(lb.ns, inp), code=code)


# the re-timing is the CUDA-graph unit's (host and launches shrink)
UNIT = FixUnit(
    "compiled_overhead", WORDS, detect, cuda_graphs.retime, general=True, host_ceiling=True
)
