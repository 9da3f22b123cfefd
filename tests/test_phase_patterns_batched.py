"""The phase patterns read the window's launches, forward ops and backward functions a batch of
launches' time at a time (analysis.phase_patterns, ``BATCH_ROWS``; the re-run search's
``aten::`` ops, ``RERUN_BATCH_ROWS`` of them) and the GPU time
around what they found back by SQL: their results equal the in-memory analysis they replaced
(tests/phase_patterns_reference.py) on random traces, with batches as small as one launch (an
optimizer step, a backward function or a re-run op spanning many batches), and on the samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuscope.analysis import phase_patterns as pp
from gpuscope.analysis.phase_patterns import PhasePatterns, phase_patterns
from gpuscope.ingest.loader import ingest_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from phase_patterns_reference import reference_phase_patterns
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
KERNELS = ["gemm", "gelu", "multi_tensor_apply_kernel", AG, AR]
BWD = 2


def _everything(p: PhasePatterns) -> dict[str, Any]:
    """The JSON and what it leaves out: the spans and correlations the fix units re-time (the
    spans a set: which re-run op a batch meets first is the rows' order)."""
    out: dict[str, Any] = {"json": p.to_json()}
    for k in ("optimizer", "recompute"):
        x = getattr(p, k)
        out[k] = None if x is None else (tuple(sorted(x.spans)), x.correlations)
    return out


@st.composite
def traces(draw: st.DrawFn) -> TraceBuilder:
    """Steps of: forward ops and kernels on the main thread; backward functions on the autograd
    thread, some nested, holding forward ops (a re-run) and their own ops, each launching
    kernels (compute, all-gather, all-reduce on other streams); an optimizer step holding foreach
    ops or a loop of launches; whole µs."""
    t = TraceBuilder(rank=0, world_size=1, base_ns=None)
    for k in range(draw(st.integers(1, 3))):
        base = 2000 * k
        t.step(k + 1, base, 2000)

        def launches(lo: int, hi: int, tid: int) -> None:
            for _ in range(draw(st.integers(0, 3))):
                c = draw(st.integers(lo, hi))
                name = draw(st.sampled_from(KERNELS))
                t.launch(name, c, c + draw(st.integers(1, 300)), draw(st.integers(1, 200)),
                         tid=tid, stream=21 if "nccl" in name else 7)  # fmt: skip

        for j in range(draw(st.integers(0, 4))):
            s = base + 150 * j + draw(st.integers(0, 100))
            t.cpu_op(draw(st.sampled_from(["aten::linear", "aten::addmm"])), s, 50)
            launches(s, s + 50, 1001)
        b = base + 800
        for _ in range(draw(st.integers(0, 3))):
            d = draw(st.integers(30, 200))
            fn = draw(st.sampled_from(["B", "CompiledFunctionBackward"]))  # compiled: no re-run
            t.cpu_op(f"autograd::engine::evaluate_function: {fn}", b, d, tid=BWD)
            if draw(st.booleans()):
                t.cpu_op("autograd::engine::evaluate_function: inner", b + 1, d // 3, tid=BWD)
            # spans of one thread start apart: of equal spans, which is the outer one is the
            # store's order (arbitrary), in both analyses
            # up to 5 ops: 4 in the forward's order are a re-run by sequence (rerun_mask)
            for s in sorted(set(draw(st.lists(st.integers(b + 2, b + d), max_size=5)))):
                op = draw(st.sampled_from(["aten::linear", "aten::gelu", "aten::mm"]))
                t.cpu_op(op, s, draw(st.integers(1, 40)), tid=BWD)
                if draw(st.booleans()):
                    t.cpu_op("aten::addmm", s + 0.5, draw(st.integers(1, 40)), tid=BWD)
            launches(b, b + d, BWD)
            b += d + draw(st.integers(0, 5))
        if draw(st.booleans()):
            o = base + 1500 + draw(st.integers(0, 100))
            t.cpu_op("Optimizer.step#AdamW.step", o, 200)
            if draw(st.booleans()):
                t.cpu_op("aten::_foreach_add_", o + 10, 20)
            launches(o, o + 200, 1001)
            for j in range(draw(st.integers(0, 4))):
                t.launch("elementwise", o + 5 + 10 * j, o + 20 + 10 * j, 5)
        if draw(st.booleans()):
            t.annotation("CheckpointFunction", base + 790, 5)
    return t


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(traces(), st.sampled_from([1, 2, 3, 1 << 18]))
def test_batched_equals_in_memory_on_random_traces(con, tmp_path, monkeypatch, t, rows) -> None:
    monkeypatch.setattr(pp, "BATCH_ROWS", rows)
    monkeypatch.setattr(pp, "RERUN_BATCH_ROWS", rows)  # the aten:: ops of the re-run search too
    rid = ingest_paths(con, [t.write(tmp_path / "p.json")])[0].run_id
    got = _everything(phase_patterns(con, rid, 0))
    assert got == _everything(reference_phase_patterns(con, rid, 0))


@pytest.mark.slow
@pytest.mark.parametrize(
    "trace",
    [
        "memory/gpt_mem.pt.trace.json.gz",
        "before/before_rank0.pt.trace.json.gz",
        "after/after_rank0.pt.trace.json.gz",
    ],
)
def test_batched_equals_in_memory_on_samples(con, monkeypatch, trace) -> None:
    monkeypatch.setattr(pp, "BATCH_ROWS", 97)
    monkeypatch.setattr(pp, "RERUN_BATCH_ROWS", 97)
    rid = ingest_paths(con, [SAMPLES / trace])[0].run_id
    got = _everything(phase_patterns(con, rid, 0))
    assert got == _everything(reference_phase_patterns(con, rid, 0))
