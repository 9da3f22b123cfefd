"""Each op against its roofline: FLOPs and bytes from shapes worked out by hand, the memory-roof
table, and the real H100 sample."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gpuscope.analysis import peaks as P
from gpuscope.analysis.report import analyze_run
from gpuscope.analysis.roofline import _kernels_per_key, foreach_model, op_model
from gpuscope.ingest.loader import ingest_paths
from hypothesis import given, settings
from hypothesis import strategies as st
from tracegen import H100, TraceBuilder

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "memory"
BF = "c10::BFloat16"

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)
H100_BF16 = 989.4e12  # FLOP/s, dense (peaks.py)
H100_FP32 = 67.0e12
H100_TBS = 3.35e12  # bytes/s


H100_L2 = 50 * 2**20  # bytes (roofline.L2_BYTES)


def roof_trace() -> TraceBuilder:
    """One step. aten::mm of two bf16 1024×1024 matrices, its kernel 10 µs; aten::add of two bf16
    8192×4096 tensors, its kernel 60 µs; a kernel launched outside any op, 5 µs."""
    t = TraceBuilder()
    t.step(1, 0, 1000)
    t.cpu_op(
        "aten::mm", 10, 20, **{"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": [BF, BF],
                               "Concrete Inputs": ["", ""]},
    )  # fmt: skip
    t.launch("sm90_xmma_gemm_bf16bf16_bf16f32", 15, 100, 10)
    t.cpu_op(
        "aten::add", 40, 20, **{"Input Dims": [[8192, 4096], [8192, 4096], []],
                                "Input type": [BF, BF, "Scalar"], "Concrete Inputs": ["", "", "1"]},
    )  # fmt: skip
    t.launch("vectorized_elementwise_kernel_add", 45, 200, 60)
    t.launch("mystery_kernel", 500, 600, 5)
    return t


def test_models_by_hand() -> None:
    (fl, by, fam), dt = op_model("aten::mm", "[[1024,1024],[1024,1024]]", f'["{BF}","{BF}"]', None)
    assert (fl, by, fam, dt) == (2 * 1024**3, 3 * 1024**2 * 2, "matmul", "bf16")
    # addmm: bias [N] + A [M,K] + B [K,N] read, C [M,N] written
    (fl, by, _), _ = op_model(
        "aten::addmm", "[[768],[2048,256],[256,768],[],[]]",
        f'["{BF}","{BF}","{BF}","Scalar","Scalar"]', None,
    )  # fmt: skip
    assert fl == 2 * 2048 * 256 * 768
    assert by == (768 + 2048 * 256 + 256 * 768 + 2048 * 768) * 2
    # layer norm forward: 5 FLOPs per element, read x (+ weight, bias), write y
    (fl, by, fam), dt = op_model(
        "aten::native_layer_norm", "[[8,256,256],[],[256],[256],[]]",
        '["float","ScalarList","float","float","Scalar"]', None,
    )  # fmt: skip
    n = 8 * 256 * 256
    assert (fl, by, fam, dt) == (5 * n, (n + 256 + 256) * 4 + n * 4, "norm", "fp32")
    # copy_ (dst bf16, src fp32): read src, write dst
    (fl, by, fam), _ = op_model(
        "aten::copy_", "[[8,256],[8,256],[]]", f'["{BF}","float","Scalar"]', None
    )
    assert (fl, by, fam) == (0.0, 8 * 256 * (2 + 4), "copy")
    # flash attention forward, B=8 H=4 S=256 D=64 (BHSD): 2·B·H·S²·(D + D); reads q, k, v, writes O
    dims = "[[8,4,256,64],[8,4,256,64],[8,4,256,64]]"
    (fl, by, fam), _ = op_model(
        "aten::_scaled_dot_product_flash_attention", dims, f'["{BF}","{BF}","{BF}"]', None
    )
    q = 8 * 4 * 256 * 64
    assert (fl, by, fam) == (2 * 8 * 4 * 256 * 256 * 128, 4 * q * 2, "attention")
    assert (
        op_model("aten::_foreach_add_", "[[],[]]", '["TensorList","TensorList"]', None)[0] is None
    )
    # nll_loss forward gathers one logit per target: reads 8192 int64 targets and 8192 fp32
    # logits, writes the loss and the total weight (not the 268 MB of logits)
    nll = '["float","long int","","Scalar","Scalar"]'
    (fl, by, fam), _ = op_model(
        "aten::nll_loss_forward", "[[8192,8192],[8192],[],[],[]]", nll, None
    )
    assert (fl, by, fam) == (8192, 8192 * 8 + 8192 * 4 + 2 * 4, "reduction")
    # its backward writes a gradient of the logits' size and reads the targets, not the logits
    nllb = '["float","float","long int","","Scalar","Scalar","float"]'
    dims = "[[],[8192,8192],[8192],[],[],[],[]]"
    (fl, by, _), _ = op_model("aten::nll_loss_backward", dims, nllb, None)
    assert (fl, by) == (8192, 8192 * 8192 * 4 + 8192 * 8 + 4 + 4)


@pytest.mark.slow
def test_hand_trace_roofline(con, tmp_path: Path) -> None:
    rid = ingest_paths(con, [roof_trace().write(tmp_path / "r.json")])[0].run_id
    j = analyze_run(con, rid).to_json()["roofline"]
    assert j["gpu_model"] == "H100 SXM" and j["memory_tbs"] == 3.35
    add, mm = j["ops"]  # sorted by time lost: add first
    # add: 33.6 M elements, 1 FLOP each; reads 2 × 64 MiB, writes 64 MiB: of those 192 MiB, at
    # most 2 × 50 MiB (the L2 before and after) need not touch the HBM: 92 MiB from it at least
    n = 8192 * 4096
    add_ideal_us = max(n / H100_FP32, (3 * n * 2 - 2 * H100_L2) / H100_TBS) * 1e6
    assert add_ideal_us == pytest.approx(28.79, abs=0.01)
    assert add["op"] == "aten::add" and add["bound"] == "memory"
    assert add["bytes_per_call"] == 3 * n * 2
    assert add["lost_us_per_step"] == pytest.approx(60 - add_ideal_us)
    assert add["roof_pct"] == pytest.approx(100 * add_ideal_us / 60)
    assert add["achieved_tbs"] == pytest.approx(3 * n * 2 / 60e-6 / 1e12)
    # mm: 2.15 GFLOP, 6 MiB: compute-bound (intensity 341 FLOP/B > ridge 295)
    fl, by = 2 * 1024**3, 3 * 1024**2 * 2
    mm_ideal_us = max(fl / H100_BF16, by / H100_TBS) * 1e6
    assert mm["op"] == "aten::mm" and mm["bound"] == "compute" and mm["dtype"] == "bf16"
    assert mm["achieved_tflops"] == pytest.approx(fl / 10e-6 / 1e12)
    assert mm["lost_us_per_step"] == pytest.approx(10 - mm_ideal_us)
    assert mm["intensity_flop_per_byte"] == pytest.approx(fl / by)
    assert j["lost_us_per_step"] == pytest.approx(60 - add_ideal_us + 10 - mm_ideal_us)
    assert j["modelled_us_per_step"] == pytest.approx(70)
    assert j["unmodelled_us_per_step"] == pytest.approx(5)
    assert "mystery_kernel" in j["unmodelled_top"][0]["op"]


def test_memory_roofs_table() -> None:
    def bw(name: str, mem: int = 80 * 2**30, **kw: int) -> float | None:
        return P.mem_tbs_for({"name": name, "totalGlobalMem": mem, **kw})[0]

    assert bw("NVIDIA H100 80GB HBM3") == 3.35
    assert bw("NVIDIA H100 PCIe") == 2.0
    assert bw("NVIDIA H200") == 4.8
    assert bw("NVIDIA B200") == 8.0
    assert bw("AMD Instinct MI300X") == 5.3
    assert bw("NVIDIA A100-SXM4-80GB") == 2.039
    assert bw("NVIDIA A100 80GB PCIe") == 1.935
    assert bw("NVIDIA A100-SXM4-40GB", 40 * 2**30) == 1.555
    assert bw("Some GPU") is None
    assert set(P.MEM_TBS) == set(P.PEAKS)  # one table: every model with FLOP/s has its bandwidth
    assert P.mem_tbs_for(H100)[1] == "H100 SXM"


@pytest.mark.slow
def test_real_trace_roofline(con) -> None:
    rid = ingest_paths(con, [SAMPLE / "gpt_mem.pt.trace.json.gz"])[0].run_id
    j = analyze_run(con, rid).to_json()["roofline"]
    assert j["gpu_model"] == "H100 SXM"
    ops = j["ops"]
    lost = [o["lost_us_per_step"] or 0.0 for o in ops]  # None: an op of the L2, no roof
    assert lost == sorted(lost, reverse=True)
    assert all(o["roof_pct"] is None or 0 < o["roof_pct"] <= 100 for o in ops)
    fams = {o["family"] for o in ops}
    assert {"matmul", "attention", "norm", "elementwise", "reduction", "softmax", "copy"} <= fams
    mm = [o for o in ops if o["op"] == "aten::mm"]
    assert mm and all(o["dtype"] == "bf16" for o in mm)
    assert any(o["bound"] == "compute" and 0 < o["roof_pct"] <= 100 for o in mm)
    # the optimizer's foreach ops: TensorLists have no shapes; their size comes from the allocator
    # (what _foreach_sqrt allocated): the fp32 parameter count × 4 bytes
    params = json.loads((SAMPLE / "facts.json").read_text())["params"]
    opt = [o for o in ops if o["family"] == "optimizer"]
    assert {o["op"] for o in opt} >= {"aten::_foreach_addcdiv_", "aten::_foreach_sqrt"}
    sqrt = next(o for o in opt if o["op"] == "aten::_foreach_sqrt")
    assert sqrt["shapes"] == f"1 TensorList(s) of {params * 4} B"
    assert sqrt["bytes_per_call"] == 2 * params * 4  # reads one list, writes one
    assert not any("multi_tensor_apply" in u["op"] for u in j["unmodelled_top"])


def test_foreach_model() -> None:
    types = '["TensorList","TensorList","TensorList","Scalar"]'  # addcmul_(self, t1, t2, value)
    assert foreach_model("aten::_foreach_addcmul_", 4000, types) == (
        3 * 1000,
        4 * 4000,
        "optimizer",
    )
    assert foreach_model("aten::_foreach_addcmul_", None, types) is None


def beyond_roof_trace() -> TraceBuilder:
    """Three ops that the roofs of the old table put above 100 %, as recorded on an H100 (v07,
    v05 of sample_traces/validation). One step of 1 ms:

    - an fp32 ``aten::cudnn_convolution`` [48,120,24,24] * [120,120,3,3] (padding 1) whose kernel
      is cuDNN's TF32 implicit GEMM, 46 µs: 7.166 GFLOP, 156 TFLOP/s, 233 % of the fp32 peak;
    - an fp32 ``aten::mul`` of two [64,64,384] tensors, 3.5 µs: 18 MiB in 3.5 µs = 5.39 TB/s,
      161 % of the HBM's 3.35 TB/s (the tensors live in the 50 MiB L2);
    - an ``aten::nll_loss_forward`` of [8192, 8192] fp32 logits, 17.4 µs: 268 MB "read" at 15.4
      TB/s when every input is counted (it gathers one logit per target: 96 KiB);
    - the convolution of a batch of 32 run as an FFT (``fft2d_r2c`` + ``fft2d_c2r``), 8 µs:
      4.778 GFLOP of direct convolution in 8 µs = 597 TFLOP/s, above even the TF32 peak."""
    t = TraceBuilder()
    t.step(1, 0, 1000)
    conv = {
        "Input Dims": [[48, 120, 24, 24], [120, 120, 3, 3], [], [], [], [], [], [], []],
        "Input type": ["float", "float", *["ScalarList"] * 3, *["Scalar"] * 4],
        "Concrete Inputs": ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"],
    }
    t.cpu_op("aten::cudnn_convolution", 10, 20, **conv)  # type: ignore[arg-type]
    t.launch(
        "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
        15, 100, 46,
    )  # fmt: skip
    t.cpu_op(
        "aten::mul", 40, 20,
        **{"Input Dims": [[64, 64, 384], [64, 64, 384]], "Input type": ["float", "float"],
           "Concrete Inputs": ["", ""]},
    )  # fmt: skip
    t.launch("vectorized_elementwise_kernel_mul", 45, 200, 3.5)
    t.cpu_op(
        "aten::nll_loss_forward", 60, 5,
        **{"Input Dims": [[8192, 8192], [8192], [], [], []],
           "Input type": ["float", "long int", "", "Scalar", "Scalar"],
           "Concrete Inputs": ["", "", "", "1", "-100"]},
    )  # fmt: skip
    t.launch("nll_loss_forward_reduce_cuda_kernel_2d", 61, 250, 17.4)
    conv32 = {**conv, "Input Dims": [[32, 120, 24, 24], *conv["Input Dims"][1:]]}
    t.cpu_op("aten::cudnn_convolution", 70, 20, **conv32)  # type: ignore[arg-type]
    t.launch("void fft2d_r2c_64x64<float>(float2*, float const*, int)", 72, 300, 3)
    t.launch("void fft2d_c2r_64x64<float, false>(float*, float2*, int)", 75, 310, 5)
    return t


@pytest.mark.slow
def test_no_row_above_its_roof(con, tmp_path: Path) -> None:
    """The ops the old roofs put at 233 %, 161 % and 891 %: each against the roof of what ran
    (answers by hand); none above 100 %."""
    rid = ingest_paths(con, [beyond_roof_trace().write(tmp_path / "b.json")])[0].run_id
    j = analyze_run(con, rid).to_json()["roofline"]
    ops = {(o["op"], round(o["gpu_us_per_step"], 1)): o for o in j["ops"]}
    fl = 2 * 48 * 120 * 24 * 24 * 120 * 9  # 7,166,361,600
    tf32 = ops[("aten::cudnn_convolution", 46.0)]
    assert tf32["flops_per_call"] == fl and tf32["bound"] == "compute"
    assert tf32["roof_pct"] == pytest.approx(100 * fl / 494.7e12 / 46e-6)  # 31.5 %: the TF32 peak
    mul = ops[("aten::mul", 3.5)]
    assert mul["bytes_per_call"] == 3 * 64 * 64 * 384 * 4  # 18 MiB, inside 2 × the L2
    assert mul["bound"] == "L2" and mul["roof_pct"] is None and mul["lost_us_per_step"] is None
    nll = ops[("aten::nll_loss_forward", 17.4)]
    assert nll["bytes_per_call"] == 8192 * 12 + 8 and nll["roof_pct"] is None  # an op of the L2
    fft = ops[("aten::cudnn_convolution", 8.0)]
    assert fft["bound"] is None and fft["roof_pct"] is None  # FFT: the count is not what ran
    assert all(o["roof_pct"] is None or o["roof_pct"] <= 100 for o in j["ops"])
    assert any("L2" in n for n in j["notes"]) and any("FFT" in n for n in j["notes"])


def test_every_memory_roof_has_an_l2() -> None:
    from gpuscope.analysis.roofline import L2_BYTES

    assert set(L2_BYTES) == set(P.MEM_TBS)


@pytest.mark.slow
def test_cuda_graph_replays_are_named(con, tmp_path: Path) -> None:
    """One step of 1000 µs: a ``cudaGraphLaunch`` whose graph runs two kernels (30 + 50 µs,
    the graph's correlation id on both), and a kernel launched outside any op (5 µs). The graph's
    kernels are the replay's (their ops ran at capture): 80 µs per step in 1 replay per step."""
    t = TraceBuilder()
    t.step(1, 0, 1000)
    corr = t.runtime("cudaGraphLaunch", 10, 20)
    t.gpu("graph_kernel_a", 100, 30, correlation=corr)
    t.gpu("graph_kernel_b", 140, 50, correlation=corr)
    t.launch("mystery_kernel", 300, 400, 5)
    rid = ingest_paths(con, [t.write(tmp_path / "g.json")])[0].run_id
    j = analyze_run(con, rid).to_json()["roofline"]
    top = {u["op"]: u["gpu_us_per_step"] for u in j["unmodelled_top"]}
    assert top["(CUDA graph replay) graph_kernel_a"] == pytest.approx(30)
    assert top["(CUDA graph replay) graph_kernel_b"] == pytest.approx(50)
    assert top["(kernel without a modelled op) mystery_kernel"] == pytest.approx(5)
    assert j["unmodelled_us_per_step"] == pytest.approx(85)
    note = next(n for n in j["notes"] if "CUDA graph" in n)
    assert note.startswith("80.0 µs of kernels per step ran in 1.00 CUDA graph replay(s)")


@pytest.mark.slow
def test_the_real_cuda_graph_run(con) -> None:
    """sample_traces/wild/gpt_cudagraphs (torch.compile mode="reduce-overhead", H100): 2 graph
    replays per step (the compiled forward and backward), their kernels named as the replay's."""
    rid = ingest_paths(con, [SAMPLE.parent / "wild" / "gpt_cudagraphs"])[0].run_id
    j = analyze_run(con, rid).to_json()["roofline"]
    note = next(n for n in j["notes"] if "CUDA graph" in n)
    assert "ran in 2.00 CUDA graph replay(s) per step" in note
    assert any(u["op"].startswith("(CUDA graph replay) ") for u in j["unmodelled_top"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(-3, 40), st.integers(0, 10**9)),
        max_size=60,
    ),
    st.integers(0, 3),
)
def test_kernels_per_key_is_a_sum_per_pair(rows: list[tuple[int, int, int]], extra: int) -> None:
    """Each row's kernels and their summed time, name ids ascending, against a dict of pairs (name
    ids below 0 included: the key shifts them)."""
    n_keys = (max((k for k, _, _ in rows), default=-1) + 1) + extra
    key = np.array([k for k, _, _ in rows], dtype=np.int64)
    nid = np.array([n for _, n, _ in rows], dtype=np.int32)
    ns = np.array([t for _, _, t in rows], dtype=np.int64)
    want: list[dict[int, float]] = [{} for _ in range(n_keys)]
    for k, n, t in sorted(rows, key=lambda r: (r[0], r[1])):
        want[k][n] = want[k].get(n, 0.0) + float(t)
    got = _kernels_per_key(key, nid, ns, n_keys)
    assert got == want
    assert [list(d) for d in got] == [list(d) for d in want]  # the same order
