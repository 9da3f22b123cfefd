"""The validation set's second blind part (v41-v54, record_blind2.py): its cases are their own
group (``blind2``), held out, cover every fix issue 43 asks for with two or more pairs chosen to
gain nothing, and its recorded truths carry one trace per rank. Nothing here analyses a trace:
the part is judged once, by the lead, with ``validate_gains_set.py --blind``."""

from __future__ import annotations

import json

import pytest
from validation_parts import (
    ONE_GPU_FIXES,
    TRUTH,
    VAL,
    assert_own_held_out_group,
    later_groups,
    record_blind2,
)

COVERED = ONE_GPU_FIXES | {"load_imbalance"}
"""The fixes the second blind part must time (issue 43, item 4), besides FSDP prefetch or DDP
overlap on 2 GPUs."""


def test_the_second_blind_part_is_its_own_held_out_group() -> None:
    assert_own_held_out_group(record_blind2, "blind2", 41)


def test_the_second_blind_part_covers_every_fix_and_two_nulls() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = record_blind2.CASES.values()
    fixes = {c["expected_fix"] for c in cases}
    assert fixes >= COVERED
    assert fixes & {"overlap_communication", "fsdp_prefetch"}
    assert fixes <= set(BY_ID)  # every expected fix is one gpuscope can name
    assert sum(bool(c.get("null")) for c in cases) >= 2
    two = [k for k, c in record_blind2.CASES.items() if c.get("gpus", 1) == 2]
    assert len(two) >= 3
    assert sum(record_blind2.CASES[k]["expected_fix"] == "load_imbalance" for k in two) >= 2
    assert 12 <= len(record_blind2.CASES) <= 14


def test_the_words_written_into_the_traces_hold_no_double_quote() -> None:
    """Kineto (torch 2.11) writes a '"' in a metadata string as '/"' (not JSON)."""
    for name, case in record_blind2.CASES.items():
        for key in ("planted", "fix", "expected_fix"):
            assert '"' not in case[key], (name, key)


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_recorded_second_blind_part_is_apart_and_whole() -> None:
    """Every recorded v41+ case: group blind2, held out, one trace per rank (17 KB-1.5 MB each), its
    timings from fresh processes on an NVIDIA GPU, >= 3 rounds; make_truth's earlier cases
    untouched by the part (they come first, in their own order)."""
    cases = json.loads(TRUTH.read_text())["cases"]
    mine = [c for c in cases if c["group"] == "blind2"]
    recorded = [k for k in record_blind2.ORDER if (VAL / k / "timing.json").exists()]
    assert [c["case"] for c in mine] == recorded
    before = [c for c in cases if c["group"] not in later_groups(record_blind2)]
    assert [c["case"] for c in before[-len(mine) :]] == recorded if mine else True
    for c in mine:
        assert c["held_out"], c["case"]
        assert c["device"].startswith("NVIDIA"), c["case"]
        assert len(c["traces"]) == c["gpus"] == record_blind2.CASES[c["case"]].get("gpus", 1)
        for t in c["traces"]:
            assert 17_000 <= (VAL / t).stat().st_size <= 1_500_000, t
        assert len(c["gain_pct_by_round"]) >= 3, c["case"]
        assert c["intended_null"] == bool(record_blind2.CASES[c["case"]].get("null"))
