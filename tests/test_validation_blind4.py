"""The validation set's fourth blind part (v70-v84, record_blind4.py): its cases are their own
group (``blind4``), held out, time the causes the third blind part's judgement missed on new
models and every other one-GPU fix once, with two pairs chosen to gain nothing and one 2-GPU
pair; its recorded truths are whole. Nothing here analyses a trace: the part is judged once, by
the lead, with ``validate_gains_set.py --blind``."""

from __future__ import annotations

import pytest
from validation_parts import (
    ONE_GPU_FIXES,
    TRUTH,
    assert_case_words,
    assert_first_fixes,
    assert_first_fixes_apply_to_the_fixed_variant_only,
    assert_own_held_out_group,
    assert_recorded_part,
    build_each_at_quick_sizes,
    earlier_cases,
    record_blind4,
)

COVERED = ONE_GPU_FIXES
"""The one-GPU fixes the fourth blind part must time (issue 43, item 4)."""


def test_the_fourth_blind_part_is_its_own_held_out_group() -> None:
    assert_own_held_out_group(record_blind4, "blind4", 70)


def test_the_models_are_new() -> None:
    """No model description of this part is one of an earlier part's."""
    earlier = {c.get("model") for c in earlier_cases(record_blind4).values()}
    mine = [c["model"] for c in record_blind4.CASES.values()]
    assert len(set(mine)) == len(mine)
    assert not set(mine) & earlier


def test_the_fourth_blind_part_covers_the_fixes_the_misses_and_two_nulls() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = list(record_blind4.CASES.values())
    fixes = [c["expected_fix"] for c in cases]
    assert set(fixes) >= COVERED
    assert set(fixes) <= set(BY_ID)  # every expected fix is one gpuscope can name
    real = [c for c in cases if not c.get("null")]
    # the third judgement's misses: bf16 on fp32 convolutions, TF32 off and on; a checkpointed
    # plain function and a checkpointed module; fusing long memory-bound chains; a 4x batch
    mp = [c for c in real if c["expected_fix"] == "mixed_precision"]
    assert {"TF32 off" in c["model"] for c in mp} == {True, False} and len(mp) == 2
    ac = [c["planted"] for c in real if c["expected_fix"] == "activation_checkpointing"]
    assert any("plain function" in p for p in ac)
    assert any("nn.Module" in p and "plain function" not in p for p in ac)
    assert any(c.get("batch_multiple") == 4 for c in real)
    assert any("memory-bound" in c["model"] for c in real if c["expected_fix"] == "kernel_fusion")
    assert sum(bool(c.get("null")) for c in cases) >= 2
    assert sum(c.get("gpus", 1) == 1 for c in cases) >= 12
    two = [c["expected_fix"] for c in cases if c.get("gpus", 1) == 2]
    assert two == ["load_imbalance"]
    assert len(cases) <= 15


def test_the_words_written_into_the_traces_hold_no_double_quote() -> None:
    """Kineto (torch 2.11) writes a '"' in a metadata string as '/"' (not JSON); a batch-size
    pair is judged per sample, with its multiple."""
    assert_case_words(record_blind4)


def test_every_case_builds_and_steps_on_the_cpu_at_tiny_sizes(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make a model and take one step (the CPU, the
    recorder's --quick sizes; torch.compile replaced by a recorder of its calls that returns the
    model: compiling is slow on a CPU; the 2-GPU case is left out: it needs a process group,
    which ``drive --quick --cpu`` starts). The checkpointing pairs checkpoint in the planted
    variant only: v71 a plain function per block, v81 the residual modules. v70 compiles its
    fixed variant only, v79 both; no other case compiles."""
    pytest.importorskip("torch")
    metas, compiles = build_each_at_quick_sizes(record_blind4, monkeypatch)
    assert metas["v71", "planted"]["checkpointed_functions"] > 0
    assert metas["v71", "fixed"]["checkpointed_functions"] == 0
    assert metas["v81", "planted"]["checkpointed_modules"] > 0
    assert metas["v81", "fixed"]["checkpointed_modules"] == 0
    assert compiles == {("v70", "fixed"): 1, ("v79", "planted"): 1, ("v79", "fixed"): 1}


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_recorded_fourth_blind_part_is_apart_and_whole() -> None:
    """Every recorded v70+ case: group blind4, held out, one trace of its planted variant per rank
    (17 KB-2 MB), timed in fresh processes on an NVIDIA GPU, >= 3 rounds (>= 5 where the rounds
    scatter), its row whole (device, torch, timings, rounds, extra); make_truth's earlier cases
    come first, in their own order."""
    assert_recorded_part(record_blind4)


def test_the_first_fixes_timed_are_what_their_files_say() -> None:
    """truth.json's ``first_fixes`` of this part: torch.compile on v82's and v75's planted
    variants (gpuscope's first fix there at 5be19a7, ``kernel_fusion`` at 11.2 % and 47.3 %),
    timed as recorded after the part: 7 rounds (19.8 %, H100) and 5 (41.8 %, H200)."""
    assert_first_fixes(record_blind4)
    assert set(record_blind4.FIRST_FIXES) == {"v82c", "v75c"}
    assert {s["how"] for s in record_blind4.FIRST_FIXES.values()} == {"compile"}


@pytest.mark.slow
def test_the_first_fixes_apply_their_fix_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    pytest.importorskip("torch")
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind4, monkeypatch)
