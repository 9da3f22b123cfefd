"""Random valid event mixes through ingest and every analysis (issue 8).

Any subset of event classes (steps, CPU ops with and without shapes, launches, GPU work without its
launch, memcpy/memset, communication, an unrecognised device category, odd argument types, a second
device), with or without device properties: ingest must accept the trace, and every section of the
report must either give numbers or say why not. No exception, no exception text in ``warnings``.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from gpuscope.analysis.report import analyze_run
from gpuscope.cli.analyze import render
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracegen import H100, TraceBuilder

KERNELS = [
    "volta_scudnn_128x64_relu_interior_nn_v1",
    "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x32x32_stage4_warpsize4x1x1_g1_tensor16x8x16_t1r3s3_execute_kernel__5x_cudnn",
    "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 16, 8>(...)",
    "triton_poi_fused_add_relu_0",
    "triton_tem_fused_mm_0",
    "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_GRVW8",
    "void at::native::vectorized_elementwise_kernel<4, add>(int)",
    "my_custom_kernel",
]
OPS = ["aten::mm", "aten::addmm", "aten::conv2d", "aten::add", "triton_poi_fused_add_relu_0"]
DEVICES = [
    [H100],
    [{**H100, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "numSms": 108}],
    [{"id": 0, "name": "AMD Instinct MI300X"}],
    [{"id": 0, "name": "Some Future GPU"}],
    [],
]
ODD_ARGS = [
    {"grid": "grid(100,)"},
    {"device": "cuda:0"},
    {"stream": "<stream>"},
    {"External id": "12"},
    {"flops": "n/a"},
]

piece = st.one_of(
    st.tuples(st.just("op"), st.sampled_from(OPS), st.booleans()),
    st.tuples(st.just("launch"), st.sampled_from(KERNELS), st.sampled_from([7, 8, 9])),
    st.tuples(st.just("orphan"), st.sampled_from(KERNELS), st.just(0)),  # no launch event
    st.tuples(st.just("noflow"), st.sampled_from(KERNELS), st.just(0)),  # launch, no correlation
    st.tuples(st.just("copy"), st.sampled_from(["gpu_memcpy", "gpu_memset"]), st.just(0)),
    st.tuples(st.just("other_device"), st.sampled_from(KERNELS), st.just(1)),
    st.tuples(st.just("mtia"), st.just("mtia_kernel"), st.just(0)),
    st.tuples(st.just("odd"), st.integers(0, len(ODD_ARGS) - 1), st.just(0)),
    st.tuples(st.just("sync"), st.just("cudaDeviceSynchronize"), st.just(0)),
)

_CON = None


def con():
    """One store for every example: in memory (the subject is the analysis, not the store:
    tests/test_store_equivalence.py), the lake under ``GPUSCOPE_TESTS_ON_LAKE=1``."""
    global _CON
    if _CON is None:
        lake = os.environ.get("GPUSCOPE_TESTS_ON_LAKE")
        tmp = Path(tempfile.mkdtemp(prefix="gpuscope-fuzz-"))
        atexit.register(shutil.rmtree, tmp, True)
        _CON = connect(tmp / "s.duckdb" if lake else ":memory:")
    return _CON


def build(pieces, steps: int, devices, rank) -> TraceBuilder:
    b = TraceBuilder(devices=devices, rank=rank, world_size=2 if rank is not None else None)
    step_len = 100.0 * max(1, len(pieces))
    for s in range(steps):
        b.step(s, s * step_len, step_len * 0.95)
    t = 1.0
    for kind, what, extra in pieces:
        if kind == "op":
            shapes = {"Input Dims": [[64, 128], [128, 32]], "Input type": ["c10::BFloat16"] * 2}
            b.cpu_op(what, t, 30.0, **(shapes if extra else {}))
            b.launch(KERNELS[0] if what == "aten::conv2d" else KERNELS[2], t + 2, t + 10, 20.0)
        elif kind == "launch":
            b.launch(what, t, t + 5, 25.0, stream=extra)
        elif kind == "orphan":
            b.gpu(what, t + 3, 15.0, correlation=10_000 + len(b.events))
        elif kind == "noflow":
            b.runtime("cudaLaunchKernel", t, 2.0, correlation=None)
            b.events[-1]["args"].pop("correlation")
            b.gpu(what, t + 4, 10.0, correlation=20_000 + len(b.events))
            b.events[-1]["args"].pop("correlation")
        elif kind == "copy":
            b.launch(
                "Memcpy HtoD (Pageable -> Device)", t, t + 5, 12.0, api="cudaMemcpyAsync", cat=what
            )
        elif kind == "other_device":
            b.launch(what, t, t + 6, 20.0, device=1, stream=13)
        elif kind == "mtia":
            b.events.append(
                {
                    "ph": "X",
                    "cat": "mtia_ccp_events",
                    "name": what,
                    "pid": 9,
                    "tid": 1,
                    "ts": t,
                    "dur": 20.0,
                    "args": {},
                }
            )
        elif kind == "odd":
            b.cpu_op("triton_poi_fused_0", t, 10.0, **ODD_ARGS[what])
        elif kind == "sync":
            b.runtime(what, t, 15.0)
        t += 100.0 * 0.9
    return b


def finite(x) -> bool:
    return x is None or (isinstance(x, int | float) and math.isfinite(x))


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    pieces=st.lists(piece, min_size=1, max_size=12),
    steps=st.integers(0, 3),
    devices=st.sampled_from(DEVICES),
    rank=st.sampled_from([None, 0, 1]),
)
def test_random_event_mixes_give_numbers_or_reasons(pieces, steps, devices, rank):
    with tempfile.TemporaryDirectory(prefix="gpuscope-fuzz-") as tmp:  # one per example, removed
        path = build(pieces, steps, devices, rank).write(Path(tmp) / "trace.json")
        run_id = ingest_paths(con(), [path])[0].run_id
    rep = analyze_run(con(), run_id)
    doc = rep.to_json()
    json.dumps(doc, allow_nan=False)  # every number finite, the whole report JSON
    text = render(doc)
    warnings = doc["warnings"]
    assert not any("Error" in w or "Traceback" in w for w in warnings), warnings

    gpu_work = any(
        k in ("launch", "orphan", "noflow", "copy", "other_device", "op") for k, _, _ in pieces
    )
    if not gpu_work:
        # no evidence, no figure: said at the top of the JSON and of the text
        assert warnings and warnings[0].startswith("no recognised GPU activity")
        assert text.startswith("WARNING: no recognised GPU activity")
        assert doc["gpu_busy_pct"] is None and doc["idle"]["pct"] is None
        assert doc["mfu_pct"] is None and doc["recommendations"] == []
    if doc["gpu_busy_pct"] is None:
        assert warnings[0].startswith("no recognised GPU activity")
    else:
        assert 0.0 <= doc["gpu_busy_pct"] <= 100.0 + 1e-9
        assert 0.0 <= doc["idle"]["pct"] <= 100.0 + 1e-9

    k = doc["kernels"]
    assert k is not None
    assert sum(k["by_category"].values()) == pytest.approx(k["total_us"], abs=1e-6)
    assert sum(k["by_region"].values()) == pytest.approx(k["total_us"], abs=1e-6)
    assert sum(o["kernel_us"] for o in k["by_op"]) <= k["total_us"] + 1e-6

    if doc["mfu_pct"] is None:  # a reason: no GPU activity, no FLOPs counted, or no peak (why)
        assert (
            (warnings[0:1] and warnings[0].startswith("no recognised GPU activity"))
            or doc["flops_per_step"] is None
            or (doc["peak_tflops"] is None and doc["peak_source"])
        )
    else:
        assert doc["mfu_pct"] >= 0 and doc["flops_per_step"] and doc["peak_tflops"]
    if doc["tensor_core_pct"] is None:
        assert rep.tensor_cores.kernel_us == 0  # nothing to take a share of
    else:
        assert 0.0 <= doc["tensor_core_pct"] <= 100.0 + 1e-9
    for r in doc["ranks"]:
        assert finite(r["gpu_busy_pct"]) and finite(r["step_time_ms"])
