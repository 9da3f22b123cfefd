"""The critical path of each step: a dependency graph of the trace, replayed and traced back.

**Graph.** Nodes carry a duration (ns) and a category; an edge ``u -> v`` with weight ``w`` says
"``v`` starts no earlier than ``u``'s end (or start, for a *start edge*) + ``w``". Built from:

- **host threads**: the thread of the step annotations ("main") and every other thread that
  launches GPU work (PyTorch's autograd thread), each tiled into consecutive segments, one per
  innermost event (CPU op, runtime call, annotation, or the untraced time between them), chained
  in time order; a run of events on another thread after a pause of at least
  :data:`THREAD_GAP_NS` starts from the main-thread segment running at that moment (a start edge),
  and the main-thread segment that follows its end waits for it (a join);
- **launch -> GPU**: a runtime call (``cudaLaunchKernel``, ``cuLaunchKernel``,
  ``cudaGraphLaunch``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``, ...) starts the GPU activity of
  the same correlation id (a start edge);
- **stream order**: GPU activity on one stream runs in order; a GPU op that started right after
  an op of another stream ended (within :data:`EVENT_WAIT_NS`) waits for it (an event wait), and
  so does one that neither its stream nor its launch started (within
  :data:`MISSED_EVENT_WAIT_NS`);
- **waits on the GPU**: a synchronizing call (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
  ``cudaEventSynchronize``, a synchronous ``cudaMemcpy``, the copy of ``.item()``), or any runtime
  call during which GPU work it waited for ended (a launch into a full queue), ends only after
  the GPU op that ended last inside it: a zero-length head, then a tail from that op's end;
- **collectives across ranks**: :func:`collective_edges` is the hook (none yet: a rank's graph
  holds its own communication kernels and host collectives only).

Edge weights are set from the trace so that **replaying** the graph (every node starts at the
latest of its constraints) gives back the recorded times. The **critical path** of a step
``[a, b)`` is traced back from the segment that ends at ``b`` through the binding predecessor of
each node (the one whose constraint set its start), down to ``a``: its pieces (node time and edge
latency) tile ``[a, b)``, so the "bound by" split sums exactly to the step time.

Categories: ``cpu`` (CPU ops, Python, untraced host time), ``launch`` (launch calls and the
latency from a launch to its GPU start), ``kernels`` (compute kernels, gaps between kernels of a
stream), ``copies`` (memcpy/memset on the GPU, copy calls on the host), ``communication``
(collective kernels and host collectives), ``data_loading`` (inside a DataLoader ``__next__``),
``sync`` (synchronizing calls after their GPU wait). docs/metrics.md, "Critical path".
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import heapq
import itertools
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np
from gpuscope.analysis.event_classes import (
    COMM_RE,
    COMPILED_CALL_RE,
    CONV_OP_RE,
    COPY_CATS,
    DATALOADER_RE,
    GPU_CATS,
    HOST_CATS,
    LAUNCH_APIS,
    OPTIMIZER_RE,
    PAGEABLE_D2H_RE,
    PAGEABLE_H2D_RE,
    PROFILER_STEP_RE,
    RUNTIME_CATS,
    SYNC_APIS,
    is_comm_kernel,
)
from gpuscope.analysis.json_row import JsonRow
from gpuscope.vocabulary.causes import DATA_LOADING

if TYPE_CHECKING:
    from gpuscope.analysis.steps import Window
    from gpuscope.store import Connection

BOUND_BY: tuple[str, ...] = (
    "cpu",
    "launch",
    "kernels",
    "copies",
    "communication",
    DATA_LOADING,
    "sync",
)
"""The "bound by" categories of a critical path, in display order."""

THREAD_GAP_NS = 50_000
"""A pause of at least this long (ns) on a non-main thread ends a run of its work."""
STREAM_GAP_NS = 2_000
"""A GPU op that starts within this long (ns) of an op's end waits for that op."""
EVENT_WAIT_NS = 5_000
"""A GPU op that starts within this long (ns) of the end of an op of another stream waits for it
(an event wait: DDP's all-reduce on its NCCL stream after the backward's last kernel, the compute
stream's next op after the all-reduce). The waiting stream starts 2.5-2.7 µs after the event on
an H200 (sample_traces/validation/v25, torch 2.11), past :data:`STREAM_GAP_NS`: the wait was
missed and the recorded gap held the stream's next op in place whatever the all-reduce took."""
MISSED_EVENT_WAIT_NS = 100_000
"""A GPU op that starts after an idle gap on its stream (over :data:`STREAM_GAP_NS`) and later
than its launch explains (or with no launch in the trace) waited for an event the trace does not
show: it waits for the op of another stream that ended last, within this long (ns) before it.
cuDNN's FFT and Winograd convolutions run on side streams that wait for the main stream's op
before them: they started 5-64 µs after it (sample_traces/validation v45, v57: fp32, H100/H200,
torch 2.11), past :data:`EVENT_WAIT_NS`, and the recorded idle gap on the side stream (up to a
step long: one op per step) held them in place whatever the main stream took."""
BLOCKING_LAUNCH_NS = 50_000
"""A launch call at least this long (ns) during which GPU work ended waited for the GPU (a full
launch queue)."""
MAX_EVENTS = 300_000
"""Windows with more host and GPU events than this get no critical path (it is built in Python:
about 1 s per 10,000 events on a loaded 2-core VM)."""
DEFAULT_LAUNCH_LATENCY_NS = 5_000
"""Launch-to-start latency (ns) assumed when no launch-bound GPU op of the trace shows it."""

_gc_lock = threading.Lock()
_gc_paused_by = 0  # sections inside gc_paused now (any thread)
_gc_was_on = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside (a context manager, or a decorator:
    ``@gc_paused()``), back to what it was once the last section of any thread ends. A graph
    and its replays make a few hundred thousand objects (nodes, edges, events), none of them in
    a cycle: each collection the allocations set off walks every object of the process (half
    of :func:`critical_path_of`'s CPU time on the sample traces)."""
    global _gc_paused_by, _gc_was_on
    with _gc_lock:
        if _gc_paused_by == 0:
            _gc_was_on = gc.isenabled()
            gc.disable()
        _gc_paused_by += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_paused_by -= 1
            if _gc_paused_by == 0 and _gc_was_on:
                gc.enable()


_COPY_API = re.compile(r"^(cuda|hip|cu)(Memcpy|Memset)")
_STEP = re.compile(PROFILER_STEP_RE)
_DL = re.compile(DATALOADER_RE)
_COMM_HOST = re.compile(COMM_RE)
_OPT = re.compile(OPTIMIZER_RE)
_CONV_OP = re.compile(CONV_OP_RE)
_COMPILED = re.compile(COMPILED_CALL_RE)
_PAGEABLE_H2D = re.compile(PAGEABLE_H2D_RE)
_PAGEABLE_D2H = re.compile(PAGEABLE_D2H_RE)
_SYNC = frozenset(SYNC_APIS)
_LAUNCH = frozenset(LAUNCH_APIS)
_RUNTIME = frozenset(RUNTIME_CATS)


@dataclass(frozen=True)
class HostEvent:
    """A host span: a CPU op, annotation, Python function or runtime call (ns, trace time)."""

    name: str
    cat: str
    s: int
    e: int
    tid: int
    correlation: int | None = None


@dataclass(frozen=True)
class GpuEvent:
    """GPU activity: a kernel, memcpy or memset on ``stream`` (ns); ``blocks``: grid size."""

    name: str
    cat: str
    s: int
    e: int
    stream: int
    correlation: int | None = None
    bytes: int | None = None
    blocks: int | None = None


@dataclass
class Node:
    """One node of the graph. ``kind``: ``host`` or ``gpu``; ``tags``: what a fix may change
    (``dataloader``, ``optimizer``, ``launch_call``, ``copy_call``, ``sync_tail``, ``gemm``...);
    ``event``: the host or GPU event it comes from (None for untraced host time)."""

    kind: str
    cat: str
    s: int
    e: int
    label: str
    tags: frozenset[str] = frozenset()
    event: HostEvent | GpuEvent | None = None

    @property
    def dur(self) -> int:
        return self.e - self.s


class Edge(NamedTuple):
    """``dst`` starts no earlier than ``src``'s end (``from_start``: its start) + ``w`` ns.
    ``cat``: the category of the latency ``w`` when it lies on the critical path; ``kind``:
    ``seq`` (thread order), ``spawn``, ``join``, ``launch``, ``stream``, ``event_wait``, ``wait``
    (a synchronizing call on the GPU op), ``collective``. A named tuple: a rank's graph has tens
    of thousands (a frozen dataclass's init cost ~5 us each)."""

    src: int
    w: int
    from_start: bool
    cat: str
    kind: str


_new_edge: Callable[[tuple[int, int, bool, str, str]], Edge] = functools.partial(
    tuple.__new__, Edge
)
"""``Edge`` from a tuple of its fields, in C (a named tuple's ``__new__`` is a Python call)."""


@dataclass
class Graph:
    """Nodes, incoming edges per node, and a topological order. ``release[i]``: the start of a
    node with no incoming edge (its recorded start)."""

    nodes: list[Node] = field(default_factory=list)
    preds: list[list[Edge]] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    """What the replays derive from the finished graph (:mod:`gpuscope.analysis.gains`: the
    recorded durations, the profiled nodes, the replay's schedule), read once per graph; emptied
    by :meth:`finish` (nodes and edges do not change after it)."""

    def add(self, node: Node) -> int:
        self.nodes.append(node)
        self.preds.append([])
        return len(self.nodes) - 1

    def edge(self, dst: int, src: int, w: int, *, from_start: bool, cat: str, kind: str) -> None:
        self.preds[dst].append(_new_edge((src, int(w), from_start, cat, kind)))

    def finish(self) -> None:
        """Topological order (Kahn), recorded start as the tie-breaker; raises on a cycle."""
        n = len(self.nodes)
        succ: list[list[int]] = [[] for _ in range(n)]
        indeg = [0] * n
        for v, es in enumerate(self.preds):
            for ed in es:
                succ[ed.src].append(v)
                indeg[v] += 1
        heap = [(self.nodes[v].s, v) for v in range(n) if indeg[v] == 0]
        heapq.heapify(heap)
        order: list[int] = []
        while heap:
            _, u = heapq.heappop(heap)
            order.append(u)
            for v in succ[u]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    heapq.heappush(heap, (self.nodes[v].s, v))
        if len(order) != n:
            raise ValueError("critical path: the dependency graph has a cycle")
        self.order = order
        self.memo.clear()


_T = TypeVar("_T")


def per_graph(g: Graph, key: str, compute: Callable[[], _T]) -> _T:
    """``compute()``, once per graph (kept in ``g.memo`` until :meth:`Graph.finish`: what the
    fixes' re-timings read of the finished graph, each of them again); its value must not be
    changed by the caller (a frozenset, a tuple). A graph-like object without a memo: each call."""
    memo = getattr(g, "memo", None)
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]  # type: ignore[no-any-return]


@gc_paused()
def replay(
    g: Graph,
    dur: Callable[[int, Node], float] | Sequence[float] | None = None,
    keep: Callable[[int, Edge], bool] | None = None,
    *,
    drop: set[tuple[int, int]] | None = None,
) -> tuple[list[float], list[float], list[int]]:
    """Longest-path schedule: (starts, ends, binding edge index per node, -1 for none). ``dur``:
    each node's duration, a function or a list (default: recorded); ``keep`` / ``drop``: edges
    left out (a function returning False, or a set of (node, edge index)). As recorded with
    every edge: :func:`_replay_recorded` (the same sums, a chain's at once)."""
    if dur is None and keep is None and not drop:
        return _replay_recorded(g)
    n = len(g.nodes)
    if dur is None:
        d = [float(x.dur) for x in g.nodes]
    elif callable(dur):
        d = [max(0.0, float(dur(v, x))) for v, x in enumerate(g.nodes)]
    else:
        d = [max(0.0, float(x)) for x in dur]
    if keep is not None:
        drop = (drop or set()) | {
            (v, i) for v, es in enumerate(g.preds) for i, ed in enumerate(es) if not keep(v, ed)
        }
    S = [0.0] * n
    E = [0.0] * n
    bind = [-1] * n
    preds = g.preds
    nodes = g.nodes
    for v in g.order:
        best = -math.inf
        bi = -1
        for i, (src, w, from_start, _cat, _kind) in enumerate(preds[v]):
            if drop and (v, i) in drop:
                continue
            t = (S[src] if from_start else E[src]) + w
            if t > best:
                best, bi = t, i
        if bi < 0:
            best = float(nodes[v].s)
        S[v] = best
        E[v] = best + d[v]
        bind[v] = bi
    return S, E, bind


CHAIN, NODE = "chain", "node"
"""The kinds of step of :func:`replay_schedule`."""

Step = tuple[Any, ...]
"""A step of :func:`replay_schedule`: ``(CHAIN, head step, head row, members, weights, head
node, from its start)`` or ``(NODE, node, edges, release)``."""


def replay_schedule(g: Graph, general: frozenset[int]) -> list[Step]:
    """The order :func:`replay` (recorded durations, every edge) and
    :func:`~gpuscope.analysis.gains.makespans` replay the graph in: a list of steps, each a **chain** (nodes
    ``v1..vm`` with one incoming edge each, ``v1``'s from a node of an earlier step, each next
    one's from the end of the one before: their starts and ends are one running sum, ``[x, w1,
    d1, w2, d2, ...]``, the sums the replay takes node by node) or a single **node** (several
    incoming edges or none, or one of ``general``: edges a replay drops). A step's rows: a
    chain's ``2k+1`` (start of its k-th node, k from 0) and ``2k+2`` (end); a node's 0 and 1.
    Each step comes after the steps its edges leave from (a chain at its first node's place in
    the graph's topological order). Read once per graph and ``general``."""
    key = ("schedule", general)
    got = g.memo.get(key)
    if got is not None:
        return got  # type: ignore[no-any-return]
    preds = g.preds
    # a pass in topological order: each chain as (members, weights, head node, head from start),
    # each general node as its index; a chain's last node is open to the next one's edge
    raw: list[Any] = []
    tail_of: dict[int, tuple[list[int], list[int], int, bool]] = {}
    for v in g.order:
        es = preds[v]
        if len(es) == 1 and v not in general:
            src, w, from_start, _cat, _kind = es[0]
            chain = None if from_start else tail_of.pop(src, None)
            if chain is None:
                chain = ([v], [w], src, from_start)
                raw.append(chain)
            else:
                chain[0].append(v)
                chain[1].append(w)
            tail_of[v] = chain
        else:
            raw.append(v)
    # where each node's rows are: its step, the row of its start (its end: the next row)
    n = len(g.nodes)
    owner_np = np.zeros(n, dtype=np.intp)
    srow_np = np.zeros(n, dtype=np.intp)
    members_of: list[np.ndarray | None] = []
    for si, st in enumerate(raw):
        if isinstance(st, int):
            owner_np[st] = si
            members_of.append(None)
        else:
            members = np.asarray(st[0], dtype=np.intp)
            owner_np[members] = si
            srow_np[members] = np.arange(1, 2 * len(members), 2)
            members_of.append(members)
    owner, srow = owner_np.tolist(), srow_np.tolist()
    nodes = g.nodes
    steps: list[Step] = []
    for st, chain_members in zip(raw, members_of, strict=True):
        if chain_members is not None:
            _, ws, src, from_start = st
            steps.append(
                (
                    CHAIN,
                    owner[src],
                    srow[src] + (0 if from_start else 1),
                    chain_members,
                    np.asarray(ws, dtype="float64").reshape(-1, 1),
                    src,
                    from_start,
                )
            )
        else:
            edges = [
                (owner[src], srow[src] + (0 if fs else 1), w, (st, i))
                for i, (src, w, fs, _c, _k) in enumerate(preds[st])
            ]
            steps.append((NODE, st, edges, float(nodes[st].s)))
    if general:  # a fix's dropped edges: the last MAX_DROP_SCHEDULES such schedules are kept
        kept = [k for k in g.memo if isinstance(k, tuple) and k[0] == "schedule" and k[1]]
        for old in kept[: max(0, len(kept) - MAX_DROP_SCHEDULES + 1)]:
            del g.memo[old]
    g.memo[key] = steps
    return steps


MAX_DROP_SCHEDULES = 4
"""Schedules of :func:`replay_schedule` kept per graph for sets of nodes whose edges a fix drops
(besides the one with every edge): each holds a few arrays as long as the graph's nodes."""


def _replay_recorded(g: Graph) -> tuple[list[float], list[float], list[int]]:
    """:func:`replay` with the recorded durations and every edge, along
    :func:`replay_schedule`: a chain's starts and ends are one running sum
    (:func:`itertools.accumulate` of ``[x, w1, d1, w2, d2, ...]``: the additions the node by
    node replay makes, in its order), its nodes bound by their one edge; a node of several
    edges (or none) as :func:`replay` takes it."""
    n = len(g.nodes)
    nodes, preds = g.nodes, g.preds
    d = [float(x.dur) for x in nodes]
    S = [0.0] * n
    E = [0.0] * n
    bind = [-1] * n
    for st in replay_schedule(g, frozenset()):
        if st[0] is CHAIN:
            members = st[3].tolist()
            x = S[st[5]] if st[6] else E[st[5]]
            seq = [x] * (2 * len(members) + 1)
            seq[1::2] = st[4].ravel().tolist()
            seq[2::2] = [d[v] for v in members]
            run = list(itertools.accumulate(seq))
            for v, s_, e_ in zip(members, run[1::2], run[2::2], strict=True):
                S[v] = s_
                E[v] = e_
                bind[v] = 0
            continue
        v = st[1]
        best = -math.inf
        bi = -1
        for i, (src, w, from_start, _cat, _kind) in enumerate(preds[v]):
            t = (S[src] if from_start else E[src]) + w
            if t > best:
                best, bi = t, i
        if bi < 0:
            best = float(nodes[v].s)
        S[v] = best
        E[v] = best + d[v]
        bind[v] = bi
    return S, E, bind


# -- building ------------------------------------------------------------------------------------


_OPT_BIT, _DL_BIT, _COMM_BIT, _CONV_BIT, _COMPILED_BIT = 1, 2, 4, 8, 16


@functools.lru_cache(maxsize=65536)
def _name_bits(name: str) -> int:
    """What a host event's name says, as bits: optimizer, DataLoader, host collective, a call
    into torch.compile's graphs."""
    return (
        (_OPT_BIT if _OPT.search(name) else 0)
        | (_DL_BIT if _DL.search(name) else 0)
        | (_COMM_BIT if _COMM_HOST.search(name) else 0)
        | (_COMPILED_BIT if _COMPILED.search(name) else 0)
    )


def _host_cat(stack: list[HostEvent], ev: HostEvent | None) -> tuple[str, frozenset[str]]:
    """Category and tags of a host segment whose innermost event is ``ev`` (stack: outer first)."""
    bits = 0
    for h in stack:
        bits |= _name_bits(h.name)
    for h in reversed(stack):  # the innermost operator decides whose kernels a launch makes
        if h.cat == "cpu_op":
            if _CONV_OP.search(h.name):
                bits |= _CONV_BIT
            break
    if ev is None:
        return _host_cat_of(bits, False, "", "")
    return _host_cat_of(bits, True, ev.name, ev.cat)


@functools.lru_cache(maxsize=65536)
def _host_cat_of(bits: int, has_ev: bool, name: str, cat: str) -> tuple[str, frozenset[str]]:
    """:func:`_host_cat` from the stack's :func:`_name_bits` (or-ed) and the innermost event's
    name and category (``has_ev``: whether there is one): read once per distinct key."""
    tags = {"optimizer"} if bits & _OPT_BIT else set()
    if bits & _COMPILED_BIT:
        tags.add("compiled_call")
    if bits & _DL_BIT:
        return DATA_LOADING, frozenset(tags | {"dataloader"})
    runtime = has_ev and cat in _RUNTIME
    if runtime:
        if name in _LAUNCH:
            conv = {"conv_launch"} if bits & _CONV_BIT else set()
            return "launch", frozenset(tags | {"launch_call"} | conv)
        if _COPY_API.match(name):
            return "copies", frozenset(tags | {"copy_call"})
        if name in _SYNC:
            return "sync", frozenset(tags)
    if bits & _COMM_BIT:
        return "communication", frozenset(tags)
    return "cpu", frozenset(tags | ({"cpu_op"} if has_ev and not runtime else set()))


def _gpu_cat(ev: GpuEvent) -> str:
    return _gpu_class(ev.cat, ev.name)[0]


_GEMM = re.compile(r"gemm|sgemm|cutlass|nvjet|cublas|ampere_|sm\d+_xmma|matmul", re.IGNORECASE)
_CONV = re.compile(r"conv|cudnn|implicit_gemm|winograd|fft2d|xmma_fprop|dgrad|wgrad", re.IGNORECASE)


_CONV_CALL = frozenset({"conv_call"})
"""The tag of a GPU event launched by a convolution operator (``CONV_OP_RE`` the innermost
operator around its launch): what the convolution's algorithm runs, helpers included."""


def _gpu_tags(ev: GpuEvent) -> frozenset[str]:
    return _gpu_class(ev.cat, ev.name)[1]


@functools.lru_cache(maxsize=65536)
def _gpu_class(cat: str, name: str) -> tuple[str, frozenset[str]]:
    """(category, tags) of a GPU event: read once per category and name (a step repeats its
    kernels; the patterns cost ~30 µs a name)."""
    tags: set[str] = set()
    if cat in COPY_CATS:
        if _PAGEABLE_H2D.search(name):
            tags.add("pageable_h2d")
        if _PAGEABLE_D2H.search(name):
            tags.add("pageable_d2h")
        return "copies", frozenset(tags)
    if is_comm_kernel(name):
        return "communication", frozenset({"comm"})
    if _CONV.search(name):
        tags.add("conv")
    elif _GEMM.search(name):
        tags.add("gemm")
    return "kernels", frozenset(tags)


def _tile(events: list[HostEvent], lo: int, hi: int) -> list[tuple[int, int, list[HostEvent]]]:
    """Elementary segments of ``[lo, hi)`` with the stack of events covering each (outer first);
    events are assumed properly nested (a child that outlives its parent is clipped to it).
    Neighbours with the same innermost event (equal, at the same depth) are one segment."""
    evs = sorted((e for e in events if e.e > lo and e.s < hi), key=lambda e: (e.s, -e.e))
    # every kept event has s < hi and e > lo: max(lo, s) is lo or s, min(hi, e) is hi or e
    points = sorted({lo, hi, *(e.s for e in evs if e.s > lo), *(e.e for e in evs if e.e < hi)})
    out: list[tuple[int, int, list[HostEvent]]] = []
    stack: list[HostEvent] = []
    k = 0
    n = len(evs)
    for a, b in itertools.pairwise(points):
        while stack and stack[-1].e <= a:
            stack.pop()
        while k < n and evs[k].s <= a:
            ev = evs[k]
            k += 1
            if ev.e <= a:
                continue
            while stack and stack[-1].e <= a:
                stack.pop()
            if stack and ev.e > stack[-1].e:  # overlaps its parent's end: clip to it
                ev = HostEvent(ev.name, ev.cat, ev.s, stack[-1].e, ev.tid, ev.correlation)
            stack.append(ev)
        if out:
            prev = out[-1][2]
            if len(prev) == len(stack) and (not stack or _same_event(prev[-1], stack[-1])):
                out[-1] = (out[-1][0], b, prev)
                continue
        out.append((a, b, list(stack)))
    return out


def _same_event(x: HostEvent, y: HostEvent) -> bool:
    """``x == y``, its field-by-field comparison skipped where the objects or starts tell."""
    return x is y or (x.s == y.s and x == y)


def _nested_in(evs: list[HostEvent], blocking: Iterable[HostEvent]) -> set[int]:
    """The ``id`` of every event of ``evs`` that lies within one of ``blocking`` (start and end
    inside it, the call itself left out). By start time with a bisection: O(E log E + the events
    inside), not E × B (60,000 launches with their blocking calls took 343 s as a set of pairs)."""
    order = sorted(evs, key=lambda h: h.s)
    starts = [h.s for h in order]
    inside: set[int] = set()
    for b in blocking:
        i = bisect.bisect_left(starts, b.s)
        while i < len(order) and starts[i] <= b.e:
            h = order[i]
            if h is not b and h.e <= b.e:
                inside.add(id(h))
            i += 1
    return inside


@gc_paused()
def build_graph(
    host: Iterable[HostEvent],
    gpu: Iterable[GpuEvent],
    main_tid: int,
    start_ns: int,
    end_ns: int,
) -> Graph:
    """The dependency graph of ``[start_ns, end_ns)`` from one rank's host events (every thread)
    and the GPU activity of one device. ``main_tid``: the thread of the step annotations."""
    host = [h for h in host if h.e > h.s or h.cat in _RUNTIME]
    gpu = sorted((x for x in gpu if x.e > x.s), key=lambda x: (x.s, x.e))
    gpu_by_corr: dict[int, list[int]] = {}
    for i, x in enumerate(gpu):
        if x.correlation is not None:
            gpu_by_corr.setdefault(x.correlation, []).append(i)
    launch_tids = {h.tid for h in host if h.correlation in gpu_by_corr}
    tids = [main_tid, *sorted(t for t in launch_tids if t != main_tid)]
    host_of: dict[int, list[HostEvent]] = {}
    for h in host:
        host_of.setdefault(h.tid, []).append(h)
    g = Graph()
    gpu_node: dict[int, int] = {}
    launcher_node: dict[int, int] = {}  # gpu index -> host node that launched it (start edge)
    waits: list[tuple[int, int, int, int]] = []  # (tail, head, call start, call end)
    tiles: dict[int, list[tuple[int, int, list[HostEvent]]]] = {}
    blocking_of: dict[int, dict[HostEvent, tuple[int, int | None]]] = {}
    for tid in tids:
        evs = host_of.get(tid, [])
        if not evs:
            continue
        lo = start_ns if tid == main_tid else max(start_ns, min(h.s for h in evs))
        hi = max(h.e for h in evs)
        hi = max(hi, start_ns) if tid == main_tid else min(hi, end_ns)
        if hi <= lo:
            continue
        blocking = _blocking_calls(evs, gpu, gpu_by_corr)
        blocking_of[tid] = blocking
        # a blocking call is a leaf: nothing nested inside it is tiled
        inside = _nested_in(evs, blocking)
        tiles[tid] = _tile([h for h in evs if id(h) not in inside], lo, hi)
    # runs of work on the other threads (split by pauses of THREAD_GAP_NS)
    runs: dict[int, list[tuple[int, int]]] = {}
    for tid, segs in tiles.items():
        if tid == main_tid:
            continue
        rr: list[list[int]] = []
        for a, b, st in segs:
            if not st:
                continue
            if rr and a - rr[-1][1] < THREAD_GAP_NS:
                rr[-1][1] = b
            else:
                rr.append([a, b])
        runs[tid] = [(a, b) for a, b in rr]
    # split the main thread where another thread's run ends, and where one starts (the spawn
    # then leaves from a segment's start: its offset is main-thread time, scaled like it)
    cuts = sorted({t for rr in runs.values() for r in rr for t in r})
    if main_tid in tiles and cuts:
        cut: list[tuple[int, int, list[HostEvent]]] = []
        for seg in tiles[main_tid]:
            a, b, st = seg
            inner_cuts = cuts[bisect.bisect_right(cuts, a) : bisect.bisect_left(cuts, b)]
            if not inner_cuts:
                cut.append(seg)
                continue
            cut += [(x, y, st) for x, y in itertools.pairwise([a, *inner_cuts, b])]
        tiles[main_tid] = cut
    seg_nodes: dict[int, list[int]] = {}
    # id(innermost event) -> (_host_cat, its blocking entry): read once per event
    cat_of: dict[int, tuple[str, frozenset[str], tuple[int, int | None] | None]] = {}
    run_first: dict[tuple[int, int], int] = {}  # (tid, run start) -> first node of the run
    run_last: dict[int, int] = {}  # run end -> last node of the run (any thread)
    run_start_of_end: dict[int, int] = {}
    g_nodes, g_preds = g.nodes, g.preds  # g.add and the seq edge, inlined below (per segment)
    for tid in [t for t in tids if t != main_tid] + [main_tid]:
        if tid not in tiles:
            continue
        is_main = tid == main_tid
        blocking = blocking_of[tid]
        nodes: list[int] = []
        prev: int | None = None
        pending_join = -1
        my_runs = runs.get(tid, [])
        start_of_my_end = {r1: r0 for r0, r1 in my_runs}
        for a, b, st in tiles[tid]:
            if st:
                inner: HostEvent | None = st[-1]
                key = id(inner)
            elif not is_main and not any(r0 < a and b < r1 for r0, r1 in my_runs):
                prev = None  # a pause: the next run is spawned by the main thread
                continue
            else:
                inner = None
                key = 0
            # a segment's stack is fixed by its innermost event (pushed once, popped first)
            got = cat_of.get(key)
            if got is None:
                got = cat_of[key] = (
                    *_host_cat(st, inner),
                    blocking.get(inner) if inner is not None else None,
                )
            cat, tags, blocked = got
            label = inner.name if inner is not None else "(untraced host time)"
            if blocked is not None and inner is not None:
                ws, _gi = blocked
                htags = frozenset(tags | {"sync_head"})
                head = g.add(Node("host", "sync", a, a, label, htags, inner))
                tail_s = max(a, ws)
                is_copy = bool(_COPY_API.match(inner.name))
                ctags = frozenset(tags | {"sync_tail"} | ({"copy_call"} if is_copy else set()))
                tail = g.add(
                    Node("host", "copies" if is_copy else "sync", tail_s, b, label, ctags, inner)
                )
                if prev is not None:
                    g.edge(head, prev, 0, from_start=False, cat="cpu", kind="seq")
                waits.append((tail, head, a, b))
                nodes += [head, tail]
                _register_launch(inner, head, gpu_by_corr, launcher_node)
                prev = tail
                continue
            if is_main and b in run_start_of_end and a <= run_start_of_end[b]:
                # the main thread spent the whole run of another thread in this segment:
                # it waited for it (loss.backward() on the autograd thread)
                node = Node("host", cat, a, a, label, frozenset(tags | {"thread_wait"}), inner)
                pending_join = b
            else:
                node = Node("host", cat, a, b, label, tags, inner)
            v = len(g_nodes)
            g_nodes.append(node)
            # the edge from the segment before: g.edge(v, prev, 0, from_start=False, "cpu", "seq")
            g_preds.append([_new_edge((prev, 0, False, "cpu", "seq"))] if prev is not None else [])
            if is_main:
                if a == pending_join and a in run_last:
                    g.edge(v, run_last[a], 0, from_start=False, cat="cpu", kind="join")
            elif prev is None:
                run_first[(tid, a)] = v
            if inner is not None and inner.correlation is not None and inner.cat in _RUNTIME:
                _register_launch(inner, v, gpu_by_corr, launcher_node)
            nodes.append(v)
            prev = v
            if not is_main and b in start_of_my_end:
                run_last[b] = v
                run_start_of_end[b] = start_of_my_end[b]
        seg_nodes[tid] = nodes
    main_nodes = seg_nodes.get(main_tid, [])
    main_starts = [g.nodes[v].s for v in main_nodes]
    for (_tid, a), v in run_first.items():  # each run of another thread starts from the main one
        u = _covering(main_starts, main_nodes, a)
        if u is not None:
            g.edge(v, u, a - g.nodes[u].s, from_start=True, cat="cpu", kind="spawn")
    # GPU nodes
    for i, x in enumerate(gpu):
        tags = _gpu_tags(x)
        lv = launcher_node.get(i)
        if lv is not None and "conv_launch" in g.nodes[lv].tags:
            tags = tags | _CONV_CALL
        gpu_node[i] = g.add(Node("gpu", _gpu_cat(x), x.s, x.e, x.name, tags, x))
    lat = _typical_latency(g, gpu, gpu_node, launcher_node)
    last_on_stream: dict[int, int] = {}
    ends_sorted: list[tuple[int, int, int]] = []  # (end, stream, gpu index) of earlier ops
    for i, x in enumerate(gpu):
        v = gpu_node[i]
        cands: list[tuple[float, int, int, bool, str, str, int]] = []
        p = last_on_stream.get(x.stream)
        if p is not None:
            cands.append((gpu[p].e, 0, gpu_node[p], False, "kernels", "stream", 0))
        lv = launcher_node.get(i)
        if lv is not None:
            cands.append((g.nodes[lv].s, lat, lv, True, "launch", "launch", 0))
        other = _other_stream_end(ends_sorted, x)
        if (
            other is None
            and len(last_on_stream) > (x.stream in last_on_stream)  # another stream ran before
            and (p is None or x.s - gpu[p].e > STREAM_GAP_NS)
            and (lv is None or x.s - (g.nodes[lv].s + lat) > STREAM_GAP_NS)
        ):  # neither its stream nor its launch started it: an event wait held it
            other = _other_stream_end(ends_sorted, x, MISSED_EVENT_WAIT_NS, 256)
        if other is not None:
            cands.append(
                (gpu[other].e, 0, gpu_node[other], False, _gpu_cat(gpu[other]), "event_wait", 1)
            )
        if cands:
            # binding: the constraint that leaves the least slack before the recorded start
            cands.sort(key=lambda c: (x.s - (c[0] + c[1]), c[6]))
            b0 = cands[0]
            for c in cands:
                if c is b0:
                    g.edge(v, c[2], int(x.s - c[0]), from_start=c[3], cat=c[4], kind=c[5])
                elif c[5] != "event_wait":
                    g.edge(
                        v, c[2], int(min(c[1], x.s - c[0])), from_start=c[3], cat=c[4], kind=c[5]
                    )
        last_on_stream[x.stream] = i
        ends_sorted.append((x.e, x.stream, i))
    # waits on the GPU: the tail of a blocking call starts after the op that ended last inside it
    ends = sorted((x.e, i) for i, x in enumerate(gpu))
    keys = [e for e, _ in ends]
    for tail, head, cs, ce in waits:
        best = None
        j = bisect.bisect_right(keys, ce) - 1
        while j >= 0 and keys[j] > cs:
            i = ends[j][1]
            lv = launcher_node.get(i)
            if lv is None or g.nodes[lv].s <= cs:
                best = i
                break
            j -= 1
        t = g.nodes[tail]
        if best is not None:
            g.edge(tail, head, 0, from_start=False, cat="sync", kind="seq")
            g.edge(
                tail, gpu_node[best], t.s - gpu[best].e, from_start=False, cat="sync", kind="wait"
            )
        else:
            g.edge(tail, head, t.s - cs, from_start=False, cat="sync", kind="seq")
    _stream_wait_edges(g, host, gpu, gpu_by_corr, gpu_node)
    collective_edges(g)
    g.finish()
    return g


_EVENT_RECORD = frozenset(
    {"cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags"}
    | {"hipEventRecord", "hipEventRecordWithFlags"}
)
_STREAM_WAIT = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent"})


def _stream_wait_edges(
    g: Graph,
    host: list[HostEvent],
    gpu: list[GpuEvent],
    gpu_by_corr: dict[int, list[int]],
    gpu_node: dict[int, int],
) -> None:
    """The waits of one stream on another that the host asked for, as edges, whether or not
    they held the GPU op back in the trace (an event wait is an edge above only where it binds).
    On each thread, in call order: ``cudaEventRecord`` marks the GPU op that thread launched last
    (the event completes with it: the stream it was recorded on has nothing later of this
    thread's), ``cudaStreamWaitEvent`` makes the next GPU op the thread launches wait for the op
    of the latest record. Kineto writes neither call's stream or event, so this reads them from
    the order of the calls: FSDP's ``wait_stream`` / ``wait_event`` and ProcessGroupNCCL's stream
    syncs record and wait right before the launch they order. Kept only across streams and where
    the trace agrees (the waited op ended before the waiting one started). A host-bound trace
    then keeps its streams' order when a fix's replay speeds the host up: FSDP's all-gathers,
    gated by the compute before them, stay on the path (v170)."""
    calls: dict[int, list[HostEvent]] = {}
    for h in host:
        if h.cat in _RUNTIME and (
            h.name in _EVENT_RECORD or h.name in _STREAM_WAIT or h.correlation in gpu_by_corr
        ):
            calls.setdefault(h.tid, []).append(h)
    for evs in calls.values():
        evs.sort(key=lambda h: (h.s, h.e))
        last: int | None = None  # the GPU op this thread launched last
        recorded: int | None = None  # ... when the latest event was recorded
        pending: list[int] = []  # the ops the next launch waits for
        for h in evs:
            if h.name in _EVENT_RECORD:
                recorded = last
                continue
            if h.name in _STREAM_WAIT:
                if recorded is not None:
                    pending.append(recorded)
                continue
            ops = gpu_by_corr.get(h.correlation) if h.correlation is not None else None
            if not ops:
                continue
            k = min(ops, key=lambda i: gpu[i].s)
            v = gpu_node.get(k)
            for p in pending:
                u = gpu_node.get(p)
                if (
                    u is None
                    or v is None
                    or gpu[p].stream == gpu[k].stream
                    or gpu[p].e > gpu[k].s
                    or any(ed.src == u for ed in g.preds[v])
                ):
                    continue
                g.edge(v, u, 0, from_start=False, cat=_gpu_cat(gpu[p]), kind="event_wait")
            pending = []
            last = max(ops, key=lambda i: gpu[i].e)


def collective_edges(g: Graph) -> None:
    """Hook for collectives across ranks: an edge from the last rank to reach a collective to the
    communication kernels of the others. Nothing yet: one rank's graph is built alone (the
    collectives module, when merged, supplies the matched collectives)."""
    return None


def _register_launch(
    ev: HostEvent, node: int, gpu_by_corr: dict[int, list[int]], launcher: dict[int, int]
) -> None:
    if ev.correlation is None:
        return
    for i in gpu_by_corr.get(ev.correlation, []):
        launcher.setdefault(i, node)


def _blocking_calls(
    evs: list[HostEvent], gpu: list[GpuEvent], gpu_by_corr: dict[int, list[int]]
) -> dict[HostEvent, tuple[int, int | None]]:
    """Runtime calls that waited for the GPU: {call: (end of the awaited GPU op, its index)}: a
    synchronizing call, a launch of :data:`BLOCKING_LAUNCH_NS` or more, a call whose own GPU op
    ended inside it, or one of :data:`BLOCKING_LAUNCH_NS` or more whose own GPU op started inside
    it (a copy from pageable memory); the awaited op is the one that ended last inside it."""
    out: dict[HostEvent, tuple[int, int | None]] = {}
    ends = sorted((x.e, i) for i, x in enumerate(gpu))
    keys = [e for e, _ in ends]
    for h in evs:
        if h.cat not in _RUNTIME or h.e <= h.s:
            continue
        own = [i for i in gpu_by_corr.get(h.correlation, [])] if h.correlation is not None else []
        if (
            h.name in _SYNC
            or (h.name in _LAUNCH and h.e - h.s >= BLOCKING_LAUNCH_NS)
            or any(h.s < gpu[i].e <= h.e for i in own)
            # a copy from pageable memory returns only once its op has run, and that op waits
            # for the stream to reach it: it starts inside the long call and may end just after
            # it (v38: 97 ms calls, each op 10 µs past its call's end)
            or (h.e - h.s >= BLOCKING_LAUNCH_NS and any(h.s < gpu[i].s <= h.e for i in own))
        ):
            j = bisect.bisect_right(keys, h.e) - 1
            if j >= 0 and keys[j] > h.s:
                out[h] = (keys[j], ends[j][1])
    return out


def _covering(starts: list[int], nodes: list[int], t: int) -> int | None:
    """The node of ``nodes`` (time-ordered, starting at ``starts``) running at ``t`` (else the
    last one before it)."""
    j = bisect.bisect_right(starts, t) - 1
    return nodes[j] if j >= 0 else None


def _first_after(g: Graph, nodes: list[int], t: int) -> int | None:
    """The first node of ``nodes`` that starts at or after ``t``."""
    starts = [g.nodes[v].s for v in nodes]
    j = bisect.bisect_left(starts, t)
    return nodes[j] if j < len(nodes) else None


def _other_stream_end(
    ends: list[tuple[int, int, int]], x: GpuEvent, within_ns: int = EVENT_WAIT_NS, back: int = 64
) -> int | None:
    """The op of another stream that ended last, within ``within_ns`` before ``x`` started (among
    the last ``back`` ops to start)."""
    best = None
    for e, stream, i in reversed(ends[-back:]):
        if stream != x.stream and x.s - within_ns <= e <= x.s and (best is None or e > best[0]):
            best = (e, i)
    return best[1] if best else None


def _typical_latency(
    g: Graph, gpu: list[GpuEvent], gpu_node: dict[int, int], launcher: dict[int, int]
) -> int:
    """Median launch-to-start latency (ns) of GPU ops that started on an idle stream."""
    last: dict[int, int] = {}
    lats: list[int] = []
    for i, x in enumerate(gpu):
        lv = launcher.get(i)
        prev_end = last.get(x.stream)
        if lv is not None and (prev_end is None or x.s - prev_end > STREAM_GAP_NS):
            d = x.s - g.nodes[lv].s
            if 0 <= d <= 1_000_000:
                lats.append(d)
        last[x.stream] = x.e
    if not lats:
        return DEFAULT_LAUNCH_LATENCY_NS
    lats.sort()
    return lats[len(lats) // 2]


# -- the path ----------------------------------------------------------------------------------


@dataclass
class PathPiece:
    """A piece of a critical path: ``[s, e)`` ns, its category and what it is (a node's label,
    or the edge latency ``launch latency`` / ``stream gap`` ...)."""

    s: int
    e: int
    cat: str
    what: str
    kind: str


def trace_back(
    g: Graph, S: list[float], E: list[float], bind: list[int], a: int, b: int, end_node: int
) -> list[PathPiece]:
    """The critical path of ``[a, b)`` ending at ``end_node``: pieces that tile ``[a, b)``
    exactly (time order). Time after the end node's end up to ``b`` is the end node's category."""
    return [PathPiece(*p) for p in _trace_back(g, S, E, bind, a, b, end_node)]


def _trace_back(
    g: Graph, S: list[float], E: list[float], bind: list[int], a: int, b: int, end_node: int
) -> list[tuple[int, int, str, str, str]]:
    """:func:`trace_back` as tuples ``(s, e, cat, what, kind)`` (a step's path has thousands)."""
    pieces: list[tuple[int, int, str, str, str]] = []
    add = pieces.append
    nodes, preds = g.nodes, g.preds
    limit = 4 * len(nodes) + 10
    t_hi = b
    v: int | None = end_node
    at_end = True  # whether we entered v at its end (else at its start, via a start edge)
    guard = 0
    while v is not None and t_hi > a:
        guard += 1
        if guard > limit:
            break
        node = nodes[v]
        hi = min(t_hi, round(E[v])) if at_end else min(t_hi, round(S[v]))
        if hi < t_hi:  # time between the node's end and where we stand: the node's category
            add((hi, t_hi, node.cat, node.label, node.kind))
            t_hi = hi
        lo = max(a, round(S[v]))
        if at_end and t_hi > lo:
            add((lo, t_hi, node.cat, node.label, node.kind))
            t_hi = lo
        if t_hi <= a:
            break
        bi = bind[v]
        if bi < 0:
            break
        src, _w, from_start, cat, kind = preds[v][bi]
        lo = max(a, round(S[src] if from_start else E[src]))
        if t_hi > lo:
            add((lo, t_hi, cat, f"{kind} latency", kind))
            t_hi = lo
        v, at_end = src, not from_start
    if t_hi > a:  # nothing earlier: the start of the step itself
        add((a, t_hi, "cpu", "(before the first event)", "host"))
    pieces.reverse()
    return pieces


def split(pieces: list[PathPiece]) -> dict[str, int]:
    """ns per "bound by" category (every category present, zeros included)."""
    out = dict.fromkeys(BOUND_BY, 0)
    for p in pieces:
        out[p.cat if p.cat in out else "cpu"] += p.e - p.s
    return out


def step_end_node(g: Graph, E: list[float], b: int, main_tid: int) -> int | None:
    """The node that ends step ``[a, b)``: the main-thread segment ending at ``b``, else the node
    with the latest end at or before ``b``."""
    return _step_end_nodes(g, E, [b], main_tid)[0]


def _step_end_nodes(g: Graph, E: list[float], ends: list[int], main_tid: int) -> list[int | None]:
    """:func:`step_end_node` of each step end of ``ends``, without a pass over the nodes per step:
    ``round`` is monotone, so the nodes sorted by end are sorted by rounded end too, and the
    nodes that end at or before ``b`` are a prefix of them (bisection)."""
    R = [round(x) for x in E]
    wanted = set(ends)
    main_at: dict[int, int] = {}  # rounded end -> first main-thread host node ending there
    for v, r in enumerate(R):
        if r in wanted and r not in main_at:
            node = g.nodes[v]
            if node.kind == "host" and isinstance(node.event, HostEvent | None):
                ev = node.event
                if ev is None or ev.tid == main_tid:
                    main_at[r] = v
    by_end = sorted(range(len(E)), key=E.__getitem__)  # stable: equal ends in node order
    e_keys = [E[v] for v in by_end]
    r_keys = [R[v] for v in by_end]
    out: list[int | None] = []
    for b in ends:
        if b in main_at:
            out.append(main_at[b])
            continue
        j = bisect.bisect_right(r_keys, b)  # nodes by_end[:j] end at or before b (rounded)
        # the latest end among them, the first node of those that end then
        out.append(by_end[bisect.bisect_left(e_keys, e_keys[j - 1])] if j else None)
    return out


# -- per step ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathTotal(JsonRow):
    """One (category, what) of a step's critical path and its time on the path (ms)."""

    category: str
    what: str
    ms: float


@dataclass
class StepPath:
    """The critical path of one step: ``bound_ns`` by category (sums to ``duration_ns``) and the
    path's largest pieces."""

    number: int
    start_ns: int
    duration_ns: int
    bound_ns: dict[str, int]
    top: list[PathTotal]

    @property
    def bound_by_ms(self) -> dict[str, float]:
        """The step's critical path by category (ms; sums to the step time)."""
        return {k: v / 1e6 for k, v in self.bound_ns.items()}

    @property
    def bound_by_pct(self) -> dict[str, float]:
        """The step's critical path by category (% of the step; 0 for a step of no length)."""
        return {
            k: 100.0 * v / self.duration_ns if self.duration_ns else 0.0
            for k, v in self.bound_ns.items()
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "start_us": self.start_ns / 1e3,
            "duration_ms": self.duration_ns / 1e6,
            "bound_by_ms": self.bound_by_ms,
            "bound_by_pct": self.bound_by_pct,
            "top": [t.to_json() for t in self.top],
        }


@dataclass
class CriticalPath:
    """Critical paths of a window's steps, with the graph they were traced on (for the gains)."""

    steps: list[StepPath]
    graph: Graph
    window: tuple[int, int]
    main_tid: int
    n_nodes: int
    n_edges: int

    @property
    def bound_ns(self) -> dict[str, int]:
        out = dict.fromkeys(BOUND_BY, 0)
        for s in self.steps:
            for k, v in s.bound_ns.items():
                out[k] += v
        return out

    @property
    def dominant(self) -> str | None:
        b = self.bound_ns
        return max(b, key=lambda k: b[k]) if any(b.values()) else None

    @property
    def bound_by_pct(self) -> dict[str, float]:
        """The window's critical path by category (% of the path over every step; 0 without)."""
        b = self.bound_ns
        total = sum(b.values())
        return {k: 100.0 * v / total if total else 0.0 for k, v in b.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": [s.to_json() for s in self.steps],
            "bound_by_ms_per_step": {
                k: v / 1e6 / max(1, len(self.steps)) for k, v in self.bound_ns.items()
            },
            "bound_by_pct": self.bound_by_pct,
            "dominant": self.dominant,
            "nodes": self.n_nodes,
            "edges": self.n_edges,
            "collectives_across_ranks": False,
        }


@gc_paused()
def critical_path_of(
    host: list[HostEvent],
    gpu: list[GpuEvent],
    main_tid: int,
    bounds: list[tuple[int, int]],
    numbers: list[int] | None = None,
    top_n: int = 5,
) -> CriticalPath:
    """Critical path of each step ``bounds[i]`` = ``[a, b)`` (ns) over one graph of the window."""
    ws, we = bounds[0][0], bounds[-1][1]
    g = build_graph(host, gpu, main_tid, ws, we)
    S, E, bind = replay(g)
    ends = _step_end_nodes(g, E, [b for _, b in bounds], main_tid)
    steps: list[StepPath] = []
    for k, (a, b) in enumerate(bounds):
        end = ends[k]
        pieces = _trace_back(g, S, E, bind, a, b, end) if end is not None else []
        if not pieces:
            pieces = [(a, b, "cpu", "(no event)", "host")]
        agg: dict[tuple[str, str], int] = {}
        bound = dict.fromkeys(BOUND_BY, 0)  # split(pieces)
        for ps, pe, cat, what, _kind in pieces:
            agg[(cat, what)] = agg.get((cat, what), 0) + pe - ps
            bound[cat if cat in bound else "cpu"] += pe - ps
        top = [
            PathTotal(c, w, ns / 1e6)
            for (c, w), ns in sorted(agg.items(), key=lambda kv: -kv[1])[:top_n]
        ]
        steps.append(StepPath(numbers[k] if numbers else k, a, b - a, bound, top))
    return CriticalPath(steps, g, (ws, we), main_tid, len(g.nodes), sum(map(len, g.preds)))


# -- from the store --------------------------------------------------------------------------------


def count_events(
    con: Connection, run_id: str, rank: int, window: Window, device: int | None
) -> int:
    """How many host spans and GPU events of ``device`` :func:`load_events` would load: counted
    in the rank index's host and GPU tables (:meth:`RankIndex.host`, :meth:`RankIndex.gpu`,
    which the analysis has made by now), the same rows as in ``events`` (a scan of the lake's
    files for a 3 M-event rank: ~0.27 CPU s)."""
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.store_access import execute, sql_list

    ix = RankIndex.shared(con, run_id, rank)
    row = execute(
        con,
        f"""SELECT (SELECT count(*) FROM {ix.host()}
                    WHERE ph = 'X' AND cat IN {sql_list(HOST_CATS)} AND dur_ns IS NOT NULL
                      AND ts_ns < $we AND ts_ns + dur_ns > $ws)
                 + (SELECT count(*) FROM {ix.gpu()} WHERE dev = $dev AND s < $we AND e > $ws)""",
        {
            "dev": -1 if device is None else int(device),
            "we": int(window.end_ns),
            "ws": int(window.start_ns),
        },
    ).fetchone()
    return int(row[0] or 0) if row else 0


def load_events(
    con: Connection, run_id: str, rank: int, window: Window, device: int | None
) -> tuple[list[HostEvent], list[GpuEvent], int]:
    """Host spans and GPU activity of ``device`` overlapping the window, and the main thread."""
    from gpuscope.analysis.store_access import sql_list

    ws, we = window.start_ns, window.end_ns
    rows = con.execute(
        f"""SELECT n.name, e.cat, e.ts_ns, e.ts_ns + e.dur_ns, e.tid, e.correlation
            FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
            WHERE e.run_id = ? AND e.rank = ? AND e.ph = 'X' AND e.cat IN {sql_list(HOST_CATS)}
              AND e.dur_ns IS NOT NULL AND e.ts_ns < ? AND e.ts_ns + e.dur_ns > ?""",
        [run_id, int(rank), int(we), int(ws)],
    ).fetchall()
    host = [
        HostEvent(str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4] or 0), r[5]) for r in rows
    ]
    grows = con.execute(
        f"""SELECT n.name, e.cat, e.ts_ns, e.ts_ns + e.dur_ns, coalesce(e.stream, e.tid),
                   e.correlation, e.bytes,
                   CAST(e.grid[1] AS BIGINT) * e.grid[2] * e.grid[3]
            FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
            WHERE e.run_id = ? AND e.rank = ? AND e.ph = 'X' AND e.cat IN {sql_list(GPU_CATS)}
              AND e.dur_ns > 0 AND coalesce(e.device, CAST(e.pid AS INTEGER)) = ?
              AND e.ts_ns < ? AND e.ts_ns + e.dur_ns > ?""",
        [run_id, int(rank), -1 if device is None else int(device), int(we), int(ws)],
    ).fetchall()
    gpu = [
        GpuEvent(str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4] or 0), r[5], r[6], r[7])
        for r in grows
    ]
    steps = [h for h in host if h.cat == "user_annotation" and _STEP.match(h.name)]
    if steps:
        main = steps[0].tid
    else:
        by_tid: dict[int, int] = {}
        for h in host:
            by_tid[h.tid] = by_tid.get(h.tid, 0) + h.e - h.s
        main = max(by_tid, key=lambda t: by_tid[t]) if by_tid else 0
    return host, gpu, main


@gc_paused()
def critical_path(
    con: Connection, run_id: str, rank: int, window: Window, device: int | None
) -> CriticalPath | None:
    """The critical path of every step of the window (None without GPU activity, or with more
    than :data:`MAX_EVENTS` events: counted in SQL first, so a big window loads nothing)."""
    if count_events(con, run_id, rank, window, device) > MAX_EVENTS:
        return None
    host, gpu, main = load_events(con, run_id, rank, window, device)
    if not gpu or len(host) + len(gpu) > MAX_EVENTS:
        return None
    bounds = window.step_bounds_ns()
    numbers = [s.number for s in window.steps] or [0]
    return critical_path_of(host, gpu, main, bounds, numbers)
