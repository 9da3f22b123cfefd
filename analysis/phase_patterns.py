"""Causes found by phase and pattern in one rank's trace: the optimizer step's per-parameter kernel
loop, and forward ops re-run inside backward (activation checkpointing's recompute).

A computation (:func:`phase_patterns`) and its typed frozen result (:class:`PhasePatterns`); the
fix units ``optimizer_fused`` and ``activation_checkpointing`` (``gpuscope.analysis.fixes``) read
it. Definitions: docs/metrics.md, "Causes found by phase and pattern".

- **Optimizer loop**: inside the ``Optimizer.step#<Name>.step`` spans of the window, the kernels
  launched from the span's thread (by the launch call's correlation): per optimizer step their
  number, their GPU time, the span's **wall** (its start to the later of its end and its last
  kernel's end) and the **idle** in it (wall − the union of every kernel in it: the GPU ran
  nothing). ``foreach`` when a
  ``multi_tensor_apply`` / fused-optimizer kernel or an ``aten::_foreach_*`` / ``aten::_fused_*`` op
  is inside: the step is already batched. A **loop** is :data:`MIN_LOOP_LAUNCHES` or more launches
  per optimizer step without ``foreach``: ``foreach=False`` (a Python loop over the parameters).
- **Recompute**: forward-only ops (:data:`FORWARD_OPS`: ``aten::linear``, ``aten::layer_norm``,
  ``aten::gelu``, attention, convolution, ...; a backward formula uses their ``*_backward`` forms)
  whose span lies inside an ``autograd::engine::evaluate_function`` span of the same thread, the
  outermost of them only: per step their count, host time and the GPU time of the kernels they
  launch. ``annotated`` when a ``CheckpointFunction`` / ``checkpoint`` span is in the window.
  Ops of any name are a re-run too where :data:`MIN_RERUN` or more consecutive top-level ``aten::``
  compute ops of one backward function repeat a run of the forward's name for name
  (:func:`rerun_mask`; ops that only view, move or allocate memory left out): a checkpointed plain function (a positional encoding) re-runs ``pow``,
  ``mul``, ``sin``, ``cos``, none of them forward-only.
- **Blocking pageable copy**: a host-to-device copy from pageable memory whose host call (the copy
  call itself, or a synchronizing call of :data:`SYNC_APIS` after it on the same thread) started
  before the copy ran on the GPU and ended after it: the host waited through the GPU work queued
  ahead of the copy (``queued``: the copy's GPU start − the waiting call's start), and the queue
  drained. Per step: such copies, the host's wait (the waiting calls' time) and the queued time.
- **Fusable chains**: the kernels of :data:`FUSABLE_CATEGORIES` (elementwise, reductions and
  norms, copies and layout changes; no ``triton_`` kernel, which a compiler made, nor cuDNN's
  batch norm) launched one
  after another from one thread, outside the optimizer's step: a run of two or more is a chain,
  which a compiler would run as one kernel. Per step: chains, their kernels, their GPU time,
  and the **fused** time (each chain's longest kernel: one pass over its largest tensors, what
  one fused kernel reading the chain's inputs once and writing its outputs once costs at best);
  the typical chain (its kernels' short op names, :func:`kernel_op`) is the one of most GPU time.
- **Exposed all-gathers** (FSDP): the time NCCL all-gather kernels run while no compute kernel
  runs (the union of all-gather kernels minus the union of non-communication kernels), per step,
  split by the phase of the launch (inside a backward function: ``backward``, else ``forward``),
  beside all exposed communication (every communication kernel minus compute).
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.collectives import coll_of
from gpuscope.analysis.critical_path import per_graph
from gpuscope.analysis.event_classes import (
    KERNEL_CATS,
    LAUNCH_APIS,
    MEMCPY_CATS,
    OPTIMIZER_STEP_RE,
    PAGEABLE_H2D_RE,
    SYNC_APIS,
    is_comm_kernel,
)
from gpuscope.analysis.kernel_names import classify_kernel
from gpuscope.analysis.modules import batch_bounds
from gpuscope.analysis.rank_index import RankIndex, ids_param, in_ids, name_class
from gpuscope.analysis.store_access import RUNTIME_CATS_SQL, execute, sql_list

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph
    from gpuscope.analysis.steps import Window
    from gpuscope.store import Connection

__all__ = [
    "FORWARD_OPS",
    "FUSABLE_CATEGORIES",
    "BlockingCopy",
    "ExposedAllGather",
    "FusableChains",
    "OptimizerLoop",
    "PhasePatterns",
    "Recompute",
    "phase_patterns",
]

BATCH_ROWS = 1 << 18
"""Launches read at a time (each batch also reads the backward functions and forward ops of its
time: fewer, larger batches cost less CPU; at 2.0 GB no batch holds memory above the start)."""
MIN_LOOP_LAUNCHES = 40
"""Launches per optimizer step at or above which an optimizer step without foreach/fused kernels
is a per-parameter loop (AdamW with ``foreach=False`` launches ~10 kernels per parameter)."""

#: ATen ops a forward pass calls and no backward formula does (their gradients use the
#: ``*_backward`` ops): seen inside a backward function, they are a forward re-run.
FORWARD_OPS: tuple[str, ...] = (
    "aten::linear",
    "aten::addmm",
    "aten::layer_norm",
    "aten::native_layer_norm",
    "aten::rms_norm",
    "aten::_fused_rms_norm",
    "aten::group_norm",
    "aten::batch_norm",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::convolution",
    "aten::embedding",
    "aten::gelu",
    "aten::silu",
    "aten::softmax",
    "aten::_softmax",
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::dropout",
    "aten::native_dropout",
)
_OPT_STEP = re.compile(OPTIMIZER_STEP_RE)
_BATCHED_KERNEL = re.compile(r"multi_tensor_apply|fused_adam|FusedAdam|fused_sgd|FusedSgd", re.I)
_BATCHED_OP = re.compile(r"^aten::_(foreach|fused)_")
_CHECKPOINT = re.compile(r"CheckpointFunction|torch/utils/checkpoint\.py|checkpoint", re.I)
_BACKWARD = "autograd::engine::evaluate_function"
_COMPILED_BACKWARD = "CompiledFunctionBackward"
"""A compiled region's backward function (AOTAutograd): its ops are the compiled backward graph,
which repeats the region's forward ops by construction (an ``mm`` for each ``mm``): never a
re-run by sequence (:func:`rerun_mask`), and no checkpointing a user could drop."""


def sequence_backward(name: str) -> bool:
    """Whether ops inside the backward function ``name`` may count as forward ops re-run by their
    sequence: every backward function but a compiled region's (:data:`_COMPILED_BACKWARD`)."""
    return _COMPILED_BACKWARD not in name


#: The host spans read: optimizer steps, backward functions, forward-only ops, batched optimizer
#: ops, checkpoint annotations (a class of names read once per rank, :func:`name_class`).
_SPAN_NAMES = name_class(
    "starts_with(name, 'Optimizer.step#') OR starts_with(name, 'autograd::engine::evaluate_function')"
    f" OR name IN {sql_list(FORWARD_OPS)} OR starts_with(name, 'aten::_foreach_')"
    " OR starts_with(name, 'aten::_fused_') OR regexp_matches(name, '(?i)checkpoint')"
)
_LAUNCH_NAMES = name_class(f"name IN {sql_list(LAUNCH_APIS)}")
_ATEN_NAMES = name_class("starts_with(name, 'aten::')")
MIN_RERUN = 4
"""Consecutive top-level compute ops of one backward function that repeat, name for name, a run of
the forward's: from this many they are a re-run (a checkpointed function's recompute, module or
not), not the backward's own formula (which calls one to three ops)."""
NEUTRAL_OPS = frozenset(
    "aten::" + n
    for n in [
        "view",
        "reshape",
        "_reshape_alias",
        "as_strided",
        "alias",
        "empty",
        "empty_strided",
        "empty_like",
        "zeros",
        "ones",
        "zero_",
        "fill_",
        "resize_",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "narrow",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "t",
        "transpose",
        "permute",
        "expand",
        "contiguous",
        "clone",
        "copy_",
        "to",
        "_to_copy",
        "detach",
        "detach_",
        "record_stream",
        "set_",
        "lift_fresh",
    ]
)
"""Ops that move, view or allocate memory and compute nothing: left out of the sequences
:func:`rerun_mask` compares (with every ``aten::_foreach_*`` op: FSDP's unshard repeats its
``split_with_sizes``, ``_foreach_copy_``, ``view`` before backward as before forward, v54; no
recompute)."""


def _neutral(name: str) -> bool:
    return name in NEUTRAL_OPS or name.startswith("aten::_foreach_")


@dataclass(frozen=True)
class OptimizerLoop:
    """The optimizer step's kernels (module doc); times in ms per optimizer step (``n``: optimizer
    steps in the window); ``spans``: the steps' (tid, start, end) in trace ns; ``correlations``:
    its kernels' launch correlations (for the re-timing)."""

    name: str
    n: int
    launches_per_step: float
    kernel_ms_per_step: float
    wall_ms_per_step: float
    idle_ms_per_step: float
    median_kernel_us: float | None
    foreach: bool
    spans: tuple[tuple[int, int, int], ...] = ()
    correlations: frozenset[int] = frozenset()

    @property
    def looped(self) -> bool:
        """A per-parameter loop: many launches, no foreach or fused kernels."""
        return not self.foreach and self.launches_per_step >= MIN_LOOP_LAUNCHES

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "optimizer_steps": self.n,
            "launches_per_step": self.launches_per_step,
            "kernel_ms_per_step": self.kernel_ms_per_step,
            "wall_ms_per_step": self.wall_ms_per_step,
            "idle_ms_per_step": self.idle_ms_per_step,
            "median_kernel_us": self.median_kernel_us,
            "foreach_or_fused": self.foreach,
            "per_parameter_loop": self.looped,
        }


@dataclass(frozen=True)
class Recompute:
    """Forward ops re-run inside backward (module doc); per training step: ``ops_per_step``,
    ``host_ms_per_step`` (their spans), ``kernel_ms_per_step`` (their kernels on the GPU),
    ``region_ms_per_step`` (the backward functions holding them: re-run and checkpoint machinery)
    and ``region_idle_ms_per_step`` (the GPU idle in that region: no kernel runs);
    ``by_op``: count per step by op name; ``annotated``: a checkpoint span was seen; ``spans``:
    the ops' (tid, start, end) in trace ns; ``correlations``: their kernels' launch correlations."""

    ops_per_step: float
    host_ms_per_step: float
    kernel_ms_per_step: float
    by_op: tuple[tuple[str, float], ...]
    annotated: bool
    region_ms_per_step: float = 0.0
    region_idle_ms_per_step: float = 0.0
    spans: tuple[tuple[int, int, int], ...] = ()
    correlations: frozenset[int] = frozenset()

    def to_json(self) -> dict[str, Any]:
        return {
            "ops_per_step": self.ops_per_step,
            "host_ms_per_step": self.host_ms_per_step,
            "kernel_ms_per_step": self.kernel_ms_per_step,
            "region_ms_per_step": self.region_ms_per_step,
            "region_idle_ms_per_step": self.region_idle_ms_per_step,
            "by_op_per_step": dict(self.by_op),
            "checkpoint_annotated": self.annotated,
        }


@dataclass(frozen=True)
class ExposedAllGather:
    """All-gather time not hidden behind compute (module doc), ms per step: ``forward_ms`` and
    ``backward_ms`` by the launch's phase, ``comm_exposed_ms`` all communication's, ``n_per_step``
    all-gather kernels per step, ``kernel_ms_per_step`` their whole time."""

    forward_ms: float
    backward_ms: float
    comm_exposed_ms: float
    n_per_step: float
    kernel_ms_per_step: float

    @property
    def exposed_ms(self) -> float:
        return self.forward_ms + self.backward_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "exposed_allgather_ms_per_step": self.exposed_ms,
            "forward_ms_per_step": self.forward_ms,
            "backward_ms_per_step": self.backward_ms,
            "exposed_comm_ms_per_step": self.comm_exposed_ms,
            "allgathers_per_step": self.n_per_step,
            "allgather_kernel_ms_per_step": self.kernel_ms_per_step,
        }


@dataclass(frozen=True)
class BlockingCopy:
    """Pageable host-to-device copies the host waited for behind queued GPU work (module doc),
    per step: ``copies_per_step`` (every pageable H2D copy), ``blocked_per_step`` (those whose
    waiting call started before the copy ran), ``wait_ms`` (the waiting calls' host time) and
    ``queued_ms`` (the GPU work ahead of each blocked copy that the host waited through)."""

    copies_per_step: float
    blocked_per_step: float
    wait_ms: float
    queued_ms: float

    def to_json(self) -> dict[str, Any]:
        return {
            "pageable_copies_per_step": self.copies_per_step,
            "blocked_copies_per_step": self.blocked_per_step,
            "host_wait_ms_per_step": self.wait_ms,
            "queued_gpu_ms_per_step": self.queued_ms,
        }


SUBCLASS_DISPATCH = "PythonSubclass"
"""The span PyTorch's profiler writes around a tensor subclass's ``__torch_dispatch__``."""
DTENSOR_SPANS: tuple[str, ...] = (
    "Redistribute",
    "RedistributeBackward",
    "_FromTorchTensor",
    "_FromTorchTensorBackward",
    "_ToTorchTensor",
    "_ToTorchTensorBackward",
)
"""DTensor's own autograd functions (``redistribute``, ``DTensor.from_local``, ``to_local`` and
their backward): seen in a trace, the subclass dispatching is DTensor (tensor parallel)."""


@dataclass(frozen=True)
class SubclassDispatch:
    """A tensor subclass's Python dispatch in the window, per step: ``dispatch_ms_per_step``, the
    host time inside ``PythonSubclass`` spans and DTensor's functions (:data:`DTENSOR_SPANS`)
    outside every op and call they hold (the subclass's Python: sharding propagation, the
    redistribution's planning, wrapping and unwrapping; not the local ops it runs);
    ``calls_per_step`` (``PythonSubclass`` spans), ``dtensor_calls_per_step`` (DTensor's
    functions). ``dtensor``: whether DTensor's functions are there; without them the trace does
    not say which subclass dispatches (DTensor, a float8 or quantized tensor, FSDP's parameters),
    and no fix is named for it."""

    dispatch_ms_per_step: float
    calls_per_step: float
    dtensor_calls_per_step: float

    @property
    def dtensor(self) -> bool:
        return self.dtensor_calls_per_step > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "dispatch_ms_per_step": self.dispatch_ms_per_step,
            "subclass_calls_per_step": self.calls_per_step,
            "dtensor_calls_per_step": self.dtensor_calls_per_step,
            "dtensor": self.dtensor,
        }


FUSABLE_CATEGORIES = frozenset({"elementwise", "reduction_norm_softmax", "copy_memset"})
"""Kernel categories (:func:`~gpuscope.analysis.kernel_names.classify_kernel`) a compiler fuses
into a neighbour of the same kind; GEMMs, convolutions, attention, RNNs, collectives and the
optimizer's kernels stay separate launches."""


_LIBRARY_KERNEL = re.compile(r"^triton_|\bbn_(?:fw|bw)", re.I)
"""Kernels a compiler of the model does not fuse into a chain: its own (Triton: fused already)
and cuDNN's batch norm (a training batch norm that Inductor splits into a reduction and a
pointwise kernel gains nothing fused: v06, compiled, lost 18 %). cuDNN's layout transforms
around a convolution (``nchwToNhwc``) stay fusable: Inductor's layout optimization runs the
convolutions channels-last and drops them."""


def math_kernel(name: str) -> bool:
    """Whether an eager kernel of this name is elementwise math (:func:`fusable_kernel` of the
    ``elementwise`` category: no reduction, copy, fill or layout change)."""
    return not _LIBRARY_KERNEL.search(name) and classify_kernel(name) == "elementwise"


def fusable_kernel(name: str) -> bool:
    """Whether an eager kernel of this name is one a compiler would fuse with its neighbours: of
    :data:`FUSABLE_CATEGORIES`, and none of :data:`_LIBRARY_KERNEL` (a ``triton_`` kernel is fused
    already; cuDNN's batch norm stays)."""
    return not _LIBRARY_KERNEL.search(name) and classify_kernel(name) in FUSABLE_CATEGORIES


_OP_RES = (
    re.compile(r"CUDAFunctor_(\w+?)<"),
    re.compile(r"(\w+?)_kernel_cuda"),
    re.compile(r"(\w+?)_functor<"),
    re.compile(r"::(\w+?)Kernel<"),
    re.compile(r"::(\w+?)_kernel_"),
)
_FUNCTOR = re.compile(r"(\w+?)Functor<")
_WRAPPERS = {"Binary", "Unary", "AUnary", "BUnary", "CUDA", "Reduce", "Compare"}


def kernel_op(name: str) -> str:
    """What an eager elementwise, reduction or copy kernel computes, in one short word read from
    its name (``BinaryFunctor<..., MulFunctor<float>>`` -> ``mul``, ``sin_kernel_cuda`` ->
    ``sin``, ``reduce_kernel<..., sum_functor<...>>`` -> ``sum``, ``nchwToNhwcKernel`` ->
    ``nchwtonhwc``); the name's first 24 characters when none of these forms is there."""
    inner = [m.group(1) for m in _FUNCTOR.finditer(name)]
    inner = [x.rsplit("::", 1)[-1] for x in inner]
    inner = [x for x in inner if x.split("_")[-1] not in _WRAPPERS and x not in _WRAPPERS]
    if inner:
        return inner[-1].lower()
    for rx in _OP_RES:
        m = rx.search(name)
        if m:
            return m.group(1).rsplit("::", 1)[-1].lower()
    return name.removeprefix("void ")[:24]


@dataclass(frozen=True)
class FusableChains:
    """Chains of fusable kernels (module doc), per training step: ``chains_per_step``,
    ``kernels_per_step`` (in chains), ``kernel_ms_per_step`` (their GPU time), ``fused_ms_per_step``
    (each chain's longest kernel, summed), ``longest`` (kernels in the longest chain),
    ``typical`` (the short op names of the chain of most GPU time, summed over its repeats) and
    ``typical_per_step`` (how often it runs per step)."""

    chains_per_step: float
    kernels_per_step: float
    kernel_ms_per_step: float
    fused_ms_per_step: float
    longest: int
    typical: tuple[str, ...]
    typical_per_step: float
    math_saved_ms_per_step: float = 0.0
    """The saving (ms per step) of the chains of elementwise math kernels alone (category
    ``elementwise``: no reduction, copy or fill among them): pointwise math run op by op, which
    only a compiler fuses."""

    @property
    def saved_ms_per_step(self) -> float:
        """The chains' GPU time less their fused time (ms per step): what fusing them saves at
        most on the GPU."""
        return max(0.0, self.kernel_ms_per_step - self.fused_ms_per_step)

    def to_json(self) -> dict[str, Any]:
        return {
            "chains_per_step": self.chains_per_step,
            "chain_kernels_per_step": self.kernels_per_step,
            "chain_kernel_ms_per_step": self.kernel_ms_per_step,
            "fused_ms_per_step": self.fused_ms_per_step,
            "saved_ms_per_step": self.saved_ms_per_step,
            "longest_chain": self.longest,
            "typical_chain": list(self.typical),
            "typical_chain_per_step": self.typical_per_step,
            "elementwise_saved_ms_per_step": self.math_saved_ms_per_step,
        }


@dataclass(frozen=True)
class PhasePatterns:
    """What :func:`phase_patterns` found in a rank's window (None: not there)."""

    n_steps: int
    window_ns: int
    optimizer: OptimizerLoop | None = None
    recompute: Recompute | None = None
    allgather: ExposedAllGather | None = None
    subclass: SubclassDispatch | None = None
    blocking_copy: BlockingCopy | None = None
    chains: FusableChains | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.to_json() if self.optimizer else None,
            "recompute": self.recompute.to_json() if self.recompute else None,
            "allgather": self.allgather.to_json() if self.allgather else None,
            "subclass": self.subclass.to_json() if self.subclass else None,
            "blocking_copy": self.blocking_copy.to_json() if self.blocking_copy else None,
            "chains": self.chains.to_json() if self.chains else None,
        }


def _union_ns(s: Any, e: Any) -> int:
    """Length of the union of intervals [s, e) (int64 arrays)."""
    if s.size == 0:
        return 0
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    starts_new = np.concatenate(([True], s[1:] > reach[:-1]))
    idx = np.flatnonzero(starts_new)
    seg_e = np.maximum.reduceat(e, idx)
    return int((seg_e - s[idx]).sum())


def _inside(span_tid: Any, span_s: Any, span_e: Any, tid: Any, t: Any) -> Any:
    """For each (tid, t): the index of a span of that thread holding t (``s <= t <= e``; the
    latest-starting such span), -1 when none. Per thread, spans sorted by start with the running
    maximum of their ends: the walk back from the last span starting at or before t stops as
    soon as no earlier span reaches t."""
    out = np.full(len(t), -1, dtype=np.int64)
    for th in np.unique(tid):
        mine = np.flatnonzero(span_tid == th)
        if mine.size == 0:
            continue
        o = mine[np.argsort(span_s[mine], kind="stable")]
        ss, ee = span_s[o], span_e[o]
        reach = np.maximum.accumulate(ee)
        q = np.flatnonzero(tid == th)
        start = np.searchsorted(ss, t[q], side="right") - 1
        ok = start >= 0
        st = np.maximum(start, 0)
        hit = ok & (ee[st] >= t[q])  # the last span starting at or before t holds it
        out[q[hit]] = o[st[hit]]
        # else an earlier span may still hold t (nested spans): walk back, only where one reaches
        for j, i0 in zip(
            q[~hit & ok & (reach[st] >= t[q])], start[~hit & ok & (reach[st] >= t[q])], strict=True
        ):
            i = int(i0) - 1
            while i >= 0 and reach[i] >= t[j]:
                if ee[i] >= t[j]:
                    out[j] = o[i]
                    break
                i -= 1
    return out


def rerun_mask(tid: Any, s: Any, e: Any, names: list[str], b_tid: Any, b_s: Any, b_e: Any) -> Any:
    """For each ``aten::`` op (thread, start, end, name) whether it is a forward op re-run inside
    backward by its sequence: a top-level compute op (inside no other of the ops; none of
    :data:`NEUTRAL_OPS`, which both sequences leave out) inside a backward function (``b_*``: the
    ``evaluate_function`` spans) that belongs to a run of :data:`MIN_RERUN` consecutive such ops
    of that function whose names equal, in order, consecutive top-level compute ops of one
    thread outside every backward function (the forward)."""
    n = len(names)
    out = np.zeros(n, dtype=bool)
    if n < MIN_RERUN or b_s.size == 0:
        return out
    top = _outermost(tid, s, e) & np.array([not _neutral(x) for x in names], dtype=bool)
    held = _inside(b_tid, b_s, b_e, tid, s)
    k = MIN_RERUN
    grams: set[tuple[Any, ...]] = set()
    fwd = np.flatnonzero(top & (held < 0))
    fwd = fwd[np.lexsort((s[fwd], tid[fwd]))]
    for _, run in itertools.groupby(fwd.tolist(), key=lambda i: int(tid[i])):
        seq = [names[i] for i in run]
        grams.update(tuple(seq[j : j + k]) for j in range(len(seq) - k + 1))
    if not grams:
        return out
    bwd = np.flatnonzero(top & (held >= 0))
    bwd = bwd[np.lexsort((s[bwd], held[bwd]))]
    for _, run in itertools.groupby(bwd.tolist(), key=lambda i: int(held[i])):
        idx = list(run)
        seq = [names[i] for i in idx]
        for j in range(len(seq) - k + 1):
            if tuple(seq[j : j + k]) in grams:
                out[idx[j : j + k]] = True
    return out


RERUN_BATCH_ROWS = 1 << 18
"""``aten::`` ops the re-run search (:func:`rerun_spans`) reads at a time: a 10 GB rank's window
holds millions, which read at once (arrays, their sort orders and names per op) took its ingest
from 0.8 to 1.7 GB of peak RSS."""

Spans = tuple[Any, Any, Any, Any]
"""Spans as numpy arrays: thread, start ns, end ns, name id."""


def rerun_spans(
    read: Callable[[], Iterable[Spans]], bwd: Spans, name_of: Callable[[list[int]], dict[int, str]]
) -> Spans:
    """The ``aten::`` ops :func:`rerun_mask` marks, found with the ops read a batch at a time:
    ``read()`` yields them in batches of ascending starts (every op starting in one batch's
    range in it, in thread-then-start order), and is called twice (the forward's sequences of
    every batch first, then the backward functions' ops matched against them); ``bwd`` the
    backward functions (every one of the window). What runs across two batches is carried: each
    thread's latest end (which op is outermost), the forward's last ``MIN_RERUN - 1`` names of
    each thread, each backward function's last ``MIN_RERUN - 1`` ops. The same ops as
    :func:`rerun_mask` over all of them at once, in the order found."""
    z = np.zeros(0, dtype=np.int64)
    b_tid, b_s, b_e, _ = bwd
    if b_s.size == 0:
        return (z, z, z, z)
    k = MIN_RERUN
    names: dict[int, str] = {}

    def batches() -> Iterator[tuple[Any, Any, Any, Any, Any, Any]]:
        reach: dict[int, int] = {}  # each thread's latest end so far
        for tid, s, e, ids in read():
            if len(s) == 0:
                continue
            u, at = np.unique(ids, return_inverse=True)
            names.update(name_of([int(x) for x in u if int(x) not in names]))
            counted = np.array([not _neutral(names[int(x)]) for x in u], dtype=bool)[at]
            top = _outermost(tid, s, e, reach) & counted
            yield tid, s, e, ids, top, _inside(b_tid, b_s, b_e, tid, s)

    grams: set[tuple[str, ...]] = set()
    tail: dict[int, list[str]] = {}  # the forward's last k - 1 names of each thread
    for tid, s, _e, ids, top, held in batches():
        fwd = np.flatnonzero(top & (held < 0))
        fwd = fwd[np.lexsort((s[fwd], tid[fwd]))]
        for th, run in itertools.groupby(fwd.tolist(), key=lambda i: int(tid[i])):
            seq = tail.get(th, []) + [names[int(ids[i])] for i in run]
            grams.update(tuple(seq[j : j + k]) for j in range(len(seq) - k + 1))
            tail[th] = seq[max(0, len(seq) - (k - 1)) :]
    if not grams:
        return (z, z, z, z)
    found: list[Spans] = []
    left: list[tuple[int, int, int, int]] = []  # marked ops carried out of their batch
    # each backward function's last k - 1 ops: (name, (tid, s, e, id), marked)
    carry: dict[int, list[tuple[str, tuple[int, int, int, int], bool]]] = {}
    for tid, s, e, ids, top, held in batches():
        bwd_i = np.flatnonzero(top & (held >= 0))
        bwd_i = bwd_i[np.lexsort((s[bwd_i], held[bwd_i]))]
        mark = np.zeros(len(s), dtype=bool)
        for h, run in itertools.groupby(bwd_i.tolist(), key=lambda i: int(held[i])):
            idx = list(run)
            before = carry.pop(h, [])
            n0 = len(before)
            seq = [c[0] for c in before] + [names[int(ids[i])] for i in idx]
            hit = [c[2] for c in before] + [False] * len(idx)
            for j in range(len(seq) - k + 1):
                if tuple(seq[j : j + k]) in grams:
                    hit[j : j + k] = [True] * k
            cut = max(0, len(seq) - (k - 1))  # from here on they stay carried
            left.extend(before[p][1] for p in range(min(cut, n0)) if hit[p])
            for p in range(n0, cut):
                mark[idx[p - n0]] = hit[p]
            kept: list[tuple[str, tuple[int, int, int, int], bool]] = []
            for p in range(cut, len(seq)):
                if p < n0:
                    op = before[p][1]
                else:
                    i = idx[p - n0]
                    op = (int(tid[i]), int(s[i]), int(e[i]), int(ids[i]))
                kept.append((seq[p], op, hit[p]))
            carry[h] = kept
        if mark.any():
            found.append((tid[mark], s[mark], e[mark], ids[mark]))
        # a backward function that ended before this batch's last start holds no later op
        last = int(s.max())
        for h in [h for h in carry if int(b_e[h]) < last]:
            left.extend(c[1] for c in carry.pop(h) if c[2])
    left.extend(c[1] for cs in carry.values() for c in cs if c[2])
    if left:
        cols = np.array(left, dtype=np.int64).reshape(-1, 4)
        found.append((cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3]))
    if not found:
        return (z, z, z, z)
    return tuple(np.concatenate([f[c] for f in found]) for c in range(4))  # type: ignore[return-value]


def _outermost(tid: Any, s: Any, e: Any, reach: dict[int, int] | None = None) -> Any:
    """For each span: whether no other span of its thread holds it (of equal spans, the first in
    the given order is the outer one). ``reach``: each thread's latest end among the spans that
    started before these (a batch's, :func:`rerun_spans`), updated with these."""
    out = np.ones(len(s), dtype=bool)
    low = np.iinfo(np.int64).min
    for th in np.unique(tid):
        q = np.flatnonzero(tid == th)
        o = q[np.lexsort((q, -e[q], s[q]))]  # by start, the longer first, then given order
        ends = e[o]
        before = low if reach is None else reach.get(int(th), low)
        acc = np.maximum.accumulate(np.concatenate(([before], ends)))
        out[o] = acc[:-1] < ends
        if reach is not None:
            reach[int(th)] = int(acc[-1])
    return out


def phase_patterns(
    con: Connection, run_id: str, rank: int, window: Window | None = None
) -> PhasePatterns:
    """The rank's optimizer loop and recompute in its window (module doc). The window's launches,
    forward ops and backward functions are read a batch of launches' time at a time
    (:data:`BATCH_ROWS` launches, :func:`gpuscope.analysis.modules.batch_bounds`); what is kept
    across batches is what each pattern found (the optimizer's kernels, the re-run ops and the
    backward functions holding them, the communication kernels), and the GPU time around them is
    read back by SQL: the memory does not grow with the rank's length."""
    from gpuscope.analysis.steps import find_window

    w = window if window is not None else find_window(con, run_id, rank)
    n_steps = max(1, w.n_steps)
    params = {"run": run_id, "rk": int(rank), "lo": int(w.start_ns), "hi": int(w.end_ns)}
    ix = RankIndex.shared(con, run_id, rank)
    name_of = _Names(con, run_id)
    span_ids = ix.name_ids(_SPAN_NAMES)
    span_names = name_of(span_ids)
    opt_ids = [i for i in span_ids if _OPT_STEP.match(span_names[i])]
    bwd_ids = [i for i in span_ids if span_names[i].startswith(_BACKWARD)]
    fwd_set = set(FORWARD_OPS)
    fwd_ids = [i for i in span_ids if span_names[i] in fwd_set]
    batched_ids = [
        i
        for i in span_ids
        if _BATCHED_OP.match(span_names[i]) and not _OPT_STEP.match(span_names[i])
    ]

    def among(ids: list[int]) -> str:
        """The window's host spans (no runtime calls) of the names ``ids``: a FROM and WHERE."""
        return f"""
            FROM {ix.host()} h
            WHERE h.ph = 'X' AND h.dur_ns IS NOT NULL AND h.cat NOT IN {RUNTIME_CATS_SQL}
              AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo
              AND {in_ids("h.name_id", "ids", ids_param(ids))}"""

    def spans(ids: list[int], where: str = "", extra: dict[str, Any] | None = None) -> Any:
        got = execute(
            con,
            f"""
            SELECT h.tid, h.ts_ns AS s, h.ts_ns + h.dur_ns AS e, h.name_id
            {among(ids)} {where}
            ORDER BY h.tid, h.ts_ns, h.rowid
            """,
            {**params, "ids": ids_param(ids), **(extra or {})},
        ).fetchnumpy()
        return tuple(np.asarray(got[c], dtype=np.int64) for c in ("tid", "s", "e", "name_id"))

    present = {
        int(r[0])
        for r in execute(
            con,
            f"""SELECT DISTINCT h.name_id FROM {ix.host()} h
                WHERE h.ph = 'X' AND h.dur_ns IS NOT NULL AND h.cat NOT IN {RUNTIME_CATS_SQL}
                  AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo
                  AND {in_ids("h.name_id", "ids", ids_param(span_ids))}""",
            {**params, "ids": ids_param(span_ids)},
        ).fetchall()
    }
    annotated = any(_CHECKPOINT.search(span_names[i]) for i in present)
    opt = _OptimizerSum(spans(opt_ids), spans(batched_ids), name_of)
    rec = _RecomputeSum()
    look_rec = any(i in present for i in bwd_ids) and any(i in present for i in fwd_ids)
    if any(i in present for i in bwd_ids):
        # forward ops of any name re-run inside backward, found by their sequence
        # the window's aten:: ops, by start (one scan of the host table), read a batch of starts
        # at a time (RERUN_BATCH_ROWS), twice; the table dropped after
        aten = ix.name_ids(_ATEN_NAMES)
        b_all = spans([i for i in bwd_ids if sequence_backward(span_names[i])])
        key = ("rerun_ops", int(w.start_ns), int(w.end_ns))
        ops = ix.table(
            key,
            f"""SELECT h.tid, h.ts_ns AS s, h.ts_ns + h.dur_ns AS e, h.name_id, h.rowid AS r
                {among(aten)} ORDER BY h.ts_ns""",
            {**params, "ids": ids_param(aten)},
        )
        try:
            cuts = batch_bounds(con, f"SELECT s FROM {ops}", "s", {}, RERUN_BATCH_ROWS)

            held: list[Spans] = []  # the one batch of a window that holds a single one

            def aten_batches() -> Iterator[Spans]:
                if held:
                    yield held[0]
                    return
                for i, c0 in enumerate(cuts or [None]):
                    c1 = cuts[i + 1] if i + 1 < len(cuts) else None
                    cond = " AND ".join(
                        ["TRUE"]
                        + (["s >= $r0"] if i > 0 else [])
                        + (["s < $r1"] if c1 is not None else [])
                    )
                    got = execute(
                        con,
                        f"SELECT tid, s, e, name_id FROM {ops} WHERE {cond} ORDER BY tid, s, r",
                        {"r0": c0, "r1": c1},
                    ).fetchnumpy()
                    batch: Spans = tuple(  # type: ignore[assignment]
                        np.asarray(got[c], dtype=np.int64) for c in ("tid", "s", "e", "name_id")
                    )
                    if len(cuts) <= 1:
                        held.append(batch)
                    yield batch

            rerun = rerun_spans(aten_batches, b_all, name_of)
        finally:
            ix.drop(key)
        if len(rerun[0]):
            z = np.zeros(0, dtype=np.int64)
            rec.add(b_all, rerun, _Launches(z, z, z, z, z, z))
    comm = _CommSum()
    launch_ids = ids_param(ix.name_ids(_LAUNCH_NAMES))
    launches = f"""
        SELECT r.tid, r.s AS t, r.correlation AS corr, k.s AS ks, k.e AS ke, k.name_id
        FROM {ix.runtime()} r JOIN {ix.gpu()} k ON k.correlation = r.correlation
        WHERE k.cat IN {sql_list(KERNEL_CATS)} AND {in_ids("r.name_id", "lids", launch_ids)}
          AND r.s >= $lo AND r.s < $hi {{where}}
    """
    lparams = {**params, "lids": launch_ids}
    kinds: dict[int, int] = {}
    fusable: dict[int, bool] = {}
    math: dict[int, bool] = {}
    bounds = batch_bounds(con, launches.format(where=""), "t", lparams, BATCH_ROWS)

    def batches() -> Iterator[tuple[int, int | None, int | None, _Launches]]:
        """The window's launches a batch at a time: (batch, its first launch time (None: no
        bound below), the next batch's (None: no bound above), the launches)."""
        for i, c0 in enumerate(bounds or [None]):
            c1 = bounds[i + 1] if i + 1 < len(bounds) else None
            cond = (" AND r.s >= $c0" if i > 0 else "") + (
                " AND r.s < $c1" if c1 is not None else ""
            )
            got = execute(
                con, launches.format(where=cond), {**lparams, "c0": c0, "c1": c1}
            ).fetchnumpy()
            col = {c: np.asarray(got[c], dtype=np.int64) for c in ("tid", "t", "corr", "ks", "ke")}
            name_id = np.asarray(got["name_id"], dtype=np.int64)
            new = [int(x) for x in np.unique(name_id) if int(x) not in kinds]
            for k, nm in name_of(new).items():
                kinds[k] = _kernel_kind(nm)
                fusable[k] = fusable_kernel(nm)
                math[k] = math_kernel(nm)
            u, at = np.unique(name_id, return_inverse=True)
            k_kind = np.array([kinds.get(int(x), COMPUTE_K) for x in u], dtype=np.int8)[at]
            k_fus = np.array([fusable.get(int(x), False) for x in u], dtype=bool)[at]
            k_math = np.array([math.get(int(x), False) for x in u], dtype=bool)[at]
            yield (
                i,
                c0 if i > 0 else None,
                c1,
                _Launches(
                    col["tid"],
                    col["t"],
                    col["corr"],
                    col["ks"],
                    col["ke"],
                    k_kind,
                    name_id,
                    k_fus,
                    k_math,
                ),
            )

    chains, math_chains = _ChainSum(opt), _ChainSum(opt, "math")
    for i, c0, c1, batch in batches():
        cp = {"c0": c0, "c1": c1}
        k_kind = batch.kind
        opt.add(batch)
        chains.add(batch)
        math_chains.add(batch)
        needs_bwd = look_rec or bool((k_kind == ALLGATHER_K).any())
        if needs_bwd:
            # backward functions that may hold a forward op or a launch of the batch
            b_cond = (" AND h.ts_ns + h.dur_ns >= $c0" if i > 0 else "") + (
                " AND h.ts_ns < $c1" if c1 is not None else ""
            )
            bwd = spans(bwd_ids, b_cond, cp)
        if look_rec:
            f_cond = (" AND h.ts_ns >= $c0" if i > 0 else "") + (
                " AND h.ts_ns < $c1" if c1 is not None else ""
            )
            rec.add(bwd, spans(fwd_ids, f_cond, cp), batch)
        else:
            rec.add_launches(batch)
        comm.add(batch, bwd if needs_bwd else None)
    n = n_steps
    return PhasePatterns(
        n_steps,
        w.duration_ns,
        opt.result(batches),
        rec.result(batches, n, annotated, name_of),
        comm.result(batches, n, w),
        _subclass(con, ix, params, n_steps),
        _blocking_copy(con, ix, params, n_steps),
        chains.result(n, name_of, math_chains.result(n, name_of)),
    )


class _Names:
    """Names of the run's name ids, read as asked and kept."""

    def __init__(self, con: Connection, run_id: str) -> None:
        self.con, self.run_id = con, run_id
        self.known: dict[int, str] = {}

    def __call__(self, ids: list[int]) -> dict[int, str]:
        want = [int(i) for i in ids if int(i) not in self.known]
        if want:
            for i, nm in execute(
                self.con,
                "SELECT name_id, name FROM names WHERE run_id = $run AND list_contains($ids, name_id)",
                {"run": self.run_id, "ids": want},
            ).fetchall():
                self.known[int(i)] = str(nm)
        return {int(i): self.known[int(i)] for i in ids if int(i) in self.known}


@dataclass
class _Launches:
    """A batch of the window's kernel launches: the launch call's thread, time and correlation,
    the kernel's GPU span and kind."""

    tid: Any
    t: Any
    corr: Any
    ks: Any
    ke: Any
    kind: Any
    name_id: Any = None
    fusable: Any = None
    math: Any = None


Batches = Callable[[], Iterator[tuple[int, "int | None", "int | None", _Launches]]]


def _near_kernels(
    batches: Batches, starts: Any, ends: Any, compute_only: bool = False
) -> tuple[Any, Any, Any]:
    """The window's launched kernels (read again a batch at a time: ``batches``) whose GPU span
    overlaps each range ``[starts[j], ends[j])`` (``ke > start`` and ``ks < end``): (range j,
    kernel start, kernel end) of each such pair; ``compute_only``: the kernels that are no
    communication."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    out: list[tuple[Any, Any, Any]] = []
    if starts.size:
        o = np.argsort(starts, kind="stable")
        sa, sb = starts[o], ends[o]
        longest = int((sb - sa).max())
        for _, _, _, b in batches():
            ks, ke = b.ks, b.ke
            if compute_only:
                keep = (b.kind != COMM_K) & (b.kind != ALLGATHER_K)
                ks, ke = ks[keep], ke[keep]
            # candidates: the ranges starting after ks - longest (else they end before ks) and
            # before ke
            lo = np.searchsorted(sa, ks - longest, side="right")
            hi = np.searchsorted(sa, ke, side="left")
            cnt = np.maximum(hi - lo, 0)
            if not cnt.any():
                continue
            k = np.repeat(np.arange(ks.size), cnt)
            first = np.repeat(np.cumsum(cnt) - cnt, cnt)
            r = lo[k] + (np.arange(k.size) - first)
            hit = sb[r] > ks[k]
            out.append((o[r[hit]], ks[k[hit]], ke[k[hit]]))
    if not out:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    return tuple(np.concatenate([x[c] for x in out]) for c in range(3))  # type: ignore[return-value]


class _OptimizerSum:
    """The optimizer steps' kernels, summed batch by batch (:class:`OptimizerLoop`)."""

    def __init__(self, spans: Any, batched: Any, name_of: _Names) -> None:
        self.tid, self.s, self.e, ids = spans
        self.name = name_of([int(ids[0])])[int(ids[0])] if len(ids) else ""
        self.n_launch = 0
        self.end = self.e.copy()  # the later of the span's end and its last kernel's end
        self.durs: list[Any] = []
        self.corrs: set[int] = set()
        self.batched_kernel = False
        b_tid, b_s = batched[0], batched[1]
        # a foreach/fused op inside an optimizer step (its start within one, ends included)
        self.batched_op = bool(
            b_s.size and self.s.size and (_inside(self.tid, self.s, self.e, b_tid, b_s) >= 0).any()
        )

    def add(self, b: _Launches) -> None:
        if self.s.size == 0 or b.t.size == 0:
            return
        held = _inside(self.tid, self.s, self.e, b.tid, b.t)
        inside = held >= 0
        if not inside.any():
            return
        np.maximum.at(self.end, held[inside], b.ke[inside])
        self.n_launch += int(inside.sum())
        self.durs.append((b.ke - b.ks)[inside])
        self.corrs.update(int(c) for c in b.corr[inside])
        self.batched_kernel |= bool((b.kind[inside] == BATCHED_K).any())

    def result(self, batches: Batches) -> OptimizerLoop | None:
        if self.s.size == 0:
            return None
        end = np.maximum(self.end, 0)
        walls = end - self.s
        # the GPU idle in the wall: no kernel at all runs (another rank's wait or the backward's
        # tail on the GPU is not the optimizer's idle)
        j, ks, ke = _near_kernels(batches, self.s, end)
        idles = []
        o = np.argsort(j, kind="stable")
        j, ks, ke = j[o], ks[o], ke[o]
        cut = np.searchsorted(j, np.arange(self.s.size + 1))
        for x in range(self.s.size):
            a, b = int(self.s[x]), int(end[x])
            sl = slice(cut[x], cut[x + 1])
            busy = _union_ns(np.clip(ks[sl], a, b), np.clip(ke[sl], a, b))
            idles.append(max(0, int(walls[x]) - busy))
        n = int(self.s.size)
        durs = np.concatenate(self.durs) if self.durs else np.zeros(0, dtype=np.int64)
        return OptimizerLoop(
            name=self.name,
            n=n,
            launches_per_step=float(self.n_launch) / n,
            kernel_ms_per_step=float(durs.sum()) / n / 1e6,
            wall_ms_per_step=float(int(walls.sum())) / n / 1e6,
            idle_ms_per_step=float(sum(idles)) / n / 1e6,
            median_kernel_us=float(np.median(durs)) / 1e3 if durs.size else None,
            foreach=self.batched_op or self.batched_kernel,
            spans=tuple(
                sorted(
                    (int(a), int(b), int(c))
                    for a, b, c in zip(self.tid, self.s, self.e, strict=True)
                )
            ),
            correlations=frozenset(self.corrs),
        )


class _ChainSum:
    """Chains of fusable kernels (:class:`FusableChains`), followed launch by launch per thread
    across batches (a chain open at a batch's end goes on in the next)."""

    def __init__(self, opt: _OptimizerSum, kind: str = "fusable") -> None:
        self.opt, self.kind = opt, kind  # which launches chain: fusable kernels, or math alone
        self.open: dict[int, list[tuple[int, int]]] = {}  # tid -> the open chain (ns, name id)
        self.done: list[tuple[tuple[int, ...], int, int]] = []  # (name ids, GPU ns, longest ns)

    def _close(self, tid: int) -> None:
        ch = self.open.pop(tid, None)
        if ch is not None and len(ch) >= 2:
            d = [x[0] for x in ch]
            self.done.append((tuple(x[1] for x in ch), sum(d), max(d)))

    def add(self, b: _Launches) -> None:
        mine = getattr(b, self.kind)
        if b.t.size == 0 or mine is None:
            return
        fus = mine.copy()
        if self.opt.s.size:  # the optimizer's kernels are optimizer_fused's: they end a chain
            fus &= _inside(self.opt.tid, self.opt.s, self.opt.e, b.tid, b.t) < 0
        o = np.lexsort((b.corr, b.t, b.tid))  # per thread, in launch order
        for tid, f, d, nid in zip(
            b.tid[o].tolist(),
            fus[o].tolist(),
            (b.ke - b.ks)[o].tolist(),
            b.name_id[o].tolist(),
            strict=True,
        ):
            if f:
                self.open.setdefault(tid, []).append((d, nid))
            else:
                self._close(tid)

    def result(
        self, n_steps: int, name_of: _Names, math: FusableChains | None = None
    ) -> FusableChains | None:
        """The chains per step; ``math``: the elementwise-math chains' own result, whose saving
        goes in :attr:`FusableChains.math_saved_ms_per_step`."""
        for tid in list(self.open):
            self._close(tid)
        if not self.done:
            return None
        n = max(1, n_steps)
        ids = sorted({i for c in self.done for i in c[0]})
        op = {i: kernel_op(nm) for i, nm in name_of(ids).items()}
        by: dict[tuple[str, ...], list[int]] = {}
        for names, ns, _ in self.done:
            key = tuple(op.get(i, "?") for i in names)
            got = by.setdefault(key, [0, 0])
            got[0] += ns
            got[1] += 1
        typical, (_, reps) = max(by.items(), key=lambda kv: (kv[1][0], kv[0]))
        return FusableChains(
            chains_per_step=len(self.done) / n,
            kernels_per_step=sum(len(c[0]) for c in self.done) / n,
            kernel_ms_per_step=sum(c[1] for c in self.done) / n / 1e6,
            fused_ms_per_step=sum(c[2] for c in self.done) / n / 1e6,
            longest=max(len(c[0]) for c in self.done),
            typical=typical,
            typical_per_step=reps / n,
            math_saved_ms_per_step=math.saved_ms_per_step if math is not None else 0.0,
        )


class _RecomputeSum:
    """The forward ops re-run inside backward functions and the kernels they launched, found
    batch by batch (:class:`Recompute`)."""

    def __init__(self) -> None:
        self.f: list[tuple[Any, Any, Any, Any]] = []  # forward ops held: tid, s, e, name id
        self.hb: set[tuple[int, int, int]] = set()  # the backward functions holding them
        self.k_ns = 0
        self.corrs: set[int] = set()
        self._ft = self._fs = self._fe = np.zeros(0, dtype=np.int64)

    def add(self, bwd: Any, fwd: Any, b: _Launches) -> None:
        b_tid, b_s, b_e, _ = bwd
        f_tid, f_s, f_e, f_id = fwd
        if b_s.size and f_s.size:
            holder = _inside(b_tid, b_s, b_e, f_tid, f_s)
            got = holder >= 0
            if got.any():
                self.f.append((f_tid[got], f_s[got], f_e[got], f_id[got]))
                h = np.unique(holder[got])
                self.hb.update(
                    (int(x), int(y), int(z))
                    for x, y, z in zip(b_tid[h], b_s[h], b_e[h], strict=True)
                )
                self._ft = np.concatenate([self._ft, f_tid[got]])
                self._fs = np.concatenate([self._fs, f_s[got]])
                self._fe = np.concatenate([self._fe, f_e[got]])
        self.add_launches(b)

    def add_launches(self, b: _Launches) -> None:
        # a launch inside a re-run op (any: an op inside another is inside the outer one too)
        if self._fs.size == 0 or b.t.size == 0:
            return
        got = _inside(self._ft, self._fs, self._fe, b.tid, b.t) >= 0
        self.k_ns += int((b.ke - b.ks)[got].sum())
        self.corrs.update(int(c) for c in b.corr[got])

    def result(
        self, batches: Batches, n_steps: int, annotated: bool, name_of: _Names
    ) -> Recompute | None:
        if not self.f:
            return None
        tid, s, e, ids = (np.concatenate([x[k] for x in self.f]) for k in range(4))
        o = np.lexsort((s, tid))  # the order of the spans as read: by thread, then start
        tid, s, e, ids = tid[o], s[o], e[o], ids[o]
        # the holding backward functions: the region, and the GPU's idle in it (no kernel runs)
        hb = sorted(self.hb)
        hs = np.array([x[1] for x in hb], dtype=np.int64)
        he = np.array([x[2] for x in hb], dtype=np.int64)
        region = _union_ns(hs, he)
        seg_s, seg_e = _segments(hs, he)
        j, ks, ke = _near_kernels(batches, seg_s, seg_e)
        covered = _union_ns(np.clip(ks, seg_s[j], seg_e[j]), np.clip(ke, seg_s[j], seg_e[j]))
        region_idle = max(0, region - covered)
        # the outermost forward ops only (aten::linear holds aten::addmm)
        keep = _outermost(tid, s, e)
        tid, s, e, ids = tid[keep], s[keep], e[keep], ids[keep]
        names = name_of(np.unique(ids).tolist())
        by: dict[str, int] = {}
        for i in ids.tolist():
            by[names[i]] = by.get(names[i], 0) + 1
        n = max(1, n_steps)
        return Recompute(
            ops_per_step=float(s.size) / n,
            host_ms_per_step=float(_union_ns(s, e)) / n / 1e6,
            region_ms_per_step=region / n / 1e6,
            region_idle_ms_per_step=region_idle / n / 1e6,
            kernel_ms_per_step=float(self.k_ns) / n / 1e6,
            by_op=tuple(sorted(((k, v / n) for k, v in by.items()), key=lambda kv: -kv[1])),
            annotated=annotated,
            spans=tuple(
                sorted((int(a), int(b), int(c)) for a, b, c in zip(tid, s, e, strict=True))
            ),
            correlations=frozenset(self.corrs),
        )


def _segments(s: Any, e: Any) -> tuple[Any, Any]:
    """The union of intervals [s, e) as disjoint segments (starts, ends), ascending."""
    if s.size == 0:
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    idx = np.flatnonzero(np.concatenate(([True], s[1:] > reach[:-1])))
    return s[idx], np.maximum.reduceat(e, idx)


class _CommSum:
    """The communication kernels of the window, with the phase of the all-gathers' launches,
    gathered batch by batch (:class:`ExposedAllGather`)."""

    def __init__(self) -> None:
        self.ks: list[Any] = []
        self.ke: list[Any] = []
        self.ag: list[Any] = []
        self.bwd: list[Any] = []

    def add(self, b: _Launches, bwd: Any) -> None:
        comm = (b.kind == COMM_K) | (b.kind == ALLGATHER_K)
        if not comm.any():
            return
        ag = b.kind[comm] == ALLGATHER_K
        in_bwd = np.zeros(int(comm.sum()), dtype=bool)
        if bwd is not None and bwd[1].size and ag.any():
            in_bwd = _inside(bwd[0], bwd[1], bwd[2], b.tid[comm], b.t[comm]) >= 0
        self.ks.append(b.ks[comm])
        self.ke.append(b.ke[comm])
        self.ag.append(ag)
        self.bwd.append(in_bwd)

    def result(self, batches: Batches, n_steps: int, w: Window) -> ExposedAllGather | None:
        if not self.ag or not any(a.any() for a in self.ag):
            return None
        lo, hi = int(w.start_ns), int(w.end_ns)
        ks = np.clip(np.concatenate(self.ks), lo, hi)
        ke = np.clip(np.concatenate(self.ke), lo, hi)
        ag, in_bwd = np.concatenate(self.ag), np.concatenate(self.bwd)
        # the compute kernels that overlap communication: those the differences need
        seg_s, seg_e = _segments(ks, ke)
        _, cs, ce = _near_kernels(batches, seg_s, seg_e, compute_only=True)
        cs, ce = np.clip(cs, lo, hi), np.clip(ce, lo, hi)
        fwd_ag, bwd_ag = ag & ~in_bwd, ag & in_bwd
        n = max(1, n_steps)
        f_ns = _difference_ns(ks[fwd_ag], ke[fwd_ag], cs, ce)
        b_ns = _difference_ns(ks[bwd_ag], ke[bwd_ag], cs, ce)
        return ExposedAllGather(
            forward_ms=f_ns / n / 1e6,
            backward_ms=b_ns / n / 1e6,
            comm_exposed_ms=_difference_ns(ks, ke, cs, ce) / n / 1e6,
            n_per_step=float(ag.sum()) / n,
            kernel_ms_per_step=float((ke - ks)[ag].sum()) / n / 1e6,
        )


_SYNC_NAMES = name_class(f"name IN {sql_list(SYNC_APIS)}")
_PAGEABLE_H2D_NAMES = name_class(f"regexp_matches(name, {sql_list((PAGEABLE_H2D_RE,))[1:-1]})")


def copies_and_syncs(
    con: Connection, ix: RankIndex, params: dict[str, Any]
) -> tuple[list[tuple[Any, ...]], dict[int, list[tuple[int, int]]]] | None:
    """The window's pageable H2D copies ``(GPU start, GPU end, call's tid, call start, call
    end)`` by call start, and each thread's synchronizing calls ``(start, end)`` by start; None
    without a copy."""
    raw = ix.name_ids(_PAGEABLE_H2D_NAMES)
    if not raw:
        return None
    c_ids = ids_param(raw)
    copies = execute(
        con,
        f"""
        SELECT k.s AS ks, k.e AS ke, r.tid, r.s AS cs, r.e AS ce
        FROM {ix.gpu()} k JOIN {ix.runtime()} r ON r.correlation = k.correlation
        WHERE k.cat IN {sql_list(MEMCPY_CATS)} AND {in_ids("k.name_id", "cids", c_ids)}
          AND r.s >= $lo AND r.s < $hi
        ORDER BY r.s
        """,
        {**params, "cids": c_ids},
    ).fetchall()
    if not copies:
        return None
    s_ids = ids_param(ix.name_ids(_SYNC_NAMES))
    syncs = execute(
        con,
        f"""
        SELECT r.tid, r.s, r.e FROM {ix.runtime()} r
        WHERE {in_ids("r.name_id", "sids", s_ids)} AND r.s >= $lo AND r.s < $hi
        ORDER BY r.tid, r.s
        """,
        {**params, "sids": s_ids},
    ).fetchall()
    by_tid: dict[int, list[tuple[int, int]]] = {}
    for t, a, b in syncs:
        by_tid.setdefault(int(t), []).append((int(a), int(b)))
    return copies, by_tid


def blocking_copy_of(
    copies: list[tuple[Any, ...]], waits: Iterable[tuple[int, int] | None], n_steps: int
) -> BlockingCopy:
    """:class:`BlockingCopy` of ``copies`` given each one's waiting call ``(start, end)`` (None:
    no host call waited past its GPU end); a wait that began after the copy started queued
    nothing and is not counted."""
    blocked, wait, queued = 0, 0, 0
    for (ks, _, _, _, _), got in zip(copies, waits, strict=True):
        if got is None or got[0] >= ks:
            continue  # no wait, or the copy ran before the host waited: nothing was queued
        blocked += 1
        wait += got[1] - got[0]
        queued += int(ks) - got[0]
    n = max(1, n_steps)
    return BlockingCopy(
        copies_per_step=len(copies) / n,
        blocked_per_step=blocked / n,
        wait_ms=wait / n / 1e6,
        queued_ms=queued / n / 1e6,
    )


def _blocking_copy(
    con: Connection, ix: RankIndex, params: dict[str, Any], n_steps: int
) -> BlockingCopy | None:
    """The pageable H2D copies of the window and the host calls that waited for them
    (:class:`BlockingCopy`): for each copy, its call and the synchronizing calls on the call's
    thread that start at or after it and end at or after the copy's GPU end; the first of them
    (the call itself when it outlasts the copy) is the waiting call."""
    found = copies_and_syncs(con, ix, params)
    if found is None:
        return None
    copies, by_tid = found
    starts = {t: [a for a, _ in v] for t, v in by_tid.items()}

    def waiting(ks: Any, ke: Any, t: Any, cs: Any, ce: Any) -> tuple[int, int] | None:
        # the copy call itself when it lasts past the copy, else the first synchronizing call
        # after it that does
        if ce >= ke:
            return int(cs), int(ce)
        mine = by_tid.get(int(t))
        if mine is None:
            return None
        tail = itertools.islice(mine, bisect_left(starts[int(t)], cs), None)
        return next((x for x in tail if x[1] >= ke), None)

    return blocking_copy_of(copies, (waiting(*c) for c in copies), n_steps)


_DISPATCH_NAMES = name_class(f"name IN {sql_list((SUBCLASS_DISPATCH, *DTENSOR_SPANS))}")


def _subclass(
    con: Connection, ix: RankIndex, params: dict[str, Any], n_steps: int
) -> SubclassDispatch | None:
    """The subclass dispatch's own host time (:class:`SubclassDispatch`): the union of the
    dispatch spans less the union of the other host events (ops, runtime calls) that start
    inside them, on each thread."""
    d_ids = ids_param(ix.name_ids(_DISPATCH_NAMES))
    if not d_ids:
        return None
    rows = execute(
        con,
        f"""
        WITH d AS (
            SELECT h.tid, h.ts_ns AS s, h.ts_ns + h.dur_ns AS e, n.name
            FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
            WHERE h.ph = 'X' AND h.dur_ns IS NOT NULL AND h.ts_ns < $hi
              AND h.ts_ns + h.dur_ns > $lo AND {in_ids("h.name_id", "ids", d_ids)}
        )
        SELECT 1 AS fam, tid, s, e, name FROM d
        UNION ALL
        SELECT 0, h.tid, h.ts_ns, h.ts_ns + h.dur_ns, ''
        FROM {ix.host()} h
        WHERE h.ph = 'X' AND h.dur_ns IS NOT NULL AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo
          AND NOT {in_ids("h.name_id", "ids", d_ids)} AND h.tid IN (SELECT DISTINCT tid FROM d)
        """,
        {**params, "ids": d_ids},
    ).fetchall()
    fam = np.array([r[0] for r in rows], dtype=bool)
    if not fam.any():
        return None
    tid = np.array([r[1] for r in rows], dtype=np.int64)
    s = np.array([r[2] for r in rows], dtype=np.int64)
    e = np.array([r[3] for r in rows], dtype=np.int64)
    names = [str(r[4]) for r in rows]
    f, o = np.flatnonzero(fam), np.flatnonzero(~fam)
    inside = o[_inside(tid[f], s[f], e[f], tid[o], s[o]) >= 0] if o.size else o
    own = 0
    for th in np.unique(tid[f]):
        ff, oo = f[tid[f] == th], inside[tid[inside] == th]
        own += _union_ns(s[ff], e[ff]) - _union_ns(s[oo], np.minimum(e[oo], e[ff].max()))
    n = max(1, n_steps)
    dt = sum(1 for i in f if names[i] in DTENSOR_SPANS)
    return SubclassDispatch(
        dispatch_ms_per_step=max(0, own) / n / 1e6,
        calls_per_step=float(sum(1 for i in f if names[i] == SUBCLASS_DISPATCH)) / n,
        dtensor_calls_per_step=dt / n,
    )


COMPUTE_K, COMM_K, ALLGATHER_K, BATCHED_K = 0, 1, 2, 3


def _kernel_kind(name: str) -> int:
    """A kernel's kind: communication (all-gather apart), a batched optimizer kernel, compute."""
    if is_comm_kernel(name):
        return ALLGATHER_K if coll_of(name) == "allgather" else COMM_K
    return BATCHED_K if _BATCHED_KERNEL.search(name) else COMPUTE_K


def _difference_ns(a_s: Any, a_e: Any, b_s: Any, b_e: Any) -> int:
    """Length of (union of A) minus (union of B): |A ∪ B| − |B|."""
    return _union_ns(np.concatenate([a_s, b_s]), np.concatenate([a_e, b_e])) - _union_ns(b_s, b_e)


# -- the same patterns on the critical path's graph (the fix units' re-timing) -------------------


def _launched_by(g: Graph, hosts: set[int]) -> set[int]:
    """GPU nodes whose launch edge comes from one of ``hosts``."""
    out = set()
    for v, n in enumerate(g.nodes):
        if n.kind == "gpu" and any(ed.kind == "launch" and ed.src in hosts for ed in g.preds[v]):
            out.add(v)
    return out


def optimizer_nodes(g: Graph) -> tuple[set[int], set[int]]:
    """(host nodes inside an optimizer span, GPU nodes they launched) of a critical-path graph."""
    hosts = {v for v, n in enumerate(g.nodes) if n.kind == "host" and "optimizer" in n.tags}
    return hosts, _launched_by(g, hosts)


RNN_OPS = re.compile(r"^aten::(?:_cudnn_rnn|miopen_rnn|lstm|gru|rnn_tanh|rnn_relu)\b")
"""Ops of a recurrent layer (``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``, forward and cuDNN's backward):
torch.compile leaves them eager (Dynamo's ``allow_rnn`` is off by default: the layer is a graph
break), so their host work stays."""


def rnn_host_nodes(g: Graph) -> set[int]:
    """Host nodes of a critical-path graph that lie inside an RNN op's span (:data:`RNN_OPS`) on
    their thread: the layer's own host work and launches, which compiling the model keeps. Found
    once per graph (``Graph.memo``; the fixes' re-timings ask again), a new set each call."""
    return set(per_graph(g, "rnn_host_nodes", lambda: frozenset(_rnn_host_nodes(g))))


def _rnn_host_nodes(g: Graph) -> set[int]:
    spans = {
        (int(ev.tid), int(ev.s), int(ev.e))
        for n in g.nodes
        if n.kind == "host"
        and (ev := n.event) is not None
        and hasattr(ev, "tid")
        and RNN_OPS.match(ev.name)
    }
    if not spans:
        return set()
    sp = sorted(spans)
    st, ss, se = (np.array([x[i] for x in sp], dtype=np.int64) for i in range(3))
    hv = [
        v
        for v, n in enumerate(g.nodes)
        if n.kind == "host" and n.event is not None and hasattr(n.event, "tid")
    ]
    if not hv:
        return set()
    tids = np.array([int(g.nodes[v].event.tid) for v in hv], dtype=np.int64)  # type: ignore[union-attr]
    starts = np.array([g.nodes[v].s for v in hv], dtype=np.int64)
    at = _inside(st, ss, se, tids, starts)
    return {v for v, i in zip(hv, at.tolist(), strict=True) if i >= 0 and g.nodes[v].e <= se[i]}


def recompute_nodes(g: Graph) -> tuple[set[int], set[int]]:
    """(host nodes of the recompute, GPU nodes they launched) of a critical-path graph (found once
    per graph, ``Graph.memo``; new sets each call): :func:`_recompute_nodes`."""
    hosts, gpus = per_graph(
        g, "recompute_nodes", lambda: tuple(map(frozenset, _recompute_nodes(g)))
    )
    return set(hosts), set(gpus)


def _recompute_nodes(g: Graph) -> tuple[set[int], set[int]]:
    """(host nodes of the recompute, GPU nodes they launched) of a critical-path graph. The spans
    are the graph's own host events: a **holding** span is an ``autograd::engine::evaluate_function``
    event that holds a forward op (of :data:`FORWARD_OPS`, or re-run by its sequence:
    :func:`rerun_mask`) on its thread (the backward function whose
    saved tensors set off the re-run). A host node of that thread inside a holding span is the
    recompute's unless it lies inside one of the span's own backward ops (an ``aten::`` op that is
    no forward op and lies in none): the forward ops re-run and the checkpoint machinery around
    them (untraced Python: its hooks, the saved tensors' unpacking) go; the backward's own math
    stays. Untraced host nodes take the thread of the node before them on their thread."""
    tid_of: dict[int, int] = {}
    for v in g.order:
        n = g.nodes[v]
        if n.kind != "host":
            continue
        ev = n.event
        if ev is not None and hasattr(ev, "tid"):
            tid_of[v] = int(ev.tid)
        else:
            prev = [ed.src for ed in g.preds[v] if ed.kind == "seq" and ed.src in tid_of]
            if prev:
                tid_of[v] = tid_of[prev[0]]
    evs = {}
    for n in g.nodes:
        ev = n.event
        if n.kind == "host" and ev is not None and hasattr(ev, "tid"):
            evs[(int(ev.tid), int(ev.s), int(ev.e), ev.name)] = ev
    keys = list(evs)
    fwd_names = set(FORWARD_OPS)
    bwd = [k for k in keys if k[3].startswith(_BACKWARD)]

    def arr(ks: list[tuple[int, int, int, str]], i: int) -> Any:
        return np.array([k[i] for k in ks], dtype=np.int64)

    fwd_keys = {k for k in keys if k[3] in fwd_names}
    aten = [k for k in keys if k[3].startswith("aten::")]
    seq_bwd = [k for k in bwd if sequence_backward(k[3])]
    if seq_bwd and aten:  # forward ops of any name re-run, found by their sequence (rerun_mask)
        mask = rerun_mask(
            arr(aten, 0),
            arr(aten, 1),
            arr(aten, 2),
            [k[3] for k in aten],
            arr(seq_bwd, 0),
            arr(seq_bwd, 1),
            arr(seq_bwd, 2),
        )
        fwd_keys.update(k for k, m in zip(aten, mask, strict=True) if m)
    fwd = [k for k in keys if k in fwd_keys]
    if not bwd or not fwd:
        return set(), set()

    held_by = _inside(arr(bwd, 0), arr(bwd, 1), arr(bwd, 2), arr(fwd, 0), arr(fwd, 1))
    fwd = [k for k, b in zip(fwd, held_by, strict=True) if b >= 0]
    if not fwd:
        return set(), set()
    holding = [bwd[int(b)] for b in sorted({int(b) for b in held_by if b >= 0})]
    ft, fs, fe = arr(fwd, 0), arr(fwd, 1), arr(fwd, 2)
    # the backward's own ops: aten ops inside a holding span and inside no forward op
    other = [k for k in keys if k[3].startswith("aten::") and k not in fwd_keys]
    if other:
        ot, os_ = arr(other, 0), arr(other, 1)
        in_hold = _inside(arr(holding, 0), arr(holding, 1), arr(holding, 2), ot, os_) >= 0
        in_fwd = _inside(ft, fs, fe, ot, os_) >= 0
        own = [k for k, h, f in zip(other, in_hold, in_fwd, strict=True) if h and not f]
    else:
        own = []
    hv = [v for v in tid_of if g.nodes[v].kind == "host"]
    if not hv:
        return set(), set()
    ht = np.array([tid_of[v] for v in hv], dtype=np.int64)
    hs = np.array([g.nodes[v].s for v in hv], dtype=np.int64)
    he = np.array([g.nodes[v].e for v in hv], dtype=np.int64)
    at = _inside(arr(holding, 0), arr(holding, 1), arr(holding, 2), ht, hs)
    inside_hold = np.array(
        [i >= 0 and e <= holding[int(i)][2] for i, e in zip(at, he, strict=True)], dtype=bool
    )
    if own:
        mine = _inside(arr(own, 0), arr(own, 1), arr(own, 2), ht, hs) >= 0
        inside_hold &= ~mine
    hosts = {v for v, keep in zip(hv, inside_hold, strict=True) if keep}
    return hosts, _launched_by(g, hosts)
