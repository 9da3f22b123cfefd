"""The validation set's sixth blind part (v100-v114, record_blind6.py): its cases are their own
group (``blind6``), held out, on model families no earlier case used; they time every one-GPU fix
once more, ask bf16 on fp32 with TF32 already on twice (a matmul transformer and an NCHW
convolution net), hold three pairs chosen to gain nothing and one 2-GPU pair whose pace-setter,
rank 1, runs host work of a new kind. Nothing here analyses a trace: the part is judged once, by
the lead, with ``validate_gains_set.py --blind``."""

from __future__ import annotations

import pytest
from validation_parts import (
    ONE_GPU_FIXES,
    TRUTH,
    VAL,
    assert_case_words,
    assert_fifteen_with_one_two_gpu_straggler,
    assert_first_fixes,
    assert_new_families,
    assert_part_layout,
    assert_recorded_part,
    build_one_gpu_cases,
    ops_by_variant_and_rank,
    record_blind6,
    record_new,
    variant_pair,
)

FAMILIES = {
    "v100": "NAFNet",
    "v101": "TimeSformer",
    "v102": "GhostNet",
    "v103": "Linformer",
    "v104": "SegNet",
    "v105": "CRNN",
    "v106": "ECAPA-TDNN",
    "v107": "FaceNet",
    "v108": "Neural ODE",
    "v109": "ERFNet",
    "v110": "Bahdanau",
    "v111": "PSPNet",
    "v112": "ELECTRA",
    "v113": "Xception",
    "v114": "Res2Net",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

SAME_MATH = frozenset(record_blind6.CASES) - {"v110", "v114"}
"""The one-GPU cases whose fix leaves the step's arithmetic alone on a CPU (where autocast, pinning,
CUDA graphs and the fused optimizer are off and torch.compile is replaced by the model itself):
both variants, seeded alike, end two steps with the same parameters. v110's fix is a 4x batch."""


def test_the_sixth_blind_part_is_its_own_group_numbered_on_from_v100() -> None:
    assert_part_layout(record_blind6, "blind6", 100)  # one module: record_blind6 itself


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind6, FAMILIES)


def test_the_sixth_blind_part_covers_the_fixes_three_nulls_and_a_rank_1_pace_setter() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = list(record_blind6.CASES.values())
    fixes = [c["expected_fix"] for c in cases]
    assert set(fixes) <= set(BY_ID)  # every expected fix is one gpuscope can name
    real = [c for c in cases if not c.get("null")]
    assert {c["expected_fix"] for c in real} >= ONE_GPU_FIXES  # each fix gains somewhere
    # bf16 on fp32 with TF32 already on (mixed_precision's TF32 branch): a matmul transformer and
    # an NCHW convolution net, TF32 on in both variants
    mp = [c for c in real if c["expected_fix"] == "mixed_precision"]
    assert len(mp) == 2
    assert all("fp32 with TF32 on" in c["model"] and "in both variants" in c["model"] for c in mp)
    assert all("TF32 off" not in c["model"] + c["fix"] for c in mp)
    assert {"NCHW" in c["model"] for c in mp} == {True, False}
    assert all(c["planted"] == "fp32 with TF32" and "bf16 autocast" in c["fix"] for c in mp)
    ac = [c["planted"] for c in real if c["expected_fix"] == "activation_checkpointing"]
    assert ac and all("nn.Module" in p for p in ac)
    assert any("memory-bound" in c["model"] for c in real if c["expected_fix"] == "kernel_fusion")
    # CUDA graphs on an eager launch-bound step, captured by hand: no torch.compile in either
    (cg,) = [c for c in real if c["expected_fix"] == "cuda_graphs"]
    assert cg["planted"].startswith("eager") and "torch.cuda.graph" in cg["fix"]
    assert "capturable=True) in both variants" in cg["model"] and not cg.get("compiled")
    assert any(c.get("batch_multiple") == 4 for c in real)
    nulls = [c for c in cases if c.get("null")]
    assert len(nulls) == 3
    assert {c["expected_fix"] for c in nulls} == {
        "dataloader_workers",
        "pin_memory",
        "optimizer_fused",
    }
    assert all("gains ~0" in c["fix"] for c in nulls)
    assert_fifteen_with_one_two_gpu_straggler(record_blind6)


def test_the_words_written_into_the_traces_hold_no_double_quote() -> None:
    """Kineto (torch 2.11) writes a '"' in a metadata string as '/"' (not JSON); a batch-size
    pair is judged per sample, with its multiple."""
    assert_case_words(record_blind6)


@pytest.mark.slow
def test_every_one_gpu_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make the same model and take two steps (the CPU,
    the recorder's --quick sizes; torch.compile replaced by a recorder of its calls that returns
    the model). Only the planted thing differs, as each variant's record says (checkpointing,
    the optimizer, precision, workers, pinning, syncs, the compile, the CUDA-graph capture (none
    on a CPU), cudnn.benchmark, the batch), and where the fix leaves the arithmetic alone on a CPU
    both variants end with the same parameters."""
    pytest.importorskip("torch")
    metas, samples, calls = build_one_gpu_cases(record_blind6, monkeypatch, SAME_MATH, ("v109",))

    pair = variant_pair(metas)

    # torch.compile: v100's fixed variant, once, with the default mode; nothing else
    assert {k: v for k, v in calls.items() if v} == {("v100", "fixed"): [("NAFNet", {})]}
    assert pair("v100", "compiled") == (False, True)
    assert pair("v108", "cuda_graph") == ("none", "whole step (torch.cuda.graph)")
    assert pair("v108", "graph_captured") == (False, False)  # no capture on a CPU
    assert pair("v101", "checkpointed_modules")[0] > 0 == pair("v101", "checkpointed_modules")[1]
    assert pair("v102", "optimizer") == ("AdamW(foreach=False)", "AdamW(fused=True)")
    assert pair("v113", "optimizer") == ("AdamW(foreach=False)", "AdamW(fused=True)")
    assert pair("v103", "precision") == ("fp32, TF32 on", "bf16 autocast, TF32 on")
    assert pair("v104", "precision") == ("fp32, TF32 on", "bf16 autocast, TF32 on")
    assert pair("v105", "num_workers")[0] == 0 < pair("v105", "num_workers")[1]
    assert pair("v111", "num_workers")[0] == 0 < pair("v111", "num_workers")[1]
    for case in ("v106", "v112"):
        assert pair(case, "pinned") == (False, True)
        assert pair(case, "bytes_per_step")[0] == pair(case, "bytes_per_step")[1] > 0
    assert pair("v107", "syncs_per_step") == (2, 0)
    assert pair("v109", "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
    assert samples["v110", "fixed"] == 4 * samples["v110", "planted"]
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in SAME_MATH)


def test_the_full_sizes_are_the_ones_the_cases_state(one_thread: None) -> None:
    """The counts the model descriptions give are the builders' at full size: v102's and v113's
    parameter tensors, v106's bytes copied per step (the models are built, not run)."""
    pytest.importorskip("torch")
    saved = record_new.QUICK
    record_new.QUICK = False
    try:
        got = {c: record_blind6.build(c, "planted", "cpu")[2] for c in ("v102", "v106", "v113")}
    finally:
        record_new.QUICK = saved
    for case in ("v102", "v113"):
        tensors = f"{got[case]['param_tensors']} parameter tensors"
        assert tensors in record_blind6.CASES[case]["model"], case
    mb = got["v106"]["bytes_per_step"] / 1e6
    assert record_blind6.CASES["v106"]["planted"].startswith(f"{mb:.1f} MB per step")


@pytest.mark.slow
def test_only_rank_1_of_the_planted_two_gpu_case_does_the_extra_host_work(
    tmp_path, one_thread: None
) -> None:
    """v114's builder under DDP (gloo, one process, --quick sizes) as rank 0 and as rank 1: one
    step of the planted variant on rank 1 runs two comparisons per class (its per-class counts,
    class by class); rank 0's planted step and rank 1's fixed step run none."""
    torch = pytest.importorskip("torch")
    eqs, builds = ops_by_variant_and_rank(record_blind6, "v114", {"aten::eq"}, tmp_path)
    for n, meta, _model in builds.values():
        assert n > 0 and meta["extra_host_work_rank"] == 1
    classes = builds["planted", 1][1]["classes"]
    assert classes > 1
    assert eqs == {("planted", 1): 2 * classes, ("planted", 0): 0, ("fixed", 1): 0}
    assert torch.is_grad_enabled()


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_recorded_sixth_blind_part_is_apart_and_whole() -> None:
    """Every recorded v100+ case (none before the part's device calls): group blind6, held out, one
    trace of its planted variant per rank, timed in fresh processes on an NVIDIA GPU, >= 3 rounds
    (>= 5 where the rounds scatter), its row whole; make_truth's earlier cases come first."""
    assert_recorded_part(record_blind6)


def test_the_device_script_drives_this_part() -> None:
    """record_blind6_device.sh runs device_env.sh's drive_part on this part (its group), with the
    script's arguments and nothing else."""
    lines = (VAL / "record_blind6_device.sh").read_text().splitlines()
    commands = [x for x in lines if x and not x.startswith("#")]
    assert commands[-1] == f'drive_part {record_blind6.GROUP} "$@"'
    assert (VAL / f"record_{record_blind6.GROUP}.py").is_file()


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_first_fixes_timed_are_what_their_files_say() -> None:
    """truth.json's ``first_fixes`` of this part: each of record_blind6.FIRST_FIXES timed on its
    base case's planted variant (validation_parts.assert_first_fixes)."""
    assert_first_fixes(record_blind6)


def test_the_compile_timed_on_v107s_torch_sequential_is_void(one_thread: None, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """v107's model is an ``nn.Sequential`` of torch's layers, where ``model.compile()``, what the
    first-fix builders called when v107c was timed, compiles nothing (tests/test_cuda_graphs_eager
    shows it): v107c's entry is void, so no judgement counts it. The builders now compile through
    ``record_common.compile_in_place``: v107c's fixed variant is compiled as a subclass of its
    ``Sequential`` defined in the script, as ``torch.compile(model)`` compiles it."""
    import json

    import torch

    monkeypatch.setattr(record_new, "QUICK", True)
    compiled: list[object] = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, *a, **kw: compiled.append(self))
    _step, _n, _meta, model = record_blind6.build("v107", "planted", "cpu")
    assert type(model) is torch.nn.Sequential and compiled == []
    _step, _n, _meta, fixed = record_blind6.build("v107c", "fixed", "cpu")
    assert compiled == [fixed] and type(fixed).__module__ == "record_common"
    assert isinstance(fixed, torch.nn.Sequential)
    got = {c["case"]: c for c in json.loads(TRUTH.read_text())["first_fixes"]}
    assert "compiled nothing" in got["v107c"]["void"]
    assert [c for c, x in got.items() if "void" in x] == ["v107c"]
