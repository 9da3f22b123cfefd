"""The job's verdict: one diagnosis per run, over all its ranks, that every face renders.

The computation (:func:`diagnose`, :func:`job_step_time`), built from the ranks' stored
cross-rank parts (:mod:`gpuscope.analysis.rank_frames`: each rank's window and steps, its clock
offset) and the analysis of the pace-setting rank; one rank's detail
(:class:`~gpuscope.analysis.report.RunReport`) hangs under it on demand. Its typed frozen result
(:class:`JobDiagnosis`) and its view model (:func:`headline_rows`, :func:`rank_rows`) are defined
in :mod:`gpuscope.analysis.verdict`, which computes nothing (a stored verdict is rendered from it
alone), and importable from here.

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
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.idle import CAUSES
from gpuscope.analysis.peaks import mfu_pct
from gpuscope.analysis.steps import Window, step_stats
from gpuscope.analysis.verdict import Finding as Finding
from gpuscope.analysis.verdict import HeadlineRow as HeadlineRow
from gpuscope.analysis.verdict import JobDiagnosis as JobDiagnosis
from gpuscope.analysis.verdict import JobStepTime as JobStepTime
from gpuscope.analysis.verdict import PathStep as PathStep
from gpuscope.analysis.verdict import RankShare as RankShare
from gpuscope.analysis.verdict import TimeSplit as TimeSplit
from gpuscope.analysis.verdict import headline_rows as headline_rows
from gpuscope.analysis.verdict import own_host_ops as own_host_ops
from gpuscope.analysis.verdict import path_row as path_row
from gpuscope.analysis.verdict import rank_rows as rank_rows
from gpuscope.analysis.verdict import retimed_row as retimed_row
from gpuscope.analysis.verdict import step_words as step_words

if TYPE_CHECKING:
    from gpuscope.analysis.fixes.base import Recommendation
    from gpuscope.analysis.report import RunReport
    from gpuscope.analysis.straggler_cause import PaceSetterCause
    from gpuscope.store import Connection

#: The window's last step is the profiler's drain step when, on some rank, it lasts more than
#: this many times the median of that rank's other steps (their CPU-start-to-next-start spans).
DRAIN_FACTOR = 1.5


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
    rep: RunReport,
    cause: PaceSetterCause | None,
    cause_fix: Recommendation | None = None,
    candidate: Recommendation | None = None,
    recs: list[Recommendation] | None = None,
) -> tuple[Finding, ...]:
    """The pace-setter's own cause, then its fix (the cause's fix unit, on the rank it names:
    estimated by ``cause_fix``, :func:`cause_fix`, when there is one, else the cause's re-timed
    job step as a point), then the pace-setting rank's fixes in the fix list's order (the cause's
    fix not twice), with ``candidate`` (:func:`abstained_fix`: a cause the verdict did not single
    out, estimated all the same) among them where its estimate places it; ``recs``: the fixes in
    the pace-setter's place (:func:`dispatch_on_waiting_rank`; default its own)."""
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
    for rec in with_candidate(rep.recommendations if recs is None else recs, candidate):
        if rec.id in first:
            continue
        gain, low, high = _est(rec)
        summary = (rec.evidence or {}).get("summary") if isinstance(rec.evidence, dict) else None
        rank = int(rep.rank) if rec is not candidate or cause is None else int(cause.rank)
        out.append(Finding("fix", rec.id, rec.title, str(summary or ""), gain, rank, low, high))
    return tuple(out)


def with_candidate(
    recs: tuple[Recommendation, ...] | list[Recommendation], candidate: Recommendation | None
) -> list[Recommendation]:
    """``recs`` (a rank's fixes, in their order) with ``candidate`` before the first whose
    estimate is smaller than its own (last without an estimate, or after every one), and any
    fix of ``recs`` with its id left out."""
    if candidate is None:
        return list(recs)
    rest = [r for r in recs if r.id != candidate.id]
    g = _est(candidate)[0]
    at = len(rest)
    if g is not None:
        at = next((i for i, r in enumerate(rest) if (_est(r)[0] or 0.0) < g), len(rest))
    return [*rest[:at], candidate, *rest[at:]]


def dispatch_on_waiting_rank(
    cause: PaceSetterCause | None, rep: RunReport, report_of: Callable[[int], RunReport]
) -> list[Recommendation]:
    """The pace-setter's fixes (``rep``'s, in their order), but where its own cause says its
    extra host time is not its dispatch (the profiler's own cost, or code no traced op holds:
    ``profiler``, ``host_untraced``): there each fix that cuts host dispatch
    (:func:`~gpuscope.analysis.straggler_cause.host_dispatch_fixes`) is the one the rank that
    waits most for it found, at that rank's point, its range from the lower of the two ranks'
    re-timings to the higher, and is left out where that rank's rules did not find it: the
    waiting rank's re-timing keeps its waits, so it cannot gain by its own dispatch, and the
    pace-setter's counts the cause's idle as dispatch (its GPU idles between launches for as long
    as its slow host takes), so the gain lies between; then the list is ordered again as a rank's
    is (:func:`gpuscope.analysis.fixes.order`). Timed on the DDP samples
    (sample_traces/multi_gpu/first_fix_timing.json, 4 x H200, 5 rounds each): torch.compile,
    estimated at 24.4 % on ddp_clean's pace-setter and at 29.7 % on ddp_straggler_every's, gained
    -18.4 and -6.0 % as ``model.compile()`` inside DDP, -48.8 and -11.6 % as
    ``torch.compile(DDP(model))``; the waiting rank's estimates are 1.6 and 0.9 %. The list is
    made of copies: the ranks' own lists stay as they are."""
    from dataclasses import replace

    from gpuscope.analysis import fixes
    from gpuscope.analysis.straggler_cause import PROFILER, UNTRACED, host_dispatch_fixes

    recs = [replace(r) for r in rep.recommendations]
    s = rep.straggler
    if cause is None or cause.cause not in (PROFILER, UNTRACED) or s is None:
        return recs
    ids = host_dispatch_fixes()
    waiting = int(s.waiting_rank)
    if waiting == int(cause.rank) or not any(r.id in ids for r in recs):
        return recs
    theirs = {r.id: r for r in report_of(waiting).recommendations}
    out = []
    for r in recs:
        if r.id not in ids:
            out.append(r)
            continue
        t = theirs.get(r.id)
        if t is None or t.estimate is None:
            continue
        said = str((t.evidence or {}).get("summary") or "")
        what = "the profiler's own cost" if cause.cause == PROFILER else "code no traced op holds"
        note = (
            f"Estimated on rank {waiting}, which waits for rank {cause.rank}: rank "
            f"{cause.rank}'s extra host time is {what}, not its dispatch, and rank {waiting} "
            "runs the same step under the same profiler."
        )
        ev = {**(t.evidence or {}), "estimated_on_rank": waiting, "summary": f"{note} {said}"}
        est = t.estimate
        if r.estimate is not None:  # the range spans both ranks' re-timings
            est = replace(
                est,
                low_pct=min(est.low_pct, r.estimate.low_pct),
                high_pct=max(est.high_pct, r.estimate.high_pct),
            )
        out.append(replace(t, evidence=ev, estimate=est))
    fixes.order(out)
    return out


def untraced_code_fix(cause: PaceSetterCause | None) -> PaceSetterCause | None:
    """A pace-setter named for code no traced op holds (``host_untraced``) takes "take it off the
    step" (:func:`~gpuscope.analysis.fixes.load_imbalance.untraced_work_fix`, the unit
    ``load_imbalance``) as its fix; any other cause unchanged."""
    from gpuscope.analysis.fixes import load_imbalance
    from gpuscope.analysis.straggler_cause import HOST_WORK, UNTRACED

    if cause is None or cause.cause not in (UNTRACED, HOST_WORK):
        return cause
    return cause.with_fix(load_imbalance.UNIT.id)


def host_dispatch_fix(
    cause: PaceSetterCause | None, report_of: Callable[[int], RunReport]
) -> PaceSetterCause | None:
    """A pace-setter named for host dispatch takes the first fix of its own list that cuts host
    dispatch (:func:`~gpuscope.analysis.straggler_cause.host_dispatch_fixes`) and is estimated
    to help there, so the job's first fix is the fix that rank's own list leads with: on v27 and
    v171 (tensor parallel, eager DTensor) the pace-setter's list led with compiling the
    tensor-parallel model (59.1 and 56.1 %, measured 58.5 and 62.1 %) while the verdict named
    CUDA graphs (16.9 and 16.7 %). The cause unchanged otherwise (another cause, host work of its
    own, or no such fix estimated above 0 %). Where that rank's parameters are sharded
    (:attr:`~gpuscope.analysis.report.RunReport.sharded_by`) and none of its fixes is estimated to
    help, the job names no fix rather than CUDA graphs, which its rank's own rule never offers
    there (:func:`~gpuscope.analysis.fixes.cuda_graphs.detect`: FSDP2 replayed 2-5 x slower, tensor
    parallelism did not finish), and says why."""
    from gpuscope.analysis.fixes import cuda_graphs
    from gpuscope.analysis.straggler_cause import HOST, host_dispatch_fixes

    ids = host_dispatch_fixes()
    if cause is None or cause.cause != HOST or cause.fix_id not in ids:
        return cause
    rep = report_of(cause.rank)
    pick = next(
        (r for r in rep.recommendations if r.id in ids and (_est(r)[0] or 0.0) > 0.0),
        None,
    )
    if pick is not None:
        return cause.with_fix(pick.id)
    if cause.fix_id == cuda_graphs.UNIT.id and rep.sharded_by is not None:
        return cause.with_fix(
            None,
            f"rank {cause.rank}'s parameters are sharded ({rep.sharded_by}), where CUDA graphs "
            "were timed slower or never finished, and no other fix that cuts dispatch is "
            "estimated to help",
        )
    return cause


def abstained_fix(
    cause: PaceSetterCause | None,
    report_of: Callable[[int], RunReport],
    con: Connection | None = None,
) -> Recommendation | None:
    """Where the verdict abstains (no cause singled out) but the pace-setter's largest excess is
    that it computes more (a steady straggler, not one that moves between ranks), "give it equal
    work", estimated as :func:`cause_fix` estimates it for a named cause: the verdict's words
    already say it (``rank R computes N % more FLOPs per step``), and the fix list ranks it by its
    estimate like any other (v172, the tenth blind part: rank 1 given 1.5 x the sequences under
    the profiler's host cost, equal work 5.4 % (range -10.8 to 19.5) where the first fix had
    been DDP's overlap at 0.6 %; measured 14.3 %). None otherwise."""
    from dataclasses import replace

    from gpuscope.analysis.fixes import load_imbalance
    from gpuscope.analysis.straggler_cause import ABSTAINED, COMPUTE

    if cause is None or cause.cause != ABSTAINED or cause.pattern == "moving":
        return None
    if cause.wait_ms_per_step is None or cause.wait_ms_per_step <= 0:
        return None
    ranked = sorted(cause.candidates, key=lambda f: -f.excess_ms)
    if not ranked or ranked[0].cause != COMPUTE or ranked[0].excess_ms <= 0:
        return None
    as_compute = replace(cause, cause=COMPUTE, fix_id=load_imbalance.UNIT.id)
    fix = cause_fix(as_compute, report_of, con)
    return fix if fix is not None and fix.estimate is not None else None


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
    from gpuscope.analysis.straggler_cause import COMPUTE, HOST_WORK, UNTRACED

    if cause is None or cause.fix_id is None:
        return None
    rep = report_of(cause.rank)
    cp, ctx = rep.critical_path, rep.gain_context
    if cause.cause in (UNTRACED, HOST_WORK) and cause.fix_id == load_imbalance.UNIT.id:
        return _untraced_work_fix(cause, rep)
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


def _own_gpu_ms(cause: PaceSetterCause, rep: RunReport) -> float | None:
    """The pace-setter's own GPU work per step (ms): its busy share less its wait for others, on
    its median step; None when unknown."""
    line = next((x for x in rep.ranks if int(x.rank) == int(cause.rank)), None)
    if line is None or None in (line.step_p50_ms, line.gpu_busy_pct):
        return None
    own_pct = float(line.gpu_busy_pct or 0.0) - float(line.comm_wait_pct or 0.0)
    return float(line.step_p50_ms or 0.0) * max(0.0, own_pct) / 100.0


def _untraced_work_fix(cause: PaceSetterCause, rep: RunReport) -> Recommendation | None:
    """:func:`~gpuscope.analysis.fixes.load_imbalance.untraced_work_fix` for the rank ``cause``
    names (``rep``: its report): the time the cause's re-timing takes off the job's step, on the
    pace-setter's untraced step when known and the straggler is steady, else on the job's mean
    step; None without a re-timed step."""
    from gpuscope.analysis.fixes import load_imbalance
    from gpuscope.analysis.straggler_cause import HOST_WORK

    if cause.job_step_ms is None or cause.retimed_job_step_ms is None:
        return None
    removed = cause.job_step_ms - cause.retimed_job_step_ms
    prof = rep.profiler if int(rep.rank) == int(cause.rank) else None
    untraced = prof.untraced_step_ms if prof is not None else None
    base = untraced if untraced and cause.pattern == "steady" else cause.job_step_ms
    if cause.cause != HOST_WORK:
        return load_imbalance.untraced_work_fix(
            cause.rank, cause.per_step_ms, removed, float(base), _own_gpu_ms(cause, rep)
        )
    if base != cause.job_step_ms and cause.job_step_ms > 0:
        # the re-timing removes traced time, inflated by the profiler in the ops and syncs it
        # holds: on the untraced step, in proportion to it (v210: 25.7 ms of 62.7 traced, on an
        # untraced step of 48.7 ms: 20.0 ms; the metric kept on the GPU measured 36.7 %)
        removed *= float(base) / cause.job_step_ms
    return load_imbalance.host_work_fix(
        cause.rank, cause.per_step_ms, removed, float(base), _own_gpu_ms(cause, rep)
    )


def _own_work_fix(
    cause: PaceSetterCause, rep: RunReport, con: Connection | None
) -> Recommendation | None:
    """:func:`~gpuscope.analysis.fixes.load_imbalance.own_work_fix` for the rank ``cause`` names
    (``rep``: its report), against every other rank, on its untraced step when known (its
    profiler cost per event then from it), else the job's step, bound by the pace-setter's own
    GPU work per step (its busy share less its wait, on its median step); None without ``con``, a
    critical path's main thread, or ops of its own."""
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
    return load_imbalance.own_work_fix(extra, float(base), per_event, _own_gpu_ms(cause, rep))


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
        host_work_for,
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
        host_work=host_work_for(con, rep) if con is not None else None,
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
    cause = untraced_code_fix(host_dispatch_fix(_pace_cause(rep, step, con), report_of))
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
    candidate = abstained_fix(cause, report_of, con)
    recs = dispatch_on_waiting_rank(cause, rep, report_of)
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
        findings=_findings(rep, cause, fix, candidate, recs),
        path=path,
        bound_by_pct=bound_by,
        cause_rank=cause.rank if cause is not None else None,
        retimed_step_ms=cause.retimed_job_step_ms if cause is not None else None,
        retimed_from_ms=cause.job_step_ms
        if cause is not None and cause.retimed_job_step_ms is not None
        else None,
        fixes=(
            *([fix] if fix is not None else []),
            *(r for r in with_candidate(recs, candidate) if fix is None or r.id != fix.id),
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
