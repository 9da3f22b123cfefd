"""A regression gate against a baseline run, on per-step medians, knowing the noise.

Each metric (step time, throughput, MFU, GPU busy %) is a series with one value per step of each
run. The gate compares the medians. A change counts only when it is both

* beyond the threshold: worse than the baseline by more than ``max_regression_pct`` % of its
  median, and
* beyond the noise: the gap between the medians is larger than ``z`` standard errors of that gap,
  where each median's standard error is estimated from its run's spread across steps:
  ``SE = 1.2533 × σ / √n`` with the robust ``σ = 1.4826 × MAD`` (the asymptotic standard error of
  a sample median; 1.4826 × MAD estimates σ without letting a slow warm-up step inflate it).

Both runs' spreads (MAD and IQR) are stated in the verdict, so a reader sees why a change was or
was not beyond the noise. :func:`step_series` turns a :class:`RunReport` into these series; this
module computes, it draws and prints nothing (``gpuscope check --baseline`` prints).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.fmt import sig3

if TYPE_CHECKING:
    from gpuscope.analysis.report import RunReport

SCHEMA = "gpuscope.gate/1"
MAD_TO_SIGMA = 1.4826  # σ of a normal distribution = 1.4826 × its MAD
MEDIAN_SE = 1.2533  # SE of a sample median ≈ 1.2533 × σ / √n (normal data, large n)
DEFAULT_Z = 2.0
DEFAULT_MAX_REGRESSION_PCT = 5.0


@dataclass(frozen=True)
class Spread:
    """One run's per-step values of one metric: ``n`` steps, their median, median absolute
    deviation ``mad`` and interquartile range ``iqr`` (``p25``..``p75``), in the metric's unit."""

    n: int
    median: float
    mad: float
    p25: float
    p75: float

    @property
    def iqr(self) -> float:
        return self.p75 - self.p25

    @property
    def se(self) -> float:
        """Standard error of the median (metric unit); 0 with a single step (noise unknown)."""
        if self.n < 2:
            return 0.0
        return MEDIAN_SE * MAD_TO_SIGMA * self.mad / math.sqrt(self.n)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "median": self.median,
            "mad": self.mad,
            "iqr": self.iqr,
            "p25": self.p25,
            "p75": self.p75,
            "se": self.se,
        }


def spread(values: list[float] | np.ndarray) -> Spread:
    """The :class:`Spread` of per-step ``values`` (at least one). Raises ValueError on none."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ValueError("no per-step values")
    med = float(np.median(v))
    p25, p75 = (float(x) for x in np.percentile(v, [25, 75]))
    return Spread(int(v.size), med, float(np.median(np.abs(v - med))), p25, p75)


@dataclass
class Series:
    """One metric's per-step values of one run. ``better``: ``lower`` or ``higher``."""

    metric: str
    unit: str
    better: str
    values: list[float]


@dataclass
class MetricVerdict:
    """One metric, baseline (A) against candidate (B).

    ``change_pct``: (B − A) / |A| × 100 of the medians; ``regression_pct``: the same, signed so
    that positive is worse; ``noise``: ``z`` × the standard error of B − A (metric unit);
    ``status``: ``regressed`` (worse beyond noise and threshold), ``improved`` (better beyond
    noise), ``within noise``, ``within threshold`` (beyond noise, not beyond the threshold),
    ``unknown`` (a run lacks the metric; ``note`` says why)."""

    metric: str
    unit: str
    better: str
    baseline: Spread | None
    candidate: Spread | None
    max_regression_pct: float
    z: float = DEFAULT_Z
    note: str | None = None
    gating: bool = True  # False: reported, never fails the gate (``note`` says why)

    @property
    def known(self) -> bool:
        return self.baseline is not None and self.candidate is not None

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate.median - self.baseline.median

    @property
    def change_pct(self) -> float | None:
        d = self.delta
        if d is None or self.baseline is None or self.baseline.median == 0:
            return None
        return 100.0 * d / abs(self.baseline.median)

    @property
    def regression_pct(self) -> float | None:
        c = self.change_pct
        if c is None:
            return None
        return c if self.better == "lower" else -c

    @property
    def noise(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return self.z * math.hypot(self.baseline.se, self.candidate.se)

    @property
    def noise_pct(self) -> float | None:
        n = self.noise
        if n is None or self.baseline is None or self.baseline.median == 0:
            return None
        return 100.0 * n / abs(self.baseline.median)

    @property
    def beyond_noise(self) -> bool | None:
        d, n = self.delta, self.noise
        return None if d is None or n is None else abs(d) > n

    @property
    def beyond_threshold(self) -> bool | None:
        r = self.regression_pct
        return None if r is None else r > self.max_regression_pct

    @property
    def regressed(self) -> bool:
        return self.gating and bool(self.beyond_noise) and bool(self.beyond_threshold)

    @property
    def status(self) -> str:
        if self.regression_pct is None:
            return "unknown"
        if not self.beyond_noise:
            return "within noise"
        if self.regression_pct < 0:
            return "improved"
        if not self.beyond_threshold:
            return "within threshold"
        return "regressed" if self.gating else "worse, not gating"

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "unit": self.unit,
            "better": self.better,
            "baseline": self.baseline.to_json() if self.baseline else None,
            "candidate": self.candidate.to_json() if self.candidate else None,
            "change_pct": self.change_pct,
            "regression_pct": self.regression_pct,
            "noise": self.noise,
            "noise_pct": self.noise_pct,
            "beyond_noise": self.beyond_noise,
            "beyond_threshold": self.beyond_threshold,
            "status": self.status,
            "gating": self.gating,
            "note": self.note,
        }


def compare_metric(
    a: Series | None,
    b: Series | None,
    *,
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT,
    z: float = DEFAULT_Z,
    metric: str | None = None,
    note: str | None = None,
) -> MetricVerdict:
    """The verdict on one metric; ``a`` or ``b`` None (or empty) when that run lacks it."""
    ref = a or b
    if ref is None:
        raise ValueError("compare_metric needs at least one series")
    sa = spread(a.values) if a is not None and a.values else None
    sb = spread(b.values) if b is not None and b.values else None
    if note is None and (sa is None or sb is None):
        which = "baseline" if sa is None else "candidate"
        note = f"the {which} run has no {ref.metric}"
    return MetricVerdict(
        metric or ref.metric, ref.unit, ref.better, sa, sb, max_regression_pct, z, note
    )


@dataclass
class GateResult:
    """The gate's verdict: ``failed`` when any metric regressed beyond noise and threshold."""

    baseline: dict[str, Any]
    candidate: dict[str, Any]
    max_regression_pct: float
    z: float
    metrics: list[MetricVerdict]
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[MetricVerdict]:
        return [m for m in self.metrics if m.regressed]

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def summary(self) -> str:
        """One line: ``ok`` or which metrics regressed, by how much, against which noise."""
        if not self.failed:
            return "ok: no metric worse than the baseline beyond noise and threshold"
        parts = [
            f"{m.metric} {_signed(m.change_pct)} (median {sig3(_med(m.baseline))} → "
            f"{sig3(_med(m.candidate))} {m.unit}; noise ±{sig3(m.noise_pct)}%, "
            f"threshold {m.max_regression_pct:g}%)"
            for m in self.regressions
        ]
        return "regressed: " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "max_regression_pct": self.max_regression_pct,
            "z": self.z,
            "failed": self.failed,
            "summary": self.summary(),
            "metrics": [m.to_json() for m in self.metrics],
            "notes": list(self.notes),
        }

    def markdown(self) -> str:
        """The verdict as Markdown (a pull-request comment, ``$GITHUB_STEP_SUMMARY``)."""
        head = "❌ regression" if self.failed else "✅ no regression"
        lines = [
            f"### gpuscope check: {head}",
            "",
            f"Baseline **{_md(_label(self.baseline))}** · candidate **{_md(_label(self.candidate))}"
            f"** · threshold {self.max_regression_pct:g}% · noise = {self.z:g} standard errors "
            "of the difference of medians (from each run's MAD across steps)",
            "",
            "| metric | baseline median (MAD · IQR, n) | candidate median (MAD · IQR, n) | change "
            "| noise ± | verdict |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for m in self.metrics:
            lines.append(
                f"| {m.metric} ({m.unit}) | {_cell(m.baseline)} | {_cell(m.candidate)} | "
                f"{_signed(m.change_pct)} | {_pct(m.noise_pct)} | "
                f"{_STATUS_MD[m.status]}{' — ' + _md(m.note) if m.note else ''} |"
            )
        if self.notes:
            lines += ["", *[f"- {_md(n)}" for n in self.notes]]
        lines += ["", self.summary()]
        return "\n".join(lines)

    def table(self) -> str:
        """A plain-text table (what ``gpuscope check --baseline`` prints by default)."""
        lines = [
            f"baseline:  {_label(self.baseline)}",
            f"candidate: {_label(self.candidate)}",
            f"threshold {self.max_regression_pct:g}%, noise = {self.z:g} SE of the difference",
            "",
            f"{'metric':18} {'baseline (MAD)':>22} {'candidate (MAD)':>22} {'change':>8} "
            f"{'noise±':>7}  verdict",
        ]
        for m in self.metrics:
            lines.append(
                f"{m.metric:18} {_plain(m.baseline):>22} {_plain(m.candidate):>22} "
                f"{_signed(m.change_pct):>8} {_pct(m.noise_pct):>7}  {m.status}"
                + (f" ({m.note})" if m.note else "")
            )
        lines += [*self.notes, "", self.summary()]
        return "\n".join(lines)


_STATUS_MD = {
    "regressed": "❌ regressed",
    "improved": "✅ improved",
    "within noise": "within noise",
    "within threshold": "within threshold",
    "worse, not gating": "worse, not gating (the run is faster)",
    "unknown": "unknown",
}


def _med(s: Spread | None) -> float | None:
    return None if s is None else s.median


def _signed(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{sig3(v)}%"


def _cell(s: Spread | None) -> str:
    if s is None:
        return "-"
    return f"{sig3(s.median)} ({sig3(s.mad)} · {sig3(s.iqr)}, {s.n})"


def _plain(s: Spread | None) -> str:
    return "-" if s is None else f"{sig3(s.median)} ({sig3(s.mad)})"


def _label(run: dict[str, Any]) -> str:
    tag = f", tag {run['tag']}" if run.get("tag") else ""
    return f"{run.get('name')} ({str(run.get('id'))[:12]}{tag}, rank {run.get('rank')})"


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell (no pipes, no HTML, no line breaks)."""
    out = " ".join(str(text).split())
    for ch in "\\|<>`*_[]":
        out = out.replace(ch, "\\" + ch)
    return out


def step_series(
    report: RunReport, job_periods: Sequence[float] | None = None
) -> dict[str, Series | None]:
    """Per-step series of a report: ``step time`` (ms), ``throughput`` (tokens/s, else
    samples/s, when the run states its units per step), ``MFU`` (% of the dense bf16 peak, when
    FLOPs and the peak are known) and ``GPU busy`` (%, per step). A metric the run lacks is None.
    Throughput and MFU per step are the run's per-step work over each step's time (so their
    median is the work over the median step). ``job_periods``: the job's step periods (ms; the
    periods between step completions that :func:`gpuscope.analysis.job.step_time` keeps), the
    step times of a run of several ranks (its shown rank's own spans show its host, not the
    pace); None or empty: the report's own steps."""
    steps = [s for s in report.per_step if s.duration_ms]
    dur = (
        [float(v) for v in job_periods]
        if job_periods
        else [float(s.duration_ms or 0.0) for s in steps]
    )
    out: dict[str, Series | None] = {
        "step time": Series("step time", "ms", "lower", dur),
        "throughput": None,
        "MFU": None,
        "GPU busy": None,
    }
    tp = report.throughput
    units, unit = (
        (tp.tokens_per_step, "tokens/s")
        if tp is not None and tp.tokens_per_step
        else (tp.samples_per_step if tp is not None else None, "samples/s")
    )
    if units and report.has_gpu_activity:
        out["throughput"] = Series("throughput", unit, "higher", [units / (d / 1e3) for d in dur])
    fps, peak = report.flops_per_step, report.peak_tflops
    if fps and peak and report.mfu_pct is not None:
        out["MFU"] = Series(
            "MFU", "%", "higher", [100.0 * fps / (d / 1e3) / (peak * 1e12) for d in dur]
        )
    busy = [float(s.busy_pct) for s in steps if s.busy_pct is not None]
    if busy and report.has_gpu_activity:
        out["GPU busy"] = Series("GPU busy", "%", "higher", busy)
    return out


SPEED_METRICS = ("step time", "throughput")


def _busy_follows_speed(verdicts: list[MetricVerdict]) -> None:
    """GPU busy is a diagnosis, not an outcome: when the candidate is faster beyond the noise
    (step time or throughput improved), a lower busy share is reported but does not gate (a 4x
    faster run whose GPU is less busy is not a regression)."""
    faster = [v.metric for v in verdicts if v.metric in SPEED_METRICS and v.status == "improved"]
    if not faster:
        return
    for v in verdicts:
        if v.metric == "GPU busy":
            v.gating = False
            v.note = f"the candidate is faster ({' and '.join(faster)} improved beyond noise): busy does not gate"


def gate(
    baseline: dict[str, Series | None],
    candidate: dict[str, Series | None],
    *,
    baseline_run: dict[str, Any] | None = None,
    candidate_run: dict[str, Any] | None = None,
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT,
    z: float = DEFAULT_Z,
) -> GateResult:
    """Compare every metric either run has (see :func:`step_series`). Raises ValueError for a
    negative threshold or a non-positive ``z``."""
    if not (max_regression_pct >= 0) or not math.isfinite(max_regression_pct):
        raise ValueError(f"--max-regression must be a percentage >= 0, not {max_regression_pct}")
    if not (z > 0) or not math.isfinite(z):
        raise ValueError(f"--noise-z must be > 0, not {z}")
    verdicts: list[MetricVerdict] = []
    notes: list[str] = []
    for name in dict.fromkeys([*baseline, *candidate]):
        a, b = baseline.get(name), candidate.get(name)
        if a is None and b is None:
            continue
        note = None
        if a is not None and b is not None and a.unit != b.unit:
            note = f"the runs count throughput in different units ({a.unit} vs {b.unit})"
            verdicts.append(
                MetricVerdict(name, a.unit, a.better, None, None, max_regression_pct, z, note)
            )
            continue
        verdicts.append(compare_metric(a, b, max_regression_pct=max_regression_pct, z=z))
    _busy_follows_speed(verdicts)
    for run, label in ((baseline_run, "baseline"), (candidate_run, "candidate")):
        st = (baseline if label == "baseline" else candidate).get("step time")
        n = len(st.values) if st is not None else 0
        if run is not None and n < 2:
            notes.append(
                f"the {label} run has {n} step(s): its noise is unknown and counted as zero"
            )
    return GateResult(
        baseline_run or {}, candidate_run or {}, max_regression_pct, z, verdicts, notes
    )
