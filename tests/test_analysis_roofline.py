"""Each op against its roofline: FLOPs and bytes from shapes worked out by hand, the memory-roof
table, and the real H100 sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.analysis import peaks as P
from gpuscope.analysis.report import analyze_run
from gpuscope.analysis.roofline import foreach_model, op_model
from gpuscope.ingest.loader import ingest_paths
from tracegen import H100, TraceBuilder

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "memory"
BF = "c10::BFloat16"
H100_BF16 = 989.4e12  # FLOP/s, dense (peaks.py)
H100_FP32 = 67.0e12
H100_TBS = 3.35e12  # bytes/s


def roof_trace() -> TraceBuilder:
    """One step. aten::mm of two bf16 1024×1024 matrices, its kernel 10 µs; aten::add of two bf16
    4096×4096 tensors, its kernel 60 µs; a kernel launched outside any op, 5 µs."""
    t = TraceBuilder()
    t.step(1, 0, 1000)
    t.cpu_op(
        "aten::mm", 10, 20, **{"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": [BF, BF],
                               "Concrete Inputs": ["", ""]},
    )  # fmt: skip
    t.launch("sm90_xmma_gemm_bf16bf16_bf16f32", 15, 100, 10)
    t.cpu_op(
        "aten::add", 40, 20, **{"Input Dims": [[4096, 4096], [4096, 4096], []],
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


@pytest.mark.slow
def test_hand_trace_roofline(con, tmp_path: Path) -> None:
    rid = ingest_paths(con, [roof_trace().write(tmp_path / "r.json")])[0].run_id
    j = analyze_run(con, rid).to_json()["roofline"]
    assert j["gpu_model"] == "H100 SXM" and j["memory_tbs"] == 3.35
    add, mm = j["ops"]  # sorted by time lost: add first
    # add: 16.8 M elements, 1 FLOP each; reads 2 × 32 MiB, writes 32 MiB: memory-bound
    n = 4096 * 4096
    add_ideal_us = max(n / H100_FP32, 3 * n * 2 / H100_TBS) * 1e6
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
    lost = [o["lost_us_per_step"] for o in ops]
    assert lost == sorted(lost, reverse=True)
    fams = {o["family"] for o in ops}
    assert {"matmul", "attention", "norm", "elementwise", "reduction", "softmax", "copy"} <= fams
    mm = [o for o in ops if o["op"] == "aten::mm"]
    assert mm and all(o["dtype"] == "bf16" and 0 < o["roof_pct"] <= 100 for o in mm)
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
