"""Compare(A, B): deltas per metric, idle by cause and kernels per step, recommendations resolved."""

from __future__ import annotations

import pytest
from gpuscope.analysis.compare import Delta, compare_reports, compare_view, display_delta
from gpuscope.analysis.idle import CAUSES
from gpuscope.analysis.report import analyze_run
from test_analysis_recommendations import after_like, before_like, ingest

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


def test_delta_arithmetic():
    d = Delta("step_time_ms", "ms", 8.0, 2.0, "lower")
    assert (d.delta, d.delta_pct, d.improved) == (-6.0, -75.0, True)
    assert Delta("busy", "%", 50.0, 40.0, "higher").improved is False
    assert Delta("x", "", None, 1.0).delta is None
    assert Delta("x", "", 0.0, 1.0).delta_pct is None
    assert Delta("x", "", 1.0, 1.0).improved is None
    assert Delta("flops", "FLOP", 1.0, 2.0, None).improved is None


@pytest.mark.slow
def test_before_vs_after(con, tmp_path):
    a = ingest(con, before_like(), tmp_path / "before.json")
    b = ingest(con, after_like(), tmp_path / "after.json")
    ra, rb = analyze_run(con, a, all_ranks=False), analyze_run(con, b, all_ranks=False)
    cmp = compare_reports(ra, rb)
    assert cmp.a.id == a and cmp.b.id == b
    m = {d.metric: d for d in cmp.metrics}
    # before: 3 steps of 8 ms; after: window / 3 steps
    assert m["step_time_ms"].a == pytest.approx(8.0)
    assert m["step_time_ms"].b == pytest.approx(rb.step_stats.mean_ms)
    assert m["step_time_ms"].improved is True
    # issue 9: the speed-up is by throughput when both runs know their samples per step (A: 8
    # per 8 ms = 1000/s; B: 32 per its step), no longer the step-time ratio (8 / B's step), which
    # compared a batch of 8 with a batch of 32
    assert cmp.speedup_basis == "samples_per_s"
    assert cmp.speedup == pytest.approx((32 / rb.step_stats.mean_ms) / (8 / 8.0))
    # throughput from the metadata: 8 samples per 8 ms step vs 32 per step
    assert m["samples_per_s"].a == pytest.approx(1000.0)
    assert m["samples_per_s"].b == pytest.approx(32 / (rb.step_stats.mean_ms / 1e3))
    assert m["gpu_busy_pct"].improved is True
    idle = {d.metric: d for d in cmp.idle_by_cause}
    assert idle["data_loading"].a == pytest.approx(3000.0)  # µs per step
    assert idle["host_sync"].b == 0.0 and idle["host_sync"].improved is True
    cats = {d.metric: d for d in cmp.kernel_categories}
    assert cats["gemm"].a == pytest.approx(4000.0) and cats["gemm"].b == pytest.approx(2000.0)
    tops = {d.metric: d for d in cmp.top_kernels}
    assert tops["ampere_sgemm_128x64_nn"].b == 0.0
    rec = cmp.recommendations
    assert {"dataloader_workers", "host_sync", "pin_memory", "mixed_precision"} <= set(
        rec["resolved"]
    )
    assert rec["remaining"] == [] and rec["new"] == []
    text = cmp.table()
    assert "resolved by B" in text and "step_time_ms" in text and "data_loading" in text


@pytest.mark.slow
def test_compare_view_is_what_the_page_shows(con, tmp_path):
    """compare_view: the six cards, every delta in display units and words, idle per step by
    cause, and the fixes with their titles; all read from the comparison, none computed again."""
    a = ingest(con, before_like(), tmp_path / "before.json")
    b = ingest(con, after_like(), tmp_path / "after.json")
    ra, rb = analyze_run(con, a, all_ranks=False), analyze_run(con, b, all_ranks=False)
    view = compare_view(ra, rb)
    cmp = view.comparison
    m = {d.metric: d for d in cmp.metrics}
    cards = {c.key: c for c in view.cards}
    assert [c.label for c in view.cards] == [
        "Throughput",
        "Step time",
        "Achieved TFLOP/s",
        "MFU",  # one GPU, one peak: no "(different peaks)"
        "GPU busy",
        "Idle per step",
    ]
    assert view.peak_note is None
    step = cards["step_time"]
    assert (step.a, step.unit, step.lower_is_better) == (pytest.approx(8.0), "ms", True)
    # samples, not tokens, per step in the metadata: 8 per 8 ms = 1000 samples/s
    tp = cards["throughput"]
    assert (tp.a, tp.unit, tp.lower_is_better) == (pytest.approx(1000.0), "samples/s", False)
    assert cards["gpu_busy"].b == m["gpu_busy_pct"].b and cards["gpu_busy"].unit == "%"
    idle = cards["idle_per_step"]  # µs per step in the comparison, ms on the card
    assert idle.a == pytest.approx(m["idle_per_step_us"].a / 1e3) and idle.unit == "ms"
    # the table: sections in order, labels in words, µs -> ms
    assert [s.title for s in view.sections][:2] == ["The compared ranks", "Idle per step, by cause"]
    headline = {d.metric: d for d in view.sections[0].rows}
    assert headline["Step time (mean)"].a == pytest.approx(8.0)
    assert headline["Throughput (samples)"].unit == "samples/s"
    by_cause = {d.metric: d for d in view.sections[1].rows}
    assert by_cause["Data loading"].a == pytest.approx(3.0)  # 3000 µs per step
    assert by_cause["Data loading"].unit == "ms/step" and by_cause["Host sync"].improved is True
    # the idle chart's bars: every cause, ms per step
    ia, ib = view.idle_ms_per_step
    assert ia["data_loading"] == pytest.approx(3.0) and set(ia) == set(ib) == set(CAUSES)
    # fixes: by id, with their titles; the ids agree with the comparison's
    resolved = {f.id: f for f in view.fixes.resolved}
    assert list(resolved) == cmp.recommendations["resolved"]
    assert resolved["dataloader_workers"].title == next(
        r.title for r in ra.recommendations if r.id == "dataloader_workers"
    )
    assert view.fixes.remaining == [] and view.fixes.new == []
    assert view.speedup_text == cmp.speedup_text and "B processes" in (view.speedup_text or "")


def test_display_delta_units_and_words():
    assert display_delta(Delta("idle_per_step_us", "µs", 1500.0, 500.0)) == Delta(
        "Idle time (per step)", "ms", 1.5, 0.5
    )
    assert display_delta(Delta("flops_per_step", "FLOP", 2e12, None, None)) == Delta(
        "Model FLOPs per step", "TFLOP", 2.0, None, None
    )
    assert display_delta(Delta("samples_per_s", "1/s", 1.0, 2.0, "higher")).unit == "samples/s"
    d = display_delta(Delta("host_sync", "µs/step", 2000.0, 0.0), "idle_by_cause")
    assert (d.metric, d.unit, d.a, d.improved) == ("Host sync", "ms/step", 2.0, True)
    # kernel names stay as they are
    k = display_delta(Delta("ampere_sgemm_128x64_nn", "µs/step", 10.0, 0.0), "top_kernels")
    assert k.metric == "ampere_sgemm_128x64_nn" and k.unit == "ms/step"


@pytest.mark.parametrize(
    ("a_ms", "b_ms", "words"),
    [
        (25.0, 18.0, "1.39× shorter"),
        (18.0, 25.0, "1.39× longer"),  # B longer: never "0.72× shorter"
        (22.8, 31.6, "1.39× longer"),
        (10.0, 10.001, "as long"),
    ],
)
def test_step_ratio_reads_the_right_way_round(a_ms: float, b_ms: float, words: str) -> None:
    from gpuscope.analysis.compare import step_ratio_words

    assert step_ratio_words(a_ms, b_ms) == words
