"""The validation set's tenth blind part (v160-v174, record_blind10.py over blind10_a/b/c.py): its
cases are their own group (``blind10``), held out, on model families no earlier case used; they
time every one-GPU fix once more, hold two pairs chosen to gain nothing (checkpointing only the
cheap LayerNorm and GELU modules of a compute-bound decoder, doubling the batch of a GPU-bound
step) and three 2-GPU pairs: FSDP2's prefetch defeated, DTensor's eager dispatch under tensor
parallelism, and a rank given 1.5 x the other's sequences. Nothing here analyses a trace: the part
is judged once, by the lead, with ``validate_gains_set.py --blind``."""

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
    record_blind10,
    variant_pair,
)

FAMILIES = {
    "v160": "LLaMA",
    "v161": "DeiT",
    "v162": "Funnel-Transformer",
    "v163": "DeepFM",
    "v164": "MnasNet",
    "v165": "Informer",
    "v166": "PointPillars",
    "v167": "YOLO",
    "v168": "DeepLab",
    "v169": "Hyena",
    "v170": "Falcon",
    "v171": "DeBERTa",
    "v172": "Mistral",
    "v173": "Pythia",
    "v174": "RoBERTa",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

ONE_GPU = frozenset(k for k, c in record_blind10.CASES.items() if c.get("gpus", 1) == 1)
SAME_MATH = ONE_GPU - {"v169", "v174"}
"""The one-GPU cases whose fix leaves the step's arithmetic alone on a CPU (where autocast, pinning,
CUDA graphs, cudnn flags, syncs, workers, checkpointing and the fused optimizer change nothing and
torch.compile is replaced by the model itself): both variants, seeded alike, end two steps with
the same parameters. v169's and v174's fixes are larger batches."""


def test_the_tenth_blind_part_is_its_own_held_out_group_numbered_on_from_v160() -> None:
    parts = (record_blind10.blind10_a, record_blind10.blind10_b, record_blind10.blind10_c)
    assert_part_layout(record_blind10, "blind10", 160, parts)


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind10, FAMILIES)


def test_the_tenth_blind_part_covers_the_fixes_two_nulls_and_three_two_gpu_pairs() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = record_blind10.CASES
    assert {c["expected_fix"] for c in cases.values()} <= set(BY_ID)
    real = {k: c for k, c in cases.items() if not c.get("null")}
    assert {c["expected_fix"] for k, c in real.items() if k in ONE_GPU} >= ONE_GPU_FIXES
    compiled = {k for k, c in cases.items() if c.get("compiled")}
    assert {k for k, c in cases.items() if "torch.compile(" in c["fix"]} == compiled
    assert compiled == {"v163", "v171"}
    assert cases["v163"]["expected_fix"] == "kernel_fusion"
    assert cases["v171"]["expected_fix"] == "dtensor_dispatch"
    (mp,) = [c for c in real.values() if c["expected_fix"] == "mixed_precision"]
    assert mp["planted"] == "fp32, TF32 off" and "bf16 autocast" in mp["fix"]
    (ac,) = [c for c in real.values() if c["expected_fix"] == "activation_checkpointing"]
    assert "nn.Module" in ac["planted"]
    (cg,) = [c for c in real.values() if c["expected_fix"] == "cuda_graphs"]
    assert cg["planted"].startswith("eager") and "torch.cuda.graph" in cg["fix"]
    (bs,) = [c for c in real.values() if c["expected_fix"] == "batch_size"]
    assert bs["batch_multiple"] == 8 and bs["bound"] == "per_sample_time"
    nulls = {k: c for k, c in cases.items() if c.get("null")}
    assert {k: c["expected_fix"] for k, c in nulls.items()} == {
        "v173": "activation_checkpointing",
        "v174": "batch_size",
    }
    assert all("gains ~0" in c["fix"] for c in nulls.values())
    assert nulls["v174"]["batch_multiple"] == 2 and nulls["v174"]["bound"] == "per_sample_time"
    two = {k: c for k, c in cases.items() if c.get("gpus", 1) == 2}
    assert {k: c["expected_fix"] for k, c in two.items()} == {
        "v170": "fsdp_prefetch",
        "v171": "dtensor_dispatch",
        "v172": "load_imbalance",
    }
    assert "FSDP2" in two["v170"]["model"] and "rank 1" in two["v172"]["planted"]
    assert len(cases) == 15 and len(ONE_GPU) == 12


@pytest.mark.slow
def test_every_one_gpu_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make the same model and take two steps (the CPU,
    --quick sizes; torch.compile replaced by a recorder of its calls that returns the model). Only
    the planted thing differs, as each variant's record says, and where the fix leaves the
    arithmetic alone on a CPU both variants end with the same parameters."""
    pytest.importorskip("torch")
    metas, samples, calls = build_one_gpu_cases(record_blind10, monkeypatch, SAME_MATH, ("v168",))

    pair = variant_pair(metas)

    # torch.compile: the fixed variant of v163, once, default mode; nothing else
    assert_compiled_fixed_only(calls, metas, ("v163",))
    assert pair("v160", "checkpointed_modules")[0] > 0 == pair("v160", "checkpointed_modules")[1]
    assert pair("v161", "optimizer") == ("AdamW(foreach=False)", "AdamW(fused=True)")
    assert pair("v162", "precision") == ("fp32, TF32 off", "bf16 autocast, TF32 off")
    assert pair("v164", "cuda_graph") == ("none", "whole step (torch.cuda.graph)")
    assert pair("v164", "graph_captured") == (False, False)  # no capture on a CPU
    assert pair("v165", "pinned") == (False, True)
    assert pair("v165", "bytes_per_step")[0] == pair("v165", "bytes_per_step")[1] > 0
    assert pair("v166", "num_workers")[0] == 0 < pair("v166", "num_workers")[1]
    assert pair("v167", "syncs_per_step")[0] > 0 == pair("v167", "syncs_per_step")[1]
    assert pair("v168", "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
    assert pair("v173", "checkpointed_modules")[0] > 0 == pair("v173", "checkpointed_modules")[1]
    assert pair("v173", "checkpointed_kinds") == (["LayerNorm", "GELU"], [])
    assert samples["v169", "fixed"] == 8 * samples["v169", "planted"]
    assert samples["v174", "fixed"] == 2 * samples["v174", "planted"]
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in SAME_MATH)


@pytest.mark.slow
def test_the_two_gpu_cases_differ_as_planted_on_each_rank(
    tmp_path, monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """v170's, v171's and v172's builders (gloo, one process, --quick sizes): v170 planted defeats
    FSDP2's prefetch, fixed keeps its default; v171 planted runs the tensor-parallel model eager,
    fixed compiles it (torch.compile replaced by a recorder of its calls); v172 planted gives rank
    1 1.5 x rank 0's sequences, fixed splits the same total evenly."""
    pytest.importorskip("torch")
    import torch

    for d in "abc":
        (tmp_path / d).mkdir()
    _, builds = ops_by_variant_and_rank(record_blind10, "v170", set(), tmp_path / "a")
    prefetch = {k: meta["prefetch"] for k, (_n, meta, _m) in builds.items()}
    assert prefetch == {
        ("planted", 0): "defeated",
        ("planted", 1): "defeated",
        ("fixed", 1): "default",
    }
    assert len({n for n, _meta, _m in builds.values()}) == 1

    calls: list[object] = []

    def compile_(model, **kw):
        calls.append(model)
        return model

    monkeypatch.setattr(torch, "compile", compile_)
    _, builds = ops_by_variant_and_rank(record_blind10, "v171", set(), tmp_path / "b")
    compiled = {k: meta["compiled"] for k, (_n, meta, _m) in builds.items()}
    assert compiled == {("planted", 0): False, ("planted", 1): False, ("fixed", 1): True}
    assert len(calls) == 1
    monkeypatch.undo()

    _, builds = ops_by_variant_and_rank(record_blind10, "v172", set(), tmp_path / "c")
    by_rank = {k: meta["batch_by_rank"] for k, (_n, meta, _m) in builds.items()}
    (p0, p1), (f0, f1) = by_rank["planted", 1], by_rank["fixed", 1]
    assert 2 * p1 == 3 * p0 and f0 == f1 and f0 + f1 == p0 + p1
    assert builds["planted", 1][0] == p1 and builds["planted", 0][0] == p0


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_first_fix_timed_is_what_its_file_says() -> None:
    """truth.json's ``first_fixes`` of this part: bf16 autocast on v168's planted variant
    (gpuscope's first fix there at ef9789a, 26.3 %), timed as recorded, 5 rounds (23.7 %); and
    ``model.compile(mode="reduce-overhead")`` on v169's (``cuda_graphs``, first at 5be19a7,
    76.6 %), 4 rounds (85.1 %)."""
    assert_first_fixes(record_blind10)
    assert set(record_blind10.FIRST_FIXES) == {"v168c", "v169c"}
    assert record_blind10.FIRST_FIXES["v168c"]["how"] == "bf16"
    assert record_blind10.FIRST_FIXES["v169c"]["how"] == "cuda_graphs"


@pytest.mark.slow
def test_the_first_fix_applies_its_fix_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    pytest.importorskip("torch")
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind10, monkeypatch)
