"""Hand-built training traces for the app's tests: a "before" run with the classic idle causes
(synchronous data loading, pageable copies, a host sync every step, tiny optimizer kernels) and an
"after" run with them fixed. Built with tests/tracegen.py, so every gap is known by construction.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracegen import BASE_NS, TraceBuilder

GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel"
)
SGEMM = "ampere_sgemm_128x64_tn"
ELEM = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>"
ADAM = "void at::native::multi_tensor_apply_kernel<at::native::FusedAdam>"
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def training_trace(
    variant: str = "before",
    *,
    steps: int = 6,
    rank: int | None = None,
    world_size: int | None = None,
    seed: int = 0,
) -> TraceBuilder:
    """A small training loop. ``before``: ~10 ms data wait, pageable H2D copy, fp32 GEMMs, an
    ``.item()`` sync and 40 tiny optimizer kernels per step (~23 ms). ``after``: prefetching loader,
    pinned copies, bf16 tensor-core GEMMs, no sync, one fused optimizer kernel (~5 ms)."""
    before = variant == "before"
    t = TraceBuilder(rank=rank, world_size=world_size)
    ts = 100.0
    jitter = (seed % 7) * 3.0
    for n in range(1, steps + 1):
        step_start = ts
        # data loading
        dl = (9000.0 + 300 * (n % 3) + jitter) if before else 300.0
        t.annotation(DATALOADER, ts, dl)
        ts += dl
        # host-to-device copy of the batch
        copy_name = (
            "Memcpy HtoD (Pageable -> Device)" if before else "Memcpy HtoD (Pinned -> Device)"
        )
        cpu_dur = 1500.0 if before else 20.0
        t.launch(
            copy_name,
            ts,
            ts + 50,
            1200.0 if before else 300.0,
            cpu_dur=cpu_dur,
            api="cudaMemcpyAsync",
            cat="gpu_memcpy",
            bytes=64 << 20,
        )
        ts += cpu_dur + 5
        gpu = ts + 1300 if before else ts + 300
        # forward + backward: gemms and elementwise kernels, launched ahead of the GPU
        n_k = 36
        for k in range(n_k):
            name = (SGEMM if before else GEMM) if k % 3 == 0 else (ELEM if k % 3 == 1 else REDUCE)
            dur = (600.0 if before else 220.0) if k % 3 == 0 else (120.0 if before else 90.0)
            ext = t.cpu_op("aten::mm" if k % 3 == 0 else "aten::gelu", ts, 12.0)
            t.launch(name, ts + 1, max(gpu, ts + 8), dur, cpu_dur=5.0, external_id=ext)
            gpu = max(gpu, ts + 8) + dur + 2
            ts += 10.0
        if before:
            # loss.item(): a host sync until the GPU drains, then a tiny D2H copy
            t.cpu_op("aten::item", ts, gpu - ts + 30)
            t.runtime("cudaStreamSynchronize", ts + 2, gpu - ts + 5)
            ts = gpu + 40
            t.launch(
                "Memcpy DtoH (Device -> Pageable)",
                ts,
                ts + 5,
                3.0,
                cpu_dur=12.0,
                api="cudaMemcpyAsync",
                cat="gpu_memcpy",
                bytes=4,
            )
            ts += 20
            gpu = ts + 30
        # optimizer: many tiny kernels launched slower than they run
        t.annotation("Optimizer.step#AdamW.step", ts, (40 if before else 1) * 25.0 + 10)
        for _k in range(40 if before else 1):
            t.launch(ADAM, ts, max(gpu, ts + 6), 4.0 if before else 160.0, cpu_dur=20.0)
            gpu = max(gpu, ts + 6) + (4.0 if before else 160.0)
            ts += 25.0
        ts = max(ts, gpu) + 20
        t.step(n, step_start, ts - step_start)
        ts += 5
    return t


def nvml_series(
    path: Path,
    *,
    start_ns: int = BASE_NS,
    seconds: float = 0.2,
    interval_ms: float = 10.0,
    util: float = 60.0,
) -> Path:
    """A gpuscope-nvml JSON Lines file covering ``seconds`` from ``start_ns`` (absolute Unix ns)."""
    header = {
        "format": "gpuscope-nvml",
        "version": 1,
        "host": "test-host",
        "interval_ms": interval_ms,
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": "GPU-test-0",
                "mem_total_bytes": 85029158912,
            }
        ],
        "started_ns": start_ns,
    }
    lines = [json.dumps(header)]
    n = int(seconds * 1000 / interval_ms)
    for i in range(n):
        u = util + (30 if i % 4 == 0 else -20)
        lines.append(
            json.dumps(
                {
                    "t_ns": start_ns + int(i * interval_ms * 1e6),
                    "gpus": [
                        {
                            "gpu": 0,
                            "gpu_util_pct": max(0, min(100, u)),
                            "mem_util_pct": 30,
                            "mem_used_bytes": 40 << 30,
                            "mem_total_bytes": 85029158912,
                            "power_w": 350.0,
                        }
                    ],
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def write_pair(folder: Path, *, steps: int = 6) -> tuple[Path, Path]:
    """``before.pt.trace.json.gz`` and ``after.pt.trace.json.gz`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    a = training_trace("before", steps=steps).write(folder / "before.pt.trace.json.gz")
    b = training_trace("after", steps=steps).write(folder / "after.pt.trace.json.gz")
    return a, b


def write_sample_tree(root: Path, *, steps: int = 6) -> Path:
    """A ``sample_traces/``-like tree: ``before/`` and ``after/`` (one rank file each)."""
    for variant in ("before", "after"):
        d = root / variant
        d.mkdir(parents=True, exist_ok=True)
        training_trace(variant, steps=steps).write(d / f"{variant}_rank0.pt.trace.json.gz")
    return root
