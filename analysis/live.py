"""Moving-window diagnosis of one GPU's utilization series (the Live page).

Pure numpy: no Streamlit, no plotting. Definitions (docs/metrics.md, "Live diagnosis"):

* each sample holds until the next one; the last one holds for the median sample interval, so a
  window of N samples at 100 ms covers N × 100 ms;
* a sample is **busy** when ``util >= busy_threshold_pct`` (default 50 %), else **idle**;
* ``idle_share_pct``: time-weighted share of the window spent idle;
* a **rising edge** is an idle sample followed by a busy one (at the busy sample's time); a
  **cycle** is the span between two consecutive rising edges;
* ``period_s``: the median cycle length, reported only when there are at least ``MIN_CYCLES``
  complete cycles and their lengths are regular (coefficient of variation < ``MAX_CV``);
* ``duty_cycle_pct``: busy time ÷ time over the complete cycles (None without a period).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_CYCLES = 3
MAX_CV = 0.35
STEADY_IDLE_PCT = 10.0  # below: "steadily busy"
MOSTLY_IDLE_PCT = 90.0  # above: "mostly idle"


@dataclass(frozen=True)
class LiveDiagnosis:
    window_s: float
    idle_share_pct: float | None  # None: no sample in the window
    period_s: float | None
    duty_cycle_pct: float | None
    n_cycles: int  # complete cycles (rising edge to rising edge) in the window
    summary: str


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
    idle_ns = float(dur[~busy].sum())
    idle_pct = 100.0 * idle_ns / total if total > 0 else (0.0 if busy[0] else 100.0)

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
            f"{label} is mostly idle: below {busy_threshold_pct:.0f}% utilization for "
            f"{idle_pct:.0f}% {where}."
        )
    else:
        summary = (
            f"{label} is idle {idle_pct:.0f}% {where}, in irregular bursts (no regular period)."
        )
    return LiveDiagnosis(window_s, idle_pct, period_s, duty_pct, n_cycles, summary)
