"""The validation set's eighth blind part (v130-v144, record_blind8.py over blind8_a/b/c.py): its
cases are their own group (``blind8``), held out, on model families no earlier case used; they time
every one-GPU fix once more, ask torch.compile on a convolution net whose elementwise work is
training BatchNorm (which the compiler cannot fold away) beside one whose time is in LayerNorm
chains, cuDNN's benchmark on 3-D convolutions, bf16 on an NCHW convolution net with TF32 on and on
a transformer with TF32 off, hold two pairs chosen to gain nothing (a fused optimizer over 6
tensors, a 2 x batch on a full GPU) and one 2-GPU pair whose pace-setter, rank 1, gets more of each
batch. Nothing here analyses a trace: the part is judged once, by the lead, with
``validate_gains_set.py --blind``."""

from __future__ import annotations

import pytest
from validation_parts import (
    ONE_GPU_FIXES,
    TRUTH,
    assert_compiled_fixed_only,
    assert_fifteen_with_one_two_gpu_straggler,
    assert_first_fixes,
    assert_first_fixes_apply_to_the_fixed_variant_only,
    assert_new_families,
    assert_part_layout,
    build_one_gpu_cases,
    ops_by_variant_and_rank,
    record_blind8,
    variant_pair,
)

FAMILIES = {
    "v130": "ConvFormer",
    "v131": "PeleeNet",
    "v132": "Squeezeformer",
    "v133": "FiBiNET",
    "v134": "T5",
    "v135": "ESRGAN",
    "v136": "R(2+1)D",
    "v137": "CenterNet",
    "v138": "SampleCNN",
    "v139": "PANNs",
    "v140": "TabTransformer",
    "v141": "Liquid time-constant",
    "v142": "SRCNN",
    "v143": "MLP-Mixer",
    "v144": "WaveNet",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

SAME_MATH = frozenset(record_blind8.CASES) - {"v140", "v143", "v144"}
"""The one-GPU cases whose fix leaves the step's arithmetic alone on a CPU (where autocast, pinning,
CUDA graphs, cudnn flags and the fused optimizer change nothing and torch.compile is replaced by
the model itself): both variants, seeded alike, end two steps with the same parameters. v140's and
v143's fixes are larger batches."""


def test_the_eighth_blind_part_is_its_own_held_out_group_numbered_on_from_v130() -> None:
    parts = (record_blind8.blind8_a, record_blind8.blind8_b, record_blind8.blind8_c)
    assert_part_layout(record_blind8, "blind8", 130, parts)


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    # v143's MLP-Mixer repeats v05's "MLP-mixer-style blocks" (a kernel_fusion pair; v143 is a
    # batch_size pair), missed while the family check read letter case
    assert_new_families(record_blind8, FAMILIES, repeats={"v143"})


def test_the_eighth_blind_part_covers_the_fixes_two_nulls_and_a_rank_1_pace_setter() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = list(record_blind8.CASES.values())
    assert {c["expected_fix"] for c in cases} <= set(BY_ID)
    real = [c for c in cases if not c.get("null")]
    assert {c["expected_fix"] for c in real} >= ONE_GPU_FIXES
    # bf16: a transformer with TF32 off for matmuls and cuDNN, an NCHW convolution net with TF32
    # on, each in both variants
    mp = {k: c for k, c in record_blind8.CASES.items() if c["expected_fix"] == "mixed_precision"}
    assert set(mp) == {"v134", "v135"}
    off, on = mp["v134"], mp["v135"]
    assert "fp32, TF32 off (matmuls and cuDNN) in both variants" in off["model"]
    assert off["planted"] == "fp32, TF32 off"
    assert "fp32 with TF32 on (matmuls and cuDNN) in both variants" in on["model"]
    assert "NCHW" in on["model"] and on["planted"] == "fp32 with TF32"
    assert all("bf16 autocast" in c["fix"] for c in mp.values())
    ac = [c["planted"] for c in real if c["expected_fix"] == "activation_checkpointing"]
    assert ac and all("nn.Module" in p for p in ac)
    fusion = {k: c for k, c in record_blind8.CASES.items() if c["expected_fix"] == "kernel_fusion"}
    assert set(fusion) == {"v130", "v131"} and all(c.get("compiled") for c in fusion.values())
    assert "memory-bound" in fusion["v130"]["model"]
    assert "training-mode BatchNorm" in fusion["v131"]["model"]
    (cg,) = [c for c in real if c["expected_fix"] == "cuda_graphs"]
    assert cg["planted"].startswith("eager") and "torch.cuda.graph" in cg["fix"]
    assert "capturable=True) in both variants" in cg["model"] and not cg.get("compiled")
    (cudnn,) = [c for c in real if c["expected_fix"] == "cudnn_benchmark"]
    assert "Conv3d" in cudnn["model"]
    (bs,) = [c for c in real if c["expected_fix"] == "batch_size"]
    assert bs["batch_multiple"] == 8
    nulls = {k: c for k, c in record_blind8.CASES.items() if c.get("null")}
    assert {k: c["expected_fix"] for k, c in nulls.items()} == {
        "v142": "optimizer_fused",
        "v143": "batch_size",
    }
    assert all("gains ~0" in c["fix"] for c in nulls.values())
    assert nulls["v143"]["batch_multiple"] == 2
    assert_fifteen_with_one_two_gpu_straggler(record_blind8)
    assert record_blind8.CASES["v144"]["name"] == "load_imbalance_batch"


@pytest.mark.slow
def test_every_one_gpu_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make the same model and take two steps (the CPU,
    --quick sizes; torch.compile replaced by a recorder of its calls that returns the model). Only
    the planted thing differs, as each variant's record says, and where the fix leaves the
    arithmetic alone on a CPU both variants end with the same parameters."""
    pytest.importorskip("torch")
    metas, samples, calls = build_one_gpu_cases(record_blind8, monkeypatch, SAME_MATH, ("v136",))

    pair = variant_pair(metas)

    # torch.compile: the fixed variants of v130 and v131, once each, default mode; nothing else
    assert_compiled_fixed_only(calls, metas, ("v130", "v131"))
    assert pair("v132", "checkpointed_modules")[0] > 0 == pair("v132", "checkpointed_modules")[1]
    assert pair("v133", "optimizer") == ("Adam(foreach=False)", "Adam(fused=True)")
    assert pair("v142", "optimizer") == ("Adam(foreach=False)", "Adam(fused=True)")
    assert pair("v142", "param_tensors")[0] <= 10 < pair("v133", "param_tensors")[0]
    assert pair("v134", "precision") == ("fp32, TF32 off", "bf16 autocast, TF32 off")
    assert pair("v135", "precision") == ("fp32, TF32 on", "bf16 autocast, TF32 on")
    assert pair("v136", "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
    assert pair("v137", "syncs_per_step") == (3, 0)
    assert pair("v138", "pinned") == (False, True)
    assert pair("v138", "bytes_per_step")[0] == pair("v138", "bytes_per_step")[1] > 0
    assert pair("v139", "num_workers")[0] == 0 < pair("v139", "num_workers")[1]
    assert pair("v141", "cuda_graph") == ("none", "whole step (torch.cuda.graph)")
    assert pair("v141", "graph_captured") == (False, False)  # no capture on a CPU
    assert samples["v140", "fixed"] == 8 * samples["v140", "planted"]
    assert samples["v143", "fixed"] == 2 * samples["v143", "planted"]
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in SAME_MATH)


@pytest.mark.slow
def test_rank_1_of_the_planted_two_gpu_case_gets_more_of_each_batch(
    tmp_path, one_thread: None
) -> None:
    """v144's builder under DDP (gloo, one process, --quick sizes): planted, rank 1 gets 1.5 x rank
    0's sequences; fixed, both the same, the total unchanged; no rank runs host work of its own
    (the same ops, only a larger batch)."""
    pytest.importorskip("torch")
    _, builds = ops_by_variant_and_rank(record_blind8, "v144", set(), tmp_path)
    batch = {k: meta["batch_by_rank"] for k, (_n, meta, _m) in builds.items()}
    samples = {k: n for k, (n, _meta, _m) in builds.items()}
    (p0, p1), (f0, f1) = batch["planted", 0], batch["fixed", 1]
    assert batch["planted", 1] == [p0, p1]
    assert p1 * 2 == p0 * 3 and f0 == f1 and f0 + f1 == p0 + p1
    assert (samples["planted", 0], samples["planted", 1], samples["fixed", 1]) == (p0, p1, f1)
    for n, meta, _model in builds.values():
        assert n > 0 and meta["extra_work_rank"] == 1


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_first_fixes_timed_are_what_their_files_say() -> None:
    """truth.json's ``first_fixes`` of this part: cudnn.benchmark on v135 and v142, bf16 autocast on
    v136 and torch.compile on v137's planted variants (gpuscope's first fix there at 3ebdcbd),
    each timed as recorded, 3 rounds; ``model.compile(mode="reduce-overhead")`` on v140's
    (``cuda_graphs``, first at 5be19a7, 75.6 %), 4 rounds: 74.8 %; and on v132's, checkpointing
    kept (``cuda_graphs``, first since b262708 at 59.1 %, range 38.8-83.5), 3 rounds: 73.0 %,
    more than dropping the checkpointing's 44.5; four times v131's batch (``batch_size``, first
    at 87a823a at 58.3 % per sample), 3 rounds: −0.8 % a sample."""
    import json

    assert_first_fixes(record_blind8)
    assert set(record_blind8.FIRST_FIXES) == {
        "v135c",
        "v136c",
        "v137c",
        "v142c",
        "v140c",
        "v132c",
        "v131b",
    }
    got = {c["case"]: c for c in json.loads(TRUTH.read_text())["first_fixes"]}
    planted = {c["case"]: c for c in json.loads(TRUTH.read_text())["cases"]}["v132"]
    assert got["v132c"]["gain_pct"] == pytest.approx(73.0, abs=0.05)
    assert got["v132c"]["gain_pct"] > planted["gain_pct"] + 20  # the checkpointing's 44.5
    assert got["v131b"]["unit"] == "us per sample"
    assert got["v131b"]["gain_pct"] == pytest.approx(-0.8, abs=0.05)
    assert {s["how"] for s in record_blind8.FIRST_FIXES.values()} == {
        "cudnn_benchmark",
        "bf16",
        "compile",
        "cuda_graphs",
        "batch_size",
    }


@pytest.mark.slow
def test_the_first_fixes_apply_their_fix_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """record_common.first_fix_builders on the CPU (--quick sizes): each first fix builds its base
    case's planted variant; only variant ``fixed`` applies the fix (cudnn.benchmark set,
    ``model.compile()`` called once, the step run under ``k.ac``), as its record says; a fix the
    recorders do not apply is refused."""
    pytest.importorskip("torch")
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind8, monkeypatch)
