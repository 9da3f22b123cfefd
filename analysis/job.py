"""The job's verdict: one diagnosis per run, over all its ranks, that every face renders.

A vertical slice: the computation (:func:`diagnose`, :func:`job_step_time`), its typed frozen
result (:class:`JobDiagnosis`) and its view model (:func:`headline_rows`, :func:`rank_rows`).
Built from the ranks' stored cross-rank parts (:mod:`gpuscope.analysis.rank_frames`: each rank's
window and steps, its clock offset) and the analysis of the pace-setting rank; one rank's detail
(:class:`~gpuscope.analysis.report.RunReport`) hangs under it on demand.

Definitions (docs/metrics.md, "The job"):

- **job step time**: the period between step completions. A step completes when its last rank's
  work for it ends (a rank's step ends at the later of its CPU end and the end of the GPU work it
  launched, on the clock its time offset aligns); the median of the periods, with p90 and max.
  The same whichever rank is viewed. The profiler's **drain step** (the window's last step, when
  on some rank it lasts more than :data:`DRAIN_FACTOR` times that rank's median step: the host
  stopped stepping while the GPU emptied the queue) is said and kept out of the median.
- **pace-setter**: the rank the others wait for (the straggler of the collectives matched
  across ranks); a run of one rank sets its own pace.
- **where the time goes**: compute / communication transfer / wait / idle (by cause) over every
  rank's window (% of the sum of the windows), and per rank.
- **findings**: the fixes of the pace-setting rank (fixing a rank that waits gains nothing),
  in the order the fix list gives them.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.fixes.base import (
    Recommendation,  # at run time: a field's type (typing.get_type_hints)
)
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.idle import CAUSES
from gpuscope.analysis.peaks import mfu_pct
from gpuscope.analysis.steps import Window, step_stats

if TYPE_CHECKING:
    from gpuscope.analysis.report import RunReport
    from gpuscope.analysis.straggler_cause import PaceSetterCause
    from gpuscope.store import Connection

#: The window's last step is the profiler's drain step when, on some rank, it lasts more than
#: this many times the median of that rank's other steps (their CPU-start-to-next-start spans).
DRAIN_FACTOR = 1.5


@dataclass(frozen=True)
class JobStepTime:
    """The job's step time, ms (module doc): median (``p50_ms``), 90th percentile (linear
    interpolation), max and mean of the periods kept; ``n_periods`` of them; ``by_step``: (step
    number, period ms) of every period, the drain's included; ``drain_step`` / ``drain_ms``: the
    profiler's drain step and its longest span on a rank (None: no drain). ``source``:
    ``completions`` (periods between step completions), else ``rank_steps`` (fewer than two
    completions: the pace-setting rank's own step spans)."""

    p50_ms: float
    p90_ms: float
    max_ms: float
    mean_ms: float
    n_periods: int
    by_step: tuple[tuple[int, float], ...] = ()
    drain_step: int | None = None
    drain_ms: float | None = None
    source: str = "completions"

    @property
    def kept_ms(self) -> tuple[float, ...]:
        """The periods the figures are of (ms, step order): every period but the drain's."""
        return tuple(v for n, v in self.by_step if n != self.drain_step)

    def to_json(self) -> dict[str, Any]:
        return {
            "p50": self.p50_ms,
            "p90": self.p90_ms,
            "max": self.max_ms,
            "mean": self.mean_ms,
            "n_periods": self.n_periods,
            "by_step": {str(n): v for n, v in self.by_step},
            "drain_step": self.drain_step,
            "drain_ms": self.drain_ms,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobStepTime:
        """The step time :meth:`to_json` wrote."""
        return cls(
            d["p50"],
            d["p90"],
            d["max"],
            d["mean"],
            d["n_periods"],
            tuple((int(n), v) for n, v in d["by_step"].items()),
            d["drain_step"],
            d["drain_ms"],
            d["source"],
        )


@dataclass(frozen=True)
class TimeSplit:
    """Where time goes, % of a window (of the sum of every rank's windows for the job): GPU busy,
    compute, communication transfer and wait (inside busy), idle, and idle by cause. None: not
    measured (no GPU activity, or no busy split)."""

    busy_pct: float | None
    compute_pct: float | None
    transfer_pct: float | None
    wait_pct: float | None
    idle_pct: float | None
    idle_by_cause_pct: Mapping[str, float] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "busy_pct": self.busy_pct,
            "compute_pct": self.compute_pct,
            "transfer_pct": self.transfer_pct,
            "wait_pct": self.wait_pct,
            "idle_pct": self.idle_pct,
            "idle_by_cause_pct": (
                dict(self.idle_by_cause_pct) if self.idle_by_cause_pct is not None else None
            ),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TimeSplit:
        """The split :meth:`to_json` wrote (other keys beside it are left)."""
        by_cause = d["idle_by_cause_pct"]
        return cls(
            d["busy_pct"],
            d["compute_pct"],
            d["transfer_pct"],
            d["wait_pct"],
            d["idle_pct"],
            dict(by_cause) if by_cause is not None else None,
        )


@dataclass(frozen=True)
class RankShare:
    """One rank in the job: its time split (% of its window), its own median step (ms, CPU-start
    spans: a rank that waits shows the pace only through its waits), the wait it causes the others
    (ms per step; 0 for a rank that is never last) and its window (ms)."""

    rank: int
    split: TimeSplit
    step_p50_ms: float | None
    caused_wait_ms_per_step: float
    window_ms: float

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            **self.split.to_json(),
            "step_p50_ms": self.step_p50_ms,
            "caused_wait_ms_per_step": self.caused_wait_ms_per_step,
            "window_ms": self.window_ms,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RankShare:
        """The rank :meth:`to_json` wrote."""
        return cls(
            d["rank"],
            TimeSplit.from_json(d),
            d["step_p50_ms"],
            d["caused_wait_ms_per_step"],
            d["window_ms"],
        )


@dataclass(frozen=True)
class Finding:
    """One ranked finding of the job: ``kind`` (``pace_cause``: why the pace-setter is slow;
    ``fix``: a fix of the pace-setting rank), its ``id``, title, one line of evidence, the
    estimated step-time gain (%; None: not estimated), the rank it is about, and the estimate's
    range (``low_pct``..``high_pct``, %; None: a point, or not estimated)."""

    kind: str
    id: str
    title: str
    detail: str
    gain_pct: float | None
    rank: int
    low_pct: float | None = None
    high_pct: float | None = None

    @property
    def gain_words(self) -> str:
        """The estimate in words: "step time down 17 % (range 11 to 23 %)"; a point below 0:
        "not expected to help: step time up 14 % by the estimate (...)"; "" without one."""
        if self.gain_pct is None:
            return ""
        if self.gain_pct < 0:
            out = f"not expected to help: step time up {sig3(-self.gain_pct)} % by the estimate"
        else:
            out = f"step time down {sig3(self.gain_pct)} %"
        if self.low_pct is not None and self.high_pct is not None:
            out += f" (range {sig3(self.low_pct)} to {sig3(self.high_pct)} %)"
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "title": self.title,
            "detail": self.detail,
            "gain_pct": self.gain_pct,
            "low_pct": self.low_pct,
            "high_pct": self.high_pct,
            "rank": self.rank,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Finding:
        """The finding :meth:`to_json` wrote."""
        return cls(
            d["kind"],
            d["id"],
            d["title"],
            d["detail"],
            d["gain_pct"],
            d["rank"],
            d["low_pct"],
            d["high_pct"],
        )


@dataclass(frozen=True)
class PathStep:
    """One step of the job's critical path across ranks (docs/metrics.md, "The chain across
    ranks"): the rank the other waits for in it (``late_rank``), its segment (``step_ms``, ms) and
    that segment's bound-by split (``bound_by_ms``: compute / host / data / comm / wait, ms), and
    the segment re-timed with the verdict's cause removed on the pace-setter (``retimed_ms``;
    None when the verdict re-times the whole step instead: profiler, or a cause found once the
    profiler's cost is gone)."""

    step: int
    late_rank: int
    step_ms: float
    bound_by_ms: Mapping[str, float]
    retimed_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "late_rank": self.late_rank,
            "step_ms": self.step_ms,
            "bound_by_ms": dict(self.bound_by_ms),
            "retimed_ms": self.retimed_ms,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PathStep:
        """The step :meth:`to_json` wrote."""
        return cls(d["step"], d["late_rank"], d["step_ms"], dict(d["bound_by_ms"]), d["retimed_ms"])


@dataclass(frozen=True)
class JobDiagnosis:
    """The job's verdict (module doc): its step time, the pace-setting rank and the wait it costs
    the rank that waits longest for it (``wait_ms_per_step``, ``waiting_rank``; None for a run of
    one rank or without matched collectives) and its caused wait summed over the others
    (``caused_wait_ms_per_step``), where the job's time goes (``split``, ``per_rank``), its MFU
    (the pace-setter's FLOPs per step over the job step time, against its peak; None without
    them), and the ranked ``findings`` (computed on ``fix_rank``: the pace-setter). The chain
    across ranks (None/empty without one): ``path`` (each step's critical path, :class:`PathStep`),
    ``bound_by_pct`` (the path's split over its steps, % of their sum), ``cause_rank`` (the rank
    whose own cause the verdict names: the pace-setter, or the rank that sets the pace once the
    profiler's cost is gone), ``retimed_step_ms`` (the job step with that cause removed, ms) and
    ``retimed_from_ms`` (the step it re-times: the job's mean step, or the step measured without
    the profiler). ``fixes``: the job's fixes with their estimates, in the findings' order: the
    fix for the pace-setter's own cause (:func:`cause_fix`), then the pace-setting rank's."""

    run_id: str
    ranks: tuple[int, ...]
    step: JobStepTime
    pace_setter: int
    waiting_rank: int | None
    wait_ms_per_step: float | None
    caused_wait_ms_per_step: float | None
    split: TimeSplit
    per_rank: tuple[RankShare, ...]
    mfu_pct: float | None
    fix_rank: int
    findings: tuple[Finding, ...]
    path: tuple[PathStep, ...] = ()
    bound_by_pct: Mapping[str, float] | None = None
    cause_rank: int | None = None
    retimed_step_ms: float | None = None
    retimed_from_ms: float | None = None
    fixes: tuple[Recommendation, ...] = ()

    @property
    def distributed(self) -> bool:
        return len(self.ranks) > 1

    @property
    def first_fix(self) -> Finding | None:
        """The first finding that is a fix (None: no fix)."""
        return next((f for f in self.findings if f.kind == "fix"), None)

    def to_json(self) -> dict[str, Any]:
        """``analyze --json``'s ``job`` (docs/cli-json.md)."""
        return {
            "ranks": list(self.ranks),
            "step_time_ms": self.step.to_json(),
            "pace_setter": self.pace_setter,
            "waiting_rank": self.waiting_rank,
            "wait_ms_per_step": self.wait_ms_per_step,
            "caused_wait_ms_per_step": self.caused_wait_ms_per_step,
            "split": self.split.to_json(),
            "per_rank": [r.to_json() for r in self.per_rank],
            "mfu_pct": self.mfu_pct,
            "fix_rank": self.fix_rank,
            "findings": [f.to_json() for f in self.findings],
            "critical_path": {
                "bound_by_pct": dict(self.bound_by_pct) if self.bound_by_pct is not None else None,
                "by_step": [p.to_json() for p in self.path],
            },
            "cause_rank": self.cause_rank,
            "retimed_step_ms": self.retimed_step_ms,
            "retimed_from_ms": self.retimed_from_ms,
            "recommendations": [r.to_json() for r in self.fixes],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], run_id: str) -> JobDiagnosis:
        """The verdict :meth:`to_json` wrote (``analyze --json``'s ``job``) of run ``run_id``:
        what the text faces read of it, equal to the one computed (the stored document's
        ``analyze`` text is the computed one's)."""
        cp = d["critical_path"]
        bound_by = cp["bound_by_pct"]
        return cls(
            run_id,
            tuple(d["ranks"]),
            JobStepTime.from_json(d["step_time_ms"]),
            d["pace_setter"],
            d["waiting_rank"],
            d["wait_ms_per_step"],
            d["caused_wait_ms_per_step"],
            TimeSplit.from_json(d["split"]),
            tuple(RankShare.from_json(r) for r in d["per_rank"]),
            d["mfu_pct"],
            d["fix_rank"],
            tuple(Finding.from_json(f) for f in d["findings"]),
            tuple(PathStep.from_json(p) for p in cp["by_step"]),
            dict(bound_by) if bound_by is not None else None,
            d["cause_rank"],
            d["retimed_step_ms"],
            d["retimed_from_ms"],
            tuple(Recommendation.from_json(r) for r in d["recommendations"]),
        )


# -- the job step time ----------------------------------------------------------------------------


def _drain(windows: Mapping[int, Window]) -> tuple[int | None, float | None]:
    """The profiler's drain step (module doc) and its longest span on a rank (ms), or (None, None)."""
    found: tuple[int | None, float | None] = (None, None)
    for w in windows.values():
        if w.source == "trace" or len(w.steps) < 3:
            continue
        spans = [(b - a) / 1e6 for a, b in w.step_bounds_ns()]
        last, others = spans[-1], spans[:-1]
        drains = last > DRAIN_FACTOR * statistics.median(others)
        if drains and (found[1] is None or last > found[1]):
            found = (w.steps[-1].number, last)
    return found


def step_time(windows: Mapping[int, tuple[Window, int]], pace: int | None = None) -> JobStepTime:
    """The job step time (module doc) of every rank's window and clock offset (ns: absolute time =
    trace time + offset), by rank. ``pace``: the rank whose own step spans stand in when fewer than
    two step completions are known (default: the lowest rank)."""
    drain, drain_ms = _drain({r: w for r, (w, _) in windows.items()})
    stepped = {r: (w, off) for r, (w, off) in windows.items() if w.source != "trace" and w.steps}
    common: set[int] | None = None
    for w, _ in stepped.values():
        nums = {s.number for s in w.steps}
        common = nums if common is None else common & nums
    done: dict[int, int] = {}  # step number -> its completion (absolute ns)
    if stepped and common:
        for w, off in stepped.values():
            for s in w.steps:
                if s.number in common:
                    end = s.end_ns + off
                    done[s.number] = max(done.get(s.number, end), end)
    order = sorted(done)
    by_step = tuple((b, (done[b] - done[a]) / 1e6 / (b - a)) for a, b in itertools.pairwise(order))
    kept = [v for n, v in by_step if n != drain]
    if kept:
        v = np.asarray(kept, dtype=float)
        return JobStepTime(
            p50_ms=float(np.median(v)),
            p90_ms=float(np.percentile(v, 90)),
            max_ms=float(v.max()),
            mean_ms=float(v.mean()),
            n_periods=len(kept),
            by_step=by_step,
            drain_step=drain if drain in dict(by_step) else None,
            drain_ms=drain_ms if drain in dict(by_step) else None,
        )
    rank = pace if pace is not None and pace in windows else min(windows)
    st = step_stats(windows[rank][0])
    return JobStepTime(
        p50_ms=st.p50_ms,
        p90_ms=st.p90_ms if st.p90_ms is not None else st.max_ms,
        max_ms=st.max_ms,
        mean_ms=st.mean_ms,
        n_periods=0,
        source="rank_steps",
    )


def _windows(con: Connection, run_id: str) -> dict[int, tuple[Window, int]]:
    """Every rank's window and clock offset from its cross-rank part (stored; computed when
    missing or stale)."""
    from gpuscope.analysis.rank_frames import window_of
    from gpuscope.analysis.stored_parts import cross_rank

    return {r: (window_of(p), int(p["offset_ns"])) for r, p in cross_rank(con, run_id).items()}


def job_step_time(con: Connection, run_id: str) -> JobStepTime:
    """The job step time of a stored run (module doc) from its ranks' stored parts alone."""
    return step_time(_windows(con, run_id))


# -- the diagnosis ----------------------------------------------------------------------------------


def _pct(part_ns: float, whole_ns: float) -> float | None:
    return 100.0 * part_ns / whole_ns if whole_ns > 0 else None


def _rank_split(line: Any) -> TimeSplit:
    """A rank's :class:`TimeSplit` from its line (:class:`~gpuscope.analysis.rank_row.RankRow`)."""
    busy = line.gpu_busy_pct
    idle = None if busy is None else max(0.0, 100.0 - busy)
    by_cause = None
    if busy is not None and line.idle_by_cause_us_per_step is not None and line.step_time_ms:
        step_us = line.step_time_ms * 1e3  # the mean step: window / steps
        by_cause = {c: 100.0 * line.idle_by_cause_us_per_step.get(c, 0.0) / step_us for c in CAUSES}
    return TimeSplit(
        busy_pct=busy,
        compute_pct=line.compute_pct if busy is not None else None,
        transfer_pct=line.comm_transfer_pct if busy is not None else None,
        wait_pct=line.comm_wait_pct if busy is not None else None,
        idle_pct=idle,
        idle_by_cause_pct=by_cause,
    )


def _job_split(shares: list[RankShare]) -> TimeSplit:
    """Every rank's split weighted by its window: % of the sum of the windows (a figure only
    where every rank has it)."""
    if len(shares) == 1:  # the job is that rank
        return shares[0].split
    total = sum(s.window_ms for s in shares)

    def mean(get: Callable[[TimeSplit], float | None]) -> float | None:
        weighted = 0.0
        for s in shares:
            v = get(s.split)
            if v is None:
                return None  # a figure only where every rank has it
            weighted += float(v) * s.window_ms
        return weighted / total if shares and total > 0 else None

    def cause_of(c: str) -> Callable[[TimeSplit], float | None]:
        return lambda t: (t.idle_by_cause_pct or {}).get(c, 0.0)

    by_cause = None
    if shares and all(s.split.idle_by_cause_pct is not None for s in shares):
        by_cause = {c: mean(cause_of(c)) or 0.0 for c in CAUSES}
    return TimeSplit(
        busy_pct=mean(lambda t: t.busy_pct),
        compute_pct=mean(lambda t: t.compute_pct),
        transfer_pct=mean(lambda t: t.transfer_pct),
        wait_pct=mean(lambda t: t.wait_pct),
        idle_pct=mean(lambda t: t.idle_pct),
        idle_by_cause_pct=by_cause,
    )


def _straggler_of_parts(
    con: Connection, run_id: str, parts: dict[int, dict[str, Any]]
) -> int | None:
    """The straggler of the collectives matched from the ranks' parts (None: no match)."""
    from gpuscope.analysis.rank_frames import stats_of, window_of
    from gpuscope.analysis.report import _match_from_parts

    if not any(p.get("device") is not None for p in parts.values()):
        return None
    first = parts[min(parts)]
    match = _match_from_parts(
        con, run_id, parts, window_of(first).n_steps, stats_of(first).mean_ms * 1e6
    )
    return match.straggler.rank if match.straggler is not None else None


def _last_most_often(windows: Mapping[int, tuple[Window, int]]) -> int:
    """The rank whose steps complete last most often (ties: the lowest), for a job without
    matched collectives."""
    last: dict[int, tuple[int, int]] = {}  # step -> (end, rank)
    for r, (w, off) in sorted(windows.items()):
        for s in w.steps:
            end = s.end_ns + off
            if s.number not in last or end > last[s.number][0]:
                last[s.number] = (end, r)
    counts: dict[int, int] = {}
    for _, r in last.values():
        counts[r] = counts.get(r, 0) + 1
    return max(sorted(windows), key=lambda r: counts.get(r, 0))


def _est(rec: Recommendation | None) -> tuple[float | None, float | None, float | None]:
    """(gain, low, high) of a recommendation's estimate, % (Nones without one)."""
    est = getattr(rec, "estimate", None) if rec is not None else None
    if est is None:
        return None, None, None
    return _float(est.gain_pct), _float(est.low_pct), _float(est.high_pct)


def _findings(
    rep: RunReport, cause: PaceSetterCause | None, cause_fix: Recommendation | None = None
) -> tuple[Finding, ...]:
    """The pace-setter's own cause, then its fix (the cause's fix unit, on the rank it names:
    estimated by ``cause_fix``, :func:`cause_fix`, when there is one, else the cause's re-timed
    job step as a point), then the pace-setting rank's fixes in the fix list's order (the cause's
    fix not twice)."""
    from gpuscope.analysis.straggler_cause import fix_title

    out = []
    if cause is not None:
        out.append(
            Finding(
                "pace_cause",
                cause.id,
                cause.title,
                cause.detail,
                _float(cause.gain_pct),
                cause.rank,
            )
        )
        if cause.fix_id is not None:
            gain, low, high = _est(cause_fix)
            if gain is None:
                gain = _float(cause.gain_pct)
            out.append(
                Finding(
                    "fix",
                    cause.fix_id,
                    fix_title(cause.fix_id) if cause_fix is None else cause_fix.title,
                    f"the fix for rank {cause.rank}'s own cause: {cause.title[0].lower()}"
                    f"{cause.title[1:]}",
                    gain,
                    cause.rank,
                    low,
                    high,
                )
            )
    first = {f.id for f in out if f.kind == "fix"}
    for rec in rep.recommendations:
        if rec.id in first:
            continue
        gain, low, high = _est(rec)
        summary = (rec.evidence or {}).get("summary") if isinstance(rec.evidence, dict) else None
        out.append(
            Finding("fix", rec.id, rec.title, str(summary or ""), gain, int(rep.rank), low, high)
        )
    return tuple(out)


def _compute_ms(cause: PaceSetterCause, line: Any) -> tuple[float, float, float] | None:
    """The compute per step (ms) of the rank the cause names and of the ranks it is compared
    with, and that rank's communication transfer over transfer + wait: from the chain's segments
    (that rank against the other rank of the chain), else the cause's compute figure (the
    pace-setter against the others' median) and the rank's line (``line``: its
    :class:`~gpuscope.analysis.rank_row.RankRow`, None when unknown); None when unknown."""
    from gpuscope.analysis.straggler_cause import COMPUTE

    def keep(transfer: float | None, wait: float | None) -> float:
        t, w = max(0.0, transfer or 0.0), max(0.0, wait or 0.0)
        return t / (t + w) if t + w > 0 else 1.0

    ch = cause.chain
    if ch is not None and ch.steps and cause.rank in (ch.pace, ch.waiting):
        other = ch.waiting if cause.rank == ch.pace else ch.pace
        mine = ch.parts_ms(cause.rank)
        return (
            mine.get(COMPUTE, 0.0),
            ch.parts_ms(other).get(COMPUTE, 0.0),
            keep(mine.get("transfer"), mine.get("wait")),
        )
    f = next((c for c in cause.candidates if c.cause == COMPUTE), None)
    if f is None:
        return None
    comm = keep(line.comm_transfer_pct, line.comm_wait_pct) if line is not None else 1.0
    return f.pace_ms, f.others_ms, comm


def cause_fix(
    cause: PaceSetterCause | None,
    report_of: Callable[[int], RunReport],
    con: Connection | None = None,
) -> Recommendation | None:
    """The fix for the pace-setter's own cause with its estimate, re-timed on the graph of the
    rank the cause names (docs/metrics.md, "Gains from the path"): that rank's own
    recommendation of the fix when its rule found it; for a rank that computes more
    (``load_imbalance``), always "give it equal work" (the rank's own rule of that id is about its
    waiting for another rank) (:func:`~gpuscope.analysis.fixes.load_imbalance.
    equal_work_fix`); for a rank that runs host work of its own (``load_imbalance`` for host
    dispatch), with ``con``, "take it off the step", re-timed on the ops it runs that the others
    do not (:func:`~gpuscope.analysis.fixes.load_imbalance.own_work_fix`). None: no such ops
    found or no ``con`` (the cause's re-timed step is then its point), no cause with a fix, no
    critical path (an analysis without it), or the rank's rule did not find the fix."""
    from gpuscope.analysis.fixes import load_imbalance
    from gpuscope.analysis.straggler_cause import COMPUTE

    if cause is None or cause.fix_id is None:
        return None
    rep = report_of(cause.rank)
    cp, ctx = rep.critical_path, rep.gain_context
    if cause.cause != COMPUTE and cause.fix_id == load_imbalance.UNIT.id:
        # host work of its own: the rank's own rule of that id is about its waiting
        return _own_work_fix(cause, rep, con)
    if cause.cause != COMPUTE:
        return next(
            (r for r in rep.recommendations if r.id == cause.fix_id and r.estimate is not None),
            None,
        )
    # a rank that computes more: its own load_imbalance rule (if any) is about waiting for
    # another rank, not about its extra work
    if cause.fix_id != load_imbalance.UNIT.id or cp is None:
        return None
    line = next((x for x in rep.ranks if int(x.rank) == int(cause.rank)), None)
    figures = _compute_ms(cause, line)
    if figures is None or ctx is None:
        return None
    pace_ms, others_ms, comm_keep = figures
    return load_imbalance.equal_work_fix(
        cause.rank, pace_ms, others_ms, len(rep.ranks), cp, ctx, comm_keep
    )


def _own_work_fix(
    cause: PaceSetterCause, rep: RunReport, con: Connection | None
) -> Recommendation | None:
    """:func:`~gpuscope.analysis.fixes.load_imbalance.own_work_fix` for the rank ``cause`` names
    (``rep``: its report), against every other rank, on its untraced step when known (its
    profiler cost per event then from it), else the job's step; None without ``con``, a critical
    path's main thread, or ops of its own."""
    from gpuscope.analysis.fixes import load_imbalance
    from gpuscope.analysis.own_host_work import extra_ops
    from gpuscope.analysis.straggler_cause import host_ops_per_step

    cp = rep.critical_path
    if con is None or cp is None:
        return None
    run_id = str(rep.run["id"])
    others = [int(x.rank) for x in rep.ranks if int(x.rank) != int(cause.rank)]
    extra = extra_ops(con, run_id, int(cause.rank), others, cp.main_tid)
    if extra is None:
        return None
    prof = rep.profiler if int(rep.rank) == int(cause.rank) else None
    untraced = prof.untraced_step_ms if prof is not None else None
    per_event = None
    if prof is not None and untraced:
        events = host_ops_per_step(con, run_id, int(cause.rank))
        if events > 0:
            per_event = max(0.0, prof.traced_step_ms - untraced) * 1e3 / events
    base = untraced or cause.job_step_ms or 0.0
    return load_imbalance.own_work_fix(extra, float(base), per_event)


def _float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _pace_cause(
    rep: RunReport, job_step: JobStepTime, con: Connection | None = None
) -> PaceSetterCause | None:
    """The pace-setter's own cause (:mod:`gpuscope.analysis.straggler_cause`) from its report,
    re-timed on the job's mean step; None without a matched straggler. With ``con``: the untraced
    host time, counted FLOPs and chain across ranks (each step's segment, :func:`chain_for`) of the
    pace-setter and its top waiter (a sleep or a batch made outside a DataLoader is not dispatch;
    a rank given more work is said)."""
    from gpuscope.analysis.straggler_cause import (
        chain_for,
        flops_for,
        host_ops_for,
        pace_setter_cause,
        untraced_for,
    )

    is_pace = rep.straggler is not None and int(rep.rank) == int(rep.straggler.rank)
    return pace_setter_cause(
        rep.straggler,
        rep.ranks,
        job_step_ms=job_step.mean_ms,
        profiler=rep.profiler if is_pace else None,
        untraced_ms=untraced_for(con, rep) if con is not None else None,
        flops_per_step=flops_for(con, rep) if con is not None else None,
        chain=chain_for(con, rep) if con is not None else None,
        steps={n for n, _ in job_step.by_step if n != job_step.drain_step} or None,
        host_ops=host_ops_for(con, rep) if con is not None else None,
    )


def _path(cause: PaceSetterCause | None) -> tuple[tuple[PathStep, ...], dict[str, float] | None]:
    """The job's critical path by step and its bound-by split from the cause's chain."""
    chain = cause.chain if cause is not None else None
    if cause is None or chain is None or not chain.steps:
        return (), None
    new = dict(cause.step_retimed)
    steps = tuple(
        PathStep(s.step, s.late_rank, s.segment_ms, s.bound_by_ms, new.get(s.step))
        for s in chain.steps
    )
    return steps, chain.bound_by_pct


def diagnose(con: Connection, run_id: str, report_of: Callable[[int], RunReport]) -> JobDiagnosis:
    """The job's diagnosis of a stored trace run (module doc). ``report_of(rank)``: the analysis of
    one rank (every rank's line, the matched collectives, the fixes), which the caller may keep
    (the web caches it; ``analyze`` asks for the viewed rank's too): only the pace-setting rank's
    is asked for. Raises ValueError for an unknown run."""
    from gpuscope.analysis.store_access import ranks_of
    from gpuscope.analysis.stored_parts import cross_rank

    ranks = ranks_of(con, run_id)
    if not ranks:
        raise ValueError(f"{run_id}: the run has no ranks")
    if len(ranks) == 1:
        rep = report_of(ranks[0])
        windows = {ranks[0]: (rep.window, 0)}
        pace = ranks[0]
    else:
        from gpuscope.analysis.rank_frames import window_of

        parts = cross_rank(con, run_id)
        windows = {r: (window_of(p), int(p["offset_ns"])) for r, p in parts.items()}
        guess = _straggler_of_parts(con, run_id, parts)
        pace = guess if guess is not None else _last_most_often(windows)
        rep = report_of(pace)
        if rep.straggler is not None and rep.straggler.rank != pace:  # the report's own match rules
            pace = rep.straggler.rank
            rep = report_of(pace)
    step = step_time(windows, pace)
    cause = _pace_cause(rep, step, con)
    fix = cause_fix(cause, report_of, con)
    if (
        cause is not None
        and fix is not None
        and fix.estimate is not None
        and (
            fix.estimate.method == "host_ops"  # its own host ops, re-timed on them
        )
    ):
        cause = cause.retimed_as(
            fix.estimate.gain_pct, " (its own host ops, the profiler's cost in them taken out)"
        )
    path, bound_by = _path(cause)
    strag = rep.straggler
    n = max(1, rep.window.n_steps)
    caused = dict(strag.per_rank_caused_ns) if strag is not None else {}
    shares = []
    for line in rep.ranks:
        w = windows.get(line.rank, (rep.window, 0))[0]
        shares.append(
            RankShare(
                rank=line.rank,
                split=_rank_split(line),
                step_p50_ms=line.step_p50_ms,
                caused_wait_ms_per_step=caused.get(line.rank, 0) / n / 1e6,
                window_ms=w.duration_ns / 1e6,
            )
        )
    return JobDiagnosis(
        run_id=run_id,
        ranks=tuple(ranks),
        step=step,
        pace_setter=pace,
        waiting_rank=strag.waiting_rank if strag is not None else None,
        wait_ms_per_step=strag.wait_ms_per_step if strag is not None else None,
        caused_wait_ms_per_step=strag.caused_wait_ns / n / 1e6 if strag is not None else None,
        split=_job_split(shares),
        per_rank=tuple(sorted(shares, key=lambda s: s.rank)),
        mfu_pct=mfu_pct(rep.flops_per_step, step.p50_ms / 1e3, rep.peak_tflops)
        if rep.has_gpu_activity
        else None,
        fix_rank=pace,
        findings=_findings(rep, cause, fix),
        path=path,
        bound_by_pct=bound_by,
        cause_rank=cause.rank if cause is not None else None,
        retimed_step_ms=cause.retimed_job_step_ms if cause is not None else None,
        retimed_from_ms=cause.job_step_ms
        if cause is not None and cause.retimed_job_step_ms is not None
        else None,
        fixes=(
            *([fix] if fix is not None else []),
            *(r for r in rep.recommendations if fix is None or r.id != fix.id),
        ),
    )


def memo(
    analyze: Callable[[int], RunReport], known: RunReport | None = None
) -> Callable[[int], RunReport]:
    """``analyze`` with each rank's report kept, ``known`` (a report already made) among them: a
    face that shows the viewed rank's detail and the job analyses each rank once."""
    seen: dict[int, RunReport] = {} if known is None else {int(known.rank): known}

    def report_of(rank: int) -> RunReport:
        if rank not in seen:
            seen[rank] = analyze(rank)
        return seen[rank]

    return report_of


# -- the view model: what every face shows, in one place --------------------------------------------


@dataclass(frozen=True)
class HeadlineRow:
    """One row of the verdict: a label, its value as people read it, a note (may be empty), and
    ``beside``: the few words a card shows beside the value (the note says them too)."""

    label: str
    value: str
    note: str = ""
    beside: str = ""


def _p(v: float | None) -> str:
    return "—" if v is None else f"{sig3(v)} %"


def step_words(step: JobStepTime) -> str:
    """The job step time's note: what it is the median of, and the drain step when said."""
    if step.source != "completions":
        what = "the pace-setting rank's own steps (fewer than two step completions)"
    else:
        what = f"median of {step.n_periods} step period{'s' if step.n_periods != 1 else ''}"
    out = f"{what}; p90 {sig3(step.p90_ms)} ms, max {sig3(step.max_ms)} ms"
    if step.drain_step is not None:
        out += (
            f"; step {step.drain_step} is the profiler's drain ({sig3(step.drain_ms)} ms on a "
            "rank), left out"
        )
    return out


def headline_rows(job: JobDiagnosis) -> tuple[HeadlineRow, ...]:
    """The verdict's rows, in order (every face renders these: CLI text, the Run page's cards,
    the Markdown/HTML report): job step time, pace-setter and its wait, where the time goes, MFU,
    the first finding."""
    st = job.step
    rows = [
        HeadlineRow(
            "Job step time",
            f"{sig3(st.p50_ms)} ms",
            step_words(st),
            f"p90 {sig3(st.p90_ms)} · max {sig3(st.max_ms)} ms",
        )
    ]
    if job.distributed:
        if job.wait_ms_per_step is not None and job.waiting_rank is not None:
            note = f"rank {job.waiting_rank} waits {sig3(job.wait_ms_per_step)} ms per step for it"
            if len(job.ranks) > 2:
                note += f"; all ranks together {sig3(job.caused_wait_ms_per_step)} ms per step"
        else:
            note = "no collectives matched across ranks: the rank whose steps end last"
        if job.cause_rank is not None and job.cause_rank != job.pace_setter:
            note += (
                f"; under the profiler only: once its cost is gone rank {job.cause_rank} sets "
                "the pace (Why)"
            )
        rows.append(HeadlineRow("Pace-setter", f"rank {job.pace_setter}", note))
        if job.bound_by_pct is not None and job.path:
            rows.append(path_row(job))
    s = job.split
    rows.append(
        HeadlineRow(
            "GPU busy",
            _p(s.busy_pct),
            (f"of it waiting for other ranks {_p(s.wait_pct)}; " if job.distributed else "")
            + f"compute {_p(s.compute_pct)}, comm transfer {_p(s.transfer_pct)}, idle "
            f"{_p(s.idle_pct)}" + ("; over every rank's window" if job.distributed else ""),
            f"of it waiting {_p(s.wait_pct)}" if job.distributed else "",
        )
    )
    rows.append(HeadlineRow("MFU", _p(job.mfu_pct), "FLOPs per step over the job step time"))
    cause = next((f for f in job.findings if f.kind == "pace_cause"), None)
    if cause is not None:
        rows.append(HeadlineRow("Why", cause.title, cause.detail))
        if job.retimed_step_ms is not None and job.retimed_from_ms is not None:
            rows.append(retimed_row(job))
    first = job.first_fix
    if first is not None:
        who = f"rank {first.rank}, the pace-setter: fixing a rank that waits gains nothing"
        if first.rank != job.pace_setter:
            who = (
                f"rank {first.rank}, which sets the pace once the profiler's cost is gone: fixing "
                "a rank that waits gains nothing"
            )
        note = "; ".join(w for w in (first.gain_words, who if job.distributed else "") if w)
        rows.append(HeadlineRow("First fix", first.title, note))
    return tuple(rows)


def path_row(job: JobDiagnosis) -> HeadlineRow:
    """The job's critical path across ranks: what bounds it (the largest part of the bound-by
    split over the chain's steps), the split, and the late rank by step."""
    split = job.bound_by_pct or {}
    top = max(split, key=lambda k: split[k])
    parts = ", ".join(f"{k} {_p(v)}" for k, v in split.items())
    late: dict[int, list[int]] = {}
    for p in job.path:
        late.setdefault(p.late_rank, []).append(p.step)
    who = "; ".join(
        f"rank {r} at step{'s' if len(v) > 1 else ''} {', '.join(map(str, v))}"
        for r, v in sorted(late.items())
    )
    steps = "; ".join(
        f"{p.step}: {sig3(p.step_ms)} = "
        + " + ".join(f"{k} {sig3(v)}" for k, v in p.bound_by_ms.items() if v >= 0.05)
        for p in job.path
    )
    rest = ", ".join(
        f"{k} {_p(v)}" for k, v in sorted(split.items(), key=lambda kv: -kv[1]) if k != top and v
    )
    return HeadlineRow(
        "Critical path",
        f"{top}-bound ({_p(split[top])})",
        f"through the rank the others wait for in each step ({who}): {parts}; by step (ms): "
        f"{steps}",
        rest,
    )


def own_host_ops(job: JobDiagnosis) -> bool:
    """Whether the verdict's re-timing is of the pace-setter's own host ops (its cause's fix
    estimated on them, :func:`~gpuscope.analysis.fixes.load_imbalance.own_work_fix`)."""
    first = job.fixes[0] if job.fixes else None
    return bool(
        first is not None
        and first.estimate is not None
        and first.estimate.method == "host_ops"
        and any(f.kind == "fix" and f.id == first.id for f in job.findings[:2])
    )


def retimed_row(job: JobDiagnosis) -> HeadlineRow:
    """The job's step re-timed with the verdict's cause removed on the rank it names."""
    assert job.retimed_step_ms is not None and job.retimed_from_ms is not None
    cause = next((f for f in job.findings if f.kind == "pace_cause"), None)
    what = "the step measured without the profiler"
    if cause is not None and cause.id == "pace_setter_profiler":
        note = "the profiler's cost removed: the step measured without it"
    elif job.cause_rank is not None and job.cause_rank != job.pace_setter:
        note = f"{what}, with rank {job.cause_rank}'s extra part as rank {job.pace_setter}'s"
    elif own_host_ops(job):
        note = (
            f"the job's mean step, less rank {job.cause_rank}'s own host ops (the ops it runs "
            "that the others do not, and the loop between them, the profiler's cost taken out)"
        )
    else:
        note = (
            f"the job's mean step, with rank {job.cause_rank}'s extra segment time for its cause as "
            "the waiting rank's"
        )
        if job.path and any(p.retimed_ms is not None for p in job.path):
            note += "; by step (ms): " + ", ".join(
                f"{p.step}: {sig3(p.step_ms)} → {sig3(p.retimed_ms)}"
                for p in job.path
                if p.retimed_ms is not None
            )
    gain = job.retimed_from_ms - job.retimed_step_ms
    pct = 100.0 * gain / job.retimed_from_ms if job.retimed_from_ms > 0 else 0.0
    return HeadlineRow(
        "Re-timed",
        f"{sig3(job.retimed_from_ms)} → {sig3(job.retimed_step_ms)} ms",
        f"{note} (−{sig3(pct)} %)",
        f"−{sig3(pct)} %",
    )


def rank_rows(job: JobDiagnosis, top: int | None = None) -> tuple[RankShare, ...]:
    """The ranks as the verdict lists them: by the wait they cause (most first), then by rank;
    ``top``: at most that many (None: all)."""
    ordered = sorted(job.per_rank, key=lambda s: (-s.caused_wait_ms_per_step, s.rank))
    return tuple(ordered if top is None else ordered[:top])
