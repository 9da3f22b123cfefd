"""The validation set's fourteenth blind part (v201-v208, record_blind14.py over blind14_a.py): its
cases are their own group (``blind14``), held out, on model families no earlier case used, all on
one GPU: activation checkpointing where most of the memory is free, a fused AdamW over 311
parameter tensors, cuDNN's benchmark on dilated, asymmetric and transposed convolutions, 21
``.item()`` syncs a step on short kernels, bf16 on a conv net whose convolutions already run TF32,
CUDA graphs on an eager launch-bound step, and two pairs chosen to gain nothing (torch.compile of
a step of large matmuls, 2 x the batch of a step whose kernels fill the GPU). Nothing here
analyses a trace: the part is judged once, by the lead, with ``validate_gains_set.py --blind``.
Every build here is at the --quick sizes on the CPU (the whole module: a few seconds)."""

from __future__ import annotations

import pytest
from validation_parts import (
    ONE_GPU_FIXES,
    VAL,
    assert_case_words,
    assert_device_script_drives_lanes,
    assert_graphs_and_compile_fixed_only,
    assert_new_families,
    assert_one_gpu_pairs,
    assert_part_layout,
    assert_recorded_part,
    autocast_counts,
    build_one_gpu_cases,
    make_truth,
    record_blind14,
    record_calls,
    variant_pair,
)

FAMILIES = {
    "v201": "ESM-2",
    "v202": "SAINT",
    "v203": "ENet",
    "v204": "EGNN",
    "v205": "DPN",
    "v206": "Decision Transformer",
    "v207": "OPT",
    "v208": "DnCNN",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

FIXES = {
    "v201": "activation_checkpointing",
    "v202": "optimizer_fused",
    "v203": "cudnn_benchmark",
    "v204": "host_sync",
    "v205": "mixed_precision",
    "v206": "cuda_graphs",
    "v207": "kernel_fusion",
    "v208": "batch_size",
}
"""Each case's expected fix."""

NULLS = frozenset({"v207", "v208"})
"""The pairs chosen to gain nothing, fixed before the first device call."""

SAME_MATH = frozenset(record_blind14.CASES) - {"v208"}
"""The cases whose fix leaves the step's arithmetic alone on a CPU (checkpointing, which
recomputes the same values, AdamW's fused kernel against its loop, the cudnn flag and autocast,
no-ops there, syncs, and torch.compile replaced by the model itself): both variants, seeded alike,
end two steps with the same parameters. v208's fix is a larger batch."""

AUTOCAST_BOTH = ("v201", "v207", "v208")
"""The cases that run under bf16 autocast in both variants (their own bf16, not the fix)."""


def test_the_fourteenth_blind_part_is_its_own_held_out_group_numbered_on_from_v201() -> None:
    assert_part_layout(record_blind14, "blind14", 201, (record_blind14.blind14_a,), count=8)
    assert record_blind14 in make_truth.BLIND_PARTS  # the fifteenth part follows it
    assert "blind14" in make_truth.GROUPS
    assert {k: (v["base"], v["how"]) for k, v in record_blind14.FIRST_FIXES.items()} == {
        "v203b": ("v203", "batch_size"),
        "v204c": ("v204", "cuda_graphs"),
        "v208c": ("v208", "cuda_graphs"),
    }
    # recorded (2026-11-29, two H200s): every case has its timings, 3 rounds or more, and each
    # first fix its own, v203's at four times the batch and judged per sample
    assert all((VAL / c / "timing.json").exists() for c in record_blind14.ORDER)
    assert all(make_truth.single(c) is not None for c in record_blind14.ORDER)
    batch = make_truth.first_fix("v203b")
    assert batch is not None and batch["unit"] == "us per sample"
    planted, fixed = batch["planted"], batch["fixed"]
    assert min(planted) > 5000 and max(fixed) < 5000  # us a sample: 48 a step against 12


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind14, FAMILIES)


def test_eight_one_gpu_pairs_six_fixes_and_two_nulls() -> None:
    cases = record_blind14.CASES
    assert len(cases) == 8
    assert_one_gpu_pairs(record_blind14, FIXES, NULLS, {"v206", "v207"})
    assert set(FIXES.values()) == ONE_GPU_FIXES - {"dataloader_workers", "pin_memory"}
    assert_case_words(record_blind14)  # per-sample only for v208; no '"' in a trace's words
    assert "use_reentrant=False" in cases["v201"]["planted"]
    assert cases["v201"]["fix"] == "checkpointing dropped"
    assert "most of its memory free" in cases["v201"]["model"]
    assert cases["v202"]["planted"].startswith("AdamW(foreach=False)")
    assert cases["v202"]["fix"] == "AdamW(fused=True)"
    assert "311 parameter tensors" in cases["v202"]["model"]
    assert cases["v203"]["planted"] == "torch.backends.cudnn.benchmark = False"
    assert cases["v203"]["fix"] == "torch.backends.cudnn.benchmark = True"
    assert "input size never changes" in cases["v203"]["model"]
    assert ".item()" in cases["v204"]["planted"] and "21 syncs" in cases["v204"]["planted"]
    assert "NCHW" in cases["v205"]["model"] and "channels_last" not in cases["v205"]["model"]
    assert "TF32" in cases["v205"]["planted"] and cases["v205"]["fix"].startswith("bf16 autocast")
    assert cases["v206"]["planted"].startswith("eager")
    assert "mode='reduce-overhead'" in cases["v206"]["fix"]
    assert cases["v207"]["planted"] == "eager"
    assert cases["v207"]["fix"].startswith("model.compile()")
    assert cases["v208"]["planted"] == "batch 64"
    assert cases["v208"]["fix"].startswith("batch 128 (2 x B, per-sample time")
    assert cases["v208"]["batch_multiple"] == 2


def test_the_device_script_drives_the_part_alone_or_in_lanes() -> None:
    """record_blind14_device.sh drives the part alone or in lanes, and it and the recorder name
    the same two lanes: every case once, the compiled ones first."""
    assert_device_script_drives_lanes(record_blind14)
    script = (make_truth.HERE / "record_blind14_device.sh").read_text()
    lanes = ("v206,v201,v203,v208", "v207,v202,v205,v204")
    assert all(lane in script and lane in (record_blind14.__doc__ or "") for lane in lanes)
    assert sorted(",".join(lanes).split(",")) == record_blind14.ORDER
    assert [lane.split(",")[0] for lane in lanes] == ["v206", "v207"]


def test_every_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make the same model and take two steps (the CPU,
    --quick sizes; torch.compile replaced by a recorder of its calls that returns the model).
    Only the planted thing differs, as each variant's record says, and where the fix leaves the
    arithmetic alone on a CPU both variants end with the same parameters: v201 checkpoints
    every layer planted and none fixed; v202 builds AdamW(foreach=False) planted and
    AdamW(fused=True) fixed, every other case the same AdamW in both; v203 leaves cudnn.benchmark
    off planted and on fixed; v204 reads its log to the host planted only; v205 keeps PyTorch's
    TF32 flags in both; v206 and v207 compile only when fixed; v208 doubles the batch."""
    pytest.importorskip("torch")
    rec = record_calls(record_blind14, monkeypatch)
    metas, samples, calls = build_one_gpu_cases(record_blind14, monkeypatch, SAME_MATH, ("v203",))
    pair = variant_pair(metas)

    # torch.compile: v206 fixed in reduce-overhead, v207 fixed in its default mode; nothing else
    assert_graphs_and_compile_fixed_only(calls, metas, "v206", "v207")
    # v201: each of its layers (2 at the quick sizes) checkpointed in each of two steps, planted
    assert rec.checkpoints == {("v201", "planted"): 2 * 2}
    assert pair("v201", "checkpointed_modules") == (2, 0)
    # v202: AdamW's loop planted, its fused kernel fixed; every other case one AdamW for both
    assert rec.adamw["v202", "planted"] == {"lr": 1e-4, "foreach": False}
    assert rec.adamw["v202", "fixed"] == {"lr": 1e-4, "fused": True}
    assert pair("v202", "optimizer") == ("AdamW(foreach=False)", "AdamW(fused=True)")
    assert pair("v202", "param_tensors")[0] == pair("v202", "param_tensors")[1] > 40
    for c in set(record_blind14.ORDER) - {"v202"}:
        assert rec.adamw[c, "planted"] == rec.adamw[c, "fixed"] == {"lr": 1e-4, "fused": False}, c
    # v203: the flag, as the builder leaves it (build_one_gpu_cases checks it after each step)
    assert pair("v203", "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
    assert pair("v203", "precision") == ("fp32, cuDNN TF32 on, matmul TF32 off",) * 2
    assert {"5x1", "1x5", "2x2"} <= set(pair("v203", "conv_kernels")[0])
    assert pair("v203", "dilations")[0] == [1, 2, 4, 8, 16]
    assert pair("v203", "conv_layers")[0]["ConvTranspose2d"] == 3
    # v204: 3 reads a layer (2 at the quick sizes) a step, planted only; the CPU's AdamW reads
    # each parameter's step count in both
    assert pair("v204", "syncs_per_step") == (6, 0)
    assert rec.items["v204", "planted"] - rec.items.get(("v204", "fixed"), 0) == 2 * 6
    # v205: PyTorch's defaults in both variants (cuDNN TF32 on, matmul TF32 off), NCHW
    assert rec.flags["v205", "planted"] == rec.flags["v205", "fixed"] == (True, False)
    assert pair("v205", "precision") == (
        "fp32, cuDNN TF32 on, matmul TF32 off",
        "bf16 autocast, fp32, cuDNN TF32 on, matmul TF32 off",
    )
    assert pair("v205", "memory_format") == ("NCHW", "NCHW")
    assert pair("v205", "grouped_convs")[0] > 0
    # v208: twice the samples, the same model
    assert samples["v208", "fixed"] == 2 * samples["v208", "planted"]
    assert pair("v208", "batch_multiple") == (2, 2)
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in SAME_MATH)


def test_only_the_precision_pair_adds_autocast_when_fixed(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """v205's loss runs under the kit's bf16 autocast (``k.ac``) in the fixed variant only; v201,
    v207 and v208 under it in both (their own bf16, not the fix); the fp32 cases never."""
    pytest.importorskip("torch")
    counts = autocast_counts(record_blind14, monkeypatch)
    assert counts.pop(("v205", "planted")) == 0 and counts.pop(("v205", "fixed")) == 1
    assert {k for k, v in counts.items() if v} == {
        (c, v) for c in AUTOCAST_BOTH for v in ("planted", "fixed")
    }
    assert set(counts.values()) == {0, 1}


def test_every_recorded_case_is_whole() -> None:
    """Each case of the part is in truth.json as every blind part's: its group, held out, one
    trace of its planted variant, >= 3 rounds (5 where they scatter), in order."""
    assert_recorded_part(record_blind14)
