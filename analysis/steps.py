"""Training steps and the analysis window.

A step is a ``ProfilerStep#N`` CPU annotation (or a user-chosen annotation). Its GPU extent reaches
the end of the last GPU activity launched (by correlation) from a runtime call made inside it.
The **window** runs from the CPU start of the first step to the later of the last step's CPU end
and the end of the last GPU activity launched from inside any step. A last step the profiler cut as
it began (nothing in it, no GPU work, shorter than every other step: :func:`_cut_last_steps`) is
not a step of the window, nor are the first steps that compile or capture CUDA graphs when steps
without either follow (warm-up: :func:`_warmup_steps`, :attr:`Window.warmup`). Without steps the window is
the whole trace of the rank, seen as one step (never an empty result). All times are integer ns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
from gpuscope.analysis.json_row import JsonRow
from gpuscope.analysis.rank_index import RankBatch, RankIndex, ids_param, in_ids, name_class
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
    warmup: tuple[int, ...] = ()
    """Step numbers left out before the window: warm-up steps (:func:`_warmup_steps`)."""

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
WARMUP_RE = (
    r"^(cuda|cu|hip)StreamBeginCapture|\(dynamo_timed\)$|^entire_frame_compile$"
    r"|^compile_attempt_\d+$"
)
"""Host events of a warm-up step: a CUDA-graph capture (``cudaStreamBeginCapture``, the ``cu``/
``hip`` ones) or torch.compile compiling (Dynamo's ``dynamo_timed`` spans: ``_compile.
compile_inner (dynamo_timed)``, ``entire_frame_compile``, ``compile_attempt_0``)."""
_WARMUP = name_class(regex(WARMUP_RE))


class _Tables(Protocol):
    """What the window is read from: one rank's index, or a batch of ranks' tables
    (:class:`~gpuscope.analysis.rank_index.RankBatch`), each table with ``rank``."""

    con: Connection
    run_id: str

    def host(self) -> str: ...
    def gpu(self) -> str: ...
    def runtime(self) -> str: ...
    def name_ids(self, cond: str, params: dict[str, Any] | None = None) -> list[int]: ...


def _host_spans(
    src: _Tables, ranks: list[int], name_cond: str, params: dict[str, Any]
) -> dict[int, list[tuple[str, int, int]]]:
    """Per rank of ``ranks``: (name, start, end) ns of its host spans whose name satisfies
    ``name_cond`` (``$``-parameters from ``params``), ordered by start then end (plain tuples: a
    DataFrame of a few rows cost more than the query)."""
    ids = ids_param(src.name_ids(name_cond, params))
    rows = execute(
        src.con,
        f"""
        SELECT e.rank, n.name, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e
        FROM {src.host()} e
        JOIN names n ON n.run_id = $run AND n.name_id = e.name_id
        WHERE list_contains($rk, e.rank) AND e.ph = 'X' AND e.cat IN {HOST_CATS_SQL}
          AND e.dur_ns IS NOT NULL AND {in_ids("e.name_id", "ids", ids)}
        ORDER BY e.rank, s, e
        """,
        {"run": src.run_id, "ids": ids, "rk": ranks},
    ).fetchall()
    out: dict[int, list[tuple[str, int, int]]] = {r: [] for r in ranks}
    for rank, name, s, e in rows:
        out[int(rank)].append((name, s, e))
    return out


def _profiler_steps(src: _Tables, ranks: list[int]) -> dict[int, list[Step]]:
    """Per rank: one step per ``ProfilerStep#N`` number, from the earliest start to the latest
    end of its spans (a step split over several spans is one step), in number order."""
    out = {}
    for rank, spans in _host_spans(src, ranks, _PROFILER_STEPS, {}).items():
        bounds: dict[int, list[int]] = {}
        for name, s, e in spans:
            m = _STEP_NUM.search(name)
            if m is None:  # the name filter is PROFILER_STEP_RE: every name ends in #N
                raise ValueError(f"rank {rank}: step span {name!r} has no step number")
            b = bounds.setdefault(int(m.group(1)), [int(s), int(e)])
            b[0], b[1] = min(b[0], int(s)), max(b[1], int(e))
        out[rank] = [Step(n, s, e) for n, (s, e) in sorted(bounds.items())]
    return out


def _annotation_steps(src: _Tables, ranks: list[int], annotation: str) -> dict[int, list[Step]]:
    per_rank = _host_spans(
        src,
        ranks,
        "name = $ann OR (starts_with(name, $ann || '#') AND regexp_matches(name, '#[0-9]+$'))",
        {"ann": annotation},
    )
    out = {}
    for rank, spans in per_rank.items():
        steps: list[Step] = []
        last_end = None
        for i, (name, s, e) in enumerate(spans):
            if last_end is not None and s < last_end:  # nested or a copy on another thread
                continue
            m = _STEP_NUM.search(name) if name != annotation else None
            steps.append(Step(int(m.group(1)) if m else i, int(s), int(e)))
            last_end = e
        out[rank] = steps
    return out


def _gpu_ends(src: _Tables, steps: dict[int, list[Step]]) -> dict[int, dict[int, int]]:
    """Per rank: step number -> end of the last GPU activity launched from inside its CPU span.

    Launch calls are matched to steps by a hash join on time buckets (no sort of the calls),
    each rank's buckets cutting its own steps' extent."""
    ranks = [r for r, st in steps.items() if st]
    if not ranks:
        return {}
    los = [min(s.cpu_start_ns for s in steps[r]) for r in ranks]
    his = [max(s.cpu_end_ns for s in steps[r]) for r in ranks]
    flat = [(r, s) for r in ranks for s in steps[r]]
    params = {
        "rk": [r for r, _ in flat],
        "num": [s.number for _, s in flat],
        "cs": [s.cpu_start_ns for _, s in flat],
        "ce": [s.cpu_end_ns for _, s in flat],
        "pr": ranks,
        "plo": los,
        "phi": his,
        "pbw": [bucket_width(lo, hi) for lo, hi in zip(los, his, strict=True)],
    }
    rows = execute(
        src.con,
        f"""
        WITH st AS (SELECT unnest($rk) AS rank, unnest($num) AS number, unnest($cs) AS cs,
                           unnest($ce) AS ce),
        pr AS (SELECT unnest($pr) AS rank, unnest($plo) AS lo, unnest($phi) AS hi,
                      unnest($pbw) AS bw),
        sb AS ({by_bucket("st.rank, number, cs, ce", "cs", "ce", "st JOIN pr USING (rank)", "lo", "bw")}),
        rt AS (
            SELECT r.rank, correlation, s AS ts_ns, (s - pr.lo) // pr.bw AS b
            FROM {src.runtime()} r JOIN pr ON r.rank = pr.rank
            WHERE s >= pr.lo AND s < pr.hi
        ),
        g AS (
            SELECT g.rank, correlation, e AS ge FROM {src.gpu()} g JOIN pr ON g.rank = pr.rank
            WHERE correlation IS NOT NULL AND s >= pr.lo
        ),
        j AS (SELECT rt.rank, rt.ts_ns, rt.b, g.ge FROM rt JOIN g USING (rank, correlation))
        SELECT sb.rank, sb.number, max(j.ge) FROM j JOIN sb ON j.rank = sb.rank AND j.b = sb.k
        AND j.ts_ns >= sb.cs AND j.ts_ns < sb.ce GROUP BY sb.rank, sb.number
        """,
        params,
    ).fetchall()
    out: dict[int, dict[int, int]] = {r: {} for r in ranks}
    for r, n, e in rows:
        if e is not None:
            out[int(r)][int(n)] = int(e)
    return out


def _warmup_steps(src: _Tables, steps: dict[int, list[Step]]) -> dict[int, int]:
    """Per rank: how many of its first steps are warm-up, left out of the window: the leading
    steps whose CPU span holds a :data:`WARMUP_RE` event (torch.compile compiling, a CUDA-graph
    capture), as long as a step without one follows. A window that starts at the first call of a
    compiled model is mostly compilation (seconds) and capture: its figures per step, and every
    fix estimated on them, would describe the warm-up, not the steps that repeat."""
    ranks = [r for r, st in steps.items() if len(st) > 1]
    if not ranks:
        return {}
    ids = ids_param(src.name_ids(_WARMUP))
    if ids == ids_param([]):
        return {}
    flat = [(r, s) for r in ranks for s in steps[r]]
    rows = execute(
        src.con,
        f"""
        WITH st AS (SELECT unnest($rk) AS rank, unnest($num) AS number, unnest($cs) AS cs,
                           unnest($ce) AS ce)
        SELECT DISTINCT st.rank, st.number FROM {src.host()} e JOIN st USING (rank)
        WHERE e.ts_ns >= st.cs AND e.ts_ns < st.ce AND {in_ids("e.name_id", "ids", ids)}
        """,
        {
            "rk": [r for r, _ in flat],
            "num": [s.number for _, s in flat],
            "cs": [s.cpu_start_ns for _, s in flat],
            "ce": [s.cpu_end_ns for _, s in flat],
            "ids": ids,
        },
    ).fetchall()
    warm = {(int(r), int(n)) for r, n in rows}
    out: dict[int, int] = {}
    for r in ranks:
        ordered = sorted(steps[r], key=lambda s: (s.cpu_start_ns, s.number))
        k = 0
        while k < len(ordered) and (r, ordered[k].number) in warm:
            k += 1
        if 0 < k < len(ordered):
            out[r] = k
    return out


def _cut_last_steps(
    src: _Tables, steps: dict[int, list[Step]], ends: dict[int, dict[int, int]]
) -> set[int]:
    """The ranks whose last ``ProfilerStep`` is a stub the profiler cut as it began: the last step
    (by CPU start) when it launched no GPU work while an earlier step did, holds no host event
    but step annotations, and is shorter than every earlier step (the step ``prof.step()`` opens
    just before the profiler stops: an annotation of a few µs and nothing in it). Such a step is
    left out of the window: counted, it would halve a two-step window's figures per step and make
    a step period of its few µs."""
    cand: dict[int, Step] = {}
    for r, st in steps.items():
        if len(st) < 2:
            continue
        ordered = sorted(st, key=lambda s: (s.cpu_start_ns, s.number))
        last, rest = ordered[-1], ordered[:-1]
        got = ends.get(r, {})
        if last.number in got or not any(s.number in got for s in rest):
            continue
        span = last.cpu_end_ns - last.cpu_start_ns
        if span < min(s.cpu_end_ns - s.cpu_start_ns for s in rest):
            cand[r] = last
    if not cand:
        return set()
    ids = ids_param(src.name_ids(_PROFILER_STEPS))
    rk = list(cand)
    rows = execute(
        src.con,
        f"""
        WITH st AS (SELECT unnest($rk) AS rank, unnest($cs) AS cs, unnest($ce) AS ce)
        SELECT DISTINCT e.rank FROM {src.host()} e JOIN st USING (rank)
        WHERE e.ph = 'X' AND e.cat IN {HOST_CATS_SQL} AND e.ts_ns >= st.cs AND e.ts_ns < st.ce
          AND NOT {in_ids("e.name_id", "ids", ids)}
        """,
        {
            "rk": rk,
            "cs": [cand[r].cpu_start_ns for r in rk],
            "ce": [cand[r].cpu_end_ns for r in rk],
            "ids": ids,
        },
    ).fetchall()
    busy = {int(r) for (r,) in rows}
    return {r for r in rk if r not in busy}


def _trace_extent(
    con: Connection, run_id: str, ranks: list[int]
) -> dict[int, tuple[int, int, int | None]]:
    rows = execute(
        con,
        f"""
        SELECT rank, min(ts_ns), max(ts_ns + coalesce(dur_ns, 0)),
               max(ts_ns + dur_ns) FILTER (WHERE cat IN {GPU_CATS_SQL})
        FROM events WHERE run_id = $run AND list_contains($rk, rank) AND ph <> 'M'
          AND ts_ns IS NOT NULL
        GROUP BY rank
        """,
        {"run": run_id, "rk": ranks},
    ).fetchall()
    out: dict[int, tuple[int, int, int | None]] = dict.fromkeys(ranks, (0, 0, None))
    for r, lo, hi, gpu_hi in rows:
        if lo is not None:
            out[int(r)] = (int(lo), int(hi), int(gpu_hi) if gpu_hi is not None else None)
    return out


def find_window(
    con: Connection, run_id: str, rank: int, step_annotation: str | None = None
) -> Window:
    """The window and steps of one rank.

    Steps come from ``step_annotation`` when given and present (exact name, or ``name#N``), else
    from ``ProfilerStep#N``, else the whole trace is one pseudo step. Read once per rank index
    (a rank's line, its report and its parts all ask: ~0.5 s each on a 1 GB rank); each caller
    gets its own copy. The same statements as :func:`find_windows`, over a batch of one.
    """
    ix = RankIndex.shared(con, run_id, rank)
    w = ix.memo(
        ("window", step_annotation), lambda: _find_windows(ix, [rank], step_annotation)[rank]
    )
    return _copy(w)


def find_windows(batch: RankBatch, step_annotation: str | None = None) -> dict[int, Window]:
    """:func:`find_window` of every rank of ``batch``, from one statement of each kind for the
    batch (rank -> window)."""
    return _find_windows(batch, list(batch.ranks), step_annotation)


def _copy(w: Window) -> Window:
    return Window(
        w.start_ns, w.end_ns, [replace(s) for s in w.steps], w.source, w.annotation, w.warmup
    )


def _find_windows(src: _Tables, ranks: list[int], step_annotation: str | None) -> dict[int, Window]:
    steps: dict[int, list[Step]] = {r: [] for r in ranks}
    source: dict[int, tuple[str, str | None]] = {}
    if step_annotation:
        for r, st in _annotation_steps(src, ranks, step_annotation).items():
            if st:
                steps[r], source[r] = st, ("annotation", step_annotation)
    need = [r for r in ranks if not steps[r]]
    if need:
        for r, st in _profiler_steps(src, need).items():
            if st:
                steps[r], source[r] = st, ("ProfilerStep", "ProfilerStep")
    ends = _gpu_ends(src, {r: st for r, st in steps.items() if st})
    profiler = {r: st for r, st in steps.items() if source.get(r, ("",))[0] == "ProfilerStep"}
    stubs = _cut_last_steps(src, profiler, ends)
    warm = _warmup_steps(src, profiler)
    out: dict[int, Window] = {}
    for r in ranks:
        if not steps[r]:
            continue
        got = ends.get(r, {})
        st = [Step(s.number, s.cpu_start_ns, s.cpu_end_ns, got.get(s.number)) for s in steps[r]]
        st.sort(key=lambda s: (s.cpu_start_ns, s.number))
        if r in stubs:
            st = st[:-1]
        k = warm.get(r, 0) if len(st) > warm.get(r, 0) else 0
        left_out, st = tuple(s.number for s in st[:k]), st[k:]
        start = st[0].cpu_start_ns
        gpu_end = max((s.gpu_end_ns for s in st if s.gpu_end_ns is not None), default=None)
        end = max(st[-1].cpu_end_ns, gpu_end if gpu_end is not None else start)
        out[r] = Window(start, end, st, *source[r], warmup=left_out)
    rest = [r for r in ranks if r not in out]
    if rest:
        for r, (lo, hi, gpu_hi) in _trace_extent(src.con, src.run_id, rest).items():
            out[r] = Window(lo, hi, [Step(0, lo, hi, gpu_hi)], "trace", None)
    return out


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
