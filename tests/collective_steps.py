"""Hand-built one-step traces for the critical path (``critical_path_of``'s host and GPU events):
three kernels in a chain through a collective on a stream of its own, launched early by the host,
which then waits in a ``cudaStreamSynchronize`` to the step's end. Three tiny kernels on streams
of their own, each starting 5 µs after its launch, make the typical launch latency a real one
(not the collective's). Each test module states its own numbers and the answers it works out."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H

US = 1_000
APIS = ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernel")
"""The three chained kernels' launch calls (the collective's through the driver, as NCCL's)."""


def chain_through_collective(
    end_us: float,
    calls_us: Sequence[tuple[float, float]],
    kernels: Sequence[tuple[str, int, int, int]],
    sync_from_us: float,
    tiny: Sequence[tuple[float, int]],
    host_extra: Sequence[H] = (),
) -> tuple[list[H], list[G]]:
    """Step 0..``end_us``: ``host_extra`` under the step's annotation, the launch calls
    (``calls_us``: start, end µs of each, correlation 1, 2, 3), the tiny kernels' calls (``tiny``:
    (start µs, correlation), 1 µs each) and the sync ``sync_from_us``..``end_us``; on the GPU the
    tiny kernels (5..6 µs after their call, stream 20 + correlation) and ``kernels`` (name,
    start ns, end ns, stream; correlation 1, 2, 3)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, int(end_us * US), 1),
        *host_extra,
        *(
            H(api, "cuda_runtime", int(a * US), int(b * US), 1, c)
            for c, (api, (a, b)) in enumerate(zip(APIS, calls_us, strict=True), start=1)
        ),
        *(
            H("cudaLaunchKernel", "cuda_runtime", int(t * US), int((t + 1) * US), 1, c)
            for t, c in tiny
        ),
        H("cudaStreamSynchronize", "cuda_runtime", int(sync_from_us * US), int(end_us * US), 1),
    ]
    gpu = [
        *(G("tiny", "kernel", int((t + 5) * US), int((t + 6) * US), 20 + c, c) for t, c in tiny),
        *(
            G(name, "kernel", s, e, stream, c)
            for c, (name, s, e, stream) in enumerate(kernels, start=1)
        ),
    ]
    return host, gpu
