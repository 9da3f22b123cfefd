"""GPU memory from the caching allocator's events (``profile_memory=True``): peak allocated and
reserved against the device, memory over time, by phase and by op, allocator thrash, NVML beside.
Definitions: docs/metrics.md, "Memory".

Reads ``memory_events`` (one row per allocation or free, with the allocator's totals after it).
Times are integer ns of trace time; sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from gpuscope.analysis.event_classes import RUNTIME_CATS
from gpuscope.analysis.json_row import JsonRow
from gpuscope.analysis.modules import PHASES, innermost, phase_at, phase_spans
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import execute, sql_list
from gpuscope.vocabulary.nvml_fields import MEM_USED_BYTES

if TYPE_CHECKING:
    from gpuscope.store import Connection

CUDA = 1  # c10::DeviceType::CUDA (HIP builds of PyTorch also report 1)
#: Runtime/driver calls that take memory from the driver or give it back (allocator thrash when
#: they run inside steps): cudaMalloc/cudaFree, and the virtual-memory calls of expandable segments.
MALLOC_RE = r"^(cudaMalloc|cudaFree|cuMemCreate|cuMemRelease|cuMemMap|cuMemUnmap|cuMemSetAccess|hipMalloc|hipFree)$"
NEAR_FULL_FRAC = 0.90  # peak reserved at least this share of the device: "near full"
MAX_POINTS = 2000  # the memory line keeps at most this many points (the max of each bucket)
TOP_OPS = 10
BEFORE_WINDOW = "(allocated before the window)"
NO_OP = "(no op)"


@dataclass(frozen=True)
class MemoryOp(JsonRow):
    """An op's allocations per step (the op the allocating thread was in; ``top_ops``)."""

    op: str
    allocated_bytes_per_step: float
    allocations_per_step: float


@dataclass(frozen=True)
class HeldBlock(JsonRow):
    """Bytes live at the allocation peak, by the op that allocated them (``held_at_peak``)."""

    op: str
    bytes: int


@dataclass(frozen=True)
class MallocCall(JsonRow):
    """One driver call's count and time (µs) inside the window (``malloc.by_call``)."""

    calls: int
    us: float


@dataclass(frozen=True)
class MallocStats(JsonRow):
    """cudaMalloc/cudaFree (and the virtual-memory calls, :data:`MALLOC_RE`) inside the window:
    calls, µs in all and per step, the steps with any, by call."""

    calls: int
    us: float
    us_per_step: float
    steps_with_calls: int
    by_call: dict[str, MallocCall]


@dataclass(frozen=True)
class SnapshotDevice(JsonRow):
    """One device of a memory snapshot (``torch.cuda.memory._dump_snapshot``): its segments,
    reserved / allocated / active bytes, free blocks and the largest of them (bytes)."""

    segments: int
    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    largest_free_block_bytes: int
    free_blocks: int


@dataclass(frozen=True)
class SnapshotSummary(JsonRow):
    """The memory snapshot's summary that ingest stored with the rank
    (:func:`gpuscope.ingest.memory_snapshot.snapshot_summary`): the file's name, each device by
    its index (a string), the allocator's actions by name (count)."""

    file: str | None
    devices: dict[str, SnapshotDevice]
    actions: dict[str, int]

    @classmethod
    def from_stored(cls, s: dict[str, Any]) -> SnapshotSummary:
        """The summary from the rank's metadata (a missing figure reads 0)."""
        devs, acts = s.get("devices"), s.get("actions")
        return cls(
            file=str(f) if (f := s.get("file")) is not None else None,
            devices={
                str(k): SnapshotDevice(**{n: _int(v.get(n)) or 0 for n in _SNAP_DEVICE})
                for k, v in (devs.items() if isinstance(devs, dict) else ())
                if isinstance(v, dict)
            },
            actions={
                str(k): _int(v) or 0 for k, v in (acts.items() if isinstance(acts, dict) else ())
            },
        )


_SNAP_DEVICE = tuple(SnapshotDevice.__dataclass_fields__)


@dataclass
class MemoryResult:
    """The allocator's memory on one device over the window. ``recorded`` False: the trace has no
    allocator events for the device (not recorded with profile_memory, or ingested before
    gpuscope kept them) and every figure is None."""

    recorded: bool
    device: int | None = None
    device_total_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_at_ns: int | None = None
    reserved_at_peak_bytes: int | None = None
    start_allocated_bytes: int | None = None
    n_events: int = 0
    n_steps: int = 1
    series: pd.DataFrame = field(default_factory=pd.DataFrame)  # t_ns, allocated, reserved
    by_phase: dict[str, dict[str, int]] = field(default_factory=dict)
    top_ops: list[MemoryOp] = field(default_factory=list)
    held_at_peak: list[HeldBlock] = field(default_factory=list)
    malloc: MallocStats | None = None  # None: no allocator events
    nvml: pd.DataFrame = field(default_factory=pd.DataFrame)  # t_ns, mem_used_bytes
    nvml_peak_bytes: int | None = None
    #: whether the run has NVML series at all (None: not looked); its samples come with them
    nvml_series: bool | None = None
    snapshot: SnapshotSummary | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def peak_reserved_frac(self) -> float | None:
        """Peak reserved / the device's memory (0..1), None when either is unknown."""
        if not self.peak_reserved_bytes or not self.device_total_bytes:
            return None
        return self.peak_reserved_bytes / self.device_total_bytes

    @property
    def headroom_bytes(self) -> int | None:
        """The device's memory the allocator never reserved: total − peak reserved."""
        if self.peak_reserved_bytes is None or not self.device_total_bytes:
            return None
        return self.device_total_bytes - self.peak_reserved_bytes

    @property
    def reserved_minus_allocated_at_peak_bytes(self) -> int | None:
        """Reserved but not allocated at the allocation peak (bytes; fragmentation), or None."""
        if self.reserved_at_peak_bytes is None or self.peak_allocated_bytes is None:
            return None
        return self.reserved_at_peak_bytes - self.peak_allocated_bytes

    @property
    def by_phase_per_step(self) -> dict[str, dict[str, float]]:
        """Per phase: its peak allocated bytes, and the bytes allocated and freed and the
        allocations per step."""
        per = max(1, self.n_steps)
        return {
            p: {
                "peak_allocated_bytes": v["peak"],
                "allocated_bytes_per_step": v["alloc"] / per,
                "freed_bytes_per_step": v["freed"] / per,
                "allocations_per_step": v["n"] / per,
            }
            for p, v in self.by_phase.items()
        }

    @property
    def near_full(self) -> bool:
        f = self.peak_reserved_frac
        return f is not None and f >= NEAR_FULL_FRAC

    def to_json(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "device": self.device,
            "device_total_bytes": self.device_total_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "peak_reserved_pct": 100.0 * f if (f := self.peak_reserved_frac) is not None else None,
            "peak_at_us": self.peak_at_ns / 1e3 if self.peak_at_ns is not None else None,
            "reserved_minus_allocated_at_peak_bytes": self.reserved_minus_allocated_at_peak_bytes,
            "headroom_bytes": self.headroom_bytes,
            "near_full": self.near_full,
            "start_allocated_bytes": self.start_allocated_bytes,
            "n_events": self.n_events,
            "by_phase": self.by_phase_per_step,
            "top_ops": [o.to_json() for o in self.top_ops],
            "held_at_peak": [h.to_json() for h in self.held_at_peak],
            "malloc": self.malloc.to_json() if self.malloc is not None else {},
            "nvml_peak_used_bytes": self.nvml_peak_bytes,
            "snapshot": self.snapshot.to_json() if self.snapshot is not None else None,
            "notes": list(self.notes),
        }


def _events(con: Connection, run_id: str, rank: int, device: int | None) -> pd.DataFrame:
    return con.execute(
        """SELECT ts_ns, tid, addr, bytes, total_allocated, total_reserved
           FROM memory_events
           WHERE run_id = ? AND rank = ? AND device_type = ? AND device = ?
             AND total_allocated IS NOT NULL
           ORDER BY ts_ns""",
        [run_id, int(rank), CUDA, int(device) if device is not None else -1],
    ).df()


def recorded_allocator(con: Connection, run_id: str) -> bool:
    """Whether the run holds allocator events at all: every ``memory_events`` row comes from an
    event named ``[memory]``, whose name is then among the run's names. Read from ``names`` (the
    analysis's copy of the run's, when it made one), not from ``memory_events``: a query there
    costs 25-50 ms on a lake even when the table holds nothing."""
    row = con.execute(
        "SELECT 1 FROM names WHERE run_id = ? AND name = '[memory]' LIMIT 1", [run_id]
    ).fetchone()
    return row is not None


def memory_devices(con: Connection, run_id: str, rank: int) -> list[int]:
    """The CUDA devices with allocator events on the rank."""
    if not recorded_allocator(con, run_id):
        return []
    rows = con.execute(
        "SELECT DISTINCT device FROM memory_events WHERE run_id = ? AND rank = ? AND device_type = ? "
        "ORDER BY device",
        [run_id, int(rank), CUDA],
    ).fetchall()
    return [int(r[0]) for r in rows if r[0] is not None]


def thin_max(t: np.ndarray, cols: dict[str, np.ndarray], lo: int, hi: int, n: int) -> pd.DataFrame:
    """At most ``n`` points of step series: per time bucket of ``[lo, hi]`` the bucket's first time
    and the max of each column (a peak is never thinned away)."""
    df = pd.DataFrame({"t_ns": t, **cols})
    if len(df) <= n or hi <= lo:
        return df
    k = np.floor((t - lo) * (n / (hi - lo + 1))).astype(np.int64)
    g = df.groupby(k, sort=True)
    out = g.max()
    out["t_ns"] = g["t_ns"].min()
    return out.reset_index(drop=True)


def memory_analysis(
    con: Connection,
    run_id: str,
    rank: int,
    window: Window,
    device: int | None,
    device_props: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    time_offset_ns: int = 0,
) -> MemoryResult:
    """Memory of ``device`` (the GPU the analysis is about; the one with allocator events when it
    has none) over the window; see :class:`MemoryResult`."""
    devs = memory_devices(con, run_id, rank)
    snap = (metadata or {}).get("gpuscope.memory_snapshot")
    snap = SnapshotSummary.from_stored(snap) if isinstance(snap, dict) else None
    total = _int((device_props or {}).get("totalGlobalMem"))
    if not devs:
        res = MemoryResult(recorded=False, device=device, device_total_bytes=total, snapshot=snap)
        res.notes.append(
            "no allocator events: record with torch.profiler.profile(profile_memory=True) (a run "
            "ingested before gpuscope kept them needs ingesting again)"
        )
        _nvml(con, run_id, window, res, time_offset_ns)
        return res
    dev = device if device in devs else devs[0]
    ev = _events(con, run_id, rank, dev)
    ws, we = window.start_ns, window.end_ns
    before = ev[ev["ts_ns"] < ws]
    inw = ev[(ev["ts_ns"] >= ws) & (ev["ts_ns"] < we)].reset_index(drop=True)
    res = MemoryResult(
        recorded=True, device=dev, device_total_bytes=total, n_events=len(inw),
        n_steps=window.n_steps, snapshot=snap,
    )  # fmt: skip
    start_alloc = int(before["total_allocated"].iloc[-1]) if len(before) else None
    start_res = int(before["total_reserved"].iloc[-1]) if len(before) else None
    res.start_allocated_bytes = start_alloc
    if inw.empty:
        res.notes.append("no allocator events inside the analysed window")
        if start_alloc is not None:
            res.peak_allocated_bytes, res.peak_reserved_bytes = start_alloc, start_res
            res.reserved_at_peak_bytes = start_res
        _nvml(con, run_id, window, res, time_offset_ns)
        return res
    alloc = inw["total_allocated"].to_numpy(np.int64)
    resv = inw["total_reserved"].fillna(0).to_numpy(np.int64)
    i = int(np.argmax(alloc))  # the first event at the peak
    res.peak_allocated_bytes = int(alloc[i])
    res.peak_reserved_bytes = int(resv.max())
    res.peak_at_ns = int(inw["ts_ns"].iloc[i])
    res.reserved_at_peak_bytes = int(resv[i])
    if start_alloc is not None and start_alloc > res.peak_allocated_bytes:  # held since before
        res.peak_allocated_bytes = start_alloc
    t = inw["ts_ns"].to_numpy(np.int64)
    if start_alloc is not None:  # the line starts at the window's start with the level then
        t = np.concatenate(([ws], t))
        alloc = np.concatenate(([start_alloc], alloc))
        resv = np.concatenate(([start_res or 0], resv))
    res.series = thin_max(t, {"allocated": alloc, "reserved": resv}, ws, we, MAX_POINTS)
    # by phase
    spans = phase_spans(con, run_id, rank, window)
    ph = phase_at(spans, inw["ts_ns"].to_numpy(np.int64))
    b = inw["bytes"].fillna(0).to_numpy(np.int64)
    for p in (*PHASES, "outside"):
        m = ph == p
        if not m.any():
            continue
        res.by_phase[p] = {
            "peak": int(inw["total_allocated"].to_numpy(np.int64)[m].max()),
            "alloc": int(b[m & (b > 0)].sum()),
            "freed": int(-b[m & (b < 0)].sum()),
            "n": int((m & (b > 0)).sum()),
        }
    _by_op(con, run_id, rank, window, ev, inw, res)
    _malloc(con, run_id, rank, window, res)
    _nvml(con, run_id, window, res, time_offset_ns)
    return res


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


_SEP = "\x1f"
#: Ops that only make storage: the memory is charged to the op that called them.
ALLOC_PRIMITIVES = frozenset(
    {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resize_", "aten::new_empty",
     "aten::new_empty_strided", "aten::zeros", "aten::zeros_like", "aten::zero_", "aten::fill_"}
)  # fmt: skip


def _asking_op(stack: str | None) -> str | None:
    """The op an allocation is charged to: the innermost op of the thread's stack that is not a
    storage primitive (``aten::empty_strided`` under ``aten::to`` is ``aten::to``'s memory)."""
    if stack is None:
        return None
    parts = stack.split(_SEP)
    for p in reversed(parts):
        if p not in ALLOC_PRIMITIVES:
            return p
    return parts[-1]


def _ops(con: Connection, run_id: str, rank: int, lo: int, hi: int) -> pd.DataFrame:
    """CPU ops overlapping ``[lo, hi)``, from the rank's index (no scan of ``events``)."""
    ix = RankIndex.shared(con, run_id, rank)
    return execute(
        con,
        f"""SELECT h.tid, h.ts_ns AS s, h.ts_ns + h.dur_ns AS e, n.name
            FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
            WHERE h.ph = 'X' AND h.cat IN ('cpu_op', 'Operator') AND h.dur_ns IS NOT NULL
              AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo""",
        ix.params(lo=int(lo), hi=int(hi)),
    ).df()


def _by_op(
    con: Connection,
    run_id: str,
    rank: int,
    window: Window,
    ev: pd.DataFrame,
    inw: pd.DataFrame,
    res: MemoryResult,
) -> None:
    """Bytes allocated per step by op (the innermost CPU op of the allocating thread), and the
    blocks live at the peak by the op that allocated them."""
    ops = _ops(con, run_id, rank, int(ev["ts_ns"].min()), window.end_ns)
    if ops.empty:
        names: list[str | None] = [None] * len(ev)
    else:
        stacks = innermost(
            ops["tid"].to_numpy(np.int64),
            ops["s"].to_numpy(np.int64),
            ops["e"].to_numpy(np.int64),
            [str(x) for x in ops["name"]],
            ev["tid"].fillna(-1).to_numpy(np.int64),
            ev["ts_ns"].to_numpy(np.int64),
            join=_SEP,
        )
        names = [_asking_op(x) for x in stacks]
    ev = ev.assign(op=[x or NO_OP for x in names])
    ws, we = window.start_ns, window.end_ns
    a = ev[(ev["bytes"] > 0) & (ev["ts_ns"] >= ws) & (ev["ts_ns"] < we)]
    per = max(1, window.n_steps)
    g = a.groupby("op")["bytes"].agg(["sum", "count"]).sort_values("sum", ascending=False)
    res.top_ops = [
        MemoryOp(str(k), float(r["sum"]) / per, float(r["count"]) / per)
        for k, r in g.head(TOP_OPS).iterrows()
    ]
    # live at the peak: an allocation before the peak whose block (address) was not freed before it
    peak_t = res.peak_at_ns
    if peak_t is None:
        return
    e2 = ev[ev["addr"].notna()].sort_values(["addr", "ts_ns"], kind="stable")
    nxt_t = e2.groupby("addr")["ts_ns"].shift(-1)
    nxt_b = e2.groupby("addr")["bytes"].shift(-1)
    freed_at = np.where(nxt_b.fillna(0).to_numpy() < 0, nxt_t.fillna(np.inf).to_numpy(), np.inf)
    live = e2[(e2["bytes"] > 0) & (e2["ts_ns"] <= peak_t) & (freed_at > peak_t)]
    held = live.assign(op=np.where(live["ts_ns"] < ws, BEFORE_WINDOW, live["op"]))
    hg = held.groupby("op")["bytes"].sum().sort_values(ascending=False)
    accounted = int(hg.sum())
    out = [HeldBlock(str(k), int(v)) for k, v in hg.head(TOP_OPS).items()]
    unseen = (res.peak_allocated_bytes or 0) - accounted
    if unseen > 0:  # blocks allocated before the trace began
        out.append(HeldBlock("(allocated before the trace)", int(unseen)))
    res.held_at_peak = out


def _malloc(con: Connection, run_id: str, rank: int, window: Window, res: MemoryResult) -> None:
    rows = con.execute(
        f"""SELECT n.name, e.ts_ns, e.dur_ns
            FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
            WHERE e.run_id = ? AND e.rank = ? AND e.ph = 'X'
              AND e.cat IN {sql_list(RUNTIME_CATS)}
              AND regexp_matches(n.name, '{MALLOC_RE}') AND e.ts_ns >= ? AND e.ts_ns < ?""",
        [run_id, int(rank), window.start_ns, window.end_ns],
    ).fetchall()
    bounds = window.step_bounds_ns()
    steps_with = {i for _, t, _ in rows for i, (a, b) in enumerate(bounds) if a <= int(t) < b}
    calls: dict[str, MallocCall] = {}
    for name, _, d in rows:
        c = calls.get(str(name), MallocCall(0, 0.0))
        calls[str(name)] = MallocCall(c.calls + 1, c.us + (d or 0) / 1e3)
    us = sum(c.us for c in calls.values())  # 0 (an int) without calls, as analyze --json wrote
    res.malloc = MallocStats(
        calls=len(rows),
        us=us,
        us_per_step=us / max(1, window.n_steps),
        steps_with_calls=len(steps_with),
        by_call=calls,
    )


def _nvml(con: Connection, run_id: str, window: Window, res: MemoryResult, offset: int) -> None:
    """NVML memory.used of the run's GPU (the device index; else the lowest sampled) during the
    window, on the trace clock."""
    has = con.execute("SELECT count(*) FROM nvml_series WHERE run_id = ?", [run_id]).fetchone()
    res.nvml_series = bool(has and has[0])
    if not res.nvml_series:
        return
    df = con.execute(
        """SELECT gpu, t_ns - ? AS t_ns, mem_used_bytes FROM nvml_samples
           WHERE run_id = ? AND mem_used_bytes IS NOT NULL AND t_ns >= ? AND t_ns <= ?
           ORDER BY gpu, t_ns""",
        [offset, run_id, window.start_ns + offset, window.end_ns + offset],
    ).df()
    if df.empty:
        return
    gpus = sorted(df["gpu"].unique())
    g = res.device if res.device in gpus else gpus[0]
    df = df[df["gpu"] == g][["t_ns", MEM_USED_BYTES]].reset_index(drop=True)
    res.nvml = df
    res.nvml_peak_bytes = int(df[MEM_USED_BYTES].max())
