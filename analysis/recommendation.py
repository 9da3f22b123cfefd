"""A fix as every face reads it: :class:`Recommendation`, its :class:`Estimate`, the footings its
gain is a share of, and how the faces say the fixes are ordered (:data:`ORDER_NOTE`).

The fix units (:mod:`gpuscope.analysis.fixes`) find and estimate the recommendations and
:mod:`gpuscope.analysis.gains` re-times them; this module computes nothing and imports no analysis:
a stored ``analyze`` document is rendered from it (``gpuscope analyze RUN``). Its names are
importable from where they are computed too (``fixes``, ``fixes.base``, ``gains``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STEP_TIME = "step_time"
"""Footing of a fix that keeps the batch: its step-time gain is also its time-per-sample gain."""
PER_SAMPLE_TIME = "per_sample_time"
"""Footing of a fix that changes the batch: the gain is on the time per sample."""
MEMORY = "memory"
"""Footing of a fix whose gain is room in GPU memory (time only from the allocator's calls)."""

SIGNIFICANT_PCT = 5.0
"""An estimate (%) from which a fix that keeps the training identical goes before a fix that
changes it. Chosen on the calibration cases of sample_traces/validation alone: 5 % is issue 43's
ceiling for an estimate where the fix gains nothing (``benchmarks/validate_gains_set.OVER_PCT``);
there the fixes that gain nothing are estimated at 0.5 % at most (v11's ``host_sync``, v13's
``memory_near_full`` 0, v15 none), the planted fixes that gain at 10.4 % or more (v07's
``cudnn_benchmark``), but for v10's ``pin_memory`` at 3.1 % (it gains 13.5 %: below the
threshold, the batch fix stays before it)."""

ORDER_NOTE = (
    "Largest estimated gain first, re-timed on the critical path. Every gain is a share of the "
    "time per sample: a fix that keeps the batch gains the same share of the step time. "
    "torch.compile and CUDA graphs come after the fix of a cause found in the step (recompute, "
    "optimizer loop), estimated on top of it; CUDA graphs replay the recompute too, so beside "
    "it each is estimated alone and the larger comes first. A fix that changes the training (a "
    "larger batch: learning rate, convergence, memory) comes after the fixes that keep it "
    f"identical and are estimated at {SIGNIFICANT_PCT:g}% or more."
)
"""How the faces say the fixes are ordered, and on which footing their gains compare."""


@dataclass
class Estimate:
    """A fix's estimated reduction of the step time (per-sample time for a fix that grows the
    batch), %: ``gain_pct`` (best estimate), ``low_pct``..``high_pct`` (range), ``step_ms`` (the
    step time after the fix), ``bound``: whether ``high_pct`` is the fix's proven bound;
    ``clipped``: the re-timing went above that bound and was cut there; ``banded``: the range's
    low end was raised to how far below such estimates measured gains landed on the recorded
    pairs (:mod:`gpuscope.analysis.fixes.band`)."""

    gain_pct: float
    low_pct: float
    high_pct: float
    step_ms: float | None
    method: str = "critical_path"
    bound: bool = False
    calibrated: bool = False
    clipped: bool = False
    banded: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "gain_pct": self.gain_pct,
            "low_pct": self.low_pct,
            "high_pct": self.high_pct,
            "step_ms": self.step_ms,
            "method": self.method,
            "bound": self.bound,
            "calibrated": self.calibrated,
            "clipped": self.clipped,
            "banded": self.banded,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Estimate:
        """The estimate :meth:`to_json` wrote."""
        return cls(
            d["gain_pct"],
            d["low_pct"],
            d["high_pct"],
            d["step_ms"],
            d["method"],
            d["bound"],
            d["calibrated"],
            d["clipped"],
            d.get("banded", False),  # absent from documents written before the band
        )


@dataclass
class Recommendation:
    """One fix the run's evidence supports.

    ``evidence``: ``summary`` (one sentence) plus the numbers it is built from. ``cost_pct``: the
    cost the rule measured (% of the step: the time it addresses, profiler-capped; what made it
    fire, not a gain). ``bound_pct``: a proven ceiling on the gain (%), None where none is proven
    (docs/metrics.md, "Recommendations"). ``footing``: what the gain is a share of
    (:data:`STEP_TIME`, :data:`PER_SAMPLE_TIME`, :data:`MEMORY`). ``estimate``: the gain re-timed
    on the critical path (None until the report adds it; never above ``bound_pct``)."""

    id: str
    title: str
    why: str
    evidence: dict[str, Any]
    fix: str
    cost_pct: float
    bound_pct: float | None = None
    footing: str = STEP_TIME
    estimate: Estimate | None = None

    @property
    def gain_pct(self) -> float | None:
        """The one number of the fix: its estimate's point value (%), None without an estimate."""
        return self.estimate.gain_pct if self.estimate is not None else None

    @property
    def gain_phrase(self) -> str:
        """The gain in words: "step time down 36.3% (range 29.8 to 38.7%)", "at most" only after a
        proven bound; a point below 0 said as what it is ("not expected to help: step time up
        13.8% by the estimate (range -56.5 to 58.6%)"), and so is a re-timing that leaves the step
        no shorter at any level ("not expected to help: step time no shorter by the estimate
        (range 0 to 0%)"); without an estimate the proven bound alone, else ""."""
        what = "time per sample" if self.footing == PER_SAMPLE_TIME else "step time"
        e = self.estimate
        if e is not None:
            rng = f"(range {e.low_pct:.3g} to {e.high_pct:.3g}%)"
            if e.gain_pct < 0:
                out = f"not expected to help: {what} up {-e.gain_pct:.3g}% by the estimate {rng}"
            elif e.high_pct <= 0:
                out = f"not expected to help: {what} no shorter by the estimate {rng}"
            else:
                out = f"{what} down {e.gain_pct:.3g}% {rng}"
            if self.footing == PER_SAMPLE_TIME:
                out += ", with a larger batch per step"
            if self.bound_pct is not None:
                out += f"; at most {self.bound_pct:.3g}%"
        elif self.bound_pct is not None:
            out = f"{what} down by at most {self.bound_pct:.3g}%"
        else:
            return ""
        return f"frees GPU memory; {out}" if self.footing == MEMORY else out

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "why": self.why,
            "evidence": self.evidence,
            "cost_pct": self.cost_pct,
            "bound_pct": self.bound_pct,
            "footing": self.footing,
            "gain": self.gain_phrase,
            "fix": self.fix,
            "estimate": self.estimate.to_json() if self.estimate is not None else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Recommendation:
        """The recommendation :meth:`to_json` wrote (``gain`` is derived, not read)."""
        est = d.get("estimate")
        return cls(
            d["id"],
            d["title"],
            d["why"],
            dict(d["evidence"]),
            d["fix"],
            d["cost_pct"],
            d["bound_pct"],
            d["footing"],
            Estimate.from_json(est) if est is not None else None,
        )
