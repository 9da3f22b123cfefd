"""``dataloader_workers`` where the loading hides behind the GPU's queued work
(analysis/fixes/dataloader_workers.py: ``exposed_share``, ``retime``; docs/metrics.md, the fixes'
table): a load the GPU worked through shows that the loop runs its host ahead of its GPU by
more than a load, and without the profiler every step's load hides as that one did, so the fix
takes off no more than the least exposed load's share. Answers computed by hand on hand-built
steps, then the real pairs (v83, v98: a slice and a stack of a pre-made tensor beside a
GPU-bound step, timed 0.6 % and 1.4 % slower with workers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import build_graph
from gpuscope.analysis.fixes import dataloader_workers as DW
from gpuscope.analysis.gains import Context
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths

US = 1_000
VAL = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"
NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"


def _graph(a_end_us: int):
    """Two loads on thread 1, each followed by a launch: the first 0-2 ms on an idle GPU (the
    window's start), its kernel A 2.1 ms to ``a_end_us``; the second 2.5-4.5 ms, then kernel B
    from A's end for 1.9 ms. A running past 4.5 ms hides the second load whole; ending at
    3.5 ms, half of it."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 10_000 * US, 1),
        H(NEXT, "user_annotation", 0, 2_000 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 2_000 * US, 2_050 * US, 1, correlation=1),
        H(NEXT, "user_annotation", 2_500 * US, 4_500 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 4_500 * US, 4_550 * US, 1, correlation=2),
    ]
    b0 = max(a_end_us, 4_600) * US
    gpu = [
        G(GEMM, "kernel", 2_100 * US, a_end_us * US, 7, correlation=1),
        G(GEMM, "kernel", b0, b0 + 1_900 * US, 7, correlation=2),
    ]
    return build_graph(host, gpu, 1, 0, 10_000 * US)


def _factors(g) -> dict[str, float]:
    """Each level's DataLoader time over the recorded one."""
    v = DW.retime(g, Context(n_steps=1, step_ms=10.0))
    total = sum(n.dur for n in g.nodes if DW.in_loader(n))
    out = {}
    for level in ("low", "mid", "high"):
        dur, _ = v[level]
        out[level] = sum(dur(i, n) for i, n in enumerate(g.nodes) if DW.in_loader(n)) / total
    return out


def test_a_load_the_gpu_worked_through_leaves_the_loop_as_it_is():
    """A from 2.1 to 7.1 ms: the second load (2.5-4.5 ms) ran while the GPU worked, 0 of its
    2 ms idle; the first, 2 of 2 ms idle. The least share is 0: the fix takes nothing off (× 1
    at every level), where the DataLoader × 0.2 / 0.05 / 0 took the first load's 2 ms off a step
    whose GPU work queued before the window the graph does not hold."""
    g = _graph(7_100)
    assert _factors(g) == pytest.approx({"low": 1.0, "mid": 1.0, "high": 1.0})
    assert DW.exposed_share(g) == pytest.approx(0.0)


def test_loads_that_kept_the_gpu_waiting_are_taken_off():
    """A from 2.1 to 2.3 ms: the second load ran on an idle GPU too; both 100 % exposed, so
    × 0.2 / 0.05 / 0."""
    g = _graph(2_300)
    assert _factors(g) == pytest.approx({"low": 0.2, "mid": 0.05, "high": 0.0})
    assert DW.exposed_share(g) == pytest.approx(1.0)


def test_a_load_half_hidden_is_no_sign():
    """A ending at 3.5 ms: the second load idle from 3.5 to 4.5 ms, half of it, above
    HIDDEN_SHARE (0.1): the GPU's queue ran out under it, so nothing says the loop hides its
    loads, and the replay alone weighs what the queue hid (× 0.2 / 0.05 / 0)."""
    g = _graph(3_500)
    assert _factors(g) == pytest.approx({"low": 0.2, "mid": 0.05, "high": 0.0})
    assert DW.exposed_share(g) == pytest.approx(0.5)


def test_the_least_share_scales_what_is_taken_off():
    """A ending at 4.4 ms: 0.1 ms of the second load's 2 idle, 5 %: below HIDDEN_SHARE, so each
    level takes off (1 − 0.2 / 0.05 / 0) × 5 %: × 0.96 / 0.9525 / 0.95."""
    g = _graph(4_400)
    assert _factors(g) == pytest.approx({"low": 0.96, "mid": 0.9525, "high": 0.95})
    assert DW.exposed_share(g) == pytest.approx(0.05)


def _timed(case: str) -> float:
    truth = json.loads((VAL / "truth.json").read_text())
    return next(c for c in truth["cases"] if c["case"] == case)["gain_pct"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "share"),
    [
        # v83: loads of 2.51, 3.06 and 1.98 ms, 100 %, 93 % and 3.5 % exposed; told 6.7 %
        # (5.3-6.9) before
        ("v83", 0.035),
        # v98: 8.09, 78.86 and 16.87 ms, 4.3 %, 91 % and 59 %; told 3.7 % (0.0-7.3) before
        ("v98", 0.043),
    ],
)
def test_loading_hidden_by_a_gpu_bound_step_is_told_nothing_to_gain(con, case, share):
    """A slice and a stack of a pre-made tensor beside a GPU-bound step: one load of each
    window ran while the GPU worked. The estimate is no gain (below 1 %), and the range holds
    what workers were timed to do."""
    [res] = ingest_paths(con, [VAL / case])
    r = analyze_run(con, res.run_id, rank=0)
    rec = next(x for x in r.recommendations if x.id == "dataloader_workers")
    est = rec.estimate
    timed = _timed(case)
    assert est is not None and est.gain_pct < 1.0, est
    assert est.low_pct <= timed <= est.high_pct or (
        abs(timed) < 3.0 and est.low_pct > -3.0 and est.high_pct < 3.0
    ), (timed, est)
    assert r.critical_path is not None
    assert DW.exposed_share(r.critical_path.graph) == pytest.approx(share, abs=0.001)
