"""The validation set's seventh blind part (v115-v129, record_blind7.py over blind7_a/b/c.py): its
cases are their own group (``blind7``), held out, on model families no earlier case used; they time
every one-GPU fix once more, ask bf16 on an NCHW convolution net with TF32 off (v72's false
promise) and on a matmul transformer with TF32 on, hold three pairs chosen to gain nothing (one of
them torch.compile of a GRU stack) and one 2-GPU pair whose pace-setter, rank 1, computes more
(longer sequences) with no host work of its own. Nothing here analyses a trace: the part is judged
once, by the lead, with ``validate_gains_set.py --blind``."""

from __future__ import annotations

import pytest
from validation_parts import (
    ONE_GPU_FIXES,
    TRUTH,
    assert_compiled_fixed_only,
    assert_fifteen_with_one_two_gpu_straggler,
    assert_first_fixes,
    assert_new_families,
    assert_part_layout,
    build_one_gpu_cases,
    ops_by_variant_and_rank,
    record_blind7,
    variant_pair,
)

FAMILIES = {
    "v115": "VQ-VAE",
    "v116": "V-Net",
    "v117": "Temporal Fusion Transformer",
    "v118": "HRNet",
    "v119": "Performer",
    "v120": "SimCLR",
    "v121": "ParticleNet",
    "v122": "RetinaNet",
    "v123": "SchNet",
    "v124": "RepVGG",
    "v125": "GRU4Rec",
    "v126": "LeViT",
    "v127": "BiSeNet",
    "v128": "DeepSpeech2",
    "v129": "ALBERT",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

SAME_MATH = frozenset(record_blind7.CASES) - {"v125", "v129"}
"""The one-GPU cases whose fix leaves the step's arithmetic alone on a CPU (where autocast, pinning,
CUDA graphs, cudnn flags and the fused optimizer change nothing and torch.compile is replaced by
the model itself): both variants, seeded alike, end two steps with the same parameters. v125's
fix is a 4x batch."""


def test_the_seventh_blind_part_is_its_own_held_out_group_numbered_on_from_v115() -> None:
    parts = (record_blind7.blind7_a, record_blind7.blind7_b, record_blind7.blind7_c)
    assert_part_layout(record_blind7, "blind7", 115, parts)


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind7, FAMILIES)


def test_the_seventh_blind_part_covers_the_fixes_three_nulls_and_a_rank_1_pace_setter() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = list(record_blind7.CASES.values())
    assert {c["expected_fix"] for c in cases} <= set(BY_ID)
    real = [c for c in cases if not c.get("null")]
    assert {c["expected_fix"] for c in real} >= ONE_GPU_FIXES
    # bf16: an NCHW convolution net with TF32 off for matmuls and cuDNN (v72's configuration),
    # and a matmul transformer with TF32 on, each in both variants
    mp = {k: c for k, c in record_blind7.CASES.items() if c["expected_fix"] == "mixed_precision"}
    assert set(mp) == {"v118", "v119"}
    off, on = mp["v118"], mp["v119"]
    assert "fp32, TF32 off (matmuls and cuDNN) in both variants" in off["model"]
    assert "NCHW" in off["model"] and off["planted"] == "fp32, TF32 off"
    assert "fp32 with TF32 on (matmuls and cuDNN) in both variants" in on["model"]
    assert "NCHW" not in on["model"] and on["planted"] == "fp32 with TF32"
    assert all("bf16 autocast" in c["fix"] for c in mp.values())
    ac = [c["planted"] for c in real if c["expected_fix"] == "activation_checkpointing"]
    assert ac and all("nn.Module" in p for p in ac)
    assert any("memory-bound" in c["model"] for c in real if c["expected_fix"] == "kernel_fusion")
    (cg,) = [c for c in real if c["expected_fix"] == "cuda_graphs"]
    assert cg["planted"].startswith("eager") and "torch.cuda.graph" in cg["fix"]
    assert "capturable=True) in both variants" in cg["model"] and not cg.get("compiled")
    (bs,) = [c for c in real if c["expected_fix"] == "batch_size"]
    assert bs["batch_multiple"] == 4 and "nn.GRU" in bs["model"]
    nulls = {k: c for k, c in record_blind7.CASES.items() if c.get("null")}
    assert {c["expected_fix"] for c in nulls.values()} == {
        "cudnn_benchmark",
        "dataloader_workers",
        "kernel_fusion",
    }
    assert all("gains ~0" in c["fix"] for c in nulls.values())
    assert nulls["v128"].get("compiled") and "nn.GRU" in nulls["v128"]["model"]
    assert_fifteen_with_one_two_gpu_straggler(record_blind7)
    assert record_blind7.CASES["v129"]["name"] == "load_imbalance_seq"


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
        record_blind7, monkeypatch, SAME_MATH, ("v124", "v126")
    )

    pair = variant_pair(metas)

    # torch.compile: the fixed variants of v115 and v128, once each, default mode; nothing else
    assert_compiled_fixed_only(calls, metas, ("v115", "v128"))
    assert pair("v116", "checkpointed_modules")[0] > 0 == pair("v116", "checkpointed_modules")[1]
    assert pair("v117", "optimizer") == ("AdamW(foreach=False)", "AdamW(fused=True)")
    assert pair("v118", "precision") == ("fp32, TF32 off", "bf16 autocast, TF32 off")
    assert pair("v119", "precision") == ("fp32, TF32 on", "bf16 autocast, TF32 on")
    for case in ("v120", "v127"):
        assert pair(case, "num_workers")[0] == 0 < pair(case, "num_workers")[1]
    assert pair("v121", "pinned") == (False, True)
    assert pair("v121", "bytes_per_step")[0] == pair("v121", "bytes_per_step")[1] > 0
    assert pair("v122", "syncs_per_step") == (3, 0)
    assert pair("v123", "cuda_graph") == ("none", "whole step (torch.cuda.graph)")
    assert pair("v123", "graph_captured") == (False, False)  # no capture on a CPU
    for case in ("v124", "v126"):
        assert pair(case, "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
    assert samples["v125", "fixed"] == 4 * samples["v125", "planted"]
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in SAME_MATH)


@pytest.mark.slow
def test_rank_1_of_the_planted_two_gpu_case_computes_longer_sequences(
    tmp_path, one_thread: None
) -> None:
    """v129's builder under DDP (gloo, one process, --quick sizes): planted, rank 1's sequences
    are 1.5 x rank 0's; fixed, rank 1's are their mean (the same tokens split evenly); no rank
    runs host work of its own (the same ops, only longer)."""
    pytest.importorskip("torch")
    _, builds = ops_by_variant_and_rank(record_blind7, "v129", set(), tmp_path)
    seq = {k: meta["seq_len"] for k, (_n, meta, _m) in builds.items()}
    assert seq["planted", 1] * 2 == seq["planted", 0] * 3
    assert seq["fixed", 1] * 2 == seq["planted", 0] + seq["planted", 1]
    for n, meta, _model in builds.values():
        assert n > 0 and meta["extra_work_rank"] == 1


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_first_fixes_timed_are_what_their_files_say() -> None:
    """truth.json's ``first_fixes`` of this part: torch.compile on v118, v119 and v122's planted
    variants (gpuscope's first fix there at 9037c08), each timed as recorded; v122's rounds
    scattered, so it has 5 (the last 2 from a second call, rounds numbered on). And
    ``model.compile(mode="reduce-overhead")`` on v125's (``cuda_graphs``, first at 5be19a7, 73.4 %),
    6 rounds over two calls: -32.4 % (the GRU breaks the graph)."""
    assert_first_fixes(record_blind7)
    assert set(record_blind7.FIRST_FIXES) == {"v118c", "v119c", "v122c", "v125c"}
