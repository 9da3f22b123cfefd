"""The profiler's own cost: traced vs untraced step time, and the cap it puts on host-side findings.

``torch.profiler`` adds host time to every op it records (a few µs per op and runtime call). On a
run of many short ops that cost can be most of the traced step, and then the trace's host-side
idle (CPU overhead, launch overhead, ...) is the profiler's, not the user's. With the step time
measured *without* the profiler (``gpuscope.capture`` writes it as ``gpuscope.untraced_step_ms``;
``analyze --untraced-step-ms`` for other traces), no host-side cost can exceed
``untraced step − GPU busy per step``: that is the cap. The GPU busy of a rank that waits for other
ranks leaves out that wait (its collectives' time before the last rank arrived): the rank's own
work (compute and transfer) is what the profiler cannot shorten; the wait is the pace-setter's
time, not this rank's. Definitions: docs/metrics.md ("Profiler cost").
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuscope.analysis.fmt import sig3
from gpuscope.vocabulary.causes import CPU_OVERHEAD, HOST_CAUSES, LAUNCH_OVERHEAD

SUSPECT_HOST_SHARE_PCT = 50.0
"""Without an untraced time, host overhead (CPU + launch) "dominates" at this share of idle (%) ..."""
SUSPECT_IDLE_PCT = 20.0
"""... when idle is at least this share of the window (%) ..."""
SUSPECT_MEDIAN_KERNEL_US = 20.0
"""... and the median compute kernel is shorter than this (µs): dense, short ops."""


def meta_number(metadata: dict[str, Any] | None, key: str) -> float | None:
    """A positive number from trace metadata (a JSON number or its text), else None."""
    v = (metadata or {}).get(key)
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f > 0 and f == f and f != float("inf") else None


@dataclass
class ProfilerCost:
    """Traced and untraced step time (ms), and what they allow host-side findings to claim.

    ``traced_step_ms``: median traced step (ms); ``untraced_step_ms``: median step time with the
    profiler off (None when unknown); ``untraced_source``: ``capture`` (trace metadata) or
    ``argument`` (``--untraced-step-ms``); ``inflation_pct`` = 100 × (traced − untraced) /
    untraced; ``gpu_busy_ms_per_step``: median GPU busy time per traced step (ms), the wait in
    collectives for other ranks left out (:func:`own_busy_ms_per_step`);
    ``host_cap_ms_per_step`` = max(0, untraced − GPU busy per step):
    the most host-side idle a step can have without the profiler; ``suspect``: no untraced time,
    yet host overhead dominates and kernels are short, so host-side figures may be profiler cost.
    """

    traced_step_ms: float
    untraced_step_ms: float | None = None
    untraced_source: str | None = None
    untraced_steps: int | None = None
    gpu_busy_ms_per_step: float = 0.0
    suspect: bool = False
    note: str | None = None
    host_causes_ms_per_step: dict[str, float] | None = None

    @property
    def capped_causes_ms_per_step(self) -> dict[str, float] | None:
        """Each host-side idle cause per step (ms), capped at :attr:`host_cap_ms_per_step`: what
        it can be at most without the profiler. None without an untraced time."""
        cap = self.host_cap_ms_per_step
        if cap is None or self.host_causes_ms_per_step is None:
            return None
        return {c: min(v, cap) for c, v in self.host_causes_ms_per_step.items()}

    @property
    def inflation_pct(self) -> float | None:
        if not self.untraced_step_ms:
            return None
        return 100.0 * (self.traced_step_ms - self.untraced_step_ms) / self.untraced_step_ms

    @property
    def host_cap_ms_per_step(self) -> float | None:
        if self.untraced_step_ms is None:
            return None
        return max(0.0, self.untraced_step_ms - self.gpu_busy_ms_per_step)

    def to_json(self) -> dict[str, Any]:
        return {
            "traced_step_ms": self.traced_step_ms,
            "untraced_step_ms": self.untraced_step_ms,
            "untraced_source": self.untraced_source,
            "untraced_steps": self.untraced_steps,
            "inflation_pct": self.inflation_pct,
            "gpu_busy_ms_per_step": self.gpu_busy_ms_per_step,
            "host_cap_ms_per_step": self.host_cap_ms_per_step,
            "capped_causes_ms_per_step": self.capped_causes_ms_per_step,
            "suspect": self.suspect,
            "note": self.note,
        }


def own_busy_ms_per_step(
    step_busy_ns: Sequence[int | None], busy_ns: int, wait_ns: int, n_steps: int
) -> float:
    """A rank's own GPU work per step (ms): the median of its steps' GPU busy time
    (``step_busy_ns``, ns; None where not computed: then the window's mean, ``busy_ns`` /
    ``n_steps``) times the share of its busy time that is not ``wait_ns``, the wait in
    collectives for the last rank to arrive over the window (0 for one rank): compute and
    transfer. The share is the window's: a step's collectives often run past the step's
    CPU-side bounds, so a step's wait and its busy time are not read from the same span."""
    vals = [int(v) for v in step_busy_ns if v is not None]
    busy = float(statistics.median(vals)) if vals else busy_ns / max(1, n_steps)
    own_share = 1.0 - min(max(wait_ns, 0), busy_ns) / busy_ns if busy_ns > 0 else 1.0
    return busy * own_share / 1e6


def profiler_cost(
    traced_step_ms: float,
    gpu_busy_ms_per_step: float,
    metadata: dict[str, Any] | None,
    *,
    untraced_step_ms: float | None = None,
    idle_causes_ns: dict[str, int] | None = None,
    window_ns: int = 0,
    median_kernel_us: float | None = None,
    n_steps: int = 1,
) -> ProfilerCost:
    """The profiler cost of one rank. ``untraced_step_ms`` (ms, > 0) wins over the trace's
    ``gpuscope.untraced_step_ms``. ``idle_causes_ns`` / ``window_ns`` / ``median_kernel_us`` decide
    ``suspect`` when no untraced time is known. Raises ValueError for a non-positive argument."""
    if untraced_step_ms is not None and not untraced_step_ms > 0:
        raise ValueError(f"--untraced-step-ms must be > 0 (got {untraced_step_ms:g})")
    source: str | None = None
    steps: int | None = None
    value = untraced_step_ms
    if value is not None:
        source = "argument"
    else:
        value = meta_number(metadata, "gpuscope.untraced_step_ms")
        if value is not None:
            source = "capture"
            n = meta_number(metadata, "gpuscope.untraced_steps")
            steps = int(n) if n else None
    pc = ProfilerCost(
        traced_step_ms=traced_step_ms,
        untraced_step_ms=value,
        untraced_source=source,
        untraced_steps=steps,
        gpu_busy_ms_per_step=gpu_busy_ms_per_step,
    )
    if idle_causes_ns is not None:
        pc.host_causes_ms_per_step = {
            c: idle_causes_ns.get(c, 0) / max(1, n_steps) / 1e6 for c in HOST_CAUSES
        }
    if value is not None:
        cap = pc.host_cap_ms_per_step or 0.0
        pc.note = (
            f"traced step {_ms3(traced_step_ms)} ms, untraced {_ms3(value)} ms "
            f"(+{pc.inflation_pct or 0:.0f}% from the profiler); host-side figures are capped at "
            f"{_ms3(cap)} ms per step (untraced step − GPU busy per step)"
        )
        return pc
    causes = idle_causes_ns or {}
    idle = sum(causes.values())
    host = causes.get(CPU_OVERHEAD, 0) + causes.get(LAUNCH_OVERHEAD, 0)
    if (
        window_ns > 0
        and idle > 0
        and 100.0 * idle / window_ns >= SUSPECT_IDLE_PCT
        and 100.0 * host / idle >= SUSPECT_HOST_SHARE_PCT
        and median_kernel_us is not None
        and median_kernel_us < SUSPECT_MEDIAN_KERNEL_US
    ):
        pc.suspect = True
        pc.note = (
            f"host overhead is {100.0 * host / idle:.0f}% of idle time and kernels are short "
            f"(median {median_kernel_us:.3g} µs): much of it may be the profiler's own cost per op. "
            "Measure the step without the profiler (gpuscope.capture does it) or pass "
            "--untraced-step-ms MS"
        )
    return pc


def _ms3(v: float) -> str:
    """ms with three significant figures and thousands separators."""
    return sig3(v)
