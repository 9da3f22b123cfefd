"""The validation set's nineteenth blind part (v230-v235, record_blind19.py over blind19_a.py): its
cases are their own group (``blind19``), held out, all on one GPU, on model families no earlier
case used: CUDA graphs on an eager GraphSAGE-style node classifier and on an eager NCF-style
recommender, bf16 with the model in channels_last on a SqueezeNet-style classifier,
``DataLoader(pin_memory=True)`` for a QuartzNet-style acoustic model, and two chosen to gain
nothing (``pin_memory=True`` for a GPU-bound Transformer-XL-style language model fed token ids,
bf16 in channels_last on a host-bound FractalNet-style network). Nothing here analyses a trace:
the part is judged once, by the lead, with ``validate_gains_set.py --blind``. Every build here is
at the --quick sizes on the CPU."""

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
    record_blind19,
    variant_pair,
)

FAMILIES = {
    "v230": "GraphSAGE",
    "v231": "NCF",
    "v232": "SqueezeNet",
    "v233": "QuartzNet",
    "v234": "Transformer-XL",
    "v235": "FractalNet",
}
"""Each case's architecture family, as its model description names it."""

FIXES = {
    "v230": "cuda_graphs",
    "v231": "cuda_graphs",
    "v232": "mixed_precision",
    "v233": "pin_memory",
    "v234": "pin_memory",
    "v235": "mixed_precision",
}
"""Each case's expected fix."""

NULLS = frozenset({"v234", "v235"})
"""The pairs chosen to gain nothing, fixed before the first device call."""


def test_the_nineteenth_blind_part_is_its_own_held_out_group_numbered_on_from_v230() -> None:
    assert_part_layout(record_blind19, "blind19", 230, (record_blind19.blind19_a,), count=6)
    assert record_blind19 in make_truth.BLIND_PARTS  # the twentieth part follows it
    assert "blind19" in make_truth.GROUPS
    # the first fixes gpuscope named at the judgement (a5e32cb) where the planted fix was not
    assert {k: (v["base"], v["how"]) for k, v in record_blind19.FIRST_FIXES.items()} == {
        "v232b": ("v232", "cudnn_benchmark"),
        "v235c": ("v235", "cuda_graphs"),
    }


def test_the_first_fixes_apply_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind19, monkeypatch)


def test_the_models_and_their_families_are_new() -> None:
    assert_new_families(record_blind19, FAMILIES)


def test_six_one_gpu_pairs_two_of_them_nulls() -> None:
    cases = record_blind19.CASES
    assert_one_gpu_pairs(record_blind19, FIXES, NULLS, {"v230", "v231"})
    assert_case_words(record_blind19)
    for case in ("v230", "v231"):
        assert cases[case]["planted"].startswith("eager")
        assert "mode='reduce-overhead'" in cases[case]["fix"]
    for case in ("v232", "v235"):  # the fix as gpuscope's code gives it for a convolution net
        assert cases[case]["fix"].startswith("bf16 autocast, the model in channels_last")
        assert "NCHW" in cases[case]["model"] and "TF32" in cases[case]["model"]
    for case in ("v233", "v234"):
        assert "pin_memory=False" in cases[case]["planted"]
        assert cases[case]["fix"].startswith("DataLoader(pin_memory=True)")


def test_the_device_script_drives_the_part_alone_or_in_lanes() -> None:
    assert_device_script_drives_lanes(record_blind19)
    script = (make_truth.HERE / "record_blind19_device.sh").read_text()
    lanes = ("v230,v232,v234", "v231,v233,v235")
    assert all(f'/{lane}"' in script and lane in (record_blind19.__doc__ or "") for lane in lanes)
    assert sorted(",".join(lanes).split(",")) == record_blind19.ORDER
    assert [lane.split(",")[0] for lane in lanes] == ["v230", "v231"]  # compiled first


def test_every_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Both variants of each case make the same model and take two steps (the CPU, --quick
    sizes; torch.compile replaced by a recorder of its calls): every case computes the same
    parameters in both (autocast is a no-op on the CPU, channels_last and pinning change no
    value); v230 and v231 compile in reduce-overhead, fixed only; v232 and v235 put the model in
    channels_last, fixed only; v233 and v234 pin, fixed only, through a loader of workers."""
    pytest.importorskip("torch")
    same = set(record_blind19.ORDER)
    metas, samples, calls = build_one_gpu_cases(record_blind19, monkeypatch, same, ())
    pair = variant_pair(metas)
    modes = {key: [kw for _name, kw in got] for key, got in calls.items()}
    assert modes == {
        ("v230", "fixed"): [{"mode": "reduce-overhead"}],
        ("v231", "fixed"): [{"mode": "reduce-overhead"}],
    }
    for case in ("v230", "v231"):
        assert pair(case, "compile_mode") == ("eager", "reduce-overhead")
    for case in ("v232", "v235"):
        assert pair(case, "memory_format") == ("contiguous", "channels_last")
        assert pair(case, "precision") == (
            "fp32, cuDNN TF32 on, matmul TF32 off",
            "bf16 autocast, fp32, cuDNN TF32 on, matmul TF32 off",
        )
    for case in ("v233", "v234"):
        assert pair(case, "pinned") == (False, True)
        assert pair(case, "num_workers")[0] == pair(case, "num_workers")[1] >= 1
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in record_blind19.ORDER)
    assert metas["v235", "planted"]["convolutions"] == 5 * 7 - 3 * 7  # 2 blocks at --quick


def test_full_sizes_on_the_meta_device() -> None:
    """At full size (built on the meta device, nothing run): the batches the descriptions say,
    v235's 35 convolutions, v233's 36.9 MB of features a step and v234's 131 KB of token ids."""
    pytest.importorskip("torch")
    got = planted_on_meta(record_blind19)
    assert [got[c][1] for c in record_blind19.ORDER] == [512, 2048, 256, 48, 16, 32]
    assert got["v235"][2]["convolutions"] == 35
    assert got["v233"][2]["bytes_per_step"] == 48 * 80 * 2400 * 4 + 48 * 1200 * 8
    assert round(48 * 80 * 2400 * 4 / 1e6, 1) == 36.9
    assert got["v234"][2]["bytes_per_step"] == 131_072
    layers = sum(p.numel() for p in got["v234"][3].layers.parameters())
    assert 150e6 < layers < 152e6  # 12 x 12.6 M


def test_only_the_fixes_of_v232_and_v235_add_autocast(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """v232's and v235's losses run under the kit's bf16 autocast in the fixed variant only;
    v233 and v234 run their forward under it in both (their own bf16); v230 and v231 never."""
    pytest.importorskip("torch")
    counts = autocast_counts(record_blind19, monkeypatch)
    assert counts == {
        ("v230", "planted"): 0,
        ("v230", "fixed"): 0,
        ("v231", "planted"): 0,
        ("v231", "fixed"): 0,
        ("v232", "planted"): 0,
        ("v232", "fixed"): 1,
        ("v233", "planted"): 1,
        ("v233", "fixed"): 1,
        ("v234", "planted"): 1,
        ("v234", "fixed"): 1,
        ("v235", "planted"): 0,
        ("v235", "fixed"): 1,
    }


def test_every_recorded_case_is_whole() -> None:
    assert_recorded_part(record_blind19)
    assert all((VAL / c / "timing.json").exists() for c in record_blind19.ORDER)


def test_every_first_fix_is_timed() -> None:
    """Each first fix timed on its base case's planted variant (2026-11-30, one H200), 5 rounds
    paired in order."""
    assert_first_fixes(record_blind19)
    assert [len(make_truth.first_fix(c)["planted"]) for c in ("v232b", "v235c")] == [5, 5]
