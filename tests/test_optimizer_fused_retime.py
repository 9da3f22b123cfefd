"""The fused optimizer's re-timing (analysis/fixes/optimizer_fused.py, docs/metrics.md "Gains from
the path"): what ``fused=True`` changes inside ``Optimizer.step`` (its ops and launches, not its
walk over the parameters in Python) and what it leaves (``zero_grad``), on a hand-built step
with the answer computed by hand."""

from __future__ import annotations

import pytest
from gpuscope.analysis import fixes as FX
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of
from gpuscope.analysis.fixes import optimizer_fused as OF

US = 1_000
OPS = (100, 300, 550, 800)  # each aten::add_ 150 µs from here


def _optimizer_step():
    """One step 0..1100 µs of host work only: ``Optimizer.step#SGD.step`` 0..1000 holds four
    ``aten::add_`` of 150 µs (at 100, 300, 550, 800), each launching (call +10..+20) a 5 µs
    kernel at +25; the step's own time in no op (its Python) is 100 + 50 + 100 + 100 + 50 = 400
    µs, the ops 600 µs; then ``Optimizer.zero_grad#SGD.zero_grad`` 1000..1100 (Python only)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 1100 * US, 1),
        H("Optimizer.step#SGD.step", "user_annotation", 0, 1000 * US, 1),
        H("Optimizer.zero_grad#SGD.zero_grad", "user_annotation", 1000 * US, 1100 * US, 1),
    ]
    gpu = []
    for k, s in enumerate(OPS, start=1):
        host.append(H("aten::add_", "cpu_op", s * US, (s + 150) * US, 1))
        host.append(H("cudaLaunchKernel", "cuda_runtime", (s + 10) * US, (s + 20) * US, 1, k))
        gpu.append(G("vectorized_elementwise_kernel", "kernel", (s + 25) * US, (s + 30) * US, 7, k))
    return critical_path_of(host, gpu, 1, [(0, 1100 * US)], [1])


def test_the_step_nodes_are_its_ops_and_its_python_not_zero_grad() -> None:
    cp = _optimizer_step()
    g = cp.graph
    ops, own, gpus = OF.step_nodes(g)
    assert sum(g.nodes[v].dur for v in ops) == 600 * US
    assert sum(g.nodes[v].dur for v in own) == 400 * US
    assert len(gpus) == 4
    every = ops | own
    zero_grad = [v for v, n in enumerate(g.nodes) if n.kind == "host" and v not in every]
    assert sum(g.nodes[v].dur for v in zero_grad) == 100 * US


def test_fusing_keeps_the_walk_over_the_parameters_and_zero_grad() -> None:
    """No untraced step: the point is the mid variant at host scale 0.4, the window the host's
    (the kernels end before it). Mid: ops 600 × 0.01 + Python 400 × 0.15 + zero_grad 100 = 166
    µs of the 1100: 1 − 166 / 1100 = 84.9 %. Low: 600 × 0.10 + 400 × 0.55 + 100 = 380 µs on a
    host 1.23× slower: 1 − 1.23 × 380 / 1100 = 57.5 %; high: 600 × 0.01 + 400 × 0.08 + 100 =
    138 µs on a host 1.23× faster: 1 − 138 / 1.23 / 1100 = 89.8 %."""
    cp = _optimizer_step()
    ctx = GN.Context(n_steps=1, step_ms=1.1)
    u = FX.BY_ID["optimizer_fused"]
    assert u.retime is not None
    est = GN.replay_estimate(u.retime(cp.graph, ctx), cp, ctx)
    assert (OF.OPS_KEPT, OF.BOOKKEEPING_KEPT, OF.KERNELS_KEPT) == (
        (0.10, 0.01, 0.01),
        (0.55, 0.15, 0.08),
        (0.63, 0.11, 0.02),
    )
    assert est.gain_pct == pytest.approx(100 * (1 - 166 / 1100), abs=0.3)
    assert est.low_pct == pytest.approx(100 * (1 - 1.23 * 380 / 1100), abs=0.3)
    assert est.high_pct == pytest.approx(100 * (1 - 138 / 1.23 / 1100), abs=0.3)
