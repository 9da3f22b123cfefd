"""The top of ``pin_memory``'s range (analysis/fixes/pin_memory.py, ``top``; docs/metrics.md, "Gains
from the path"): the copies' saving in absolute time over the untraced step, with the planted
step's pageable copies 1.48x slower (``HOST_WAIT_VARIATION``: a pageable copy is a wait of the
host on the GPU), where the replayed planted step is longer than the untraced one.

The hand-made step (µs): a pageable 10 MB copy on the GPU 5..1005, its ``cudaMemcpyAsync`` 0..1010
waiting for it; a kernel launched 1010..1012 runs 1015..2000. Timed without the profiler the step
took 1,500 µs: the profiler stretched the kernel, not the copy.

- Replayed as traced, at every prior host scale (0.3, 0.4, 0.5): 2,000 (the GPU binds).
- Pinned at 50 GB/s (the strongest variant): the copy 200 µs, 5..205; the call no longer waits;
  the kernel follows the copy on its stream, 205..1190: 1,190. Saved: 810.
- The replay's share of the longer traced step: 1 - 1190 / 2000 = 40.5 % (point and top).
- The top: (810 + 0.48 x 1000) / (1500 + 0.48 x 1000) = 1290 / 1980 = 65.15 %.
"""

from __future__ import annotations

import pytest
from gpuscope.analysis import fixes as FX
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of

US = 1_000


def copy_then_kernel():
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 2000 * US, 1),
        H("cudaMemcpyAsync", "cuda_runtime", 0, 1010 * US, 1, 9),
        H("cudaLaunchKernel", "cuda_runtime", 1010 * US, 1012 * US, 1, 10),
    ]
    gpu = [
        G("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 5 * US, 1005 * US, 7, 9, 10_000_000),
        G("void gemm_kernel", "kernels", 1015 * US, 2000 * US, 7, 10),
    ]
    return critical_path_of(host, gpu, 1, [(0, 2000 * US)], [1])


def estimate(untraced_ms: float) -> GN.Estimate:
    cp = copy_then_kernel()
    ctx = GN.Context(n_steps=1, step_ms=2.0, untraced_step_ms=untraced_ms, pinned_gbps=50.0)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    rec = FX.Recommendation("pin_memory", "t", "w", {}, "c", 50.0)
    return FX.BY_ID["pin_memory"].estimate(rec, cp, ctx)


def test_the_copies_saving_counts_in_absolute_time_against_a_shorter_untraced_step():
    est = estimate(1.5)
    assert est.gain_pct == pytest.approx(40.5)
    assert GN.HOST_WAIT_VARIATION == 1.48
    assert est.high_pct == pytest.approx(100 * 1290 / 1980)
    assert est.low_pct < est.gain_pct


def test_an_untraced_step_as_long_as_the_replay_keeps_the_replays_top():
    # untraced 2.0 ms: the replay's share is of the untraced step already: 1 - 1190 / 2000 at
    # the point. No host speed is fitted (the GPU binds), so the range's top also replays the
    # planted step on a host 1.48 x slower than the prior's slowest, 0.72 x 1.48 = 1.0656 of the
    # trace: after the copy's wait (1,010 µs, not host work) the launch call and the step's own
    # host time, 990 µs, take 1,054.9 and outlast the kernel: 2,064.9 µs, so the top is
    # 1 - 1190 / 2064.9 = 42.37 %
    est = estimate(2.0)
    assert est.gain_pct == pytest.approx(40.5)
    assert GN.HOST_SCALE_PRIOR[2] * GN.HOST_WAIT_VARIATION == pytest.approx(1.0656)
    assert est.high_pct == pytest.approx(100 * (1 - 1190 / (1010 + 990 * 1.0656)), abs=0.01)
