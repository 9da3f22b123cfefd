"""Fix unit ``batch_size``: kernels too small for the GPU and per-step overheads: a larger batch
makes each sample cheaper (its gain is on the time per sample)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuscope.analysis.critical_path import GpuEvent
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import PER_SAMPLE_TIME, Finding, FixUnit, Inputs, Words
from gpuscope.vocabulary.causes import CPU_OVERHEAD, HOST_SYNC, LAUNCH_OVERHEAD

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant

BATCH_MULTIPLE = 4
"""The batch multiple the estimate re-times (the code says 4 × B)."""

WORDS = Words(
    "Use a larger batch per step (lower time per sample)",
    "Kernels with fewer blocks than SMs leave the GPU part-empty and per-step overheads are paid "
    "per batch: a larger batch fills the GPU and pays them less often.",
    f"loader = DataLoader(dataset, batch_size={BATCH_MULTIPLE} * B, ...)   # as memory allows\n"
    "# scale the learning rate with the batch (e.g. linearly, with warm-up)",
)

AMORTISED: tuple[str, ...] = (LAUNCH_OVERHEAD, CPU_OVERHEAD, HOST_SYNC, "other")
"""Idle causes whose cost per step does not grow with the batch (a larger batch amortises them)."""

FIXED_KERNEL_NS = 3_000
"""The part of a kernel's time that does not grow with its work (ns; the high variant)."""


def detect(inp: Inputs) -> Finding | None:
    k = inp.kernels
    if k.kernel_us <= 0 or k.small_grid_fill is None:
        return None
    small_share = 100.0 * k.small_grid_us / k.kernel_us
    if small_share < 30.0 or inp.busy_pct >= 90.0:
        return None
    if inp.mem_used_frac is not None and inp.mem_used_frac >= 0.6:
        return None  # little memory headroom: a larger batch may not fit
    unused_ns = k.small_grid_us * 1e3 * (1.0 - k.small_grid_fill)
    # per-step overheads amortise over a larger batch; data loading and copies grow with it
    idle_ns, _ = fx.host_cost(sum(inp.idle.causes_ns.get(c, 0) for c in AMORTISED), inp)
    if not fx.significant(unused_ns + idle_ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        "busy_pct": inp.busy_pct,
        "small_grid_kernel_share_pct": small_share,
        "small_grid_mean_sm_fill": k.small_grid_fill,
        "memory_used_frac": inp.mem_used_frac,
    }
    reserved, total = fx.memory(inp, "peak_reserved_bytes"), fx.memory(inp, "device_total_bytes")
    if reserved and total:
        free = total - reserved
        allocated = fx.memory(inp, "peak_allocated_bytes")
        ev["headroom_bytes"] = free
        ev["peak_allocated_bytes"] = allocated
        mem = (
            f"the allocator reserved at most {fx.gib(reserved)} of {fx.gib(total)} "
            f"({100 * reserved / total:.0f}%; peak allocated "
            f"{fx.gib(allocated or 0)}), leaving {fx.gib(free)} of headroom"
        )
    elif inp.mem_used_frac is not None:
        mem = f"peak memory use was {100 * inp.mem_used_frac:.0f}% of the GPU"
    else:
        mem = "memory use was not recorded (record with profile_memory=True, or check torch.cuda.max_memory_allocated())"
    ev["summary"] = (
        f"The GPU was busy {inp.busy_pct:.0f}% of the time and {small_share:.0f}% of kernel time "
        f"went to kernels with fewer blocks than SMs (mean fill {100 * k.small_grid_fill:.0f}%); "
        f"{mem}. A larger batch makes each step longer but each sample cheaper: the gain is on "
        f"the time per sample ({BATCH_MULTIPLE}× the batch), the same footing as the other fixes' "
        "step-time gains, which keep the batch."
    )
    # no proven bound: how the kernels fill the GPU at a larger batch is a model
    return Finding(ev, min(100.0, fx.host_gain_pct(idle_ns + unused_ns, inp)))


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """At :data:`BATCH_MULTIPLE` × the batch: kernels × k / SM-fill scaling / fill scaling with a
    :data:`FIXED_KERNEL_NS` fixed part; copies and data loading × k."""
    k = BATCH_MULTIPLE
    sms = ctx.sms or 0

    def grow(mode: str) -> DurFn:
        def dur(v: int, n: Node) -> float:
            if n.kind == "host":
                return n.dur * k if "dataloader" in n.tags else float(n.dur)
            if n.cat == "copies":
                return float(n.dur * k)
            if n.cat != "kernels":
                return float(n.dur)
            lin = float(n.dur * k)
            if mode == "low":
                return lin
            ev = n.event
            blocks = ev.blocks if isinstance(ev, GpuEvent) else None
            d = lin
            if sms and blocks and blocks < sms:
                d = n.dur * max(1.0, k * blocks / sms)
            if mode == "high":
                c = min(float(n.dur), FIXED_KERNEL_NS)
                d = min(d, c + (n.dur - c) * k)
            return d

        return dur

    return {"low": (grow("low"), None), "mid": (grow("mid"), None), "high": (grow("high"), None)}


UNIT = FixUnit(
    "batch_size",
    WORDS,
    detect,
    retime,
    footing=PER_SAMPLE_TIME,
    batch_multiple=BATCH_MULTIPLE,
    changes_training=True,
)
