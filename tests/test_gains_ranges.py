"""Estimate ranges: hand-built steps with answers computed by hand (docs/metrics.md, "Gains from
the path": the prior host scales beside the calibrated one; a compiled tensor-parallel step loses
the eager ops' host work too; dropping checkpointing removes the whole recompute)."""

from __future__ import annotations

import pytest
from gpuscope.analysis import fixes as FX
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of
from gpuscope.analysis.fixes.band import BAND

US = 1_000


def _estimate(fix: str, cp, ctx) -> GN.Estimate:
    u = FX.BY_ID[fix]
    assert u.retime is not None
    return GN.replay_estimate(
        u.retime(cp.graph, ctx), cp, ctx, staging=u.staging, host_ceiling=u.host_ceiling
    )


def test_the_prior_host_scales_stay_beside_the_calibrated_one() -> None:
    """A step of host work only (aten::foo 0..100 µs), untraced step 50 µs: the calibrated host
    scale is 0.5 (100 × s = 50), the traced process's. The fix is timed in other processes, so
    the prior scales stay in the range (docs/metrics.md, "Host speed"). A compiled step's overhead
    (host × 0.5 / 0.2 / 0.05): mid at 0.5: 1 − 0.2 = 80 %. At 0.3, 20 of the 50 µs are unexplained: kept, the
    weakest fix on a host 1.23× slower gives 1 − (0.5 × 1.23 × 30 + 20) / 50 = 23.1 %; gone, the
    strongest on a host 1.23× faster 1 − 0.05 / 1.23 × 30 / 50 = 97.56 %. At 0.5 alone the range
    would be 1 − 0.5 × 1.23 = 38.5 .. 1 − 0.05 / 1.23 = 95.93 %: narrower, and it lost 4 of the
    validation set's 11 held-out ranges."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 100 * US, 1),
        H("aten::foo", "cpu_op", 0, 100 * US, 1),
    ]
    cp = critical_path_of(host, [], 1, [(0, 100 * US)], [1])
    ctx = GN.Context(n_steps=1, step_ms=0.1, untraced_step_ms=0.05)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    assert ctx.host_scale_cal == pytest.approx(0.5, abs=1e-3)
    est = _estimate("compiled_overhead", cp, ctx)
    assert est.calibrated
    assert est.gain_pct == pytest.approx(80.0, abs=0.1)
    assert est.low_pct == pytest.approx(100 * (1 - (0.5 * 1.23 * 30 + 20) / 50), abs=0.1)
    assert est.high_pct == pytest.approx(100 * (1 - 0.05 / 1.23 * 30 / 50), abs=0.1)


def test_an_uncalibrated_gpu_bound_step_keeps_the_prior_scales() -> None:
    """A GPU-bound step: aten::mm 0..10 µs launches (call 4..6) a 90 µs kernel 10..100; untraced
    step 100 µs. The host does not bind at 0.3..0.5 (the window stays 100 µs): no calibrated
    scale, and the range is replayed at the prior scales as before. CUDA graphs shorten only
    host time, which the kernel hides: every variant keeps the 100 µs step (gain ~0)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 100 * US, 1),
        H("aten::mm", "cpu_op", 0, 10 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 4 * US, 6 * US, 1, 1),
    ]
    gpu = [G("sm90_gemm", "kernel", 10 * US, 100 * US, 7, 1)]
    cp = critical_path_of(host, gpu, 1, [(0, 100 * US)], [1])
    ctx = GN.Context(n_steps=1, step_ms=0.1, untraced_step_ms=0.1)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    assert ctx.host_scale_cal is None
    est = _estimate("cuda_graphs", cp, ctx)
    assert not est.calibrated
    # the launch latency (call start 4 -> kernel 10) moves with the host: at most 6 × 0.5 µs
    assert -1.0 <= est.low_pct <= est.gain_pct <= est.high_pct <= 5.0


def _gpu_bound_with_host_after_the_launch():
    """aten::mm 0..10 µs launches (call 0..2) a 90 µs kernel 6..96; then aten::foo 10..210 µs of
    host work; the step is 0..210 µs. Replayed at host scale s its window is max(210 s, 96) µs:
    96 at 0.02 and 0.3 (the kernel's end), 105 at 0.5: the host binds between 0.3 and 0.5."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 210 * US, 1),
        H("aten::mm", "cpu_op", 0, 10 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 0, 2 * US, 1, 1),
        H("aten::foo", "cpu_op", 10 * US, 210 * US, 1),
    ]
    gpu = [G("sm90_gemm", "kernel", 6 * US, 96 * US, 7, 1)]
    return critical_path_of(host, gpu, 1, [(0, 210 * US)], [1])


def test_no_host_scale_makes_the_planted_step_longer_than_it_was_timed() -> None:
    """Untraced step 96.5 µs: within 1 % (IDENTIFIABLE) of the kernel's 96, so no host speed is
    fitted; the slowest scale whose replay still fits in 96.5 × 1.01 = 97.465 µs is 97.465 / 210 =
    0.4641 (host_scale_ceiling). The prior's 0.55 and 0.72 are cut to it. A compiled step's overhead
    (host × 0.5 / 0.2 / 0.05), mid at 0.4641: the planted step replays 97.465 µs, the fixed one
    max(0.2 × 97.465, 96) = 96: 1 − 96 / 97.465 = 1.50 %. At the prior's 0.55 the planted step
    would replay 115.5 µs, 20 % longer than timed, and the same fix 1 − 96 / 115.5 = 16.9 %
    (v156: torch.compile said 9.5 % that way, timed at −11.5 %). Only for the fixes that shorten
    host work (``FixUnit.host_ceiling``)."""
    cp = _gpu_bound_with_host_after_the_launch()
    ctx = GN.Context(n_steps=1, step_ms=0.21, untraced_step_ms=0.0965)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    assert ctx.host_scale_cal is None
    ctx.host_scale_max = GN.host_scale_ceiling(cp, ctx)
    assert ctx.host_scale_max == pytest.approx(97.465 / 210, abs=1e-3)
    est = _estimate("compiled_overhead", cp, ctx)
    assert not est.calibrated
    # the bisection's last interval (±0.0004, 0.1 µs at 210 µs) holds the ceiling: the planted
    # step replays 210 × it
    assert est.gain_pct == pytest.approx(100 * (1 - 96 / (210 * ctx.host_scale_max)), abs=0.01)
    assert est.gain_pct == pytest.approx(100 * (1 - 96 / 97.465), abs=0.1)
    assert est.high_pct <= est.gain_pct + 0.05  # nothing left to gain at a slower host
    uncapped = GN.Context(n_steps=1, step_ms=0.21, untraced_step_ms=0.0965)
    assert _estimate("compiled_overhead", cp, uncapped).gain_pct == pytest.approx(
        100 * (1 - 96 / 115.5), abs=0.05
    )
    # a fix that shortens the GPU's work keeps the prior's scales (host_ceiling off): after it the
    # host may bind, and the ceiling's host was too fast there (v58); the same re-timing replayed
    # so gives the uncapped figure on the capped context
    variants = FX.BY_ID["compiled_overhead"].retime(cp.graph, ctx)  # type: ignore[misc]
    fresh = GN.Context(n_steps=1, step_ms=0.21, untraced_step_ms=0.0965)
    fresh.host_scale_max = ctx.host_scale_max
    assert GN.replay_estimate(variants, cp, fresh).gain_pct == pytest.approx(
        100 * (1 - 96 / 115.5), abs=0.05
    )
    ceiling = {u.id for u in FX.UNITS if u.host_ceiling}
    assert ceiling == {"kernel_fusion", "cuda_graphs", "compiled_overhead", "batch_size"}


def test_no_ceiling_without_an_untraced_step_or_with_a_fitted_scale() -> None:
    """The ceiling is only for an unfitted host against a known untraced step: none without the
    untraced step; none where the untraced step fits a scale (105 µs: 0.5, the fitted one)."""
    cp = _gpu_bound_with_host_after_the_launch()
    assert GN.host_scale_ceiling(cp, GN.Context(n_steps=1, step_ms=0.21)) is None
    ctx = GN.Context(n_steps=1, step_ms=0.21, untraced_step_ms=0.105)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    assert ctx.host_scale_cal == pytest.approx(0.5, abs=1e-3)
    assert GN.host_scale_ceiling(cp, ctx) is None


def test_compiling_a_tensor_parallel_step_also_removes_the_eager_ops_host_work() -> None:
    """DTensor's fix is ``torch.compile(model)``: its mid re-timing is the dispatch × 0.2 and
    the rest of the host as compiling re-times it (CPU ops × 0.3, launch calls and short kernels
    × 0.5). Step 0..200 µs on one thread: aten::mm 0..200 holding a PythonSubclass dispatch
    20..180 that holds aten::mm 100..140, which launches (call 110..120) a 5 µs kernel 120..125.
    Host segments: aten::mm 0..20 + 180..200 (40 µs), dispatch 20..100 + 140..180 (120 µs),
    aten::mm 100..110 + 120..140 (30 µs), the call (10 µs). Mid: 40 × 0.3 + 120 × 0.2 + 30 × 0.3
    + 10 × 0.5 = 50 µs of host, and the kernel (2.5 µs) ends before the host does: 200 -> 50 µs
    as recorded. The estimate's point is at the prior's host scale 0.55 (no untraced step, so no
    host speed fitted): the old step is 200 × 0.55 = 110 µs; after the fix the call starts at
    (6 + 16 + 3) × 0.55 = 13.75 µs, its kernel 10 µs later (the launch latency is not host time)
    ends at 26.25, before the host's 50 × 0.55 = 27.5 µs: 1 − 27.5 / 110 = 75.0 %. Before, only
    the dispatch moved (mid 200 − 120 × 0.8 = 104 µs as recorded)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 200 * US, 1),
        H("aten::mm", "cpu_op", 0, 200 * US, 1),
        H("PythonSubclass", "cpu_op", 20 * US, 180 * US, 1),
        H("aten::mm", "cpu_op", 100 * US, 140 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 110 * US, 120 * US, 1, 1),
    ]
    gpu = [G("elementwise_kernel", "kernel", 120 * US, 125 * US, 7, 1)]
    cp = critical_path_of(host, gpu, 1, [(0, 200 * US)], [1])
    ctx = GN.Context(n_steps=1, step_ms=0.2)
    dur, keep = FX.BY_ID["dtensor_dispatch"].retime(cp.graph, ctx)["mid"]  # type: ignore[misc]
    assert GN.makespan(cp.graph, 0, dur, keep) == pytest.approx(50 * US)
    est = _estimate("dtensor_dispatch", cp, ctx)
    assert est.gain_pct == pytest.approx(75.0)


def _recompute_step():
    """Step 0..100 µs of host work: a backward function (autograd::engine::evaluate_function
    0..100) re-runs aten::linear 10..60 (the recompute) and runs its own aten::mm 70..100. The
    recompute's host nodes: the function's own 0..10 and 60..70 and the linear (70 µs); the
    backward's own mm (30 µs) stays."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 100 * US, 1),
        H(
            "autograd::engine::evaluate_function: CheckpointFunctionBackward",
            "cpu_op",
            0,
            100 * US,
            1,
        ),
        H("aten::linear", "cpu_op", 10 * US, 60 * US, 1),
        H("aten::mm", "cpu_op", 70 * US, 100 * US, 1),
    ]
    return critical_path_of(host, [], 1, [(0, 100 * US)], [1])


@pytest.mark.parametrize(
    ("memory_used_pct", "gain", "low", "high"),
    [
        # "Drop checkpointing" (memory peak 10 % < 50 %): the whole recompute goes in every
        # variant: 1 − 30/100 = 70 %; the range is the host's variation alone: 1 − 0.3 × 1.23 =
        # 63.1 % .. 1 − 0.3 / 1.23 = 75.6 %
        (10.0, 70.0, 100 * (1 - 0.3 * 1.23), 100 * (1 - 0.3 / 1.23)),
        # "Checkpoint fewer" (peak 60 %): 0.5 / 0.8 / 1 of it: mid 1 − (30 + 14)/100 = 56 %, low
        # 1 − (30 + 35) × 1.23 / 100 = 20.05 %, high as above; the low end then raised to the
        # recorded pairs' lowest (analysis/fixes/band.py): 0.466 × 56 = 26.10 % (see below)
        (60.0, 56.0, 100 * (1 - 0.65 * 1.23), 100 * (1 - 0.3 / 1.23)),
        # the peak unknown: "checkpoint fewer, check the memory first": as at 60 %
        (None, 56.0, 100 * (1 - 0.65 * 1.23), 100 * (1 - 0.3 / 1.23)),
    ],
)
def test_dropping_checkpointing_is_estimated_as_the_whole_recompute(
    memory_used_pct: float | None, gain: float, low: float, high: float
) -> None:
    cp = _recompute_step()
    ctx = GN.Context(n_steps=1, step_ms=0.1)
    u = FX.BY_ID["activation_checkpointing"]
    rec = FX.Recommendation(u.id, "t", "w", {"memory_used_pct": memory_used_pct}, "c", 70.0)
    est = u.estimate(rec, cp, ctx)
    assert est.gain_pct == pytest.approx(gain)
    lo, _ = BAND["activation_checkpointing"]
    assert lo == 0.466  # the figure the comments above use
    assert est.low_pct == pytest.approx(max(low, lo * gain))
    assert est.high_pct == pytest.approx(high)
    assert est.banded == (lo * gain > low)
