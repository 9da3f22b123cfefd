"""The host speed is fitted only where the untraced step says it: hand-built trace, answers
computed by hand. Within 1 % of the GPU's own length (the window at the smallest host scale) the
untraced step is the GPU's, and no host scale is fitted (the priors are replayed instead)."""

from __future__ import annotations

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of

US = 1_000


def _cp():
    """Step 0..200 µs: aten::op 0..40 launches K at 38 (call 38..40); K runs 45..145 (latency 7
    from the call's start); the host's untraced time runs to 200. At host scale s the window is
    max(200 s, 38 s + 7 + 100): 107.76 µs at s = 0.02 (the GPU's own length), 118.4 at 0.3,
    126 at 0.5 (the host binds at the usual scales: a fit is possible)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 200 * US, 1),
        H("aten::op", "cpu_op", 0, 40 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 38 * US, 40 * US, 1, 1),
    ]
    gpu = [G("kernel", "kernel", 45 * US, 145 * US, 7, 1)]
    return critical_path_of(host, gpu, 1, [(0, 200 * US)], [1])


def test_the_window_at_each_host_scale_hand_computed():
    cp = _cp()
    g = cp.graph
    for s, want in ((0.02, 107.76), (0.3, 118.4), (0.5, 126.0)):
        assert GN.makespan(g, 0, GN._host_scale(g, s)) == pytest.approx(want * US, abs=1.0)


def test_a_host_scale_is_fitted_above_the_gpus_own_length():
    # 115 µs: 38 s + 107 = 115 -> s = 8 / 38 = 0.2105 (bisection: 10 halvings of [0.02, 1])
    s = GN.calibrate(_cp().graph, 0, 115 * US)
    assert s == pytest.approx(8 / 38, abs=1e-3)


def test_no_host_scale_within_one_percent_of_the_gpus_own_length():
    # 108 µs is 0.22 % above 107.76: any s up to 1 / 38 = 0.026 gives it; nothing is fitted
    assert GN.calibrate(_cp().graph, 0, 108 * US) is None
    # 109 µs is 1.15 % above: s = 2 / 38 = 0.0526
    assert GN.calibrate(_cp().graph, 0, 109 * US) == pytest.approx(2 / 38, abs=1e-3)
