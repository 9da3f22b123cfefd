"""SYNTHETIC stand-in for a real Kineto trace: the benchmark's source until real samples exist.

Builds a training-like trace with ``tests/tracegen.py``'s TraceBuilder (a transformer's forward on the
main thread, backward on the autograd thread with fwdbwd flows, an optimizer step, an all-reduce on a
NCCL stream, python_function events as with ``with_stack=True``) and writes it in Kineto's own text
layout (one key group per line, 2-space indents, 3-decimal timestamps), so that byte sizes and the
parsers' work per byte are close to a real ``*.pt.trace.json``.

    python benchmarks/synthetic_source.py OUT.pt.trace.json.gz [--steps 6] [--layers 24]

The figures it gives are labelled "synthetic" by bench_ingest.py; prefer a real trace
(``sample_traces/before/*rank0*.pt.trace.json.gz``) when there is one.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tracegen import PID, TID, TraceBuilder

BWD_TID = TID + 7  # autograd engine thread
COMPUTE_STREAM = 7
NCCL_STREAM = 24

H200 = {
    "id": 0,
    "name": "NVIDIA H200",
    "totalGlobalMem": 150110011392,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 233472,
    "numSms": 132,
    "sharedMemPerBlockOptin": 232448,
}

# (aten op, kernel name, flops-ish, input dims) of one transformer layer's forward
LAYER_OPS = [
    (
        "aten::layer_norm",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
        [[8, 2048, 4096], [4096], [4096], [4096]],
    ),
    (
        "aten::linear",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
        [[8, 2048, 4096], [12288, 4096], [12288]],
    ),
    (
        "aten::_scaled_dot_product_flash_attention",
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
        [[8, 32, 2048, 128], [8, 32, 2048, 128], [8, 32, 2048, 128]],
    ),
    (
        "aten::linear",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        [[8, 2048, 4096], [4096, 4096], [4096]],
    ),
    (
        "aten::add",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
        [[8, 2048, 4096], [8, 2048, 4096], []],
    ),
    (
        "aten::layer_norm",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
        [[8, 2048, 4096], [4096], [4096], [4096]],
    ),
    (
        "aten::linear",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
        [[8, 2048, 4096], [16384, 4096], [16384]],
    ),
    (
        "aten::gelu",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
        [[8, 2048, 16384]],
    ),
    (
        "aten::linear",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
        [[8, 2048, 16384], [4096, 16384], [4096]],
    ),
    (
        "aten::add",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
        [[8, 2048, 4096], [8, 2048, 4096], []],
    ),
]
PY_FRAMES = [
    "torch/nn/modules/module.py(1751): _wrapped_call_impl",
    "torch/nn/modules/module.py(1762): _call_impl",
    "train.py(88): forward",
    "torch/nn/functional.py(2910): layer_norm",
    "<built-in method linear of PyObject object at 0x7f3c2a1b4d60>",
]


class Synth:
    """A TraceBuilder with the extra event kinds a with_stack/record_shapes trace has."""

    def __init__(self, rank: int, world: int, seed: int) -> None:
        self.b = TraceBuilder(
            rank=rank,
            world_size=world,
            devices=[H200],
            extra_meta={
                "with_stack": 1,
                "with_flops": 1,
                "profile_memory": 0,
                "cupti_version": 24,
                "cuda_runtime_version": 12060,
                "cuda_driver_version": 12080,
                "trace_id": "5A1B2C3D4E5F60718293A4B5C6D7E8F9",
            },
        )
        self.b.meta_events += [
            {
                "ph": "M",
                "name": "thread_name",
                "pid": PID,
                "tid": BWD_TID,
                "args": {"name": "autograd thread"},
            },
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
            {
                "ph": "M",
                "name": "thread_name",
                "pid": 0,
                "tid": COMPUTE_STREAM,
                "args": {"name": "stream 7"},
            },
            {
                "ph": "M",
                "name": "thread_name",
                "pid": 0,
                "tid": NCCL_STREAM,
                "args": {"name": "stream 24"},
            },
        ]
        self.rng = random.Random(seed)
        self.seq = 1000
        self.py_id = 1
        self.ev_idx = 0
        self.flow = 90000
        self.gpu_t = 0.0

    def _ev(self) -> int:
        self.ev_idx += 1
        return self.ev_idx

    def python_stack(self, ts: float, dur: float, tid: int, depth: int) -> None:
        parent = 0
        for d in range(depth):
            self.py_id += 1
            name = PY_FRAMES[(d + self.py_id) % len(PY_FRAMES)]
            self.b.events.append(
                {
                    "ph": "X",
                    "cat": "python_function",
                    "name": name,
                    "pid": PID,
                    "tid": tid,
                    "ts": ts + 0.3 * d,
                    "dur": max(dur - 0.6 * d, 0.5),
                    "args": {
                        "Python parent id": parent,
                        "Python id": self.py_id,
                        "Ev Idx": self._ev(),
                    },
                }
            )
            parent = self.py_id

    def op(
        self,
        name: str,
        kernel: str,
        dims: list[list[int]],
        ts: float,
        tid: int,
        *,
        seq: int,
        stream: int = COMPUTE_STREAM,
    ) -> float:
        """One aten op with a child op, its launch, kernel and flows; returns its end time."""
        r = self.rng
        cpu_dur = 18.0 + r.random() * 30
        types = ["c10::BFloat16"] * len(dims)
        ext = self.b.cpu_op(
            name,
            ts,
            cpu_dur,
            tid=tid,
            **{
                "Record function id": 0,
                "Sequence number": seq,
                "Fwd thread id": 0 if tid == TID else 1,
                "Concrete Inputs": [""] * len(dims),
                "Input type": types,
                "Input Strides": [[d * 2 for d in x] for x in dims],
                "Input Dims": dims,
                "Ev Idx": self._ev(),
            },
        )
        self.b.cpu_op(
            "aten::empty",
            ts + 1.0,
            3.5 + r.random(),
            tid=tid,
            **{
                "Record function id": 0,
                "Concrete Inputs": ["[8, 2048, 4096]", "15", "0", "", "", ""],
                "Input type": ["ScalarList", "Scalar", "Scalar", "", "", ""],
                "Input Strides": [[], [], [], [], [], []],
                "Input Dims": [[], [], [], [], [], []],
                "Ev Idx": self._ev(),
            },
        )
        cpu_ts = ts + cpu_dur - 9.0
        self.gpu_t = max(self.gpu_t + 1.5, cpu_ts + 6.0)
        gdur = 20.0 + r.random() * 250
        self.b.launch(
            kernel,
            cpu_ts,
            self.gpu_t,
            gdur,
            cpu_dur=6.5 + r.random() * 3,
            stream=stream,
            external_id=ext,
            grid=[132, 16, 1],
            block=[384, 1, 1],
            **{
                "External id": ext,
                "queued": 0,
                "context": 1,
                "registers per thread": 168,
                "shared memory": 213248,
                "blocks per SM": 16.0,
                "warps per SM": 192.0,
                "est. achieved occupancy %": 19,
            },
        )
        self.gpu_t += gdur
        self.python_stack(ts - 4.0, cpu_dur + 6.0, tid, 3)
        return ts + cpu_dur + 2.0 + r.random() * 4

    def fwdbwd(self, fwd_ts: float, bwd_ts: float) -> None:
        self.flow += 1
        self.b.events.append(
            {
                "ph": "s",
                "id": self.flow,
                "pid": PID,
                "tid": TID,
                "ts": fwd_ts,
                "cat": "fwdbwd",
                "name": "fwdbwd",
            }
        )
        self.b.events.append(
            {
                "ph": "f",
                "id": self.flow,
                "pid": PID,
                "tid": BWD_TID,
                "ts": bwd_ts,
                "cat": "fwdbwd",
                "name": "fwdbwd",
                "bp": "e",
            }
        )

    def step(self, n: int, t: float, layers: int) -> float:
        start = t
        t += 15.0
        fwd: list[tuple[float, int]] = []
        self.b.annotation("## forward ##", t, 1.0)
        for _layer in range(layers):
            for name, kernel, dims in LAYER_OPS:
                self.seq += 1
                fwd.append((t, self.seq))
                t = self.op(name, kernel, dims, t, TID, seq=self.seq)
        # backward on the autograd thread, two kernels per forward op
        bt = t + 30.0
        for (fts, seq), (name, kernel, dims) in zip(
            reversed(fwd), LAYER_OPS * layers, strict=False
        ):
            self.fwdbwd(fts, bt)
            bname = name.replace("aten::", "autograd::engine::evaluate_function: ") + "Backward0"
            bt = self.op(bname, kernel, dims, bt, BWD_TID, seq=seq)
            bt = self.op("aten::mm", kernel, dims, bt, BWD_TID, seq=seq)
        # all-reduce of the gradients on the NCCL stream, then the optimizer
        corr = self.b.launch(
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            bt,
            self.gpu_t + 5.0,
            900.0,
            stream=NCCL_STREAM,
        )
        del corr
        self.gpu_t += 905.0
        t = bt + 20.0
        for _ in range(12):
            self.seq += 1
            t = self.op(
                "aten::_fused_adamw_",
                "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, double*, double*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, double*, double*)",
                [[4096], [4096], [4096], [4096]],
                t,
                TID,
                seq=self.seq,
            )
        end = max(t, self.gpu_t) + 10.0
        self.b.step(n, start, end - start)
        return end + 40.0


# -- Kineto's text layout ----------------------------------------------------------------------
def _v(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3f}"
    return json.dumps(x)


def kineto_event(e: dict[str, Any]) -> str:
    """One event as Kineto's output_json.cpp lays it out."""
    head_keys = [k for k in ("ph", "cat", "s", "name", "pid", "tid") if k in e]
    if e.get("ph") in ("s", "f"):
        line1 = ", ".join(f'"{k}": {_v(e[k])}' for k in ("ph", "id", "pid", "tid", "ts") if k in e)
        rest = ", ".join(f'"{k}": {_v(e[k])}' for k in ("cat", "name", "bp") if k in e)
        return "  {\n    " + line1 + ",\n    " + rest + "\n  }"
    if e.get("ph") == "M":
        m = {"ts": 0.0, **e}
        line1 = ", ".join(f'"{k}": {_v(m[k])}' for k in ("name", "ph", "ts", "pid", "tid"))
        args = ", ".join(f'"{k}": {_v(v)}' for k, v in e["args"].items())
        return "  {\n    " + line1 + ',\n    "args": {\n      ' + args + "\n    }\n  }"
    line1 = ", ".join(f'"{k}": {_v(e[k])}' for k in head_keys)
    line2 = ", ".join(f'"{k}": {_v(float(e[k]))}' for k in ("ts", "dur") if k in e)
    out = "  {\n    " + line1 + ",\n    " + line2
    if e.get("args"):
        args = ", ".join(f'"{k}": {_v(v)}' for k, v in e["args"].items())
        out += ',\n    "args": {\n      ' + args + "\n    }"
    return out + "\n  }"


def write_kineto(doc: dict[str, Any], path: Path) -> None:
    lines = ["{"]
    for k, v in doc.items():
        if k in ("traceEvents", "baseTimeNanoseconds", "displayTimeUnit", "traceName"):
            continue
        if k == "deviceProperties":
            devs = ",\n".join(
                "    {\n      " + ", ".join(f'"{a}": {_v(b)}' for a, b in d.items()) + "\n    }"
                for d in v
            )
            lines.append(f'  "deviceProperties": [\n{devs}\n  ],')
        else:
            lines.append(f'  "{k}": {json.dumps(v)},')
    lines.append('  "traceEvents": [')
    body = ",\n".join(kineto_event(e) for e in doc["traceEvents"])
    tail = [
        body,
        "],",
        f'  "traceName": "{path.name}",',
        '  "displayTimeUnit": "ms",',
        f'  "baseTimeNanoseconds": {doc.get("baseTimeNanoseconds", 0)}',
        "}",
    ]
    text = ("\n".join(lines + tail) + "\n").encode()
    json.loads(text)  # it must be valid JSON
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text, compresslevel=6))
    else:
        path.write_bytes(text)


def build(steps: int, layers: int, rank: int = 0, world: int = 8, seed: int = 0) -> dict[str, Any]:
    s = Synth(rank, world, seed)
    t = 1_000_000.0  # µs after baseTimeNanoseconds
    for pre in range(3):  # warm-up work before the profiled steps (written once by make_big_trace)
        t = s.op("aten::to", LAYER_OPS[4][1], [[8, 2048]], t, TID, seq=pre) + 50.0
    first = 10
    for n in range(first, first + steps):
        t = s.step(n, t, layers)
    s.b.events.sort(
        key=lambda e: (e["pid"] != PID, e.get("ts", 0.0))
    )  # host events first, like Kineto
    doc = s.b.to_dict()
    doc["traceEvents"].append(
        {
            "ph": "i",
            "s": "g",
            "name": "Record Window End",
            "pid": "",
            "tid": "",
            "ts": max(e["ts"] + e.get("dur", 0) for e in s.b.events) + 1.0,
        }
    )
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    doc = build(a.steps, a.layers, seed=a.seed)
    write_kineto(doc, a.out)
    print(
        f"synthetic source: {a.out} ({len(doc['traceEvents'])} events, {a.out.stat().st_size / 1e6:.1f} MB on disk)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
