"""One rank's line of a run's analysis (``RunReport.ranks``, ``analyze --json``'s ``ranks``): its
headline figures, as the analysis builds them and the rank summary part ``rank_row`` stores them.

The stored part is the line's JSON (:meth:`RankRow.to_json`), read back with
:meth:`RankRow.from_stored`; a line stored before a figure existed reads with that figure None
(its per-step maps empty). Definitions: docs/metrics.md ("Many ranks", "Busy, split")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The stored part that holds a rank's line (:mod:`gpuscope.analysis.rank_summary`): its name and
#: version (bumped when :meth:`RankRow.to_json` or its figures' definitions change; 2: the
#: window leaves out a last step the profiler cut as it began).
PART = "rank_row"
VERSION = 2

__all__ = ["RankRow"]


@dataclass(frozen=True)
class RankRow:
    """One rank's line: GPU busy (% of its window; None without GPU activity: no evidence, no
    figure), step time (ms: mean, and median/p90/max), communication-only and idle time (µs per
    step), idle by cause (µs per step, every cause), the busy split (% of the window: compute,
    communication transfer and wait; the wait also in µs per step) and, per step (step number ->
    ms; empty for a trace-wide window), its step time and its wait in the collectives launched
    in that step. None: not computed (no GPU activity, no split, or a line stored before it)."""

    rank: int
    gpu_busy_pct: float | None
    step_time_ms: float | None
    comm_only_us_per_step: float | None
    idle_us_per_step: float | None = None
    idle_by_cause_us_per_step: dict[str, float] | None = None
    step_p50_ms: float | None = None
    step_p90_ms: float | None = None
    step_max_ms: float | None = None
    compute_pct: float | None = None
    comm_transfer_pct: float | None = None
    comm_wait_pct: float | None = None
    comm_wait_us_per_step: float | None = None
    step_ms_by_step: dict[int, float] = field(default_factory=dict)
    wait_ms_by_step: dict[int, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The line as ``analyze --json`` writes it and the ``rank_row`` part stores it (the
        per-step maps keyed by the step number as text)."""
        return {
            "rank": self.rank,
            "gpu_busy_pct": self.gpu_busy_pct,
            "step_time_ms": self.step_time_ms,
            "comm_only_us_per_step": self.comm_only_us_per_step,
            "idle_us_per_step": self.idle_us_per_step,
            "idle_by_cause_us_per_step": (
                dict(self.idle_by_cause_us_per_step)
                if self.idle_by_cause_us_per_step is not None
                else None
            ),
            "step_p50_ms": self.step_p50_ms,
            "step_p90_ms": self.step_p90_ms,
            "step_max_ms": self.step_max_ms,
            "compute_pct": self.compute_pct,
            "comm_transfer_pct": self.comm_transfer_pct,
            "comm_wait_pct": self.comm_wait_pct,
            "comm_wait_us_per_step": self.comm_wait_us_per_step,
            "step_ms_by_step": {str(k): v for k, v in self.step_ms_by_step.items()},
            "wait_ms_by_step": {str(k): v for k, v in self.wait_ms_by_step.items()},
        }

    @classmethod
    def from_stored(cls, doc: Mapping[str, Any]) -> RankRow:
        """The line of a stored ``rank_row`` part (its JSON, :meth:`to_json`); a key a line
        stored by an older gpuscope lacks reads as None (a per-step map: empty). Numbers are
        kept as stored (JSON gives ``int`` or ``float``)."""
        by = doc.get("idle_by_cause_us_per_step")
        return cls(
            rank=int(doc["rank"]),
            gpu_busy_pct=doc.get("gpu_busy_pct"),
            step_time_ms=doc.get("step_time_ms"),
            comm_only_us_per_step=doc.get("comm_only_us_per_step"),
            idle_us_per_step=doc.get("idle_us_per_step"),
            idle_by_cause_us_per_step=dict(by) if by is not None else None,
            step_p50_ms=doc.get("step_p50_ms"),
            step_p90_ms=doc.get("step_p90_ms"),
            step_max_ms=doc.get("step_max_ms"),
            compute_pct=doc.get("compute_pct"),
            comm_transfer_pct=doc.get("comm_transfer_pct"),
            comm_wait_pct=doc.get("comm_wait_pct"),
            comm_wait_us_per_step=doc.get("comm_wait_us_per_step"),
            step_ms_by_step={int(k): v for k, v in (doc.get("step_ms_by_step") or {}).items()},
            wait_ms_by_step={int(k): v for k, v in (doc.get("wait_ms_by_step") or {}).items()},
        )
