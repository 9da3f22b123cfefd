"""The re-timings the fixes compose (``fixes.base.after``, ``with_host_cost``) read every node at
once (``gains.raw_durations``: ``Composed.array``, ``PlusHost.array``, the host-work mask) and give
the floats their node-by-node calls give, bit for bit: rounding half to even, floors at 0, a host
segment that becomes (or stops being) the user's own code once re-timed, nested compositions, a
function shared by two variants."""

from __future__ import annotations

import numpy as np
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import Graph, HostEvent, Node
from gpuscope.analysis.fixes import base as fx
from hypothesis import given, settings
from hypothesis import strategies as st

KINDS = (
    ("host", "cpu"),
    ("host", "launch"),
    ("host", "sync"),
    ("host", "copies"),
    ("gpu", "kernels"),
    ("gpu", "copies"),
)
TAGS = (frozenset(), frozenset({"dataloader"}), frozenset({"optimizer"}), frozenset({"gemm"}))
EVENTS = (
    None,
    HostEvent("aten::mm", "cpu_op", 0, 1, 1),
    HostEvent("my_function", "python_function", 0, 1, 1),
    HostEvent("cudaLaunchKernel", "cuda_runtime", 0, 1, 1),
)

node_st = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(TAGS),
    st.sampled_from(EVENTS),
    # around the own-code threshold (1 ms) too, and 0
    st.one_of(st.integers(0, 3_000), st.integers(900_000, 1_100_000)),
)


def graph(rows: list[tuple[tuple[str, str], frozenset[str], HostEvent | None, int]]) -> Graph:
    nodes, t = [], 0
    for (kind, cat), tags, ev, d in rows:
        nodes.append(Node(kind, cat, t, t + d, "n", tags, ev if kind == "host" else None))
        t += d + 1
    return Graph(nodes, [[] for _ in nodes], list(range(len(nodes))))


def one_by_one(g: Graph, dur: GN.DurFn) -> list[str]:
    return [max(0.0, float(dur(v, n))).hex() for v, n in enumerate(g.nodes)]


def at_once(g: Graph, dur: GN.DurFn, picked: dict | None = None) -> list[str]:  # type: ignore[type-arg]
    return [x.hex() for x in GN._durations(g, dur, picked).tolist()]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(node_st, min_size=1, max_size=25),
    f=st.sampled_from([0.0, 0.25, 0.5, 1.5, 2.5, 3.0, 1e-3, 1200.0, -0.5]),
    shift=st.sampled_from([0.0, 0.5, -0.5, 999_999.5, -2.5]),
    per=st.floats(min_value=0.0, max_value=3.0, allow_nan=False),
)
def test_composed_retimings_at_once_are_the_ones_node_by_node(rows, f, shift, per) -> None:  # type: ignore[no-untyped-def]
    g = graph(rows)

    def a(v: int, n: Node) -> float:  # reads the index, the duration and the end
        return n.dur * f + shift if v % 3 == 0 else float(n.e - n.s)

    def b(v: int, n: Node) -> float:
        return n.dur * f if fx.is_host_work(n) else float(n.dur) - shift

    def keep_all(i: int, ed: object) -> bool:
        return True

    scaled = fx.scaled(lambda n: n.kind == "host" and n.dur > 1000, f)
    first = fx.after((a, None), {"x": (None, None)})["x"]
    first = fx.after((b, keep_all), {"x": first})["x"]  # two causes, nested
    variants: dict[str, GN.Variant] = {
        "low": (b, None),
        "mid": (fx.PlusHost(a, per), None),
        "high": (scaled, None),
        "same": (b, None),  # one function in two variants: read once
        "none": (None, keep_all),
    }
    composed = fx.after(first, variants)
    plus = fx.with_host_cost(composed, g, GN.Context(n_steps=1, step_ms=1.0), per, ("low", "high"))
    picked: dict = {}  # type: ignore[type-arg]
    for d in [first[0], a, b, scaled, fx.PlusHost(None, per), fx.PlusHost(b, per)]:
        assert d is not None
        assert at_once(g, d, picked) == one_by_one(g, d)
    for name in variants:
        for vs in (composed, plus):
            d = vs[name][0]
            assert d is not None
            assert at_once(g, d, picked) == one_by_one(g, d), name
            assert at_once(g, d) == one_by_one(g, d), name


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(node_st, min_size=1, max_size=25), data=st.data())
def test_the_host_work_mask_is_is_host_work_of_each_node(rows, data) -> None:  # type: ignore[no-untyped-def]
    g = graph(rows)
    assert fx.host_work_mask(g).tolist() == [fx.is_host_work(n) for n in g.nodes]
    durs = np.array(
        data.draw(
            st.lists(st.integers(0, 1_100_000), min_size=len(g.nodes), max_size=len(g.nodes))
        ),
        dtype=np.int64,
    )
    moved = GN.nodes_at(g, durs)
    assert [n.dur for n in moved] == durs.tolist()
    assert fx.host_work_mask(g, durs).tolist() == [fx.is_host_work(n) for n in moved]
    # the nodes a re-timing leaves as recorded are the graph's own
    same = GN.recorded_ns(g) == durs
    assert all((m is n) == s for m, n, s in zip(moved, g.nodes, same.tolist(), strict=True))


def test_a_retiming_that_rounds_to_nan_raises_as_node_by_node() -> None:
    """A NaN duration under a composition: round() raises, at once as node by node."""
    import pytest

    g = graph([(("host", "cpu"), frozenset(), None, 10)])
    d = fx.after((lambda v, n: float("nan"), None), {"x": (None, None)})["x"][0]
    assert d is not None
    with pytest.raises(ValueError):
        d(0, g.nodes[0])
    with pytest.raises(ValueError):
        GN._durations(g, d)
