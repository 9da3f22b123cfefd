"""The replays' fast paths give what the one-replay-at-a-time ones give, bit for bit: makespans and
the recorded replay over a graph's single-edge chains (one running sum per chain), calibrate's
bisection in batches, and the collector paused around the graph's work (restored as it was)."""

from __future__ import annotations

import gc

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import BOUND_BY, Graph, Node, gc_paused, replay
from hypothesis import given, settings
from hypothesis import strategies as st


@st.composite
def chained_graphs(draw: st.DrawFn) -> Graph:
    """Up to 60 nodes, host and GPU, most with one incoming edge from the node before (long
    chains), some from an earlier node's start or end (branches), some with several or none."""
    n = draw(st.integers(1, 60))
    g = Graph()
    for i in range(n):
        s = draw(st.integers(0, 400))
        kind = draw(st.sampled_from(["host", "host", "gpu"]))
        cat = draw(st.sampled_from(["cpu", "launch", "kernels", "sync"]))
        g.add(Node(kind, cat, s, s + draw(st.integers(0, 30)), f"n{i}"))
    for j in range(1, n):
        shape = draw(st.sampled_from(["prev", "prev", "prev", "prev", "any", "several", "none"]))
        if shape == "none":
            continue
        srcs = [j - 1] if shape == "prev" else []
        if shape == "any":
            srcs = [draw(st.integers(0, j - 1))]
        if shape == "several":
            srcs = sorted(set(draw(st.lists(st.integers(0, j - 1), min_size=2, max_size=3))))
        for i in srcs:
            g.edge(
                j,
                i,
                draw(st.integers(-5, 20)),
                from_start=shape != "prev" and draw(st.booleans()),
                cat=draw(st.sampled_from(BOUND_BY)),
                kind="x",
            )
    g.finish()
    return g


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(chained_graphs(), st.data())
def test_chained_makespans_equal_one_replay_each(g: Graph, data: st.DataObject) -> None:
    edges = [(v, i) for v, es in enumerate(g.preds) for i in range(len(es))]
    k = data.draw(st.integers(1, 5))
    durs = [[float(data.draw(st.integers(0, 50))) for _ in g.nodes] for _ in range(k)]
    drops = [
        set(data.draw(st.lists(st.sampled_from(edges), max_size=6))) if edges else None
        for _ in range(k)
    ]
    start = data.draw(st.integers(-10, 10))
    want = [GN.makespan(g, start, d, drop=dr) for d, dr in zip(durs, drops, strict=True)]
    assert GN.makespans(g, start, durs, drops) == want
    assert GN.makespans(g, start, durs, drops) == want  # the schedule read from the graph's memo


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(chained_graphs())
def test_the_recorded_replay_along_chains_equals_the_node_by_node_one(g: Graph) -> None:
    """``replay(g)`` (recorded durations, every edge: along the chains) gives the starts, ends and
    binding edges of the node-by-node replay (which a ``keep`` that keeps every edge runs)."""
    assert replay(g) == replay(g, keep=lambda v, ed: True)


def calibrate_one_by_one(g: Graph, start_ns: int, target_ns: float) -> float | None:
    """:func:`gains.calibrate` as one replay per host scale, one halving after the other."""
    base = [float(n.dur) for n in g.nodes]
    prof = [GN.profiled(n) for n in g.nodes]

    def at(x: float) -> float:
        return GN.makespan(
            g, start_ns, [b * x if p else b for b, p in zip(base, prof, strict=True)]
        )

    r_lo, r_hi = (at(x) for x in GN.HOST_SCALE_RANGE)
    if r_hi - r_lo < GN.IDENTIFIABLE * r_lo:
        return None
    lo, hi = 0.02, GN.MAX_HOST_SCALE
    if not at(lo) * (1.0 + GN.IDENTIFIABLE) <= target_ns <= at(hi):
        return None
    for _ in range(10):
        mid = 0.5 * (lo + hi)
        if at(mid) < target_ns:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(chained_graphs(), st.floats(0.0, 1.2))
def test_batched_calibration_equals_the_bisection(g: Graph, where: float) -> None:
    """Targets across the window's range at scales 0.02..1 (and past it): the same factor, or
    None, as the halvings one replay at a time."""
    lo = GN.makespan(g, 0, [float(n.dur) * (0.02 if GN.profiled(n) else 1.0) for n in g.nodes])
    hi = GN.makespan(g, 0)
    target = lo + where * (hi - lo)
    assert GN.calibrate(g, 0, target) == calibrate_one_by_one(g, 0, target)


def test_a_host_bound_chain_calibrates_inside_the_range() -> None:
    """Ten 10 µs CPU ops in a row, then a 20 µs kernel: the window is 100 s + 20 µs at host scale
    s; a 70 µs untraced window is s = 0.5 (to the bisection's last halving)."""
    g = Graph()
    for i in range(10):
        v = g.add(Node("host", "cpu", 10 * i, 10 * (i + 1), f"op{i}"))
        if i:
            g.edge(v, v - 1, 0, from_start=False, cat="cpu", kind="seq")
    k = g.add(Node("gpu", "kernels", 100, 120, "k"))
    g.edge(k, 9, 0, from_start=False, cat="launch", kind="launch")
    g.finish()
    got = GN.calibrate(g, 0, 70.0)
    assert got == calibrate_one_by_one(g, 0, 70.0)
    assert got == pytest.approx(0.5, abs=1e-3)


def test_gc_paused_restores_the_collector() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        with gc_paused():
            assert not gc.isenabled()
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer section still runs
        assert gc.isenabled()
        with pytest.raises(ValueError), gc_paused():
            raise ValueError("inside")
        assert gc.isenabled()
        gc.disable()  # off before: stays off
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()

        @gc_paused()
        def replays(g: Graph) -> list[float]:
            assert not gc.isenabled()
            return replay(g)[1]

        gc.enable()
        g = Graph()
        g.add(Node("host", "cpu", 0, 5, "a"))
        g.finish()
        assert replays(g) == [5.0] and gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_the_schedules_a_graph_keeps_are_bounded() -> None:
    """The schedule with every edge stays; of those for dropped edges, the last
    MAX_DROP_SCHEDULES; each answers as a new one does."""
    from gpuscope.analysis.critical_path import MAX_DROP_SCHEDULES, replay_schedule

    g = Graph()
    for i in range(12):
        v = g.add(Node("host", "cpu", 10 * i, 10 * i + 5, f"n{i}"))
        if i:
            g.edge(v, v - 1, 5, from_start=False, cat="cpu", kind="seq")
    g.finish()
    base = replay_schedule(g, frozenset())
    for i in range(1, 12):
        replay_schedule(g, frozenset({i}))
    keys = [k for k in g.memo if isinstance(k, tuple) and k[0] == "schedule"]
    assert keys[0] == ("schedule", frozenset())
    assert keys[1:] == [("schedule", frozenset({i})) for i in range(12 - MAX_DROP_SCHEDULES, 12)]
    assert replay_schedule(g, frozenset()) is base
    durs = [[float(n.dur) for n in g.nodes]] * 2
    drops = [{(3, 0)}, None]
    assert GN.makespans(g, 0, durs, drops) == [
        GN.makespan(g, 0, d, drop=dr) for d, dr in zip(durs, drops, strict=True)
    ]
