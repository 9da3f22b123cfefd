"""The batch fix's range spans the multiples the memory holds: hand-built trace, answers computed by
hand. The estimate (``gain_pct``) stays at 4 × the batch; the range's top also re-times 8 × and
16 × where ``k`` × the peak allocated bytes fit 90 % of the GPU (activations grow at most linearly
with the batch, the weights and optimizer state not at all), and where the memory was not
recorded."""

from __future__ import annotations

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of
from gpuscope.analysis.fixes import BY_ID
from gpuscope.analysis.fixes import batch_size as BS
from gpuscope.analysis.fixes.base import PER_SAMPLE_TIME, Recommendation

US = 1_000


def test_multiples_the_memory_holds():
    assert BS.multiples(0.05) == (4, 8, 16)  # 16 x 5 % = 80 % <= 90 %
    assert BS.multiples(0.1) == (4, 8)  # 16 x 10 % = 160 % > 90 %; 8 x 10 % = 80 %
    assert BS.multiples(0.2) == (4,)  # 8 x 20 % = 160 % > 90 %
    # memory not recorded: the range spans every multiple (the words say memory decides)
    assert BS.multiples(None) == (4, 8, 16)


def test_variant_multiple_reads_the_name():
    assert GN.variant_multiple("high@16", 4) == 16
    assert GN.variant_multiple("high", 4) == 4
    assert GN.variant_multiple("mid", 1) == 1


def _step():
    """Step 0..100 µs: the host's launch call 3..5 starts K (5..100, 95 µs; latency 2 µs from the
    call's start); the rest of the host is untraced time."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 100 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 3 * US, 5 * US, 1, 1),
    ]
    gpu = [G("small_kernel", "kernel", 5 * US, 100 * US, 7, 1)]
    return critical_path_of(host, gpu, 1, [(0, 100 * US)], [1])


def _rec(ks: list[int]) -> Recommendation:
    return Recommendation(
        "batch_size", "t", "w", {"batch_multiples": ks}, "", 10.0, footing=PER_SAMPLE_TIME
    )


def _hand_high(k: int) -> float:
    """The high variant at k × the batch: K = 3 + 92 k µs (3 µs fixed); at host scale s (× f for
    the fixed process) K starts at 3 s f + 2 and the window is 3 s f + 2 + 3 + 92 k; the planted
    window at s is max(100 s, 3 s + 97) = 3 s + 97 (s <= 1). Per sample: 1 - new / (k × old),
    the most over s in 0.3, 0.4, 0.5, 1.0 (no untraced step) and f in 1, 1 / 1.23."""
    out = -1e9
    for s in (0.3, 0.4, 0.5, 1.0):
        for f in (1.0, 1.0 / 1.23):
            new = 3 * s * f + 5 + 92 * k
            out = max(out, 100 * (1 - new / (k * (3 * s + 97))))
    return out


@pytest.mark.parametrize(("ks", "top"), [([4], 4), ([4, 8, 16], 16), ([4, 8], 8)])
def test_the_ranges_top_is_the_largest_multiple_the_memory_holds(ks: list[int], top: int):
    cp = _step()
    ctx = GN.Context(n_steps=1, step_ms=0.1)
    unit = BY_ID["batch_size"]
    est = unit.estimate(_rec(ks), cp, ctx)
    assert est.high_pct == pytest.approx(_hand_high(top), abs=1e-6)
    # the point estimate stays at 4 x: the mid variant (no SM counts: as low, kernels x 4)
    est4 = unit.estimate(_rec([4]), cp, ctx)
    assert est.gain_pct == pytest.approx(est4.gain_pct, abs=1e-9)
    assert est.low_pct == pytest.approx(est4.low_pct, abs=1e-9)


def _step_with_update(span: str):
    """Step 0..200 µs on one stream: the launch call 3..5 starts the model's kernel A (5..100,
    95 µs); inside the span ``span`` (100..190) the launch call 101..103 starts kernel B
    (103..150, 47 µs)."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 200 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 3 * US, 5 * US, 1, 1),
        H(span, "user_annotation", 100 * US, 190 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 101 * US, 103 * US, 1, 2),
    ]
    gpu = [
        G("model_kernel", "kernel", 5 * US, 100 * US, 7, 1),
        G("multi_tensor_apply_kernel", "kernel", 103 * US, 150 * US, 7, 2),
    ]
    return critical_path_of(host, gpu, 1, [(0, 200 * US)], [1])


def test_the_optimizer_steps_gpu_work_keeps_its_time_at_a_larger_batch():
    """An update's work is per parameter: at 4 × the batch the kernel the optimizer step launched
    keeps its 47 µs at every level while the model's kernel grows (low: 95 × 4 = 380 µs); a span
    of another name gives no such kernel."""
    cp = _step_with_update("Optimizer.step#AdamW.step")
    g = cp.graph
    ctx = GN.Context(n_steps=1, step_ms=0.2)
    [a] = [v for v, n in enumerate(g.nodes) if n.kind == "gpu" and n.label == "model_kernel"]
    [b] = [v for v, n in enumerate(g.nodes) if n.kind == "gpu" and n.label != "model_kernel"]
    assert BS.per_parameter_work(g) == frozenset({b})
    for name, (dur, _) in BS.retime(g, ctx).items():
        assert dur is not None
        assert dur(b, g.nodes[b]) == pytest.approx(47 * US), name
        assert dur(a, g.nodes[a]) >= 95 * US * (4 if name == "low" else 1), name
    plain = _step_with_update("my_logging")
    assert BS.per_parameter_work(plain.graph) == frozenset()
    # the update kept: the per-sample gain is larger than with the same kernel grown
    unit = BY_ID["batch_size"]
    kept, grown = (unit.estimate(_rec([4]), c, ctx) for c in (cp, plain))
    assert kept.gain_pct > grown.gain_pct and kept.low_pct > grown.low_pct
