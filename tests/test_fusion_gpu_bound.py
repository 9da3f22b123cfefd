"""``kernel_fusion`` fired as launch-bound on a step whose GPU works ≥ 80 % of the untraced step
keeps its kernels' GPU time in the re-timing: only the host and launch work goes (such a step
shortens its GPU time by fusing only through memory-bound chains, which the memory-bound branch
weighs and names). v107 (a FaceNet whose GPU worked 87 % of its 32.9 ms untraced step) was told
torch.compile would gain 38.1 %; timed, compiling lost 2.5 %. Answers computed by hand."""

from __future__ import annotations

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import build_graph
from gpuscope.analysis.fixes import kernel_fusion as KF
from gpuscope.analysis.recommendation import Recommendation

US = 1_000
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
)


def _rec(cap_us: float) -> Recommendation:
    return Recommendation("kernel_fusion", "t", "w", {"profiler_cap_us_per_step": cap_us}, "", 1.0)


def _removed_mid(cap_us: float, untraced_ms: float) -> float:
    """Two elementwise kernels back to back (100 µs each): the second is the one fusion removes;
    its duration at the mid variant."""
    gpu = [G(ADD, "kernel", 0, 100 * US, 7), G(ADD, "kernel", 100 * US, 200 * US, 7)]
    g = build_graph([H("ProfilerStep#1", "user_annotation", 0, 200 * US, 1)], gpu, 1, 0, 200 * US)
    removed, total = KF.removable_kernels(g)
    assert (len(removed), total) == (1, 2)
    ctx = GN.Context(n_steps=1, step_ms=0.2, untraced_step_ms=untraced_ms)
    dur, _ = KF.advised(_rec(cap_us), g, ctx)["mid"]
    assert dur is not None
    [v] = removed
    return dur(v, g.nodes[v])


def test_gpu_busy_from_the_profiler_cap() -> None:
    """Untraced step 32.9 ms, cap 4.12 ms (untraced − GPU busy): busy 87.5 %."""
    ctx = GN.Context(n_steps=1, step_ms=35.5, untraced_step_ms=32.9)
    assert KF.gpu_busy_pct(_rec(4_120.0), ctx) == pytest.approx(100 * (1 - 4.12 / 32.9))
    assert KF.gpu_busy_pct(_rec(4_120.0), GN.Context(n_steps=1, step_ms=35.5)) is None


def test_a_gpu_bound_step_keeps_the_removed_kernels_gpu_time() -> None:
    """Untraced 1.0 ms with a 0.1 ms cap: busy 90 % ≥ 80: the removed kernel stays 100 µs at mid
    (g = 1). With a 0.5 ms cap (busy 50 %) it is × 0.5 (50 µs), as before."""
    assert _removed_mid(100.0, 1.0) == pytest.approx(100 * US)
    assert _removed_mid(500.0, 1.0) == pytest.approx(50 * US)


def _rnn_graph(op: str):
    """A step of 300 µs: host op ``op`` 0..100 µs on thread 1, then two elementwise kernels back
    to back (100 µs each) from 100 µs."""
    gpu = [G(ADD, "kernel", 100 * US, 200 * US, 7), G(ADD, "kernel", 200 * US, 300 * US, 7)]
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 300 * US, 1),
        H(op, "cpu_op", 0, 100 * US, 1),
    ]
    return build_graph(host, gpu, 1, 0, 300 * US)


def test_a_step_with_rnn_layers_keeps_its_time_at_low_and_mid() -> None:
    """With ``aten::gru`` in the step (Dynamo left v110's whole forward eager: its compiled step
    held no compiled region), the low and mid levels keep every node as recorded; the high level
    still shrinks the removed kernel (× 0). Without it (``aten::mul``) the mid level halves the
    removed kernel, as before."""
    g = _rnn_graph("aten::gru")
    ctx = GN.Context(n_steps=1, step_ms=0.3)
    v = KF.retime(g, ctx)
    [r] = KF.removable_kernels(g)[0]
    for level in ("low", "mid"):
        dur, _ = v[level]
        assert dur is not None
        assert [dur(i, n) for i, n in enumerate(g.nodes)] == [float(n.dur) for n in g.nodes]
    high, _ = v["high"]
    assert high is not None and high(r, g.nodes[r]) == 0.0
    g2 = _rnn_graph("aten::mul")
    mid, _ = KF.retime(g2, ctx)["mid"]
    [r2] = KF.removable_kernels(g2)[0]
    assert mid is not None and mid(r2, g2.nodes[r2]) == pytest.approx(50 * US)
