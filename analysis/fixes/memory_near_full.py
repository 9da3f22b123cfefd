"""Fix unit ``memory_near_full``: the caching allocator holds nearly all of the GPU's memory."""

from __future__ import annotations

from typing import Any

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import MEMORY, Finding, FixUnit, Inputs, Words

WORDS = Words(
    "GPU memory is nearly full: checkpoint activations, use expandable segments, or a smaller micro-batch",
    "A nearly full GPU is one larger activation away from out-of-memory, leaves no room for a "
    "larger batch, and makes the allocator free and re-ask the driver for memory.",
    "# keep fewer activations: recompute them in backward\n"
    "from torch.utils.checkpoint import checkpoint\n"
    "x = checkpoint(block, x, use_reentrant=False)\n"
    "# let the allocator grow segments instead of fragmenting (before CUDA starts)\n"
    "os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'\n"
    "# or: a smaller micro-batch with gradient accumulation (the same global batch)",
)

NEAR_FULL_FRAC = 0.90
"""Peak reserved memory at least this share of the device: the finding."""


def detect(inp: Inputs) -> Finding | None:
    """The allocator held at least :data:`NEAR_FULL_FRAC` of the GPU. Its bound is the time in
    cudaMalloc/cudaFree inside the steps (a full cache frees and re-asks the driver), 0 without."""
    total, peak = fx.memory(inp, "device_total_bytes"), fx.memory(inp, "peak_reserved_bytes")
    if not total or not peak or peak < NEAR_FULL_FRAC * total:
        return None
    calls, us, us_per_step = fx.malloc_calls(fx.memory(inp, "malloc"))
    thrash_ns = us * 1e3
    gap = fx.memory(inp, "reserved_minus_allocated_at_peak_bytes")
    ev: dict[str, Any] = {
        "peak_reserved_bytes": peak,
        "peak_allocated_bytes": fx.memory(inp, "peak_allocated_bytes"),
        "device_total_bytes": total,
        "reserved_minus_allocated_at_peak_bytes": gap,
        "malloc_calls": calls,
        "malloc_us_per_step": us_per_step,
    }
    thrash = (
        f" The allocator called cudaMalloc/cudaFree {calls} times inside the steps "
        f"({us_per_step:.0f} µs per step): it is freeing its cache to make room."
        if calls
        else ""
    )
    frag = (
        f" At the peak it held {fx.gib(gap)} reserved but not allocated (fragmentation: "
        "expandable_segments lets it reuse that)."
        if gap
        else ""
    )
    ev["summary"] = (
        f"The caching allocator reserved {fx.gib(peak)} of the GPU's {fx.gib(total)} "
        f"({100 * peak / total:.0f}%): one larger activation away from out-of-memory, and no room "
        f"for a larger batch.{frag}{thrash}"
    )
    gain = min(100.0, fx.host_gain_pct(thrash_ns, inp)) if thrash_ns else 0.0
    return Finding(ev, gain, bound_pct=gain)


UNIT = FixUnit(
    "memory_near_full",
    WORDS,
    detect,
    proof="The time it can give back is the allocator's cudaMalloc/cudaFree calls inside the "
    "steps: the step loses at most that time.",
    footing=MEMORY,
)
