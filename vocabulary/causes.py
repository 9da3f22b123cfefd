"""Idle causes: the one list of what gpuscope calls a cause of GPU idle time.

Each cause has its id (what the analysis computes and the JSON says), its label (what a legend and
a table show), its colour (every chart's) and a line of help (a tooltip). The tuple :data:`CAUSES`
is in precedence order (docs/metrics.md "Precedence"): ``launch_overhead`` is decided per gap, the
others per instant. Every other module spells a cause through the constants below
(tests/test_vocabulary.py fails on a cause id written out anywhere else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

LAUNCH_OVERHEAD: Final = "launch_overhead"
DATA_LOADING: Final = "data_loading"
PAGEABLE_COPY: Final = "pageable_copy"
COMMUNICATION: Final = "communication"
HOST_SYNC: Final = "host_sync"
CPU_OVERHEAD: Final = "cpu_overhead"
OTHER: Final = "other"


@dataclass(frozen=True)
class Cause:
    """One idle cause: ``id`` (analysis, JSON), ``label`` (legends), ``colour`` (a mid-tone hex
    that reads on light and dark backgrounds), ``help`` (one line: when an idle instant is it)."""

    id: str
    label: str
    colour: str
    help: str


CAUSES: Final[tuple[Cause, ...]] = (
    Cause(
        LAUNCH_OVERHEAD,
        "Launch overhead",
        "#cc79a7",
        "work was queued, the GPU still idle: launch latency, tiny kernels",
    ),
    Cause(DATA_LOADING, "Data loading", "#e69f00", "inside a DataLoader __next__"),
    Cause(PAGEABLE_COPY, "Pageable copy", "#56b4e9", "a host-to-device copy from pageable memory"),
    Cause(COMMUNICATION, "Communication", "#8e6cbf", "inside a collective (NCCL, gloo)"),
    Cause(
        HOST_SYNC,
        "Host sync",
        "#d1495b",
        "inside a synchronizing call (.item(), cudaStreamSynchronize)",
    ),
    Cause(CPU_OVERHEAD, "CPU overhead", "#d55e00", "inside other host work (Python, framework)"),
    Cause(OTHER, "Other", "#8c8c8c", "nothing traced on the host explains it"),
)
BY_ID: Final[dict[str, Cause]] = {c.id: c for c in CAUSES}

CAUSE_IDS: Final[tuple[str, ...]] = tuple(c.id for c in CAUSES)
"""The cause ids in precedence order."""
EVIDENCE_CAUSES: Final[tuple[str, ...]] = (DATA_LOADING, PAGEABLE_COPY, COMMUNICATION, HOST_SYNC)
"""The causes read from host evidence spans, in precedence order."""
HOST_CAUSES: Final[tuple[str, ...]] = (
    LAUNCH_OVERHEAD,
    DATA_LOADING,
    PAGEABLE_COPY,
    HOST_SYNC,
    CPU_OVERHEAD,
    OTHER,
)
"""Idle causes made on the host side: the profiler's per-op cost can inflate them
(``communication`` is waiting for other ranks and is left out)."""
