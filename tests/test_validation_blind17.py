"""The validation set's seventeenth blind part (v223-v225, record_blind17.py over blind17_a.py): its
cases are their own group (``blind17``), held out, on model families no earlier case used, all on
one GPU, chosen to judge the two rules set on the sixteenth part: bf16 autocast over fp32 products
bound by their weights' bytes (chosen to gain nothing), workers beside a GPU-bound step whose
batches are slices (chosen to gain nothing), and workers for numpy-augmented crops (25.2 MB of
float32 a batch). Nothing here analyses a trace: the part is judged once, by the lead, with
``validate_gains_set.py --blind``. Every build here is at the --quick sizes on the CPU."""

from __future__ import annotations

import pytest
from validation_parts import (
    VAL,
    assert_case_words,
    assert_device_script_drives_lanes,
    assert_first_fixes,
    assert_first_fixes_apply_to_the_fixed_variant_only,
    assert_new_families,
    assert_one_gpu_pairs,
    assert_part_layout,
    assert_recorded_part,
    autocast_counts,
    build_one_gpu_cases,
    make_truth,
    planted_on_meta,
    record_blind17,
    variant_pair,
)

FAMILIES = {"v223": "Soft Actor-Critic", "v224": "TResNet", "v225": "ReXNet"}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

FIXES = {"v223": "mixed_precision", "v224": "dataloader_workers", "v225": "dataloader_workers"}
"""Each case's expected fix."""

NULLS = frozenset({"v223", "v224"})
"""The pairs chosen to gain nothing, fixed before the first device call."""


def test_the_seventeenth_blind_part_is_its_own_held_out_group_numbered_on_from_v223() -> None:
    assert_part_layout(record_blind17, "blind17", 223, (record_blind17.blind17_a,), count=3)
    assert record_blind17 in make_truth.BLIND_PARTS  # the eighteenth part follows it
    assert "blind17" in make_truth.GROUPS
    assert {k: (v["base"], v["how"]) for k, v in record_blind17.FIRST_FIXES.items()} == {
        "v224c": ("v224", "cuda_graphs")
    }


def test_the_first_fix_applies_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind17, monkeypatch)


def test_the_first_fix_is_timed() -> None:
    """CUDA graphs on v224 timed on its planted variant (one H200), 5 rounds paired in order."""
    assert_first_fixes(record_blind17)
    assert len(make_truth.first_fix("v224c")["planted"]) == 5


def test_the_models_and_their_families_are_new() -> None:
    assert_new_families(record_blind17, FAMILIES)


def test_three_one_gpu_pairs_two_of_them_nulls() -> None:
    cases = record_blind17.CASES
    assert_one_gpu_pairs(record_blind17, FIXES, NULLS, set())
    assert_case_words(record_blind17)
    assert cases["v223"]["planted"] == "fp32, matmul TF32 off"
    assert cases["v223"]["fix"].startswith("bf16 autocast")
    assert "16 rows by a 268 MB weight" in cases["v223"]["model"]
    for case in ("v224", "v225"):
        assert cases[case]["planted"] == "DataLoader(num_workers=0)"
        assert cases[case]["fix"].startswith("DataLoader(num_workers=")
    assert "pre-made uint8 tensor: 7.1 MB a batch" in cases["v224"]["model"]
    assert "25.2 MB of float32 a batch" in cases["v225"]["model"]


def test_the_device_script_drives_the_part_alone_or_in_lanes() -> None:
    assert_device_script_drives_lanes(record_blind17)
    script = (make_truth.HERE / "record_blind17_device.sh").read_text()
    lanes = ("v225,v223", "v224")
    assert all(f'/{lane}"' in script and lane in (record_blind17.__doc__ or "") for lane in lanes)
    assert sorted(",".join(lanes).split(",")) == record_blind17.ORDER


def test_every_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Both variants of each case make the same model and take two steps (the CPU, --quick
    sizes): v223 computes the same losses (autocast is a no-op on the CPU), v224 and v225 start
    workers fixed only; the batches' sizes are as the descriptions say at full size."""
    pytest.importorskip("torch")
    metas, samples, calls = build_one_gpu_cases(record_blind17, monkeypatch, {"v223"}, ())
    pair = variant_pair(metas)
    assert calls == {}
    assert pair("v223", "precision") == (
        "fp32, cuDNN TF32 on, matmul TF32 off",
        "bf16 autocast, fp32, cuDNN TF32 on, matmul TF32 off",
    )
    for case in ("v224", "v225"):
        assert pair(case, "num_workers") == (0, 2), case
        assert pair(case, "persistent_workers") == (False, True), case
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in record_blind17.ORDER)


def test_full_sizes_on_the_meta_device() -> None:
    """At full size (built on the meta device, nothing run): v223's agent holds 203.5 M
    parameters, v224's batch 7.08 MB of uint8 and v225's 25.17 MB of float32."""
    pytest.importorskip("torch")
    got = planted_on_meta(record_blind17)
    params = sum(p.numel() for p in got["v223"][3].parameters())
    assert params == 203_489_314
    assert got["v224"][2]["batch_mb"] == 7.08 and got["v225"][2]["batch_mb"] == 25.17
    assert [got[c][1] for c in record_blind17.ORDER] == [16, 64, 128]


def test_only_the_fix_of_v223_adds_autocast(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """v223's losses run under the kit's bf16 autocast in the fixed variant only; v224 and v225
    run their forward under it in both (their own bf16)."""
    pytest.importorskip("torch")
    counts = autocast_counts(record_blind17, monkeypatch)
    assert counts == {
        ("v223", "planted"): 0,
        ("v223", "fixed"): 1,
        ("v224", "planted"): 1,
        ("v224", "fixed"): 1,
        ("v225", "planted"): 1,
        ("v225", "fixed"): 1,
    }


def test_every_recorded_case_is_whole() -> None:
    assert_recorded_part(record_blind17)
    recorded = [c for c in record_blind17.ORDER if (VAL / c / "timing.json").exists()]
    assert all(make_truth.single(c) is not None for c in recorded)
