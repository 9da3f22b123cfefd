"""Fix unit ``cuda_graphs``: a step bound by launches replayed as CUDA graphs: a compiled step not
replayed yet, or an eager step whose kernels wait for their launches, short of the GPU's traced
work filling the step (:data:`EAGER_MAX_BUSY_PCT`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.critical_path import per_graph
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fixes.kernel_fusion import (
    BREAKS_FIX,
    channels_last_batch_norms,
    launch_bound,
    removable_kernels,
    sync_cut,
)
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.gains import ByNode, index_mask, raw_durations
from gpuscope.analysis.phase_patterns import rnn_host_nodes

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant
    from gpuscope.analysis.recommendation import Recommendation

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


EAGER_MAX_BUSY_PCT = 101.0
"""An uncompiled launch-bound step whose GPU is busy under this share (%) of the untraced step
(unknown: the rule abstains) gets this fix beside ``kernel_fusion``: its kernels wait for their
launches, and a CUDA graph takes the launches off the step where fusing only takes some. Timed on
one H200 (sample_traces/validation/cuda_graphs_gate.json: each planted variant eager against
``mode="reduce-overhead"``, fresh processes, in turn, 1-5 rounds) on 32 eager steps busy 10-100 %:
busy 34-66 %: v05 62.7, v46 83.3, v22 57.2, v35 72.5, v150 52.9, v122 33.5, v137 40.7, each more
than ``model.compile()``; busy 68-100 %: v118 41.5, v77 17.2, v82 42.6, v178 32.5, v80 38.5, v94
9.5, v98 29.9, v146 31.8, v179 30.8, v13 25.6; busy 10-85 % with 48-139 kernels a step: v68
63.1, v06 38.6, v36 38.1, v47 29.4, v02 26.3, v59 15.7, v23 9.8; busy 21-36 %: v145 78.2, v163
77.9; steps of 2.6-13 ms untraced: v75 63.9 (busy 37.6 %), v30 72.3 (47.6), v29 65.8 (82.6), v07
36.4 (92.5, estimated at 0.0: the traced share overstates its GPU's work). The recurrent v60, v12
and v03, where Dynamo made no graph, -15.9, -9.2 and -0.6 (:func:`_host_scaled`'s RNN rule
estimates them at 0). The two that lost (v18 -82.0, v34 -2.0) are the steps whose syncs cut
them into runs of 9-11 kernels
(:data:`~gpuscope.analysis.fixes.kernel_fusion.MIN_KERNELS_PER_SYNC`); the busy share separates
nothing, and the rule does not try. The line sits just above the highest share timed (v179,
100.3 %): past it the GPU's work, as traced, fills the step the user runs."""

SHARDED_TIMINGS = "sample_traces/validation/sharded_graphs"
"""Where the timings behind the rule's silence on sharded steps are (:func:`detect`): on two
H200s, each 2-GPU step eager against ``model.compile(mode="reduce-overhead")`` (this unit's code),
fresh ``torchrun`` jobs in turn, 3 rounds (record_sharded_graphs.py). Under FSDP2 (its default
prefetching) the replayed graphs ran every step slower, in every round: v191 (a Qwen-style
decoder, its GPU 99 and 118 % busy as traced) 42.8 -> 98.1 ms, v185 (a BEiT-style ViT) 66.2 ->
187 ms, v186 (a BART-style encoder-decoder) 73.1 -> 364 ms, v170 (a Falcon-style decoder, 2
rounds) 73.7 -> 264 ms. Under DTensor tensor parallelism
(v171, v190, eager 45-107 ms, the rank this unit told 3-5 % busy) none of the four compiled runs
ended within 150 s (v171) or 260 s (v190), compilation, 30 warm-up and 40 timed steps; the same
models compiled in the default mode had run (their fixed variants)."""

HALF_BUSY_PCT = 50.0
"""Under this GPU busy share (%) the eager summary says each kernel ends before the next launch;
over it, that the kernels still wait for their launches: the traced share overstates the GPU's
work in the step the user runs (v146, 97.7 % busy as traced, gained 31.8 % from CUDA graphs)."""

EAGER_TITLE = "Capture the step as a CUDA graph: its launches are the step"
EAGER_CODE = (
    'model = torch.compile(model, mode="reduce-overhead")   # fuses, then replays CUDA graphs\n'
    "# or capture the eager step by hand (static shapes, no host syncs inside it,\n"
    "# Adam/AdamW(capturable=True) when the optimizer step is captured too):\n"
    "#   g = torch.cuda.CUDAGraph()\n"
    "#   with torch.cuda.graph(g): loss = train_step(static_x, static_y)\n"
    "#   each step: static_x.copy_(x); static_y.copy_(y); g.replay()"
)

CHECKPOINTED_NOTE = (
    "\n# checkpointed blocks: compile the model whole; a block compiled on its own is re-run by"
    "\n# the backward's recompute, which overwrites its graph's outputs before they are read"
    "\n# (PyTorch: 'accessing tensor output of CUDAGraphs that has been overwritten')"
)
"""The eager code's note where the backward recomputes checkpointed blocks: v20 (its encoder
layers an ``nn.ModuleList``, compiled layer by layer with reduce-overhead, each checkpointed)
raised that error at its first steps, twice (cuda_graphs_gate.json, call 14, not stored); the
checkpointed steps compiled whole ran (v08-v86)."""


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
    :data:`EAGER_MAX_BUSY_PCT` of the untraced step and whose syncs leave
    :data:`~gpuscope.analysis.fixes.kernel_fusion.MIN_KERNELS_PER_SYNC` kernels or more between
    them (:func:`~gpuscope.analysis.fixes.kernel_fusion.sync_cut`). Never where the rank's
    parameters are sharded (:func:`~gpuscope.analysis.fixes.base.sharded_by`: FSDP's all-gathers,
    DTensor's dispatch): there the replayed graphs were timed slower, or did not finish
    (:data:`SHARDED_TIMINGS`). A step that is not launch-bound: :func:`norms_bound`."""
    lb = launch_bound(inp)
    if lb is None and fx.sharded_by(inp) is None:
        return norms_bound(inp)
    if lb is None or lb.graphs or fx.sharded_by(inp) is not None:
        return None
    # no proven bound: the graph replay shortens the host's whole launch work, not only the idle
    if lb.compiled:
        code = (CODE + "\n" + BREAKS_FIX).rstrip("\n") if lb.breaks else None
        return Finding(lb.evidence, fx.host_gain_pct(lb.ns, inp), code=code)
    busy = gpu_busy_of_step_pct(inp)
    if busy is None or busy >= EAGER_MAX_BUSY_PCT:
        return None
    cut, syncs = sync_cut(inp, lb.evidence["kernels_per_step"])
    if cut:
        return None
    ev = {**lb.evidence, "gpu_busy_of_step_pct": busy, "syncs_per_step": syncs}
    if busy < HALF_BUSY_PCT:
        ev["summary"] += (
            f" The GPU works {sig3(busy)}% of the step: each kernel ends before the host can "
            "launch the next, so fused kernels would still wait for their launches; a CUDA graph "
            "launches the whole step at once."
        )
    else:
        ev["summary"] += (
            f" The GPU works {sig3(busy)}% of the step as traced, and its kernels still wait for "
            "their launches between them; a CUDA graph launches the whole step at once."
        )
    why = (
        "The kernels are shorter than their launches: the GPU idles between them whatever their "
        "number, and fusing some leaves the rest bound by the host. A CUDA graph replays the "
        "whole step with one launch."
    )
    recompute = inp.phase is not None and inp.phase.recompute is not None
    code = EAGER_CODE + CHECKPOINTED_NOTE if recompute else EAGER_CODE
    return Finding(ev, fx.host_gain_pct(lb.ns, inp), title=EAGER_TITLE, code=code, why=why)


NORMS_MIN_PCT = 25.0
"""An uncompiled step that is not launch-bound is told CUDA graphs (``mode="reduce-overhead"``)
where PyTorch's channels-last training BatchNorm kernels take this share (%) of its kernel time or
more (:func:`norms_bound`). Reduce-overhead replaces them with Inductor's reductions fused into
their neighbours and replays the step, so the host's launches of the fused kernels stay off it.
Timed on one H200 against eager (``cuda_graphs_gate.json``), on five such conv nets where these
kernels were 30-46 % of the GPU's work: v146 31.8 %, v156 31.1, v157 35.8, v179 30.8, told through
their launch-bound idle, and v24 26.1 (GPU-bound, 39 % of its kernel time in these kernels, told
nothing before: its first fix was cuDNN's benchmark at 3.0 %; now 24.0 %, 15.7-38.5). Judged on
a case it was not set on, timed after the rule was written: v208 (a DnCNN-style denoiser, bf16,
channels-last; its planted larger batch gained 4.0 %), told 26.9 % (17.6-42.7), measured 29.0. ``torch.compile`` alone was erratic
on them (v146 −14.2 %, v156 −8.9, v157 33.0: its launches come back to the host); compiled,
their non-matrix kernel time fell to 0.44-0.53 of eager's (validation README, "What torch.compile
left of five channels-last BatchNorm nets")."""

NORMS_TITLE = "Compile and replay the step: fused BatchNorms, no launches"


def norms_bound(inp: Inputs) -> Finding | None:
    """An uncompiled step, not replayed as CUDA graphs, whose kernel time is
    :data:`NORMS_MIN_PCT` % or more PyTorch's channels-last training BatchNorm kernels
    (``KernelStats.channels_last_bn_us``); evidence ``channels_last_bn_pct`` and
    ``channels_last_bn_ms_per_step``. Its estimate is the re-timing's (:func:`advised`: those
    kernels × 1 / 0.5 / 0.25); this point is the mid level's saving over the untraced step."""
    k = inp.kernels
    c = inp.compiled
    if c is not None and (c.compiled or c.cuda_graphs):
        return None
    if k.kernel_us <= 0 or not inp.untraced_step_ns:
        return None
    share = 100.0 * k.channels_last_bn_us / k.kernel_us
    if share < NORMS_MIN_PCT:
        return None
    ms = k.channels_last_bn_us / 1e3 / max(1, inp.n_steps)
    ev: dict[str, Any] = {
        "channels_last_bn_pct": share,
        "channels_last_bn_ms_per_step": ms,
        "compiled": False,
        "summary": (
            f"PyTorch's channels-last training BatchNorm kernels take {sig3(share)}% of the "
            f"GPU's kernel time ({sig3(ms)} ms per step): eager runs each BatchNorm as separate "
            "statistics, normalisation and backward kernels over the whole activation."
        ),
    }
    why = (
        "torch.compile replaces these BatchNorm kernels with reductions fused into the "
        "convolutions' neighbours; replaying the compiled step as CUDA graphs keeps the host's "
        "launches of the new kernels off the step, where torch.compile alone can lose them."
    )
    gain = min(100.0, 100.0 * (1.0 - NORM_KEPT[0]) * ms * 1e6 / inp.untraced_step_ns)
    return Finding(ev, gain, title=NORMS_TITLE, code=EAGER_CODE, why=why)


def in_compiled_calls(g: Graph) -> Callable[[Node], bool]:
    """The host work a CUDA-graph replay of a compiled model takes over: :func:`fx.is_host_work`
    inside calls into torch.compile's graphs (the ``compiled_call`` tag, set where the host stack
    holds a ``Torch-Compiled Region`` or ``CompiledFunction[Backward]`` span: critical path,
    ``event_classes.COMPILED_CALL_RE``). The Python around those calls (the loop, the loss, an
    eager optimizer, the step's time that no operator covers) stays: ``mode="reduce-overhead"``
    replays the compiled graphs only. A trace without such spans: all host work."""
    if not any(n.kind == "host" and "compiled_call" in n.tags for n in g.nodes):
        return fx.is_host_work
    return fx.HostWorkIn("compiled_call")


def _host_scaled(
    g: Graph,
    low: float,
    mid: float,
    high: float,
    fused: bool = False,
    host: Callable[[Node], bool] = fx.is_host_work,
) -> dict[str, Variant]:
    """Host and launches × ``low`` / ``mid`` / ``high``, outside the DataLoader and the optimizer;
    a step that runs recurrent layers (:func:`~gpuscope.analysis.phase_patterns.rnn_host_nodes`)
    keeps its time at the low and mid levels, and at the high one replays only the host work
    outside those layers' ops. Dynamo leaves ``nn.GRU`` / ``nn.LSTM`` eager and breaks the graph
    around them, so the step is replayed as several graphs with the layer's launches between
    them: ``model.compile(mode="reduce-overhead")`` of v125's planted variant (a GRU4Rec step,
    gpuscope's first fix there at 73.4 %) was timed 32.4 % slower (6 rounds, -55.1 to 1.6;
    sample_traces/validation/truth.json, ``first_fixes``). ``fused``: at the high level the
    kernels fusion removes (:func:`~gpuscope.analysis.fixes.kernel_fusion.removable_kernels`) take
    no GPU time either and the rest :data:`INDUCTOR_KERNEL_KEPT` of theirs (:func:`advised`).
    ``host``: the host work replayed (default: all of it)."""
    rnn = rnn_host_nodes(g)
    if not rnn:
        out = fx.scaled_variants(host, low, mid, high)
        if fused:
            removed, _ = removable_kernels(g)
            norms = channels_last_batch_norms(g)
            out["mid"] = (_fused(removed, mid, host, FUSED_MID_KEPT, norms, NORM_KEPT[0]), None)
            top = _fused(removed, high, host, 0.0, norms, NORM_KEPT[1])
            out["high"] = (InductorKernels(top, INDUCTOR_KERNEL_KEPT), None)
        return out

    def kept(v: int, n: Node) -> float:
        return float(n.dur)

    def around(f: float) -> DurFn:
        def dur(v: int, n: Node) -> float:
            return n.dur * f if v not in rnn and host(n) else float(n.dur)

        def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
            d = raw_durations(g, None, durs, picked)
            return np.where(~index_mask(g, rnn) & fx.host_mask(g, host, durs), d * f, d)

        return ByNode(dur, whole)

    return {"low": (kept, None), "mid": (kept, None), "high": (around(high), None)}


FUSED_MID_KEPT = 0.5
"""At the mid level of an uncompiled step, the share of their GPU time the kernels fusion removes
(:func:`~gpuscope.analysis.fixes.kernel_fusion.removable_kernels`) keep under reduce-overhead
(:func:`advised`)."""


NORM_KEPT = (0.5, 0.25)
"""At the mid and top levels of an uncompiled step, the share of their GPU time PyTorch's
channels-last training BatchNorm kernels keep under reduce-overhead
(:func:`~gpuscope.analysis.fixes.kernel_fusion.channels_last_batch_norms`; the low level keeps it
all). Set on four timed conv nets (:data:`~gpuscope.analysis.fixes.kernel_fusion.
CHANNELS_LAST_BATCH_NORM_RE`): on v157, 17.2 ms a step of them in 37.6 of GPU work, the replayed
step was 24.7 ms against 38.6 eager, about the top."""


def _fused(
    removed: frozenset[int],
    f: float,
    host: Callable[[Node], bool],
    kept: float,
    norms: frozenset[int] = frozenset(),
    norm_kept: float = 1.0,
) -> DurFn:
    """Host and launches (``host``) × ``f``; the kernels ``removed`` × ``kept``; the channels-last
    BatchNorm kernels ``norms`` × ``norm_kept``."""

    def dur(v: int, n: Node) -> float:
        if v in removed:
            return n.dur * kept
        if v in norms:
            return n.dur * norm_kept
        return n.dur * f if host(n) else float(n.dur)

    def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
        d = raw_durations(g, None, durs, picked)
        out = np.where(fx.host_mask(g, host, durs), d * f, d)
        out = np.where(index_mask(g, norms), d * norm_kept, out)
        return np.where(index_mask(g, removed), d * kept, out)

    return ByNode(dur, whole)


INDUCTOR_KERNEL_KEPT = 0.8
"""At the top level of a step not compiled yet (:func:`advised`'s fused branch), the share of its
traced time each kernel left after fusion takes once ``mode="reduce-overhead"`` has compiled the
step: Inductor's kernels read and write each tensor fewer times than the eager ones, beyond the
chains :func:`~gpuscope.analysis.fixes.kernel_fusion.removable_kernels` removes (the autocast
casts, GroupNorm's and LayerNorm's passes fused with their activations). Measured: the graphs'
traced kernels took 0.72 of the eager step's on v29 and 0.58 on v86 (``compiled_steps/``), the
chains' kernels included. Fitted, on seen pairs: with the kernels left kept whole at the top, 8
of the 79 timings of ``model.compile(mode="reduce-overhead")`` in the validation set (14 planted
for this fix, 65 where gpuscope named it first in place of the planted cause) measured above the
top (v95 94.0 % against a top of 93.2, v123 89.1 against 88.9, v10 48.3 against 47.3, v30 72.3
against 70.0, v29 65.8 against 61.1, v86 76.8 against 73.3, v164 81.9 against 77.4, v07 36.4
against 21.6) and 1 below the low end. At 0.8 five of them hold (v07, v10, v29, v30, v86); v95,
v123 and v164 stay 0.1-2.3 points above (their tops bound by the launch latencies the replay
keeps, not by the kernels: 0.6 moved them by 0-2 points). A compiled step keeps its kernels (its
Inductor has fused already), as does a step with recurrent layers. The point and the low end
do not move (sample_traces/validation/README.md, "CUDA graphs' top: Inductor's kernels")."""


@dataclass(frozen=True, eq=False)
class InductorKernels:
    """``base``'s durations with every GPU kernel (not copies nor collectives) × ``kept``, node by
    node or every node at once (:meth:`array`): :data:`INDUCTOR_KERNEL_KEPT`."""

    base: DurFn | None
    kept: float

    def __call__(self, v: int, n: Node) -> float:
        d = float(n.dur) if self.base is None else self.base(v, n)
        return d * self.kept if _compute_kernel(n) else d

    def array(self, g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
        d = raw_durations(g, self.base, durs, picked)
        mask = per_graph(
            g,
            "compute_kernels",
            lambda: np.fromiter(map(_compute_kernel, g.nodes), dtype=bool, count=len(g.nodes)),
        )
        return np.where(mask, d * self.kept, d)


def _compute_kernel(n: Node) -> bool:
    return n.kind == "gpu" and n.cat == "kernels"


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Host and launches × 0.5 / 0.2 / 0.05 (``compiled_overhead``: a compiled step's remaining
    Python and guards); recurrent layers as :func:`_host_scaled` says."""
    return _host_scaled(g, 0.5, 0.2, 0.05)


def retime_replayed(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Host and launches × 0.5 / 0.2 / 0: at the top, the replayed graph launches the whole step
    at once and no host work per kernel is left. The kernels' launch latencies stay in the graph,
    so the top is not the GPU's work alone (v123, a SchNet-style step captured whole by
    ``torch.cuda.graph``, measured 6.9 → 0.76 ms, 89.1 %: top 85.4 % either way). In a compiled
    step only the host work inside its compiled calls is replayed (:func:`in_compiled_calls`).
    Recurrent layers as :func:`_host_scaled` says."""
    return _host_scaled(g, 0.5, 0.2, 0.0, host=in_compiled_calls(g))


def advised(rec: Recommendation, g: Graph, ctx: Context) -> dict[str, Variant]:
    """:func:`retime_replayed`; on a step not compiled yet (the finding's ``compiled`` false or
    absent), the top also fuses: ``torch.compile(model, mode="reduce-overhead")`` runs Inductor's
    fused kernels inside the graphs it replays, so the kernels fusion removes take no GPU time
    there (kernel_fusion's strongest level). Timed on the planted variants of v95 (a spiking CNN,
    1,042 kernels a step, 2.2 ms of GPU work in the trace): 94.0 %, the compiled step 2.49 ms,
    above the top of host work alone (91.2 %); v140, v155, v169: 74.8-85.1 %. The mid level fuses
    by half (:data:`FUSED_MID_KEPT`). With host work alone there, reduce-overhead was first on none
    of seven planted steps where it measured at least 90 % of the planted cause's own fix (v10
    48.3 % against 13.5, v29 65.8 against 36.6, v35 72.5 against 58.2, v130 66.7 against 37.2,
    v149 57.2 against 44.6, v167 41.7 against 20.0, v22 57.2 against 62.7; cuda_graphs_gate.json);
    with it, first on all seven, and on v58 (7.0 against bf16's 20.2), where bf16's estimate (4.0)
    is low."""
    if (rec.evidence or {}).get("compiled"):
        return retime_replayed(g, ctx)
    return with_replay_cost(_host_scaled(g, 0.5, 0.2, 0.0, fused=True), g, ctx)


REPLAY_HOST_MS = 1.0
"""Host time (ms of the untraced step) a step of an eager model compiled with
``mode="reduce-overhead"`` spends per step on the replay itself, which no eager op of the planted
trace shows: Dynamo's guards, AOTAutograd's wrappers around the forward and backward graphs,
CUDA graph trees' checks and input copies, the autograd nodes outside the graphs. On the gate's
smallest steps (``cuda_graphs_gate.json``) the replayed step took 1.3-1.7 ms where the GPU
worked 0.09-0.37 ms a step (v23, v36, v47), and the replay without this cost left the step
0.45-1.07 ms shorter than timed on the six host-bound ones (v02, v06, v23, v36, v47, v77): told
29-72 % where reduce-overhead gained 9.8-38.6. Set at the top of that spread; fitted on those
timings (no held-out pair yet)."""


def with_replay_cost(
    variants: dict[str, Variant], g: Graph, ctx: Context, levels: tuple[str, ...] = ("low", "mid")
) -> dict[str, Variant]:
    """``variants`` with :data:`REPLAY_HOST_MS` per step added to the replayed host work at
    ``levels`` (:func:`~gpuscope.analysis.fixes.base.with_host_cost`). The top (``high``) takes
    none: the fastest host's replay."""
    return fx.with_host_cost(variants, g, ctx, REPLAY_HOST_MS, levels)


UNIT = FixUnit(
    "cuda_graphs",
    WORDS,
    detect,
    retime_replayed,
    general=True,
    host_free=True,
    advised=advised,
    host_ceiling=True,
    replays=frozenset({"activation_checkpointing"}),
)
"""``replays``: the replayed backward replays the recompute of checkpointed blocks with the rest
of it, launches and all, where dropping the checkpointing removes the recompute but leaves every
other launch: ``model.compile(mode="reduce-overhead")`` of eight checkpointed planted steps gained
more than dropping the checkpointing did (v81 89.9 % against 57.7, v86 76.8 against 42.3, v41
76.6 against 57.1, v55 72.7 against 53.7, v56 73.9 against 37.4, v08 57.1 against 35.9, v29 65.8
against 36.6, v68 63.1 against 21.2; 2-6 rounds each, cuda_graphs_gate.json; v132 73.0 against
44.5, 3 rounds, truth.json's first_fixes). The replayed
recompute still runs its kernels: dropping the checkpointing as well took another 14-22 % off the
graphs' step (v29, v68, v08, v41: calls 16-17). ``host_free``: the
replayed step no longer follows its host's speed while the planted one does;
the timed planted steps of the two eager pairs ran 20-37 % slower than the capture's untraced step
(v123 measured 89.1 % against a top of 85.4 %, v141 90.6 % against 87.8 %)."""
