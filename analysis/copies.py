"""Host-to-device copies from pageable memory: what they cost beyond their idle gaps.

A pageable copy is staged by the driver through a pinned bounce buffer, so it runs slower than a
pinned one; that slower copying counts as GPU busy time and never shows as idle. Its **excess** is
its GPU time minus the time the same bytes would take at pinned bandwidth. Pinned bandwidth comes
from the pinned host-to-device copies of the same trace (bytes / time, when they move at least
:data:`MIN_PINNED_BYTES`), else from :data:`PINNED_H2D_GBPS` for the GPU. docs/metrics.md,
"Pageable copies".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.event_classes import MEMCPY_CATS, PAGEABLE_H2D_RE, PINNED_H2D_RE
from gpuscope.analysis.rank_index import NO_DEVICE, RankIndex
from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import execute, regex, sql_list

if TYPE_CHECKING:
    from gpuscope.store import Connection

PINNED_H2D_GBPS: dict[str, float] = {
    "H100 SXM": 50.0,
    "H100 PCIe": 50.0,
    "H100 NVL": 50.0,
    "H200": 50.0,
    "H200 NVL": 50.0,
    "B200": 50.0,
    "A100": 24.0,
    "A10": 24.0,
    "L4": 24.0,
    "L40": 24.0,
    "L40S": 24.0,
    "RTX 4090": 24.0,
    "V100 SXM2": 12.0,
    "V100 PCIe": 12.0,
    "V100S PCIe": 12.0,
    "T4": 12.0,
}
"""Typical pinned host-to-device bandwidth, GB/s (10⁹ B/s), by the peak table's model: PCIe 5.0
x16 parts ≈ 50, PCIe 4.0 ≈ 24, PCIe 3.0 ≈ 12 (about 80% of the link's raw rate). Used only when
the trace has no pinned copy of its own to measure."""

MIN_PINNED_BYTES = 1 << 20
"""Pinned copies in the trace measure the bandwidth only when they move at least this much (B)."""


@dataclass
class PageableCopies:
    """Pageable host-to-device copies of one device over the window. ``gpu_ns``: their GPU time;
    ``pinned_gbps`` / ``pinned_source``: the reference bandwidth and where it comes from
    (``trace`` or ``table``); ``excess_ns`` = max(0, gpu_ns − bytes / pinned bandwidth).
    ``pinned_bytes``: the pinned host-to-device copies' bytes over the same window (with
    ``bytes``, every byte the host sent the device)."""

    copies: int
    bytes: float
    gpu_ns: int
    pinned_gbps: float | None
    pinned_source: str | None
    pinned_bytes: float = 0.0

    @property
    def pageable_gbps(self) -> float | None:
        return self.bytes / self.gpu_ns if self.gpu_ns > 0 and self.bytes > 0 else None

    @property
    def excess_ns(self) -> float:
        if not self.pinned_gbps or self.gpu_ns <= 0 or self.bytes <= 0:
            return 0.0
        return max(0.0, self.gpu_ns - self.bytes / self.pinned_gbps)

    def to_json(self) -> dict[str, Any]:
        return {
            "copies": self.copies,
            "bytes": self.bytes,
            "gpu_ns": self.gpu_ns,
            "pageable_gbps": self.pageable_gbps,
            "pinned_gbps": self.pinned_gbps,
            "pinned_source": self.pinned_source,
            "excess_ns": self.excess_ns,
        }


def pageable_copies(
    con: Connection,
    run_id: str,
    rank: int,
    window: Window,
    device: int | None,
    gpu_model: str | None,
) -> PageableCopies:
    """Pageable and pinned host-to-device copies of ``device`` in ``window``; bytes per ns = GB/s."""
    ix = RankIndex.shared(con, run_id, rank)
    pageable, pinned_ = regex(PAGEABLE_H2D_RE), regex(PINNED_H2D_RE)
    row = execute(
        con,
        f"""
        SELECT
            count(*) FILTER (WHERE {pageable}),
            coalesce(sum(g.bytes) FILTER (WHERE {pageable}), 0),
            coalesce(sum(g.e - g.s) FILTER (WHERE {pageable}), 0),
            coalesce(sum(g.bytes) FILTER (WHERE {pinned_}), 0),
            coalesce(sum(g.e - g.s) FILTER (WHERE {pinned_}), 0)
        FROM {ix.gpu()} g JOIN names n ON n.run_id = $run AND n.name_id = g.name_id
        WHERE g.cat IN {sql_list(MEMCPY_CATS)} AND g.s >= $ws AND g.s < $we AND g.dev = $dev
        """,
        ix.params(
            ws=window.start_ns, we=window.end_ns, dev=NO_DEVICE if device is None else int(device)
        ),
    ).fetchone()
    n, nbytes, dur, pin_bytes, pin_dur = row if row else (0, 0, 0, 0, 0)
    pinned: float | None = None
    source: str | None = None
    if pin_bytes and pin_dur and pin_bytes >= MIN_PINNED_BYTES:
        pinned, source = float(pin_bytes) / float(pin_dur), "trace"
    elif gpu_model in PINNED_H2D_GBPS:
        pinned, source = PINNED_H2D_GBPS[gpu_model], "table"
    return PageableCopies(
        int(n), float(nbytes or 0), int(dur or 0), pinned, source, float(pin_bytes or 0)
    )
