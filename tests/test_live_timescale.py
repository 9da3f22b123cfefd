"""Live diagnosis knows its timescale (issue 23): advice about a per-step cause only from idle
time at the scale of steps seen finely enough; gaps of seconds or minutes are named as such.

The real 2×H200 recording (sample_traces/nvml/h200_live.nvml.jsonl: `before` then, after a gap of
~12.5 s with nothing running, `after`) is replayed as the sampler serves it (its own timestamps,
moved to now, at 1×) through the Live page's own pipeline (`live.parse` → `live.fold` →
`live.diagnose` → `advice.what_to_do`), window by window, as the page polls it every second."""

from __future__ import annotations

import numpy as np
import pytest
from gpuscope.analysis.live import LONG_GAP_S, LiveDiagnosis, sawtooth_diagnosis
from gpuscope.ingest.nvml import read_jsonl
from gpuscope.web import live
from gpuscope.web.advice import what_to_do

from tests.test_analysis_live import DT, REPO

RECORDING = REPO / "sample_traces" / "nvml" / "h200_live.nvml.jsonl"
NOW_NS = 1_900_000_000_000_000_000


def _replayed_polls() -> list[dict]:
    """The recording as the sampler's replay serves it at 1× (timestamps moved to now), cut into
    the answers of one poll per second."""
    series = read_jsonl(RECORDING)
    t0 = series.samples[0]["t_ns"]
    samples = [{"t_ns": NOW_NS + s["t_ns"] - t0, "gpus": s["gpus"]} for s in series.samples]
    polls, i = [], 0
    end = NOW_NS + 10**9
    while i < len(samples):
        batch = []
        while i < len(samples) and samples[i]["t_ns"] < end:
            batch.append(samples[i])
            i += 1
        polls.append(
            {"host": "vm", "interval_ms": 100, "samples": batch, "gpus": series.header["gpus"]}
        )
        end += 10**9
    return polls


@pytest.mark.parametrize("window_s", [10, 30, 60])
def test_replayed_h200_series_never_gets_per_step_advice_for_gaps_of_seconds(window_s: int) -> None:
    rows = None
    named_gap = per_step = 0
    for body in _replayed_polls():
        batch = live.parse(body)
        rows = live.fold(rows, batch.rows, keep_ns=900 * 10**9)
        d = live.diagnose(rows, window_s)[0]
        todo = what_to_do(d)
        if d.long_gaps_s and sum(d.long_gaps_s) >= 0.5 * d.window_s * (d.idle_share_pct or 0) / 100:
            # most of the idle time is in gaps of seconds: named so, and no per-step fix
            assert d.timescale == "seconds", d
            assert "gaps of seconds come from between jobs, evaluation, checkpointing" in d.summary
            assert todo.fix_id is None and "no per-step fix" in todo.advice
            named_gap += 1
        if todo.fix_id is not None:
            per_step += 1
            assert d.per_step and not d.long_gaps_s, d
    assert named_gap >= 5  # the gap between the two jobs is in many windows
    assert per_step == 0  # nothing in this recording shows a per-step cause at 100 ms
    # the window over the whole gap names its length
    whole = live.diagnose(rows, 60)[0]
    assert any(12.0 <= g <= 13.0 for g in whole.long_gaps_s), whole.long_gaps_s
    assert whole.resolution_s == pytest.approx(0.2, abs=0.01)  # NVML's values come every 200 ms


def test_the_running_job_at_partial_utilization_is_shorter_than_a_sample() -> None:
    """`before` at 40–49 % utilization, a new value every 200 ms: its idle time is inside each
    value, so no cause can be named from NVML: record a trace (no host-sync advice)."""
    series = read_jsonl(RECORDING)
    t = np.array([s["t_ns"] for s in series.samples], dtype="int64")
    u = np.array([s["gpus"][0]["gpu_util_pct"] for s in series.samples], dtype=float)
    t0 = t[0]
    m = (t >= t0 + 16_100_000_000) & (t < t0 + 21_400_000_000)  # `before` training
    d = sawtooth_diagnosis(t[m], u[m], label="GPU 0")
    assert d.timescale == "finer" and not d.per_step
    assert d.summary.startswith("GPU 0 is partly busy: 4")
    todo = what_to_do(d)
    assert todo.fix_id is None and "record a trace" in todo.advice


def test_gaps_by_hand() -> None:
    # 30 s at 100 ms: busy, then 12 s with nothing running, then busy again (two jobs)
    t = np.arange(300, dtype="int64") * DT
    u = np.array([95.0 if (i < 90 or i >= 210) else 0.0 for i in range(300)])
    d = sawtooth_diagnosis(t, u, label="GPU 0")
    assert d.long_gaps_s == (pytest.approx(12.0),)
    assert d.timescale == "seconds" and not d.per_step
    assert "1 gap of 12 s with nothing running" in d.summary
    # the same idle share in 0.3 s stalls every 0.75 s: steps, and per-step advice
    u2 = np.array([0.0 if i % 7 in (0, 1, 2) else 95.0 for i in range(300)])
    d2 = sawtooth_diagnosis(t, u2, label="GPU 0")
    assert d2.timescale == "step" and d2.per_step and not d2.long_gaps_s
    assert what_to_do(d2).fix_id == "dataloader_workers"  # a regular sawtooth
    # minutes: one gap of 90 s in a 120 s window
    t3 = np.arange(1200, dtype="int64") * DT
    u3 = np.array([0.0 if 100 <= i < 1000 else 95.0 for i in range(1200)])
    d3 = sawtooth_diagnosis(t3, u3)
    assert d3.timescale == "minutes" and "gaps of minutes" in d3.summary
    # sampled every second: too coarse to name a per-step cause for irregular idle
    t4 = np.arange(60, dtype="int64") * 10 * DT
    rng = np.random.default_rng(3)
    u4 = np.where(rng.random(60) < 0.4, 0.0, 95.0)
    u4[::2] = 95.0  # no idle stretch reaches LONG_GAP_S
    d4 = sawtooth_diagnosis(t4, u4)
    assert max(d4.long_gaps_s, default=0.0) < LONG_GAP_S or d4.timescale != "step"
    assert d4.timescale == "coarse" and "cannot show idle time at the scale of steps" in d4.summary
    assert what_to_do(d4).fix_id is None and "--interval-ms 100" in what_to_do(d4).advice


def test_older_diagnoses_keep_their_advice() -> None:
    irregular = LiveDiagnosis(30.0, 40.0, None, None, 1, "irregular")
    assert irregular.per_step and what_to_do(irregular).fix_id == "host_sync"


@pytest.mark.parametrize("window_s", [30, 60, 300])
def test_the_sentence_reads_the_samples_the_chart_draws(window_s: int) -> None:
    """Issue 46: "mostly idle (99 % of the last 28 s)" stood above a chart drawing 6 s at 40–50 %.
    The page draws ``live.shown(rows, window)`` and diagnoses the same rows; the sentence's idle
    share is 100 − the time-weighted mean of the plotted utilization, poll after poll."""
    rows = None
    for body in _replayed_polls():
        rows = live.fold(rows, live.parse(body).rows, keep_ns=900 * 10**9)
        view = live.shown(rows, window_s)
        for gpu, d in live.diagnose(rows, window_s).items():
            g = view[view["gpu"] == gpu].sort_values("t_ns")
            t = g["t_ns"].to_numpy(dtype="int64")
            u = g["gpu_util_pct"].to_numpy(dtype="float64")
            held = np.append(np.diff(t), np.median(np.diff(t)) if len(t) > 1 else 0).astype(float)
            plotted_idle = 100.0 - float(np.average(u, weights=held)) if held.sum() else 100 - u[0]
            assert d.idle_share_pct == pytest.approx(plotted_idle, abs=1e-6)
            assert f"{d.idle_share_pct:.0f}%" in d.summary, d.summary
            assert d.window_s == pytest.approx(held.sum() / 1e9)


def test_memory_card_bytes() -> None:
    assert live.fmt_bytes(None) == "—" and live.fmt_bytes(float("nan")) == "—"
    assert live.fmt_bytes(65536) == "64 KiB"
    assert live.fmt_bytes(552402944) == "527 MiB"  # a process starting: not "0.0 GiB"
    assert live.fmt_bytes(2985099264) == "2.78 GiB"
    assert live.fmt_bytes(0) == "0 B"
