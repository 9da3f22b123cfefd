"""Moving-window diagnosis of one GPU's utilization series (the Live page).

Pure numpy: no Streamlit, no plotting. Definitions (docs/metrics.md, "Live diagnosis"):

* each sample holds until the next one; the last one holds for the median sample interval, so a
  window of N samples at 100 ms covers N × 100 ms;
* ``idle_share_pct``: the share of the window in which no kernel ran: NVML's utilization is the
  share of each sample period in which one did, so this is 100 − the time-weighted mean
  utilization — the figure a reader takes from the chart (a minute at 45 % is 55 % idle, not
  100 %);
* a sample is **busy** when ``util >= busy_threshold_pct`` (default 50 %), else **idle**: the
  busy/idle wave whose edges, cycles and duty cycle are below;
* a **rising edge** is an idle sample followed by a busy one (at the busy sample's time); a
  **cycle** is the span between two consecutive rising edges;
* ``period_s``: the median cycle length, reported only when there are at least ``MIN_CYCLES``
  complete cycles and their lengths are regular (coefficient of variation < ``MAX_CV``);
* ``duty_cycle_pct``: busy time ÷ time over the complete cycles (None without a period);
* partly busy samples (above ``GAP_UTIL_PCT``, below the busy threshold) holding most of the idle
  time at a steady level (coefficient of variation < ``MAX_CV``) mean idle time shorter than a
  sample;
* the series' **resolution** is the coarser of its sample interval and how long a value holds
  (NVML averages utilization over its own period, 1/6 s to 1 s: at 100 ms sampling each value
  often repeats); a **gap** is a run of samples at or below ``GAP_UTIL_PCT`` (nothing running),
  **long** from ``LONG_GAP_S``; the **timescale** of the idle time says what can be said of it:
  ``step`` (short idle, seen at a resolution of at most ``STEP_RESOLUTION_S``: per-step causes
  can be named), ``seconds`` / ``minutes`` (most idle time is in long gaps: between jobs,
  evaluation, checkpointing; no per-step cause), ``finer`` (most idle time is inside partly busy
  samples: shorter than the series can show), ``coarse`` (sampled too coarsely to see steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_CYCLES = 3
MAX_CV = 0.35
STEADY_IDLE_PCT = 10.0  # below: "steadily busy"
MOSTLY_IDLE_PCT = 90.0  # above: "mostly idle"
GAP_UTIL_PCT = 5.0  # at or below: nothing running (a gap), rather than a partly busy sample
LONG_GAP_S = 2.0  # a gap this long (s) is not a per-step stall: training steps stall for less
MINUTES_S = 60.0  # a gap this long (s) is named in minutes
STEP_RESOLUTION_S = 0.25  # a series coarser than this (s) cannot show step-scale idle


@dataclass(frozen=True)
class LiveDiagnosis:
    window_s: float
    idle_share_pct: float | None  # None: no sample in the window
    period_s: float | None
    duty_cycle_pct: float | None
    n_cycles: int  # complete cycles (rising edge to rising edge) in the window
    summary: str
    timescale: str = "step"  # step, seconds, minutes, finer or coarse (module docstring)
    resolution_s: float | None = None  # the coarser of the sample interval and a value's hold
    long_gaps_s: tuple[float, ...] = ()  # the long gaps in the window, s, in time order

    @property
    def per_step(self) -> bool:
        """Whether advice about per-step causes may rest on this series: its idle time is at
        the scale of steps and the series is fine enough to see it."""
        return self.timescale == "step"


def _secs(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


def sawtooth_diagnosis(
    t_ns: np.ndarray,
    util_pct: np.ndarray,
    *,
    busy_threshold_pct: float = 50.0,
    label: str = "The GPU",
) -> LiveDiagnosis:
    """Idle share, and period and duty cycle of a busy/idle sawtooth, of one utilization series."""
    t = np.asarray(t_ns, dtype="int64")
    u = np.asarray(util_pct, dtype="float64")
    ok = ~np.isnan(u)
    t, u = t[ok], u[ok]
    order = np.argsort(t, kind="stable")
    t, u = t[order], u[order]
    if len(t) == 0:
        return LiveDiagnosis(0.0, None, None, None, 0, f"{label}: no samples in the window yet.")
    gaps = np.diff(t).astype("float64")
    step = float(np.median(gaps)) if len(gaps) else 0.0
    dur = np.append(gaps, step)  # ns each sample holds
    total = float(dur.sum())
    window_s = total / 1e9
    busy = u >= busy_threshold_pct
    idle_frac = 1.0 - np.clip(u, 0.0, 100.0) / 100.0  # of each sample's period, no kernel ran
    idle_ns = float((dur * idle_frac).sum())
    idle_pct = 100.0 * idle_ns / total if total > 0 else 100.0 * float(idle_frac[0])
    mean_util = 100.0 - idle_pct

    rising = np.flatnonzero(busy[1:] & ~busy[:-1]) + 1
    n_cycles = max(0, len(rising) - 1)
    period_s = duty_pct = None
    if n_cycles >= MIN_CYCLES:
        lengths = np.diff(t[rising]).astype("float64")
        mean = float(lengths.mean())
        if mean > 0 and float(lengths.std()) / mean < MAX_CV:
            period_s = float(np.median(lengths)) / 1e9
            span = slice(rising[0], rising[-1])
            busy_ns = float(dur[span][busy[span]].sum())
            duty_pct = 100.0 * busy_ns / float(t[rising[-1]] - t[rising[0]])

    where = f"of the last {_secs(window_s)}"
    resolution = _resolution_s(t, u, step)
    gaps = _gaps_s(dur, u <= GAP_UTIL_PCT)
    long_gaps = tuple(g for g in gaps if g >= LONG_GAP_S)
    timescale = "step"

    def diagnosis(summary: str) -> LiveDiagnosis:
        """The diagnosis with this summary (and the timescale as set when it is called)."""
        return LiveDiagnosis(
            window_s,
            idle_pct,
            period_s,
            duty_pct,
            n_cycles,
            summary,
            timescale,
            resolution,
            long_gaps,
        )

    # the idle time in three kinds: in long gaps (nothing running for seconds), inside the
    # samples in which something ran (shorter than a sample: the series cannot place it), and in
    # short gaps (idle at the scale of steps); per-step advice only where the last is the largest
    ran = u > GAP_UTIL_PCT
    long_idle_ns = sum(long_gaps) * 1e9
    inside_idle_ns = float((dur * idle_frac)[ran].sum())
    step_idle_ns = max(0.0, idle_ns - long_idle_ns - inside_idle_ns)
    if idle_pct < STEADY_IDLE_PCT:
        pass  # steadily busy, whatever the kind of its little idle time
    elif long_idle_ns > 0 and long_idle_ns >= max(inside_idle_ns, step_idle_ns):
        timescale = "minutes" if max(long_gaps) >= MINUTES_S else "seconds"
    elif resolution > STEP_RESOLUTION_S:
        timescale = "coarse"
    else:
        vals = u[ran & (u < 100.0)]
        steady = len(vals) > 1 and float(vals.std()) < MAX_CV * float(vals.mean())
        if inside_idle_ns >= max(long_idle_ns, step_idle_ns) and period_s is None and steady:
            timescale = "finer"
            summary = (
                f"{label} is partly busy: {mean_util:.0f}% utilization on average, so idle "
                f"{idle_pct:.0f}% {where}. A new value comes every {_secs(resolution)}, so the "
                "idle time inside each (in steps or between them) is shorter than utilization "
                "can show."
            )
            return diagnosis(summary)
    if timescale in ("seconds", "minutes") and period_s is None and idle_pct >= STEADY_IDLE_PCT:
        n = len(long_gaps)
        gap_span = (
            _secs(long_gaps[0]) if n == 1 else f"{_secs(min(long_gaps))} to {_secs(max(long_gaps))}"
        )
        how = (
            f"mostly idle ({idle_pct:.0f}% {where}, utilization {mean_util:.0f}% on average)"
            if idle_pct > MOSTLY_IDLE_PCT
            else (f"idle {idle_pct:.0f}% {where} (utilization {mean_util:.0f}% on average)")
        )
        summary = (
            f"{label} is {how}, mostly in {n} gap{'s' if n != 1 else ''} "
            f"of {gap_span} with nothing running: gaps of {timescale} come from between jobs, "
            "evaluation, checkpointing or start-up, not from a per-step cause."
        )
        return diagnosis(summary)
    if period_s is not None and duty_pct is not None:
        on = period_s * duty_pct / 100
        summary = (
            f"{label} is idle {idle_pct:.0f}% {where}, in a regular sawtooth: busy about "
            f"{_secs(on)} then idle {_secs(period_s - on)}, every {_secs(period_s)} "
            f"({n_cycles} cycles) — the signature of a data-loading or host stall between "
            "bursts of work."
        )
    elif idle_pct < STEADY_IDLE_PCT:
        summary = f"{label} is steadily busy: idle {idle_pct:.0f}% {where}."
    elif idle_pct > MOSTLY_IDLE_PCT:
        summary = (
            f"{label} is mostly idle: idle {idle_pct:.0f}% {where} (utilization "
            f"{mean_util:.0f}% on average)."
        )
    else:
        summary = (
            f"{label} is idle {idle_pct:.0f}% {where}, in irregular bursts (no regular period)."
        )
    if timescale == "coarse" and period_s is None and idle_pct >= STEADY_IDLE_PCT:
        summary += (
            f" A value every {_secs(resolution)} cannot show idle time at the scale of steps."
        )
    return diagnosis(summary)


def _resolution_s(t: np.ndarray, u: np.ndarray, step_ns: float) -> float:
    """The series' resolution (s): the coarser of the median sample interval and how long a
    value holds. NVML repeats a value until its own averaging period ends, so at 100 ms sampling
    its values may come every 200 ms; that shows in the values between idle and full (a 0 % or a
    100 % repeats because the GPU stayed so): the median run of equal such values, at least
    three runs, else the sample interval."""
    mid = (u > GAP_UTIL_PCT) & (u < 95.0)
    starts = np.flatnonzero(np.r_[True, (np.diff(u) != 0) | ~mid[1:] | ~mid[:-1]])
    runs = np.diff(np.r_[starts, len(u)])
    runs = runs[mid[starts]]
    hold = float(np.median(runs)) * step_ns if len(runs) >= 3 else step_ns
    return max(step_ns, hold) / 1e9


def _gaps_s(dur: np.ndarray, quiet: np.ndarray) -> list[float]:
    """The lengths (s) of the runs of consecutive ``quiet`` samples, each sample holding ``dur``
    ns, in time order."""
    out: list[float] = []
    run = 0.0
    for d, q in zip(dur, quiet, strict=True):
        if q:
            run += float(d)
        elif run:
            out.append(run / 1e9)
            run = 0.0
    if run:
        out.append(run / 1e9)
    return out
