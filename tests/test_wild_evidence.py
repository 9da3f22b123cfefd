"""Traces from the wild (issue 8): no analysis swallows an exception; no figure without GPU activity."""

from __future__ import annotations

import json

import pytest
from clitools import run_cli
from gpuscope.analysis import kernels as K
from gpuscope.analysis.report import analyze_run
from gpuscope.cli.main import main
from gpuscope.ingest.loader import ingest_paths
from tracegen import H100, TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

A100 = {**H100, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "numSms": 108}


def gpu_only_trace() -> TraceBuilder:
    """The shape of an ``activities=[CUDA]`` capture: runtime launches and kernels, no CPU op."""
    b = TraceBuilder()
    for i in range(6):
        b.launch("volta_scudnn_128x64_relu_interior_nn_v1", 10 + 100 * i, 20 + 100 * i, 50)
        b.launch(
            "void at::native::vectorized_elementwise_kernel<4, add>(int)",
            12 + 100 * i,
            75 + 100 * i,
            10,
        )
    return b


def no_gpu_trace(devices=None) -> TraceBuilder:
    """CPU ops with shapes (FLOPs can be counted) and device properties, but not one GPU event."""
    b = TraceBuilder(devices=[A100] if devices is None else devices)
    for s in range(3):
        b.step(s, 1000 * s, 900)
        for j in range(4):
            b.cpu_op(
                "aten::mm",
                1000 * s + 10 + 200 * j,
                150,
                **{"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": ["float", "float"]},
            )
    return b


def test_gpu_only_capture_keeps_its_kernel_breakdown(con, tmp_path):
    path = gpu_only_trace().write(tmp_path / "gpu_only.json")
    run_id = ingest_paths(con, [path])[0].run_id
    rep = analyze_run(con, run_id)
    doc = rep.to_json()
    k = doc["kernels"]
    assert k is not None and k["n_kernels"] == 12
    assert k["total_us"] == pytest.approx(6 * 60)
    assert k["by_category"]["convolution"] == pytest.approx(6 * 50)
    assert k["by_category"]["elementwise"] == pytest.approx(6 * 10)
    assert k["top"][0]["name"].startswith("volta_scudnn")
    assert [o["op"] for o in k["by_op"]] == ["(no cpu op)"]
    assert not any("Error" in w for w in doc["warnings"])


def test_gpu_only_capture_cli_exit_0_without_exception_text(capsys, tmp_path):
    path = gpu_only_trace().write(tmp_path / "gpu_only.json")
    code, out, err = run_cli(
        capsys, "analyze", str(path), "--db", str(tmp_path / "s.duckdb"), "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kernels"]["by_category"]["convolution"] > 0
    assert not any("Error" in w or "Traceback" in w for w in doc["warnings"])


def test_a_failing_section_raises_instead_of_becoming_a_warning(con, tmp_path, monkeypatch):
    path = gpu_only_trace().write(tmp_path / "t.json")
    run_id = ingest_paths(con, [path])[0].run_id

    def broken(*a, **kw):
        raise IndexError("index 0 is out of bounds")

    monkeypatch.setattr(K, "kernel_breakdown", broken)
    with pytest.raises(IndexError):
        analyze_run(con, run_id)


def test_cli_fails_when_a_section_fails(capsys, tmp_path, monkeypatch):
    path = gpu_only_trace().write(tmp_path / "t.json")

    def broken(*a, **kw):
        raise IndexError("boom")

    monkeypatch.setattr(K, "kernel_breakdown", broken)
    with pytest.raises(IndexError):
        main(["analyze", str(path), "--db", str(tmp_path / "s.duckdb"), "--json"])


def test_no_gpu_activity_gives_no_mfu_busy_or_fix(con, tmp_path):
    path = no_gpu_trace().write(tmp_path / "cpu_only.json")
    run_id = ingest_paths(con, [path])[0].run_id
    doc = analyze_run(con, run_id).to_json()
    assert doc["warnings"][0].startswith("no recognised GPU activity")
    assert "cpu_op 12" in doc["warnings"][0]
    assert doc["flops_per_step"] and doc["flops_per_step"] > 0  # the shapes are there...
    assert doc["mfu_pct"] is None and doc["mfu_busy_pct"] is None  # ...but no GPU ran them
    assert doc["achieved_tflops"] is None
    assert doc["gpu_busy_pct"] is None and doc["busy"]["busy_pct"] is None
    assert doc["idle"]["pct"] is None
    assert doc["recommendations"] == []
    assert doc["ranks"][0]["gpu_busy_pct"] is None


def test_unrecognised_device_activity_is_named(con, tmp_path):
    b = TraceBuilder(devices=[])
    b.step(1, 0, 500)
    b.cpu_op("aten::addmm", 10, 100)
    b.events.append(
        {
            "ph": "X",
            "cat": "mtia_ccp_events",
            "name": "mtia_kernel_0",
            "pid": 5,
            "tid": 1,
            "ts": 20,
            "dur": 80,
            "args": {},
        }
    )
    path = b.write(tmp_path / "mtia.json")
    run_id = ingest_paths(con, [path])[0].run_id
    doc = analyze_run(con, run_id).to_json()
    w = doc["warnings"][0]
    assert w.startswith("no recognised GPU activity") and "mtia_ccp_events 1" in w
    assert doc["gpu_busy_pct"] is None
    assert not any(r["id"] == "overlap_communication" for r in doc["recommendations"])


@pytest.mark.slow
def test_no_gpu_activity_leads_the_cli_text_and_check_refuses(capsys, tmp_path):
    path = no_gpu_trace().write(tmp_path / "cpu_only.json")
    db = str(tmp_path / "s.duckdb")
    code, out, err = run_cli(capsys, "analyze", str(path), "--db", db)
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("WARNING: no recognised GPU activity")
    assert "GPU busy -   idle -" in out
    assert "MFU -" in out
    assert "recommendations: none (no GPU activity to base them on)" in out
    code, out, err = run_cli(capsys, "check", str(path), "--db", db, "--max-idle-pct", "50")
    assert code == 2
    assert "no recognised GPU activity" in err


@pytest.mark.slow
def test_a_peer_rank_without_gpu_activity_has_no_busy_figure(con, tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    r0 = TraceBuilder(rank=0, world_size=2)
    r0.step(1, 0, 300)
    r0.launch("k", 5, 10, 100)
    r0.write(d / "rank0.json")
    r1 = TraceBuilder(rank=1, world_size=2)
    r1.step(1, 0, 300)
    r1.cpu_op("aten::add", 10, 50)
    r1.write(d / "rank1.json")
    run_id = ingest_paths(con, [d])[0].run_id
    doc = analyze_run(con, run_id, rank=0).to_json()
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    assert by_rank[0]["gpu_busy_pct"] == pytest.approx(100 * 100 / 300)
    assert by_rank[1]["gpu_busy_pct"] is None


@pytest.mark.slow
def test_compare_shows_no_idle_figures_for_a_run_without_gpu_activity(con, tmp_path):
    from gpuscope.analysis.compare import compare_runs

    a = ingest_paths(con, [no_gpu_trace().write(tmp_path / "cpu.json")])[0].run_id
    b = ingest_paths(con, [gpu_only_trace().write(tmp_path / "gpu.json")])[0].run_id
    doc = compare_runs(con, a, b).to_json()
    m = {d["metric"]: d for d in doc["metrics"]}
    for key in ("gpu_busy_pct", "idle_pct", "idle_per_step_us"):
        assert m[key]["a"] is None and m[key]["b"] is not None
    assert all(d["a"] is None for d in doc["idle_by_cause"])
