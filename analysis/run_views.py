"""What the dashboard's run pages read, as plain data: a run's row and ranks, its analysis
(:func:`~gpuscope.analysis.report.analyze_run`) as the page models each section draws (frozen
dataclasses built from the typed :class:`RunReport`, never from its JSON), and the figures of the
runs list; the many-ranks view (rank × step, the collectives' waits in the busy plot).

The other pages' data: :mod:`gpuscope.analysis.sawtooth` (the busy-over-time plot),
:mod:`gpuscope.analysis.nvml_run` (NVML series), :mod:`gpuscope.analysis.compare` (Compare) and
:mod:`gpuscope.analysis.live` (Live). Units as in ``analyze --json`` (docs/cli-json.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.collectives import wait_in_view, wait_spans
from gpuscope.analysis.critical_path import StepPath
from gpuscope.analysis.fixes import ORDER_NOTE as FIX_ORDER_NOTE
from gpuscope.analysis.fixes import Recommendation
from gpuscope.analysis.fixes import dataloader_workers as _loader_unit
from gpuscope.analysis.fixes import host_sync as _sync_unit
from gpuscope.analysis.gains import Estimate
from gpuscope.analysis.idle import CAUSES
from gpuscope.analysis.job import DRAIN_FACTOR as DRAIN_FACTOR  # the web's drain-step rule
from gpuscope.analysis.job import HeadlineRow, JobDiagnosis, diagnose, headline_rows, step_time
from gpuscope.analysis.kernel_names import kernel_labels as kernel_labels
from gpuscope.analysis.kernels import KernelRow
from gpuscope.analysis.memory import (
    HeldBlock,
    MallocStats,
    MemoryOp,
    MemoryResult,
    SnapshotDevice,
    SnapshotSummary,
)
from gpuscope.analysis.modules import ModuleLine, ModulesView, PhaseLine, Repeat
from gpuscope.analysis.profiler_cost import ProfilerCost
from gpuscope.analysis.rank_summary import SummaryLater, store_after_ingest
from gpuscope.analysis.ranks import (
    RankLine,
    RankOverview,
    rank_nodes,
    rank_step_matrix,
    ranks_label,
    ranks_of_world,
    step_spread,
    world_sizes,
)
from gpuscope.analysis.ranks import rank_overview as _rank_overview
from gpuscope.analysis.report import RunAnalysis, RunReport, analyze_run, report_of
from gpuscope.analysis.roofline import RooflineView, RoofOp
from gpuscope.analysis.store_access import ranks_of, us
from gpuscope.analysis.verdict import fixes_lead as fixes_lead  # the Run page's fix-list lead
from gpuscope.store.schema import RUN_COLUMNS

if TYPE_CHECKING:
    from gpuscope.store import Connection

__all__ = [
    "FIX_ORDER_NOTE",
    "LOADER_FIX",
    "SYNC_FIX",
    "Banners",
    "Breakdowns",
    "Estimate",
    "FixEstimate",
    "FixWords",
    "Headline",
    "HeadlineRow",
    "HeldBlock",
    "JobDiagnosis",
    "KernelRow",
    "MallocStats",
    "MemoryOp",
    "MemoryResult",
    "ModuleLine",
    "ModulesView",
    "PathSection",
    "PhaseLine",
    "ProfilerCost",
    "RankLine",
    "RankOverview",
    "Recommendation",
    "Repeat",
    "RoofOp",
    "RooflineView",
    "RunReport",
    "RunSummary",
    "SnapshotDevice",
    "SnapshotSummary",
    "StepPath",
    "SummaryLater",
    "TopKernels",
    "analyze_run",
    "banners",
    "breakdowns",
    "critical_path_section",
    "diagnose",
    "headline",
    "modules",
    "open_analysis",
    "rank_nodes",
    "rank_overview",
    "rank_step_matrix",
    "ranks_label",
    "ranks_of",
    "ranks_of_world",
    "report_of",
    "roofline",
    "row_count",
    "run_row",
    "run_summary",
    "step_spread",
    "store_after_ingest",
    "stored_run_summary",
    "top_idle",
    "top_idle_cause",
    "top_kernels",
    "wait_in_view",
    "wait_spans",
    "world_sizes",
]

_RUN_COLUMNS = ", ".join(RUN_COLUMNS)  # a SELECT list


def run_row(con: Connection, run_id: str) -> dict[str, Any] | None:
    """One run's row of ``runs`` as a dict (``created_at`` a datetime, ``tags`` a list), or None."""
    cur = con.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id])
    cols = [d[0] for d in cur.description]
    row = cur.fetchone()
    if row is None:
        return None
    d = dict(zip(cols, row, strict=True))
    d["tags"] = list(d["tags"] or [])
    d["world_size"] = world_sizes(con, [run_id]).get(run_id)  # "n of world-size ranks"
    return d


def open_analysis(con: Connection, run_id: str, rank: int | None = None) -> RunAnalysis:
    """The analysis facade of one rank of a run (default: the lowest), each analysis computed once
    on first use: read its reports with :func:`report_of` (the web keeps one per (run, rank))."""
    return RunAnalysis(con, run_id, rank)


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def uploaders(con: Connection, run_ids: list[str] | None = None) -> dict[str, str | None]:
    """Who uploaded each run (``runs.uploaded_by``; None when unknown), by run id: every run, or
    only ``run_ids``. A run that does not exist is absent from the answer."""
    if run_ids is None:
        rows = con.execute("SELECT run_id, uploaded_by FROM runs").fetchall()
    else:
        rows = con.execute(
            "SELECT run_id, uploaded_by FROM runs WHERE list_contains(?, run_id)", [list(run_ids)]
        ).fetchall()
    return {str(r): o for r, o in rows}


def row_count(con: Connection, table: str) -> int:
    """The number of rows of a table of the store (``runs``, ``events``, ...)."""
    if not _IDENT.match(table):
        raise ValueError(f"{table!r} is not a table name")
    row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class RunSummary:
    """A run's line in the runs list. Of a job's verdict (:class:`JobDiagnosis`): the pace-setting
    rank (``rank``; ``pace_setter`` too when the run has several ranks), the job step time (ms),
    GPU busy and the communication wait inside it (% of every rank's window) and the job's MFU
    (%), as the Run page's headline says them. Of one rank's report or document (no ``job``):
    that rank's figures. None when unknown."""

    rank: int | None
    step_ms: float | None
    busy_pct: float | None
    mfu_pct: float | None
    wait_pct: float | None = None
    pace_setter: int | None = None


def _num(v: Any) -> float | None:
    try:
        f = None if v is None else float(v)
    except (TypeError, ValueError):
        return None
    return None if f is None or math.isnan(f) else f


def run_summary(report: JobDiagnosis | RunReport | Mapping[str, Any]) -> RunSummary:
    """The runs-list figures of a job's verdict (what the Runs list shows), of an analysis
    document with a ``job`` (``analyze --json``), or of one rank's report or document without one
    (the stored ``headline`` part of :func:`stored_run_summary`, a hand-built one)."""
    if isinstance(report, JobDiagnosis):
        job = report
        return RunSummary(
            rank=job.pace_setter,
            step_ms=_num(job.step.p50_ms),
            busy_pct=_num(job.split.busy_pct),
            mfu_pct=_num(job.mfu_pct),
            wait_pct=_num(job.split.wait_pct),
            pace_setter=job.pace_setter if job.distributed else None,
        )
    if not isinstance(report, RunReport) and isinstance(report.get("job"), Mapping):
        j = report["job"]
        split = j.get("split") or {}
        several = len(j.get("ranks") or []) > 1
        return RunSummary(
            rank=j.get("pace_setter"),
            step_ms=_num((j.get("step_time_ms") or {}).get("p50")),
            busy_pct=_num(split.get("busy_pct")),
            mfu_pct=_num(j.get("mfu_pct")),
            wait_pct=_num(split.get("wait_pct")),
            pace_setter=j.get("pace_setter") if several else None,
        )
    if isinstance(report, RunReport):
        st = report.step_stats
        return RunSummary(
            rank=int(report.rank),
            step_ms=_num(st.p50_ms),
            busy_pct=_num(report.gpu_busy_pct),
            mfu_pct=_num(report.mfu_pct),
            wait_pct=_num(report.gpu_wait_pct),
        )
    doc = report
    rank = doc.get("rank")
    st_ms = doc.get("step_time_ms") or {}
    return RunSummary(
        rank=None if rank is None else int(rank),
        step_ms=_num(st_ms.get("p50", st_ms.get("mean"))),
        busy_pct=_num(doc.get("gpu_busy_pct")),
        mfu_pct=_num(doc.get("mfu_pct")),
        wait_pct=_num(doc.get("gpu_wait_pct")),
    )


def stored_run_summary(con: Connection, run_id: str) -> RunSummary | None:
    """The runs-list figures of a trace run of one rank from its stored rank summaries alone (no
    events read; :mod:`gpuscope.analysis.rank_summary`): the same as :func:`run_summary` of its
    job's verdict (:func:`gpuscope.analysis.job.diagnose`). None when the rank lacks a current
    ``rank_row``, ``headline`` or ``steps`` (a run stored before them: the caller analyses it),
    and for a run of several ranks (its verdict needs the collectives matched across ranks)."""
    from gpuscope.analysis.peaks import mfu_pct
    from gpuscope.analysis.rank_summary import HEADLINE, RANK_ROW, STEPS, load
    from gpuscope.analysis.steps import Step, Window

    ranks = ranks_of(con, run_id)
    if len(ranks) != 1:  # several ranks: the busy split needs the collectives matched across them
        return None
    rank = ranks[0]
    rows = load(con, run_id, RANK_ROW.name, compute=False)
    head = load(con, run_id, HEADLINE.name, compute=False).get(rank)
    steps = load(con, run_id, STEPS.name, compute=False).get(rank)
    if head is None or steps is None or set(rows) != set(ranks):
        return None
    win = head.get("window") or {}
    w = Window(0, 0, [], str(win.get("source") or "trace"))
    if steps and w.source != "trace":
        w = Window(
            int(steps[0]["start_ns"]),
            int(steps[-1]["start_ns"]) + round(float(steps[-1]["duration_ms"]) * 1e6),
            [Step(int(s["number"]), int(s["start_ns"]), int(s["end_ns"])) for s in steps],
            w.source,
        )
    job_step = step_time({rank: (w, 0)})
    st = head.get("step_time_ms") or {}
    p50 = job_step.p50_ms if job_step.source == "completions" else _num(st.get("p50"))
    busy = _num(head.get("gpu_busy_pct"))
    return RunSummary(
        rank=rank,
        step_ms=p50,
        busy_pct=busy,
        mfu_pct=(
            mfu_pct(head.get("flops_per_step"), p50 / 1e3, head.get("peak_tflops"))
            if busy is not None and p50
            else None
        ),
        wait_pct=0.0 if busy is not None else None,  # one rank waits for no other
    )


@dataclass(frozen=True)
class TopIdleCause:
    """The idle cause with the most time in the window: its ms per step and its share of the
    window (%; None when the window has no length); ``capped_ms_per_step``: for a host-side cause
    that the profiler's cap cuts (docs/metrics.md "Profiler cost"), the most of it that can exist
    without the profiler (ms per step; None otherwise)."""

    cause: str
    ms_per_step: float
    share_pct: float | None
    capped_ms_per_step: float | None = None


def top_idle_cause(report: RunReport) -> TopIdleCause | None:
    """The top idle cause of a report (:func:`top_idle`), capped where the profiler's cap cuts
    it; None without idle time."""
    cap = report.profiler.host_cap_ms_per_step if report.profiler is not None else None
    return top_idle(_idle_us_by_cause(report), _n_steps(report), us(report.window.duration_ns), cap)


def top_idle(
    causes_us: Mapping[str, float],
    n_steps: int,
    window_us: float | None,
    host_cap_ms: float | None = None,
) -> TopIdleCause | None:
    """The cause with the most idle time (``causes_us``: µs over the window, in precedence
    order), per step of ``n_steps`` (at least 1) and as a share of ``window_us`` (None when the
    window has no length); None without idle time. Ties: the first in the order given. A
    host-side cause above ``host_cap_ms`` (the profiler's cap, ms per step) carries the cap."""
    from gpuscope.vocabulary.causes import HOST_CAUSES

    if not causes_us:
        return None
    cause, top_us = max(causes_us.items(), key=lambda kv: _num(kv[1]) or 0.0)
    total_us = _num(top_us) or 0.0
    if not total_us:
        return None
    steps = int(n_steps or 1) or 1
    w_us = _num(window_us) or 0.0
    ms = total_us / 1e3 / steps
    capped = (
        host_cap_ms
        if host_cap_ms is not None and str(cause) in HOST_CAUSES and host_cap_ms < ms
        else None
    )
    return TopIdleCause(str(cause), ms, 100.0 * total_us / w_us if w_us else None, capped)


def _n_steps(report: RunReport) -> int:
    """The window's steps as the pages divide by them (1 for a trace-wide window)."""
    w = report.window
    return (len(w.steps) if w.source != "trace" else 0) or 1


def _idle_us_by_cause(report: RunReport) -> dict[str, float]:
    """Idle time by cause over the window (µs), every cause, in precedence order."""
    return {c: report.idle.causes_ns[c] / 1e3 for c in CAUSES}


@dataclass(frozen=True)
class Headline:
    """The Run page's headline cards, built from a report (units as in ``analyze --json``): the
    step time (ms: median, 90th percentile, slowest, mean over ``n_steps`` steps), GPU busy and
    the communication wait inside it (% of the window), MFU (%; while busy too) with its peak
    (TFLOP/s), dtype and FLOPs per step, the tensor-core share (% of kernel time) with the
    eligible time not on tensor cores (µs), and the top idle cause. None: not measured (no
    evidence, no figure). Above them the job's verdict: ``job_rows``
    (:func:`gpuscope.analysis.job.headline_rows`, the rows every face renders), ``rank`` the rank
    the figures above are of, ``distributed`` whether the run has several ranks."""

    step_p50_ms: float
    step_p90_ms: float
    step_max_ms: float
    step_mean_ms: float
    n_steps: int
    busy_pct: float | None
    wait_pct: float | None
    mfu_pct: float | None
    mfu_busy_pct: float | None
    peak_tflops: float | None
    dtype: str | None
    flops_per_step: float | None
    tensor_core_pct: float | None
    tc_eligible_not_tc_us: float | None
    top_idle: TopIdleCause | None
    job_rows: tuple[HeadlineRow, ...] = ()
    rank: int | None = None
    distributed: bool = False


def headline(report: RunReport, job: JobDiagnosis | None = None) -> Headline:
    """The headline cards of a report (what ``analyze --json`` says under the same names), under
    the job's verdict when ``job`` is given."""
    st, tc = report.step_stats, report.tensor_cores
    return Headline(
        step_p50_ms=st.p50_ms,
        step_p90_ms=st.p90_ms if st.p90_ms is not None else st.max_ms,
        step_max_ms=st.max_ms,
        step_mean_ms=st.mean_ms,
        n_steps=_n_steps(report),
        busy_pct=report.gpu_busy_pct,
        wait_pct=report.gpu_wait_pct,
        mfu_pct=report.mfu_pct,
        mfu_busy_pct=report.mfu_busy_pct,
        peak_tflops=report.peak_tflops,
        dtype=report.dtype,
        flops_per_step=report.flops_per_step,
        tensor_core_pct=getattr(tc, "tensor_core_pct", None),
        tc_eligible_not_tc_us=getattr(tc, "tc_eligible_not_tc_us", None),
        top_idle=top_idle_cause(report),
        job_rows=headline_rows(job) if job is not None else (),
        rank=int(report.rank),
        distributed=len(report.run.get("ranks") or []) > 1,
    )


@dataclass(frozen=True)
class Banners:
    """The Run page's lines above its cards: the warning that leads the page when the window holds
    no recognised GPU activity (no busy %, MFU or fix rests on anything; None otherwise), the
    other warnings as notes, and the profiler's cost (docs/metrics.md "Profiler cost")."""

    lead: str | None
    notes: tuple[str, ...]
    profiler: ProfilerCost | None


def banners(report: RunReport) -> Banners:
    """The banners of a report (its ``warnings`` and ``profiler``)."""
    warnings = [str(w) for w in report.warnings]
    lead = warnings.pop(0) if report.gpu_busy_pct is None and warnings else None
    return Banners(lead, tuple(warnings), report.profiler)


@dataclass(frozen=True)
class Breakdowns:
    """The Run page's two breakdowns: idle time by cause and kernel time by category over the
    window (µs; every cause, the categories that ran), and the steps to divide them by."""

    idle_us_by_cause: dict[str, float]
    kernel_us_by_category: dict[str, float]
    n_steps: int


def breakdowns(report: RunReport) -> Breakdowns:
    """The breakdowns of a report (no kernels without ``details``)."""
    kernels = report.kernels
    return Breakdowns(
        idle_us_by_cause=_idle_us_by_cause(report),
        kernel_us_by_category=dict(kernels.by_category) if kernels is not None else {},
        n_steps=_n_steps(report),
    )


@dataclass(frozen=True)
class TopKernels:
    """The Run page's top-kernels table: the kernels with the most time in the window (one row
    per name, the rest folded into an ``others`` row; µs of the window), and its steps."""

    rows: tuple[KernelRow, ...]
    n_steps: int


def top_kernels(report: RunReport) -> TopKernels:
    """The top kernels of a report (none without ``details``)."""
    kernels = report.kernels
    return TopKernels(tuple(kernels.top) if kernels is not None else (), _n_steps(report))


def rank_overview(report: RunReport) -> RankOverview:
    """The Run page's ranks section of a report: its rank, every rank's line, the straggler."""
    return _rank_overview(report.rank, report.ranks, report.straggler)


def roofline(report: RunReport) -> RooflineView | None:
    """The Run page's roofline section of a report (None: not analysed, no ``details`` or no
    GPU activity)."""
    return report.roofline.view() if report.roofline is not None else None


def modules(report: RunReport) -> ModulesView | None:
    """The Run page's modules section of a report (None: not analysed)."""
    return report.modules.view() if report.modules is not None else None


@dataclass(frozen=True)
class FixWords:
    """A fix named without a run (the Live page's advice): its unit's id, title and code."""

    id: str
    title: str
    code: str


LOADER_FIX = FixWords(_loader_unit.UNIT.id, _loader_unit.WORDS.title, _loader_unit.WORDS.code)
"""The input pipeline's fix (DataLoader workers), in its unit's words."""
SYNC_FIX = FixWords(_sync_unit.UNIT.id, _sync_unit.WORDS.title, _sync_unit.WORDS.code)
"""The per-step sync's fix, in its unit's words."""


@dataclass(frozen=True)
class FixEstimate:
    """A fix's gain re-timed along the critical path: its id, what its gain is a share of
    (``step_time`` or ``per_sample_time``, :attr:`Recommendation.footing`) and the estimate."""

    fix: str
    footing: str
    estimate: Estimate


@dataclass(frozen=True)
class PathSection:
    """The Run page's critical-path section: each step's path by what bounds it
    (:class:`StepPath`; none: the window holds no GPU activity, or the path was not traced), the
    category that bounds the path most (None without) and each category's share of the whole
    path (%), and the fixes whose gain was re-timed along it, in the report's order."""

    steps: tuple[StepPath, ...]
    dominant: str | None
    bound_by_pct: dict[str, float]
    estimates: tuple[FixEstimate, ...]


def critical_path_section(report: RunReport) -> PathSection:
    """The critical-path section of a report analysed ``with_path`` (an empty one without)."""
    cp = report.critical_path
    return PathSection(
        steps=tuple(cp.steps) if cp is not None else (),
        dominant=cp.dominant if cp is not None else None,
        bound_by_pct=cp.bound_by_pct if cp is not None else {},
        estimates=tuple(
            FixEstimate(r.id, r.footing, r.estimate)
            for r in report.recommendations
            if r.estimate is not None
        ),
    )
