"""Training steps and the analysis window.

A step is a ``ProfilerStep#N`` CPU annotation (or a user-chosen annotation). Its GPU extent reaches
the end of the last GPU activity launched (by correlation) from a runtime call made inside it.
The **window** runs from the CPU start of the first step to the later of the last step's CPU end
and the end of the last GPU activity launched from inside any step. Without steps the window is
the whole trace of the rank, seen as one step (never an empty result). All times are integer ns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from gpuscope.analysis.json_row import JsonRow
from gpuscope.analysis.rank_index import RankIndex, ids_param, in_ids, name_class
from gpuscope.analysis.store_access import (
    GPU_CATS_SQL,
    HOST_CATS_SQL,
    PROFILER_STEP_RE,
    bucket_width,
    by_bucket,
    execute,
    ms,
    regex,
)

if TYPE_CHECKING:
    from gpuscope.store import Connection


@dataclass
class Step:
    """One step. ``gpu_end_ns`` is the end of the last GPU activity launched from inside the
    step's CPU span (None when it launched nothing). Trace time, ns."""

    number: int
    cpu_start_ns: int
    cpu_end_ns: int
    gpu_end_ns: int | None = None

    @property
    def end_ns(self) -> int:
        """The later of the CPU end and the GPU extent."""
        return max(self.cpu_end_ns, self.gpu_end_ns if self.gpu_end_ns is not None else 0)


@dataclass
class Window:
    """The analysed time range ``[start_ns, end_ns)`` of one rank (trace time, ns) and its steps.

    ``source`` is ``"ProfilerStep"``, ``"annotation"`` (a user-chosen name) or ``"trace"`` (no
    step annotation: the whole trace as a single pseudo step numbered 0).
    """

    start_ns: int
    end_ns: int
    steps: list[Step] = field(default_factory=list)
    source: str = "ProfilerStep"
    annotation: str | None = "ProfilerStep"

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def n_steps(self) -> int:
        return max(1, len(self.steps))

    def step_bounds_ns(self) -> list[tuple[int, int]]:
        """Per step ``[start, end)``: from its CPU start to the next step's CPU start; the last
        step runs to the window end. The bounds tile the window exactly."""
        starts = [s.cpu_start_ns for s in self.steps] or [self.start_ns]
        ends = [*starts[1:], self.end_ns]
        return list(zip(starts, ends, strict=True))


@dataclass
class StepStats:
    """Step time, ms: ``mean`` = window / number of steps; ``p50`` (the median: the headline
    figure, one slow step does not move it), ``p90`` (linear interpolation, numpy's default),
    ``max`` and ``min`` over the per-step durations of :meth:`Window.step_bounds_ns`."""

    n_steps: int
    mean_ms: float
    p50_ms: float
    max_ms: float
    min_ms: float
    p90_ms: float | None = None

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "mean": self.mean_ms,
            "p50": self.p50_ms,
            "max": self.max_ms,
            "min": self.min_ms,
            "p90": self.p90_ms if self.p90_ms is not None else self.max_ms,
        }


_STEP_NUM = re.compile(r"#(\d+)$")
_PROFILER_STEPS = name_class(regex(PROFILER_STEP_RE))


def _host_spans(
    con: Connection, run_id: str, rank: int, name_cond: str, params: dict
) -> list[tuple[str, int, int]]:
    """(name, start, end) ns of the rank's host spans whose name satisfies ``name_cond``
    (``$``-parameters from ``params``), ordered by start then end (plain tuples: a DataFrame of a
    few rows cost more than the query)."""
    ix = RankIndex.shared(con, run_id, rank)
    ids = ids_param(ix.name_ids(name_cond, params))
    return execute(
        con,
        f"""
        SELECT n.name, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e
        FROM {ix.host()} e
        JOIN names n ON n.run_id = $run AND n.name_id = e.name_id
        WHERE e.ph = 'X' AND e.cat IN {HOST_CATS_SQL}
          AND e.dur_ns IS NOT NULL AND {in_ids("e.name_id", "ids", ids)}
        ORDER BY s, e
        """,
        {"run": run_id, "ids": ids},
    ).fetchall()


def _profiler_steps(con: Connection, run_id: str, rank: int) -> list[Step]:
    """One step per ``ProfilerStep#N`` number: from the earliest start to the latest end of its
    spans (a step split over several spans is one step), in number order."""
    bounds: dict[int, list[int]] = {}
    for name, s, e in _host_spans(con, run_id, rank, _PROFILER_STEPS, {}):
        m = _STEP_NUM.search(name)
        if m is None:  # the name filter is PROFILER_STEP_RE: every name ends in #N
            raise ValueError(f"rank {rank}: step span {name!r} has no step number")
        b = bounds.setdefault(int(m.group(1)), [int(s), int(e)])
        b[0], b[1] = min(b[0], int(s)), max(b[1], int(e))
    return [Step(n, s, e) for n, (s, e) in sorted(bounds.items())]


def _annotation_steps(con: Connection, run_id: str, rank: int, annotation: str) -> list[Step]:
    spans = _host_spans(
        con,
        run_id,
        rank,
        "name = $ann OR (starts_with(name, $ann || '#') AND regexp_matches(name, '#[0-9]+$'))",
        {"ann": annotation},
    )
    steps: list[Step] = []
    last_end = None
    for i, (name, s, e) in enumerate(spans):
        if last_end is not None and s < last_end:  # nested or a copy on another thread
            continue
        m = _STEP_NUM.search(name) if name != annotation else None
        steps.append(Step(int(m.group(1)) if m else i, int(s), int(e)))
        last_end = e
    return steps


def _gpu_ends(con: Connection, run_id: str, rank: int, steps: list[Step]) -> dict[int, int]:
    """Step number -> end of the last GPU activity launched from inside its CPU span.

    Launch calls are matched to steps by a hash join on time buckets (no sort of the calls)."""
    if not steps:
        return {}
    ix = RankIndex.shared(con, run_id, rank)
    lo = min(s.cpu_start_ns for s in steps)
    hi = max(s.cpu_end_ns for s in steps)
    params = {
        "run": run_id,
        "rank": rank,
        "num": [s.number for s in steps],
        "cs": [s.cpu_start_ns for s in steps],
        "ce": [s.cpu_end_ns for s in steps],
        "lo": lo,
        "hi": hi,
        "bw": bucket_width(lo, hi),
    }
    rows = execute(
        con,
        f"""
        WITH st AS (SELECT unnest($num) AS number, unnest($cs) AS cs, unnest($ce) AS ce),
        sb AS ({by_bucket("number, cs, ce", "cs", "ce", "st", "$lo", "$bw")}),
        rt AS (
            SELECT correlation, s AS ts_ns, (s - $lo) // $bw AS b FROM {ix.runtime()}
            WHERE s >= $lo AND s < $hi
        ),
        g AS (SELECT correlation, e AS ge FROM {ix.gpu()} WHERE correlation IS NOT NULL AND s >= $lo),
        j AS (SELECT rt.ts_ns, rt.b, g.ge FROM rt JOIN g USING (correlation))
        SELECT sb.number, max(j.ge) FROM j JOIN sb ON j.b = sb.k AND j.ts_ns >= sb.cs
        AND j.ts_ns < sb.ce GROUP BY sb.number
        """,
        params,
    ).fetchall()
    return {int(n): int(e) for n, e in rows if e is not None}


def _trace_extent(con: Connection, run_id: str, rank: int) -> tuple[int, int, int | None]:
    row = execute(
        con,
        f"""
        SELECT min(ts_ns), max(ts_ns + coalesce(dur_ns, 0)),
               max(ts_ns + dur_ns) FILTER (WHERE cat IN {GPU_CATS_SQL})
        FROM events WHERE run_id = $run AND rank = $rank AND ph <> 'M' AND ts_ns IS NOT NULL
        """,
        {"run": run_id, "rank": rank},
    ).fetchone()
    if row is None or row[0] is None:
        return 0, 0, None
    return int(row[0]), int(row[1]), (int(row[2]) if row[2] is not None else None)


def find_window(
    con: Connection, run_id: str, rank: int, step_annotation: str | None = None
) -> Window:
    """The window and steps of one rank.

    Steps come from ``step_annotation`` when given and present (exact name, or ``name#N``), else
    from ``ProfilerStep#N``, else the whole trace is one pseudo step. Read once per rank index
    (a rank's line, its report and its parts all ask: ~0.5 s each on a 1 GB rank); each caller
    gets its own copy.
    """
    w = RankIndex.shared(con, run_id, rank).memo(
        ("window", step_annotation), lambda: _find_window(con, run_id, rank, step_annotation)
    )
    return Window(w.start_ns, w.end_ns, [replace(s) for s in w.steps], w.source, w.annotation)


def _find_window(con: Connection, run_id: str, rank: int, step_annotation: str | None) -> Window:
    steps: list[Step] = []
    source, annotation = "trace", None
    if step_annotation:
        steps = _annotation_steps(con, run_id, rank, step_annotation)
        source, annotation = "annotation", step_annotation
    if not steps:
        steps = _profiler_steps(con, run_id, rank)
        source, annotation = "ProfilerStep", "ProfilerStep"
    if steps:
        ends = _gpu_ends(con, run_id, rank, steps)
        steps = [Step(s.number, s.cpu_start_ns, s.cpu_end_ns, ends.get(s.number)) for s in steps]
        steps.sort(key=lambda s: (s.cpu_start_ns, s.number))
        start = steps[0].cpu_start_ns
        gpu_end = max((s.gpu_end_ns for s in steps if s.gpu_end_ns is not None), default=None)
        end = max(steps[-1].cpu_end_ns, gpu_end if gpu_end is not None else start)
        return Window(start, end, steps, source, annotation)
    lo, hi, gpu_hi = _trace_extent(con, run_id, rank)
    return Window(lo, hi, [Step(0, lo, hi, gpu_hi)], "trace", None)


def step_stats(window: Window) -> StepStats:
    """Mean (window / steps), median, p90, max and min step time, ms."""
    d = np.array([e - s for s, e in window.step_bounds_ns()], dtype=np.int64)
    n = window.n_steps
    mean = ms(window.duration_ns / n) or 0.0
    if d.size == 0:
        return StepStats(n, mean, mean, mean, mean, mean)
    return StepStats(
        n,
        mean,
        float(np.median(d)) / 1e6,
        float(d.max()) / 1e6,
        float(d.min()) / 1e6,
        float(np.percentile(d, 90)) / 1e6,
    )


def step_frame(window: Window) -> pd.DataFrame:
    """One row per step: ``number``, ``start_ns``, ``end_ns`` (see :meth:`Window.step_bounds_ns`),
    ``duration_ns``, ``cpu_start_ns``, ``cpu_end_ns``, ``gpu_end_ns`` (nullable)."""
    bounds = window.step_bounds_ns()
    return pd.DataFrame(
        {
            "number": pd.array([s.number for s in window.steps], dtype="int64"),
            "start_ns": pd.array([b[0] for b in bounds], dtype="int64"),
            "end_ns": pd.array([b[1] for b in bounds], dtype="int64"),
            "duration_ns": pd.array([b[1] - b[0] for b in bounds], dtype="int64"),
            "cpu_start_ns": pd.array([s.cpu_start_ns for s in window.steps], dtype="int64"),
            "cpu_end_ns": pd.array([s.cpu_end_ns for s in window.steps], dtype="int64"),
            "gpu_end_ns": pd.array([s.gpu_end_ns for s in window.steps], dtype="Int64"),
        }
    )


@dataclass(frozen=True)
class StepRow(JsonRow):
    """One step of a report (``RunReport.per_step``): its number, start (µs of trace time),
    duration and CPU time (ms), the end of its GPU work (µs; None when none), GPU busy (% of the
    step; None without GPU activity) and its wait in collectives (ms; None without a busy
    split)."""

    number: int
    start_us: float | None
    duration_ms: float | None
    cpu_ms: float | None
    gpu_end_us: float | None
    busy_pct: float | None
    wait_ms: float | None
