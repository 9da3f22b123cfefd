"""Compare(A, B): deltas per metric, idle by cause and kernels per step, recommendations resolved."""

from __future__ import annotations

import pytest
from gpuscope.analysis.compare import Delta, compare_reports
from gpuscope.analysis.report import analyze_run
from test_analysis_recommendations import after_like, before_like, ingest


def test_delta_arithmetic():
    d = Delta("step_time_ms", "ms", 8.0, 2.0, "lower")
    assert (d.delta, d.delta_pct, d.improved) == (-6.0, -75.0, True)
    assert Delta("busy", "%", 50.0, 40.0, "higher").improved is False
    assert Delta("x", "", None, 1.0).delta is None
    assert Delta("x", "", 0.0, 1.0).delta_pct is None
    assert Delta("x", "", 1.0, 1.0).improved is None
    assert Delta("flops", "FLOP", 1.0, 2.0, None).improved is None


def test_before_vs_after(con, tmp_path):
    a = ingest(con, before_like(), tmp_path / "before.json")
    b = ingest(con, after_like(), tmp_path / "after.json")
    ra, rb = analyze_run(con, a, all_ranks=False), analyze_run(con, b, all_ranks=False)
    cmp = compare_reports(ra, rb)
    assert cmp.a["id"] == a and cmp.b["id"] == b
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
