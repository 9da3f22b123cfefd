"""Forward ops re-run inside backward found by their sequence, whatever their names
(analysis/phase_patterns.py ``rerun_mask``): a checkpointed plain function (a NeRF positional
encoding: ``pow``, ``mul``, ``sin``, ``cos``, none of them forward-only) is a recompute, and
``activation_checkpointing`` is offered for it. Hand-made traces with answers by hand, and the real
v68 trace (dropping that checkpoint measured 21.2 %)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpuscope.analysis.phase_patterns import MIN_RERUN, phase_patterns, rerun_mask, rerun_spans
from hypothesis import event, given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder, ingest_one_rank

ROOT = Path(__file__).resolve().parent.parent
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::sin_kernel_cuda(...)>"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
ENCODING = ("aten::arange", "aten::pow", "aten::mul", "aten::sin", "aten::cos")
STEP_US = 10_000.0
N = 3


def mask_of(ops: list[tuple[int, int, int, str]], backward: list[tuple[int, int, int]]) -> Any:
    """``rerun_mask`` of ops (thread, start, end, name) and backward functions (thread, start,
    end)."""
    tid, s, e = (np.array([o[i] for o in ops], dtype=np.int64) for i in range(3))
    b_tid, b_s, b_e = (np.array([b[i] for b in backward], dtype=np.int64) for i in range(3))
    return rerun_mask(tid, s, e, [o[3] for o in ops], b_tid, b_s, b_e)


def test_rerun_mask_needs_min_rerun_ops_in_forward_order() -> None:
    """Forward (thread 1): a b c d e. Backward function 1 (thread 2, 100-200): b c d e then x
    (own): b..e are a re-run; backward function 2 (300-400): c d e (3 < MIN_RERUN) stays; a
    nested op (inside b) is not top-level: not marked."""
    assert MIN_RERUN == 4
    ops = [
        (1, 0, 5, "a"), (1, 10, 15, "b"), (1, 20, 25, "c"), (1, 30, 35, "d"), (1, 40, 45, "e"),
        (2, 110, 120, "b"), (2, 111, 112, "z"), (2, 125, 130, "c"), (2, 135, 140, "d"),
        (2, 145, 150, "e"), (2, 155, 160, "x"),
        (2, 310, 315, "c"), (2, 320, 325, "d"), (2, 330, 335, "e"),
    ]  # fmt: skip
    got = mask_of(ops, [(2, 100, 200), (2, 300, 400)])
    assert got.tolist() == [False] * 5 + [True, False, True, True, True, False] + [False] * 3


def encoding_trace(checkpointed: bool) -> TraceBuilder:
    """3 steps of 10 ms. Forward (main thread): the encoding's 5 ops (arange, pow, mul, sin,
    cos) from 100 µs, 40 µs apart, 20 µs each, each launching a 10 µs kernel; ``aten::cat``;
    ``aten::linear`` launching a 500 µs GEMM. Backward (thread 2): ``AddmmBackward0`` holding
    ``aten::mm`` (a 500 µs GEMM); then ``CosBackward0`` (5,000-5,600 µs) holding, when
    checkpointed, the encoding again (5 ops from 5,020 µs, 50 µs apart, 30 µs each, a 20 µs
    kernel each), then its own ``sin``, ``neg``, ``mul`` (a 10 µs kernel each)."""
    t = TraceBuilder(rank=0, world_size=1)
    for k in range(N):
        b = k * STEP_US
        t.step(k + 1, b, STEP_US)
        for j, op in enumerate(ENCODING):
            s = b + 100 + 40 * j
            t.cpu_op(op, s, 20.0)
            t.launch(EW, s + 5, s + 10, 10.0)
        t.cpu_op("aten::cat", b + 320, 20.0)
        t.cpu_op("aten::linear", b + 400, 50.0)
        t.launch(GEMM, b + 410, b + 500, 500.0)
        t.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", b + 4000, 100.0, tid=2)
        t.cpu_op("aten::mm", b + 4010, 50.0, tid=2)
        t.launch(GEMM, b + 4020, b + 4100, 500.0, tid=2)
        bw = b + 5000.0
        t.cpu_op("autograd::engine::evaluate_function: CosBackward0", bw, 600.0, tid=2)
        at = bw + 20
        if checkpointed:
            for op in ENCODING:
                t.cpu_op(op, at, 30.0, tid=2)
                t.launch(EW, at + 5, at + 10, 20.0, tid=2)
                at += 50
        for op in ("aten::sin", "aten::neg", "aten::mul"):
            t.cpu_op(op, at, 30.0, tid=2)
            t.launch(EW, at + 5, at + 10, 10.0, tid=2)
            at += 50
    return t


@pytest.mark.memory_store
def test_checkpointed_function_recompute_by_hand(con, tmp_path) -> None:
    """Per step: the 5 re-run ops (no checkpoint annotation, no forward-only op among them),
    host 5 × 30 = 150 µs, their kernels 5 × 20 = 100 µs; CosBackward0's own sin, neg, mul and
    AddmmBackward0's mm are not re-runs."""
    run = ingest_one_rank(con, tmp_path, encoding_trace(checkpointed=True))
    rc = phase_patterns(con, run, 0).recompute
    assert rc is not None and not rc.annotated
    assert rc.ops_per_step == 5
    assert dict(rc.by_op) == {op: 1.0 for op in ENCODING}
    assert rc.host_ms_per_step == pytest.approx(0.150)
    assert rc.kernel_ms_per_step == pytest.approx(0.100)


@pytest.mark.memory_store
def test_backward_formulas_alone_are_no_recompute(con, tmp_path) -> None:
    """Without the checkpoint the backward runs its own formulas only: no recompute."""
    run = ingest_one_rank(con, tmp_path, encoding_trace(checkpointed=False))
    assert phase_patterns(con, run, 0).recompute is None


@pytest.mark.slow
@pytest.mark.memory_store
def test_v68_offers_activation_checkpointing_after_the_graphs_that_replay_it(con) -> None:
    """v68 (NeRF MLP, ``checkpoint`` on the positional encoding only, a plain function): the
    recompute is found and ``activation_checkpointing`` offered, its range holding the measured
    21.2 %; CUDA graphs, which replay the recompute too, come before it (estimated alone: 63.1 %
    measured with the checkpointing kept, truth's ``v68g``), their range holding that."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    trace = ROOT / (
        "sample_traces/validation/v68/v68_null_activation_checkpointing_rank0.pt.trace.json.gz"
    )
    run = ingest_paths(con, [trace])[0].run_id
    rep = analyze_run(con, run, rank=0)
    ids = [r.id for r in rep.recommendations]
    assert ids[:2] == ["cuda_graphs", "activation_checkpointing"], ids
    graphs, ac = rep.recommendations[:2]
    assert "aten::pow" in ac.evidence["by_op_per_step"]
    assert ac.estimate is not None and graphs.estimate is not None
    assert ac.estimate.low_pct <= 21.2 <= ac.estimate.high_pct
    assert graphs.estimate.low_pct <= 63.1 <= graphs.estimate.high_pct


def test_rerun_mask_leaves_out_ops_that_compute_nothing() -> None:
    """Forward (thread 1): b view c d e. Backward function 1 (thread 2): b c view d e: the 4
    compute ops match (the views are left out of both sequences, and not marked). Backward
    function 2: FSDP's unshard before backward (split_with_sizes, _foreach_copy_, view, empty,
    as_strided) as the forward ran it: nothing (v54)."""
    unshard = [
        "aten::split_with_sizes", "aten::_foreach_copy_", "aten::view", "aten::empty",
        "aten::as_strided",
    ]  # fmt: skip
    fwd = ["b", "aten::view", "c", "d", "e", *unshard]
    bwd1 = ["b", "c", "aten::view", "d", "e"]
    ops = [(1, 10 * i, 10 * i + 5, n) for i, n in enumerate(fwd)]
    ops += [(2, 1000 + 10 * i, 1000 + 10 * i + 5, n) for i, n in enumerate(bwd1)]
    ops += [(2, 2000 + 10 * i, 2000 + 10 * i + 5, n) for i, n in enumerate(unshard)]
    got = mask_of(ops, [(2, 900, 1100), (2, 1900, 2100)])
    n = len(fwd)
    assert got[:n].tolist() == [False] * n
    assert got[n : n + 5].tolist() == [True, True, False, True, True]
    assert not got[n + 5 :].any()


def compiled_trace() -> TraceBuilder:
    """3 steps of 10 ms of a compiled region without checkpointing. Forward (main thread):
    ``CompiledFunction`` (100-400 µs) holding 4 ``aten::mm`` (from 120 µs, 60 µs apart, 20 µs
    each, a 30 µs GEMM each). Backward (thread 2): ``CompiledFunctionBackward`` (5,000-5,600 µs)
    holding the compiled backward graph: 4 ``aten::mm`` in the forward's order (from 5,020 µs,
    100 µs apart, 30 µs each, a 40 µs GEMM each): by sequence they repeat the forward, but they
    are the backward graph's own matmuls (AOTAutograd), no re-run."""
    t = TraceBuilder(rank=0, world_size=1)
    for k in range(N):
        b = k * STEP_US
        t.step(k + 1, b, STEP_US)
        t.cpu_op("CompiledFunction", b + 100, 300.0)
        for j in range(4):
            s = b + 120 + 60 * j
            t.cpu_op("aten::mm", s, 20.0)
            t.launch(GEMM, s + 5, s + 10, 30.0)
        bw = b + 5000.0
        t.cpu_op("autograd::engine::evaluate_function: CompiledFunctionBackward", bw, 600.0, tid=2)
        for j in range(4):
            s = bw + 20 + 100 * j
            t.cpu_op("aten::mm", s, 30.0, tid=2)
            t.launch(GEMM, s + 5, s + 10, 40.0, tid=2)
    return t


@pytest.mark.memory_store
def test_a_compiled_regions_backward_is_no_recompute(con, tmp_path) -> None:
    """The compiled backward's 4 ``mm`` match the forward's 4 by sequence (MIN_RERUN = 4), yet
    are no recompute: nothing found, and no ``activation_checkpointing`` fix."""
    from gpuscope.analysis.report import analyze_run

    run = ingest_one_rank(con, tmp_path, compiled_trace())
    assert phase_patterns(con, run, 0).recompute is None
    ids = [r.id for r in analyze_run(con, run, rank=0).recommendations]
    assert "activation_checkpointing" not in ids


@pytest.mark.slow
@pytest.mark.memory_store
def test_v79_compiled_flow_offers_no_checkpointing(con) -> None:
    """v79 (RealNVP flow under torch.compile, no checkpointing; its planted cause is launch
    overhead, fixed by CUDA graphs, measured 68.2 %): ``CompiledFunctionBackward`` runs 94
    ``aten::mm`` per step that repeat the forward's by sequence. They are no recompute: no
    ``activation_checkpointing`` fix (the fourth blind part's judgement at ca152e9 put it first
    at 65.0 %)."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    trace = ROOT / "sample_traces/validation/v79/v79_cuda_graphs_rank0.pt.trace.json.gz"
    run = ingest_paths(con, [trace])[0].run_id
    ids = [r.id for r in analyze_run(con, run, rank=0).recommendations]
    assert "activation_checkpointing" not in ids, ids


@st.composite
def _ops_and_backward(
    draw: st.DrawFn,
) -> tuple[list[tuple[int, int, int, str]], list[tuple[int, int, int]]]:
    """A forward on thread 1 (names drawn from few, so that sequences repeat), backward functions
    on thread 2, some nested, holding ops of those names (some nested in others), whole µs, no two
    ops of a thread starting together."""
    names = ["a", "b", "c", "d", "aten::view"]  # aten::view: counted by no sequence
    ops: list[tuple[int, int, int, str]] = []
    t = 0
    for _ in range(draw(st.integers(0, 14))):
        t += draw(st.integers(1, 9))
        nested = draw(st.integers(0, 4)) == 0  # now and then an op holds the next
        ops.append((1, t, t + draw(st.integers(10, 12) if nested else st.integers(0, 0)),
                    draw(st.sampled_from(names))))  # fmt: skip
    backward: list[tuple[int, int, int]] = []
    b = 200
    starts: set[int] = set()
    for _ in range(draw(st.integers(0, 4))):
        d = draw(st.integers(10, 80))
        backward.append((2, b, b + d))
        if draw(st.integers(0, 3)) == 0:
            backward.append((2, b + 1, b + d // 2))
        at = sorted(set(draw(st.lists(st.integers(b + 2, b + d), min_size=3, max_size=8))) - starts)
        fwd = [o[3] for o in ops if o[0] == 1 and o[2] == o[1]]  # those no other op holds, often
        j = draw(st.integers(0, max(0, len(fwd) - MIN_RERUN)))
        copied = fwd[j : j + len(at)] if draw(st.booleans()) else []  # a re-run, often
        for n, s in enumerate(at):
            starts.add(s)
            name = copied[n] if n < len(copied) else draw(st.sampled_from(names))
            ops.append((2, s, s + draw(st.sampled_from([0, 0, 0, 3])), name))
        b += d + draw(st.integers(-5, 20))  # may overlap the next
    return ops, backward


@settings(max_examples=300, deadline=None)
@given(_ops_and_backward(), st.lists(st.integers(0, 650), max_size=16))
def test_rerun_spans_read_a_batch_at_a_time_are_rerun_masks(
    drawn: tuple[list[tuple[int, int, int, str]], list[tuple[int, int, int]]], cuts: list[int]
) -> None:
    """The ops read in batches of starts cut anywhere (each batch in thread-then-start order):
    :func:`rerun_spans` finds the ops :func:`rerun_mask` marks over all of them at once."""
    ops, backward = drawn
    ids = {n: i for i, n in enumerate(sorted({o[3] for o in ops}))}
    names = {i: n for n, i in ids.items()}
    cols = [(o[0], o[1], o[2], ids[o[3]]) for o in ops]
    b = tuple(np.array([x[i] for x in backward], dtype=np.int64) for i in range(3))
    bwd = (*b, np.zeros(len(backward), dtype=np.int64))
    bounds = sorted(set(cuts))

    def read():  # type: ignore[no-untyped-def]
        edges = [None, *bounds, None]
        for lo, hi in itertools.pairwise(edges):
            part = sorted(
                (c for c in cols if (lo is None or c[1] >= lo) and (hi is None or c[1] < hi)),
                key=lambda c: (c[0], c[1]),
            )
            yield tuple(np.array([c[i] for c in part], dtype=np.int64) for i in range(4))

    got = rerun_spans(read, bwd, lambda want: {i: names[i] for i in want})
    found = sorted(zip(*(x.tolist() for x in got), strict=True))
    ordered = sorted(cols, key=lambda c: (c[0], c[1]))
    mask = (
        mask_of([(c[0], c[1], c[2], names[c[3]]) for c in ordered], backward)
        if ordered
        else np.zeros(0, dtype=bool)
    )
    assert found == sorted(c for c, m in zip(ordered, mask.tolist(), strict=True) if m)
    event("re-runs found" if found else "none")
