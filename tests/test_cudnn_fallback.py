"""cuDNN's fallback convolution kernels (implicit GEMM without shared-memory staging,
``event_classes.CUDNN_NO_SMEM_RE``): ``cudnn_benchmark`` and ``mixed_precision``'s TF32 branch
expect them replaced (``FALLBACK_FACTORS``, ``NO_SMEM_TF32_DIV``). Hand-built graphs with answers
worked by hand, and the real run that showed it (v220, C3D with TF32: one such weight gradient
was 30 % of its kernel time; bf16 timed 50.4 % where the TF32 re-timing told at most 47.6)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import build_graph
from gpuscope.analysis.event_classes import CUDNN_NO_SMEM_RE
from gpuscope.analysis.fixes import cudnn_benchmark as CB
from gpuscope.analysis.fixes import mixed_precision as MP
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths

US = 1_000
VAL = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"
pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)
NO_SMEM = (
    "sm80_xmma_wgrad_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_"
    "tilesize32x16x64_stage1_warpsize2x1x1_g1_tensor16x8x8_aligna4_alignc4_execute_kernel__5x_cudnn"
)
TUNED = (
    "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_"
    "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
)
FFMA = (
    "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x32x8_stage3_"
    "warpsize2x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn"
)


def test_the_name_rule_reads_the_staging_not_the_precision() -> None:
    rule = re.compile(CUDNN_NO_SMEM_RE)
    assert rule.search(NO_SMEM)
    # a tuned TF32 kernel whose name also says "indexed" and "implicit_gemm" is not one
    assert not rule.search(TUNED) and not rule.search(FFMA)


def _graph() -> tuple[object, dict[str, int]]:
    """One 300 µs step of three 100 µs convolution kernels back to back, no host op around them
    (so each is read as a convolution by its name): a fallback TF32 weight gradient, a tuned TF32
    one and an fp32 FMA forward convolution."""
    host = [H("ProfilerStep#1", "user_annotation", 0, 300 * US, 1)]
    gpu = [
        G(name, "kernel", i * 100 * US, (i + 1) * 100 * US, 7)
        for i, name in enumerate((NO_SMEM, TUNED, FFMA))
    ]
    g = build_graph(host, gpu, 1, 0, 300 * US)
    ids = {g.nodes[v].event.name: v for v in range(len(g.nodes)) if g.nodes[v].kind == "gpu"}
    assert len(ids) == 3
    return g, ids


def _durations(retimed: dict, g, ids: dict[str, int]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for level, (dur, _) in retimed.items():
        out[level] = {k: dur(v, g.nodes[v]) / US for k, v in ids.items()}
    return out


def test_benchmark_mode_expects_the_fallback_replaced_like_a_cuda_core_pick() -> None:
    g, ids = _graph()
    d = _durations(CB.retime(g, GN.Context(n_steps=1, step_ms=0.3)), g, ids)
    # fallback × 1 / 0.5 / 0.1; the tuned TF32 kernel × 1 / 0.9 / 0.5; fp32 FMA × 1 / 0.5 / 0.1
    assert d["low"] == pytest.approx({NO_SMEM: 100.0, TUNED: 100.0, FFMA: 100.0})
    assert d["mid"] == pytest.approx({NO_SMEM: 50.0, TUNED: 90.0, FFMA: 50.0})
    assert d["high"] == pytest.approx({NO_SMEM: 10.0, TUNED: 50.0, FFMA: 10.0})


def test_bf16_over_tf32_expects_the_fallback_replaced() -> None:
    g, ids = _graph()
    # with 100 µs of fp32 FMA beside 200 µs of TF32 the unit would take its fp32 branch; the
    # TF32 branch's re-timing itself: fallback × 0.65 / 0.3 / 0.1, TF32 × 0.65 / 0.55 / 0.45
    d = _durations(MP._retime_tf32(g), g, ids)
    assert {lv: d[lv][NO_SMEM] for lv in d} == pytest.approx(
        {"low": 65.0, "mid": 30.0, "high": 10.0}
    )
    assert {lv: d[lv][TUNED] for lv in d} == pytest.approx({"low": 65.0, "mid": 55.0, "high": 45.0})


def test_v220_bf16_and_benchmark_hold_their_measured_gains(con) -> None:
    """v220 (C3D, fp32 with cuDNN's TF32, benchmark off): benchmark mode timed 23.3 %, bf16 50.4 %
    (sample_traces/validation/v220). Both ranges hold them now; bf16 stays first."""
    [res] = ingest_paths(con, [VAL / "v220"])
    recs = analyze_run(con, res.run_id).to_json()["recommendations"]
    by = {r["id"]: r["estimate"] for r in recs if "estimate" in r}
    assert recs[0]["id"] == "mixed_precision"
    mp, cb = by["mixed_precision"], by["cudnn_benchmark"]
    assert mp["low_pct"] <= 50.4 <= mp["high_pct"]
    assert cb["low_pct"] <= 23.3 <= cb["high_pct"]
    assert cb["gain_pct"] > 10.0  # the fallback's time counted: 6.4 without it
