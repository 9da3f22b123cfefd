"""The modules analysis reads the window's activity and idle gaps in batches (analysis.modules,
``BATCH_ROWS``) and the backward ops only around the launches that need them: its results equal
the in-memory analysis it replaced (tests/modules_reference.py, every activity and host op of
the rank in frames) on random traces, with batches as small as one row (a module, a step or a
backward op spanning many batches), and on the sample traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis import modules
from gpuscope.analysis.busy import busy_summary
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.steps import find_window
from gpuscope.ingest.loader import ingest_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from modules_reference import reference_module_analysis, reference_phase_spans
from test_analysis_modules import BWD_TID, module_trace
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
KERNELS = ["gemm", "attn", "norm", "relu"]


def _both(con, rid: str) -> tuple[dict, dict]:
    """(batched, in-memory) results of the rank's window, as ``analyze --json`` writes them; the
    phase spans of each compared too."""
    w = find_window(con, rid, 0, None)
    dev = busy_summary(con, rid, 0, w.start_ns, w.end_ns).device
    ix = RankIndex.shared(con, rid, 0)
    got = modules.module_analysis(con, rid, 0, w, dev).to_json()
    want_spans = reference_phase_spans(ix, w)
    assert modules.phase_spans(con, rid, 0, w).to_dict("list") == want_spans.to_dict("list")
    return got, reference_module_analysis(con, rid, 0, w, dev).to_json()


@st.composite
def traces(draw: st.DrawFn) -> TraceBuilder:
    """Steps of a forward (nested modules on the main thread, ops with sequence numbers, kernels
    launched inside and outside modules), a backward on the autograd thread (its ops name the
    forward ops' sequence numbers, some unknown, some nested) and an optimizer span; times whole
    µs, kernels drawn from four names so that sequences repeat."""
    t = TraceBuilder(base_ns=None)
    seq = 0
    for k in range(draw(st.integers(1, 3))):
        base = 1000 * k
        t.step(k, base, 1000)

        def tree(lo: int, hi: int, depth: int) -> None:
            x = lo
            while x < hi and depth < 3 and draw(st.booleans()):
                s = draw(st.integers(x, hi))
                e = draw(st.integers(s, hi))
                if e > s:
                    t.module(f"M{depth}_{s % 3}", s, e - s)
                    tree(s + 1, e, depth + 1)  # apart from its parent: no two equal spans
                x = e + 1

        tree(base, base + 400, 0)
        seqs: list[int] = []
        for _ in range(draw(st.integers(0, 4))):
            s = draw(st.integers(base, base + 390))
            seq += 1
            seqs.append(seq)
            t.cpu_op("aten::addmm", s, 5, **{"Sequence number": seq, "Fwd thread id": 0})
        for _ in range(draw(st.integers(0, 8))):
            c = draw(st.integers(base, base + 450))
            t.launch(draw(st.sampled_from(KERNELS)), c, c + draw(st.integers(1, 40)),
                     draw(st.integers(1, 30)))  # fmt: skip
        b = base + 500
        for _ in range(draw(st.integers(0, 4))):
            d = draw(st.integers(20, 120))
            q = draw(st.sampled_from([*seqs, 10_000])) if seqs else 10_000
            t.cpu_op(f"autograd::engine::evaluate_function: B{q}", b, d, tid=BWD_TID,
                     **{"Sequence number": q, "Fwd thread id": 1})  # fmt: skip
            if draw(st.booleans()):  # a nested backward op (reentrant backward)
                t.cpu_op("autograd::engine::evaluate_function: inner", b + 2, d // 2, tid=BWD_TID,
                         **{"Sequence number": 10_001, "Fwd thread id": 1})  # fmt: skip
            for _ in range(draw(st.integers(0, 3))):
                c = draw(st.integers(b, b + d))
                t.launch(draw(st.sampled_from(KERNELS)), c, c + draw(st.integers(1, 40)),
                         draw(st.integers(1, 30)), tid=BWD_TID)  # fmt: skip
            b += d + 1
        if draw(st.booleans()):
            o = draw(st.integers(base + 850, base + 950))
            t.annotation("Optimizer.step#AdamW.step", o, 40)
            t.launch("adam", o + 5, o + 10, 5)
    return t


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(traces(), st.sampled_from([1, 2, 3, 7, 1 << 18]))
def test_batched_equals_in_memory_on_random_traces(con, tmp_path, monkeypatch, t, rows) -> None:
    monkeypatch.setattr(modules, "BATCH_ROWS", rows)
    rid = ingest_paths(con, [t.write(tmp_path / "r.json")])[0].run_id
    got, want = _both(con, rid)
    assert got == want


def test_hand_trace_in_batches_of_one_row(con, tmp_path, monkeypatch) -> None:
    """The hand trace (tests/test_analysis_modules.py) one activity and one gap a batch: Net_0
    holds kernels of three batches, Linear_0's backward kernel is found through its sequence
    number in a batch of its own."""
    monkeypatch.setattr(modules, "BATCH_ROWS", 1)
    rid = ingest_paths(con, [module_trace().write(tmp_path / "m.json")])[0].run_id
    got, want = _both(con, rid)
    assert got == want
    rows = {m["module"]: m for m in got["modules"]}
    assert rows["Net_0"]["gpu_us_per_step"] == 130 and rows["Net_0"]["idle_us_per_step"] == 330
    assert rows["Net_0/Linear_0"]["gpu_us_per_step_by_phase"] == {"forward": 50, "backward": 40}


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
    monkeypatch.setattr(modules, "BATCH_ROWS", 97)
    rid = ingest_paths(con, [SAMPLES / trace])[0].run_id
    got, want = _both(con, rid)
    assert got == want


@pytest.mark.parametrize(
    ("keys", "rows", "want"),
    [
        (list(range(10)), 3, [0, 3, 6, 9]),
        (list(range(7)), 7, [0]),
        (list(range(5)), 1, [0, 1, 2, 3, 4]),
        ([0, 0, 0, 1, 2], 2, [0, 2]),  # rows of one key stay in one batch
        ([], 4, []),
    ],
)
def test_batch_bounds_cut_every_batch_rows(con, monkeypatch, keys, rows, want) -> None:
    monkeypatch.setattr(modules, "BATCH_ROWS", rows)
    sql = f"SELECT unnest({keys or [0]}::BIGINT[]) AS k" + ("" if keys else " LIMIT 0")
    assert modules.batch_bounds(con, sql, "k", {}) == want
