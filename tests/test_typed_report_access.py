"""The figures the pages take from a report, read from the typed ``RunReport`` (the runs list's,
the Run page's headline cards), equal those read from its ``analyze --json`` document (which
stored parts and hand-built documents still give)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from gpuscope.analysis import fixes as R
from gpuscope.analysis import run_views
from gpuscope.analysis.idle import CAUSES, IdleResult
from gpuscope.analysis.memory import MallocStats, MemoryResult
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["ddp", "fixes/dataloader_workers", "wild/cuda_only"])
def test_typed_figures_equal_the_documents(con, sample: str) -> None:
    run_id = ingest_paths(con, [SAMPLES / sample])[0].run_id
    for rank in run_views.ranks_of(con, run_id):
        rep = analyze_run(con, run_id, rank=rank)
        doc = rep.to_json()
        assert run_views.run_summary(rep) == run_views.run_summary(doc)
        w = doc["window"]  # the document's idle by cause, its steps (0: trace-wide) and length
        cap = (doc["profiler"] or {}).get("host_cap_ms_per_step")
        top = run_views.top_idle(doc["idle"]["causes"], w["steps"] or 1, w["duration_us"], cap)
        assert run_views.top_idle_cause(rep) == top
        h, st = run_views.headline(rep), doc["step_time_ms"]
        assert (h.step_p50_ms, h.step_p90_ms, h.step_max_ms, h.step_mean_ms) == (
            st["p50"],
            st["p90"],
            st["max"],
            st["mean"],
        )
        assert h.n_steps == (doc["window"]["steps"] or 1)
        assert (h.busy_pct, h.wait_pct, h.mfu_pct, h.mfu_busy_pct) == (
            doc["gpu_busy_pct"],
            doc["gpu_wait_pct"],
            doc["mfu_pct"],
            doc["mfu_busy_pct"],
        )
        assert (h.peak_tflops, h.dtype, h.flops_per_step) == (
            doc["peak_tflops"],
            doc["dtype"],
            doc["flops_per_step"],
        )
        assert (h.tensor_core_pct, h.tc_eligible_not_tc_us) == (
            doc["tensor_core_pct"],
            doc["tc_eligible_not_tc_us"],
        )
        assert h.top_idle == top
        bd = run_views.breakdowns(rep)
        assert bd.idle_us_by_cause == doc["idle"]["causes"] and bd.n_steps == h.n_steps
        assert bd.kernel_us_by_category == (doc["kernels"] or {}).get("by_category", {})
        tk = run_views.top_kernels(rep)
        assert [dataclasses.asdict(r) for r in tk.rows] == (doc["kernels"] or {}).get("top", [])
        b = run_views.banners(rep)
        assert [w for w in [b.lead, *b.notes] if w is not None] == doc["warnings"]
        assert (b.lead is not None) == (doc["gpu_busy_pct"] is None and bool(doc["warnings"]))
        assert b.profiler is not None and b.profiler.to_json() == doc["profiler"]
    summary = run_views.run_summary(rep)
    assert summary.rank == rank and summary.step_ms == doc["step_time_ms"]["p50"]


def test_memory_rules_read_a_memory_result_as_its_document() -> None:
    idle = IdleResult(10_000_000, 10, 0, 0, 0, dict.fromkeys(CAUSES, 0))
    k = R.KernelStats(n_kernels=100, kernel_us=1000.0, small_grid_us=800.0, small_grid_fill=0.25)
    mem = MemoryResult(
        recorded=True,
        device_total_bytes=80 * 2**30,
        peak_allocated_bytes=60 * 2**30,
        peak_reserved_bytes=76 * 2**30,
        reserved_at_peak_bytes=70 * 2**30,
        malloc=MallocStats(calls=40, us=8000.0, us_per_step=800.0, steps_with_calls=10, by_call={}),
        n_steps=10,
    )
    base = {"window_ns": 10_000_000, "n_steps": 10, "busy_pct": 50.0, "idle": idle, "kernels": k}
    typed = R.Inputs(**base, memory=mem)  # type: ignore[arg-type]
    as_doc = R.Inputs(**base, memory=mem.to_json())  # type: ignore[arg-type]
    full = R.BY_ID["memory_near_full"].find(typed)
    assert full is not None and full == R.BY_ID["memory_near_full"].find(as_doc)
    assert full.evidence["reserved_minus_allocated_at_peak_bytes"] == 10 * 2**30
    assert full.evidence["malloc_calls"] == 40
    mem.peak_reserved_bytes = 8 * 2**30  # room left: a larger batch, with its headroom
    batch = R.BY_ID["batch_size"].find(typed)
    untyped = R.Inputs(**base, memory=mem.to_json())  # type: ignore[arg-type]
    assert batch is not None and batch == R.BY_ID["batch_size"].find(untyped)
    assert batch.evidence["headroom_bytes"] == 72 * 2**30
