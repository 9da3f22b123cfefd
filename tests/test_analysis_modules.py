"""GPU time and idle by nn.Module and phase, and repeated kernel sequences: a hand-made trace with
answers worked out in its docstring, property tests against brute force, and the real sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gpuscope.analysis.busy import busy_summary
from gpuscope.analysis.modules import innermost, module_analysis, tandem_repeats
from gpuscope.analysis.report import analyze_run
from gpuscope.analysis.steps import find_window
from gpuscope.ingest.loader import ingest_paths
from hypothesis import given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "memory"
BWD_TID = 2002


def module_trace() -> TraceBuilder:
    """One step [100, 700) µs. Modules (forward, main thread): Net_0 [100, 400) holding Linear_0
    [110, 200) and Linear_1 [210, 300). Kernels (launch -> GPU span):

    - k1 launched @120 (Linear_0) -> [130, 180) 50 µs; its op aten::addmm [115, 150) has seq 7
    - k2 @220 (Linear_1) -> [230, 260) 30 µs
    - k3 @350 (Net_0 itself) -> [360, 370) 10 µs
    - k4 @510 from the autograd thread, inside evaluate_function: AddmmBackward0 (seq 7)
      [500, 600) -> [520, 560) 40 µs: Linear_0's backward

    GPU idle gaps, each charged to the kernel that ends it: [100,130) 30 k1, [180,230) 50 k2,
    [260,360) 100 k3, [370,520) 150 k4, [560,700) 140 the window's end.
    Phases: forward [100, 500), backward [500, 600), other [600, 700).
    """
    t = TraceBuilder()
    t.step(1, 100, 600)
    t.module("Net_0", 100, 300)
    t.module("Linear_0", 110, 90)
    t.module("Linear_1", 210, 90)
    t.cpu_op("aten::addmm", 115, 35, **{"Sequence number": 7, "Fwd thread id": 0})
    t.launch("k1", 120, 130, 50)
    t.launch("k2", 220, 230, 30)
    t.launch("k3", 350, 360, 10)
    t.cpu_op(
        "autograd::engine::evaluate_function: AddmmBackward0", 500, 100, tid=BWD_TID,
        **{"Sequence number": 7, "Fwd thread id": 1},
    )  # fmt: skip
    t.launch("k4", 510, 520, 40, tid=BWD_TID)
    return t


def _modules(con, tmp_path: Path, t: TraceBuilder):
    rid = ingest_paths(con, [t.write(tmp_path / "m.json")])[0].run_id
    w = find_window(con, rid, 0, None)
    dev = busy_summary(con, rid, 0, w.start_ns, w.end_ns).device
    return module_analysis(con, rid, 0, w, dev)


@pytest.mark.slow
def test_hand_trace_modules_and_phases(con, tmp_path: Path) -> None:
    r = _modules(con, tmp_path, module_trace())
    assert r.source == "nn.Module"
    rows = {m.path: m for m in r.modules}
    us = 1000
    assert rows["Net_0"].gpu_ns == 130 * us and rows["Net_0"].self_gpu_ns == 10 * us
    assert rows["Net_0/Linear_0"].gpu_ns == 90 * us
    assert rows["Net_0/Linear_0"].gpu_by_phase_ns == {"forward": 50 * us, "backward": 40 * us}
    assert rows["Net_0/Linear_1"].gpu_ns == 30 * us
    assert rows["Net_0"].idle_ns == 330 * us
    assert rows["Net_0/Linear_0"].idle_ns == 180 * us
    assert rows["Net_0/Linear_1"].idle_ns == 50 * us
    assert rows["(end of window)"].idle_ns == 140 * us
    assert r.by_phase["forward"] == {"gpu_ns": 90 * us, "idle_ns": 180 * us, "n": 3}
    assert r.by_phase["backward"] == {"gpu_ns": 40 * us, "idle_ns": 150 * us, "n": 1}
    assert r.by_phase["other"]["idle_ns"] == 140 * us
    # the sums close: every kernel and every idle ns is charged once
    assert sum(v["gpu_ns"] for v in r.by_phase.values()) == r.busy_kernel_ns == 130 * us
    assert sum(v["idle_ns"] for v in r.by_phase.values()) == 600 * us - 130 * us


@pytest.mark.slow
def test_no_module_spans_says_how_to_record(con, tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("k", 10, 20, 30)
    r = _modules(con, tmp_path, t)
    assert r.source is None and "with_modules=True" in r.notes[0]
    assert [m.path for m in r.modules] == ["(no module)", "(end of window)"]


@pytest.mark.slow
def test_repeated_kernel_sequences(con, tmp_path: Path) -> None:
    """Three steps of: embed, then (qkv, attn, mlp) × 4 layers, then head: one unit of 3 kernels
    that runs 4 times in every step; each kernel 10 µs, so the unit is 120 of 140 µs (85.7 %)."""
    t = TraceBuilder()
    seq = ["embed", *(["qkv", "attn", "mlp"] * 4), "head"]
    for s in range(3):
        base = 1000.0 * s
        t.step(s, base, 1000)
        for i, k in enumerate(seq):
            t.launch(k, base + 5 * i, base + 100 + 20 * i, 10)
    r = _modules(con, tmp_path, t)
    assert r.same_sequence_steps == 3 and r.kernels_per_step == 14
    top = r.repeats[0]
    assert (top.length, top.times, top.steps) == (3, 4, 3)
    assert top.first_kernels == ["qkv", "attn", "mlp"]
    assert top.gpu_ns_per_step == 120_000
    assert top.share_pct == pytest.approx(100 * 120 / 140)


def test_tandem_repeats_small() -> None:
    assert tandem_repeats(np.array([9, 1, 2, 3, 1, 2, 3, 1, 2, 3, 8])) == [(1, 3, 3)]
    assert tandem_repeats(np.array([1, 2, 3, 4])) == []
    # a 2-kernel unit twice, not the 4-kernel "unit" once
    assert tandem_repeats(np.array([5, 6, 5, 6, 5, 6, 5, 6])) == [(0, 2, 4)]


def _brute_best_cover(seq: list[int], min_len: int = 2) -> int:
    best = 0
    n = len(seq)
    for s in range(n):
        for p in range(min_len, n // 2 + 1):
            k = 1
            while s + (k + 1) * p <= n and seq[s + k * p : s + (k + 1) * p] == seq[s : s + p]:
                k += 1
            if k >= 2:
                best = max(best, k * p)
    return best


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=0, max_size=24))
def test_tandem_repeats_against_brute_force(seq: list[int]) -> None:
    got = tandem_repeats(np.array(seq, dtype=np.int64))
    covered = np.zeros(len(seq), dtype=bool)
    for s, p, k in got:
        assert k >= 2 and p >= 2
        assert seq[s : s + p * k] == seq[s : s + p] * k  # really a back-to-back repeat
        assert not covered[s : s + p * k].any()  # no overlap
        covered[s : s + p * k] = True
    best = _brute_best_cover(seq)
    assert (got[0][1] * got[0][2] if got else 0) == best  # the largest cover comes first


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_innermost_against_brute_force(data: st.DataObject) -> None:
    """Nested spans (built as a random tree) on two threads; each query's label is the innermost
    span holding it, found by checking every span."""
    spans: list[tuple[int, int, int, str]] = []  # (tid, s, e, label)

    def tree(tid: int, lo: int, hi: int, depth: int) -> None:
        t = lo
        while t < hi and depth < 4 and data.draw(st.booleans()):
            s = data.draw(st.integers(t, hi))
            e = data.draw(st.integers(s, hi))
            if e > s:
                spans.append((tid, s, e, f"m{len(spans)}"))
                tree(tid, s, e, depth + 1)
            t = e + 1

    for tid in (1, 2):
        tree(tid, 0, 100, 0)
    q = data.draw(
        st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(-5, 105)), max_size=30)
    )
    arr = np.array(spans, dtype=object) if spans else np.zeros((0, 4), dtype=object)
    got = innermost(
        np.array([x[0] for x in spans], dtype=np.int64), np.array([x[1] for x in spans], dtype=np.int64),
        np.array([x[2] for x in spans], dtype=np.int64), [x[3] for x in spans],
        np.array([a for a, _ in q], dtype=np.int64), np.array([b for _, b in q], dtype=np.int64), join=None,
    )  # fmt: skip
    del arr
    for (tid, t), g in zip(q, got, strict=True):
        holding = [x for x in spans if x[0] == tid and x[1] <= t < x[2]]
        # the shortest; of equal spans the nested one (a child is drawn after its parent)
        want = min(holding, key=lambda x: (x[2] - x[1], -int(x[3][1:])))[3] if holding else None
        assert g == want


@pytest.mark.slow
def test_real_trace_modules(con) -> None:
    rid = ingest_paths(con, [SAMPLE / "gpt_mem.pt.trace.json.gz"])[0].run_id
    j = analyze_run(con, rid).to_json()["modules"]
    assert j["source"] == "nn.Module"
    names = {m["module"] for m in j["modules"]}
    assert {f"GPT_0/Block_{i}" for i in range(4)} <= names
    blocks = [m for m in j["modules"] if m["module"].startswith("GPT_0/Block_") and m["depth"] == 1]
    assert all(m["gpu_us_per_step_by_phase"].get("backward", 0) > 0 for m in blocks)  # via seq nr
    assert {"forward", "backward", "optimizer"} <= set(j["by_phase"])
    assert j["same_sequence_steps"] == 3
    assert any(r["times_per_step"] == 4 for r in j["repeats"])  # the 4 transformer blocks
