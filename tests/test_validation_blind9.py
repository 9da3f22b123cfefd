"""The validation set's ninth blind part (v145-v159, record_blind9.py over blind9_a/b/c.py): its
cases are their own group (``blind9``), held out, on model families no earlier case used; they time
every one-GPU fix once more, ask torch.compile of the model alone on a host-bound step whose loss
and optimizer stay eager, and on a channels-last convolution net of training BatchNorms, hold two
pairs chosen to gain nothing (cuDNN's benchmark on plain 3x3 and 1x1 convolutions, one sync at the
end of a GPU-bound step) and two 2-GPU pairs: a straggler whose own DataLoader has no workers, and
DDP's all-reduce taken out of the backward. Nothing here analyses a trace: the part is judged once,
by the lead, with ``validate_gains_set.py --blind``."""

from __future__ import annotations

import pytest
from validation_parts import (
    ONE_GPU_FIXES,
    TRUTH,
    assert_compiled_fixed_only,
    assert_first_fixes,
    assert_first_fixes_apply_to_the_fixed_variant_only,
    assert_new_families,
    assert_part_layout,
    build_one_gpu_cases,
    ops_by_variant_and_rank,
    record_blind9,
    variant_pair,
)

FAMILIES = {
    "v145": "TSMixer",
    "v146": "HarDNet",
    "v147": "ESPNet",
    "v148": "PaLM",
    "v149": "SegFormer",
    "v150": "PVT",
    "v151": "TempCNN",
    "v152": "Barlow Twins",
    "v153": "R-GCN",
    "v154": "Neural Cellular Automata",
    "v155": "MobileBERT",
    "v156": "VoVNet",
    "v157": "LinkNet",
    "v158": "SpanBERT",
    "v159": "BLOOM",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

ONE_GPU = frozenset(k for k, c in record_blind9.CASES.items() if c.get("gpus", 1) == 1)
SAME_MATH = ONE_GPU - {"v155"}
"""The one-GPU cases whose fix leaves the step's arithmetic alone on a CPU (where autocast, pinning,
CUDA graphs, cudnn flags, syncs, workers and the fused optimizer change nothing and torch.compile is
replaced by the model itself): both variants, seeded alike, end two steps with the same
parameters. v155's fix is a larger batch."""


def test_the_ninth_blind_part_is_its_own_held_out_group_numbered_on_from_v145() -> None:
    parts = (record_blind9.blind9_a, record_blind9.blind9_b, record_blind9.blind9_c)
    assert_part_layout(record_blind9, "blind9", 145, parts)


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind9, FAMILIES)


def test_the_ninth_blind_part_covers_the_fixes_two_nulls_and_two_two_gpu_pairs() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = record_blind9.CASES
    assert {c["expected_fix"] for c in cases.values()} <= set(BY_ID)
    real = {k: c for k, c in cases.items() if not c.get("null")}
    assert {c["expected_fix"] for k, c in real.items() if k in ONE_GPU} >= ONE_GPU_FIXES
    compiled = {k for k, c in cases.items() if c.get("compiled")}
    assert {k for k, c in cases.items() if "torch.compile(" in c["fix"]} == compiled
    assert compiled == {"v145", "v146"}
    fusion = {k: c for k, c in cases.items() if c["expected_fix"] == "kernel_fusion"}
    assert set(fusion) == compiled
    assert "the loss and the optimizer stay eager" in fusion["v145"]["fix"]
    assert "training" in fusion["v146"]["model"] and "BatchNorm" in fusion["v146"]["model"]
    assert "channels-last" in fusion["v146"]["model"]
    (mp,) = [c for c in real.values() if c["expected_fix"] == "mixed_precision"]
    assert mp["planted"] == "fp32, TF32 off" and "bf16 autocast" in mp["fix"]
    (ac,) = [c for c in real.values() if c["expected_fix"] == "activation_checkpointing"]
    assert "nn.Module" in ac["planted"]
    (cg,) = [c for c in real.values() if c["expected_fix"] == "cuda_graphs"]
    assert cg["planted"].startswith("eager") and "torch.cuda.graph" in cg["fix"]
    (bs,) = [c for c in real.values() if c["expected_fix"] == "batch_size"]
    assert bs["batch_multiple"] == 4
    nulls = {k: c for k, c in cases.items() if c.get("null")}
    assert {k: c["expected_fix"] for k, c in nulls.items()} == {
        "v156": "cudnn_benchmark",
        "v157": "host_sync",
    }
    assert all("gains ~0" in c["fix"] for c in nulls.values())
    two = {k: c for k, c in cases.items() if c.get("gpus", 1) == 2}
    assert {k: c["expected_fix"] for k, c in two.items()} == {
        "v158": "dataloader_workers",
        "v159": "overlap_communication",
    }
    assert "rank 1" in two["v158"]["planted"] and "no_sync()" in two["v159"]["planted"]
    assert len(cases) == 15 and len(ONE_GPU) == 13


@pytest.mark.slow
def test_every_one_gpu_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make the same model and take two steps (the CPU,
    --quick sizes; torch.compile replaced by a recorder of its calls that returns the model). Only
    the planted thing differs, as each variant's record says, and where the fix leaves the
    arithmetic alone on a CPU both variants end with the same parameters."""
    pytest.importorskip("torch")
    metas, samples, calls = build_one_gpu_cases(
        record_blind9, monkeypatch, SAME_MATH, ("v147", "v156")
    )

    pair = variant_pair(metas)

    # torch.compile: the fixed variants of v145 and v146, once each, default mode; nothing else
    assert_compiled_fixed_only(calls, metas, ("v145", "v146"))
    assert pair("v147", "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
    assert pair("v156", "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
    assert pair("v148", "precision") == ("fp32, TF32 off", "bf16 autocast, TF32 off")
    assert pair("v149", "checkpointed_modules") == (8, 0)
    assert pair("v150", "syncs_per_step") == (6, 0)
    assert pair("v157", "syncs_per_step") == (1, 0)
    assert pair("v151", "pinned") == (False, True)
    assert pair("v151", "bytes_per_step")[0] == pair("v151", "bytes_per_step")[1] > 0
    assert pair("v152", "num_workers")[0] == 0 < pair("v152", "num_workers")[1]
    assert pair("v153", "optimizer") == ("Adam(foreach=False)", "Adam(fused=True)")
    assert pair("v154", "cuda_graph") == ("none", "whole step (torch.cuda.graph)")
    assert pair("v154", "graph_captured") == (False, False)  # no capture on a CPU
    assert samples["v155", "fixed"] == 4 * samples["v155", "planted"]
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in SAME_MATH)


@pytest.mark.slow
def test_the_two_gpu_cases_differ_as_planted_on_each_rank(tmp_path, one_thread: None) -> None:
    """v158's and v159's builders under DDP (gloo, one process, --quick sizes): v158 planted, rank
    1's DataLoader has no workers and rank 0's has rank 0's; fixed, both have them; v159 planted
    takes the all-reduce out of the backward (one all-reduce after it), fixed leaves DDP's buckets
    overlapping it. Samples per step are the same on each rank and variant."""
    pytest.importorskip("torch")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, builds = ops_by_variant_and_rank(record_blind9, "v158", set(), tmp_path / "a")
    workers = {k: meta["num_workers_by_rank"] for k, (_n, meta, _m) in builds.items()}
    assert workers["planted", 0] == workers["planted", 1]
    (w0, w1), (f0, f1) = workers["planted", 1], workers["fixed", 1]
    assert w0 > 0 == w1 and f0 == f1 == w0
    assert len({n for n, _meta, _m in builds.values()}) == 1
    _, builds = ops_by_variant_and_rank(record_blind9, "v159", set(), tmp_path / "b")
    overlapped = {k: meta["overlapped"] for k, (_n, meta, _m) in builds.items()}
    assert overlapped == {("planted", 0): False, ("planted", 1): False, ("fixed", 1): True}
    assert len({n for n, _meta, _m in builds.values()}) == 1


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_first_fixes_timed_are_what_their_files_say() -> None:
    """truth.json's ``first_fixes`` of this part: cudnn.benchmark on v146's and torch.compile on
    v150's planted variants (gpuscope's first fix there at 9d920f2), each timed as recorded, 3
    rounds. Both scatter over more than 12 points and have 3 rounds, not 5: v146c over 29 (-11.2,
    3.4, 18.2), v150c over 22 (0.7, 19.3, 22.8); the session's device time was spent (9 s left).
    Their medians, 3.4 % and 19.3 %, are the least certain figures of the part.
    ``model.compile(mode="reduce-overhead")`` on v155's (``cuda_graphs``, first at 5be19a7,
    71.6 %), 4 rounds: 77.8 %; torch.compile on v156's (``kernel_fusion``, first at 5be19a7 at
    9.5 % on a pair chosen to gain nothing), 5 rounds on an H200: -11.5 %."""
    assert_first_fixes(record_blind9, frozenset({"v146c", "v150c"}))
    assert set(record_blind9.FIRST_FIXES) == {"v146c", "v150c", "v155c", "v156c"}
    assert {s["how"] for s in record_blind9.FIRST_FIXES.values()} == {
        "cudnn_benchmark",
        "compile",
        "cuda_graphs",
    }


@pytest.mark.slow
def test_the_first_fixes_apply_their_fix_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    pytest.importorskip("torch")
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind9, monkeypatch)
