"""What an ingest reads, returns and writes, as typed records; content-derived run ids.

Both the trace loader and the NVML reader build these (they import this module, not each other).
The NVML series records (:class:`SeriesHeader`, :class:`Sample`, :class:`GpuReading`) are what
:func:`gpuscope.ingest.nvml.ingest_samples` stores: the Live page's held window travels as them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from gpuscope.store import now_utc
from gpuscope.store.schema import RUNS


def run_id_for(shas: Iterable[str]) -> str:
    """12 hex digits of SHA-256 over the inputs' SHA-256 digests (sorted): the same files, the same id."""
    return hashlib.sha256("\n".join(sorted(shas)).encode()).hexdigest()[:12]


@dataclass
class RunRow:
    """One row of ``runs`` (see docs/schema.md); :meth:`insert` writes it."""

    run_id: str
    name: str
    kind: str  # "trace" or "nvml"
    n_ranks: int
    n_events: int
    source_bytes: int
    gpu_name: str | None = None
    torch_version: str | None = None
    tags: list[str] = field(default_factory=list)
    start_ns: int | None = None  # absolute Unix ns
    end_ns: int | None = None
    uploaded_by: str | None = None
    created_at: dt.datetime = field(default_factory=now_utc)

    def insert(self, con: Any) -> None:
        """INSERT this row (inside the caller's transaction)."""
        cols = RUNS.column_names
        values = {**dataclasses.asdict(self), "tags": sorted(set(self.tags))}
        con.execute(
            f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [values[c] for c in cols],
        )


@dataclass
class RankSummary:
    """What writing one rank file found: its rank, events and extent (trace ns)."""

    rank: int
    n_events: int
    meta: dict[str, Any]  # the trace's top-level keys but traceEvents
    offset_ns: int  # ranks.time_offset_ns
    ts_min_ns: int | None
    ts_max_ns: int | None


class GpuReading(msgspec.Struct, frozen=True):
    """One GPU's readings of one poll, in ``nvml_samples`` units (%, bytes, W, MHz, °C, bytes/s);
    None: N/A. The fields are ``gpu`` then ``nvml.METRIC_FIELDS``, in order (tested)."""

    gpu: int
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temp_c: float | None = None
    pcie_rx_bytes_s: float | None = None
    pcie_tx_bytes_s: float | None = None
    sm_active_pct: float | None = None
    tensor_active_pct: float | None = None


class Sample(msgspec.Struct, frozen=True):
    """One poll: its time (Unix ns) and every GPU's readings, by GPU index."""

    t_ns: int
    gpus: tuple[GpuReading, ...]


class SeriesGpu(msgspec.Struct, frozen=True):
    """One GPU as a series header describes it (``mem_total_bytes`` in bytes; None: unknown)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    mem_total_bytes: int | None = None


@dataclass(frozen=True)
class SeriesHeader:
    """What a gpuscope-nvml header says about a series: the sampler's host, its poll interval
    (ms), the GPUs it polled, when it started (Unix ns) and who wrote it (e.g. "gpuscope live
    page"; None: not said)."""

    host: str
    interval_ms: float
    gpus: tuple[SeriesGpu, ...]
    started_ns: int
    written_by: str | None = None


@dataclass
class SeriesResult:
    """One stored NVML series file (``nvml_series`` row), and the run it belongs to."""

    run_id: str
    name: str  # the run's display name
    path: str
    series_id: str
    attached: bool  # stored under an existing run (else a run of its own, kind 'nvml')
    format: str  # "gpuscope-jsonl" or "nvidia-smi-csv"
    host: str | None
    interval_ms: float | None
    n_samples: int
    n_gpus: int
    gpu_name: str | None
    start_ns: int
    end_ns: int
    warnings: list[str] = field(default_factory=list)
    duplicate: bool = False  # already stored (this result describes the stored series)
    uploaded_by: str | None = None  # runs.uploaded_by of a run of its own (None: attached, unknown)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def run_result(self) -> RunResult:
        """The series as the run it stored (or found stored, ``duplicate``)."""
        return RunResult(
            self.run_id,
            self.name,
            "nvml",
            0,
            self.n_samples,
            [self.path],
            duplicate=self.duplicate,
            gpu_name=self.gpu_name,
            warnings=list(self.warnings),
            uploaded_by=None if self.attached else self.uploaded_by,
        )


@dataclass
class RunResult:
    """What one ingested (or already present) run looks like, JSON-ready."""

    run_id: str
    name: str
    kind: str
    n_ranks: int
    n_events: int
    paths: list[str]
    duplicate: bool = False
    gpu_name: str | None = None
    warnings: list[str] = field(default_factory=list)
    uploaded_by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
