"""Fix unit ``kernel_fusion`` (torch.compile) in an uncompiled model: a launch- and host-bound step
of short kernels, or a GPU-bound step whose time goes to chains of memory-bound elementwise,
reduction and copy kernels (:func:`memory_bound`); :func:`launch_bound` is the detection the
compiled-model units share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis import event_classes
from gpuscope.analysis.critical_path import per_graph
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import (
    SHORT_KERNEL_US,
    Finding,
    FixUnit,
    Inputs,
    Recommendation,
    Words,
)
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.gains import ByNode, index_mask, node_mask, raw_durations
from gpuscope.analysis.kernel_names import classify_kernel
from gpuscope.analysis.phase_patterns import (
    FUSABLE_CATEGORIES,
    fusable_kernel,
    optimizer_nodes,
    rnn_host_nodes,
)
from gpuscope.vocabulary.causes import CPU_OVERHEAD, HOST_SYNC, LAUNCH_OVERHEAD

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

SHARDED_CODE = (
    "model = torch.compile(model)                     # fuses elementwise chains\n"
    '# not mode="reduce-overhead" on this sharded model: replayed as CUDA graphs, FSDP2 steps ran\n'
    "# 2.3-5x slower and DTensor steps did not finish (timed on 2 H200s)"
)
"""The code where the rank's parameters are sharded (:func:`~gpuscope.analysis.fixes.base.sharded_by`):
torch.compile alone (:data:`gpuscope.analysis.fixes.cuda_graphs.SHARDED_TIMINGS`)."""

SHORT_KERNEL_NS = 20_000
"""A kernel shorter than this (ns) is one fusion removes in the re-timing."""

BREAKS_FIX = (
    "# find the graph breaks that split the step into several compiled regions:\n"
    "#   TORCH_LOGS=graph_breaks python train.py   or   torch._dynamo.explain(model)(x)\n"
)
"""Code lines for a compiled step split by graph breaks."""

MIN_KERNELS_PER_SYNC = 20.0
"""An uncompiled step whose syncs that read a value (``.item()``, ``nonzero``:
:func:`syncs_per_step`) leave fewer kernels than this between two of them is told neither
``torch.compile`` nor CUDA graphs (:func:`sync_cut`): the host reads a value at each, so Dynamo
breaks its graph there and each compiled piece, or each replayed graph, covers the few kernels up
to it and costs its own call. Timed on one H200 (sample_traces/validation/cuda_graphs_gate.json,
compiled as ``torch.compile(model)`` compiles, fresh processes in turn): v18 (an MLP reading each
layer's norm: 8 syncs, 9.4 kernels between, compiled as one graph a layer) ran 82 % slower with
reduce-overhead and 98 % slower with ``torch.compile`` (5 rounds), gpuscope's first fix there at
58.5 %, then 17.0 %; v34 (6 syncs, 11.3 kernels, its layers each a graph) gained -2.0 and -13.5.
The nearest step timed above the line, v77 (43 kernels per sync), gained 17.2 % from CUDA graphs
(and lost 20.9 % to ``torch.compile``, compiled whole, with no graph break: not the syncs);
v02 and v59, whose only syncs are their pageable copies of the batch, 26.3 and 15.7."""

COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to"})
"""Operators whose sync is a copy's (a pageable host-to-device copy of the batch, mostly), not a
value the host reads inside the step: not counted by :func:`syncs_per_step`."""


def syncs_per_step(inp: Inputs) -> float:
    """The host-sync spans per step that read a value (``.item()``, ``nonzero``, a bare
    ``synchronize``): every synchronizing call the idle attribution found, less copies
    (:data:`COPY_OPS`)."""
    rows = fx.frame_rows(inp, HOST_SYNC, 10_000)
    return sum((r["per_step"] for r in rows if r["op"] not in COPY_OPS), 0.0)


def sync_cut(inp: Inputs, kernels_per_step: float) -> tuple[bool, float]:
    """Whether the step's value-reading syncs leave fewer than :data:`MIN_KERNELS_PER_SYNC`
    kernels between two of them, and the syncs per step (:func:`syncs_per_step`)."""
    syncs = syncs_per_step(inp)
    return bool(syncs) and kernels_per_step / syncs < MIN_KERNELS_PER_SYNC, syncs


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
    """An uncompiled model only (a compiled run is never told to ``torch.compile(model)``): a
    launch-bound step (:func:`launch_bound`) whose value-reading syncs leave
    :data:`MIN_KERNELS_PER_SYNC` kernels or more between them (:func:`sync_cut`), else
    memory-bound chains (:func:`memory_bound`)."""
    lb = launch_bound(inp)
    if lb is None:
        return memory_bound(inp)
    if lb.compiled:
        return None
    cut, syncs = sync_cut(inp, lb.evidence["kernels_per_step"])
    if cut:  # compiled pieces of a few kernels each, one call apiece (MIN_KERNELS_PER_SYNC)
        return memory_bound(inp)
    lb.evidence["syncs_per_step"] = syncs
    ch = inp.phase.chains if inp.phase is not None else None
    if ch is not None:  # what :func:`advised` weighs where the untraced step is GPU-bound
        lb.evidence["chain_math_saved_ms_per_step"] = ch.math_saved_ms_per_step
    # torch.compile also fuses the short kernels themselves: the cost adds their GPU time
    # (measured on an H100: eager 12.9 ms -> reduce-overhead 3.72 ms, GPU busy 4.17 -> 3.15)
    short_ns = inp.kernels.short_us * 1e3
    lb.evidence["short_kernel_us_per_step"] = fx.per_step_us(short_ns, inp.n_steps)
    cost = min(100.0, fx.host_gain_pct(lb.ns, inp) + fx.host_gain_pct(short_ns, inp))
    # no proven bound: compiling shortens the host's whole Python and launch work, not only the
    # idle it leaves
    return Finding(lb.evidence, cost, code=SHARDED_CODE if fx.sharded_by(inp) else None)


MEMORY_TITLE = "Fuse the memory-bound elementwise chains (torch.compile)"
MEMORY_WHY = (
    "Each eager elementwise, reduction or copy kernel reads and writes its whole tensor in GPU "
    "memory; torch.compile runs a chain of them as one kernel that reads its inputs once and "
    "writes its outputs once."
)
MEMORY_CODE = (
    "model = torch.compile(model)   # one kernel per chain: reads its inputs once, writes once\n"
    "# check the chains are gone: the profiler's kernel list shows triton_poi_/triton_red_ kernels"
)
MIN_BUSY_PCT = 80.0
"""The GPU busy share (%) from which a step is GPU-bound enough for shorter kernels to shorten
it: below, the chains' time hides behind the host and the rule stays silent (v64, the one timed
memory-bound pair: 96 %)."""
MIN_SAVED_PCT = 10.0
"""The elementwise-math chains' GPU time less their fused time
(:attr:`FusableChains.math_saved_ms_per_step`), as % of the traced window, from which the rule
speaks (its cost)."""
CHAIN_SHOWN = 8
"""Op names of the typical chain said in the summary (the rest as "…")."""


def memory_bound(inp: Inputs) -> Finding | None:
    """A GPU-bound step (busy ≥ :data:`MIN_BUSY_PCT`) of an uncompiled model whose chains of
    elementwise math kernels (:attr:`~gpuscope.analysis.phase_patterns.FusableChains.
    math_saved_ms_per_step`) would save at least :data:`MIN_SAVED_PCT` of the traced window
    fused: each eager kernel reads and writes its whole
    tensor in GPU memory, a fused chain once. No proven bound (the re-timing's model is the
    estimate, :func:`retime_chains`)."""
    c = inp.compiled
    if c is not None and (c.compiled or c.triton_kernels_per_step > 0):
        return None
    ch = inp.phase.chains if inp.phase is not None else None
    if ch is None or inp.busy_pct < MIN_BUSY_PCT:
        return None
    n = max(1, inp.n_steps)
    # the trigger: chains of elementwise math alone (pointwise math run op by op, which only a
    # compiler fuses); the gradient bookkeeping's fills, adds, copies and sums of an eager
    # backward are everywhere and do not make a step memory-bound
    saved_ns = ch.math_saved_ms_per_step * 1e6 * n
    if not fx.significant(saved_ns, inp.window_ns, inp.n_steps):
        return None
    # the saved GPU time's share of the traced window it lies in (not of the untraced step: the
    # window may hold several untraced steps where the trace marks none, and the kernels' time
    # is traced time too)
    cost = fx.share(saved_ns, inp.window_ns)
    if cost < MIN_SAVED_PCT:
        return None
    k = inp.kernels
    gpu_share = 100.0 * ch.kernel_ms_per_step * n * 1e3 / k.kernel_us if k.kernel_us else 0.0
    ev = fx.evidence_json(
        ch,
        memory_bound_chains=True,
        chain_share_of_gpu_pct=gpu_share,
        kernels_per_step=k.n_kernels / n,
        median_kernel_us=k.median_us,
        gpu_busy_pct=inp.busy_pct,
        share_pct=fx.share(saved_ns, inp.window_ns),
    )
    shown = " → ".join(ch.typical[:CHAIN_SHOWN]) + (" → …" if len(ch.typical) > CHAIN_SHOWN else "")
    ev["summary"] = (
        f"The GPU is busy {sig3(inp.busy_pct)}% of the step, and {sig3(gpu_share)}% of its kernel "
        f"time is {sig3(ch.kernels_per_step)} elementwise, reduction and copy kernels per step in "
        f"{sig3(ch.chains_per_step)} chains launched back to back ({sig3(ch.kernel_ms_per_step)} "
        f"ms per step), each reading and writing its whole tensor in GPU memory; typical chain "
        f"({len(ch.typical)} kernels, {sig3(ch.typical_per_step)}× per step): {shown}. Fused, "
        f"each chain costs about its longest kernel: {sig3(ch.fused_ms_per_step)} ms per step, "
        f"{sig3(ch.saved_ms_per_step)} ms less ({sig3(ch.math_saved_ms_per_step)} ms of it in "
        "chains of elementwise math alone)."
    )
    return Finding(ev, cost, title=MEMORY_TITLE, code=MEMORY_CODE, why=MEMORY_WHY)


def fusable_chains(g: Graph) -> tuple[list[list[int]], int]:
    """The graph's chains of fusable kernels (:func:`~gpuscope.analysis.phase_patterns.
    fusable_kernel`, none launched by the optimizer's step): on each stream, in time order, runs
    of two or more; and the number of the graph's kernels."""
    _, opt = optimizer_nodes(g)
    by_stream: dict[int, list[tuple[int, int, bool]]] = {}
    fus_of: dict[str, bool] = {}
    total = 0
    for i, n in enumerate(g.nodes):
        ev = n.event
        if n.kind == "gpu" and n.cat == "kernels" and ev is not None:
            total += 1
            f = fus_of.get(ev.name)
            if f is None:
                f = fus_of[ev.name] = fusable_kernel(ev.name)
            by_stream.setdefault(getattr(ev, "stream", 0), []).append((n.s, i, f and i not in opt))
    chains: list[list[int]] = []
    for seq in by_stream.values():
        seq.sort()
        cur: list[int] = []
        for _, i, f in [*seq, (0, -1, False)]:
            if f:
                cur.append(i)
                continue
            if len(cur) >= 2:
                chains.append(cur)
            cur = []
    return chains, total


CHAIN_LEFT = (0.5, 0.25, 0.0)
"""How much of a chain's GPU time beyond its longest kernel stays once fused, ``low`` / ``mid`` /
``high``: a compiler splits some chains (at a reduction's output, a layout change, a value the
backward saves), so half of it in the weakest variant; none in the strongest."""


def retime_chains(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Each chain (:func:`fusable_chains`) fused: its kernels scaled together to its longest
    kernel + f × (the rest), f = :data:`CHAIN_LEFT`; host work and launch calls as in
    :func:`retime`, ρ = the chains' kernels but one each over all kernels (the launches fusion
    removes)."""
    chains, total = fusable_chains(g)
    removed = sum(len(c) - 1 for c in chains)
    rho = removed / total if total else 0.0
    out: dict[str, Variant] = {}
    for name, f, fh, fk in zip(
        ("low", "mid", "high"), CHAIN_LEFT, (0.6, 0.3, 0.1), (1.0, 0.5, 0.25), strict=True
    ):
        scale: dict[int, float] = {}
        for c in chains:
            d = [g.nodes[i].dur for i in c]
            s, m = sum(d), max(d)
            if s > 0:
                r = (m + f * (s - m)) / s
                scale.update((i, r) for i in c)
        host = 1.0 - (1.0 - fh) * rho
        launch = 1.0 - (1.0 - fk) * rho

        def dur(
            v: int, n: Node, scale: dict[int, float] = scale, h: float = host, la: float = launch
        ) -> float:
            if fx.is_host_work(n):
                return n.dur * (la if n.cat == "launch" else h)
            return n.dur * scale.get(v, 1.0)

        def whole(
            g: Graph,
            durs: np.ndarray | None,
            picked: dict[Any, Any],
            scale: dict[int, float] = scale,
            h: float = host,
            la: float = launch,
        ) -> np.ndarray:
            d = raw_durations(g, None, durs, picked)
            f = np.ones(len(g.nodes))
            if scale:
                f[np.fromiter(scale, dtype=np.int64, count=len(scale))] = list(scale.values())
            return np.where(fx.host_work_mask(g, durs), d * np.where(_launch(g), la, h), d * f)

        out[name] = (ByNode(dur, whole), None)
    return out


def _plain_kernels(g: Graph) -> np.ndarray:
    """Which nodes are GPU kernels that are neither a matmul nor a convolution (their ``gemm`` /
    ``conv`` tags), as a boolean array."""
    return node_mask(
        g,
        "plain_kernels",
        lambda n: n.kind == "gpu" and n.cat == "kernels" and not ({"gemm", "conv"} & n.tags),
    )


def _launch(g: Graph) -> np.ndarray:
    """Which nodes are launch calls (category ``launch``), as a boolean array."""
    return node_mask(g, "cat:launch", lambda n: n.cat == "launch")


def gpu_busy_pct(rec: Recommendation, ctx: Context) -> float | None:
    """The GPU's busy share (%) of the untraced step from a launch-bound finding's profiler cap
    (untraced step − GPU busy per step); None without an untraced step or the cap."""
    cap_us = rec.evidence.get("profiler_cap_us_per_step")
    un = ctx.untraced_step_ms
    if cap_us is None or not un:
        return None
    return 100.0 * max(0.0, 1.0 - float(cap_us) / 1e3 / un)


def advised(rec: Recommendation, g: Graph, ctx: Context) -> dict[str, Variant]:
    """Memory-bound chains (the finding's ``memory_bound_chains``): :func:`retime_chains`; a
    launch-bound step: :func:`retime`. Where the GPU works at least :data:`MIN_BUSY_PCT` of the
    untraced step (:func:`gpu_busy_pct`: the host looks long only under the profiler), the step
    is GPU-bound and fusion shortens it only through its memory-bound chains: their elementwise
    math saving (``chain_math_saved_ms_per_step``, :func:`memory_bound`'s trigger) at
    :data:`MIN_SAVED_PCT` of the untraced step or more: :func:`retime_chains` (v197, a
    Gemma 2-style decoder of hand-written norms, soft-caps and rotary: traced 38.8 % busy, the
    untraced step 85.6 %; compiled it gained 69.1 %, where keeping the GPU's time said 11.5 %,
    0.5-22.9); less: the kernels' GPU time kept, only the host and launch work goes."""
    out = _advised(rec, g, ctx)
    if rec.evidence.get("compiled"):  # its compiled calls' host time is in its trace already
        return out
    return fx.with_host_cost(out, g, ctx, COMPILED_CALL_HOST_MS)


COMPILED_CALL_HOST_MS = 1.0
"""Host time (ms of the untraced step) a step of an eager model compiled in the default mode
spends per step on the compiled calls themselves, which no eager op of the planted trace shows:
Dynamo's guards, AOTAutograd's wrappers around the forward and backward graphs, Inductor's
launcher. Added at the low and mid levels (:func:`advised`), as ``cuda_graphs.REPLAY_HOST_MS``
is to the replay. On the smallest compiled steps timed it is what the re-timing left
unexplained: v23k 0.63 ms a step (a 1.8 ms LeNet step, 19.8 % slower compiled), v77k 1.52
(20.9 % slower), v137c 2.21."""


def _advised(rec: Recommendation, g: Graph, ctx: Context) -> dict[str, Variant]:
    if rec.evidence.get("memory_bound_chains"):
        return retime_chains(g, ctx)
    busy = gpu_busy_pct(rec, ctx)
    if busy is None or busy < MIN_BUSY_PCT:
        return retime(g, ctx)
    saved = float(rec.evidence.get("chain_math_saved_ms_per_step") or 0.0)
    un = ctx.untraced_step_ms
    if un and 100.0 * saved / un >= MIN_SAVED_PCT:
        return retime_chains(g, ctx)
    return retime(g, ctx, keep_gpu=True)


TRAINING_BATCH_NORM_RE = re.compile(
    r"bn_fw_tr|bn_bw|batch_norm_(?:collect|backward|transform_input|reduce)|BatchNorm(?:Fwd)?Train|"
    r"BatchNormBwd",
    re.IGNORECASE,
)
"""A BatchNorm kernel of a training step (cuDNN's ``bn_fw_tr_*`` / ``bn_bw_*``, PyTorch's own
``batch_norm_collect_statistics`` / ``batch_norm_backward_*``, MIOpen's): not fusable. Eager
already runs it as one or two kernels, and Inductor splits a training BatchNorm into a reduction
and a pointwise kernel, so it neither joins nor breaks into a chain; the pointwise kernel after
it starts one. torch.compile of the planted variant, timed without the profiler on conv nets whose
norms are BatchNorms: v06 (MobileNet) -18.1 %, v107 (FaceNet) -2.5 %, v118 (HRNet) -3.7 %, v122
(RetinaNet) 5.8 % (`compile`, `first_fixes` in sample_traces/validation/truth.json), where the
rule had counted each BatchNorm as a link of an elementwise chain. An inference BatchNorm
(``bn_fw_inf``) is elementwise and stays fusable."""


CHANNELS_LAST_BATCH_NORM_RE = re.compile(event_classes.CHANNELS_LAST_BATCH_NORM_RE)
"""PyTorch's own training BatchNorm kernels for channels-last tensors
(``batch_norm_collect_statistics_channels_last_kernel``, ``batch_norm_transform_input_...``,
``batch_norm_backward_reduce_...``, ``batch_norm_backward_elemt_...``): eager runs a channels-last
BatchNorm as these, not as cuDNN's. ``torch.compile(model, mode="reduce-overhead")`` replaces them
with Inductor's reductions fused into their neighbours: on the four channels-last conv nets timed
with it (H200, ``cuda_graphs_gate.json``) it gained 30.8-35.8 %, where these kernels were 30-46 %
of the GPU's work and the step GPU-bound (v146 31.8, v156 31.1, v157 35.8, v179 30.8), each twice
the estimate that kept their time or more. ``torch.compile`` alone gained -14.2 % (v146), -8.9 %
(v156) and 33.0 % (v157): its Triton launches come back to the host, so only the replayed step is
re-timed with them (``cuda_graphs.advised``)."""


CUDNN_LAYOUT_RE = re.compile(event_classes.CUDNN_LAYOUT_RE, re.IGNORECASE)
"""cuDNN's layout transforms (``cudnn::engines_precompiled::nchwToNhwcKernel``), launched inside
the convolution's own library call, which a compiled model makes as the eager one does. A
launch-bound step keeps them, their launches and their GPU time in the re-timing
(:func:`removable_kernels`): they were a third of the kernels it removed on v137 (CenterNet,
NCHW bf16: 124 a step) and half of v122's (RetinaNet), and torch.compile of the two, timed,
gained -3.0 % and 5.8 % where it had said 25.8 % and 31.8 %. The memory-bound chains of a
GPU-bound step (:func:`memory_bound`) count their GPU time as fusable: Inductor's layout
optimization runs the convolutions channels-last, and v64 (BigVGAN, 1-D convolutions) gained
60.3 % compiled with them in its chains."""


def removable_kernels(g: Graph) -> tuple[frozenset[int], int]:
    """The graph's kernels that fusion removes (node indices) and the number of kernels: on each
    stream, in time order, a fusable kernel that directly follows another fusable kernel (a chain
    of n fusable kernels becomes one launch: n - 1 removed). A training BatchNorm kernel
    (:data:`TRAINING_BATCH_NORM_RE`) and cuDNN's layout transforms (:data:`CUDNN_LAYOUT_RE`) are
    not fusable. Found once per graph (:func:`~gpuscope.analysis.critical_path.per_graph`)."""
    return per_graph(g, "removable_kernels", lambda: _removable_kernels(g))


def _removable_kernels(g: Graph) -> tuple[frozenset[int], int]:
    by_stream: dict[int, list[tuple[int, int, bool]]] = {}
    fusable: dict[str, bool] = {}  # per kernel name: a rank repeats a few hundred names
    for i, n in enumerate(g.nodes):
        ev = n.event
        if n.kind == "gpu" and n.cat == "kernels" and ev is not None:
            fus = fusable.get(ev.name)
            if fus is None:
                fus = fusable[ev.name] = (
                    classify_kernel(ev.name) in FUSABLE_CATEGORIES
                    and not TRAINING_BATCH_NORM_RE.search(ev.name)
                    and not CUDNN_LAYOUT_RE.search(ev.name)
                )
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


def channels_last_batch_norms(g: Graph) -> frozenset[int]:
    """The graph's kernels that are PyTorch's channels-last training BatchNorm
    (:data:`CHANNELS_LAST_BATCH_NORM_RE`), node indices."""
    hit: dict[str, bool] = {}
    out: set[int] = set()
    for i, n in enumerate(g.nodes):
        ev = n.event
        if n.kind == "gpu" and n.cat == "kernels" and ev is not None:
            h = hit.get(ev.name)
            if h is None:
                h = hit[ev.name] = CHANNELS_LAST_BATCH_NORM_RE.search(ev.name) is not None
            if h:
                out.add(i)
    return frozenset(out)


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

        def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
            d = raw_durations(g, None, durs, picked)
            short = _plain_kernels(g) & (d < SHORT_KERNEL_NS)
            out = np.where(short, d * fk, d)
            return np.where(fx.host_work_mask(g, durs), d * np.where(_launch(g), fk, fh), out)

        return ByNode(dur, whole)

    return {
        "low": (fuse(0.6, 1.0), None),
        "mid": (fuse(0.3, 0.5), None),
        "high": (fuse(0.1, 0.25), None),
    }


def retime(g: Graph, ctx: Context, keep_gpu: bool = False) -> dict[str, Variant]:
    """ρ = the share of kernels fusion removes (:func:`removable_kernels`); host work × 1 -
    (1 - f)·ρ and launch calls × 1 - (1 - k)·ρ (the launches fusion removes take their host work
    with them), each removed kernel's GPU time × g (its memory round trip folds into its chain's
    first kernel: at best it costs nothing); f 0.6 / 0.3 / 0.1, k 1 / 0.5 / 0.25, g 1 / 0.5 / 0.
    The host work inside an RNN layer's ops stays (:func:`~gpuscope.analysis.phase_patterns.
    rnn_host_nodes`: compiling leaves the layer eager). ``keep_gpu``: g = 1 at every level (the
    removed kernels' GPU time stays; :func:`advised`). A step that runs RNN layers keeps its
    time at the low and mid levels: ``torch.compile(model)`` of such a model was timed twice and
    gained nothing (v12, an LSTM LM: -0.5 %; v110, a GRU encoder with a GRUCell decoder loop:
    1.0 %, and its compiled step's trace holds no compiled region and no Triton kernel: Dynamo
    left the whole forward eager); the high level is what compiling the modules around the
    layers could reach."""
    removed, total = removable_kernels(g)
    rho = len(removed) / total if total else 0.0
    rnn = rnn_host_nodes(g)
    if rnn:

        def kept(v: int, n: Node) -> float:
            return float(n.dur)

        high = _fused(removed, rho, rnn, keep_gpu)["high"]
        return {"low": (kept, None), "mid": (kept, None), "high": high}
    return _fused(removed, rho, rnn, keep_gpu)


def _fused(
    removed: frozenset[int], rho: float, rnn: set[int], keep_gpu: bool
) -> dict[str, Variant]:
    """:func:`retime`'s three levels: the kernels ``removed`` and removable share ``rho``, the
    RNN layers' host nodes ``rnn`` kept as recorded."""

    def fuse(fh: float, fk: float, fg: float) -> DurFn:
        host = 1.0 - (1.0 - fh) * rho
        launch = 1.0 - (1.0 - fk) * rho

        def dur(v: int, n: Node) -> float:
            if v in rnn:
                return float(n.dur)
            if fx.is_host_work(n):
                return n.dur * (launch if n.cat == "launch" else host)
            if v in removed:
                return n.dur * fg
            return float(n.dur)

        def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
            d = raw_durations(g, None, durs, picked)
            out = np.where(index_mask(g, removed), d * fg, d)
            out = np.where(fx.host_work_mask(g, durs), d * np.where(_launch(g), launch, host), out)
            return np.where(index_mask(g, rnn), d, out) if rnn else out

        return ByNode(dur, whole)

    return {
        "low": (fuse(0.6, 1.0, 1.0), None),
        "mid": (fuse(0.3, 0.5, 1.0 if keep_gpu else 0.5), None),
        "high": (fuse(0.1, 0.25, 1.0 if keep_gpu else 0.0), None),
    }


UNIT = FixUnit(
    "kernel_fusion", WORDS, detect, retime, general=True, advised=advised, host_ceiling=True
)
