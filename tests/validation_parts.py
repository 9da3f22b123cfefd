"""The validation set's recorders and truth (sample_traces/validation/), importable by the tests of
its recorded parts, and the one-GPU fixes every blind part times (issue 43, item 4)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VAL = ROOT / "sample_traces" / "validation"
TRUTH = VAL / "truth.json"
sys.path.insert(0, str(VAL))

import make_truth  # noqa: E402
import record_blind  # noqa: E402
import record_blind2  # noqa: E402
import record_blind3  # noqa: E402
import record_blind4  # noqa: E402
import record_blind5  # noqa: E402
import record_new  # noqa: E402
import record_validation  # noqa: E402

__all__ = [
    "ONE_GPU_FIXES",
    "ROOT",
    "TRUTH",
    "VAL",
    "assert_case_words",
    "assert_own_held_out_group",
    "earlier_cases",
    "make_truth",
    "record_blind",
    "record_blind2",
    "record_blind3",
    "record_blind4",
    "record_blind5",
    "record_new",
    "record_validation",
]

ONE_GPU_FIXES = frozenset(
    {
        "activation_checkpointing",
        "optimizer_fused",
        "host_sync",
        "pin_memory",
        "mixed_precision",
        "kernel_fusion",
        "batch_size",
        "dataloader_workers",
        "cudnn_benchmark",
        "cuda_graphs",
    }
)
"""The one-GPU fixes each blind part must time (issue 43, item 4)."""


def earlier_cases(part: Any) -> dict[str, dict]:
    """Every case recorded before the blind part ``part`` (a recorder module: record_blind2, 3,
    4, 5), by case: v01-v28, then each earlier blind part's."""
    parts = [record_blind2, record_blind3, record_blind4, record_blind5]
    out = {**record_validation.CASES, **record_new.CASES, **record_blind.ALL}
    for p in parts[: parts.index(part)]:
        out.update(p.CASES)
    return out


def assert_own_held_out_group(part: Any, group: str, first: int) -> None:
    """The blind part ``part`` is its own held-out group ``group`` in make_truth, no case of it was
    recorded before, and its cases are numbered on from v``first`` with a builder each."""
    assert group == part.GROUP
    assert group in make_truth.GROUPS and group in make_truth.HELD_OUT_GROUPS
    for case in part.ORDER:
        assert make_truth.group(case) == group, case
    assert not set(part.CASES) & set(earlier_cases(part))
    assert [f"v{n}" for n in range(first, first + len(part.ORDER))] == part.ORDER
    if hasattr(part, "BUILDERS"):
        assert set(part.BUILDERS) == set(part.CASES)


def assert_case_words(part: Any) -> None:
    """Each case of the blind part ``part``: a batch-size pair is judged per sample, with its
    multiple, and no other is; the words written into its trace (planted, fix, expected fix)
    hold no '"', which Kineto (torch 2.11) writes as '/"' in a metadata string (not JSON)."""
    for name, c in part.CASES.items():
        per_sample = c.get("bound") == "per_sample_time"
        assert per_sample == (c["expected_fix"] == "batch_size"), name
        assert per_sample == ("batch_multiple" in c), name
        for key in ("planted", "fix", "expected_fix"):
            assert '"' not in c[key], (name, key)
