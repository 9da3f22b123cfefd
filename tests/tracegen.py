"""Build small Kineto-style traces by hand, for tests whose answers are computed by hand.

Times are given in microseconds (floats, like Kineto writes them); the builder keeps ids consistent:
``launch`` writes the runtime call, the GPU activity and the ac2g flow with one correlation id.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85029158912,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
}

PID = 1000
TID = 1001
BASE_NS = 1_763_700_000_000_000_000


class TraceBuilder:
    def __init__(
        self,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        base_ns: int | None = BASE_NS,
        devices: list[dict[str, Any]] | None = None,
        extra_meta: dict[str, Any] | None = None,
    ) -> None:
        self.events: list[dict[str, Any]] = []
        self.rank, self.world_size, self.base_ns = rank, world_size, base_ns
        self.devices = [H100] if devices is None else devices
        self.extra_meta = extra_meta or {}
        self._corr = 1
        self._ext = 1
        self.meta_events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
            {
                "ph": "M",
                "name": "thread_name",
                "pid": PID,
                "tid": TID,
                "args": {"name": "main thread"},
            },
        ]

    # -- host side --------------------------------------------------------------------------
    def cpu_op(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        tid: int = TID,
        cat: str = "cpu_op",
        external_id: int | None = None,
        **args: Any,
    ) -> int:
        ext = external_id if external_id is not None else self._next_ext()
        a = {
            "External id": ext,
            **args,
        }
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": a,
            }
        )
        return ext

    def annotation(self, name: str, ts: float, dur: float, *, tid: int = TID) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": self._next_ext()},
            }
        )

    def step(self, n: int, ts: float, dur: float) -> None:
        self.annotation(f"ProfilerStep#{n}", ts, dur)

    def runtime(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        correlation: int | None = None,
        cat: str = "cuda_runtime",
        tid: int = TID,
        external_id: int | None = None,
    ) -> int:
        corr = correlation if correlation is not None else self._next_corr()
        args: dict[str, Any] = {"cbid": 211, "correlation": corr}
        if external_id is not None:
            args["External id"] = external_id
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )
        return corr

    def memory(
        self,
        ts: float,
        nbytes: int,
        total_allocated: int,
        total_reserved: int,
        *,
        addr: int = 0x7F0000000000,
        device: int = 0,
        device_type: int = 1,
        tid: int = TID,
    ) -> None:
        """A caching-allocator ``[memory]`` instant (profile_memory=True): ``nbytes`` > 0 an
        allocation, < 0 a free; the totals are the allocator's after it."""
        self.events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "args": {
                    "Total Reserved": total_reserved,
                    "Total Allocated": total_allocated,
                    "Bytes": nbytes,
                    "Device Id": device,
                    "Device Type": device_type,
                    "Addr": addr,
                },
            }
        )

    def module(self, name: str, ts: float, dur: float, *, tid: int = TID) -> None:
        """An ``nn.Module: <name>`` span, as Kineto writes it with with_modules (python_function)."""
        self.events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"nn.Module: {name}",
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"Python id": self._next_ext(), "Python module id": 0},
            }
        )

    # -- device side ------------------------------------------------------------------------
    def gpu(
        self,
        name: str,
        ts: float,
        dur: float,
        *,
        correlation: int,
        cat: str = "kernel",
        device: int = 0,
        stream: int = 7,
        **args: Any,
    ) -> None:
        a: dict[str, Any] = {"device": device, "stream": stream, "correlation": correlation}
        if cat == "kernel":
            a.update(
                {
                    "registers per thread": 32,
                    "shared memory": 0,
                    "grid": [1, 1, 1],
                    "block": [128, 1, 1],
                }
            )
        a.update(args)
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": device,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": a,
            }
        )

    def launch(
        self,
        kernel: str,
        cpu_ts: float,
        gpu_ts: float,
        gpu_dur: float,
        *,
        cpu_dur: float = 2.0,
        api: str = "cudaLaunchKernel",
        cat: str = "kernel",
        stream: int = 7,
        device: int = 0,
        external_id: int | None = None,
        tid: int = TID,
        **args: Any,
    ) -> int:
        """A runtime call at cpu_ts (on thread ``tid``) that starts GPU work at gpu_ts (with its
        ac2g flow)."""
        corr = self.runtime(
            api,
            cpu_ts,
            cpu_dur,
            tid=tid,
            external_id=external_id,
            cat="cuda_driver"
            if api.startswith("cu") and not api.startswith("cuda")
            else "cuda_runtime",
        )
        self.gpu(
            kernel, gpu_ts, gpu_dur, correlation=corr, cat=cat, device=device, stream=stream, **args
        )
        self.events.append(
            {
                "ph": "s",
                "id": corr,
                "pid": PID,
                "tid": tid,
                "ts": cpu_ts,
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": corr,
                "pid": device,
                "tid": stream,
                "ts": gpu_ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
        return corr

    # -- output -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": self.devices}
        if self.rank is not None:
            d["distributedInfo"] = {
                "backend": "nccl",
                "rank": self.rank,
                "world_size": self.world_size or 1,
            }
        d["record_shapes"] = 1
        d.update(self.extra_meta)
        d["traceEvents"] = self.meta_events + self.events
        if self.base_ns is not None:
            d["baseTimeNanoseconds"] = self.base_ns
        d["displayTimeUnit"] = "ms"
        return d

    def write(self, path: Path | str, *, gz: bool | None = None, indent: int | None = 1) -> Path:
        path = Path(path)
        text = json.dumps(self.to_dict(), indent=indent).encode()
        if gz if gz is not None else path.name.endswith(".gz"):
            path.write_bytes(gzip.compress(text))
        else:
            path.write_bytes(text)
        return path

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext


def two_rank_job(folder: Path, busy: tuple[float, float]) -> Path:
    """Two rank files of a world of two in ``folder``: 3 steps of 100 µs; rank r runs one GEMM of
    ``busy[r]`` µs per step (the longer one is the pace-setter). Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, kernel_us in enumerate(busy):
        t = TraceBuilder(rank=rank, world_size=2)
        for n in range(3):
            t0 = 1000.0 + 100.0 * n
            t.step(n, t0, 100.0)
            t.launch("volta_sgemm_128x64_nn", t0 + 1.0, t0 + 5.0, kernel_us)
        t.write(folder / f"rank{rank}.json")
    return folder


def ddp_job(
    folder: Path, compute: tuple[float, ...], *, steps: int = 4, period: float = 3400.0
) -> Path:
    """One rank file per entry of ``compute`` in ``folder`` (a world of ``len(compute)``):
    ``steps`` steps of ``period`` µs; in each, rank r launches a GEMM of ``compute[r]`` µs (on
    the GPU from 100 µs), then, as it ends, a 4 MiB all-reduce (stream 17) that ends on every rank
    200 µs after the slowest rank's GEMM. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ranks = [TraceBuilder(rank=r, world_size=len(compute)) for r in range(len(compute))]
    last = 100.0 + max(compute)
    for k in range(1, steps + 1):
        start = (k - 1) * period
        for r, t in enumerate(ranks):
            ready = 100.0 + compute[r]
            t.step(k, start, period)
            t.launch("volta_sgemm_128x64_nn", start + 60, start + 100, compute[r])
            comms: dict[str, Any] = {
                "Input Dims": [[[1048576]], [], []],
                "Input type": ["TensorList", "", ""],
            }
            t.cpu_op("record_param_comms", start + 70, 20.0, **comms)
            t.launch(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                start + 75,
                start + ready,
                last + 200 - ready,
                stream=17,
            )
    for r, t in enumerate(ranks):
        t.write(folder / f"r{r}.json")
    return folder


def ingest_one_rank(con: Any, tmp_path: Path, t: TraceBuilder) -> str:
    """Write ``t`` as the one rank of a run under ``tmp_path/run`` and ingest it into ``con``; the
    run id."""
    from gpuscope.ingest.loader import ingest_paths

    d = tmp_path / "run"
    d.mkdir()
    t.write(d / "r0.json")
    [res] = ingest_paths(con, [d])
    return res.run_id


def stepped_big_run(
    path: Path,
    kernels: int,
    names: int = 50,
    host: str | None = None,
    *,
    indent: int | None = None,
) -> Path:
    """Two short profiler steps, a launch in each, then ``kernels`` launches after them (kernel
    names cycling over ``names``; ``host``: the trace's hostname, bytes of its own): many events
    to write (2 + 4 a launch + 1 a step), few in the steps' window, which the CLI ingest's analyze
    document reads (1.2 CPU s at 60,000 launches, against 9.8 s without the steps). ``indent``:
    :meth:`TraceBuilder.write`'s (None, the default here: one line)."""
    t = TraceBuilder(extra_meta={"hostname": host}) if host is not None else TraceBuilder()
    for n in range(2):
        t.step(n, n * 100.0, 100.0)
        t.launch("k0", n * 100.0 + 1, n * 100.0 + 5, 10.0)
    for i in range(kernels):
        t.launch(f"k{i % names}", 1000.0 + i * 10.0, 1000.0 + i * 10.0 + 1, 1.0)
    return t.write(path, indent=indent)
