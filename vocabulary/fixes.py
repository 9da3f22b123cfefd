"""Fix ids (the ``id`` of a recommendation, docs/metrics.md "Recommendations") and the texts of
the fixes that more than one page gives.

The Run page's recommendation (``gpuscope.analysis.recommendations``) and the Live page's advice
(``gpuscope.web.advice``) show the same title and the same code for the same fix; the analysis's
wording is the one kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DATALOADER_WORKERS: Final = "dataloader_workers"
PIN_MEMORY: Final = "pin_memory"
HOST_SYNC: Final = "host_sync"
MIXED_PRECISION: Final = "mixed_precision"
KERNEL_FUSION: Final = "kernel_fusion"
CUDA_GRAPHS: Final = "cuda_graphs"
COMPILED_OVERHEAD: Final = "compiled_overhead"
BATCH_SIZE: Final = "batch_size"
MEMORY_NEAR_FULL: Final = "memory_near_full"
CUDNN_BENCHMARK: Final = "cudnn_benchmark"
OVERLAP_COMMUNICATION: Final = "overlap_communication"
LOAD_IMBALANCE: Final = "load_imbalance"

FIX_IDS: Final[tuple[str, ...]] = (
    DATALOADER_WORKERS,
    PIN_MEMORY,
    HOST_SYNC,
    MIXED_PRECISION,
    KERNEL_FUSION,
    CUDA_GRAPHS,
    COMPILED_OVERHEAD,
    BATCH_SIZE,
    MEMORY_NEAR_FULL,
    CUDNN_BENCHMARK,
    OVERLAP_COMMUNICATION,
    LOAD_IMBALANCE,
)
"""Every recommendation id a rule can give, in tie-break order."""


@dataclass(frozen=True)
class FixText:
    """A fix's title (imperative, one line) and its code (copyable Python)."""

    title: str
    code: str


WORKERS: Final = FixText(
    "Load batches in background workers",
    "loader = DataLoader(dataset, batch_size=B, shuffle=True,\n"
    "                    num_workers=8, persistent_workers=True, prefetch_factor=4,\n"
    "                    pin_memory=True)",
)
"""``dataloader_workers`` when batches are made in the main process (the Live page's sawtooth)."""
MORE_WORKERS_TITLE: Final = "Give the DataLoader more workers"
"""``dataloader_workers``'s title when the loader has workers already (same code)."""
SYNC: Final = FixText(
    "Stop synchronising with the GPU every step",
    "total = torch.zeros((), device=device)\n"
    "for step, (x, y) in enumerate(loader):\n"
    "    loss = step_fn(x, y)\n"
    "    total += loss.detach()          # no .item() / .cpu() / print(tensor) per step\n"
    "    if step % 100 == 99:\n"
    "        print(total.item() / 100); total.zero_()\n"
    "# copies: pinned memory and x.to(device, non_blocking=True) do not wait for the GPU\n"
    "# and no boolean-mask indexing (x[mask]) in the step: use torch.where(mask, x, 0)",
)
"""``host_sync``: per-step values stay on the GPU."""
