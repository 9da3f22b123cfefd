"""The Live page's moving-window diagnosis: idle share, sawtooth period and duty cycle."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gpuscope.analysis.live import sawtooth_diagnosis
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
DT = 100_000_000  # 100 ms, in ns


def square(
    period_s: float, duty: float, n: int, *, phase_s: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(n, dtype="int64") * DT
    pos = np.mod(t / 1e9 - phase_s, period_s)
    return t, np.where(pos < duty * period_s - 1e-9, 100.0, 0.0)


def test_square_wave_by_hand() -> None:
    # 20 samples busy-busy-...: 12 busy (1.2 s), 8 idle (0.8 s), period 2 s, 300 samples = 30 s.
    t = np.arange(300, dtype="int64") * DT
    u = np.array([100.0 if i % 20 < 12 else 0.0 for i in range(300)])
    d = sawtooth_diagnosis(t, u, label="GPU 0")
    assert d.window_s == pytest.approx(30.0)
    assert d.idle_share_pct == pytest.approx(40.0)  # 8 of every 20 samples
    assert d.period_s == pytest.approx(2.0)
    assert d.duty_cycle_pct == pytest.approx(60.0)
    assert d.n_cycles == 13  # rising edges at 2, 4, ..., 28 s (not at 0: no idle before): 14
    assert "GPU 0 is idle 40% of the last 30 s" in d.summary
    assert "busy about 1.2 s then idle 0.8 s, every 2.0 s" in d.summary
    assert "data-loading or host stall" in d.summary


def test_short_bursts_every_five_seconds() -> None:
    # 0.5 s at 95 % every 5 s, 3 % between, over 60 s: duty 10%; idle (no kernel running) is
    # 0.1 × 5 % + 0.9 × 97 % = 87.8 % of the time, 100 − the mean utilization the chart shows
    t = np.arange(600, dtype="int64") * DT
    u = np.array([95.0 if i % 50 < 5 else 3.0 for i in range(600)])
    d = sawtooth_diagnosis(t, u)
    assert d.idle_share_pct == pytest.approx(87.8)
    assert d.idle_share_pct == pytest.approx(100.0 - u.mean())
    assert d.period_s == pytest.approx(5.0) and d.duty_cycle_pct == pytest.approx(10.0)
    assert d.n_cycles == 10  # rising edges at 5, 10, ..., 55 s


def test_constant_busy_and_constant_idle() -> None:
    t = np.arange(100, dtype="int64") * DT
    busy = sawtooth_diagnosis(t, np.full(100, 99.0))
    assert busy.idle_share_pct == pytest.approx(1.0)  # 99 % utilization: 1 % of the time idle
    assert busy.period_s is None and busy.duty_cycle_pct is None
    assert "steadily busy" in busy.summary
    idle = sawtooth_diagnosis(t, np.zeros(100))
    assert idle.idle_share_pct == 100.0 and idle.period_s is None and idle.n_cycles == 0
    assert "mostly idle" in idle.summary


def test_irregular_noise_has_no_period() -> None:
    rng = np.random.default_rng(7)
    t = np.arange(600, dtype="int64") * DT
    d = sawtooth_diagnosis(t, rng.uniform(0, 100, 600))
    assert d.period_s is None and d.duty_cycle_pct is None
    assert d.n_cycles > 3  # many edges, but irregular
    assert 35 < d.idle_share_pct < 65
    assert "irregular" in d.summary


def test_too_few_cycles_and_empty_and_nan() -> None:
    t = np.arange(60, dtype="int64") * DT
    u = np.array([100.0 if i % 20 < 10 else 0.0 for i in range(60)])  # 2 cycles only
    assert sawtooth_diagnosis(t, u).period_s is None
    empty = sawtooth_diagnosis(np.array([], dtype="int64"), np.array([]))
    assert empty.idle_share_pct is None and "no samples" in empty.summary
    gaps = sawtooth_diagnosis(t, np.where(t % (2 * DT) == 0, np.nan, 100.0))
    assert gaps.idle_share_pct == 0.0


@settings(max_examples=150, deadline=None)
@given(
    period_s=st.floats(0.5, 6.0),
    duty=st.floats(0.0, 1.0),
    phase_s=st.floats(0.0, 6.0),
)
def test_random_square_waves(period_s: float, duty: float, phase_s: float) -> None:
    # Busy and idle both last at least two samples, so each phase is seen every cycle.
    busy_s = min(max(duty * period_s, 0.2), period_s - 0.2)
    duty = busy_s / period_s
    n = int(np.ceil(6 * period_s / 0.1)) + 1  # six periods: at least four complete cycles
    t, u = square(period_s, duty, n, phase_s=phase_s)
    d = sawtooth_diagnosis(t, u)
    assert d.period_s is not None, d
    assert abs(d.period_s - period_s) <= 0.1 + 1e-9
    assert d.duty_cycle_pct is not None
    assert abs(d.duty_cycle_pct / 100 - duty) <= 0.1 / period_s + 1e-9


def test_real_h200_recording() -> None:
    path = REPO / "sample_traces" / "nvml" / "h200_live.nvml.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    t = np.array([s["t_ns"] for s in lines], dtype="int64")
    u = np.array(
        [next(g["gpu_util_pct"] for g in s["gpus"] if g["gpu"] == 0) for s in lines], dtype=float
    )
    d = sawtooth_diagnosis(t, u, label="GPU 0")
    assert 35 < d.window_s < 45  # ~408 samples at 100 ms
    assert 80 < d.idle_share_pct < 95  # one short and one 4 s burst of work in ~41 s
    assert d.period_s is None and d.n_cycles <= 2
    assert d.summary.startswith("GPU 0 is idle")


def test_idle_share_is_what_the_chart_shows() -> None:
    """Issue 46: a minute at 40–50 % read as "mostly idle (99 %)". The idle share is 100 − the
    time-weighted mean utilization (NVML's utilization is the share of each period in which a
    kernel ran), whatever the busy threshold: 6 s at 45 % in 28 s is 90.4 % idle, not 99 %."""
    t = np.arange(280, dtype="int64") * DT
    u = np.where((t >= 10 * 10**9) & (t < 16 * 10**9), 45.0, 0.0)
    d = sawtooth_diagnosis(t, u, label="GPU 0")
    assert d.idle_share_pct == pytest.approx(100.0 * (28 - 6 * 0.45) / 28)
    assert "90%" in d.summary and "99%" not in d.summary
    assert "utilization 10% on average" in d.summary or "10% utilization" in d.summary


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 100), min_size=2, max_size=80),
    st.lists(st.integers(1, 5), min_size=2, max_size=80),
)
def test_idle_share_against_brute_force(utils: list[float], holds: list[int]) -> None:
    """Against a brute force: expand each sample into 10 ms slices for as long as it holds (the
    last for the median interval), each slice idle for (100 − util) % of it."""
    n = min(len(utils), len(holds))
    u = np.array(utils[:n])
    gaps_ms = [h * 100 for h in holds[: n - 1]]
    t = np.concatenate([[0], np.cumsum(gaps_ms)]).astype("int64") * 10**6
    last_ms = int(np.median(gaps_ms)) if gaps_ms else 100
    slices: list[float] = []
    for i in range(n):
        held = gaps_ms[i] if i < n - 1 else last_ms
        slices += [100.0 - u[i]] * (held // 10)
    d = sawtooth_diagnosis(t, u)
    assert d.idle_share_pct == pytest.approx(sum(slices) / len(slices), abs=1e-9)
