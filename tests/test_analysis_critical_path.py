"""Critical path of a step and gains re-timed on it: hand-built event lists with answers computed
by hand, and property tests (replay against a brute-force longest path over every path of small
random DAGs; replay of random traces gives back the recorded times; the split tiles the step)."""

from __future__ import annotations

import itertools

import pytest
from gpuscope.analysis import fixes as FX
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import (
    BOUND_BY,
    Graph,
    Node,
    build_graph,
    critical_path_of,
    replay,
    trace_back,
)
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from hypothesis import given, settings
from hypothesis import strategies as st

US = 1_000


def _retime(fix: str, g, ctx):
    """The fix unit's low / mid / high re-timings of the graph."""
    retime = FX.BY_ID[fix].retime
    assert retime is not None
    return retime(g, ctx)


def _estimate(fix: str, cp, ctx):
    """The fix unit's variants replayed on the graph (unclipped)."""
    u = FX.BY_ID[fix]
    return GN.replay_estimate(
        _retime(fix, cp.graph, ctx), cp, ctx, multiple=u.batch_multiple, staging=u.staging
    )


def sync_step() -> tuple[list[H], list[G]]:
    """Step 0..100 µs. aten::linear 0..10 launches K (call 4..6) that runs 10..60 (launch-bound:
    latency 6); cudaStreamSynchronize 20..65 waits for K (tail 60..65); then Python to 100."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 100 * US, 1),
        H("aten::linear", "cpu_op", 0, 10 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 4 * US, 6 * US, 1, 1),
        H("cudaStreamSynchronize", "cuda_runtime", 20 * US, 65 * US, 1),
    ]
    gpu = [G("gemm_kernel", "kernel", 10 * US, 60 * US, 7, 1)]
    return host, gpu


def test_sync_step_hand_computed():
    host, gpu = sync_step()
    cp = critical_path_of(host, gpu, 1, [(0, 100 * US)], [1])
    # path back from 100: Python 65..100 (cpu 35), sync tail 60..65 (5), K 10..60 (kernels 50),
    # launch latency 4..10 (6: from the call's start), aten::linear 0..4 (cpu 4)
    assert cp.steps[0].bound_ns == {
        "cpu": 39 * US,
        "launch": 6 * US,
        "kernels": 50 * US,
        "copies": 0,
        "communication": 0,
        "data_loading": 0,
        "sync": 5 * US,
    }
    assert sum(cp.steps[0].bound_ns.values()) == cp.steps[0].duration_ns == 100 * US
    assert cp.dominant == "kernels"
    j = cp.to_json()
    assert j["steps"][0]["bound_by_ms"]["kernels"] == 0.05
    assert j["bound_by_pct"]["kernels"] == 50.0


def test_host_sync_gain_hand_computed():
    """Without the wait, the host reaches the end of its work at 55 (Python 20..55 runs right
    after the call) and K still ends at 60: the window shrinks from 100 to 60 µs."""
    host, gpu = sync_step()
    cp = critical_path_of(host, gpu, 1, [(0, 100 * US)], [1])
    ctx = GN.Context(n_steps=1, step_ms=0.1)
    dur, keep = _retime("host_sync", cp.graph, ctx)["mid"]
    assert GN.makespan(cp.graph, 0, dur, keep) == 60 * US
    assert GN.makespan(cp.graph, 0) == 100 * US  # the graph replays the trace as recorded
    est = _estimate("host_sync", cp, ctx)
    # without an untraced step no host speed is fitted: the host is replayed at the prior's
    # 0.38, 0.55 and 0.72 and at 1.0 of its recorded time; mid (0.55): host 0..4 -> 2.2, launch
    # call 4..6 -> 1.1, K starts 2.2 + 6 = 8.2, ends 58.2; the Python after the call ends first,
    # so the window is 58.2 against the 0.55-scaled host + the wait: base = 58.2 + 5 (tail) +
    # 35 * 0.55 = 82.45 -> gain 1 - 58.2 / 82.45
    assert GN.HOST_SCALE_PRIOR[1] == 0.55
    assert abs(est.gain_pct - 100 * (1 - 58.2 / 82.45)) < 1e-6
    assert est.low_pct <= est.gain_pct <= est.high_pct
    assert est.bound is False


def autograd_step() -> tuple[list[H], list[G]]:
    """Step 0..200 µs. Main: forward 0..50 (launch 10..12 -> K1 20..40), then it waits while the
    autograd thread (tid 2) runs MmBackward 60..140 (launch 100..102 -> K2 110..170), then the
    optimizer 150..190 (launch 180..182 -> K3 185..195)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 200 * US, 1),
        H("forward", "cpu_op", 0, 50 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 10 * US, 12 * US, 1, 1),
        H("MmBackward0", "cpu_op", 60 * US, 140 * US, 2),
        H("cudaLaunchKernel", "cuda_runtime", 100 * US, 102 * US, 2, 2),
        H("Optimizer.step#AdamW.step", "user_annotation", 150 * US, 190 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 180 * US, 182 * US, 1, 3),
    ]
    gpu = [
        G("k1", "kernel", 20 * US, 40 * US, 7, 1),
        G("k2", "kernel", 110 * US, 170 * US, 7, 2),
        G("k3", "kernel", 185 * US, 195 * US, 7, 3),
    ]
    return host, gpu


def test_autograd_thread_spawn_and_join_hand_computed():
    host, gpu = autograd_step()
    cp = critical_path_of(host, gpu, 1, [(0, 200 * US)], [1])
    s = cp.steps[0]
    # back from 200: Python 190..200 (10), optimizer 182..190 (8), its launch 180..182 (2),
    # optimizer 150..180 (30), Python 140..150 (10, after the join), MmBackward 102..140 (38),
    # launch 100..102 (2), MmBackward 60..100 (40), spawn latency 50..60 (10), forward 12..50
    # (38), launch 10..12 (2), forward 0..10 (10)
    assert s.bound_ns["launch"] == 6 * US
    assert s.bound_ns["cpu"] == 194 * US
    assert sum(s.bound_ns.values()) == 200 * US
    whats = {t.what for t in s.top}
    assert "MmBackward0" in whats


def test_spawn_offset_scales_with_the_host():
    """The autograd thread starts 10 µs into the main thread's wait (50..60): that is main-thread
    time, so it scales with the host. Host × 0.5: forward 0..25 (K1 launched at 5 + 10 -> 15..35),
    the 10 µs -> 25..30, MmBackward 30..70 (K2 launched at 50 + 10 -> 60..120), Python 70..75,
    optimizer 75..95 (K3 launched at 90 + 5, after K2 on the stream: 120..130): 130 µs (an
    unscaled offset would give 135)."""
    host, gpu = autograd_step()
    cp = critical_path_of(host, gpu, 1, [(0, 200 * US)], [1])
    assert GN.makespan(cp.graph, 0) == 200 * US
    assert GN.makespan(cp.graph, 0, GN._host_scale(cp.graph, 0.5)) == 130 * US


def test_dataloader_gain_hand_computed():
    """A DataLoader __next__ of 30 µs at the start of the step, then a launch at 32 of a kernel
    33..53: removing the wait moves everything 30 µs earlier (window 53 -> 23 µs, high variant)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 40 * US, 1),
        H(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "user_annotation",
            0,
            30 * US,
            1,
        ),
        H("cudaLaunchKernel", "cuda_runtime", 32 * US, 34 * US, 1, 5),
    ]
    gpu = [G("k", "kernel", 33 * US, 53 * US, 7, 5)]
    cp = critical_path_of(host, gpu, 1, [(0, 53 * US)], [1])
    assert cp.steps[0].bound_ns["data_loading"] == 30 * US
    assert cp.steps[0].bound_ns["kernels"] == 20 * US
    assert cp.steps[0].bound_ns["cpu"] == 2 * US and cp.steps[0].bound_ns["launch"] == 1 * US
    ctx = GN.Context(n_steps=1, step_ms=0.053)
    dur, keep = _retime("dataloader_workers", cp.graph, ctx)["high"]
    assert GN.makespan(cp.graph, 0, dur, keep) == 23 * US


def test_pin_memory_retimes_the_copy_at_pinned_bandwidth():
    """A 10 MB pageable copy: the call 0..210 µs waits for the GPU copy 5..205 (50 GB/s -> 200 µs
    at 0.05 GB/ms...): pinned at 50 GB/s (= 50 bytes/ns) it takes 200 µs -> here 10e6 / 50 ns."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 300 * US, 1),
        H("cudaMemcpyAsync", "cuda_runtime", 0, 1_010 * US, 1, 9),
    ]
    gpu = [
        G("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 5 * US, 1_005 * US, 7, 9, 10_000_000)
    ]
    cp = critical_path_of(host, gpu, 1, [(0, 1_010 * US)], [1])
    assert cp.steps[0].bound_ns["copies"] == 1_000 * US + 5 * US  # copy + the call's tail
    ctx = GN.Context(n_steps=1, step_ms=1.01, pinned_gbps=50.0)
    dur, keep = _retime("pin_memory", cp.graph, ctx)["mid"]
    # copy at 50 B/ns: 200 µs, from 5 (launch latency kept) to 205; the call no longer waits
    assert GN.makespan(cp.graph, 0, dur, keep) == 205 * US


def test_a_pageable_copy_behind_a_long_kernel_waits_for_it():
    """Kernel K runs 10..1010 µs (launched 4..6 µs); a pageable copy's call 20..1115 µs (its copy
    1012..1120 µs starts when the stream reaches it and ends 5 µs after the call returns, as in
    v38's trace); Python to 1200. The call waited for K: a zero-length head at 20, then a tail
    from K's end 1010 to 1115 (the copy's staging). Path back from 1200: Python 1115..1200 (cpu
    85), the tail 1010..1115 (copies 105), K 10..1010 (kernels 1000), its launch 4..10 (6), cpu
    0..4. K ten times shorter (100 µs): K 10..110, the tail 110..215, Python to 300 µs. Before,
    the call was 1,095 µs of fixed host work and the step stayed at 1200 µs."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 1_200 * US, 1),
        H("aten::linear", "cpu_op", 0, 10 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 4 * US, 6 * US, 1, 1),
        H("aten::copy_", "cpu_op", 20 * US, 1_115 * US, 1),
        H("cudaMemcpyAsync", "cuda_runtime", 20 * US, 1_115 * US, 1, 9),
    ]
    gpu = [
        G("gemm_kernel", "kernel", 10 * US, 1_010 * US, 7, 1),
        G(
            "Memcpy HtoD (Pageable -> Device)",
            "gpu_memcpy",
            1_012 * US,
            1_120 * US,
            7,
            9,
            4_000_000,
        ),
    ]
    cp = critical_path_of(host, gpu, 1, [(0, 1_200 * US)], [1])
    b = cp.steps[0].bound_ns
    assert b["kernels"] == 1_000 * US and b["copies"] == 105 * US and b["cpu"] == 89 * US
    assert b["launch"] == 6 * US and sum(b.values()) == 1_200 * US
    tails = [n for n in cp.graph.nodes if "sync_tail" in n.tags]
    assert [(n.s, n.e, n.cat) for n in tails] == [(1_010 * US, 1_115 * US, "copies")]

    def kernel_tenth(v: int, n: Node) -> float:
        return n.dur / 10 if n.kind == "gpu" and n.cat == "kernels" else float(n.dur)

    from gpuscope.analysis.gains import makespan

    assert makespan(cp.graph, 0, kernel_tenth, None) == 300 * US


def test_host_variation_widens_a_host_bound_range_by_its_factor():
    """A step of host work only (aten::foo 0..100 µs), no untraced step: host scales 0.3, 0.4,
    0.5 and 1.0, each the old step too, so the gain is 1 - the fix's factor on host time. A
    compiled step's overhead: host × 0.5 / 0.2 / 0.05 -> mid 80 %; the weakest fix on a host
    1.23× slower: 1 - 0.5 × 1.23 = 38.5 %; the strongest on one 1.23× faster: 1 - 0.05 / 1.23 =
    95.93 % (without the host variation the range was 50 .. 95 %). CUDA graphs' top leaves no
    host work: 100 %."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 100 * US, 1),
        H("aten::foo", "cpu_op", 0, 100 * US, 1),
    ]
    cp = critical_path_of(host, [], 1, [(0, 100 * US)], [1])
    est = _estimate("compiled_overhead", cp, GN.Context(n_steps=1, step_ms=0.1))
    assert est is not None
    assert est.gain_pct == pytest.approx(80.0)
    assert est.low_pct == pytest.approx(38.5)
    assert est.high_pct == pytest.approx(100 * (1 - 0.05 / 1.23))
    graphs = _estimate("cuda_graphs", cp, GN.Context(n_steps=1, step_ms=0.1))
    assert graphs is not None and graphs.gain_pct == pytest.approx(80.0)
    assert graphs.high_pct == pytest.approx(100.0)


def test_pinning_removes_the_staging_the_calibration_folded_in():
    """aten::foo 0..200 µs, a pageable 10 MB copy (call 200..1210 waits for the GPU copy
    205..1205), aten::bar 1210..1300; untraced step 1.25 ms. Calibrated host factor: 1010 +
    290 s = 1250 -> s = 0.83 (staging folded in). The fix is replayed at 0.4 instead: foo 0..80,
    the copy at 50 B/ns 85..285 (latency 5 kept), the call no longer waits -> 285 µs; the old
    step is the untraced 1250 (the 1250 - 1126 µs that the replay at 0.4 leaves unexplained go
    with the staging): gain 1 - 285 / 1250 = 77.2 % (at the calibrated factor it was 70.4 %)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 1_300 * US, 1),
        H("aten::foo", "cpu_op", 0, 200 * US, 1),
        H("cudaMemcpyAsync", "cuda_runtime", 200 * US, 1_210 * US, 1, 9),
        H("aten::bar", "cpu_op", 1_210 * US, 1_300 * US, 1),
    ]
    gpu = [
        G("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 205 * US, 1_205 * US, 7, 9, 10_000_000)
    ]
    cp = critical_path_of(host, gpu, 1, [(0, 1_300 * US)], [1])
    ctx = GN.Context(n_steps=1, step_ms=1.3, untraced_step_ms=1.25, pinned_gbps=50.0)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    assert ctx.host_scale_cal == pytest.approx(240 / 290, abs=0.01)
    est = _estimate("pin_memory", cp, ctx)
    assert est is not None
    assert est.gain_pct == pytest.approx(100 * (1 - 285 / 1250))
    assert est.low_pct <= est.gain_pct <= est.high_pct


# -- properties --------------------------------------------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> Graph:
    n = draw(st.integers(1, 7))
    g = Graph()
    for i in range(n):
        s = draw(st.integers(0, 40))
        g.add(
            Node("host", draw(st.sampled_from(BOUND_BY)), s, s + draw(st.integers(0, 30)), f"n{i}")
        )
    for j in range(n):
        for i in range(j):
            if draw(st.booleans()):
                g.edge(
                    j,
                    i,
                    draw(st.integers(-5, 20)),
                    from_start=draw(st.booleans()),
                    cat=draw(st.sampled_from(BOUND_BY)),
                    kind="x",
                )
    g.finish()
    return g


def brute_end(g: Graph, v: int) -> int:
    """Latest end of v over every path into it, enumerated one by one (no memo)."""

    def start(u: int) -> int:
        if not g.preds[u]:
            return g.nodes[u].s
        best = None
        for ed in g.preds[u]:
            t = start(ed.src) + (0 if ed.from_start else g.nodes[ed.src].dur) + ed.w
            best = t if best is None else max(best, t)
        assert best is not None
        return best

    return start(v) + g.nodes[v].dur


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(dags())
def test_replay_is_the_longest_path_and_the_path_tiles_it(g: Graph):
    S, E, bind = replay(g)
    for v in range(len(g.nodes)):
        assert E[v] == brute_end(g, v)
    v = max(range(len(g.nodes)), key=lambda i: E[i])
    a = int(min(S))
    b = int(E[v])
    pieces = trace_back(g, S, E, bind, a, b, v)
    assert sum(p.e - p.s for p in pieces) == b - a
    for p, q in itertools.pairwise(pieces):
        assert p.e == q.s  # contiguous, in time order
    assert pieces[0].s == a and pieces[-1].e == b if pieces else a == b


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[H], list[G], int]:
    """A main thread of back-to-back ops, each launching a kernel on one of two streams (start
    after its launch and after the stream's last kernel), some followed by a stream sync."""
    host: list[H] = []
    gpu: list[G] = []
    t = 0
    last: dict[int, int] = {}
    for i in range(draw(st.integers(1, 8))):
        d = draw(st.integers(3, 20)) * US
        call = t + draw(st.integers(0, 2)) * US
        host.append(H(f"op{i}", "cpu_op", t, t + d, 1))
        host.append(H("cudaLaunchKernel", "cuda_runtime", call, call + US, 1, i + 1))
        stream = draw(st.sampled_from([7, 8]))
        ks = max(
            call + draw(st.integers(1, 8)) * US, last.get(stream, 0) + draw(st.integers(0, 3)) * US
        )
        ke = ks + draw(st.integers(1, 40)) * US
        gpu.append(G(f"k{i}", "kernel", ks, ke, stream, i + 1))
        last[stream] = ke
        t += d
        if draw(st.booleans()):
            end = max(t, max(last.values())) + draw(st.integers(1, 5)) * US
            host.append(H("cudaDeviceSynchronize", "cuda_runtime", t, end, 1))
            t = end
    end = max(t, max(last.values()))
    host.insert(0, H("ProfilerStep#1", "user_annotation", 0, t, 1))
    return host, gpu, end


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(traces())
def test_graph_replays_the_recorded_trace(tr: tuple[list[H], list[G], int]):
    host, gpu, end = tr
    g = build_graph(host, gpu, 1, 0, end)
    S, E, _ = replay(g)
    for v, n in enumerate(g.nodes):
        assert (S[v], E[v]) == (n.s, n.e), n
    cp = critical_path_of(host, gpu, 1, [(0, end)], [1])
    assert sum(cp.steps[0].bound_ns.values()) == end


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_batched_replays_equal_one_replay_each(g: Graph, data: st.DataObject):
    """The estimates replay a graph K times at once (``makespans``, numpy over the K replays):
    each result equals ``makespan`` of that replay alone, whatever the durations and dropped
    edges (including every edge into a node: it then starts at its recorded start)."""
    edges = [(v, i) for v, es in enumerate(g.preds) for i in range(len(es))]
    k = data.draw(st.integers(1, 4))
    durs = [[float(data.draw(st.integers(0, 30))) for _ in g.nodes] for _ in range(k)]
    drops = [
        set(data.draw(st.lists(st.sampled_from(edges), max_size=4))) if edges else None
        for _ in range(k)
    ]
    start = data.draw(st.integers(-10, 10))
    got = GN.makespans(g, start, durs, drops)
    assert got == [GN.makespan(g, start, d, drop=dr) for d, dr in zip(durs, drops, strict=True)]


@st.composite
def host_spans(draw: st.DrawFn) -> list[H]:
    """Host spans of one thread, nested or not, some overlapping a parent's end (clipped)."""
    n = draw(st.integers(1, 25))
    out = []
    for i in range(n):
        s = draw(st.integers(0, 60))
        e = s + draw(st.integers(1, 40))
        name = draw(
            st.sampled_from(["aten::mm", "Optimizer.step#SGD.step", "nccl:all_reduce", "x"])
        )
        out.append(H(f"{name}{i}", "cpu_op", s * US, e * US, 1))
    return out


@settings(max_examples=300, deadline=None)
@given(host_spans(), st.integers(0, 30), st.integers(40, 110))
def test_a_segments_stack_is_fixed_by_its_innermost_event(spans: list[H], lo: int, hi: int) -> None:
    """build_graph reads a host segment's category once per innermost event: every segment whose
    innermost event is the same object has the same stack under it (pushed once, popped first)."""
    from gpuscope.analysis.critical_path import _tile

    seen: dict[int, list[H]] = {}
    for _a, _b, stack in _tile(spans, lo * US, hi * US):
        if not stack:
            continue
        first = seen.setdefault(id(stack[-1]), stack)
        assert first == stack and all(x is y for x, y in zip(first, stack, strict=True))


@settings(max_examples=200, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=0, max_size=30),
    picks=st.lists(st.integers(0, 29), max_size=8),
)
def test_the_events_nested_in_blocking_calls_are_those_of_the_pairwise_rule(
    spans: list[tuple[int, int]], picks: list[int]
) -> None:
    """``_nested_in`` (by start, with a bisection: 60,000 launches took 343 s as every pair) finds
    exactly the events whose start and end lie within a blocking call, the call itself left out,
    equal spans and duplicates included."""
    from gpuscope.analysis.critical_path import HostEvent, _nested_in

    evs = [HostEvent("op", "cpu_op", s, s + d, 1) for s, d in spans]
    blocking = [evs[i] for i in picks if i < len(evs)]
    brute = {id(h) for b in blocking for h in evs if h is not b and h.s >= b.s and h.e <= b.e}
    assert _nested_in(evs, blocking) == brute
