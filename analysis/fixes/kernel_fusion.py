"""Fix unit ``kernel_fusion`` (torch.compile): a launch- and host-bound step of short kernels, in
an uncompiled model; :func:`launch_bound` is the detection the compiled-model units share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import SHORT_KERNEL_US, Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.kernel_names import classify_kernel
from gpuscope.vocabulary.causes import CPU_OVERHEAD, LAUNCH_OVERHEAD

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant

WORDS = Words(
    "Fuse small kernels and cut launch overhead (torch.compile)",
    "Short kernels leave the GPU idle between launches; torch.compile fuses them and runs the "
    "step with far less Python and launch work.",
    "model = torch.compile(model)                     # fuses elementwise chains\n"
    "# or also replay the step as a CUDA graph:\n"
    'model = torch.compile(model, mode="reduce-overhead")',
)

SHORT_KERNEL_NS = 20_000
"""A kernel shorter than this (ns) is one fusion removes in the re-timing."""

BREAKS_FIX = (
    "# find the graph breaks that split the step into several compiled regions:\n"
    "#   TORCH_LOGS=graph_breaks python train.py   or   torch._dynamo.explain(model)(x)\n"
)
"""Code lines for a compiled step split by graph breaks."""


@dataclass
class LaunchBound:
    """A launch-bound step: its evidence, the idle on launch and host overhead (ns over the
    window, profiler-capped), and whether the model is compiled, replayed as CUDA graphs, split
    by graph breaks."""

    evidence: dict[str, Any]
    ns: float
    compiled: bool
    graphs: bool
    breaks: bool


def launch_bound(inp: Inputs) -> LaunchBound | None:
    """The step is bound by launches and host overhead around short kernels (None: it is not)."""
    k = inp.kernels
    if k.n_kernels == 0 or k.median_us is None or k.median_us >= SHORT_KERNEL_US:
        return None
    raw: float = inp.idle.causes_ns.get(LAUNCH_OVERHEAD, 0) + inp.idle.causes_ns.get(
        CPU_OVERHEAD, 0
    )
    total = raw
    # idle inside an optimizer step that loops over the parameters is optimizer_fused's: the
    # model's torch.compile does not compile optimizer.step()
    opt = inp.phase.optimizer if inp.phase is not None else None
    if opt is not None and opt.looped:
        raw = max(0.0, raw - opt.idle_ms_per_step * opt.n * 1e6)
    # so is the idle while backward re-runs checkpointed forward ops: activation_checkpointing's
    rc = inp.phase.recompute if inp.phase is not None else None
    if rc is not None:
        raw = max(0.0, raw - rc.region_idle_ms_per_step * max(1, inp.n_steps) * 1e6)
    # the profiler's cap bounds all host-side idle: the part left to this rule keeps its share
    ns, capped = fx.host_cost(total, inp)
    ns = ns * raw / total if total > 0 else 0.0
    if not fx.significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        **fx.cost_evidence("idle", ns, inp),
        "kernels_per_step": k.n_kernels / max(1, inp.n_steps),
        "median_kernel_us": k.median_us,
        "short_kernel_share_pct": 100.0 * k.short_us / k.kernel_us if k.kernel_us else 0.0,
        "launch_overhead_us_per_step": fx.per_step_us(
            inp.idle.causes_ns.get(LAUNCH_OVERHEAD, 0), inp.n_steps
        ),
        "cpu_overhead_us_per_step": fx.per_step_us(
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
    fx.cap_note(ev, capped, inp)
    return LaunchBound(ev, ns, compiled, graphs, breaks)


def detect(inp: Inputs) -> Finding | None:
    """An uncompiled model only (a compiled run is never told to ``torch.compile(model)``)."""
    lb = launch_bound(inp)
    if lb is None or lb.compiled:
        return None
    # torch.compile also fuses the short kernels themselves: the cost adds their GPU time
    # (measured on an H100: eager 12.9 ms -> reduce-overhead 3.72 ms, GPU busy 4.17 -> 3.15)
    short_ns = inp.kernels.short_us * 1e3
    lb.evidence["short_kernel_us_per_step"] = fx.per_step_us(short_ns, inp.n_steps)
    cost = min(100.0, fx.host_gain_pct(lb.ns, inp) + fx.host_gain_pct(short_ns, inp))
    # no proven bound: compiling shortens the host's whole Python and launch work, not only the
    # idle it leaves
    return Finding(lb.evidence, cost)


FUSABLE_CATEGORIES = frozenset({"elementwise", "reduction_norm_softmax", "copy_memset"})
"""Kernel categories (:func:`~gpuscope.analysis.kernel_names.classify_kernel`) a compiler fuses
into a neighbour of the same kind; GEMMs, convolutions, attention, RNNs, collectives and the
optimizer's kernels stay separate launches."""


def removable_kernels(g: Graph) -> tuple[frozenset[int], int]:
    """The graph's kernels that fusion removes (node indices) and the number of kernels: on each
    stream, in time order, a fusable kernel that directly follows another fusable kernel (a chain
    of n fusable kernels becomes one launch: n - 1 removed)."""
    by_stream: dict[int, list[tuple[int, int, bool]]] = {}
    fusable: dict[str, bool] = {}  # per kernel name: a rank repeats a few hundred names
    for i, n in enumerate(g.nodes):
        ev = n.event
        if n.kind == "gpu" and n.cat == "kernels" and ev is not None:
            fus = fusable.get(ev.name)
            if fus is None:
                fus = fusable[ev.name] = classify_kernel(ev.name) in FUSABLE_CATEGORIES
            by_stream.setdefault(getattr(ev, "stream", 0), []).append((n.s, i, fus))
    total = 0
    removed: set[int] = set()
    for seq in by_stream.values():
        seq.sort()
        prev = False
        for _, i, fus in seq:
            total += 1
            if fus and prev:
                removed.add(i)
            prev = fus
    return frozenset(removed), total


def retime_whole_host(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Compiling that removes the eager ops' host work wholesale (a DTensor model, whose every op
    runs Python dispatch: v27, the only timed pair, gained 58.5 %): host × 0.6 / 0.3 / 0.1;
    launch calls and short non-matmul kernels × 1 / 0.5 / 0.25."""

    def short_k(n: Node) -> bool:
        return (
            n.kind == "gpu"
            and n.cat == "kernels"
            and n.dur < SHORT_KERNEL_NS
            and not ({"gemm", "conv"} & n.tags)
        )

    def fuse(fh: float, fk: float) -> DurFn:
        def dur(v: int, n: Node) -> float:
            if fx.is_host_work(n):
                return n.dur * (fk if n.cat == "launch" else fh)
            if short_k(n):
                return n.dur * fk
            return float(n.dur)

        return dur

    return {
        "low": (fuse(0.6, 1.0), None),
        "mid": (fuse(0.3, 0.5), None),
        "high": (fuse(0.1, 0.25), None),
    }


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """ρ = the share of kernels fusion removes (:func:`removable_kernels`); host work × 1 -
    (1 - f)·ρ and launch calls × 1 - (1 - k)·ρ (the launches fusion removes take their host work
    with them), each removed kernel's GPU time × g (its memory round trip folds into its chain's
    first kernel: at best it costs nothing); f 0.6 / 0.3 / 0.1, k 1 / 0.5 / 0.25, g 1 / 0.5 / 0."""
    removed, total = removable_kernels(g)
    rho = len(removed) / total if total else 0.0

    def fuse(fh: float, fk: float, fg: float) -> DurFn:
        host = 1.0 - (1.0 - fh) * rho
        launch = 1.0 - (1.0 - fk) * rho

        def dur(v: int, n: Node) -> float:
            if fx.is_host_work(n):
                return n.dur * (launch if n.cat == "launch" else host)
            if v in removed:
                return n.dur * fg
            return float(n.dur)

        return dur

    return {
        "low": (fuse(0.6, 1.0, 1.0), None),
        "mid": (fuse(0.3, 0.5, 0.5), None),
        "high": (fuse(0.1, 0.25, 0.0), None),
    }


UNIT = FixUnit("kernel_fusion", WORDS, detect, retime, general=True)
