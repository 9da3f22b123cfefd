"""The job's verdict as data: its typed frozen result (:class:`JobDiagnosis` and its parts), each
read back from what its ``to_json`` wrote (``analyze --json``'s ``job``), and its view model
(:func:`headline_rows`, :func:`rank_rows`), which every face renders.

:mod:`gpuscope.analysis.job` computes the verdict (its module doc and docs/metrics.md, "The job",
define the figures); this module computes nothing: the text of a stored ``analyze`` document is
rendered from it without the analyses (``gpuscope analyze RUN``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.recommendation import (
    Recommendation,  # at run time: a field's type (typing.get_type_hints)
)


@dataclass(frozen=True)
class JobStepTime:
    """The job's step time, ms (:mod:`gpuscope.analysis.job`): median (``p50_ms``), 90th percentile
    (linear interpolation), max and mean of the periods kept; ``n_periods`` of them; ``by_step``:
    (step number, period ms) of every period, the drain's included; ``drain_step`` / ``drain_ms``:
    the profiler's drain step and its longest span on a rank (None: no drain). ``source``:
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
        "not expected to help: step time up 14 % by the estimate (...)"; a range whose top is 0
        or less: "not expected to help: step time no shorter by the estimate (...)"; "" without
        one."""
        if self.gain_pct is None:
            return ""
        if self.gain_pct < 0:
            out = f"not expected to help: step time up {sig3(-self.gain_pct)} % by the estimate"
        elif self.high_pct is not None and self.high_pct <= 0:
            out = "not expected to help: step time no shorter by the estimate"
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
    """The job's verdict (:mod:`gpuscope.analysis.job`): its step time, the pace-setting rank and
    the wait it costs the rank that waits longest for it (``wait_ms_per_step``, ``waiting_rank``;
    None for a run of one rank or without matched collectives) and its caused wait summed over the
    others (``caused_wait_ms_per_step``), where the job's time goes (``split``, ``per_rank``), its
    MFU (the pace-setter's FLOPs per step over the job step time, against its peak; None without
    them), and the ranked ``findings`` (computed on ``fix_rank``: the pace-setter). The chain across
    ranks (None/empty without one): ``path`` (each step's critical path, :class:`PathStep`),
    ``bound_by_pct`` (the path's split over its steps, % of their sum), ``cause_rank`` (the rank
    whose own cause the verdict names: the pace-setter, or the rank that sets the pace once the
    profiler's cost is gone), ``retimed_step_ms`` (the job step with that cause removed, ms) and
    ``retimed_from_ms`` (the step it re-times: the job's mean step, or the step measured without the
    profiler). ``fixes``: the job's fixes with their estimates, in the findings' order: the fix for
    the pace-setter's own cause (:func:`gpuscope.analysis.job.cause_fix`), then the pace-setting
    rank's."""

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
    def best_fix(self) -> Finding | None:
        """The first finding that is a fix, whatever its estimate (None: no fix)."""
        return next((f for f in self.findings if f.kind == "fix"), None)

    @property
    def first_fix(self) -> Finding | None:
        """The fix the verdict leads with: :attr:`best_fix`, unless its estimate says the step
        gets no shorter (a point at or below 0 %: the fixes after it are estimated lower still, or
        not at all). None: no fix is expected to help."""
        best = self.best_fix
        if best is None or (best.gain_pct is not None and best.gain_pct <= 0):
            return None
        return best

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
            "first_fix": self.first_fix.id if self.first_fix is not None else None,
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
        who = fix_rank_words(job, first.rank)
        note = "; ".join(w for w in (first.gain_words, who if job.distributed else "") if w)
        rows.append(HeadlineRow("First fix", first.title, note))
    elif (best := job.best_fix) is not None:
        rows.append(
            HeadlineRow(
                "First fix",
                NO_FIX_HELPS,
                f"best estimated: {best.title}; {best.gain_words}",
            )
        )
    return tuple(rows)


NO_FIX_HELPS = "none expected to help"
"""The verdict's first fix where the best estimated one leaves the step no shorter."""


def fix_rank_words(job: JobDiagnosis, rank: int) -> str:
    """Whose fixes rank ``rank``'s are, in the words every face uses: the pace-setter's, or (a
    rank other than the pace-setter: one that leads only by the profiler's own cost, or whose
    compute the profiler hid) the rank that sets the pace once the profiler's cost is gone."""
    if rank == job.pace_setter:
        return f"rank {rank}, the pace-setter: fixing a rank that waits gains nothing"
    return (
        f"rank {rank}, which sets the pace once the profiler's cost is gone: fixing a rank that "
        "waits gains nothing"
    )


def fixes_lead(job: JobDiagnosis) -> str:
    """The sentence over a distributed job's fix list: whose fixes they are
    (:attr:`JobDiagnosis.fix_rank`, :func:`fix_rank_words`)."""
    return f"The fixes of {fix_rank_words(job, job.fix_rank)}."


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
