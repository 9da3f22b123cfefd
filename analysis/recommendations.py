"""Recommendations: rules that fire only on evidence from the run and stay silent otherwise.

Each recommendation carries an ``id``, a title, the evidence (numbers of this run), an upper bound
on the step-time reduction (``max_gain_pct``, % of the window: what removing *all* the time it
addresses could give, never more) and the fix as a short code snippet.

A cost is noise, and its rule stays silent, unless it is at least :data:`FLOOR_PCT` of the window
and either :data:`MIN_SHARE_PCT` of the window or :data:`MIN_PER_STEP_US` per step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.compiled import CompiledInfo
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.idle import IdleResult
from gpuscope.analysis.rank_row import RankRow
from gpuscope.vocabulary import fixes
from gpuscope.vocabulary.causes import (
    CPU_OVERHEAD,
    DATA_LOADING,
    HOST_SYNC,
    LAUNCH_OVERHEAD,
    PAGEABLE_COPY,
)

if TYPE_CHECKING:
    from gpuscope.analysis.copies import PageableCopies
    from gpuscope.analysis.gains import Estimate
    from gpuscope.analysis.memory import MallocStats, MemoryResult

MIN_SHARE_PCT = 2.0
"""A cost of at least this share of the window (%) is a finding ..."""
MIN_PER_STEP_US = 100.0
"""... and so is one of at least this many µs per step ..."""
FLOOR_PCT = 0.5
"""... as long as it is at least this share of the window (%): below, the bound is too small."""

DEFAULT_TC_SPEEDUP = 8.0
"""Assumed speed-up of fp32 GEMM/conv time on tensor cores when the peak table has no bf16/fp32
pair for the GPU (H100 dense bf16 vs fp32 is ~15x; 8 is deliberately below that)."""

AMORTISED: tuple[str, ...] = (LAUNCH_OVERHEAD, CPU_OVERHEAD, HOST_SYNC, "other")
"""Idle causes whose cost per step does not grow with the batch (a larger batch amortises them)."""

SHORT_KERNEL_US = 20.0
"""A kernel shorter than this (µs) is "short": launch and host overhead dominate it."""


@dataclass
class Recommendation:
    """One finding. ``max_gain_pct``: upper bound on the step-time reduction, % of the window.
    ``evidence``: ``summary`` (one sentence) plus the numbers it is built from."""

    id: str
    title: str
    evidence: dict[str, Any]
    max_gain_pct: float
    fix: str
    bound: str = "step_time"
    # the step re-timed along the critical-path graph with this fix applied; None until the
    # report adds it
    estimate: Estimate | None = None

    @property
    def gain_phrase(self) -> str:
        """The bound in words: "step time down by at most X%" (``batch_size``: per-sample time)."""
        what = "per-sample time" if self.bound == "per_sample_time" else "step time"
        if (
            self.bound == "memory"
        ):  # memory_near_full: the gain is room, time only from malloc calls
            return f"frees GPU memory; step time down by at most {self.max_gain_pct:.3g}%"
        return f"{what} down by at most {self.max_gain_pct:.3g}%"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "evidence": self.evidence,
            "max_gain_pct": self.max_gain_pct,
            "bound": self.bound,
            "gain": self.gain_phrase,
            "fix": self.fix,
            "estimate": self.estimate.to_json() if self.estimate is not None else None,
        }


@dataclass
class KernelStats:
    """Compute kernels of the window: count, approximate median duration (µs), time in kernels
    shorter than :data:`SHORT_KERNEL_US` (µs), time in kernels whose grid has fewer blocks than
    the GPU has SMs (µs) and the mean SM fill of those (0..1), convolution kernel time (µs)."""

    n_kernels: int = 0
    kernel_us: float = 0.0
    median_us: float | None = None
    short_us: float = 0.0
    n_short: int = 0
    small_grid_us: float = 0.0
    small_grid_fill: float | None = None
    conv_us: float = 0.0
    cudnn_find_seen: bool = False


@dataclass
class Inputs:
    """Everything the rules read, in the units named. ``peers``: the other ranks' lines of the run
    (their ``rank``, ``gpu_busy_pct``, ``step_time_ms``, ``comm_only_us_per_step`` are read)."""

    window_ns: int
    n_steps: int
    busy_pct: float
    idle: IdleResult
    kernels: KernelStats = field(default_factory=KernelStats)
    fp32_gemm_us: float | None = None
    tensor_core_pct: float | None = None
    gpu_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    tc_speedup: float | None = None
    comm_only_ns: int = 0
    peers: list[RankRow] = field(default_factory=list)
    mem_used_frac: float | None = None
    dataloader_kind: str | None = None
    untraced_step_ns: float | None = None
    host_cap_ns_per_step: float | None = None
    compiled: CompiledInfo | None = None
    # torch.backends.cudnn.benchmark as gpuscope.capture recorded it (gpuscope.torch_flags); None:
    # unknown (a trace from elsewhere)
    cudnn_benchmark: bool | None = None
    pageable_excess_ns: float = 0.0
    # the pageable host-to-device copies (analysis.copies) when there were some
    pageable_copy: PageableCopies | None = None
    # the allocator's memory (analysis.memory) when the trace recorded it; a mapping of the same
    # names (a hand-built input, a stored ``memory`` document) reads alike (:func:`_memory`)
    memory: MemoryResult | Mapping[str, Any] | None = None


def _memory(inp: Inputs, name: str) -> Any:
    """One figure of the allocator's memory (``peak_reserved_bytes``, ``malloc``, ...) by its
    name in ``analyze --json``'s ``memory``; None when unknown."""
    m = inp.memory
    if m is None:
        return None
    return m.get(name) if isinstance(m, Mapping) else getattr(m, name, None)


def _malloc_calls(m: MallocStats | Mapping[str, Any] | None) -> tuple[int, float, float]:
    """The allocator's driver calls inside the steps: (calls, µs, µs per step); zeros when
    unknown. ``m``: the typed :class:`MallocStats` or ``analyze --json``'s ``memory.malloc``."""
    if m is None:
        return 0, 0.0, 0.0
    if isinstance(m, Mapping):
        return m.get("calls", 0), float(m.get("us") or 0.0), m.get("us_per_step", 0.0)
    return m.calls, float(m.us), m.us_per_step


def host_cost(ns: float, inp: Inputs) -> tuple[float, bool]:
    """A host-side cost (ns over the window) capped by what can exist without the profiler:
    ``host_cap_ns_per_step`` × steps (untraced step − GPU busy per step). (cost, capped?)"""
    if inp.host_cap_ns_per_step is None:
        return ns, False
    cap = inp.host_cap_ns_per_step * max(1, inp.n_steps)
    return (cap, True) if ns > cap else (ns, False)


def host_gain_pct(ns: float, inp: Inputs) -> float:
    """Upper bound (%) on the step-time reduction from removing a host-side cost of ``ns`` (over
    the window, already capped): its share of the traced window, or, with an untraced step time,
    its per-step value over the untraced step (the step the user actually runs)."""
    if inp.untraced_step_ns:
        return min(100.0, 100.0 * ns / max(1, inp.n_steps) / inp.untraced_step_ns)
    return _share(ns, inp.window_ns)


def _cap_note(ev: dict[str, Any], capped: bool, inp: Inputs) -> None:
    """Record the profiler cap in the evidence, and say so in the summary when it bit."""
    if inp.host_cap_ns_per_step is None:
        return
    ev["profiler_cap_us_per_step"] = inp.host_cap_ns_per_step / 1e3
    ev["capped_by_profiler"] = capped
    if capped:
        ev["summary"] += (
            f" Without the profiler the step takes {sig3((inp.untraced_step_ns or 0) / 1e6)} ms, "
            f"so at most {sig3(inp.host_cap_ns_per_step / 1e6)} ms per step of it can be real "
            "(untraced step − GPU busy per step): the bound is capped there."
        )


def significant(cost_ns: float, window_ns: int, n_steps: int) -> bool:
    """Whether a cost (ns over the window) is a finding rather than noise."""
    if window_ns <= 0 or cost_ns <= 0:
        return False
    share = 100.0 * cost_ns / window_ns
    per_step_us = cost_ns / max(1, n_steps) / 1e3
    return share >= FLOOR_PCT and (share >= MIN_SHARE_PCT or per_step_us >= MIN_PER_STEP_US)


def _share(ns: float, window_ns: int) -> float:
    return 100.0 * ns / window_ns if window_ns > 0 else 0.0


def _per_step_us(ns: float, n_steps: int) -> float:
    return ns / max(1, n_steps) / 1e3


def _cost_evidence(name: str, ns: float, inp: Inputs) -> dict[str, Any]:
    return {
        f"{name}_us_per_step": _per_step_us(ns, inp.n_steps),
        "share_pct": _share(ns, inp.window_ns),
    }


def _frame_rows(inp: Inputs, cls: str, limit: int = 5) -> list[dict[str, Any]]:
    frame = inp.idle.evidence.get(cls)
    if frame is None or frame.empty:
        return []
    rows = []
    for r in frame.head(limit).to_dict("records"):
        op = r.get("op")
        rows.append(
            {
                "name": r["name"],
                "op": op if isinstance(op, str) else None,
                "per_step": float(r["count"]) / max(1, inp.n_steps),
                "host_us_per_step": float(r["host_ns"]) / max(1, inp.n_steps) / 1e3,
            }
        )
    return rows


# -- rules -------------------------------------------------------------------------------------


def rule_dataloader(inp: Inputs) -> Recommendation | None:
    ns, capped = host_cost(inp.idle.causes_ns.get(DATA_LOADING, 0), inp)
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    spans = _frame_rows(inp, DATA_LOADING, 3)
    multi = inp.dataloader_kind == "multiprocess"
    ev: dict[str, Any] = {
        **_cost_evidence("idle", ns, inp),
        "loader": inp.dataloader_kind,
        "spans": spans,
    }
    per = ev["idle_us_per_step"]
    ev["summary"] = (
        f"The GPU waited {sig3(per / 1e3)} ms per step ({sig3(ev['share_pct'])}% of the run) while the "
        f"training loop was inside the DataLoader's __next__"
        + (" (workers could not keep up)." if multi else " (batches are made in the main process).")
    )
    _cap_note(ev, capped, inp)
    return Recommendation(
        fixes.DATALOADER_WORKERS,
        fixes.WORKERS.title if not multi else fixes.MORE_WORKERS_TITLE,
        ev,
        host_gain_pct(ns, inp),
        fixes.WORKERS.code,
    )


def rule_pin_memory(inp: Inputs) -> Recommendation | None:
    idle_ns, capped = host_cost(inp.idle.causes_ns.get(PAGEABLE_COPY, 0), inp)
    excess = max(0.0, inp.pageable_excess_ns)
    ns = idle_ns + excess
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    frame = inp.idle.evidence.get(PAGEABLE_COPY)
    pc = inp.pageable_copy
    n = int(frame["count"].sum()) if frame is not None and not frame.empty else 0
    nbytes = frame["bytes"].dropna().sum() if frame is not None and not frame.empty else 0
    if pc is not None and pc.copies:
        n, nbytes = int(pc.copies), float(pc.bytes or 0)
    ev: dict[str, Any] = {
        **_cost_evidence("cost", ns, inp),
        "idle_us_per_step": _per_step_us(idle_ns, inp.n_steps),
        "copy_excess_us_per_step": _per_step_us(excess, inp.n_steps),
        "copies_per_step": n / max(1, inp.n_steps),
        "bytes_per_step": float(nbytes) / max(1, inp.n_steps),
        "pageable_gbps": pc.pageable_gbps if pc is not None else None,
        "pinned_gbps": pc.pinned_gbps if pc is not None else None,
        "pinned_source": pc.pinned_source if pc is not None else None,
        "calls": _frame_rows(inp, PAGEABLE_COPY, 3),
    }
    rate = (
        f" at {ev['pageable_gbps']:.3g} GB/s against {ev['pinned_gbps']:.3g} GB/s pinned "
        f"({ev['pinned_source']})"
        if ev["pageable_gbps"] and ev["pinned_gbps"]
        else ""
    )
    ev["summary"] = (
        f"{ev['copies_per_step']:.1f} host-to-device copies per step "
        f"({sig3(ev['bytes_per_step'] / 1e6)} MB) come from pageable memory{rate}: they cost "
        f"{sig3(ev['cost_us_per_step'] / 1e3)} ms per step ({sig3(ev['share_pct'])}%), "
        f"{sig3(ev['copy_excess_us_per_step'] / 1e3)} ms of slower copying and "
        f"{sig3(ev['idle_us_per_step'] / 1e3)} ms of GPU idle while the host staged them."
    )
    _cap_note(ev, capped, inp)
    gain = host_gain_pct(idle_ns, inp) + (
        100.0 * excess / max(1, inp.n_steps) / inp.untraced_step_ns
        if inp.untraced_step_ns
        else _share(excess, inp.window_ns)
    )
    return Recommendation(
        "pin_memory",
        "Copy batches from pinned memory, asynchronously",
        ev,
        min(100.0, gain),
        "loader = DataLoader(dataset, ..., pin_memory=True)\n"
        "x = x.to(device, non_blocking=True)\n"
        "y = y.to(device, non_blocking=True)",
    )


def _times(n: float) -> str:
    """A count per step in words: ``once``, ``twice``, ``3 times``, ``0.5 times``."""
    if abs(n - 1.0) < 0.05:
        return "once"
    if abs(n - 2.0) < 0.05:
        return "twice"
    return f"{sig3(n)} times"


def rule_host_sync(inp: Inputs) -> Recommendation | None:
    ns, capped = host_cost(inp.idle.causes_ns.get(HOST_SYNC, 0), inp)
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    calls = _frame_rows(inp, HOST_SYNC, 5)
    ev = {**_cost_evidence("idle", ns, inp), "calls": calls}
    what = (
        ", ".join(f"{c['op'] or c['name']} ({_times(c['per_step'])} per step)" for c in calls[:3])
        or "synchronizing calls"
    )
    ev["summary"] = (
        f"The host waited for the GPU in {what}; the drained queue left the GPU idle "
        f"{sig3(ev['idle_us_per_step'] / 1e3)} ms per step ({sig3(ev['share_pct'])}%)."
    )
    _cap_note(ev, capped, inp)
    return Recommendation(
        fixes.HOST_SYNC, fixes.SYNC.title, ev, host_gain_pct(ns, inp), fixes.SYNC.code
    )


def rule_mixed_precision(inp: Inputs) -> Recommendation | None:
    if inp.fp32_gemm_us is None or inp.fp32_gemm_us <= 0:
        return None
    cc = inp.compute_capability
    if cc is None or cc[0] < 7:  # no tensor cores (or unknown GPU): no evidence they would help
        return None
    speedup = inp.tc_speedup if inp.tc_speedup and inp.tc_speedup > 1 else DEFAULT_TC_SPEEDUP
    fp32_ns = inp.fp32_gemm_us * 1e3
    gain_ns = fp32_ns * (1.0 - 1.0 / speedup)
    if not significant(gain_ns, inp.window_ns, inp.n_steps):
        return None
    bf16 = cc[0] >= 8
    ev: dict[str, Any] = {
        "fp32_gemm_us_per_step": _per_step_us(fp32_ns, inp.n_steps),
        "fp32_gemm_share_pct": _share(fp32_ns, inp.window_ns),
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
    dtype = "torch.bfloat16" if bf16 else "torch.float16"
    fix = (
        f'with torch.autocast("cuda", dtype={dtype}):\n'
        "    loss = loss_fn(model(x), y)\n"
        "loss.backward()\n"
    )
    if bf16:
        fix += (
            "# or at least TF32 for fp32 matmuls:\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
        )
        fix += "torch.backends.cudnn.allow_tf32 = True"
    else:
        fix += "# fp16 needs a GradScaler: scaler.scale(loss).backward(); scaler.step(opt)"
    return Recommendation(
        "mixed_precision",
        "Run matrix multiplies on tensor cores (bf16 autocast or TF32)",
        ev,
        _share(gain_ns, inp.window_ns),
        fix,
    )


def rule_kernel_fusion(inp: Inputs) -> Recommendation | None:
    """Launch- and host-bound steps of short kernels. Uncompiled: ``kernel_fusion``
    (torch.compile). Compiled without CUDA graphs: ``cuda_graphs`` (``mode="reduce-overhead"``).
    Compiled and replayed as graphs: ``compiled_overhead`` (a larger batch, fewer graph breaks).
    A compiled run is never told to ``torch.compile(model)``."""
    k = inp.kernels
    if k.n_kernels == 0 or k.median_us is None or k.median_us >= SHORT_KERNEL_US:
        return None
    raw = inp.idle.causes_ns.get(LAUNCH_OVERHEAD, 0) + inp.idle.causes_ns.get(CPU_OVERHEAD, 0)
    ns, capped = host_cost(raw, inp)
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        **_cost_evidence("idle", ns, inp),
        "kernels_per_step": k.n_kernels / max(1, inp.n_steps),
        "median_kernel_us": k.median_us,
        "short_kernel_share_pct": 100.0 * k.short_us / k.kernel_us if k.kernel_us else 0.0,
        "launch_overhead_us_per_step": _per_step_us(
            inp.idle.causes_ns.get(LAUNCH_OVERHEAD, 0), inp.n_steps
        ),
        "cpu_overhead_us_per_step": _per_step_us(
            inp.idle.causes_ns.get(CPU_OVERHEAD, 0), inp.n_steps
        ),
    }
    c = inp.compiled
    compiled = c is not None and c.compiled
    graphs = c is not None and c.cuda_graphs
    breaks = c is not None and c.compiled_regions_per_step > 1
    if c is not None:
        ev["compiled"] = compiled
        ev["cuda_graphs"] = graphs
        ev["compiled_regions_per_step"] = c.compiled_regions_per_step
    ev["summary"] = (
        f"{ev['kernels_per_step']:.0f} kernels per step with a median of {k.median_us:.1f} µs; "
        f"between them the GPU idled {sig3(ev['idle_us_per_step'] / 1e3)} ms per step "
        f"({sig3(ev['share_pct'])}%) on launch and host overhead"
        + (" although the model is compiled" if compiled else "")
        + (" and replayed as CUDA graphs" if graphs else "")
        + "."
    )
    if c is not None and breaks:
        ev["summary"] += (
            f" The step enters {c.compiled_regions_per_step:.3g} compiled regions: each graph "
            "break returns to Python between them."
        )
    _cap_note(ev, capped, inp)
    breaks_fix = (
        "# find the graph breaks that split the step into several compiled regions:\n"
        "#   TORCH_LOGS=graph_breaks python train.py   or   torch._dynamo.explain(model)(x)\n"
    )
    if not compiled:
        rid, title = "kernel_fusion", "Fuse small kernels and cut launch overhead (torch.compile)"
        fix = (
            "model = torch.compile(model)                     # fuses elementwise chains\n"
            "# or also replay the step as a CUDA graph:\n"
            'model = torch.compile(model, mode="reduce-overhead")'
        )
    elif not graphs:
        rid, title = "cuda_graphs", "Replay the compiled step as CUDA graphs (reduce-overhead)"
        fix = (
            'model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs: one launch\n'
            "# static shapes help: drop_last=True in the DataLoader, pad to fixed lengths\n"
            + (breaks_fix if breaks else "")
        ).rstrip("\n")
    else:
        rid = "compiled_overhead"
        title = "Amortise the remaining per-step overhead (larger batch, fewer graph breaks)"
        fix = (
            "loader = DataLoader(dataset, batch_size=2 * B, ...)   # as memory allows\n"
            + (breaks_fix if breaks else "")
            + "# the optimizer step can be compiled too: torch.compile(opt.step)"
        )
    gain = host_gain_pct(ns, inp)
    if not compiled:
        # torch.compile also fuses the short kernels themselves: the bound adds their GPU time
        # (measured on an H100: eager 12.9 ms -> reduce-overhead 3.72 ms, GPU busy 4.17 -> 3.15)
        short_ns = k.short_us * 1e3
        ev["short_kernel_us_per_step"] = _per_step_us(short_ns, inp.n_steps)
        gain = min(100.0, gain + host_gain_pct(short_ns, inp))
    return Recommendation(rid, title, ev, gain, fix)


def rule_batch_size(inp: Inputs) -> Recommendation | None:
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
    idle_ns, _ = host_cost(sum(inp.idle.causes_ns.get(c, 0) for c in AMORTISED), inp)
    if not significant(unused_ns + idle_ns, inp.window_ns, inp.n_steps):
        return None
    gain = min(100.0, host_gain_pct(idle_ns + unused_ns, inp))
    ev: dict[str, Any] = {
        "busy_pct": inp.busy_pct,
        "small_grid_kernel_share_pct": small_share,
        "small_grid_mean_sm_fill": k.small_grid_fill,
        "memory_used_frac": inp.mem_used_frac,
    }
    reserved, total = _memory(inp, "peak_reserved_bytes"), _memory(inp, "device_total_bytes")
    if reserved and total:
        free = total - reserved
        allocated = _memory(inp, "peak_allocated_bytes")
        ev["headroom_bytes"] = free
        ev["peak_allocated_bytes"] = allocated
        mem = (
            f"the allocator reserved at most {_gib(reserved)} of {_gib(total)} "
            f"({100 * reserved / total:.0f}%; peak allocated "
            f"{_gib(allocated or 0)}), leaving {_gib(free)} of headroom"
        )
    elif inp.mem_used_frac is not None:
        mem = f"peak memory use was {100 * inp.mem_used_frac:.0f}% of the GPU"
    else:
        mem = "memory use was not recorded (record with profile_memory=True, or check torch.cuda.max_memory_allocated())"
    ev["summary"] = (
        f"The GPU was busy {inp.busy_pct:.0f}% of the time and {small_share:.0f}% of kernel time "
        f"went to kernels with fewer blocks than SMs (mean fill {100 * k.small_grid_fill:.0f}%); "
        f"{mem}. A larger batch makes each step longer but each sample cheaper: the bound is on "
        "the time per sample, not the step time."
    )
    return Recommendation(
        "batch_size",
        "Use a larger batch per step (lower time per sample)",
        ev,
        gain,
        "loader = DataLoader(dataset, batch_size=4 * B, ...)   # as memory allows\n"
        "# scale the learning rate with the batch (e.g. linearly, with warm-up)",
        bound="per_sample_time",
    )


def _gib(b: float) -> str:
    return f"{b / 2**30:.3g} GiB"


NEAR_FULL_FRAC = 0.90
"""Peak reserved memory at least this share of the device: the ``memory_near_full`` finding."""


def rule_memory_near_full(inp: Inputs) -> Recommendation | None:
    """The allocator held at least :data:`NEAR_FULL_FRAC` of the GPU. Its bound is the time in
    cudaMalloc/cudaFree inside the steps (a full cache frees and re-asks the driver), 0 without."""
    total, peak = _memory(inp, "device_total_bytes"), _memory(inp, "peak_reserved_bytes")
    if not total or not peak or peak < NEAR_FULL_FRAC * total:
        return None
    calls, us, us_per_step = _malloc_calls(_memory(inp, "malloc"))
    thrash_ns = us * 1e3
    gap = _memory(inp, "reserved_minus_allocated_at_peak_bytes")
    ev: dict[str, Any] = {
        "peak_reserved_bytes": peak,
        "peak_allocated_bytes": _memory(inp, "peak_allocated_bytes"),
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
        f" At the peak it held {_gib(gap)} reserved but not allocated (fragmentation: "
        "expandable_segments lets it reuse that)."
        if gap
        else ""
    )
    ev["summary"] = (
        f"The caching allocator reserved {_gib(peak)} of the GPU's {_gib(total)} "
        f"({100 * peak / total:.0f}%): one larger activation away from out-of-memory, and no room "
        f"for a larger batch.{frag}{thrash}"
    )
    gain = min(100.0, host_gain_pct(thrash_ns, inp)) if thrash_ns else 0.0
    return Recommendation(
        "memory_near_full",
        "GPU memory is nearly full: checkpoint activations, use expandable segments, or a smaller micro-batch",
        ev,
        gain,
        "# keep fewer activations: recompute them in backward\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "x = checkpoint(block, x, use_reentrant=False)\n"
        "# let the allocator grow segments instead of fragmenting (before CUDA starts)\n"
        "os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'\n"
        "# or: a smaller micro-batch with gradient accumulation (the same global batch)",
        bound="memory",
    )


def rule_cudnn_benchmark(inp: Inputs) -> Recommendation | None:
    k = inp.kernels
    if k.conv_us <= 0 or k.cudnn_find_seen or inp.cudnn_benchmark is True:
        return None  # benchmark mode searched (in the trace, or before it: the capture says so)
    ns = k.conv_us * 1e3
    if _share(ns, inp.window_ns) < 5.0 or not significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        "conv_us_per_step": _per_step_us(ns, inp.n_steps),
        "conv_share_pct": _share(ns, inp.window_ns),
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
    return Recommendation(
        "cudnn_benchmark",
        "Let cuDNN pick the fastest convolution algorithms",
        ev,
        host_gain_pct(ns, inp),  # per step over the untraced step when one is known
        "torch.backends.cudnn.benchmark = True   # before the first step; input shapes fixed",
    )


def _comm_floor_ns(inp: Inputs) -> tuple[float, RankRow | None]:
    """Communication-only ns per step that every rank pays (the smallest across ranks: the rank
    that arrives last at a collective waits for no one), and that rank (None: this one)."""
    own = inp.comm_only_ns / max(1, inp.n_steps)
    slowest = None
    floor = own
    for p in inp.peers:
        v = p.comm_only_us_per_step
        if v is not None and v * 1e3 < floor:
            floor, slowest = v * 1e3, p
    return floor, slowest


def rule_communication(inp: Inputs) -> Recommendation | None:
    floor, _ = _comm_floor_ns(inp)
    comm_only = floor * inp.n_steps
    ns = inp.idle.causes_ns.get("communication", 0) + comm_only
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        **_cost_evidence("exposed_comm", ns, inp),
        "idle_waiting_us_per_step": _per_step_us(
            inp.idle.causes_ns.get("communication", 0), inp.n_steps
        ),
        "comm_only_us_per_step": floor / 1e3,
    }
    ev["summary"] = (
        f"Communication was exposed {sig3(ev['exposed_comm_us_per_step'] / 1e3)} ms per step "
        f"({sig3(ev['share_pct'])}%): the host waited in collectives, or the GPU ran only "
        "communication kernels (the part every rank pays)."
    )
    return Recommendation(
        "overlap_communication",
        "Overlap gradient communication with compute",
        ev,
        host_gain_pct(ns, inp),  # per step over the untraced step when one is known
        "model = DDP(model, device_ids=[local_rank], bucket_cap_mb=50,\n"
        "            gradient_as_bucket_view=True, static_graph=True)\n"
        "# with gradient accumulation, skip the all-reduce on inner micro-steps:\n"
        "with model.no_sync():\n    loss.backward()",
    )


def rule_load_imbalance(inp: Inputs) -> Recommendation | None:
    floor, slowest = _comm_floor_ns(inp)
    if slowest is None:
        return None
    wait = (inp.comm_only_ns / max(1, inp.n_steps) - floor) * inp.n_steps
    if not significant(wait, inp.window_ns, inp.n_steps):
        return None
    # Without the profiler this rank's step is the untraced one; its GPU work other than the wait
    # stays, so the wait can be at most (untraced step − GPU busy per step + wait per step).
    n = max(1, inp.n_steps)
    gain_ns, capped = wait, False
    if inp.untraced_step_ns:
        busy_per_step = inp.busy_pct / 100.0 * inp.window_ns / n
        cap = max(0.0, inp.untraced_step_ns - (busy_per_step - wait / n)) * n
        if wait > cap:
            gain_ns, capped = cap, True
    ev: dict[str, Any] = {
        "waiting_us_per_step": _per_step_us(wait, inp.n_steps),
        "share_pct": _share(wait, inp.window_ns),
        "slowest_rank": slowest.rank,
        "slowest_rank_busy_pct": slowest.gpu_busy_pct,
        "slowest_rank_step_time_ms": slowest.step_time_ms,
    }
    ev["summary"] = (
        f"This rank's GPU spent {sig3(ev['waiting_us_per_step'] / 1e3)} ms per step ({sig3(ev['share_pct'])}%) "
        f"in collectives waiting for rank {slowest.rank}, which arrives last (its GPU is busy "
        f"{slowest.gpu_busy_pct or 0:.0f}% of the time): the slowest rank sets the pace."
    )
    if capped:
        ev["capped_wait_us_per_step"] = _per_step_us(gain_ns, inp.n_steps)
        ev["summary"] += (
            f" Without the profiler the step takes {sig3((inp.untraced_step_ns or 0) / 1e6)} ms and "
            f"this rank's own GPU work stays, so at most {sig3(gain_ns / n / 1e6)} ms per step of "
            "the wait can be real: the bound is capped there (the profiler slows the slow rank's host)."
        )
    return Recommendation(
        "load_imbalance",
        f"Speed up the slowest rank ({slowest.rank}): the others wait for it",
        ev,
        host_gain_pct(gain_ns, inp),
        f"# see why rank {slowest.rank} is slow:  gpuscope analyze RUN --rank {slowest.rank}\n"
        "sampler = DistributedSampler(dataset, drop_last=True)  # equal work per rank\n"
        "# keep logging / evaluation / checkpointing off the step path of a single rank",
    )


RULES = (
    rule_dataloader,
    rule_pin_memory,
    rule_host_sync,
    rule_mixed_precision,
    rule_kernel_fusion,
    rule_batch_size,
    rule_memory_near_full,
    rule_cudnn_benchmark,
    rule_communication,
    rule_load_imbalance,
)
#: Every recommendation id a rule can give (gpuscope.vocabulary.fixes).
REC_IDS: tuple[str, ...] = fixes.FIX_IDS


def recommend(inp: Inputs) -> list[Recommendation]:
    """The recommendations whose evidence holds, largest bound first (ties: rule order)."""
    out = [r for rule in RULES if (r := rule(inp)) is not None]
    order = {rid: i for i, rid in enumerate(REC_IDS)}
    return sorted(out, key=lambda r: (-r.max_gain_pct, order.get(r.id, 99)))
