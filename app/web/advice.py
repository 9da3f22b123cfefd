"""What to do about what the Live page sees: the wording beside its diagnosis (no analysis here:
the diagnosis itself comes from ``gpuscope.analysis.live``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuscope.analysis.live import MOSTLY_IDLE_PCT, STEADY_IDLE_PCT
from gpuscope.analysis.run_views import LOADER_FIX, SYNC_FIX, FixWords

GPM = (
    "GPM (GPU Performance Monitoring) is NVML's set of hardware counters on Hopper and newer "
    "GPUs; it says how much of the chip was working, where NVML's utilization only says that "
    "some kernel ran."
)


@dataclass(frozen=True)
class Todo:
    """What to do: ``advice`` (Markdown, written here, no data in it) and the fix of the usual
    cause (None: no fix to name), in its unit's words: the Run page's id, title and code."""

    advice: str
    fix: FixWords | None = None

    @property
    def fix_id(self) -> str | None:
        """The recommendation id (docs/metrics.md, Recommendations), None without a fix."""
        return self.fix.id if self.fix is not None else None

    @property
    def title(self) -> str:
        return self.fix.title if self.fix is not None else ""

    @property
    def code(self) -> str:
        return self.fix.code if self.fix is not None else ""


def what_to_do(d: Any) -> Todo:
    """What to do about a live diagnosis (its shape: a regular sawtooth, mostly idle, irregular
    idle, steadily busy), with the recommendation that fixes the usual cause of that shape."""
    idle = d.idle_share_pct
    if idle is None:
        return Todo("wait for samples.")
    # advice about a per-step cause only from idle time at the scale of steps, seen finely enough
    timescale = getattr(d, "timescale", "step")
    if timescale in ("seconds", "minutes") and d.period_s is None:
        return Todo(
            "no per-step fix: gaps this long are not inside training steps. Check what the job "
            "does then (evaluation, checkpointing, a job ending and the next starting, waiting "
            "for data or the scheduler). To see per-step causes, record a trace of a few "
            "training steps (`gpuscope.capture.profile_steps`) and upload it."
        )
    if timescale == "coarse" and d.period_s is None and idle >= STEADY_IDLE_PCT:
        return Todo(
            "sample faster before reading a per-step cause into this series: `gpuscope sample "
            "--interval-ms 100`; a trace of a few steps (`gpuscope.capture.profile_steps`) names "
            "the cause."
        )
    if timescale == "finer":
        return Todo(
            "record a trace of a few steps (`gpuscope.capture.profile_steps`) and upload it: the "
            "idle time sits inside each NVML sample, shorter than utilization can show, and only "
            "a trace names its cause (data loading, host syncs, launch overhead, …)."
        )
    if d.period_s is not None:
        return Todo(
            "a regular busy/idle rhythm is almost always the input pipeline: make batches in "
            "background workers and copy them from pinned memory.",
            LOADER_FIX,
        )
    if idle < STEADY_IDLE_PCT:
        return Todo(
            "nothing, from utilization alone. If SM active (GPM) stays low while the GPU is "
            "busy, the kernels are too small for the GPU: try a larger batch."
        )
    if idle > MOSTLY_IDLE_PCT:
        return Todo(
            "check that the job is running and is using this GPU; if it is, the host is the "
            "bottleneck: record a trace to see whether it is data loading, syncs or CPU work."
        )
    return Todo(
        "irregular idle gaps usually come from the host waiting on the GPU (`.item()`, "
        "`.cpu()`, printing a loss every step) or from uneven batches: keep per-step values on "
        "the GPU and read them back every N steps.",
        SYNC_FIX,
    )
