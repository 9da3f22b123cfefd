"""A larger batch and kernels whose grid is one block per channel (NCHW training BatchNorm): at
``k`` × the batch each block does ``k`` × the work and the grid stays as it was, so those kernels
are no room for the batch to fill (``event_classes.PER_CHANNEL_GRID_RE``,
``KernelStats.per_channel_grid_us``, ``fixes.batch_size``). Hand-built traces, answers computed
by hand; then v131, the real step whose 4 × batch was timed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of
from gpuscope.analysis.event_classes import PER_CHANNEL_GRID_RE
from gpuscope.analysis.fixes import batch_size as BS
from gpuscope.analysis.fixes.base import KernelStats
from gpuscope.analysis.report import AnalysisOptions, RunAnalysis, analyze_run
from gpuscope.ingest.loader import ingest_paths
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

US = 1_000
VAL = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"

BN_BACKWARD = "void at::native::batch_norm_backward_kernel<c10::BFloat16, float, float, int>"
BN_STATS = "void at::native::batch_norm_collect_statistics_kernel<InvStd, float, float, float, int>"
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>"


@pytest.mark.parametrize(
    ("name", "per_channel"),
    [
        (BN_BACKWARD, True),
        (BN_STATS, True),
        ("void at::native::batch_norm_backward_reduce_kernel<float, float, float, int>", True),
        ("bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>", True),
        ("bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>", True),
        # channels-last and elementwise siblings: their grids grow with the tensor
        ("void at::native::batch_norm_collect_statistics_channels_last_kernel<...>", False),
        ("void at::native::batch_norm_backward_elemt_kernel<float, float, float, int>", False),
        ("void at::native::batch_norm_transform_input_kernel<float, float, float, true>", False),
        (REDUCE, False),
    ],
)
def test_which_kernels_are_one_block_per_channel(name: str, per_channel: bool) -> None:
    assert (re.search(PER_CHANNEL_GRID_RE, name) is not None) is per_channel


def _bn_step(kernel: str) -> TraceBuilder:
    """Three 1,000 µs steps, each: four ``kernel`` launches of 150 µs on a grid of 30 blocks (of
    the tracer's 132 SMs), then a 100 µs GEMM on 264 blocks; the launches 5 µs apart from the
    step's start, the kernels back to back from 20 µs: the GPU busy 700 of 1,000 µs, the host
    idle after its last launch (the rest of the step is idle time the batch amortises)."""
    t = TraceBuilder(extra_meta={"samples_per_step": 32})
    for i in range(3):
        T = 1000.0 * i
        t.step(i, T, 1000)
        for j in range(4):
            t.launch(kernel, T + 5 + 5 * j, T + 20 + 150 * j, 150, grid=[30, 1, 1])
        t.launch("sm90_xmma_gemm_bf16bf16_bf16f32", T + 25, T + 620, 100, grid=[264, 1, 1])
    return t


def _stats(con, run_id: str, untraced_ms: float) -> KernelStats:
    """The kernel statistics the rules read (``Inputs.kernels``)."""
    a = RunAnalysis(con, run_id, None, AnalysisOptions(untraced_step_ms=untraced_ms))
    assert a.rule_inputs is not None
    return a.rule_inputs.kernels


def test_per_channel_kernels_are_no_room_for_a_larger_batch(con, tmp_path: Path) -> None:
    """The same step twice: its small-grid kernels named as PyTorch's NCHW BatchNorm backward,
    then as a plain reduction. Small-grid time per step: 600 of 700 µs (86 %), mean fill 30 / 132
    = 0.227. As BatchNorm, all 600 µs are per channel: 0 µs of small-grid kernels, batch_size
    not told; as a reduction it is told, on 86 % of the kernel time."""
    [bn] = ingest_paths(con, [_bn_step(BN_BACKWARD).write(tmp_path / "bn.json")])
    k = _stats(con, bn.run_id, 1.0)
    assert k.per_channel_grid_us == pytest.approx(3 * 600.0)
    assert k.small_grid_us == 0.0 and k.small_grid_fill is None
    r = analyze_run(con, bn.run_id, untraced_step_ms=1.0, with_path=False)
    assert "batch_size" not in {x.id for x in r.recommendations}

    [red] = ingest_paths(con, [_bn_step(REDUCE).write(tmp_path / "reduce.json")])
    k = _stats(con, red.run_id, 1.0)
    assert k.per_channel_grid_us == 0.0
    assert k.small_grid_us == pytest.approx(3 * 600.0)
    assert k.small_grid_fill == pytest.approx(30 / 132)
    r = analyze_run(con, red.run_id, untraced_step_ms=1.0, with_path=False)
    rec = {x.id: x for x in r.recommendations}["batch_size"]
    assert rec.evidence["small_grid_kernel_share_pct"] == pytest.approx(100 * 600 / 700)


def test_a_per_channel_kernel_grows_with_the_batch_at_every_level() -> None:
    """One step: a 150 µs kernel on 30 of 132 SMs. At 4 × the batch, as a plain reduction it
    fills the idle SMs (4 × 30 = 120 blocks <= 132: 150 µs at the mid level, 150 at the high);
    one block per channel, each block does 4 × the work: 600 µs at the mid level, 3 + 147 × 4 =
    591 µs at the high one (its :data:`~gpuscope.analysis.fixes.batch_size.FIXED_KERNEL_NS`
    part)."""
    for name, mid, high in ((REDUCE, 150.0, 150.0), (BN_BACKWARD, 600.0, 591.0)):
        host = [
            H("ProfilerStep#1", "user_annotation", 0, 200 * US, 1),
            H("cudaLaunchKernel", "cuda_runtime", 3 * US, 5 * US, 1, 1),
        ]
        gpu = [G(name, "kernel", 10 * US, 160 * US, 7, 1, blocks=30)]
        cp = critical_path_of(host, gpu, 1, [(0, 200 * US)], [1])
        g = cp.graph
        v = next(i for i, n in enumerate(g.nodes) if n.kind == "gpu")
        got = {m: BS._grow(m, 4, 132)(v, g.nodes[v]) / US for m in ("low", "mid", "high")}
        assert got == pytest.approx({"low": 600.0, "mid": mid, "high": high}), name


def test_v131_a_batch_four_times_larger_gained_nothing_and_is_not_told(con) -> None:
    """v131 (a PeleeNet-style NCHW CNN, bf16, eager): 66 % of its kernel time is PyTorch's
    per-channel BatchNorm kernels on ~30 blocks of the H200's 132 SMs. Its planted step at four
    times the batch, timed (record_blind8.FIRST_FIXES ``v131b``, 3 rounds), gained −0.8 % a
    sample, where growing those kernels by SM fill had told ``batch_size`` first at 58.3 %."""
    timing = json.loads((VAL / "v131" / "timing.json").read_text())
    untraced = next(r for r in timing["runs"] if r["mode"] == "trace")["trace_untraced_step_ms"]
    [res] = ingest_paths(con, [VAL / "v131"])
    k = _stats(con, res.run_id, untraced)
    assert 60.0 < 100 * k.per_channel_grid_us / k.kernel_us < 72.0
    r = analyze_run(con, res.run_id, untraced_step_ms=untraced, with_path=False)
    assert "batch_size" not in {x.id for x in r.recommendations}
    timed = {c["case"]: c for c in json.loads((VAL / "truth.json").read_text())["first_fixes"]}
    assert abs(timed["v131b"]["gain_pct"]) < 3.0
