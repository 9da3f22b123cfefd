"""Issue 9, "honest diagnosis": profiler cost, compiled runs, fair MFU and speed-up, pageable copy
cost, many ranks, NVML-only runs, one voice. Every expected number is computed by hand from the
tiny traces built here (tests/tracegen.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clitools import analysis_store, run_cli
from gpuscope.analysis.compare import compare_runs
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths
from test_analysis_recommendations import after_like, before_like
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@pytest.fixture
def db_path(tmp_path: Path) -> Path | str:
    """The store the CLI tests hand to ``--db``: the analysis's words, not the store."""
    return analysis_store(tmp_path)


def ingest(con, t: TraceBuilder, path: Path) -> str:
    return ingest_paths(con, [t.write(path)])[0].run_id


def short_ops(
    extra_meta: dict | None = None,
    *,
    kernel: str = "void at::native::vectorized_elementwise_kernel<4>",
    api: str = "cudaLaunchKernel",
    regions_per_step: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
) -> TraceBuilder:
    """3 steps of 1000 µs; per step 20 kernels of 5 µs launched 50 µs apart (each starts 2 µs
    after its launch), inside one CPU op that spans the step: GPU busy 100 µs per step, the other
    900 µs idle on the host side. ``regions_per_step`` compiled-region annotations per step;
    ``rank`` and ``world_size``: the trace's (one rank of a job)."""
    t = TraceBuilder(extra_meta=extra_meta or {}, rank=rank, world_size=world_size)
    for i in range(3):
        T = 1000.0 * i
        t.step(i, T, 1000)
        t.cpu_op("aten::add", T + 1, 998)
        for r in range(regions_per_step):
            t.annotation(f"Torch-Compiled Region: {r}/0", T + 2 + 400 * r, 300)
        for j in range(20):
            t.launch(kernel, T + 10 + 50 * j, T + 12 + 50 * j, 5, api=api)
    return t


# -- 1. profiler cost ------------------------------------------------------------------------


@pytest.mark.slow
def test_untraced_step_caps_host_side_bounds(con, tmp_path):
    # traced step 1.0 ms, GPU busy 0.1 ms per step; untraced 0.25 ms (capture metadata):
    # inflation = (1.0 - 0.25) / 0.25 = 300%; cap = 0.25 - 0.1 = 0.15 ms per step;
    # kernel_fusion bound = 0.15 / 0.25 = 60% (instead of ~90% of the traced window)
    meta = {"gpuscope.untraced_step_ms": 0.25, "gpuscope.untraced_steps": 3}
    rid = ingest(con, short_ops(meta), tmp_path / "t.json")
    r = analyze_run(con, rid)
    pc = r.to_json()["profiler"]
    assert pc["traced_step_ms"] == pytest.approx(1.0)
    assert pc["untraced_step_ms"] == 0.25 and pc["untraced_source"] == "capture"
    assert pc["untraced_steps"] == 3
    assert pc["inflation_pct"] == pytest.approx(300.0)
    assert pc["gpu_busy_ms_per_step"] == pytest.approx(0.1)
    assert pc["host_cap_ms_per_step"] == pytest.approx(0.15)
    # the 900 µs per step of cpu_overhead idle can be at most 0.15 ms without the profiler
    assert r.idle.causes_ns["cpu_overhead"] == 3 * 900_000
    assert pc["capped_causes_ms_per_step"]["cpu_overhead"] == pytest.approx(0.15)
    assert "communication" not in pc["capped_causes_ms_per_step"]
    kf = {x.id: x for x in r.recommendations}["kernel_fusion"]
    # kernel_fusion (torch.compile) may also fuse the short kernels themselves: the bound adds
    # their 100 µs per step: (150 + 100) / 250 = 100%
    assert kf.cost_pct == pytest.approx(100.0)
    assert kf.evidence["short_kernel_us_per_step"] == pytest.approx(100.0)
    assert kf.evidence["idle_us_per_step"] == pytest.approx(150.0)
    assert kf.evidence["capped_by_profiler"] is True
    assert "capped" in kf.evidence["summary"]
    # every host-side bound is within the cap; batch_size adds the unused SMs of its 1-block
    # kernels (GPU time, not capped): (150 + 100 × 131/132) / 250 = 99.697% of per-sample time
    recs = {x.id: x for x in r.recommendations}
    assert recs["batch_size"].cost_pct == pytest.approx(100 * (150 + 100 * 131 / 132) / 250)
    assert all(
        x.cost_pct <= 60.0 + 1e-9
        for x in r.recommendations
        if x.id not in ("batch_size", "kernel_fusion")
    )
    # a compiled run's cuda_graphs bound is the capped idle alone: 0.15 / 0.25 = 60%
    tc = short_ops(meta, kernel="triton_poi_fused_add_0")
    rc = analyze_run(con, ingest(con, tc, tmp_path / "c.json"))
    assert {x.id: x for x in rc.recommendations}["cuda_graphs"].cost_pct == pytest.approx(60.0)
    # the argument wins over the metadata: cap 0.5 - 0.1 = 0.4 ms -> 80%
    r2 = analyze_run(con, rc.run["id"], untraced_step_ms=0.5)
    assert r2.profiler.untraced_source == "argument"
    assert r2.profiler.inflation_pct == pytest.approx(100.0)
    assert {x.id: x for x in r2.recommendations}["cuda_graphs"].cost_pct == pytest.approx(80.0)


@pytest.mark.slow
def test_untraced_equal_to_busy_silences_host_findings(con, tmp_path):
    # untraced step 0.1 ms = GPU busy per step: no host-side idle can exist without the profiler
    rid = ingest(con, short_ops(), tmp_path / "t.json")
    r = analyze_run(con, rid, untraced_step_ms=0.1)
    assert r.profiler.host_cap_ms_per_step == pytest.approx(0.0)
    assert [x.id for x in r.recommendations if x.id == "kernel_fusion"] == []


@pytest.mark.slow
def test_without_untraced_time_dense_short_ops_are_flagged(con, tmp_path):
    rid = ingest(con, short_ops(), tmp_path / "t.json")
    r = analyze_run(con, rid)
    assert r.profiler.untraced_step_ms is None and r.profiler.inflation_pct is None
    assert r.profiler.suspect is True
    assert "--untraced-step-ms" in (r.profiler.note or "")
    # a long-kernel run (before_like: 200 µs GEMMs) is not flagged
    rid2 = ingest(con, before_like(), tmp_path / "b.json")
    assert analyze_run(con, rid2).profiler.suspect is False


@pytest.mark.slow
def test_cli_untraced_option_and_bad_value(tmp_path, db_path, capsys):
    path = short_ops().write(tmp_path / "t.json")
    db = ("--db", str(db_path))
    code, out, err = run_cli(capsys, "analyze", str(path), "--untraced-step-ms", "0.25", *db)
    assert code == 0, err
    assert "unprofiled step 0.250 ms (argument): the profiler adds 300%" in out
    assert "host-side figures capped at 0.150 ms per step" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("cpu_overhead"))
    assert "0.900 ms per step" in line and "(at most 0.150 ms unprofiled)" in line
    code, out, err = run_cli(capsys, "analyze", str(path), "--untraced-step-ms", "0", *db)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--untraced-step-ms must be > 0" in err


# -- 2. compiled and CUDA-graph runs ---------------------------------------------------------


@pytest.mark.slow
def test_compiled_run_is_not_told_to_compile(con, tmp_path):
    # Triton kernels and two compiled regions per step, no graphs: advise CUDA graphs and
    # name the graph breaks; never "torch.compile(model)" alone
    t = short_ops(kernel="triton_poi_fused_add_mul_0", regions_per_step=2)
    r = analyze_run(con, ingest(con, t, tmp_path / "c.json"))
    c = r.compiled
    assert c.compiled and not c.cuda_graphs
    assert c.compiled_regions_per_step == 2.0 and c.triton_kernels_per_step == 20.0
    ids = [x.id for x in r.recommendations]
    assert "kernel_fusion" not in ids and "cuda_graphs" in ids
    rec = {x.id: x for x in r.recommendations}["cuda_graphs"]
    assert "model = torch.compile(model)\n" not in rec.fix
    assert 'mode="reduce-overhead"' in rec.fix and "graph_breaks" in rec.fix
    assert "2 compiled regions" in rec.evidence["summary"]


@pytest.mark.slow
def test_graph_replay_gets_amortise_advice(con, tmp_path):
    t = short_ops(kernel="triton_poi_fused_add_mul_0", api="cudaGraphLaunch", regions_per_step=1)
    r = analyze_run(con, ingest(con, t, tmp_path / "g.json"))
    assert r.compiled.cuda_graphs and r.compiled.graph_launches_per_step == 20.0
    ids = [x.id for x in r.recommendations]
    assert "cuda_graphs" not in ids and "kernel_fusion" not in ids
    assert "compiled_overhead" in ids
    rec = {x.id: x for x in r.recommendations}["compiled_overhead"]
    assert "torch.compile(model" not in rec.fix and "batch_size=2 * B" in rec.fix


@pytest.mark.slow
def test_a_window_that_captures_cuda_graphs_is_not_told_to_use_them(con, tmp_path, capsys):
    """The compiled launch-bound trace of test_compiled_run_is_not_told_to_compile, its second
    step beginning a capture (``cudaStreamBeginCapture``, then ``cudaGraphInstantiateWithFlags``;
    vLLM's capture traces hold hip ones): the program uses CUDA graphs, so ``cuda_graphs`` is not
    advised, nor ``compiled_overhead`` (no replay in the window), and the text says the window
    records a capture, not the replayed steps."""
    t = short_ops(kernel="triton_poi_fused_add_mul_0", regions_per_step=2)
    # in the second step: a capture in the first would make it a warm-up step, left out
    t.runtime("cudaStreamBeginCapture", 1005, 1)
    t.runtime("cudaGraphInstantiateWithFlags", 1990, 5)
    rid = ingest(con, t, tmp_path / "cap.json")
    r = analyze_run(con, rid)
    assert [s.number for s in r.window.steps] == [0, 1, 2] and r.window.warmup == ()
    c = r.compiled
    assert c.compiled and c.cuda_graphs and c.graph_captures == 2
    assert c.graph_launches_per_step == 0
    ids = [x.id for x in r.recommendations]
    # nor the per-step overhead of a replay the window does not hold
    assert (
        "cuda_graphs" not in ids and "compiled_overhead" not in ids and "kernel_fusion" not in ids
    )
    from gpuscope.cli.analyze import render

    text = render(r.to_json())
    assert "2 CUDA graph captures in the window: it records their capture, a warm-up" in text


@pytest.mark.slow
def test_graphs_captured_again_step_after_step_are_not_called_a_warm_up(con, tmp_path):
    """The same compiled trace replaying a CUDA graph in each of its 3 steps
    (``cudaGraphLaunch``), and capturing one (``cudaStreamBeginCapture`` + ``Instantiate``) in
    steps 1 and 2: 4 captures in 2 of 3 steps beside the replays, the graphs recorded again
    (v191g's reduce-overhead FSDP2 step did so in each traced step); the text says so, not "a
    warm-up". Captured in step 1 alone: one step, the warm-up words."""
    from gpuscope.cli.analyze import render

    def analysed(capture_steps: tuple[int, ...], name: str):  # type: ignore[no-untyped-def]
        t = short_ops(kernel="triton_poi_fused_add_mul_0", regions_per_step=2)
        for i in range(3):
            t.runtime("cudaGraphLaunch", 1000.0 * i + 950, 3)
        for i in capture_steps:
            t.runtime("cudaStreamBeginCapture", 1000.0 * i + 5, 1)
            t.runtime("cudaGraphInstantiateWithFlags", 1000.0 * i + 940, 5)
        return analyze_run(con, ingest(con, t, tmp_path / name))

    again, once = analysed((1, 2), "again.json"), analysed((1,), "once.json")
    assert [s.number for s in again.window.steps] == [0, 1, 2]
    assert again.compiled.graph_captures == 4 and again.compiled.graph_capture_steps == 2
    assert again.compiled.graph_launches_per_step == 1.0 and again.compiled.recaptured
    assert once.compiled.graph_capture_steps == 1 and not once.compiled.recaptured
    text = render(again.to_json())
    assert "4 CUDA graph captures in 2 of its 3 steps, beside the replays: the graphs are " in text
    assert "a warm-up, not the replayed steps" not in text
    assert "2 CUDA graph captures in the window: it records their capture, a warm-up" in render(
        once.to_json()
    )


@pytest.mark.slow
def test_mfu_from_6nt_when_no_shapes(con, tmp_path):
    # N = 1e6 parameters, 1000 tokens per rank: 6e9 FLOPs per 1.0 ms step = 6 TFLOP/s;
    # MFU = 6 / 989.4 (H100 SXM dense bf16) = 0.60643%
    meta = {"gpuscope.model_params": 1_000_000, "gpuscope.tokens_per_step_rank": 1000}
    t = short_ops(meta, kernel="triton_poi_fused_0", api="cudaGraphLaunch")
    r = analyze_run(con, ingest(con, t, tmp_path / "m.json"))
    assert r.flops.source == "estimate_6NT"
    assert r.flops_per_step == pytest.approx(6e9)
    assert r.achieved_tflops == pytest.approx(6.0)
    assert r.mfu_pct == pytest.approx(100 * 6 / 989.4)
    assert any("estimate" in n for n in r.flops.notes)
    # without the profiler the step takes 0.5 ms: 12 TFLOP/s, MFU 12 / 989.4
    ru = analyze_run(con, r.run["id"], untraced_step_ms=0.5)
    assert ru.achieved_tflops_untraced == pytest.approx(12.0)
    assert ru.mfu_untraced_pct == pytest.approx(100 * 12 / 989.4)
    assert r.mfu_untraced_pct is None
    # the user's global tokens_per_step (with world size 2) wins: 6 * 1e6 * 4000 / 2 = 1.2e10
    meta2 = {**meta, "tokens_per_step": 4000, "gpuscope.world_size": 2}
    r2 = analyze_run(con, ingest(con, short_ops(meta2, api="cudaGraphLaunch"), tmp_path / "n.json"))
    assert r2.flops_per_step == pytest.approx(1.2e10)


# -- 3. fair MFU, speed-up, batch_size wording ------------------------------------------------


@pytest.mark.slow
def test_mfu_against_bf16_peak_and_dtype_peak(con, tmp_path):
    # before_like: fp32 GEMMs, 8 ms steps; 1e9 FLOPs per step -> 0.125 TFLOP/s
    # mfu_pct vs H100 dense bf16 989.4: 0.012634%; mfu_dtype_pct vs fp32 67: 0.18657%
    rid = ingest(con, before_like(), tmp_path / "b.json")
    r = analyze_run(con, rid, model_flops_per_step=1e9)
    doc = r.to_json()
    assert doc["dtype"] == "fp32" and doc["peak_dtype"] == "bf16"
    assert doc["peak_tflops"] == 989.4 and doc["dtype_peak_tflops"] == 67.0
    assert doc["achieved_tflops"] == pytest.approx(0.125)
    assert doc["mfu_pct"] == pytest.approx(100 * 0.125 / 989.4)
    assert doc["mfu_dtype_pct"] == pytest.approx(100 * 0.125 / 67.0)


@pytest.mark.slow
def test_compare_mfu_rises_with_throughput(con, tmp_path):
    # the same FLOPs per step (1e9) in 8 ms (A) and 2 ms-ish (B): MFU against one peak rises
    # with achieved TFLOP/s; it used to fall because A was measured against the fp32 peak
    a = ingest(con, before_like(), tmp_path / "a.json")
    b = ingest(con, after_like(), tmp_path / "b.json")
    cmp = compare_runs(con, a, b, model_flops_per_step=1e9)
    m = {d.metric: d for d in cmp.metrics}
    assert m["achieved_tflops"].improved and m["mfu_pct"].improved
    assert m["mfu_pct"].b / m["mfu_pct"].a == pytest.approx(
        m["achieved_tflops"].b / m["achieved_tflops"].a
    )
    assert not any("different sources" in n for n in cmp.notes)  # both: override


@pytest.mark.slow
def test_speedup_by_throughput(con, tmp_path):
    # A: 8 samples per 8 ms step = 1000/s; B: 32 samples per step of B's mean step time
    a = ingest(con, before_like(), tmp_path / "a.json")
    b = ingest(con, after_like(), tmp_path / "b.json")
    rb = analyze_run(con, b, all_ranks=False)
    cmp = compare_runs(con, a, b)
    expected = (32 / rb.step_stats.mean_ms) / (8 / 8.0)
    assert cmp.speedup_basis == "samples_per_s"
    assert cmp.speedup == pytest.approx(expected)
    assert f"B processes {expected:.3g}× the samples per second of A" in cmp.table()
    assert "faster" not in cmp.table()


@pytest.mark.slow
def test_compare_takes_one_untraced_time_per_run(tmp_path, db_path, capsys):
    # A: 8 samples per step, untraced 4 ms -> 2000/s; B: 32 per step, untraced 1 ms -> 32000/s
    a = before_like().write(tmp_path / "a.json")
    b = after_like().write(tmp_path / "b.json")
    db = ("--db", str(db_path))
    code, out, err = run_cli(
        capsys, "compare", str(a), str(b), "--untraced-step-ms", "4", "1", "--json", *db
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["speedup_basis"] == "samples_per_s_untraced"
    assert doc["speedup"] == pytest.approx(16.0)
    m = {d["metric"]: d for d in doc["metrics"]}
    assert (m["untraced_step_ms"]["a"], m["untraced_step_ms"]["b"]) == (4.0, 1.0)


@pytest.mark.slow
def test_speedup_without_units_says_work_may_differ(con, tmp_path):
    ta, tb = before_like(), after_like()
    ta.extra_meta, tb.extra_meta = {}, {}
    a, b = ingest(con, ta, tmp_path / "a.json"), ingest(con, tb, tmp_path / "b.json")
    cmp = compare_runs(con, a, b)
    assert cmp.speedup_basis == "step_time"
    assert "the work per step may differ" in (cmp.speedup_text or "")
    assert any("unequal work" in n for n in cmp.notes)


@pytest.mark.slow
def test_speedup_with_inferred_batch(con, tmp_path):
    # capture's per-rank samples (leading dim of the model input) × world size:
    # A 4 × 1 per 8 ms = 500/s, B 16 × 1 per B's step
    ta, tb = before_like(), after_like()
    ta.extra_meta = {"gpuscope.samples_per_step_rank": 4, "gpuscope.world_size": 1}
    tb.extra_meta = {"gpuscope.samples_per_step_rank": 16, "gpuscope.world_size": 1}
    a, b = ingest(con, ta, tmp_path / "a.json"), ingest(con, tb, tmp_path / "b.json")
    ra = analyze_run(con, a, all_ranks=False)
    assert ra.throughput.source == "model_input"
    assert ra.throughput.samples_per_s == pytest.approx(500.0)
    cmp = compare_runs(con, a, b)
    assert cmp.speedup_basis == "samples_per_s"
    assert "inferred from the model's input" in (cmp.speedup_text or "")


@pytest.mark.slow
def test_units_from_the_model_input_shape(con, tmp_path):
    # only the input's shape and dtype: int64 [4, 128] -> 4 samples and 512 tokens per rank,
    # × world size 2 = 8 samples and 1024 tokens per step; before_like's step is 8 ms
    t = before_like()
    t.extra_meta = {
        "gpuscope.model_input_shape": [4, 128],
        "gpuscope.model_input_dtype": "torch.int64",
        "gpuscope.world_size": 2,
    }
    tp = analyze_run(con, ingest(con, t, tmp_path / "s.json")).throughput
    assert tp.source == "model_input"
    assert tp.samples_per_step == 8.0 and tp.tokens_per_step == 1024.0
    assert tp.tokens_per_s == pytest.approx(1024 / 0.008)
    # a float image batch [32, 3, 224, 224]: samples only
    t.extra_meta = {
        "gpuscope.model_input_shape": [32, 3, 224, 224],
        "gpuscope.model_input_dtype": "torch.float32",
    }
    tp = analyze_run(con, ingest(con, t, tmp_path / "i.json")).throughput
    assert tp.samples_per_step == 32.0 and tp.tokens_per_step is None


def test_batch_size_bound_is_per_sample(con, tmp_path):
    from gpuscope.analysis import fixes as R
    from gpuscope.analysis.idle import CAUSES, IdleResult

    idle = IdleResult(
        device=0,
        window_ns=1_000_000,
        n_steps=1,
        total_ns=500_000,
        n_gaps=1,
        causes_ns={c: (500_000 if c == "cpu_overhead" else 0) for c in CAUSES},
    )
    k = R.KernelStats(n_kernels=10, kernel_us=500.0, small_grid_us=500.0, small_grid_fill=0.5)
    rec = R.BY_ID["batch_size"].find(
        R.Inputs(window_ns=1_000_000, n_steps=1, busy_pct=50.0, idle=idle, kernels=k)
    )
    # idle 500 µs + unused SMs 500 × 0.5 = 250 µs over a 1000 µs window = 75%
    assert rec is not None and rec.footing == "per_sample_time"
    assert rec.cost_pct == pytest.approx(75.0)
    # no proven bound (how the kernels fill the GPU at a larger batch is a model): no "at most",
    # and the estimate speaks of the time per sample
    assert rec.bound_pct is None and rec.gain_phrase == ""
    from gpuscope.analysis.gains import Estimate

    rec.estimate = Estimate(60.0, 50.0, 70.0, 1.6)
    assert rec.gain_phrase == (
        "time per sample down 60% (range 50 to 70%), with a larger batch per step"
    )
    assert "larger batch makes each step longer" in rec.evidence["summary"]


# -- 4. pageable copies ------------------------------------------------------------------------


def pageable_trace(pinned: bool = False) -> TraceBuilder:
    """3 steps of 100 ms; per step a 19 MB pageable H2D copy taking 2100 µs on the GPU (call of
    10 µs, so hardly any idle is blamed on it), and a 40 ms kernel; with ``pinned`` also a 4 MB
    pinned copy of 100 µs (40 GB/s)."""
    t = TraceBuilder()
    for i in range(3):
        T = 100_000.0 * i
        t.step(i, T, 100_000)
        t.cpu_op("aten::copy_", T + 5, 90_000)
        t.launch(
            "Memcpy HtoD (Pageable -> Device)",
            T + 10,
            T + 20,
            2100,
            api="cudaMemcpyAsync",
            cat="gpu_memcpy",
            cpu_dur=10,
            bytes=19_000_000,
        )
        if pinned:
            t.launch(
                "Memcpy HtoD (Pinned -> Device)",
                T + 30,
                T + 2200,
                100,
                api="cudaMemcpyAsync",
                cat="gpu_memcpy",
                bytes=4_000_000,
            )
        t.launch("ampere_bf16_s16816gemm_bf16_128x64", T + 40, T + 2400, 40_000, grid=[264, 1, 1])
    return t


@pytest.mark.slow
def test_pageable_copy_excess_from_the_table(con, tmp_path):
    # 19e6 B at the table's 50 GB/s (H100 SXM) = 380 µs; the copy took 2100 µs -> 1720 µs excess
    r = analyze_run(con, ingest(con, pageable_trace(), tmp_path / "p.json"))
    assert r.pageable.pinned_source == "table" and r.pageable.pinned_gbps == 50.0
    assert r.pageable.pageable_gbps == pytest.approx(19e6 / 2.1e6)
    assert r.pageable.excess_ns == pytest.approx(3 * 2_100_000 - 3 * 380_000)
    rec = {x.id: x for x in r.recommendations}["pin_memory"]
    assert rec.evidence["copy_excess_us_per_step"] == pytest.approx(1720.0)
    # 1720 µs of a 100 ms step, plus whatever idle the copies' calls caused
    assert rec.cost_pct >= 1.72


@pytest.mark.slow
def test_pageable_copy_excess_from_pinned_copies_in_the_trace(con, tmp_path):
    # pinned: 4e6 B in 100 µs = 40 GB/s; 19e6 B at 40 GB/s = 475 µs -> 1625 µs excess per step
    r = analyze_run(con, ingest(con, pageable_trace(pinned=True), tmp_path / "p.json"))
    assert r.pageable.pinned_source == "trace"
    assert r.pageable.pinned_gbps == pytest.approx(40.0)
    rec = {x.id: x for x in r.recommendations}["pin_memory"]
    assert rec.evidence["copy_excess_us_per_step"] == pytest.approx(1625.0)


# -- 5. many ranks ------------------------------------------------------------------------------


def ddp_rank(rank: int, compute_us: float) -> TraceBuilder:
    """3 steps of 10 ms: compute for ``compute_us`` then an all-reduce that ends at 9 ms on both
    ranks (the collective finishes when the slower rank arrives)."""
    t = TraceBuilder(rank=rank, world_size=2)
    for i in range(3):
        T = 10_000.0 * i
        t.step(i, T, 10_000)
        t.launch("ampere_bf16_s16816gemm_bf16_128x64", T + 5, T + 10, compute_us, grid=[264, 1, 1])
        t.launch(NCCL, T + 20, T + 10 + compute_us, 9_000 - (10 + compute_us), stream=20)
    return t


@pytest.fixture
def ddp_folder(tmp_path):
    folder = tmp_path / "ddp"
    folder.mkdir()
    # rank 0 computes 7990 µs (comm-only 1000 µs per step), rank 1 1990 µs (comm-only 7000 µs)
    ddp_rank(0, 7990).write(folder / "run_rank0.json")
    ddp_rank(1, 1990).write(folder / "run_rank1.json")
    return folder


@pytest.mark.slow
def test_straggler_and_rank_table(con, ddp_folder):
    rid = ingest_paths(con, [str(ddp_folder)])[0].run_id
    r = analyze_run(con, rid)  # rank 0, as without --rank
    sg = r.straggler
    assert sg is not None and sg.rank == 0 and sg.waiting_rank == 1
    assert sg.wait_ms_per_step == pytest.approx(6.0)
    # matched collectives (issue 20): rank 0 arrives last at every all-reduce, rank 1 waits
    assert "rank 0 arrives last at" in sg.evidence and "wait 6.00 ms per step" in sg.evidence
    table = r.rank_table
    assert list(table["rank"]) == [0, 1]
    assert list(table["comm_only_ms_per_step"]) == pytest.approx([1.0, 7.0])
    assert {"idle_ms_per_step", "idle_cpu_overhead_ms_per_step"} <= set(table.columns)
    # analysed from rank 1's side, the straggler is the same
    assert analyze_run(con, rid, rank=1).straggler.rank == 0


@pytest.mark.slow
def test_cli_starts_with_the_verdict_then_the_rank_table(ddp_folder, db_path, capsys):
    """The job's verdict first (issue 42: its step time and pace-setter), then the rank table
    and the straggler, both before the shown rank's own detail."""
    code, out, err = run_cli(capsys, "analyze", str(ddp_folder), "--db", str(db_path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Job step time:")
    assert any(line.startswith("Pace-setter: rank 0") for line in lines[:4])
    table = next(i for i, line in enumerate(lines) if line.startswith("ranks (median step"))
    detail = next(i for i, line in enumerate(lines) if line.startswith("run "))
    assert table < detail
    assert any(line.startswith("straggler: rank 0:") for line in lines[table : table + 6])
    code, out, _ = run_cli(capsys, "analyze", str(ddp_folder), "--json", "--db", str(db_path))
    doc = json.loads(out)
    assert doc["straggler"]["rank"] == 0
    assert doc["straggler"]["comm_only_ms_per_step"] == pytest.approx({"0": 1.0, "1": 7.0})


# -- 6. NVML-only runs ---------------------------------------------------------------------------


def nvml_file(path: Path, pattern: list[int], power: float = 300.0) -> Path:
    """A one-GPU sampler file, 100 ms apart, utilization repeating ``pattern``."""
    t0 = 1_736_935_200_000_000_000
    lines = [
        {
            "format": "gpuscope-nvml",
            "version": 1,
            "host": "h",
            "interval_ms": 100.0,
            "gpus": [
                {"index": 0, "name": "NVIDIA H100 80GB HBM3", "mem_total_bytes": 80_000_000_000}
            ],
            "started_ns": t0,
        }
    ]
    for i in range(25):
        lines.append(
            {
                "t_ns": t0 + i * 100_000_000,
                "gpus": [
                    {
                        "gpu": 0,
                        "gpu_util_pct": pattern[i % len(pattern)],
                        "mem_used_bytes": 40_000_000_000,
                        "mem_total_bytes": 80_000_000_000,
                        "power_w": power,
                        "sm_clock_mhz": 1980,
                    }
                ],
            }
        )
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


@pytest.mark.slow
def test_nvml_run_analyze_compare_check(tmp_path, db_path, capsys):
    # 25 samples, busy 3 of every 5: idle 10 of 25 samples = 40%; rising edges at samples 5, 10,
    # 15, 20 -> 3 cycles of 0.5 s, busy 9 × 100 ms of the 1.5 s they span = 60% duty cycle
    a = nvml_file(tmp_path / "a.nvml.jsonl", [100, 100, 100, 0, 0])
    b = nvml_file(tmp_path / "b.nvml.jsonl", [100, 100, 100, 100, 0], power=400.0)
    db = ("--db", str(db_path))
    code, out, err = run_cli(capsys, "analyze", str(a), "--json", *db)
    assert code == 0, err
    g = json.loads(out)["nvml"][0]
    assert g["idle_share_pct"] == pytest.approx(40.0)
    assert g["period_s"] == pytest.approx(0.5) and g["duty_cycle_pct"] == pytest.approx(60.0)
    assert g["power_mean_w"] == pytest.approx(300.0) and g["mem_used_max_bytes"] == 4e10
    code, out, _ = run_cli(capsys, "analyze", "a", *db)
    assert code == 0 and "idle 40%" in out and "NVML series only" in out
    # B idles 1 of 5 samples: 20%
    code, out, err = run_cli(capsys, "compare", str(a), str(b), "--json", *db)
    assert code == 0, err
    m = {d["metric"]: d for d in json.loads(out)["metrics"]}
    assert m["gpu0.idle_share_pct"]["a"] == pytest.approx(40.0)
    assert m["gpu0.idle_share_pct"]["b"] == pytest.approx(20.0)
    assert m["gpu0.idle_share_pct"]["improved"] is True
    code, _, err = run_cli(
        capsys, "check", "a", "--max-idle-pct", "30", "--min-busy-pct", "70", *db
    )
    assert code == 1
    assert (
        "GPU idle 40.00% > --max-idle-pct 30" in err
        and "GPU busy 60.00% < --min-busy-pct 70" in err
    )
    code, out, _ = run_cli(capsys, "check", "b", "--max-idle-pct", "30", *db)
    assert code == 0 and "ok" in out
    code, _, err = run_cli(capsys, "check", "b", "--min-mfu-pct", "10", *db)
    assert code == 2 and "no MFU or step time" in err


# -- 7. one voice ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("v", "text"),
    [
        (12.66, "12.7"),
        (0.012345, "0.0123"),
        (22222.0, "22,200"),
        (1234567.0, "1,230,000"),
        (9.996, "10.0"),
        (0.0, "0"),
        (-3.14159, "-3.14"),
        (None, "-"),
    ],
)
def test_sig3(v, text):
    assert sig3(v) == text


@pytest.mark.slow
def test_cli_per_step_units_and_every_broken_bound(tmp_path, db_path, capsys):
    path = before_like().write(tmp_path / "before.json")
    db = ("--db", str(db_path))
    code, out, err = run_cli(capsys, "analyze", str(path), *db)
    assert code == 0, err
    # data loading: 3000 µs of each 8000 µs step (hand: before_like's docstring) = 3.00 ms per step
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("data_loading"))
    assert "ms per step" in line and line.split()[1] == "3.00"
    # each fix's estimate and range; "at most" only after a proven bound (the DataLoader's here)
    assert re.search(r"step time down [\d.]+% \(range [-\d.]+ to [\d.]+%\); at most", out)
    assert "% faster" not in out
    code, _, err = run_cli(
        capsys,
        "check",
        str(path),
        "--max-idle-pct",
        "1",
        "--max-step-ms",
        "1",
        "--min-busy-pct",
        "99",
        *db,
    )
    assert code == 1 and err.count("\n") == 1
    assert "--max-idle-pct 1" in err and "--max-step-ms 1" in err and "--min-busy-pct 99" in err


@pytest.mark.slow
def test_runs_list_figures_are_the_run_pages(con, ddp_folder):
    """The runs list shows the figures of the rank the Run page opens on (the lowest), busy with
    its communication wait beside it (issue 20: the list agrees with the page's headline)."""
    from gpuscope.analysis.run_views import run_summary

    rid = ingest_paths(con, [str(ddp_folder)])[0].run_id
    doc = analyze_run(con, rid).to_json()
    fig = run_summary(doc)
    # both ranks are busy 8990 of each 10000 µs step (compute + NCCL): 89.9%
    assert fig.rank == 0 and fig.busy_pct == pytest.approx(89.9)
    assert fig.step_ms == pytest.approx(10.0)
    # rank 0 is the straggler: it never waits; rank 1 waits 6000 µs of each 10000 µs step
    assert fig.wait_pct == doc["gpu_wait_pct"] == 0.0
    doc1 = analyze_run(con, rid, rank=1).to_json()
    assert run_summary(doc1).wait_pct == pytest.approx(60.0)
    assert doc1["busy_split"]["wait_ms_per_step"] == pytest.approx(6.0)


@pytest.mark.slow
def test_rank_busy_panels_align_on_a_step(con, ddp_folder):
    from gpuscope.analysis.ranks import rank_busy_panels

    rid = ingest_paths(con, [str(ddp_folder)])[0].run_id
    panels = rank_busy_panels(con, rid, step_number=1, n_steps=1, n_buckets=10)
    assert [p.rank for p in panels] == [0, 1]
    for p in panels:
        # step 1 starts at 10000 µs on both ranks (trace time) and lasts 10000 µs: 10 buckets of
        # 1 ms; busy from 10 µs to 9000 µs of the step (compute, then NCCL)
        assert p.busy["start_ns"].iloc[0] == p.origin_ns
        assert len(p.busy) == 10
        assert list(p.busy["busy_frac"]) == pytest.approx([0.99] + [1.0] * 8 + [0.0])
    assert rank_busy_panels(con, rid, step_number=7) == []
    # with the matched collectives: rank 1 waits 2000-8000 µs of the step for rank 0 (issue 20)
    from gpuscope.analysis.collectives import run_collectives

    m = run_collectives(con, rid)
    panels = rank_busy_panels(con, rid, step_number=1, n_steps=1, n_buckets=10, match=m)
    wait = {p.rank: list(p.wait) for p in panels}
    assert wait[1] == pytest.approx([0, 0, 1, 1, 1, 1, 1, 1, 0, 0])
    assert wait[0] == pytest.approx([0.0] * 10)


@pytest.mark.slow
def test_ingest_stores_an_untraced_step_time_with_the_run(tmp_path, db_path, capsys):
    """`ingest --untraced-step-ms` keeps the value with the run as gpuscope.capture would have:
    every later `analyze` caps host-side figures by it without being told again."""
    path = short_ops().write(tmp_path / "t.json")
    db = ("--db", str(db_path))
    code, out, err = run_cli(capsys, "ingest", str(path), "--untraced-step-ms", "0.25", *db)
    assert code == 0, err
    run_id = out.strip()
    code, out, err = run_cli(capsys, "analyze", run_id, *db)
    assert code == 0, err
    assert "unprofiled step 0.250 ms (capture): the profiler adds 300%" in out
    code, out, err = run_cli(capsys, "ingest", str(path), "--untraced-step-ms", "-1", *db)
    assert code == 2 and err.count("\n") == 1 and "--untraced-step-ms" in err
