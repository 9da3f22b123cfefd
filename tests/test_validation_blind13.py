"""The validation set's thirteenth blind part (v193-v200, record_blind13.py over blind13_a.py): its
cases are their own group (``blind13``), held out, on model families no earlier case used, all on
one GPU: DataLoader workers where each image is augmented in numpy, the loader's pin-memory thread
for 65.5 MB of waveforms a step, a 4 x batch on a launch-bound tabular net, torch.compile of
hand-written elementwise chains, CUDA graphs on a compiled launch-bound world model, bf16 on fp32
matmuls with TF32 off, and two pairs chosen to gain nothing (workers where a sample is a slice of
a pre-made token array, one sync a step where every kernel outlasts its launch). Nothing here
analyses a trace: the part is judged once, by the lead, with ``validate_gains_set.py --blind``."""

from __future__ import annotations

from typing import Any

import pytest
from validation_parts import (
    TRUTH,
    VAL,
    assert_first_fixes,
    assert_first_fixes_apply_to_the_fixed_variant_only,
    assert_new_families,
    assert_one_gpu_pairs,
    assert_part_layout,
    assert_recorded_part,
    build_one_gpu_cases,
    counting_autocast,
    make_truth,
    record_blind13,
    record_new,
    variant_pair,
)

FAMILIES = {
    "v193": "EVA-02",
    "v194": "GPT-2",
    "v195": "Demucs",
    "v196": "TabNet",
    "v197": "Gemma",
    "v198": "DreamerV3",
    "v199": "MADE",
    "v200": "Whisper",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

FIXES = {
    "v193": "dataloader_workers",
    "v194": "dataloader_workers",
    "v195": "pin_memory",
    "v196": "batch_size",
    "v197": "kernel_fusion",
    "v198": "cuda_graphs",
    "v199": "mixed_precision",
    "v200": "host_sync",
}
"""Each case's expected fix."""

NULLS = frozenset({"v194", "v200"})
"""The pairs chosen to gain nothing, fixed before the first device call."""

SAME_MATH = frozenset(record_blind13.CASES) - {"v196"}
"""The cases whose fix leaves the step's arithmetic alone on a CPU (workers over samples seeded by
their index, pinning, which a CPU skips, autocast, a no-op there, a sync, and torch.compile
replaced by the model itself): both variants, seeded alike, end two steps with the same
parameters. v196's fix is a larger batch."""

LOADERS = ("v193", "v194", "v195")
"""The cases fed by a DataLoader."""


def test_the_thirteenth_blind_part_is_its_own_held_out_group_numbered_on_from_v193() -> None:
    assert_part_layout(record_blind13, "blind13", 193, (record_blind13.blind13_a,), count=8)
    assert record_blind13 in make_truth.BLIND_PARTS  # the fourteenth part follows it
    assert "blind13" in make_truth.GROUPS
    assert {k: (v["base"], v["how"]) for k, v in record_blind13.FIRST_FIXES.items()} == {
        "v196c": ("v196", "cuda_graphs"),
        "v200c": ("v200", "cuda_graphs"),
        "v200k": ("v200", "compile"),
    }
    # recorded (2026-11-29, one H200): every case has its timings, 3 rounds or more
    assert all((VAL / c / "timing.json").exists() for c in record_blind13.ORDER)
    assert all(make_truth.single(c) is not None for c in record_blind13.ORDER)


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind13, FAMILIES)


def test_eight_one_gpu_pairs_seven_fixes_and_two_nulls() -> None:
    cases = record_blind13.CASES
    assert len(cases) == 8
    assert_one_gpu_pairs(record_blind13, FIXES, NULLS, {"v197", "v198"})
    for k in ("v193", "v194"):  # workers: planted none, fixed 4; pinned alike in both
        assert cases[k]["planted"].startswith("DataLoader(num_workers=0)"), k
        assert cases[k]["fix"].startswith("DataLoader(num_workers=4, persistent_workers=True)")
        assert "pin_memory=True" in cases[k]["model"], k
    assert "3-Augment" in cases["v193"]["model"] and "no BLAS" in cases["v193"]["model"]
    assert "sliced from a pre-made" in cases["v194"]["model"]
    assert "pin_memory=False" in cases["v195"]["planted"]
    assert cases["v195"]["fix"].startswith("DataLoader(pin_memory=True)")
    assert all("non_blocking=True" in cases["v195"][w] for w in ("planted", "fix"))
    assert "num_workers=6" in cases["v195"]["model"]
    assert cases["v196"]["planted"] == "batch 256"
    assert cases["v196"]["fix"] == "batch 1024 (4 x B, per-sample time)"
    assert cases["v196"]["batch_multiple"] == 4
    assert cases["v197"]["planted"].startswith("eager")
    assert cases["v197"]["fix"].startswith("model.compile()")
    assert "default mode" in cases["v198"]["planted"]
    assert "mode='reduce-overhead'" in cases["v198"]["fix"]
    assert cases["v199"]["planted"] == "fp32, TF32 off"
    assert cases["v199"]["fix"] == "bf16 autocast (TF32 still off)"
    assert "no convolutions" in cases["v199"]["model"]
    assert cases["v200"]["planted"].startswith("loss.item() once per step")


@pytest.mark.slow
def test_every_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make the same model and take two steps (the CPU,
    --quick sizes; torch.compile replaced by a recorder of its calls that returns the model).
    Only the planted thing differs, as each variant's record says, and where the fix leaves the
    arithmetic alone on a CPU both variants end with the same parameters."""
    pytest.importorskip("torch")
    import torch

    flags: dict[tuple[str, str], bool] = {}
    real = record_blind13.build

    def build(case: str, variant: str, *a, **kw):
        out = real(case, variant, *a, **kw)
        flags[case, variant] = torch.backends.cuda.matmul.allow_tf32
        return out

    monkeypatch.setattr(record_blind13, "build", build)
    metas, samples, calls = build_one_gpu_cases(record_blind13, monkeypatch, SAME_MATH, ())
    pair = variant_pair(metas)

    # torch.compile: v197 fixed in its default mode; v198 in both, reduce-overhead when fixed
    modes = {key: [kw for _name, kw in got] for key, got in calls.items()}
    assert modes == {
        ("v197", "fixed"): [{}],
        ("v198", "planted"): [{}],
        ("v198", "fixed"): [{"mode": "reduce-overhead"}],
    }
    assert pair("v197", "compiled") == (False, True)
    assert pair("v198", "compiled") == (True, True)
    assert pair("v198", "compile_mode") == ("default", "reduce-overhead")
    for c in ("v193", "v194"):
        assert pair(c, "num_workers")[0] == 0 < pair(c, "num_workers")[1], c
        assert pair(c, "pin_memory") == (True, True), c
        assert pair(c, "loaded_bytes_per_step")[0] == pair(c, "loaded_bytes_per_step")[1] > 0
    assert pair("v195", "num_workers")[0] == pair("v195", "num_workers")[1] > 0
    assert pair("v195", "pinned") == (False, True)
    assert pair("v195", "bytes_per_step")[0] == pair("v195", "bytes_per_step")[1] > 0
    assert samples["v196", "fixed"] == 4 * samples["v196", "planted"]
    assert pair("v199", "precision") == ("fp32, TF32 off", "bf16 autocast, TF32 off")
    assert flags["v199", "planted"] is flags["v199", "fixed"] is False  # TF32 off in both
    assert pair("v200", "syncs_per_step") == (1, 0)
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in SAME_MATH)


@pytest.mark.slow
def test_the_loaders_differ_only_in_workers_or_pinning(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """The DataLoaders the three loading cases build (--quick sizes, on the CPU): v193's and
    v194's differ only in their workers (none planted, persistent ones fixed), pinned in both;
    v195's only in ``pin_memory`` (off planted, on fixed), with the same persistent workers."""
    pytest.importorskip("torch")
    import torch.utils.data as tud

    made: dict[tuple[str, str], dict[str, Any]] = {}
    key: list[tuple[str, str]] = []
    real_loader = tud.DataLoader

    class Recorded(real_loader):  # type: ignore[misc, valid-type]
        def __init__(self, dataset: Any, **kw: Any) -> None:
            made[key[-1]] = {"dataset": type(dataset).__name__, **kw}
            super().__init__(dataset, **kw)

    monkeypatch.setattr(tud, "DataLoader", Recorded)
    monkeypatch.setattr(record_new, "QUICK", True)
    for case in LOADERS:
        for variant in ("planted", "fixed"):
            key.append((case, variant))
            step, _n, _meta, _model = record_blind13.build(case, variant, "cpu")
            step()
            del step
    for case in ("v193", "v194"):
        p, f = made[case, "planted"], made[case, "fixed"]
        assert p.pop("pin_memory") is f.pop("pin_memory") is True, case
        assert f.pop("num_workers") > 0 and f.pop("persistent_workers") is True, case
        assert "num_workers" not in p and p == f, case
    p, f = made["v195", "planted"], made["v195", "fixed"]
    assert (p.pop("pin_memory"), f.pop("pin_memory")) == (False, True)
    assert p == f and p["num_workers"] > 0 and p["persistent_workers"] is True
    assert made["v194", "planted"]["shuffle"] is True


@pytest.mark.slow
def test_the_precision_pair_steps_under_autocast_only_when_fixed(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """v199's loss runs under the kit's bf16 autocast (``k.ac``) in the fixed variant only; the
    bf16 cases v193, v194, v195, v197 and v200 under it in both (their own bf16, not the fix).
    torch.compile returns the model (v197's fixed variant): Inductor's first compile on a CPU
    costs half a minute, and the context is entered by the model's own code either way."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)
    monkeypatch.setattr(record_new, "QUICK", True)  # the sizes the CPU tests build at
    entered = counting_autocast(monkeypatch)
    counts = {}
    for case in ("v199", "v193", "v194", "v195", "v197", "v200"):
        for variant in ("planted", "fixed"):
            entered.clear()
            step, _n, _meta, _model = record_blind13.build(case, variant, "cpu")
            step()
            del step
            counts[case, variant] = len(entered)
    assert counts.pop(("v199", "planted")) == 0 and counts.pop(("v199", "fixed")) == 1
    assert set(counts.values()) == {1}


@pytest.mark.slow
def test_the_null_sync_reads_the_loss_once_a_step_when_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """v200's planted step reads one value more to the host (``aten::_local_scalar_dense``, the
    ``.item()`` after the optimizer step) than the fixed step."""
    pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    monkeypatch.setattr(record_new, "QUICK", True)
    reads = {}  # the CPU's AdamW (neither fused nor foreach) reads each step count too
    for variant in ("planted", "fixed"):
        step, _n, _meta, _model = record_blind13.build("v200", variant, "cpu")
        step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        ev = prof.key_averages()
        reads[variant] = sum(e.count for e in ev if e.key == "aten::_local_scalar_dense")
    assert reads["planted"] - reads["fixed"] == 1


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_every_recorded_case_is_whole() -> None:
    """Once recorded, each case of the part is in truth.json as every blind part's: its group,
    held out, one trace of its planted variant, >= 3 rounds (5 where they scatter), in order;
    before the recording there is nothing of it there, and this holds trivially."""
    assert_recorded_part(record_blind13)


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_fixes_named_in_place_of_the_planted_cause_are_timed() -> None:
    """truth.json's ``first_fixes`` of this part, timed on the base cases' planted variants (one
    H200, fresh processes, alternately): reduce-overhead (gpuscope's ``cuda_graphs`` code) on v196
    and v200, where it was named first at the judgement, and ``model.compile()`` alone on v200
    (``kernel_fusion``, named second), which its own file holds (``compile_timing.json``). On
    v200 the replay gains more than twice what the fusion does, and neither is near nothing, so
    the sync the part planted there is not what holds the step back."""
    import json

    assert_first_fixes(record_blind13)
    got = {c["case"]: c for c in json.loads(TRUTH.read_text())["first_fixes"]}
    assert got["v200k"]["planted"] != got["v200c"]["planted"]  # two files, two recordings
    assert got["v196c"]["gain_pct"] == pytest.approx(86.5, abs=0.05)
    assert got["v200c"]["gain_pct"] == pytest.approx(44.6, abs=0.05)
    assert got["v200k"]["gain_pct"] == pytest.approx(16.7, abs=0.05)
    assert got["v200c"]["gain_pct"] > 2 * got["v200k"]["gain_pct"] > 2 * 3.0


@pytest.mark.slow
def test_the_fixes_named_first_apply_their_fix_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    pytest.importorskip("torch")
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind13, monkeypatch)
