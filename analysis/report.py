"""The whole analysis of one run (one rank), as a dataclass with a stable JSON form.

:func:`analyze_run` is what ``gpuscope analyze``, ``gpuscope check`` and the web app call: it
reads the analyses of a :class:`RunAnalysis` (the run facade: one rank, each analysis computed
once) into a :class:`RunReport`. :func:`compare_runs` (in :mod:`gpuscope.analysis.compare`) diffs
two of these reports. (The facade lives here, beside the functions it calls, so that no module
of analysis imports another in a cycle.)
JSON: times in µs (floats, not rounded) unless the key says ``_ms``; percentages in %.
docs/cli-json.md documents every key.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import duckdb
import pandas as pd
from gpuscope.analysis import fixes as R
from gpuscope.analysis import flops as F
from gpuscope.analysis import gains as GN
from gpuscope.analysis import kernels as K
from gpuscope.analysis import peaks as P
from gpuscope.analysis import rank_frames
from gpuscope.analysis import rank_row as rank_row_part
from gpuscope.analysis import tensor_cores as T
from gpuscope.analysis.busy import (
    BusySplit,
    BusySummary,
    busy_in_ranges,
    busy_split,
    busy_summary,
    comm_only_ns,
)
from gpuscope.analysis.collectives import (
    CollectiveMatch,
    match_json,
    run_collectives,
    wait_by_step,
    wait_table,
)
from gpuscope.analysis.compiled import CompiledInfo, compiled_info
from gpuscope.analysis.copies import PageableCopies, pageable_copies
from gpuscope.analysis.critical_path import CriticalPath, critical_path
from gpuscope.analysis.event_classes import (
    CHANNELS_LAST_BATCH_NORM_RE,
    KERNEL_CATS,
    NATIVE_CONV_RE,
    PER_CHANNEL_GRID_RE,
)
from gpuscope.analysis.fixes.fsdp_prefetch import allgather_transfer_per_step
from gpuscope.analysis.fixes.overlap_communication import allreduce_per_step
from gpuscope.analysis.flops import FlopsResult
from gpuscope.analysis.idle import CAUSES, IdleResult, idle_analysis
from gpuscope.analysis.kernels import KernelBreakdown
from gpuscope.analysis.memory import MemoryResult, memory_analysis
from gpuscope.analysis.modules import ModulesResult, module_analysis
from gpuscope.analysis.peaks import Peak
from gpuscope.analysis.phase_patterns import PhasePatterns, phase_patterns
from gpuscope.analysis.profiler_cost import (
    ProfilerCost,
    meta_number,
    own_busy_ms_per_step,
    profiler_cost,
)
from gpuscope.analysis.rank_index import (
    RankIndex,
    close_shared,
    drop_run_names,
    forget_values,
    run_names,
)
from gpuscope.analysis.rank_row import RankRow
from gpuscope.analysis.ranks import Straggler, rank_table
from gpuscope.analysis.roofline import Roofline, roofline
from gpuscope.analysis.steps import StepRow, StepStats, Window, find_window, step_stats
from gpuscope.analysis.store_access import (
    COMM_KERNEL_RE,
    GPU_CATS,
    device_props,
    ms,
    pct,
    rank_meta,
    ranks_of,
    sql_list,
    us,
)
from gpuscope.analysis.stored_parts import read as read_parts
from gpuscope.analysis.tensor_cores import TensorCoreSummary
from gpuscope.analysis.throughput import Throughput
from gpuscope.store import read_snapshot, release_free_memory
from gpuscope.vocabulary.causes import DATA_LOADING

if TYPE_CHECKING:
    from gpuscope.store import Connection

SCHEMA = "gpuscope.analyze/1"


@dataclass
class RunReport:
    """Analysis of one rank of a run over its window. See docs/metrics.md for every definition."""

    run: dict[str, Any]
    rank: int
    window: Window
    step_stats: StepStats
    per_step: list[StepRow]
    busy: BusySummary
    idle: IdleResult
    comm_only_ns: int = 0
    throughput: Throughput | None = None
    kernels: KernelBreakdown | None = None
    tensor_cores: TensorCoreSummary | None = None
    flops: FlopsResult | None = None
    peak: Peak | None = None
    mfu_pct: float | None = None
    mfu_busy_pct: float | None = None
    achieved_tflops: float | None = None
    recommendations: list[R.Recommendation] = field(default_factory=list)
    ranks: list[RankRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    peak_dtype: Peak | None = None
    mfu_dtype_pct: float | None = None
    mfu_untraced_pct: float | None = None
    achieved_tflops_untraced: float | None = None
    profiler: ProfilerCost | None = None
    compiled: CompiledInfo | None = None
    pageable: PageableCopies | None = None
    straggler: Straggler | None = None
    split: BusySplit | None = None
    collectives: CollectiveMatch | None = None
    critical_path: CriticalPath | None = None
    gain_context: GN.Context | None = None
    memory: MemoryResult | None = None
    roofline: Roofline | None = None
    modules: ModulesResult | None = None
    # what splits the rank's parameters across ranks (fixes.base.sharded_by): "FSDP", "DTensor",
    # "compiled collectives"; None for nothing (or no fix rules read)
    sharded_by: str | None = None

    @property
    def gpu_wait_pct(self) -> float | None:
        """Communication wait, % of the window (docs/metrics.md "Busy, split")."""
        if not self.has_gpu_activity or self.split is None:
            return None
        return self.split.pct(self.split.wait_ns)

    @property
    def rank_table(self) -> pd.DataFrame:
        """Every rank's headline figures, one row per rank (see :func:`ranks.rank_table`)."""
        return rank_table(self.ranks)

    @property
    def has_gpu_activity(self) -> bool:
        """Whether the window holds recognised GPU activity (kernels, memcpys, memsets): without
        it there is no busy %, idle %, MFU or fix (docs/metrics.md, "No evidence, no figure")."""
        return self.busy.device is not None

    @property
    def gpu_busy_pct(self) -> float | None:
        return self.busy.busy_pct if self.has_gpu_activity else None

    @property
    def idle_pct(self) -> float | None:
        if not self.has_gpu_activity:
            return None
        return pct(self.idle.total_ns, self.window.duration_ns)

    @property
    def flops_per_step(self) -> float | None:
        return getattr(self.flops, "flops_per_step", None)

    @property
    def dtype(self) -> str | None:
        return getattr(self.flops, "dtype", None) or _kernel_dtype(self.tensor_cores)

    @property
    def peak_tflops(self) -> float | None:
        return getattr(self.peak, "tflops", None)

    def to_json(self) -> dict[str, Any]:
        w = self.window
        tc = self.tensor_cores
        kernels = self.kernels.to_json() if self.kernels is not None else None
        busy = {**self.busy.to_json(), "comm_only_us": us(self.comm_only_ns)}
        idle = self.idle.to_json()
        if not self.has_gpu_activity:  # no evidence, no figure
            busy["busy_pct"] = None
            idle["pct"] = None
            idle["causes_pct"] = dict.fromkeys(idle["causes_pct"])
        return {
            "schema": SCHEMA,
            "run": dict(self.run),
            "rank": self.rank,
            "device": self.busy.device,
            "window": {
                "start_us": us(w.start_ns),
                "end_us": us(w.end_ns),
                "duration_us": us(w.duration_ns),
                "steps": len(w.steps) if w.source != "trace" else 0,
                "source": w.source,
                "annotation": w.annotation,
                "warmup_steps": list(w.warmup),
            },
            "step_time_ms": self.step_stats.to_json(),
            "steps": [s.to_json() for s in self.per_step],
            "throughput": self.throughput.to_json() if self.throughput is not None else None,
            "gpu_busy_pct": self.gpu_busy_pct,
            "busy": busy,
            "idle": idle,
            "kernels": kernels,
            "tensor_core_pct": getattr(tc, "tensor_core_pct", None),
            "tc_eligible_not_tc_us": getattr(tc, "tc_eligible_not_tc_us", None),
            "fp32_gemm_us": getattr(tc, "fp32_gemm_us", None),
            "flops_per_step": self.flops_per_step,
            "flops_source": getattr(self.flops, "source", None),
            "peak_tflops": self.peak_tflops,
            "peak_dtype": getattr(self.peak, "dtype", None),
            "peak_source": getattr(self.peak, "source", None) or getattr(self.peak, "reason", None),
            "dtype": self.dtype,
            "dtype_peak_tflops": getattr(self.peak_dtype, "tflops", None),
            "achieved_tflops": self.achieved_tflops,
            "mfu_pct": self.mfu_pct,
            "mfu_dtype_pct": self.mfu_dtype_pct,
            "achieved_tflops_untraced": self.achieved_tflops_untraced,
            "mfu_untraced_pct": self.mfu_untraced_pct,
            "mfu_busy_pct": self.mfu_busy_pct,
            "profiler": self.profiler.to_json() if self.profiler is not None else None,
            "compiled": self.compiled.to_json() if self.compiled is not None else None,
            "pageable_copies": self.pageable.to_json() if self.pageable is not None else None,
            "recommendations": [r.to_json() for r in self.recommendations],
            "ranks": [r.to_json() for r in self.ranks],
            "straggler": self.straggler.to_json() if self.straggler is not None else None,
            "critical_path": (
                self.critical_path.to_json() if self.critical_path is not None else None
            ),
            "warnings": list(self.warnings),
            # issue 20 (additive): busy split, collectives matched across ranks
            "gpu_wait_pct": self.gpu_wait_pct,
            "busy_split": (
                self.split.to_json(w.n_steps)
                if self.split is not None and self.has_gpu_activity
                else None
            ),
            "collectives": (
                match_json(self.collectives, w.n_steps) if self.collectives is not None else None
            ),
            "memory": self.memory.to_json() if self.memory is not None else None,
            "roofline": self.roofline.to_json() if self.roofline is not None else None,
            "modules": self.modules.to_json() if self.modules is not None else None,
        }


def gpu_evidence_warning(con: Connection, run_id: str, rank: int, device: int | None) -> str | None:
    """The top warning of a report with no recognised GPU activity in its window (None when there
    is some): which event categories the rank does hold, so the user sees why nothing was measured."""
    if device is not None:
        return None
    rows = con.execute(
        """SELECT cat, count(*) FROM events WHERE run_id = ? AND rank = ? AND ph = 'X'
            GROUP BY cat ORDER BY count(*) DESC, cat""",
        [run_id, int(rank)],
    ).fetchall()
    in_trace = sum(int(n) for c, n in rows if c in GPU_CATS)
    held = ", ".join(f"{c or '(none)'} {n}" for c, n in rows[:6]) or "no timed events"
    where = (
        f"none inside the analysed window ({in_trace} elsewhere in the trace)"
        if in_trace
        else "none in the trace"
    )
    return (
        f"no recognised GPU activity (kernel, gpu_memcpy or gpu_memset events): {where}; "
        f"the trace holds {held}. GPU busy %, idle %, MFU and recommendations need GPU activity "
        "and are not computed (a CPU-only or unsupported-device trace, e.g. MTIA)"
    )


def _run_info(con: Connection, run_id: str) -> dict[str, Any]:
    row = con.execute("SELECT name, gpu_name, kind FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise ValueError(f"{run_id}: no such run")
    if row[2] != "trace":
        raise ValueError(f"{run_id}: not a trace run ({row[2]})")
    from gpuscope.analysis.ranks import ranks_of_world, world_sizes

    ranks = ranks_of(con, run_id)
    world = world_sizes(con, [run_id]).get(run_id)
    return {
        "id": run_id,
        "name": row[0],
        "gpu": row[1],
        "ranks": ranks,
        # issue 20: a job whose nodes still report holds fewer ranks than its world size
        "world_size": world,
        "ranks_of_world": ranks_of_world(len(ranks), world),
    }


def _units(meta: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
    """(samples, tokens) per step of the whole job and where they come from: the user's
    ``samples_per_step`` / ``tokens_per_step`` metadata (``metadata``), else the capture helper's
    per-rank values inferred from the model's input × world size (``model_input``)."""
    md = meta.get("metadata") or {}
    samples, tokens = meta_number(md, "samples_per_step"), meta_number(md, "tokens_per_step")
    if samples is not None or tokens is not None:
        return samples, tokens, "metadata"
    s_r = meta_number(md, "gpuscope.samples_per_step_rank")
    t_r = meta_number(md, "gpuscope.tokens_per_step_rank")
    if s_r is None and t_r is None:
        s_r, t_r = _units_from_shape(
            md.get("gpuscope.model_input_shape"), md.get("gpuscope.model_input_dtype")
        )
    if s_r is None and t_r is None:
        return None, None, None
    ws = meta_number(md, "gpuscope.world_size") or meta_number(meta, "world_size") or 1.0
    return (
        s_r * ws if s_r is not None else None,
        t_r * ws if t_r is not None else None,
        "model_input",
    )


def _units_from_shape(shape: Any, dtype: Any) -> tuple[float | None, float | None]:
    """(samples, tokens) per rank from the model input's shape: samples = the leading dimension;
    tokens = B × S when the input is an integer 2-D tensor (token ids)."""
    if not isinstance(shape, list) or not shape:
        return None, None
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        return None, None
    if dims[0] <= 0:
        return None, None
    is_int = isinstance(dtype, str) and "int" in dtype.lower()
    tokens = float(dims[0] * dims[1]) if is_int and len(dims) == 2 and dims[1] > 0 else None
    return float(dims[0]), tokens


def _throughput(
    meta: dict[str, Any], step_ms: float, untraced_ms: float | None = None
) -> Throughput | None:
    samples, tokens, source = _units(meta)
    if (samples is None and tokens is None) or step_ms <= 0:
        return None
    sec = step_ms / 1e3
    usec = untraced_ms / 1e3 if untraced_ms else None
    return Throughput(
        samples_per_step=samples,
        tokens_per_step=tokens,
        source=source,
        samples_per_s=samples / sec if samples else None,
        tokens_per_s=tokens / sec if tokens else None,
        samples_per_s_untraced=samples / usec if samples and usec else None,
        tokens_per_s_untraced=tokens / usec if tokens and usec else None,
    )


def _kernel_stats(
    con: Connection, p: dict[str, Any], sms: int | None, conv_us: float
) -> R.KernelStats:
    """Compute kernels of the primary device (communication kernels left out). The mean SM fill
    is a float sum in the rows' stored order (``rid``): the same on every run, whatever DuckDB's
    threads (unordered, a 1 GB rank's read 0.69975490196049 or ...5086)."""
    short = int(R.SHORT_KERNEL_US * 1e3)
    gpu = p["gpu"]  # the rank's GPU-activity table (RankIndex.gpu)
    row = con.execute(
        f"""
        WITH k AS (
            SELECT least(e, $we) - greatest(s, $ws) AS d, blocks, rid, name_id,
                   name_id IN (SELECT name_id FROM names WHERE run_id = $run
                               AND regexp_matches(name, $per_channel)) AS per_channel
            FROM {gpu}
            WHERE dev = $dev AND s < $we AND e > $ws AND cat IN {sql_list(KERNEL_CATS)}
              AND name_id NOT IN (SELECT name_id FROM names WHERE run_id = $run
                                  AND regexp_matches(name, $comm))
        )
        SELECT count(*), coalesce(sum(d), 0)::BIGINT, quantile_cont(d, 0.5),
               coalesce(sum(d) FILTER (WHERE d < $short), 0)::BIGINT,
               count(*) FILTER (WHERE d < $short),
               coalesce(sum(d) FILTER (WHERE blocks < $sms AND NOT per_channel), 0)::BIGINT,
               avg(blocks / $sms ORDER BY rid) FILTER (WHERE blocks < $sms AND NOT per_channel),
               coalesce(sum(d) FILTER (WHERE name_id IN (SELECT name_id FROM names
                        WHERE run_id = $run AND regexp_matches(name, $native))), 0)::BIGINT,
               coalesce(sum(d) FILTER (WHERE name_id IN (SELECT name_id FROM names
                        WHERE run_id = $run AND regexp_matches(name, $cl_bn))), 0)::BIGINT,
               coalesce(sum(d) FILTER (WHERE blocks < $sms AND per_channel), 0)::BIGINT
        FROM k
        """,
        {
            "run": p["run"],
            "ws": p["ws"],
            "we": p["we"],
            "dev": p["dev"],
            "comm": COMM_KERNEL_RE,
            "native": NATIVE_CONV_RE,
            "cl_bn": CHANNELS_LAST_BATCH_NORM_RE,
            "per_channel": PER_CHANNEL_GRID_RE,
            "short": short,
            "sms": int(sms) if sms else 0,
        },
    ).fetchone()
    find = con.execute(
        "SELECT count(*) FROM names WHERE run_id = ? AND regexp_matches(name, ?)",
        [p["run"], r"(?i)cudnnFind|FindConvolution|cudnn_find|benchmark_conv"],
    ).fetchone()
    if row is None:
        return R.KernelStats()
    return R.KernelStats(
        n_kernels=int(row[0]),
        kernel_us=int(row[1]) / 1e3,
        median_us=float(row[2]) / 1e3 if row[2] is not None else None,
        short_us=int(row[3]) / 1e3,
        n_short=int(row[4]),
        small_grid_us=int(row[5]) / 1e3 if sms else 0.0,
        small_grid_fill=float(row[6]) if sms and row[6] is not None else None,
        conv_us=conv_us,
        cudnn_find_seen=bool(find and find[0]),
        native_conv_us=min(conv_us, int(row[7]) / 1e3),
        channels_last_bn_us=int(row[8]) / 1e3,
        per_channel_grid_us=int(row[9]) / 1e3 if sms else 0.0,
    )


def _median_busy_ms(step_busy: Sequence[Any], busy_ns: int, n_steps: int) -> float:
    """Median GPU busy time per step (ms) over the steps' busy values (ns); the window mean when
    they were not computed."""
    vals = [v for v in step_busy if v is not None]
    if vals:
        return float(statistics.median(vals)) / 1e6
    return busy_ns / 1e6 / max(1, n_steps)


def estimate_6nt(meta: dict[str, Any]) -> float | None:
    """6 · N · T: training FLOPs per step of this rank from the capture helper's parameter count N
    (``gpuscope.model_params``) and this rank's tokens per step T (``tokens_per_step`` / world
    size, else ``gpuscope.tokens_per_step_rank``). None without both (no estimate from samples:
    6·N per sample holds only for models that use each weight once per sample)."""
    md = meta.get("metadata") or {}
    n = meta_number(md, "gpuscope.model_params")
    if n is None:
        return None
    tokens = meta_number(md, "tokens_per_step")
    if tokens is not None:
        ws = meta_number(md, "gpuscope.world_size") or meta_number(meta, "world_size") or 1.0
        tokens = tokens / ws
    else:
        tokens = meta_number(md, "gpuscope.tokens_per_step_rank")
    return 6.0 * n * tokens if tokens is not None else None


def _kernel_dtype(tc: Any) -> str | None:
    """The math dtype from the kernels when FLOPs give none: the tensor-core precision with the
    most time, else fp32 when plain-fp32 matrix kernels ran."""
    by_prec = getattr(tc, "by_precision", None) or {}
    known = {k: v for k, v in by_prec.items() if k and k != "unknown" and v > 0}
    if known:
        return max(known, key=lambda k: known[k])
    if (getattr(tc, "fp32_gemm_us", None) or 0) > 0:
        return "fp32"
    return None


def _memory_used_frac(con: Connection, run_id: str, memory: MemoryResult | None) -> float | None:
    """The device's memory the run used (0..1): the allocator's peak reserved, else NVML's peak
    used, which is not asked for when the memory analysis found the run has no NVML series (a
    query on an empty lake table costs 25-50 ms)."""
    if memory is not None:
        if memory.peak_reserved_frac is not None:
            return memory.peak_reserved_frac
        if memory.nvml_series is False:
            return None
    return _mem_used_frac(con, run_id)


def _mem_used_frac(con: Connection, run_id: str) -> float | None:
    try:
        row = con.execute(
            "SELECT max(mem_used_bytes), max(mem_total_bytes) FROM nvml_samples WHERE run_id = ?",
            [run_id],
        ).fetchone()
    except duckdb.Error:
        return None
    if not row or not row[0] or not row[1]:
        return None
    return float(row[0]) / float(row[1])


def _loader_kind(idle: IdleResult) -> str | None:
    frame = idle.evidence.get(DATA_LOADING)
    if frame is None or frame.empty:
        return None
    names = " ".join(str(n) for n in frame["name"])
    if "MultiProcessing" in names:
        return "multiprocess"
    if "SingleProcess" in names:
        return "single_process"
    return None


def _rank_summary(
    con: Connection,
    run_id: str,
    rank: int,
    step_annotation: str | None,
    match: CollectiveMatch | None = None,
) -> RankRow:
    w = find_window(con, run_id, rank, step_annotation)
    b = busy_summary(con, run_id, rank, w.start_ns, w.end_ns, per_stream=False)
    comm = comm_only_ns(con, run_id, rank, w.start_ns, w.end_ns, b.device, b.busy_ns)
    st = step_stats(w)
    if b.device is None:  # no GPU activity on this rank: no evidence, no figure
        return _rank_row(
            rank,
            w,
            None,
            st.mean_ms,
            comm,
            None,
            stats=st,
            by_step=_per_step_figures(w, match, rank),
        )
    idle = idle_analysis(con, run_id, rank, w, device=b.device, top_n=0)
    split = busy_split(
        con, run_id, rank, w.start_ns, w.end_ns, b.device, wait_table(con, run_id, rank, match)
    )
    return _rank_row(
        rank,
        w,
        b.busy_pct,
        st.mean_ms,
        comm,
        idle,
        split=split,
        stats=st,
        by_step=_per_step_figures(w, match, rank),
    )


#: A rank row's per-step maps: step number -> step time (ms), and -> wait (ms).
_ByStep = tuple[dict[int, float], dict[int, float]]


def _per_step_figures(w: Window, match: CollectiveMatch | None, rank: int) -> _ByStep:
    """A rank row's per-step maps (step number -> ms): its step times and its wait in the
    collectives launched in each step (the many-ranks heatmap reads these, not events)."""
    return _step_maps(w, wait_by_step(match, rank))


def _step_maps(w: Window, waits: dict[int, int]) -> _ByStep:
    """Step number -> step time (ms) and -> wait (ms, from ``waits``: step -> ns); empty maps
    when the window's steps have no bounds of their own (a trace-wide window)."""
    bounds = w.step_bounds_ns() if w.steps and w.source != "trace" else []
    if not bounds:
        return {}, {}
    return (
        {s.number: (b[1] - b[0]) / 1e6 for s, b in zip(w.steps, bounds, strict=True)},
        {s.number: waits.get(s.number, 0) / 1e6 for s in w.steps},
    )


def _stored_lines(con: Connection, run_id: str) -> dict[int, RankRow]:
    """The ranks' lines from their stored ``rank_row`` parts (those stored at the current
    version, :mod:`gpuscope.analysis.rank_summary`)."""
    return {
        r: RankRow.from_stored(doc)
        for r, doc in read_parts(con, run_id, rank_row_part.PART, rank_row_part.VERSION).items()
    }


def rank_row(con: Connection, run_id: str, rank: int) -> RankRow:
    """One rank's line of ``ranks`` over its default (ProfilerStep) window: what the rank
    summary part ``rank_row`` stores at ingest (gpuscope.analysis.rank_summary)."""
    return _rank_summary(con, run_id, rank, None)


def _rank_row(
    rank: int,
    w: Window,
    busy_pct: float | None,
    step_ms: float,
    comm: int,
    idle: IdleResult | None,
    *,
    split: BusySplit | None = None,
    stats: StepStats | None = None,
    by_step: _ByStep = ({}, {}),
) -> RankRow:
    """One row of ``ranks``: busy %, step time (ms; mean, and median/p90/max), communication-only,
    communication wait and idle µs per step, the busy split (% of the window), and ``by_step``:
    the per-step maps (:func:`_per_step_figures`)."""
    n = w.n_steps
    sp = split if busy_pct is not None else None
    return RankRow(
        rank=rank,
        gpu_busy_pct=busy_pct,  # None without GPU activity: no evidence, no figure
        step_time_ms=step_ms,
        comm_only_us_per_step=comm / n / 1e3,
        idle_us_per_step=idle.total_ns / n / 1e3 if idle is not None else None,
        idle_by_cause_us_per_step=(
            {c: idle.causes_ns.get(c, 0) / n / 1e3 for c in CAUSES} if idle is not None else None
        ),
        step_p50_ms=stats.p50_ms if stats is not None else None,
        step_p90_ms=stats.p90_ms if stats is not None else None,
        step_max_ms=stats.max_ms if stats is not None else None,
        compute_pct=sp.pct(sp.compute_ns) if sp is not None else None,
        comm_transfer_pct=sp.pct(sp.transfer_ns) if sp is not None else None,
        comm_wait_pct=sp.pct(sp.wait_ns) if sp is not None else None,
        comm_wait_us_per_step=sp.wait_ns / n / 1e3 if sp is not None else None,
        step_ms_by_step=dict(by_step[0]),
        wait_ms_by_step=dict(by_step[1]),
    )


def _match_from_parts(
    con: Connection, run_id: str, parts: dict[int, dict[str, Any]], n_steps: int, step_ns: float
) -> CollectiveMatch:
    """:func:`run_collectives` from the ranks' stored frames (the same match, no events read)."""
    from gpuscope.analysis.collectives import link_peak_gbs, match_collectives
    from gpuscope.analysis.rank_frames import frames_of

    row = con.execute("SELECT gpu_name FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return match_collectives(
        [frames_of(parts)],
        link_gbs=link_peak_gbs(row[0] if row else None),
        n_steps=n_steps,
        step_ns=step_ns,
    )


def _lines_from_parts(
    parts: dict[int, dict[str, Any]], match: CollectiveMatch | None, skip: int
) -> list[RankRow]:
    """The ``ranks`` lines of every rank but ``skip`` from their cross-rank parts and the match:
    what :func:`_rank_summary` gives from the events (the busy split by
    :func:`rank_frames.split_of`)."""
    import numpy as np
    from gpuscope.analysis.rank_frames import idle_of, split_of, stats_of, window_of

    rows = match.rows if match is not None and not match.rows.empty else None
    step_waits: dict[int, dict[int, int]] = {}  # rank -> step -> wait ns
    tables: dict[int, tuple[Any, Any, Any]] = {}  # rank -> its matched kernels (absolute ns)
    if rows is not None:
        stepped = rows.dropna(subset=["step"])
        for (rk, stp), v in stepped.groupby(["rank", "step"])["wait_ns"].sum().items():
            step_waits.setdefault(int(rk), {})[int(stp)] = int(v)
        rk_arr = rows["rank"].to_numpy(np.int64)
        order = np.argsort(rk_arr, kind="stable")
        cols = [rows[c].astype("int64").to_numpy(np.int64)[order] for c in ("start_ns", "end_ns")]
        wait = rows["wait_ns"].astype("int64").to_numpy(np.int64)[order]
        keys, first = np.unique(rk_arr[order], return_index=True)
        ends = [*first[1:], len(order)]
        for k, a, b in zip(keys.tolist(), first.tolist(), ends, strict=True):
            tables[int(k)] = (cols[0][a:b], cols[1][a:b], wait[a:b])
    empty = np.zeros(0, np.int64)
    out = []
    for r, p in parts.items():
        if r == skip:
            continue
        w = window_of(p)
        st = stats_of(p)
        figures = _step_maps(w, step_waits.get(r, {}))
        if p["device"] is None:
            out.append(
                _rank_row(
                    r, w, None, st.mean_ms, p["comm_only_ns"], None, stats=st, by_step=figures
                )
            )
            continue
        table: dict[str, Any] | None = None
        if match is not None:  # the rank's matched kernels in its trace time (wait_table)
            off = int(p["offset_ns"])
            ks, ke, kw = tables.get(r, (empty, empty, empty))
            table = {"start_ns": ks - off, "end_ns": ke - off, "wait_ns": kw}
        split = split_of(p, table)
        row = _rank_row(
            r,
            w,
            p["busy_pct"],
            st.mean_ms,
            p["comm_only_ns"],
            idle_of(p),
            split=split,
            stats=st,
            by_step=figures,
        )
        out.append(row)
    return out


_Args = ParamSpec("_Args")
_Ret = TypeVar("_Ret")


@contextlib.contextmanager
def one_snapshot(con: Connection, run_id: str) -> Iterator[None]:
    """One snapshot of a lake store (:func:`read_snapshot`) for reading a run: the catalog is
    asked for it once, not per statement, and every part reads the same store; the run's names
    are read from the lake once (:func:`run_names`). A failure rolls back, which drops the
    block's temp tables, so the rank indexes of ``con`` forget theirs."""

    def forget() -> None:
        close_shared(con)
        drop_run_names(con)

    with read_snapshot(con, on_rollback=forget), run_names(con, str(run_id)):
        yield


def _one_snapshot_of(fn: Callable[_Args, _Ret]) -> Callable[_Args, _Ret]:
    """Run ``fn(analysis, ...)`` inside :func:`one_snapshot` of the analysis's run."""

    @functools.wraps(fn)
    def wrapper(*args: _Args.args, **kwargs: _Args.kwargs) -> _Ret:
        a: Any = args[0]
        with one_snapshot(a.con, str(a.run_id)):
            return fn(*args, **kwargs)

    return wrapper


def _one_snapshot(fn: Callable[_Args, _Ret]) -> Callable[_Args, _Ret]:
    """Run ``fn(con, run_id, ...)`` inside :func:`one_snapshot`."""

    @functools.wraps(fn)
    def wrapper(*args: _Args.args, **kwargs: _Args.kwargs) -> _Ret:
        con: Any = args[0]
        run_id = args[1] if len(args) > 1 else kwargs["run_id"]
        with one_snapshot(con, str(run_id)):
            return fn(*args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class AnalysisOptions:
    """What :func:`analyze_run` is asked for (its keyword arguments, documented there)."""

    step_annotation: str | None = None
    peak_tflops: float | None = None
    model_flops_per_step: float | None = None
    all_ranks: bool = True
    top_gaps: int = 20
    details: bool = True
    mfu: bool = True
    untraced_step_ms: float | None = None
    with_path: bool = True
    #: the other ranks from their stored summaries (:mod:`gpuscope.analysis.rank_summary`; computed
    #: from their events where missing); False: every other rank from its events
    stored_parts: bool = True


@dataclass(frozen=True)
class MfuFigures:
    """MFU (%) against the bf16 peak, the run's dtype's peak, while busy and on the untraced step;
    achieved TFLOP/s on the traced and untraced step. All None without GPU activity."""

    mfu_pct: float | None = None
    mfu_dtype_pct: float | None = None
    mfu_busy_pct: float | None = None
    achieved_tflops: float | None = None
    mfu_untraced_pct: float | None = None
    achieved_tflops_untraced: float | None = None


class RunAnalysis:
    """One rank of a trace run and every analysis of it, each computed once, on first use (HTA's
    ``TraceAnalysis`` owning its trace is the model). It owns the connection, the run, the rank,
    the window (steps), the primary device and the rank's index (:class:`RankIndex`); each
    analysis is a cached property named for what it holds. :func:`analyze_run` reads them into a
    :class:`RunReport`; read them on one snapshot of the store (``analyze_run`` opens one).

    Everything this rank reads of its own events comes before the other ranks' parts
    (``ranks``, ``match``, ``split``): their indexes may push this rank's out of the shared ones.
    Raises ValueError for an unknown run or rank; a non-positive ``untraced_step_ms`` raises it
    when the profiler's cost is first read."""

    def __init__(
        self,
        con: Connection,
        run_id: str,
        rank: int | None = None,
        options: AnalysisOptions | None = None,
    ) -> None:
        self.con, self.run_id = con, run_id
        self.options = options if options is not None else AnalysisOptions()
        self.run = _run_info(con, run_id)
        ranks = self.run["ranks"]
        if not ranks:
            raise ValueError(f"{run_id}: the run has no ranks")
        if rank is None:
            rank = ranks[0]
        if rank not in ranks:
            raise ValueError(f"{run_id}: no rank {rank} (ranks: {ranks})")
        self.rank: int = rank

    # -- what the analysis owns -------------------------------------------------------------------

    @property
    def index(self) -> RankIndex:
        """The rank's index (the shared one: rebuilt when other ranks' indexes pushed it out)."""
        return RankIndex.shared(self.con, self.run_id, self.rank)

    @functools.cached_property
    def meta(self) -> dict[str, Any]:
        """The rank's trace metadata (:func:`rank_meta`)."""
        return rank_meta(self.con, self.run_id, self.rank)

    @functools.cached_property
    def window(self) -> Window:
        """The analysed steps (``ProfilerStep#N``, the ``step_annotation``, else the trace)."""
        return find_window(self.con, self.run_id, self.rank, self.options.step_annotation)

    @functools.cached_property
    def stats(self) -> StepStats:
        """Step time statistics (ms)."""
        return step_stats(self.window)

    @functools.cached_property
    def busy(self) -> BusySummary:
        """GPU busy time over the window, and the primary device."""
        w = self.window
        return busy_summary(self.con, self.run_id, self.rank, w.start_ns, w.end_ns)

    @property
    def device(self) -> int | None:
        """The primary device (None: no recognised GPU activity in the window)."""
        return self.busy.device

    @property
    def details(self) -> bool:
        """Whether the details (kernels, gaps, per-step values, fixes) are computed."""
        return self.options.details

    @functools.cached_property
    def evidence(self) -> str | None:
        """The warning of a window without GPU activity (:func:`gpu_evidence_warning`), or None:
        with it there is no busy %, MFU, roofline, busy split or fix."""
        return gpu_evidence_warning(self.con, self.run_id, self.rank, self.device)

    @functools.cached_property
    def warnings(self) -> list[str]:
        """What the report warns of: no GPU activity first, then how the steps were found."""
        sa, w = self.options.step_annotation, self.window
        out = [self.evidence] if self.evidence else []
        if sa and w.source != "annotation":
            out.append(f"no '{sa}' annotation: steps from {w.source}")
        if w.source == "trace":
            out.append("no step annotations: the whole trace is one step")
        if w.warmup:
            out.append(
                f"warm-up steps left out of the window: {', '.join(str(n) for n in w.warmup)} "
                "(torch.compile compiling or CUDA graphs captured in them); profile steps after "
                "the warm-up to see only steps that repeat"
            )
        return out

    # -- this rank's analyses ---------------------------------------------------------------------

    @functools.cached_property
    def idle(self) -> IdleResult:
        """Idle time by cause (with the top gaps when ``details``)."""
        top_n = self.options.top_gaps if self.details else 0
        return idle_analysis(
            self.con, self.run_id, self.rank, self.window, device=self.device, top_n=top_n
        )

    @functools.cached_property
    def step_busy(self) -> Sequence[int | None]:
        """GPU busy time of each step (ns; None each without ``details``)."""
        w = self.window
        bounds = w.step_bounds_ns()
        if not self.details:
            return [None] * len(bounds)
        return busy_in_ranges(
            self.con,
            self.run_id,
            self.rank,
            bounds,
            device=self.device,
            window=(w.start_ns, w.end_ns),
        )

    @functools.cached_property
    def comm_only_ns(self) -> int:
        """Time in which only communication kernels ran (ns; 0 without ``details``)."""
        if not self.details:
            return 0
        w, b = self.window, self.busy
        return comm_only_ns(
            self.con, self.run_id, self.rank, w.start_ns, w.end_ns, b.device, b.busy_ns
        )

    @functools.cached_property
    def dev_props(self) -> dict[str, Any]:
        """The primary device's properties from the trace (``deviceProperties``)."""
        return device_props(self.meta, self.device)

    @functools.cached_property
    def kernels(self) -> KernelBreakdown | None:
        """Kernel time by category and kernel (``details`` only)."""
        if not self.details:
            return None
        return K.kernel_breakdown(self.con, self.run_id, self.rank, self.window)

    @property
    def need_mfu(self) -> bool:
        """Whether FLOPs, tensor cores, peaks and MFU are computed."""
        return self.details or self.options.mfu

    @functools.cached_property
    def tensor_cores(self) -> TensorCoreSummary | None:
        """Tensor-core share of kernel time (when MFU is asked for)."""
        if not self.need_mfu:
            return None
        return T.tensor_core_summary(self.con, self.run_id, self.rank, self.window)

    @functools.cached_property
    def flops(self) -> FlopsResult | None:
        """FLOPs per step: counted from the ops, else the metadata's, else 6 × N × T."""
        if not self.need_mfu:
            return None
        o, w = self.options, self.window
        # once per rank index and window (the ingest's headline part, then its analyze document,
        # on a rank too big to copy: ~0.9 CPU s at 1 GB); a copy, since it is amended below
        flops = copy.deepcopy(
            self.index.memo(
                ("flops", w.start_ns, w.end_ns, len(w.steps), o.model_flops_per_step),
                lambda: F.flops_per_step(
                    self.con,
                    self.run_id,
                    self.rank,
                    w,
                    len(w.steps),
                    model_flops_per_step=o.model_flops_per_step,
                ),
            )
        )
        if flops.flops_per_step is None:
            meta_flops = F.metadata_model_flops(self.con, self.run_id, self.rank)
            if meta_flops:
                flops.flops_per_step = float(meta_flops)
                flops.source = "metadata"
        if flops.flops_per_step is None:
            est = estimate_6nt(self.meta)
            if est is not None:
                flops.flops_per_step = est
                flops.source = "estimate_6NT"
                flops.notes.append(
                    "FLOPs per step estimated as 6 × parameters × tokens of this rank (the op shapes "
                    "give none, e.g. a CUDA-graph replay): an estimate, not a count"
                )
        return flops

    @property
    def props(self) -> Any:
        """The trace's ``deviceProperties`` (every device)."""
        return self.meta.get("device_properties")

    @functools.cached_property
    def peak(self) -> Peak | None:
        """The GPU's dense bf16 (else fp16) peak, as training reports use for MFU."""
        if not self.need_mfu:
            return None
        override, dev = self.options.peak_tflops, self.device
        peak = P.peak_for(self.props, "bf16", override_tflops=override, device=dev)
        if peak.tflops is None and override is None:
            fp16 = P.peak_for(self.props, "fp16", device=dev)
            if fp16.tflops is not None:
                peak = fp16
        return peak

    @functools.cached_property
    def peak_dtype(self) -> Peak | None:
        """The peak of the dtype the run used (``mfu_dtype_pct``)."""
        if not self.need_mfu:
            return None
        dtype = getattr(self.flops, "dtype", None) or _kernel_dtype(self.tensor_cores)
        return P.peak_for(self.props, dtype, device=self.device)

    @functools.cached_property
    def kernel_stats(self) -> R.KernelStats | None:
        """The compute kernels the rules read (``details`` only)."""
        if not self.details:
            return None
        w = self.window
        by_cat = getattr(self.kernels, "by_category", None) or {}
        return _kernel_stats(
            self.con,
            {
                "run": self.run_id,
                "gpu": self.index.gpu(),
                "ws": w.start_ns,
                "we": w.end_ns,
                "dev": self.device or 0,
            },
            self.dev_props.get("numSms"),
            float(by_cat.get("convolution", 0.0)),
        )

    @functools.cached_property
    def profiler(self) -> ProfilerCost:
        """The profiler's cost: traced (median) step against the untraced one, and the median GPU
        busy time per step (one slow warm-up step moves neither); with ``details`` also the host
        causes and whether host overhead looks like the profiler's own."""
        w, ks = self.window, self.kernel_stats
        busy_ms = own_busy_ms_per_step(  # the wait for other ranks left out (its module doc)
            self.step_busy,
            self.busy.busy_ns,
            self.split.wait_ns if self.split is not None else 0,
            w.n_steps,
        )
        extra: dict[str, Any] = (
            {}
            if ks is None
            else {
                "idle_causes_ns": self.idle.causes_ns,
                "window_ns": w.duration_ns,
                "median_kernel_us": ks.median_us,
                "n_steps": w.n_steps,
            }
        )
        return profiler_cost(
            self.stats.p50_ms,
            busy_ms,
            self.meta.get("metadata"),
            untraced_step_ms=self.options.untraced_step_ms,
            **extra,
        )

    @functools.cached_property
    def mfu(self) -> MfuFigures:
        """MFU and achieved TFLOP/s (none without GPU activity: FLOPs from CPU-op shapes say
        nothing about a GPU's use)."""
        if self.evidence:
            return MfuFigures()
        fps = getattr(self.flops, "flops_per_step", None)
        ptf = getattr(self.peak, "tflops", None)
        step_s = self.stats.mean_ms / 1e3
        busy_s_per_step = self.busy.busy_ns / 1e9 / self.window.n_steps
        pc = self.profiler
        untraced_s = pc.untraced_step_ms / 1e3 if pc.untraced_step_ms else None
        return MfuFigures(
            mfu_pct=P.mfu_pct(fps, step_s, ptf),
            mfu_dtype_pct=P.mfu_pct(fps, step_s, getattr(self.peak_dtype, "tflops", None)),
            mfu_busy_pct=P.mfu_busy_pct(fps, busy_s_per_step, ptf),
            achieved_tflops=P.achieved_tflops(fps, step_s),
            mfu_untraced_pct=P.mfu_pct(fps, untraced_s, ptf),
            achieved_tflops_untraced=P.achieved_tflops(fps, untraced_s),
        )

    @functools.cached_property
    def compiled(self) -> CompiledInfo | None:
        """torch.compile / CUDA graphs seen in the window (``details`` only)."""
        if not self.details:
            return None
        return compiled_info(self.con, self.run_id, self.rank, self.window)

    @functools.cached_property
    def gpu_model(self) -> str | None:
        """The GPU model (the peak table's name), from the peak or the device properties."""
        return getattr(self.peak, "gpu_model", None) or P.match_model(self.dev_props)[0]

    @functools.cached_property
    def pageable(self) -> PageableCopies | None:
        """Pageable host-to-device copies (``details`` only)."""
        if not self.details:
            return None
        return pageable_copies(
            self.con, self.run_id, self.rank, self.window, self.device, self.gpu_model
        )

    @functools.cached_property
    def memory(self) -> MemoryResult | None:
        """The allocator's memory over the window (``details`` only)."""
        if not self.details:
            return None
        md = self.meta.get("metadata")
        offset = _time_offset(self.con, self.run_id, self.rank)
        return memory_analysis(
            self.con, self.run_id, self.rank, self.window, self.device, self.dev_props, md, offset
        )

    @functools.cached_property
    def roofline(self) -> Roofline | None:
        """Kernels against the roofline (``details``, with GPU activity)."""
        if not self.details or self.evidence:
            return None
        self._let_go(("toplevel",))  # read by the kernel table and the FLOPs, not here
        return roofline(
            self.con, self.run_id, self.rank, self.window, self.device, self.dev_props, self.props
        )

    @functools.cached_property
    def modules(self) -> ModulesResult | None:
        """GPU time by module (``details`` only)."""
        if not self.details:
            return None
        self._let_go()  # the launches too: the modules read their own batches
        return module_analysis(self.con, self.run_id, self.rank, self.window, self.device)

    @functools.cached_property
    def _big(self) -> bool:
        """Whether the rank has more than :data:`FORGET_BEFORE_PATTERNS_EVENTS` events."""
        events = _rank_events(self.con, self.run_id, self.rank)
        return events is not None and events > FORGET_BEFORE_PATTERNS_EVENTS

    def _let_go(self, kinds: Sequence[str] | None = None) -> None:
        """On a big rank (:attr:`_big`), let the index's large values of ``kinds`` (None: all) go
        and give the freed pages back before the next stage: held across the roofline and the
        modules, the 10 GB rank's launches and top-level spans set its peak (docs/benchmarks.md);
        a later reader computes them again."""
        if self._big:
            forget_values(self.con, kinds)
            release_free_memory()

    # -- across ranks (after this rank's own reads) -----------------------------------------------

    @functools.cached_property
    def parts(self) -> dict[int, dict[str, Any]] | None:
        """Every rank's stored cross-rank part (:class:`RankPartSource`), when the run has several
        ranks, all are asked for and the steps are the default ones; else None (from events)."""
        o = self.options
        if not o.stored_parts or not o.all_ranks or o.step_annotation:
            return None
        if len(self.run["ranks"]) <= 1:
            return None
        return read_parts(
            self.con, self.run_id, rank_frames.NAME, rank_frames.VERSION, rank_frames.compute
        )

    @functools.cached_property
    def match(self) -> CollectiveMatch | None:
        """The collectives matched across ranks (``details``, several ranks, GPU activity)."""
        o, w = self.options, self.window
        if self.parts is not None:
            if not self.details or self.evidence:
                return None
            step_ns = self.stats.mean_ms * 1e6
            return _match_from_parts(self.con, self.run_id, self.parts, w.n_steps, step_ns)
        if not (self.details and o.all_ranks and len(self.run["ranks"]) > 1 and not self.evidence):
            return None
        return run_collectives(
            self.con,
            self.run_id,
            {self.rank: w},
            n_steps=w.n_steps,
            step_ns=self.stats.mean_ms * 1e6,
            step_annotation=o.step_annotation,
        )

    @functools.cached_property
    def split(self) -> BusySplit | None:
        """Busy time split into compute / transfer / wait (``details``, with GPU activity)."""
        if not self.details or self.evidence:
            return None
        w = self.window
        waits = wait_table(self.con, self.run_id, self.rank, self.match)
        return busy_split(
            self.con, self.run_id, self.rank, w.start_ns, w.end_ns, self.device, waits
        )

    @functools.cached_property
    def per_step(self) -> list[StepRow]:
        """One row per step: its start (µs), duration, CPU time (ms), GPU end (µs), busy (%) and
        its wait in collectives (ms; None without a busy split)."""
        w = self.window
        waits = wait_by_step(self.match, self.rank)
        split = self.split
        return [
            StepRow(
                number=s.number,
                start_us=us(b[0]),
                duration_ms=ms(b[1] - b[0]),
                cpu_ms=ms(s.cpu_end_ns - s.cpu_start_ns),
                gpu_end_us=us(s.gpu_end_ns),
                busy_pct=pct(sb, b[1] - b[0]) if sb is not None else None,
                wait_ms=waits.get(s.number, 0) / 1e6 if split is not None else None,
            )
            for s, b, sb in zip(w.steps, w.step_bounds_ns(), self.step_busy, strict=True)
        ]

    @functools.cached_property
    def ranks(self) -> list[RankRow]:
        """Every rank's line (this one's, and the others' from their parts, their stored lines or
        their events), by rank."""
        o, w, match = self.options, self.window, self.match
        busy_pct = self.busy.busy_pct if not self.evidence else None
        own = _rank_row(
            self.rank,
            w,
            busy_pct,
            self.stats.mean_ms,
            self.comm_only_ns,
            self.idle,
            split=self.split,
            stats=self.stats,
            by_step=_per_step_figures(w, match, self.rank),
        )
        lines = [own]
        if self.parts is not None:  # the other ranks' lines from their cross-rank parts
            lines += _lines_from_parts(self.parts, match, self.rank)
        elif o.all_ranks:
            # their stored summaries (rank_summary) when no cross-rank match is needed; with one,
            # from the events (their busy split needs the matched waits)
            use_stored = o.stored_parts and not o.step_annotation and match is None
            stored = _stored_lines(self.con, self.run_id) if use_stored else {}
            lines += [
                stored.get(r) or _rank_summary(self.con, self.run_id, r, o.step_annotation, match)
                for r in self.run["ranks"]
                if r != self.rank
            ]
        lines.sort(key=lambda line: line.rank)
        return lines

    @functools.cached_property
    def straggler(self) -> Straggler | None:
        """The rank that makes the others wait longest (from the match), with every rank's
        communication-only time per step."""
        straggler = self.match.straggler if self.match is not None else None
        if straggler is not None:
            straggler.comm_only_ms_per_step = {
                r.rank: (r.comm_only_us_per_step or 0.0) / 1e3 for r in self.ranks
            }
        return straggler

    @functools.cached_property
    def rule_inputs(self) -> R.Inputs | None:
        """What the fix rules read (``details``, with GPU activity; None otherwise)."""
        if not self.details or self.evidence:
            return None
        return _rule_inputs(self)

    @functools.cached_property
    def recommendations(self) -> list[R.Recommendation]:
        """The fixes the evidence supports (``details``, with GPU activity)."""
        inputs = self.rule_inputs
        return [] if inputs is None else R.recommend(inputs)

    @functools.cached_property
    def sharded_by(self) -> str | None:
        """What splits the rank's parameters across ranks, as its trace shows it
        (:func:`~gpuscope.analysis.fixes.base.sharded_by`; None: nothing, or no rules read)."""
        from gpuscope.analysis.fixes.base import sharded_by

        inputs = self.rule_inputs
        return None if inputs is None else sharded_by(inputs)

    @functools.cached_property
    def throughput(self) -> Throughput | None:
        """Samples and tokens per second (traced and untraced), when the trace says per step."""
        return _throughput(self.meta, self.stats.mean_ms, self.profiler.untraced_step_ms)

    # -- the critical path and the fixes' estimates on it -----------------------------------------

    @property
    def with_path(self) -> bool:
        """Whether the critical path (and the fixes' estimates) is computed."""
        return self.details and self.options.with_path and not self.evidence

    @functools.cached_property
    def critical_path(self) -> CriticalPath | None:
        """The critical path of each step (:func:`critical_path`), when :attr:`with_path`."""
        if not self.with_path:
            return None
        return critical_path(self.con, self.run_id, self.rank, self.window, self.device)

    @functools.cached_property
    def gain_context(self) -> GN.Context | None:
        """What the fixes' models need beyond the graph (None without a critical path)."""
        cp = self.critical_path
        if cp is None:
            return None
        pb = P.peak_for(self.props, "bf16", device=self.device)
        pf = P.peak_for(self.props, "fp32", device=self.device)
        ctx = GN.Context(
            n_steps=self.window.n_steps,
            step_ms=self.stats.mean_ms,
            untraced_step_ms=self.profiler.untraced_step_ms,
            pinned_gbps=self.pageable.pinned_gbps if self.pageable is not None else None,
            gpu_model=self.gpu_model,
            peak_ratio=pb.tflops / pf.tflops if pb.tflops and pf.tflops else None,
            sms=int(self.dev_props["numSms"]) if self.dev_props.get("numSms") else None,
            memory_bound_fp32_matmul=(
                self.roofline.memory_bound_fp32_matmul if self.roofline is not None else {}
            ),
        )
        ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
        ctx.host_scale_max = GN.host_scale_ceiling(cp, ctx)
        return ctx

    def estimate_fixes(self) -> None:
        """Each recommendation's ``estimate`` (its unit's re-timing on the critical path, never
        above its proven bound), and the recommendations ordered by it, the largest first
        (nothing without a critical path: they stay in registry order)."""
        cp, ctx = self.critical_path, self.gain_context
        if cp is None or ctx is None:
            return
        R.estimate(self.recommendations, cp, ctx)

    # -- the report ---------------------------------------------------------------------------------

    def report(self, *, with_path: bool | None = None) -> RunReport:
        """Every analysis read, in order (this rank's own, then across ranks, then the fixes),
        into a :class:`RunReport`. ``with_path`` (default: the options'): with the critical path
        and the fixes' estimates; asked again with True after False, only those are computed. Read
        on one snapshot of the store (:func:`report_of`, :func:`analyze_run`)."""
        if with_path is not None and with_path != self.options.with_path:
            self.options = dataclasses.replace(self.options, with_path=with_path)
        a = self
        mfu_figures = a.mfu
        report = RunReport(
            run=a.run,
            rank=a.rank,
            window=a.window,
            step_stats=a.stats,
            busy=a.busy,
            idle=a.idle,
            comm_only_ns=a.comm_only_ns,
            warnings=a.warnings,
            kernels=a.kernels,
            tensor_cores=a.tensor_cores,
            flops=a.flops,
            peak=a.peak,
            peak_dtype=a.peak_dtype,
            profiler=a.profiler,
            compiled=a.compiled,
            pageable=a.pageable,
            memory=a.memory,
            roofline=a.roofline,
            modules=a.modules,
            mfu_pct=mfu_figures.mfu_pct,
            mfu_dtype_pct=mfu_figures.mfu_dtype_pct,
            mfu_busy_pct=mfu_figures.mfu_busy_pct,
            achieved_tflops=mfu_figures.achieved_tflops,
            mfu_untraced_pct=mfu_figures.mfu_untraced_pct,
            achieved_tflops_untraced=mfu_figures.achieved_tflops_untraced,
            collectives=a.match,
            split=a.split,
            per_step=a.per_step,
            ranks=a.ranks,
            straggler=a.straggler,
            # a report without the path keeps its fixes as they were when it was made: the
            # estimates order the facade's own list in place later (a kept facade, the web's)
            recommendations=a.recommendations
            if self.with_path
            else [dataclasses.replace(r) for r in a.recommendations],
            throughput=a.throughput,
            sharded_by=a.sharded_by,
        )
        if self.with_path:  # the path (and the estimates) only when asked: its property caches
            a.estimate_fixes()
            report.critical_path, report.gain_context = a.critical_path, a.gain_context
        return report


@_one_snapshot
def analyze_run(
    con: Connection,
    run_id: str,
    *,
    rank: int | None = None,
    step_annotation: str | None = None,
    peak_tflops: float | None = None,
    model_flops_per_step: float | None = None,
    all_ranks: bool = True,
    top_gaps: int = 20,
    details: bool = True,
    mfu: bool = True,
    untraced_step_ms: float | None = None,
    with_path: bool = True,
    stored_parts: bool = True,
) -> RunReport:
    """Analyse one rank of a trace run (default: the lowest rank).

    ``step_annotation``: use this annotation name for steps instead of ``ProfilerStep#N``.
    ``peak_tflops`` / ``model_flops_per_step``: overrides for the MFU inputs. ``all_ranks``: also
    summarise every other rank (busy %, step time) in ``ranks``. ``details=False`` computes only
    the headline numbers (window, step time, busy, idle by cause, FLOPs and MFU), leaving out the
    kernel breakdown, gap evidence, per-step values and recommendations (``gpuscope check``);
    ``mfu=False`` with it also skips FLOPs, tensor cores and MFU. ``untraced_step_ms``: the step
    time measured without the profiler (ms), for traces whose metadata lacks
    ``gpuscope.untraced_step_ms`` (it wins over the metadata). ``with_path=False`` leaves out the
    critical path and the recommendations' ``estimate`` (the web page computes them below the
    fold). ``stored_parts=False`` reads every other rank from its events, not from its stored
    summaries. Raises ValueError for an unknown run
    or rank, or a non-positive ``untraced_step_ms``.
    """
    options = AnalysisOptions(
        step_annotation=step_annotation,
        peak_tflops=peak_tflops,
        model_flops_per_step=model_flops_per_step,
        all_ranks=all_ranks,
        top_gaps=top_gaps,
        details=details,
        mfu=mfu,
        untraced_step_ms=untraced_step_ms,
        with_path=with_path,
        stored_parts=stored_parts,
    )
    return RunAnalysis(con, run_id, rank, options).report()


@_one_snapshot_of
def report_of(a: RunAnalysis, *, with_path: bool | None = None) -> RunReport:
    """:meth:`RunAnalysis.report` on one snapshot of the store (:func:`one_snapshot`): a kept
    facade's report, each analysis computed once however often it is asked (the web caches the
    facade: its report without the critical path first, then with it, on the same analyses)."""
    return a.report(with_path=with_path)


#: A rank with more events than this lets its index's large values go (the window's launches
#: and top-level spans, ``RankIndex.memo(..., large=True)``) before the phase patterns read
#: theirs: each is computed again if a later analysis asks. The 10.0 GB rank of
#: docs/benchmarks.md (30.1 M events), ``analyze --json`` from its events: peak RSS 1,081 ->
#: 972 MiB, the same JSON. The ranks a document copies into memory (up to 1 M events) keep them.
FORGET_BEFORE_PATTERNS_EVENTS = 1_000_000


def _rank_events(con: Any, run_id: str, rank: int) -> int | None:
    """The rank's stored event count (None: unknown)."""
    row = con.execute(
        "SELECT n_events FROM ranks WHERE run_id = ? AND rank = ?", [run_id, rank]
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _patterns(con: Any, run_id: str, rank: int, window: Window) -> PhasePatterns:
    """:func:`phase_patterns` of the window, the rank's large values let go first where it has
    more than :data:`FORGET_BEFORE_PATTERNS_EVENTS` events."""
    events = _rank_events(con, run_id, rank)
    if events is not None and events > FORGET_BEFORE_PATTERNS_EVENTS:
        forget_values(con)
        release_free_memory()
    return phase_patterns(con, run_id, rank, window)


def _rule_inputs(a: RunAnalysis) -> R.Inputs:
    """The rules' inputs from the analysis."""
    con, run_id, rank, dev_props = a.con, a.run_id, a.rank, a.dev_props
    busy, idle, tc, memory, pageable, pc = (
        a.busy,
        a.idle,
        a.tensor_cores,
        a.memory,
        a.pageable,
        a.profiler,
    )
    cc = None
    if "computeMajor" in dev_props:
        try:
            cc = (int(dev_props["computeMajor"]), int(dev_props.get("computeMinor", 0)))
        except (TypeError, ValueError):
            cc = None
    speedup = None
    pb = P.peak_for(a.props, "bf16", device=busy.device)
    pf = P.peak_for(a.props, "fp32", device=busy.device)
    if pb.tflops and pf.tflops:
        speedup = pb.tflops / pf.tflops
    inputs = R.Inputs(
        window_ns=a.window.duration_ns,
        n_steps=a.window.n_steps,
        busy_pct=busy.busy_pct,
        idle=idle,
        kernels=a.kernel_stats or R.KernelStats(),  # details: always computed
        fp32_gemm_us=getattr(tc, "fp32_gemm_us", None),
        tc_us_by_precision=dict(getattr(tc, "by_precision", None) or {}),
        tensor_core_pct=getattr(tc, "tensor_core_pct", None),
        gpu_name=dev_props.get("name") or a.run.get("gpu"),
        compute_capability=cc,
        tc_speedup=speedup,
        comm_only_ns=a.comm_only_ns,
        peers=[r for r in a.ranks if r.rank != rank],
        mem_used_frac=_memory_used_frac(con, run_id, memory),
        memory=memory if memory is not None and memory.recorded else None,
        dataloader_kind=_loader_kind(idle),
        untraced_step_ns=pc.untraced_step_ms * 1e6 if pc and pc.untraced_step_ms else None,
        host_cap_ns_per_step=(
            pc.host_cap_ms_per_step * 1e6
            if pc is not None and pc.host_cap_ms_per_step is not None
            else None
        ),
        compiled=a.compiled,
        cudnn_benchmark=_torch_flag(con, run_id, rank, "cudnn_benchmark"),
        pageable_excess_ns=pageable.excess_ns if pageable is not None else 0.0,
        pageable_copy=pageable if pageable is not None and pageable.copies else None,
        h2d_bytes_per_step=(
            (pageable.bytes + pageable.pinned_bytes) / max(1, a.window.n_steps)
            if pageable is not None
            else 0.0
        ),
        phase=_patterns(con, run_id, rank, a.window),
    )
    inputs.allreduce_bytes_per_step, inputs.allreduce_ns_per_step = allreduce_per_step(
        a.match, rank, a.window.n_steps
    )
    inputs.allgather_transfer_ns_per_step = allgather_transfer_per_step(
        a.match, rank, a.window.n_steps
    )
    return inputs


def _time_offset(con: Connection, run_id: str, rank: int) -> int:
    """The rank's trace clock -> Unix ns (``ranks.time_offset_ns``; 0 when unknown)."""
    row = con.execute(
        "SELECT time_offset_ns FROM ranks WHERE run_id = ? AND rank = ?", [run_id, int(rank)]
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _torch_flag(con: Connection, run_id: str, rank: int, flag: str) -> bool | None:
    """A setting ``gpuscope.capture`` recorded in the trace (``gpuscope.torch_flags``), or None."""
    flags = (rank_meta(con, run_id, rank).get("metadata") or {}).get("gpuscope.torch_flags")
    value = flags.get(flag) if isinstance(flags, dict) else None
    return value if isinstance(value, bool) else None
