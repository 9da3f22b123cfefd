"""The validation set's recorders and truth (sample_traces/validation/), importable by the tests of
its recorded parts, and the one-GPU fixes every blind part times (issue 43, item 4)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAL = ROOT / "sample_traces" / "validation"
TRUTH = VAL / "truth.json"
sys.path.insert(0, str(VAL))

import make_truth  # noqa: E402
import record_blind  # noqa: E402
import record_blind2  # noqa: E402
import record_blind3  # noqa: E402
import record_blind4  # noqa: E402
import record_new  # noqa: E402
import record_validation  # noqa: E402

__all__ = [
    "ONE_GPU_FIXES",
    "ROOT",
    "TRUTH",
    "VAL",
    "make_truth",
    "record_blind",
    "record_blind2",
    "record_blind3",
    "record_blind4",
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
