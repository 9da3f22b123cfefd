"""bf16 autocast on plain-fp32 matmuls that are memory-bound at the fp32 roof: tensor cores cannot
speed them up (``mixed_precision.MEMORY_BOUND_KEEP``). Hand-built traces and graphs with answers
worked by hand, and the real run that showed it (v219, APPNP: its 8,192 x 8,192 adjacency times
16 columns, 2.5 ms a step; bf16 timed 1.5 %, the GEMM-ratio re-timing had told 30.4)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import build_graph
from gpuscope.analysis.fixes import mixed_precision as MP
from gpuscope.analysis.report import RunAnalysis, analyze_run
from gpuscope.ingest.loader import ingest_paths
from tracegen import TraceBuilder

US = 1_000
VAL = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"
pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)
F32 = "float"
SKINNY = (
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x32x8_stage3_warpsize2x2x1_ffma_aligna4_"
    "alignc4_execute_kernel__5x_cublas"
)
SQUARE = (
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_"
    "alignc4_execute_kernel__5x_cublas"
)


def _retimed(share: float) -> dict[str, float]:
    """One fp32 GEMM kernel of 100 µs alone in a 100 µs step, ``share`` of its name's matmul time
    memory-bound: its re-timed duration (µs) at each level."""
    host = [H("ProfilerStep#1", "user_annotation", 0, 100 * US, 1)]
    g = build_graph(host, [G(SKINNY, "kernel", 0, 100 * US, 7)], 1, 0, 100 * US)
    ctx = GN.Context(
        n_steps=1, step_ms=0.1, gpu_model="H100 SXM", memory_bound_fp32_matmul={SKINNY: share}
    )
    (v,) = [v for v, n in enumerate(g.nodes) if n.kind == "gpu"]
    out = {}
    for level, (dur, _) in MP.retime(g, ctx).items():
        assert dur is not None
        out[level] = dur(v, g.nodes[v]) / US
    return out


def test_a_memory_bound_gemm_keeps_its_time_at_low_and_mid_and_halves_at_high() -> None:
    # the GEMM ratio at 100 µs: 2.43 * (14.9 / 2.43) ** log10(100 / 20) = 8.632; low ÷ 1.5
    r = 2.43 * (14.9 / 2.43) ** math.log10(100 / 20)
    assert r == pytest.approx(8.632, abs=1e-3)
    none = _retimed(0.0)
    assert none["mid"] == pytest.approx(100 / r) and none["high"] == pytest.approx(100 / r)
    assert none["low"] == pytest.approx(100 / (r / 1.5))
    whole = _retimed(1.0)
    assert whole == pytest.approx({"low": 100.0, "mid": 100.0, "high": 50.0})
    # a quarter of the name's matmul time memory-bound: the shares mix
    q = _retimed(0.25)
    assert q["mid"] == pytest.approx(25.0 + 0.75 * 100 / r)
    assert q["high"] == pytest.approx(0.25 * 50.0 + 0.75 * 100 / r)


def membound_trace() -> TraceBuilder:
    """One step of three fp32 aten::mm calls on an H100 (compute roof 67 TFLOP/s in fp32 on CUDA
    cores, memory 3.35 TB/s, L2 50 MiB):

    - 8,192 x 8,192 by 8,192 x 16, kernel SKINNY, 130 µs: 2.147 GFLOP (32.0 µs at the roof);
      269,484,032 B, of which 164,626,432 must come from the HBM (less twice the L2): 49.1 µs.
      Memory-bound.
    - 2,048 x 2,048 by 2,048 x 2,048, kernel SQUARE, 300 µs: 17.2 GFLOP; its 50.3 MB fit in twice
      the L2, so a matmul there is compute-bound.
    - 1,024 x 1,024 by 1,024 x 1,024, kernel SKINNY as well, 30 µs: compute-bound (cache-resident).

    SKINNY's matmul time is 160 µs, 130 of it memory-bound: share 0.8125; SQUARE's none."""
    t = TraceBuilder()
    t.step(1, 0, 1000)
    for at, (a, b), name, dur in (
        (10, ([8192, 8192], [8192, 16]), SKINNY, 130),
        (200, ([2048, 2048], [2048, 2048]), SQUARE, 300),
        (520, ([1024, 1024], [1024, 1024]), SKINNY, 30),
    ):
        t.cpu_op(
            "aten::mm", at, 20,
            **{"Input Dims": [a, b], "Input type": [F32, F32], "Concrete Inputs": ["", ""]},
        )  # fmt: skip
        t.launch(name, at + 5, at + 100 if at < 500 else 560, dur)
    return t


def test_the_roofline_says_which_kernels_run_memory_bound_fp32_matmuls(con, tmp_path) -> None:
    rid = ingest_paths(con, [membound_trace().write(tmp_path / "m.json")])[0].run_id
    a = RunAnalysis(con, rid, 0)
    roof = a.roofline
    assert roof is not None
    bound = {r.shapes: r.bound for r in roof.rows}
    assert bound == {
        "[[8192,8192],[8192,16]]": "memory",
        "[[2048,2048],[2048,2048]]": "compute",
        "[[1024,1024],[1024,1024]]": "compute",
    }
    assert roof.memory_bound_fp32_matmul == pytest.approx({SKINNY: 130 / 160})
    ctx = a.gain_context
    assert ctx is not None and ctx.memory_bound_fp32_matmul == roof.memory_bound_fp32_matmul


def test_v219_bf16_is_no_longer_promised_over_memory_bound_products(con) -> None:
    """v219 (APPNP, fp32, 7 syncs a step): bf16 autocast timed 1.5 % (5 rounds), removing the
    syncs 25.6 %. Its adjacency products are memory-bound at the fp32 roof: bf16 is told under
    5 % at mid now, its range holds the 1.5 %, and the syncs' fix comes first."""
    [res] = ingest_paths(con, [VAL / "v219"])
    recs = analyze_run(con, res.run_id).to_json()["recommendations"]
    by = {r["id"]: r for r in recs}
    assert recs[0]["id"] == "host_sync"
    est = by["mixed_precision"]["estimate"]
    assert est["gain_pct"] < 5.0
    assert est["low_pct"] <= 1.5 <= est["high_pct"]
