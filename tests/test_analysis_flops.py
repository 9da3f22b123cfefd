"""FLOPs from op shapes: formulas, the nest rule (innermost counted op wins; a trace ``flops`` arg covers
its subtree), dtype, and agreement with the analytic FLOPs of the sample runs.

Hand-computed expectations are written next to each trace. Shapes and ``Concrete Inputs`` follow what
PyTorch 2.11 writes (checked on H100 traces of an encoder and a CNN, where the counted FLOPs equalled
the analytic 6·N·T + 12·B·S²·d·L and the per-layer convolution formula to the FLOP)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from flops_oracle import count_ops_reference
from gpuscope.analysis.flops import (
    OPS,
    attention_flops,
    conv_flops,
    conv_out_spatial,
    flops_per_step,
    matmul_flops,
    metadata_model_flops,
    nest_select,
    op_flops,
    transformer_flops_per_step,
)
from gpuscope.analysis.peaks import mfu_pct, peak_for
from gpuscope.ingest.loader import ingest_paths
from hypothesis import given, settings
from hypothesis import strategies as st
from test_analysis_kernels import BWD, Win, ingest, launch_on

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
BF16 = "c10::BFloat16"


def dims(*xs: list[int]) -> dict[str, object]:
    return {"Input Dims": [list(x) for x in xs]}


# -- formulas -----------------------------------------------------------------------------------------


def test_matmul_formulas():
    assert op_flops("aten::mm", "[[64,128],[128,32]]", None) == (2 * 64 * 128 * 32, False)
    assert op_flops("aten::addmm", "[[32],[64,128],[128,32]]", None) == (2 * 64 * 128 * 32, False)
    assert op_flops("aten::bmm", "[[4,8,16],[4,16,2]]", None) == (2 * 4 * 8 * 16 * 2, False)
    assert op_flops("aten::baddbmm", "[[4,8,2],[4,8,16],[4,16,2]]", None) == (
        2 * 4 * 8 * 16 * 2,
        False,
    )
    assert op_flops("aten::linear", "[[8,16,32],[64,32],[64]]", None) == (
        2 * 8 * 16 * 32 * 64,
        False,
    )
    assert op_flops("aten::mv", "[[10,20],[20]]", None) == (400, False)
    assert op_flops("aten::mm", "[[64,128],[127,32]]", None) == (None, False)  # inner dims differ
    assert op_flops("aten::mm", None, None) == (None, False)
    assert matmul_flops([2, 1, 8, 16], [3, 16, 4]) == 2 * 6 * 8 * 16 * 4  # broadcast batch 2x3
    assert matmul_flops([16], [16, 4]) == 2 * 16 * 4
    assert matmul_flops([8, 16], [16]) == 2 * 8 * 16


def test_conv_formulas():
    # 2·N·Cout·Hout·Wout·(Cin/groups)·kh·kw; out = floor((in + 2p - d(k-1) - 1)/s) + 1
    assert conv_out_spatial([64, 64], [7, 7], [2, 2], [3, 3], [1, 1]) == [32, 32]
    assert conv_out_spatial([16, 16], [3, 3], [1, 1], [2, 2], [2, 2]) == [16, 16]
    conc = json.dumps(["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "1"])
    assert op_flops("aten::conv2d", "[[32,3,64,64],[64,3,7,7],[64]]", conc) == (
        2 * 32 * 64 * 32 * 32 * 3 * 49,
        False,
    )
    grouped = json.dumps(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "4"])
    assert op_flops("aten::conv2d", "[[32,128,32,32],[128,32,3,3],[128]]", grouped) == (
        2 * 32 * 128 * 16 * 16 * 32 * 9,
        False,
    )
    # cudnn_convolution(input, weight, padding, stride, dilation, groups, ...)
    cud = json.dumps(["", "", "[1, 1]", "[2, 2]", "[1, 1]", "4", "False", "False", "False"])
    assert (
        op_flops("aten::cudnn_convolution", "[[32,128,32,32],[128,32,3,3]]", cud)[0]
        == 2 * 32 * 128 * 16 * 16 * 32 * 9
    )
    # _conv_depthwise2d(self, weight, kernel_size, bias, stride, padding, dilation)
    dw = json.dumps(["", "", "[3, 3]", "", "[1, 1]", "[2, 2]", "[2, 2]"])
    assert (
        op_flops("aten::_conv_depthwise2d", "[[32,128,16,16],[128,1,3,3],[],[128]]", dw)[0]
        == 2 * 32 * 128 * 16 * 16 * 1 * 9
    )
    same = json.dumps(["", "", "", "[1, 1]", "same", "[1, 1]", "1"])
    assert op_flops("aten::conv2d", "[[1,4,10,10],[8,4,3,3]]", same) == (2 * 8 * 100 * 4 * 9, False)
    # no hyper-parameters recorded: 'same' output assumed and flagged approximate
    assert op_flops("aten::conv2d", "[[1,4,10,10],[8,4,3,3]]", None) == (2 * 8 * 100 * 4 * 9, True)
    # transposed: input spatial dims count, weight is [Cin, Cout/groups, k...]
    assert conv_flops([2, 16, 8, 8], [16, 4, 3, 3], [], transposed=True) == 2 * 2 * 16 * 4 * 9 * 64


def test_conv_backward_respects_output_mask():
    fwd = 2 * 32 * 64 * 32 * 32 * 3 * 49
    base = ["", "", "", "[64]", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"]
    d = "[[32,64,32,32],[32,3,64,64],[64,3,7,7]]"
    assert op_flops("aten::convolution_backward", d, json.dumps([*base, "[True, True, True]"])) == (
        2 * fwd,
        False,
    )
    assert op_flops(
        "aten::convolution_backward", d, json.dumps([*base, "[False, True, True]"])
    ) == (fwd, False)
    assert op_flops(
        "aten::convolution_backward", d, json.dumps([*base, "[False, False, True]"])
    ) == (0, False)
    assert op_flops("aten::convolution_backward", d, None) == (2 * fwd, True)


def test_attention_formulas():
    # forward 2·B·H·Sq·Sk·(Dqk + Dv); backward 2 × forward (model FLOPs, no recomputation)
    q = [2, 4, 128, 32]
    assert attention_flops(q, q, q, "bhsd") == 2 * 2 * 4 * 128 * 128 * 64
    assert (
        attention_flops([2, 128, 4, 32], [2, 256, 4, 32], [2, 256, 4, 16], "bshd")
        == 2 * 2 * 4 * 128 * 256 * 48
    )
    assert (
        attention_flops([512, 4, 32], [512, 4, 32], [512, 4, 32], "bshd") is None
    )  # packed varlen
    fwd = 2 * 2 * 4 * 128 * 128 * 64
    d = json.dumps([q, q, q])
    assert op_flops("aten::_scaled_dot_product_efficient_attention", d, None)[0] == fwd
    bwd = json.dumps([q, q, q, q, [], q])
    assert op_flops("aten::_scaled_dot_product_flash_attention_backward", bwd, None)[0] == 2 * fwd
    bshd = [2, 128, 4, 32]
    assert (
        op_flops("aten::_efficient_attention_backward", json.dumps([bshd] * 4), None)[0] == 2 * fwd
    )


def test_every_op_in_the_table_survives_junk_shapes():
    for name in OPS:
        for junk in (None, "[]", "[[]]", "[[1]]", '[["a"]]', "[[0,0],[0,0],[0,0],[0,0]]", "{"):
            fl, _ = op_flops(name, junk, None)
            assert fl is None or fl >= 0


def test_transformer_formula():
    # the sample model: d=512, L=4, S=256, vocab 8192; N_matmul = L·12·d² + d·V
    n = 4 * 12 * 512**2 + 512 * 8192
    assert n == 16_777_216
    assert (
        transformer_flops_per_step(n, 8 * 256, n_layers=4, seq_len=256, d_model=512)
        == 219_043_332_096
    )
    assert (
        transformer_flops_per_step(n, 32 * 256, n_layers=4, seq_len=256, d_model=512)
        == 876_173_328_384
    )


# -- nest rule ----------------------------------------------------------------------------------------


@st.composite
def forests(draw):
    """Random nests of counted ops on 1-2 threads: (rows sorted like the SQL, brute-force leaf sum)."""
    rows = []
    for tid in range(draw(st.integers(1, 2))):
        t = 0

        def node(depth: int, tid: int = tid) -> None:
            nonlocal t
            start = t
            t += 1
            kids = draw(st.integers(0, 3)) if depth < 4 else 0
            for _ in range(kids):
                node(depth + 1, tid)
            t += 1
            m, k, n = draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
            known = draw(st.booleans()) if draw(st.integers(0, 4)) == 0 else True
            trace = float(draw(st.integers(1, 1000))) if draw(st.integers(0, 5)) == 0 else None
            dims_text = f"[[{m},{k}],[{k},{n}]]" if known else None
            rows.append(
                [1, tid, start, t - start, "aten::mm", dims_text, '["float","float"]', None, trace]
            )

        for _ in range(draw(st.integers(1, 4))):
            node(0)
    rows.sort(key=lambda r: (r[0], r[1], r[2], -r[3]))
    return rows


def _select(rows):
    ts = np.asarray([r[2] for r in rows], dtype=np.int64)
    end = ts + np.asarray([r[3] for r in rows], dtype=np.int64)
    shape = np.asarray(
        [np.nan if (f := op_flops(r[4], r[5], r[7])[0]) is None else f for r in rows], dtype=float
    )
    trace = np.asarray([np.nan if r[8] is None else r[8] for r in rows], dtype=float)
    bounds = [0] + [i for i in range(1, len(rows)) if rows[i][1] != rows[i - 1][1]] + [len(rows)]
    return nest_select(
        list(itertools.pairwise(bounds)),
        ts,
        end,
        shape,
        trace,
        np.zeros(len(rows), dtype=bool),
    )


@pytest.mark.slow
@given(forests())
@settings(max_examples=150, deadline=None)
def test_vectorised_nest_rule_equals_recursive_reference(rows):
    sel = _select(rows)
    ref, unknown, _ = count_ops_reference(rows)
    assert float(sel.value[sel.chosen].sum()) == pytest.approx(sum(c.flops for c in ref))
    assert int(sel.unknown.sum()) == sum(unknown.values())
    chosen = sorted((rows[i][1], rows[i][2]) for i in np.flatnonzero(sel.chosen))
    assert chosen == sorted((c.tid, c.ts_ns) for c in ref)


@pytest.mark.slow
@given(forests())
@settings(max_examples=150, deadline=None)
def test_without_trace_flops_the_count_is_the_leaf_sum(rows):
    for r in rows:
        r[8] = None
        r[5] = r[5] or "[[2,3],[3,4]]"
    ends = [r[2] + r[3] for r in rows]
    leaves = [
        i
        for i, r in enumerate(rows)
        if not any(o[1] == r[1] and r[2] < o[2] < ends[i] for o in rows)
    ]
    brute = sum(op_flops(rows[i][4], rows[i][5], None)[0] for i in leaves)
    sel = _select(rows)
    assert float(sel.value[sel.chosen].sum()) == brute
    assert sorted(np.flatnonzero(sel.chosen).tolist()) == sorted(leaves)


# -- traces -------------------------------------------------------------------------------------------

Q = [2, 4, 128, 32]  # B, H, S, D
Q_BSHD = [2, 128, 4, 32]
ATT_FWD = 2 * 2 * 4 * 128 * 128 * (32 + 32)  # 16,777,216
MM = 2 * 128 * 32 * 64  # 524,288
CONV = 2 * 4 * 8 * 16 * 16 * 3 * 9  # 442,368: N=4, Cout=8, 16x16 out, Cin=3, 3x3


def model_trace(tb):
    """One step (0-5000 µs) of a toy model in bf16: forward on the main thread, backward on BWD.

    forward: linear > matmul > mm (MM); SDPA > flash wrapper > _flash_attention_forward (ATT_FWD, causal);
      conv2d > convolution > _convolution > cudnn_convolution (CONV, stride 2 from Concrete Inputs).
    backward: two mm (2·MM); convolution_backward with output_mask [False, True, True] (CONV);
      flash backward wrapper > _flash_attention_backward (2·ATT_FWD).
    An aten::mm after the window is not counted.
    """
    a = {"Input type": [BF16, BF16, BF16]}
    tb.step(1, 0, 5000)
    tb.cpu_op("aten::linear", 10, 100, **dims([8, 16, 32], [64, 32], [64]), **a)
    tb.cpu_op("aten::matmul", 12, 90, **dims([8, 16, 32], [32, 64]), **a)
    tb.cpu_op("aten::mm", 15, 50, **dims([128, 32], [32, 64]), **a)
    tb.cpu_op(
        "aten::scaled_dot_product_attention",
        200,
        100,
        **dims(Q, Q, Q, [], [], [], [], []),
        **a,
        **{"Concrete Inputs": ["", "", "", "", "0.", "True", "", "False"]},
    )
    tb.cpu_op(
        "aten::_scaled_dot_product_flash_attention",
        205,
        90,
        **dims(Q, Q, Q),
        **a,
        **{"Concrete Inputs": ["", "", "", "0.", "True", "False", ""]},
    )
    tb.cpu_op("aten::_flash_attention_forward", 210, 80, **dims(Q_BSHD, Q_BSHD, Q_BSHD), **a)
    conv_in = dims([4, 3, 32, 32], [8, 3, 3, 3], [8])
    tb.cpu_op(
        "aten::conv2d",
        400,
        100,
        **conv_in,
        **a,
        **{"Concrete Inputs": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]},
    )
    tb.cpu_op(
        "aten::convolution",
        402,
        95,
        **conv_in,
        **a,
        **{"Concrete Inputs": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]},
    )
    tb.cpu_op("aten::_convolution", 404, 90, **conv_in, **a)
    tb.cpu_op(
        "aten::cudnn_convolution",
        410,
        60,
        **dims([4, 3, 32, 32], [8, 3, 3, 3]),
        **a,
        **{
            "Concrete Inputs": [
                "",
                "",
                "[1, 1]",
                "[2, 2]",
                "[1, 1]",
                "1",
                "False",
                "False",
                "False",
            ]
        },
    )
    tb.cpu_op("autograd::engine::evaluate_function: MmBackward0", 1000, 200, tid=BWD)
    tb.cpu_op("MmBackward0", 1002, 190, tid=BWD)
    tb.cpu_op("aten::mm", 1010, 50, tid=BWD, **dims([128, 64], [64, 32]), **a)
    tb.cpu_op("aten::mm", 1070, 50, tid=BWD, **dims([32, 128], [128, 64]), **a)
    tb.cpu_op("autograd::engine::evaluate_function: ConvolutionBackward0", 1300, 100, tid=BWD)
    tb.cpu_op(
        "aten::convolution_backward",
        1310,
        80,
        tid=BWD,
        **dims([4, 8, 16, 16], [4, 3, 32, 32], [8, 3, 3, 3]),
        **a,
        **{
            "Concrete Inputs": [
                "",
                "",
                "",
                "[8]",
                "[2, 2]",
                "[1, 1]",
                "[1, 1]",
                "False",
                "[0, 0]",
                "1",
                "[False, True, True]",
            ]
        },
    )
    tb.cpu_op(
        "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0",
        1500,
        200,
        tid=BWD,
    )
    tb.cpu_op(
        "aten::_scaled_dot_product_flash_attention_backward",
        1505,
        190,
        tid=BWD,
        **dims(Q, Q, Q, Q, Q),
        **a,
    )
    tb.cpu_op(
        "aten::_flash_attention_backward",
        1510,
        150,
        tid=BWD,
        **dims(Q_BSHD, Q_BSHD, Q_BSHD, Q_BSHD),
        **a,
    )
    tb.cpu_op("aten::mm", 6000, 10, **dims([1000, 1000], [1000, 1000]), **a)
    return tb


def test_flops_of_a_step(con, trace, tmp_path):
    run = ingest(con, model_trace(trace), tmp_path)
    r = flops_per_step(con, run, 0, Win(0, 5_000_000, [1]))
    assert r.by_family == {"matmul": 3 * MM, "conv": 2 * CONV, "attention": 3 * ATT_FWD}
    assert r.flops_per_step == 3 * MM + 2 * CONV + 3 * ATT_FWD
    assert r.by_pass == {"forward": MM + CONV + ATT_FWD, "backward": 2 * MM + CONV + 2 * ATT_FWD}
    assert (r.dtype, r.source, r.ops_counted, r.ops_unknown, r.ops_approx) == (
        "bf16",
        "shapes",
        7,
        0,
        0,
    )
    assert r.causal_attention_ops == 1 and r.complete
    assert any("causal" in n for n in r.notes)
    two = flops_per_step(con, run, 0, Win(0, 5_000_000, [1, 2]))
    assert two.flops_per_step == r.flops_per_step / 2 and two.flops_total == r.flops_total


def test_override_keeps_the_trace_dtype(con, trace, tmp_path):
    run = ingest(con, model_trace(trace), tmp_path)
    r = flops_per_step(con, run, 0, Win(0, 5_000_000, [1]), model_flops_per_step=1e12)
    assert (r.flops_per_step, r.source, r.dtype) == (1e12, "override", "bf16")
    assert r.trace_flops_per_step == 3 * MM + 2 * CONV + 3 * ATT_FWD


def test_trace_flops_args_are_used(con, trace, tmp_path):
    """with_flops traces: Kineto's flops arg wins. conv2d carries 1000 and its leaf has no Concrete
    Inputs (its shape count would be approximate): 1000 counts for the subtree. An aten::mm carrying 7
    counts 7. A matmul whose own flops arg sits above a child mm with one: the child's counts."""
    trace.step(1, 0, 1000)
    trace.cpu_op("aten::conv2d", 10, 100, **dims([4, 3, 32, 32], [8, 3, 3, 3]), flops=1000)
    trace.cpu_op("aten::cudnn_convolution", 20, 50, **dims([4, 3, 32, 32], [8, 3, 3, 3]))
    trace.cpu_op("aten::mm", 200, 10, **dims([2, 2], [2, 2]), flops=7)
    trace.cpu_op("aten::matmul", 300, 50, **dims([2, 2], [2, 2]), flops=99)
    trace.cpu_op("aten::mm", 310, 10, **dims([2, 2], [2, 2]), flops=16)
    run = ingest(con, trace, tmp_path)
    r = flops_per_step(con, run, 0, Win(0, 1_000_000, [1]))
    assert r.flops_per_step == 1000 + 7 + 16
    assert r.source == "trace_flops" and r.ops_approx == 0 and r.ops_counted == 3


def test_fp32_on_tf32_tensor_cores_counts_as_tf32(con, trace, tmp_path):
    """fp32 ops are 'tf32' when the kernels they launched ran on TF32 tensor cores."""
    f32 = {"Input type": ["float", "float"]}
    trace.step(1, 0, 1000)
    trace.cpu_op("aten::mm", 10, 50, **dims([256, 256], [256, 256]), **f32)
    launch_on(
        trace,
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"
        "segment_k_off_kernel__5x_cublas",
        20,
        100,
        10,
    )
    trace.cpu_op("aten::mm", 100, 50, **dims([16, 16], [16, 16]), **f32)
    launch_on(
        trace,
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_"
        "alignc4_execute_kernel__5x_cublas",
        110,
        200,
        10,
    )
    run = ingest(con, trace, tmp_path)
    r = flops_per_step(con, run, 0, Win(0, 1_000_000, [1]))
    assert r.by_dtype == {"tf32": 2 * 256**3, "fp32": 2 * 16**3}
    assert r.dtype == "tf32"


def test_ops_without_shapes_are_unknown(con, trace, tmp_path):
    trace.step(1, 0, 1000)
    trace.cpu_op("aten::mm", 10, 50)
    trace.cpu_op("triton_tem_fused_mm_0", 100, 10)
    run = ingest(con, trace, tmp_path)
    r = flops_per_step(con, run, 0, Win(0, 1_000_000, [1]))
    assert r.flops_per_step is None and r.source == "none" and r.dtype is None
    assert r.unknown_ops == {"aten::mm": 1, "triton_tem_fused_mm_0": 1} and not r.complete
    assert set(r.to_json()) >= {
        "flops_per_step",
        "dtype",
        "by_family",
        "source",
        "ops_counted",
        "ops_unknown",
    }


def test_metadata_model_flops(con, tmp_path):
    from tracegen import TraceBuilder

    tb = TraceBuilder(
        rank=1, world_size=2, extra_meta={"model_flops_per_step": 1000, "world_size": 2}
    )
    tb.step(1, 0, 10)
    run = ingest_paths(con, [tb.write(tmp_path / "r1.json")])[0].run_id
    assert metadata_model_flops(con, run, 1) == 500
    tb2 = TraceBuilder(extra_meta={"model_flops_per_step_per_rank": 321.0})
    tb2.step(1, 0, 10)
    run2 = ingest_paths(con, [tb2.write(tmp_path / "r2.json")])[0].run_id
    assert metadata_model_flops(con, run2, 0) == 321.0


# -- sample runs ---------------------------------------------------------------------------------------


def _sample_dirs() -> list[Path]:
    if not SAMPLES.is_dir():
        return []
    return sorted(
        p
        for p in SAMPLES.iterdir()
        if p.is_dir() and list(p.glob("*.json.gz")) and (p / "timing.json").exists()
    )


def _step_window(con, run_id: str, rank: int) -> Win:
    rows = con.execute(
        """SELECT e.ts_ns, e.ts_ns + e.dur_ns FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
           WHERE e.run_id = ? AND e.rank = ? AND e.cat = 'user_annotation' AND n.name LIKE 'ProfilerStep#%'
           ORDER BY 1""",
        [run_id, rank],
    ).fetchall()
    return Win(rows[0][0], rows[-1][1], list(range(len(rows))))


@pytest.mark.slow
@pytest.mark.skipif(not _sample_dirs(), reason="sample traces not recorded yet")
@pytest.mark.parametrize("folder", _sample_dirs(), ids=lambda p: p.name)
def test_sample_run_flops_and_mfu_agree_with_the_analytic_model(con, folder):
    """The sample model (sample_traces/workload.py): an encoder LM, d_model 512, 4 layers, 8 heads,
    S = 256, vocab 8192, non-causal SDPA. Analytic training FLOPs per step:

        model_flops_per_step = 6 · N_matmul · T + 12 · B · S² · d_model · L,
        N_matmul = L · 12 · d² + d · vocab = 16,777,216,  T = B · S

    (219.0 GFLOP for 'before', B = 8; 876.2 GFLOP for 'after', B = 32; per rank under DDP).
    gpuscope's FLOPs from shapes and the MFU computed from them must be within 10 % of the ones
    computed from that formula, with the same step time and peak."""
    res = ingest_paths(con, [folder])[0]
    ranks = [
        r
        for (r,) in con.execute(
            "SELECT rank FROM ranks WHERE run_id = ? ORDER BY rank", [res.run_id]
        ).fetchall()
    ]
    for rank in ranks:
        analytic = metadata_model_flops(con, res.run_id, rank)
        assert analytic, "the trace should carry model_flops_per_step"
        w = _step_window(con, res.run_id, rank)
        r = flops_per_step(con, res.run_id, rank, w)
        assert r.flops_per_step == pytest.approx(analytic, rel=0.10)
        props = con.execute(
            "SELECT device_properties FROM ranks WHERE run_id = ? AND rank = ?", [res.run_id, rank]
        ).fetchone()[0]
        peak = peak_for(props, r.dtype)
        step_s = (w.end_ns - w.start_ns) / len(w.steps) / 1e9
        if peak.tflops:
            ours, theirs = (
                mfu_pct(r.flops_per_step, step_s, peak.tflops),
                mfu_pct(analytic, step_s, peak.tflops),
            )
            assert ours == pytest.approx(theirs, rel=0.10)
        expected_dtype = "fp32" if folder.name.startswith("before") else "bf16"
        assert r.dtype == expected_dtype
