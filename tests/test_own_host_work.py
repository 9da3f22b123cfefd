"""The pace-setter's host work of its own (analysis/own_host_work.py) and the estimate of taking it
off the step (fixes/load_imbalance.own_work_estimate), on hand-built inputs whose answers are
worked out in each docstring."""

from __future__ import annotations

import pytest
from gpuscope.analysis.fixes.load_imbalance import (
    PROFILER_EVENT_US,
    own_work_estimate,
    own_work_fix,
)
from gpuscope.analysis.gains import HOST_VARIATION
from gpuscope.analysis.own_host_work import (
    LOOP_GAP_NS,
    ExtraOps,
    events_inside,
    extra_names,
    outermost,
)


def test_extra_names_need_both_a_share_and_a_count():
    """mul_: 170 against 0 (extra); add_: 520 against 500 (20 more per step but only 4 %: not
    extra); norm: 6 against 1 (5 more, 6x: extra); copy_: 3 against 0 (3 more: under 4 per step,
    not extra); the others' median of [10, 30] for to: 20 against 40 mine (extra)."""
    mine = {
        "aten::mul_": 170.0,
        "aten::add_": 520.0,
        "aten::norm": 6.0,
        "aten::copy_": 3.0,
        "aten::to": 40.0,
    }
    others = [
        {"aten::add_": 500.0, "aten::norm": 1.0, "aten::to": 10.0},
        {"aten::add_": 500.0, "aten::norm": 1.0, "aten::to": 30.0},
    ]
    got = extra_names(mine, others)
    assert got == {"aten::mul_": (170.0, 0.0), "aten::norm": (6.0, 1.0), "aten::to": (40.0, 20.0)}
    assert extra_names(mine, []) == {}


def test_outermost_spans_and_the_loop_between_them():
    """Ops (ns): mul_ 0-10 holding add_ 2-5 (nested: not a span of its own), a 3 ns gap, mul_
    13-20, then conv 20-40 (not extra: no gap across it), mul_ 45-50, and mul_ again
    LOOP_GAP_NS + 1 after it (too far: no gap). Share of mul_ = (4 - 1) / 4 = 0.75, of add_ 1.0.
    Spans: (0,10), (13,20), (45,50), (50+gap+1, ...) at 0.75; gaps: (10,13) at min(0.75,0.75)."""
    names = {"aten::mul_": (4.0, 1.0), "aten::add_": (2.0, 0.0)}
    far = 50 + LOOP_GAP_NS + 1
    ops = [
        ("aten::mul_", 0, 10),
        ("aten::add_", 2, 5),
        ("aten::mul_", 13, 20),
        ("aten::conv2d", 20, 40),
        ("aten::mul_", 45, 50),
        ("aten::mul_", far, far + 5),
    ]
    spans, gaps = outermost(ops, names)
    assert spans == ((0, 10, 0.75), (13, 20, 0.75), (45, 50, 0.75), (far, far + 5, 0.75))
    assert gaps == ((10, 13, 0.75),)


def test_events_inside_weigh_each_by_its_span_share():
    """Spans (0,10) share 0.5 and (20,30) share 1.0; events starting at 0, 5, 10 (the end: out),
    25, 40: 0.5 + 0.5 + 1.0 = 2.0."""
    assert events_inside(((0, 10, 0.5), (20, 30, 1.0)), [0, 5, 10, 25, 40]) == 2.0


def _extra(n_steps: int = 2) -> ExtraOps:
    # per step: ops 3 ms (6 ms over 2 steps, share 1), loop 1 ms (2 ms over 2 steps), 500 events
    return ExtraOps(
        rank=0,
        names={"aten::mul_": (170.0, 0.0)},
        spans=((0, 6_000_000, 1.0),),
        gaps=((6_000_000, 8_000_000, 1.0),),
        main_tid=1,
        n_steps=n_steps,
        events_per_step=500.0,
    )


def test_own_work_estimate_by_hand():
    """Base 40 ms, 2 µs per event: the profiler's cost is 500 x 2 µs = 1 ms per step. Point: 3 +
    1 - 1 = 3 ms = 7.5 %; low: (3 - 1) / 1.23 ms = 4.07 %; high: (3 + 1) x 1.23 = 4.92 ms =
    12.3 %; step after: 37 ms."""
    e = own_work_estimate(_extra(), 40.0, 2.0)
    assert e.method == "host_ops" and e.calibrated
    assert e.gain_pct == pytest.approx(7.5)
    assert e.low_pct == pytest.approx(100 * 2.0 / HOST_VARIATION / 40.0)
    assert e.high_pct == pytest.approx(100 * 4.0 * HOST_VARIATION / 40.0)
    assert e.step_ms == pytest.approx(37.0)


def test_own_work_estimate_without_an_untraced_step():
    """No per-event cost: the point keeps the traced 4 ms (10 %), the low end deducts the assumed
    PROFILER_EVENT_US per event: (3 - 500 x 3 µs) / 1.23 = 1.22 ms."""
    e = own_work_estimate(_extra(), 40.0, None)
    assert not e.calibrated
    assert e.gain_pct == pytest.approx(10.0)
    assert e.low_pct == pytest.approx(
        100 * (3.0 - 500 * PROFILER_EVENT_US / 1e3) / HOST_VARIATION / 40.0
    )


def test_own_work_estimate_never_above_the_step():
    """Ops of 6 ms per step on a 5 ms base: every figure stops at 100 %."""
    e = own_work_estimate(
        ExtraOps(0, {"x": (10.0, 0.0)}, ((0, 12_000_000, 1.0),), (), 1, 2, 0.0), 5.0, 0.0
    )
    assert e.gain_pct == e.high_pct == 100.0 and e.step_ms == 0.0


def test_own_work_fix_names_the_ops():
    rec = own_work_fix(_extra(), 40.0, 2.0)
    assert rec.id == "load_imbalance"
    assert "170 ops per step the others do not run" in rec.title
    assert "aten::mul_ (170 more per step)" in rec.evidence["summary"]
    assert "2.00 µs for each of the 500 events" in rec.evidence["summary"]
    assert "_foreach_" in rec.fix


def test_own_work_estimate_stops_at_the_pace_setters_gpu_work():
    """Base 40 ms, GPU work 38 ms per step: at most 2 ms = 5 % can go. The point (7.5 %) and the
    top (12.3 %) are above it, the low end (4.07 %) under it: 5 % (4.07-5), clipped, still built
    on the ops. With 39 ms of GPU work the bound is 2.5 %, under even the low end: the bound's own
    estimate, 1.25 % (0-2.5). With 30 ms (bound 25 %) nothing changes."""
    e = own_work_estimate(_extra(), 40.0, 2.0, gpu_ms=38.0)
    assert e.method == "host_ops" and e.clipped and e.bound
    assert e.gain_pct == pytest.approx(5.0) and e.high_pct == pytest.approx(5.0)
    assert e.low_pct == pytest.approx(100 * 2.0 / HOST_VARIATION / 40.0)
    assert e.step_ms == pytest.approx(38.0)
    e = own_work_estimate(_extra(), 40.0, 2.0, gpu_ms=39.0)
    assert e.method == "host_ops" and e.clipped
    assert (e.gain_pct, e.low_pct, e.high_pct) == pytest.approx((1.25, 0.0, 2.5))
    assert own_work_estimate(_extra(), 40.0, 2.0, gpu_ms=30.0) == own_work_estimate(
        _extra(), 40.0, 2.0
    )


def test_own_work_fix_says_its_bound():
    rec = own_work_fix(_extra(), 40.0, 2.0, gpu_ms=38.0)
    assert rec.bound_pct == pytest.approx(5.0)
    assert "its GPU's own work is 38.0 ms per step" in rec.evidence["summary"]
    assert "at most 5.00 % can go" in rec.evidence["summary"]
    assert own_work_fix(_extra(), 40.0, 2.0).bound_pct is None
