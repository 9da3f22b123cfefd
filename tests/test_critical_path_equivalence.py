"""The critical path's shortcuts against the plain rules they replace: the step-end node found by
bisection (vs a scan of every node per step), host categories read from or-ed name bits (vs the
rules over the whole stack), and the tiling that merges neighbours as it goes (vs tiling, then
merging). Each reference is the straightforward code, kept here as the specification."""

from __future__ import annotations

import itertools
import re

from gpuscope.analysis import critical_path as CP
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import Graph, Node
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.event_classes import (
    COMM_RE,
    DATALOADER_RE,
    LAUNCH_APIS,
    OPTIMIZER_RE,
    RUNTIME_CATS,
    SYNC_APIS,
)
from gpuscope.vocabulary.causes import DATA_LOADING
from hypothesis import given, settings
from hypothesis import strategies as st

MAIN = 1


def scan_step_end(g: Graph, E: list[float], b: int, main_tid: int) -> int | None:
    """The step-end rule, one pass over every node."""
    best = None
    for v, node in enumerate(g.nodes):
        if round(E[v]) == b and node.kind == "host" and isinstance(node.event, H | None):
            ev = node.event
            if ev is None or ev.tid == main_tid:
                return v
        if round(E[v]) <= b and (best is None or E[v] > E[best]):
            best = v
    return best


@st.composite
def ended_graphs(draw: st.DrawFn) -> tuple[Graph, list[float], list[int]]:
    """Host nodes of the main or another thread (or untraced), GPU nodes, ends in half ns (ties
    and round-half-to-even) and step ends around them."""
    g = Graph()
    E: list[float] = []
    for i in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["host", "host", "gpu"]))
        ev: H | G | None
        if kind == "gpu":
            ev = G("k", "kernel", 0, 1, 7)
        else:
            ev = draw(
                st.sampled_from([None, H("op", "cpu_op", 0, 1, MAIN), H("op", "cpu_op", 0, 1, 2)])
            )
        g.add(Node(kind, "cpu", 0, 0, f"n{i}", event=ev))
        E.append(draw(st.integers(0, 40)) / 2)
    ends = draw(st.lists(st.integers(-1, 21), min_size=1, max_size=6))
    return g, E, ends


@settings(max_examples=300, deadline=None)
@given(ended_graphs())
def test_step_end_nodes_equal_a_scan_of_every_node(case: tuple[Graph, list[float], list[int]]):
    g, E, ends = case
    want = [scan_step_end(g, E, b, MAIN) for b in ends]
    assert CP._step_end_nodes(g, E, ends, MAIN) == want
    assert [CP.step_end_node(g, E, b, MAIN) for b in ends] == want


_RULE_OPT, _RULE_DL, _RULE_COMM = (
    re.compile(OPTIMIZER_RE),
    re.compile(DATALOADER_RE),
    re.compile(COMM_RE),
)
_COPY = re.compile(r"^(cuda|hip|cu)(Memcpy|Memset)")


def rule_host_cat(stack: list[H], ev: H | None) -> tuple[str, frozenset[str]]:
    """The host category rules, read over the whole stack."""
    tags: set[str] = set()
    if any(_RULE_OPT.search(h.name) for h in stack):
        tags.add("optimizer")
    if any(_RULE_DL.search(h.name) for h in stack):
        return DATA_LOADING, frozenset(tags | {"dataloader"})
    if ev is not None and ev.cat in RUNTIME_CATS:
        if ev.name in LAUNCH_APIS:
            return "launch", frozenset(tags | {"launch_call"})
        if _COPY.match(ev.name):
            return "copies", frozenset(tags | {"copy_call"})
        if ev.name in SYNC_APIS:
            return "sync", frozenset(tags)
    if any(_RULE_COMM.search(h.name) for h in stack):
        return "communication", frozenset(tags)
    cpu_op = ev is not None and ev.cat not in RUNTIME_CATS
    return "cpu", frozenset(tags | ({"cpu_op"} if cpu_op else set()))


NAMES = [
    "aten::mm",
    "Optimizer.step#SGD.step",
    "Optimizer.zero_grad#Adam.zero_grad",
    "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
    "nccl:all_reduce",
    "record_param_comms",
    "cudaLaunchKernel",
    "cudaMemcpyAsync",
    "cudaStreamSynchronize",
    "cudaMemsetAsync",
    "x",
]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(NAMES), st.sampled_from(["cpu_op", "cuda_runtime", "python_function"])
        ),
        max_size=6,
    ),
    st.booleans(),
)
def test_host_cat_from_name_bits_equals_the_rules(spans: list[tuple[str, str]], untraced: bool):
    stack = [H(n, c, 0, 1, MAIN) for n, c in spans]
    ev = None if untraced or not stack else stack[-1]
    if untraced:
        stack = []
    assert CP._host_cat(stack, ev) == rule_host_cat(stack, ev)


def tile_then_merge(events: list[H], lo: int, hi: int) -> list[tuple[int, int, list[H]]]:
    """Elementary segments with their stacks, then neighbours of one innermost event merged."""
    evs = sorted((e for e in events if e.e > lo and e.s < hi), key=lambda e: (e.s, -e.e))
    points = sorted({lo, hi, *(max(lo, e.s) for e in evs), *(min(hi, e.e) for e in evs)})
    out: list[tuple[int, int, list[H]]] = []
    stack: list[H] = []
    k = 0
    for a, b in itertools.pairwise(points):
        while stack and stack[-1].e <= a:
            stack.pop()
        while k < len(evs) and evs[k].s <= a:
            ev = evs[k]
            k += 1
            if ev.e <= a:
                continue
            while stack and stack[-1].e <= a:
                stack.pop()
            if stack and ev.e > stack[-1].e:
                ev = H(ev.name, ev.cat, ev.s, stack[-1].e, ev.tid, ev.correlation)
            stack.append(ev)
        out.append((a, b, list(stack)))
    merged: list[tuple[int, int, list[H]]] = []
    for a, b, s in out:
        if merged and (merged[-1][2][-1:] == s[-1:]) and len(merged[-1][2]) == len(s):
            merged[-1] = (merged[-1][0], b, merged[-1][2])
        else:
            merged.append((a, b, s))
    return merged


@st.composite
def spans_with_twins(draw: st.DrawFn) -> list[H]:
    """Spans of one thread: nested, overlapping a parent's end, of no length, or equal twins."""
    out: list[H] = []
    for _ in range(draw(st.integers(0, 20))):
        s = draw(st.integers(0, 30))
        e = s + draw(st.integers(0, 20))
        h = H(draw(st.sampled_from(["a", "b"])), "cpu_op", s, e, MAIN)
        out.append(h)
        if draw(st.integers(0, 5)) == 0:
            out.append(H(h.name, h.cat, h.s, h.e, h.tid))  # an equal twin, another object
    return out


@settings(max_examples=400, deadline=None)
@given(spans_with_twins(), st.integers(-5, 20), st.integers(10, 60))
def test_tile_equals_tiling_then_merging(spans: list[H], lo: int, hi: int):
    got = CP._tile(spans, lo, hi)
    want = tile_then_merge(spans, lo, hi)
    assert [(a, b, s) for a, b, s in got] == [(a, b, s) for a, b, s in want]
