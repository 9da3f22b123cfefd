"""The estimate of dropping activation checkpointing, whose planted trace holds host work the
fixed process does not run (docs/metrics.md, "Causes found by phase and pattern", Recompute):
the calibrated host scale holds the checkpoint machinery, so the fix is replayed at the prior
scales, and the planted step follows its own process's host at the range's top. A hand-built
step, answers computed by hand."""

from __future__ import annotations

import pytest
from gpuscope.analysis import fixes as FX
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of

US = 1_000
HV = GN.HOST_VARIATION


def _checkpointed_step():
    """Step 0..100 µs of host work (µs): ``aten::mm`` 0..10 launches (call 2..4) a 40 µs kernel
    on the GPU at 6..46; a backward function 10..100 re-runs ``aten::linear`` 20..70 (the
    recompute: with the function's own 10..20 and 70..80, 70 µs) and runs its own ``aten::add``
    80..100 (20 µs, stays). Replayed at host scale s the window is max(100 s, 44 + 2 s)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 100 * US, 1),
        H("aten::mm", "cpu_op", 0, 10 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 2 * US, 4 * US, 1, 1),
        H(
            "autograd::engine::evaluate_function: CheckpointFunctionBackward",
            "cpu_op",
            10 * US,
            100 * US,
            1,
        ),
        H("aten::linear", "cpu_op", 20 * US, 70 * US, 1),
        H("aten::add", "cpu_op", 80 * US, 100 * US, 1),
    ]
    gpu = [G("sm90_gemm", "kernel", 6 * US, 46 * US, 7, 1)]
    return critical_path_of(host, gpu, 1, [(0, 100 * US)], [1])


def test_dropping_checkpointing_replays_the_fixed_step_at_the_prior_host_scales() -> None:
    """Untraced step 60 µs: the calibrated host scale is 0.6 (100 s = 60), above the prior
    0.3-0.5: the planted process's host time holds the checkpoint machinery the fixed one does
    not run. The fix (memory 10 %: drop, the recompute × 1 in every variant) leaves 30 µs of
    host (mm 10, add 20) and the kernel: the fixed window is max(30 s, 44 + 2 s).

    - mid, at 0.4 (the unexplained 60 − 44.8 µs goes with the fix): 44.8 → 1 − 44.8/60 = 25.33 %
    - low: at 0.5 × 1.23 = 0.615: max(18.45, 45.23) → 1 − 45.23/60 = 24.62 %
    - high: the planted step on a host 1.23× slower than the traced one (0.6 × 1.23 = 0.738:
      73.8 µs) against the fix at 0.3 (max(9, 44.6) = 44.6): 1 − 44.6/73.8 = 39.57 %.

    Before, the fix was replayed at the calibrated 0.6 (mid 1 − 45.2/60 = 24.67 %) and at 0.3
    with the unexplained 15.4 µs kept: low −0.23 %, high 1 − 44.49/60 = 25.85 %."""
    cp = _checkpointed_step()
    ctx = GN.Context(n_steps=1, step_ms=0.1, untraced_step_ms=0.06)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    assert ctx.host_scale_cal == pytest.approx(0.6, abs=1e-3)
    u = FX.BY_ID["activation_checkpointing"]
    rec = FX.Recommendation(u.id, "t", "w", {"memory_used_pct": 10.0}, "c", 70.0)
    est = u.estimate(rec, cp, ctx)
    assert est.gain_pct == pytest.approx(100 * (1 - 44.8 / 60), abs=0.05)
    assert est.low_pct == pytest.approx(100 * (1 - (44 + 2 * 0.5 * HV) / 60), abs=0.05)
    assert est.high_pct == pytest.approx(100 * (1 - 44.6 / (100 * 0.6 * HV)), abs=0.1)
