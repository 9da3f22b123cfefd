"""The host's stream waits as edges of the critical path's graph
(gpuscope.analysis.critical_path._stream_wait_edges; docs/metrics.md, "Critical path"): on
hand-built events, a record then a wait on the host orders the next launched op after the op the
thread launched before the record, even where the host's launch held it back in the trace, so a
replay with the host sped up keeps the streams' order. Answers computed by hand in the
docstrings."""

from __future__ import annotations

from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of
from gpuscope.analysis.gains import makespan

US = 1_000
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def gated_step(
    record: bool = True, ag_stream: int = 22, ag_start_us: int = 310
) -> tuple[list[H], list[G]]:
    """Step 0..1000 µs on thread 1, its host slow (FSDP's all-gather gated by the compute before
    it, the host launching late). Compute C1 (launch 10..12 µs) runs 20..120 on stream 7; the
    host records an event (13..14) and makes a stream wait on it (15..16), runs a Python op
    17..299, launches the all-gather (300..302) that runs 310..410 on stream ``ag_stream``,
    records (420..421), waits (422..423), runs an op 424..599 and launches compute C2 (600..602),
    which runs 610..710 on stream 7. Every launch starts its op 10 µs after it: the typical
    launch latency is 10 µs. ``record`` False: no record calls (the waits wait for nothing
    known)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 1000 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 10 * US, 12 * US, 1, 1),
        *([H("cudaEventRecord", "cuda_runtime", 13 * US, 14 * US, 1, 11)] if record else []),
        H("cudaStreamWaitEvent", "cuda_runtime", 15 * US, 16 * US, 1, 12),
        H("aten::slow_python", "cpu_op", 17 * US, 299 * US, 1),
        H("cuLaunchKernelEx", "cuda_runtime", 300 * US, 302 * US, 1, 2),
        *([H("cudaEventRecord", "cuda_runtime", 420 * US, 421 * US, 1, 13)] if record else []),
        H("cudaStreamWaitEvent", "cuda_runtime", 422 * US, 423 * US, 1, 14),
        H("aten::more_python", "cpu_op", 424 * US, 599 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 600 * US, 602 * US, 1, 3),
    ]
    gpu = [
        G("C1_gemm", "kernel", 20 * US, 120 * US, 7, 1),
        G(AG, "kernel", ag_start_us * US, (ag_start_us + 100) * US, ag_stream, 2),
        G("C2_gemm", "kernel", 610 * US, 710 * US, 7, 3),
    ]
    return host, gpu


def _graph(host: list[H], gpu: list[G]):  # type: ignore[no-untyped-def]
    return critical_path_of(host, gpu, 1, [(0, 1000 * US)], [1]).graph


def _waits(g) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return {
        (g.nodes[e.src].label, n.label)
        for v, n in enumerate(g.nodes)
        for e in g.preds[v]
        if e.kind == "event_wait"
    }


def _free_host(v: int, n) -> float:  # type: ignore[no-untyped-def]
    return 0.0 if n.kind == "host" else float(n.dur)


def _free_host_no_ag(v: int, n) -> float:  # type: ignore[no-untyped-def]
    return 0.0 if n.kind == "host" or n.label == AG else float(n.dur)


def test_a_record_then_a_wait_orders_the_next_launch_after_the_last_one() -> None:
    """The all-gather waits for C1 (the op launched before the first record), C2 for the
    all-gather (launched before the second): two event-wait edges, though in the trace each op
    was held back by its launch, not by the other stream (C1 ended 190 µs before the all-gather
    started, the all-gather 200 µs before C2)."""
    assert _waits(_graph(*gated_step())) == {("C1_gemm", AG), (AG, "C2_gemm")}


def test_a_faster_host_keeps_the_streams_order() -> None:
    """Replayed with the host taking no time, the launches all start at 0: C1 runs 10..110
    (10 µs of launch latency), the all-gather after it 110..210, C2 after that 210..310: 310 µs.
    With the all-gather taking no time, C2 runs 110..210: 210 µs, the all-gather's 100 µs
    saved. Without the edges the all-gather would run 10..110 beside C1 and C2 110..210 either
    way: nothing saved."""
    g = _graph(*gated_step())
    assert makespan(g, 0, _free_host) == 310 * US
    assert makespan(g, 0, _free_host_no_ag) == 210 * US


def test_no_edge_on_one_stream_without_a_record_or_against_the_trace() -> None:
    """Nothing where the ops share a stream (stream order holds already), where no record says
    which op the wait is for, or where the trace disagrees (the all-gather starting at 100 µs,
    before C1's end at 120: it did not wait for C1; C2 still waits for it)."""
    assert _waits(_graph(*gated_step(ag_stream=7))) == set()
    assert _waits(_graph(*gated_step(record=False))) == set()
    assert _waits(_graph(*gated_step(ag_start_us=100))) == {(AG, "C2_gemm")}
