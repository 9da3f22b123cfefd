"""The validation set's sixteenth blind part (v215-v222, record_blind16.py over blind16_a.py): its
cases are their own group (``blind16``), held out, on model families no earlier case used, all on
one GPU: CUDA graphs on an eager launch-bound step, torch.compile of sine layers, DataLoader
workers for numpy-augmented speech features (14 MB a batch), 7 host syncs a step in a graph
network, cuDNN's benchmark on 3-D convolutions, activation checkpointing where most of the memory
is free, and two pairs chosen to gain nothing (workers beside a GPU-bound step whose batches are
slices, a fused AdamW over 23 small tensors beside ~20 ms of convolutions). Nothing here analyses
a trace: the part is judged once, by the lead, with ``validate_gains_set.py --blind``. Every build
here is at the --quick sizes on the CPU (the whole module: a few seconds)."""

from __future__ import annotations

import pytest
from validation_parts import (
    VAL,
    assert_case_words,
    assert_device_script_drives_lanes,
    assert_first_fixes,
    assert_first_fixes_apply_to_the_fixed_variant_only,
    assert_graphs_and_compile_fixed_only,
    assert_new_families,
    assert_one_gpu_pairs,
    assert_part_layout,
    assert_recorded_part,
    autocast_counts,
    build_one_gpu_cases,
    make_truth,
    record_blind16,
    record_calls,
    variant_pair,
)

FAMILIES = {
    "v215": "DeepSets",
    "v216": "SIREN",
    "v217": "Wav2Letter",
    "v218": "CSPNet",
    "v219": "APPNP",
    "v220": "C3D",
    "v221": "CodeGen",
    "v222": "FSRCNN",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

FIXES = {
    "v215": "cuda_graphs",
    "v216": "kernel_fusion",
    "v217": "dataloader_workers",
    "v218": "dataloader_workers",
    "v219": "host_sync",
    "v220": "cudnn_benchmark",
    "v221": "activation_checkpointing",
    "v222": "optimizer_fused",
}
"""Each case's expected fix."""

NULLS = frozenset({"v218", "v222"})
"""The pairs chosen to gain nothing, fixed before the first device call."""

SAME_MATH = frozenset({"v215", "v216", "v219", "v220", "v221", "v222"})
"""The cases whose fix leaves the step's arithmetic alone on a CPU (torch.compile replaced by the
model itself, the masks as weights against boolean indexing, the cudnn flag, checkpointing, which
recomputes the same values, AdamW's fused kernel against its loop): both variants, seeded alike,
end two steps with the same parameters. v217 and v218 draw their batches in another order once
workers shuffle them."""


def test_the_sixteenth_blind_part_is_its_own_held_out_group_numbered_on_from_v215() -> None:
    assert_part_layout(record_blind16, "blind16", 215, (record_blind16.blind16_a,), count=8)
    assert record_blind16 in make_truth.BLIND_PARTS  # the seventeenth part follows it
    assert "blind16" in make_truth.GROUPS
    # the first fixes gpuscope named at the judgement (442e349) where the planted fix was not
    assert {k: (v["base"], v["how"]) for k, v in record_blind16.FIRST_FIXES.items()} == {
        "v216m": ("v216", "bf16"),
        "v218c": ("v218", "cuda_graphs"),
        "v219m": ("v219", "bf16"),
        "v220m": ("v220", "bf16"),
        "v221c": ("v221", "cuda_graphs"),
        "v222b": ("v222", "cudnn_benchmark"),
    }


def test_the_first_fixes_apply_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind16, monkeypatch)


def test_every_first_fix_is_timed() -> None:
    """Each first fix timed on its base case's planted variant (2026-11-30, one H200 each), >= 3
    rounds paired in order, v219's bf16 5 (its first three spread over 16 points)."""
    assert_first_fixes(record_blind16)
    assert len(make_truth.first_fix("v219m")["planted"]) == 5


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind16, FAMILIES)


def test_eight_one_gpu_pairs_seven_fixes_and_two_nulls() -> None:
    cases = record_blind16.CASES
    assert_one_gpu_pairs(record_blind16, FIXES, NULLS, {"v215", "v216"})
    assert_case_words(record_blind16)  # no batch-size pair here; no '"' in a trace's words
    assert cases["v215"]["planted"].startswith("eager")
    assert "mode='reduce-overhead'" in cases["v215"]["fix"]
    assert cases["v216"]["planted"] == "eager"
    assert cases["v216"]["fix"].startswith("model.compile()")
    for case in ("v217", "v218"):
        assert cases[case]["planted"] == "DataLoader(num_workers=0)"
        assert cases[case]["fix"].startswith("DataLoader(num_workers=")
    assert "14.3 MB a batch" in cases["v217"]["model"]
    assert "pre-made uint8 tensor" in cases["v218"]["model"]
    assert "7 syncs" in cases["v219"]["planted"] and cases["v219"]["fix"].endswith("no sync")
    assert cases["v220"]["planted"] == "torch.backends.cudnn.benchmark = False"
    assert cases["v220"]["fix"] == "torch.backends.cudnn.benchmark = True"
    assert "use_reentrant=False" in cases["v221"]["planted"]
    assert cases["v221"]["fix"] == "checkpointing dropped"
    assert "most of its memory free" in cases["v221"]["model"]
    assert cases["v222"]["planted"] == "AdamW(foreach=False)"
    assert cases["v222"]["fix"].startswith("AdamW(fused=True)")
    assert "23 parameter tensors" in cases["v222"]["model"]


def test_the_device_script_drives_the_part_alone_or_in_lanes() -> None:
    """record_blind16_device.sh drives the part alone or in lanes, and it and the recorder name
    the same two lanes: every case once, the compiled ones first, the two workers cases apart."""
    assert_device_script_drives_lanes(record_blind16)
    script = (make_truth.HERE / "record_blind16_device.sh").read_text()
    lanes = ("v215,v217,v219,v221", "v216,v218,v220,v222")
    assert all(lane in script and lane in (record_blind16.__doc__ or "") for lane in lanes)
    assert sorted(",".join(lanes).split(",")) == record_blind16.ORDER
    assert [lane.split(",")[0] for lane in lanes] == ["v215", "v216"]
    assert [sum(c in lane.split(",") for c in ("v217", "v218")) for lane in lanes] == [1, 1]


def test_every_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make the same model and take two steps (the CPU,
    --quick sizes; torch.compile replaced by a recorder of its calls that returns the model).
    Only the planted thing differs, as each variant's record says: v215 compiles in
    reduce-overhead and v216 in the default mode, fixed only; v217 and v218 start workers fixed
    only; v219 indexes by boolean masks and reads 3 values planted only; v220 leaves
    cudnn.benchmark off planted and on fixed; v221 checkpoints every layer planted; v222 builds
    AdamW(foreach=False) planted and AdamW(fused=True) fixed, every other case one AdamW."""
    pytest.importorskip("torch")
    rec = record_calls(record_blind16, monkeypatch)
    metas, samples, calls = build_one_gpu_cases(record_blind16, monkeypatch, SAME_MATH, ("v220",))
    pair = variant_pair(metas)

    # torch.compile: v215 fixed in reduce-overhead, v216 fixed in its default mode; nothing else
    assert_graphs_and_compile_fixed_only(calls, metas, "v215", "v216")
    # v217, v218: the main process loads planted, workers fixed (6 and 4 at full size, 2 quick)
    for case in ("v217", "v218"):
        assert pair(case, "num_workers") == (0, 2), case
        assert pair(case, "persistent_workers") == (False, True), case
    # v219: 4 boolean-mask indexings and 3 reads a step, planted only (two steps each)
    assert pair("v219", "syncs_per_step") == (7, 0)
    assert rec.nonzeros.get(("v219", "planted")) == 2 * 4 and ("v219", "fixed") not in rec.nonzeros
    assert rec.items["v219", "planted"] - rec.items.get(("v219", "fixed"), 0) == 2 * 3
    # v220: the flag, as the builder leaves it (build_one_gpu_cases checks it after each step)
    assert pair("v220", "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
    assert pair("v220", "conv3d_layers") == (8, 8)
    # v221: each of its layers (2 at the quick sizes) checkpointed in each of two steps, planted
    assert rec.checkpoints == {("v221", "planted"): 2 * 2}
    assert pair("v221", "checkpointed_modules") == (2, 0)
    # v222: AdamW's loop planted, its fused kernel fixed; every other case one AdamW for both
    assert rec.adamw["v222", "planted"] == {"lr": 1e-4, "foreach": False}
    assert rec.adamw["v222", "fixed"] == {"lr": 1e-4, "fused": True}
    assert pair("v222", "param_tensors") == (23, 23)
    for c in set(record_blind16.ORDER) - {"v222"}:
        assert rec.adamw[c, "planted"] == rec.adamw[c, "fixed"] == {"lr": 1e-4, "fused": False}, c
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in record_blind16.ORDER)


def test_only_the_cspnet_and_the_codegen_run_under_autocast(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """v218 and v221 run their forward under the kit's bf16 autocast in both variants (their own
    bf16, not the fix); no other case enters it in either."""
    pytest.importorskip("torch")
    counts = autocast_counts(record_blind16, monkeypatch)
    assert {k for k, v in counts.items() if v} == {
        (c, v) for c in ("v218", "v221") for v in ("planted", "fixed")
    }
    assert set(counts.values()) == {0, 1}


def test_every_recorded_case_is_whole() -> None:
    """Each recorded case of the part is in truth.json as every blind part's: its group, held
    out, one trace of its planted variant, >= 3 rounds (5 where they scatter), in order."""
    assert_recorded_part(record_blind16)
    recorded = [c for c in record_blind16.ORDER if (VAL / c / "timing.json").exists()]
    assert all(make_truth.single(c) is not None for c in recorded)
