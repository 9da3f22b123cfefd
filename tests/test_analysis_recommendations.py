"""Recommendations fire on evidence (with honest bounds) and stay silent on noise."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis import fixes as R
from gpuscope.analysis.idle import CAUSES, IdleResult
from gpuscope.analysis.rank_row import RankRow
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

DL_SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DL_MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
SGEMM = "ampere_sgemm_128x64_nn"  # fp32 on CUDA cores
BF16 = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn"  # bf16 on tensor cores
BIG_GRID = {"grid": [264, 1, 1]}  # more blocks than the H100's 132 SMs


def ingest(con, t: TraceBuilder, path: Path) -> str:
    return ingest_paths(con, [t.write(path)])[0].run_id


def before_like(copy_us: float = 200.0, n_steps: int = 3) -> TraceBuilder:
    """Per 8000 µs step: DataLoader in the loop 0..3000, a pageable copy whose call runs
    3000..3000+copy_us (GPU copy in its last 20 µs), 20 fp32 GEMMs of 200 µs (2 µs apart) from
    3250, and loss.item() whose sync returns at 7295, 7 µs after the GPU finished (7288)."""
    t = TraceBuilder(extra_meta={"samples_per_step": 8})
    for i in range(n_steps):
        T = 8000.0 * i
        t.step(i, T, 8000)
        t.annotation(DL_SINGLE, T, 3000)
        t.launch(
            "Memcpy HtoD (Pageable -> Device)",
            T + 3000,
            T + 3000 + copy_us - 20,
            20,
            api="cudaMemcpyAsync",
            cat="gpu_memcpy",
            cpu_dur=copy_us,
        )
        for j in range(20):
            t.launch(SGEMM, T + 3210 + 5 * j, T + 3250 + 202 * j, 200, **BIG_GRID)
        ext = t.cpu_op("aten::item", T + 3400, 3900)
        t.runtime("cudaStreamSynchronize", T + 3405, 3890, external_id=ext)
    return t


def after_like(n_steps: int = 3) -> TraceBuilder:
    """Per 2000 µs step: a fast DataLoader (workers), a pinned async copy and 20 bf16 GEMMs of
    100 µs, launched ahead of the GPU; no per-step sync."""
    t = TraceBuilder(extra_meta={"samples_per_step": 32})
    gpu = 60.0
    for i in range(n_steps):
        T = 2000.0 * i
        t.step(i, T, 2000)
        t.annotation(DL_MULTI, T, 40)
        t.launch(
            "Memcpy HtoD (Pinned -> Device)",
            T + 45,
            max(gpu, T + 50),
            5,
            api="cudaMemcpyAsync",
            cat="gpu_memcpy",
        )
        gpu = max(gpu, T + 50) + 7
        for j in range(20):
            launch = T + 60 + 5 * j
            ext = t.cpu_op("aten::mm", launch - 1, 4)
            t.launch(BF16, launch, max(gpu, launch + 5), 100, external_id=ext, **BIG_GRID)
            gpu = max(gpu, launch + 5) + 102
    return t


@pytest.mark.slow
def test_before_gets_the_fixes_its_evidence_supports(con, tmp_path):
    rep = analyze_run(con, ingest(con, before_like(), tmp_path / "b.json"))
    assert rep.warnings == []
    recs = {r.id: r for r in rep.recommendations}
    assert {"dataloader_workers", "host_sync", "pin_memory", "mixed_precision"} <= set(recs)
    assert "kernel_fusion" not in recs and "batch_size" not in recs  # 200 µs kernels, full grids
    w = 24_000.0  # µs
    # data loading: 3000 µs per step
    assert recs["dataloader_workers"].cost_pct == pytest.approx(100 * 9000 / w)
    # drained by the sync: 7288..8000 of each step (the next DataLoader takes over at 8000)
    assert recs["host_sync"].cost_pct == pytest.approx(100 * 3 * 712 / w)
    # the pageable copy's call while the GPU waited: 3000..3180 of each step
    assert recs["pin_memory"].cost_pct == pytest.approx(100 * 3 * 180 / w)
    mp = recs["mixed_precision"]
    s = mp.evidence["assumed_speedup"]
    assert s > 1
    assert mp.cost_pct == pytest.approx(100 * 3 * 4000 * (1 - 1 / s) / w)
    assert mp.evidence["fp32_gemm_us_per_step"] == pytest.approx(4000)
    # ranked by estimate, each with evidence, why and a snippet; "at most" only where proven
    gains = [r.estimate.gain_pct for r in rep.recommendations]
    assert gains == sorted(gains, reverse=True)
    for r in rep.recommendations:
        assert r.title and r.why and r.fix and r.evidence["summary"]
        assert ("at most" in r.gain_phrase) == (r.bound_pct is not None)
    assert recs["dataloader_workers"].bound_pct is not None
    assert recs["host_sync"].bound_pct is None and recs["pin_memory"].bound_pct is None
    assert "num_workers" in recs["dataloader_workers"].fix
    assert "pin_memory=True" in recs["pin_memory"].fix and "non_blocking" in recs["pin_memory"].fix
    assert "autocast" in mp.fix and "allow_tf32" in mp.fix
    calls = recs["host_sync"].evidence["calls"]
    assert any(c["name"] == "cudaStreamSynchronize" and c["op"] == "aten::item" for c in calls)


@pytest.mark.slow
def test_after_gets_none_of_them(con, tmp_path):
    rep = analyze_run(con, ingest(con, after_like(), tmp_path / "a.json"))
    assert rep.warnings == []
    ids = {r.id for r in rep.recommendations}
    assert not ids & {"dataloader_workers", "host_sync", "pin_memory", "mixed_precision"}
    # only the first step's 40 µs DataLoader call idles the GPU (nothing queued yet): noise
    assert rep.idle.causes_ns["data_loading"] == 40_000 and rep.idle.causes_ns["host_sync"] == 0


@pytest.mark.slow
def test_a_tiny_pageable_copy_is_noise(con, tmp_path):
    # a 23 µs copy call (3 µs of GPU wait before the copy starts) in 8 ms steps: not a finding
    rep = analyze_run(con, ingest(con, before_like(copy_us=23.0), tmp_path / "b.json"))
    assert rep.idle.causes_ns["pageable_copy"] == 3 * 3_000
    assert "pin_memory" not in {r.id for r in rep.recommendations}


# -- rules on hand-made inputs -------------------------------------------------------------------


def idle_result(window_ns: int, n_steps: int, **causes: int) -> IdleResult:
    c = {k: causes.get(k, 0) for k in CAUSES}
    return IdleResult(window_ns, n_steps, 0, sum(c.values()), 1, c)


def test_noise_thresholds():
    # 1 ms window, 10 steps: 2% = 20 µs, 100 µs per step = 1000 µs (more than the window)
    assert R.base.significant(20_000, 1_000_000, 10)
    assert not R.base.significant(19_000, 1_000_000, 10)
    # 1 s window, 10 steps: 100 µs per step = 1 ms = 0.1% -> below the 0.5% floor
    assert not R.base.significant(1_000_000, 1_000_000_000, 10)
    # 0.6% and 600 µs per step: a finding
    assert R.base.significant(6_000_000, 1_000_000_000, 10)
    assert not R.base.significant(0, 1_000_000, 1)


def test_mixed_precision_needs_a_tensor_core_gpu():
    base = {"window_ns": 1_000_000, "n_steps": 1, "busy_pct": 90.0, "fp32_gemm_us": 500.0}
    idle = idle_result(1_000_000, 1)
    assert (
        R.BY_ID["mixed_precision"].find(R.Inputs(**base, idle=idle, compute_capability=(6, 1)))
        is None
    )
    assert (
        R.BY_ID["mixed_precision"].find(R.Inputs(**base, idle=idle, compute_capability=None))
        is None
    )
    rec = R.BY_ID["mixed_precision"].find(
        R.Inputs(**base, idle=idle, compute_capability=(8, 0), tc_speedup=4.0)
    )
    assert rec is not None and rec.cost_pct == pytest.approx(50.0 * 0.75)
    assert "bf16" in rec.title and "bfloat16" in rec.fix
    # a V100 (sm70): fp16 tensor cores only; the title, the why and the code all say fp16
    rec = R.BY_ID["mixed_precision"].find(R.Inputs(**base, idle=idle, compute_capability=(7, 0)))
    assert rec is not None and "float16" in rec.fix and "bfloat16" not in rec.fix
    assert "fp16" in rec.title and "bf16" not in rec.title and "TF32" not in rec.title
    assert "bf16 and TF32 need an Ampere" in rec.why
    assert rec.evidence["assumed_speedup"] == R.mixed_precision.DEFAULT_TC_SPEEDUP


def test_kernel_fusion_needs_short_kernels():
    idle = idle_result(1_000_000, 1, launch_overhead=100_000, cpu_overhead=200_000)
    short = R.KernelStats(n_kernels=500, kernel_us=700.0, median_us=4.0, short_us=600.0)
    long = R.KernelStats(n_kernels=5, kernel_us=700.0, median_us=140.0)
    inp = {"window_ns": 1_000_000, "n_steps": 1, "busy_pct": 70.0, "idle": idle}
    rec = R.BY_ID["kernel_fusion"].find(R.Inputs(**inp, kernels=short))
    # issue 9: torch.compile also fuses the short kernels, so the bound adds their time (on an
    # H100, eager -> compiled cut the step by more than its idle alone): 30% idle + 60% short
    assert rec is not None and rec.cost_pct == pytest.approx(90.0)
    assert R.BY_ID["kernel_fusion"].find(R.Inputs(**inp, kernels=long)) is None


def test_communication_and_batch_size_rules():
    idle = idle_result(1_000_000, 1, communication=30_000)
    inp = R.Inputs(window_ns=1_000_000, n_steps=1, busy_pct=60.0, idle=idle, comm_only_ns=50_000)
    rec = R.BY_ID["overlap_communication"].find(inp)
    assert rec is not None and rec.id == "overlap_communication"
    assert rec.cost_pct == pytest.approx(8.0)
    k = R.KernelStats(n_kernels=10, kernel_us=600.0, small_grid_us=600.0, small_grid_fill=0.25)
    idle2 = idle_result(1_000_000, 1, cpu_overhead=400_000)
    args = {"window_ns": 1_000_000, "n_steps": 1, "busy_pct": 60.0, "idle": idle2, "kernels": k}
    rec = R.BY_ID["batch_size"].find(R.Inputs(**args))
    # idle 40% + 60% of the window in kernels filling a quarter of the SMs: 40 + 45 -> 85%
    assert rec is not None and rec.cost_pct == pytest.approx(85.0)
    # data loading does not amortise over a larger batch: not in the bound
    idle3 = idle_result(1_000_000, 1, cpu_overhead=400_000, data_loading=300_000)
    rec = R.BY_ID["batch_size"].find(R.Inputs(**{**args, "idle": idle3}))
    assert rec is not None and rec.cost_pct == pytest.approx(85.0)
    assert (
        R.BY_ID["batch_size"].find(R.Inputs(**args, mem_used_frac=0.9)) is None
    )  # no memory headroom


def test_load_imbalance_separates_waiting_from_communication():
    # 10 steps of 1 ms; this rank ran NCCL alone 600 µs per step, rank 1 (the last to arrive)
    # only 50 µs: 50 µs per step is communication, 550 µs is waiting for rank 1
    idle = idle_result(10_000_000, 10)
    peers = [RankRow(rank=1, gpu_busy_pct=20.0, step_time_ms=1.0, comm_only_us_per_step=50.0)]
    inp = R.Inputs(
        window_ns=10_000_000,
        n_steps=10,
        busy_pct=95.0,
        idle=idle,
        comm_only_ns=6_000_000,
        peers=peers,
    )
    rec = R.BY_ID["load_imbalance"].find(inp)
    assert rec is not None and rec.cost_pct == pytest.approx(55.0)
    assert rec.evidence["slowest_rank"] == 1 and "--rank 1" in rec.fix
    comm = R.BY_ID["overlap_communication"].find(inp)
    assert comm is not None and comm.cost_pct == pytest.approx(5.0)
    # alone (no peers), all of it counts as communication
    solo = R.Inputs(
        window_ns=10_000_000, n_steps=10, busy_pct=95.0, idle=idle, comm_only_ns=6_000_000
    )
    assert R.BY_ID["load_imbalance"].find(solo) is None
    assert R.BY_ID["overlap_communication"].find(solo).cost_pct == pytest.approx(60.0)


def test_silent_without_evidence():
    idle = idle_result(1_000_000, 1)
    assert R.recommend(R.Inputs(window_ns=1_000_000, n_steps=1, busy_pct=100.0, idle=idle)) == []


# -- the real sample traces (sample_traces/, recorded on an H200) -------------------------------

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
FOUR = {"dataloader_workers", "pin_memory", "host_sync", "mixed_precision"}


@pytest.mark.slow
@pytest.mark.skipif(not (SAMPLES / "before").is_dir(), reason="sample traces not recorded")
def test_sample_before_and_after(con):
    before = ingest_paths(con, [SAMPLES / "before"])[0].run_id
    after = ingest_paths(con, [SAMPLES / "after"])[0].run_id
    rb = analyze_run(con, before)
    ra = analyze_run(con, after)
    assert rb.warnings == [] and ra.warnings == []
    got_b = {r.id for r in rb.recommendations}
    # before: data loading in the loop, fp32 matmuls, loss.item() and synchronous copies
    assert {"dataloader_workers", "mixed_precision", "host_sync"} <= got_b
    # its pageable copies are a few tens of µs per step: noise, not a finding
    assert "pin_memory" not in got_b
    assert rb.idle.causes_ns["pageable_copy"] < 0.005 * rb.window.duration_ns
    # after: none of the four
    assert not {r.id for r in ra.recommendations} & FOUR
    for rep in (rb, ra):
        assert sum(rep.idle.causes_ns.values()) == rep.idle.total_ns
        assert rep.idle.total_ns + rep.busy.busy_ns == rep.window.duration_ns


@pytest.mark.slow
@pytest.mark.skipif(not (SAMPLES / "ddp").is_dir(), reason="sample traces not recorded")
def test_sample_ddp_waiting_rank(con):
    run = ingest_paths(con, [SAMPLES / "ddp"])[0].run_id
    r0 = analyze_run(con, run, rank=0)
    assert [r.rank for r in r0.ranks] == [0, 1]
    ids = {r.id for r in r0.recommendations}
    # rank 0's all-reduces spin waiting for rank 1: waiting, not communication cost
    assert "load_imbalance" in ids
    li = next(r for r in r0.recommendations if r.id == "load_imbalance")
    assert li.evidence["slowest_rank"] == 1
