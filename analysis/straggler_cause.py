"""The pace-setter's own cause across ranks: why the rank the others wait for is late, and the fix.

A vertical slice: the computation (:func:`pace_setter_cause`), its typed frozen result
(:class:`PaceSetterCause`) and its words (``words``, ``title``). Definitions: docs/metrics.md,
"The pace-setter's own cause".

Public API (what ``analysis/job.py`` calls)::

    pace_setter_cause(
        straggler: Straggler | None,          # CollectiveMatch.straggler (collectives.py)
        lines: Iterable[RankRow],             # every rank's stored line (rank_row part)
        *,
        job_step_ms: float | None = None,     # the job's MEAN step (ms); default: the
                                              # pace-setter's mean step
        profiler: ProfilerCost | None = None, # the pace-setter's profiler cost, when known
    ) -> PaceSetterCause | None               # None: no straggler, so no pace-setter to explain

    finding(rep: RunReport) -> PaceSetterCause | None   # the same from a rank's report

The wait to explain, ``W`` (ms per step), is the straggler's: the wait of the rank that waits
longest for it. Each candidate cause is a time per step on the pace-setter minus the median of the
other ranks' (its **excess**): host dispatch (GPU idle on ``cpu_overhead`` + ``launch_overhead``),
data loading, a host sync, pageable copies (idle by cause), longer compute (compute share × step),
communication itself (transfer share × step + idle in ``communication``). A cause is named when its
excess is at least :data:`EXPLAINS` of ``W`` and at least :data:`SINGLES_OUT` times the next
cause's; otherwise the result abstains (``cause == "abstained"``) and says why. Host dispatch that
the profiler's cost can account for (the pace-setter's host cap, untraced step − GPU busy per step,
below half of it) is named ``profiler``. Re-timing (a simple model): the job step shrinks by
``min(W, excess)``, on the **mean** step (a stall at a few steps leaves the median step as it is
and lengthens the mean: the mean is what it costs). The caused wait per step says whether the lateness is steady or **spikes** at a
few steps; the other ranks' share of the caused wait whether the straggler **moves** between ranks.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.rank_row import RankRow
from gpuscope.vocabulary.causes import (
    COMMUNICATION,
    CPU_OVERHEAD,
    DATA_LOADING,
    HOST_SYNC,
    LAUNCH_OVERHEAD,
    PAGEABLE_COPY,
)

if TYPE_CHECKING:
    from gpuscope.analysis.collectives import Straggler
    from gpuscope.analysis.profiler_cost import ProfilerCost
    from gpuscope.analysis.report import RunReport
    from gpuscope.store import Connection

__all__ = ["CAUSES", "CauseFigure", "PaceSetterCause", "finding", "pace_setter_cause"]

HOST = "host_dispatch"
UNTRACED = "host_untraced"
DATA = DATA_LOADING  # the idle causes' ids (gpuscope.vocabulary.causes) where they are the same
SYNC = HOST_SYNC
PAGEABLE = PAGEABLE_COPY
COMPUTE = "compute"
COMM = COMMUNICATION
PROFILER = "profiler"
ABSTAINED = "abstained"
CAUSES: tuple[str, ...] = (HOST, UNTRACED, DATA, SYNC, PAGEABLE, COMPUTE, COMM, PROFILER)
"""The causes a pace-setter can be named for (``abstained`` when none is singled out)."""

#: The fix unit for each cause (a module of ``gpuscope.analysis.fixes``, named relative to it, whose
#: ``UNIT.id`` is the fix id), None where no registered fix applies.
FIX_UNIT_OF: dict[str, str | None] = {
    HOST: ".cuda_graphs",
    UNTRACED: None,
    DATA: ".dataloader_workers",
    SYNC: ".host_sync",
    PAGEABLE: ".pin_memory",
    COMPUTE: ".load_imbalance",
    COMM: None,
    PROFILER: None,
}


def fix_of(cause: str) -> str | None:
    """The registry's fix id for ``cause`` (None: none applies), read from its unit (imported on
    use: the units import much of the analysis)."""
    from importlib import import_module

    mod = FIX_UNIT_OF.get(cause)
    return None if mod is None else str(import_module(mod, "gpuscope.analysis.fixes").UNIT.id)


EXPLAINS = 0.5
"""A cause is named only when its excess on the pace-setter is at least this share of the wait."""
SINGLES_OUT = 2.0
"""... and at least this many times the next cause's excess (else the evidence is split)."""
MOVING_SHARE = 0.75
"""The straggler "moves between ranks" when it causes less than this share of all caused wait."""
SPIKE_FACTOR = 2.0
"""A step is a spike when its caused wait exceeds this many times the median step's ..."""
PROFILER_LEAVES = 0.25
"""The profiler is the cause when the wait left without its dispatch cost is under this share."""
MORE_COMPUTE = 0.1
"""A rank computing this much more per step than the others' median is said beside the verdict."""
SPIKE_HOLDS = 0.7
"""... and the lateness "spikes at a few steps" when such steps (at most half of them) hold at
least this share of the caused wait."""

_WHAT = {
    HOST: "its GPU idles while its CPU dispatches (CPU and launch overhead)",
    UNTRACED: "its GPU idles while its host runs code no traced op holds",
    DATA: "its GPU idles while it loads data",
    SYNC: "its GPU idles while its host waits in a sync",
    PAGEABLE: "its GPU idles on copies from pageable memory",
    COMPUTE: "it computes more",
    COMM: "it spends longer in its own communication",
    PROFILER: "its host time is the profiler's own cost",
}


@dataclass(frozen=True)
class CauseFigure:
    """One candidate cause: its time per step on the pace-setter (``pace_ms``), the median of the
    other ranks' (``others_ms``) and the difference (``excess_ms``), all ms per step."""

    cause: str
    pace_ms: float
    others_ms: float

    @property
    def excess_ms(self) -> float:
        return self.pace_ms - self.others_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "pace_ms_per_step": self.pace_ms,
            "others_ms_per_step": self.others_ms,
            "excess_ms_per_step": self.excess_ms,
        }


@dataclass(frozen=True)
class PaceSetterCause:
    """The pace-setting rank's own cause (module doc).

    ``rank``: the pace-setter; ``cause``: one of :data:`CAUSES` or ``abstained``; ``words``: the
    sentence a user reads; ``per_step_ms``: the cause's excess on the pace-setter (ms per step;
    the largest candidate's when abstained); ``fix_id``: the registry's fix for it (None: none
    applies, or abstained); ``wait_ms_per_step``: the wait it explains (the rank that waits most);
    ``job_step_ms`` / ``retimed_job_step_ms``: the job's step as it is and with the cause removed
    on the pace-setter (None when abstained); ``pattern``: ``steady``, ``spikes`` or ``moving``;
    ``spike_steps``: the steps that hold the wait when it spikes; ``rank_shares``: each rank's
    share of all caused wait (%); ``candidates``: every cause's figures."""

    rank: int
    cause: str
    words: str
    per_step_ms: float
    fix_id: str | None
    wait_ms_per_step: float
    job_step_ms: float | None
    retimed_job_step_ms: float | None
    pattern: str = "steady"
    spike_steps: tuple[int, ...] = ()
    rank_shares: tuple[tuple[int, float], ...] = ()
    candidates: tuple[CauseFigure, ...] = ()

    @property
    def id(self) -> str:
        """The finding's id: ``pace_setter_<cause>``."""
        return f"pace_setter_{self.cause}"

    @property
    def title(self) -> str:
        if self.cause == ABSTAINED:
            return f"Rank {self.rank} sets the pace; its own cause is not singled out"
        return f"Rank {self.rank} sets the pace: {_WHAT[self.cause]}"

    @property
    def detail(self) -> str:
        return self.words

    @property
    def gain_pct(self) -> float | None:
        """The job step's gain with the cause removed (%), None when abstained or unknown."""
        if self.retimed_job_step_ms is None or not self.job_step_ms:
            return None
        return 100.0 * (self.job_step_ms - self.retimed_job_step_ms) / self.job_step_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "cause": self.cause,
            "words": self.words,
            "per_step_ms": self.per_step_ms,
            "fix_id": self.fix_id,
            "wait_ms_per_step": self.wait_ms_per_step,
            "job_step_ms": self.job_step_ms,
            "retimed_job_step_ms": self.retimed_job_step_ms,
            "gain_pct": self.gain_pct,
            "pattern": self.pattern,
            "spike_steps": list(self.spike_steps),
            "rank_shares_pct": {str(r): v for r, v in self.rank_shares},
            "candidates": [c.to_json() for c in self.candidates],
        }


def _idle_ms(line: RankRow, *causes: str) -> float | None:
    by = line.idle_by_cause_us_per_step
    if by is None:
        return None
    return sum(float(by.get(c) or 0.0) for c in causes) / 1e3


def _share_ms(line: RankRow, pct: float | None) -> float | None:
    if pct is None or line.step_time_ms is None:
        return None
    return pct / 100.0 * float(line.step_time_ms)


def _figures(line: RankRow, untraced_ms: float | None = None) -> dict[str, float | None]:
    """A rank's time per step (ms) for each cause (None: unknown for this rank). ``untraced_ms``:
    its GPU idle per step while its host was in no traced op (:func:`untraced_idle_ms`), taken
    out of the CPU overhead (host dispatch) when known."""
    comm_idle = _idle_ms(line, COMMUNICATION)
    transfer = _share_ms(line, line.comm_transfer_pct)
    host = _idle_ms(line, CPU_OVERHEAD, LAUNCH_OVERHEAD)
    untraced = None
    if untraced_ms is not None and host is not None:
        untraced = min(untraced_ms, _idle_ms(line, CPU_OVERHEAD) or 0.0)
        host -= untraced
    return {
        HOST: host,
        UNTRACED: untraced,
        DATA: _idle_ms(line, DATA_LOADING),
        SYNC: _idle_ms(line, HOST_SYNC),
        PAGEABLE: _idle_ms(line, PAGEABLE_COPY),
        COMPUTE: _share_ms(line, line.compute_pct),
        COMM: None
        if transfer is None and comm_idle is None
        else (transfer or 0) + (comm_idle or 0),
    }


def _pattern(
    s: Straggler,
) -> tuple[str, tuple[int, ...], tuple[tuple[int, float], ...]]:
    """(pattern, spike steps, each rank's share of the caused wait %)."""
    total = sum(max(0, v) for v in s.per_rank_caused_ns.values())
    shares = tuple(
        (int(r), 100.0 * v / total)
        for r, v in sorted(s.per_rank_caused_ns.items(), key=lambda kv: (-kv[1], kv[0]))
        if v > 0
    )
    if total > 0 and s.caused_wait_ns / total < MOVING_SHARE:
        return "moving", (), shares
    n = max(1, s.n_steps)
    by = dict(s.by_step_ns)
    if len(by) >= 2 and n >= 3:
        steps = sorted(by)
        vals = [by.get(k, 0) for k in steps] + [0] * max(0, n - len(steps))
        med = statistics.median(vals)
        spikes = tuple(k for k in steps if by[k] > SPIKE_FACTOR * med and by[k] > 0)
        held = sum(by[k] for k in spikes)
        if spikes and len(spikes) <= n / 2 and held >= SPIKE_HOLDS * sum(by.values()):
            return "spikes", spikes, shares
    return "steady", (), shares


def pace_setter_cause(
    straggler: Straggler | None,
    lines: Iterable[RankRow],
    *,
    job_step_ms: float | None = None,
    profiler: ProfilerCost | None = None,
    untraced_ms: Mapping[int, float] | None = None,
    flops_per_step: Mapping[int, float] | None = None,
) -> PaceSetterCause | None:
    """The pace-setter's own cause (module doc); None when there is no straggler (no rank makes
    the others wait above the collectives' threshold) or no other rank's line to compare with."""
    if straggler is None:
        return None
    by_rank = {int(line.rank): line for line in lines}
    pace = by_rank.get(int(straggler.rank))
    others = [line for r, line in sorted(by_rank.items()) if r != straggler.rank]
    if pace is None or not others:
        return None
    wait = straggler.wait_ms_per_step
    step = job_step_ms if job_step_ms is not None else pace.step_time_ms
    pattern, spikes, shares = _pattern(straggler)
    un = untraced_ms or {}
    mine = _figures(pace, un.get(int(pace.rank)))
    theirs = [_figures(o, un.get(int(o.rank))) for o in others]
    cands = []
    for c in (HOST, UNTRACED, DATA, SYNC, PAGEABLE, COMPUTE, COMM):
        v = mine[c]
        vals = [float(x) for x in (t[c] for t in theirs) if x is not None]
        if v is None or not vals:
            continue
        cands.append(CauseFigure(c, float(v), float(statistics.median(vals))))
    # the profiler's share: without it the pace-setter's host idle is at most its host cap
    # (untraced step - GPU busy per step); untraced host time (a sleep, Python the profiler does
    # not record) is counted first, the dispatch inside ops (what the profiler inflates) gets the
    # rest, and the dispatch above that leaves the wait to explain
    cap = profiler.host_cap_ms_per_step if profiler is not None else None
    removed = 0.0
    if cap is not None and mine.get(HOST) is not None:
        untraced = mine.get(UNTRACED) or 0.0
        real = max(0.0, min(float(mine[HOST] or 0.0), cap - min(untraced, cap)))
        removed = float(mine[HOST] or 0.0) - real
        cands = [CauseFigure(f.cause, real, f.others_ms) if f.cause == HOST else f for f in cands]
    left = max(0.0, wait - removed)  # the wait its own causes must explain
    ranked = sorted(cands, key=lambda f: -f.excess_ms)
    where = _where(straggler.rank, pattern, spikes, shares)
    waits = (
        f"rank {straggler.waiting_rank} waits {sig3(wait)} ms per step for rank {straggler.rank} "
        f"(it arrives last at {straggler.last_arrivals} of {straggler.instances} collectives)"
    )
    compute_note = _compute_note(flops_per_step)

    def abstain(why: str) -> PaceSetterCause:
        top = ranked[0].excess_ms if ranked else 0.0
        return PaceSetterCause(
            straggler.rank,
            ABSTAINED,
            f"{waits}{where}; abstained: {why}{compute_note}.",
            max(0.0, top),
            None,
            wait,
            step,
            None,
            pattern,
            spikes,
            shares,
            tuple(cands),
        )

    if pattern == "moving":
        return abstain(
            "the straggler moves between ranks, so no one rank's own cause sets the pace"
        )
    if wait <= 0:
        return abstain(f"no rank waits for rank {straggler.rank}")
    best = ranked[0] if ranked else None
    second = max(0.0, ranked[1].excess_ms) if len(ranked) > 1 else 0.0
    explained = (
        best is not None
        and best.excess_ms > 0
        and best.excess_ms >= EXPLAINS * left
        and not (second > 0 and best.excess_ms < SINGLES_OUT * second)
    )
    profiler_words = (
        f"; without the profiler its step leaves at most {sig3(cap)} ms per step of host time "
        f"(untraced step − GPU busy per step): {sig3(removed)} ms per step of its dispatch is "
        "the profiler's own cost"
    )
    if removed > 0 and (
        left < PROFILER_LEAVES * wait or (not explained and removed >= EXPLAINS * wait)
    ):
        cause = PROFILER
        best = CauseFigure(PROFILER, removed, 0.0)
        note = profiler_words
    elif not explained:
        if best is None or best.excess_ms <= 0:
            return abstain(f"no figure of rank {straggler.rank} exceeds the other ranks'")
        if best.excess_ms < EXPLAINS * left:
            return abstain(
                f"its largest excess, {_WHAT[best.cause]} ({sig3(best.excess_ms)} ms per step "
                f"more than the others), explains under {EXPLAINS:.0%} of the wait"
            )
        return abstain(f"two causes weigh alike: {_fig_words(best)}; {_fig_words(ranked[1])}")
    else:
        assert best is not None
        cause = best.cause
        note = profiler_words if removed > 0 else ""
        if cause == HOST and profiler is None:
            note = (
                f"; rank {straggler.rank}'s profiler cost is not read here (its step without the "
                "profiler would tell how much of it is the profiler's)"
            )
        elif cause == HOST and profiler is not None and profiler.suspect:
            note = "; its ops are short and many, so part of it may be the profiler's own cost"
    explain = wait if cause == PROFILER else left
    gain = min(explain, best.excess_ms)
    retimed = step - gain if step is not None else None
    if retimed is not None:
        # no rank's step gets shorter than its own work: the pace-setter's GPU busy per step, each
        # other rank's step less its wait
        busy = _busy_ms(pace)
        if busy is not None and cause in (COMPUTE, COMM):
            busy -= best.excess_ms  # the work the cause adds leaves with it
        floors = [busy] + [_own_ms(o) for o in others]
        retimed = max([retimed, *[f for f in floors if f is not None]])
    if cause == PROFILER and profiler is not None and profiler.untraced_step_ms is not None:
        # measured: the pace-setter's step without the profiler
        retimed = min(step, profiler.untraced_step_ms) if step is not None else None
    what = _cause_words(straggler.rank, cause, best)
    fix = fix_of(cause)
    fix_words = f"; first fix: {fix_title(fix)} ({fix})" if fix else ""
    timed = (
        f"; with it removed the job's mean step goes from {sig3(step)} to {sig3(retimed)} ms"
        if step is not None and retimed is not None
        else ""
    )
    return PaceSetterCause(
        straggler.rank,
        cause,
        f"{waits}{where}; {what}{note}{timed}{fix_words}"
        f"{compute_note if cause != COMPUTE else ''}.",
        best.excess_ms,
        fix,
        wait,
        step,
        retimed,
        pattern,
        spikes,
        shares,
        tuple(cands),
    )


def _busy_ms(line: RankRow) -> float | None:
    """The rank's GPU compute and transfer per step (ms), None when unknown."""
    c, t = _share_ms(line, line.compute_pct), _share_ms(line, line.comm_transfer_pct)
    return None if c is None else c + (t or 0.0)


def _own_ms(line: RankRow) -> float | None:
    """The rank's mean step less its wait in collectives (ms), None when unknown."""
    if line.step_time_ms is None or line.comm_wait_us_per_step is None:
        return None
    return float(line.step_time_ms) - line.comm_wait_us_per_step / 1e3


def fix_title(fix_id: str) -> str:
    """The fix unit's title (its words), read from the registry."""
    from gpuscope.analysis.fixes import BY_ID

    u = BY_ID.get(fix_id)
    return u.words.title if u is not None else fix_id


def _fig_words(f: CauseFigure) -> str:
    return f"{_WHAT[f.cause]}: {sig3(f.pace_ms)} ms per step vs {sig3(f.others_ms)} on the others"


def _compute_note(flops: Mapping[int, float] | None) -> str:
    """A rank that computes more FLOPs per step than the others (>= :data:`MORE_COMPUTE` over
    their median), said beside any verdict: it sets the pace once the named cause is gone. From
    the counted FLOPs only: kernel time is no measure here (a waiting rank's kernels run slower
    beside the collective kernels spinning on its SMs: +19 % on the clean real DDP pair)."""
    comp = {r: v for r, v in (flops or {}).items() if v and v > 0}
    if len(comp) < 2:
        return ""
    top = max(comp, key=lambda r: comp[r])
    rest = statistics.median([v for r, v in comp.items() if r != top])
    if rest <= 0 or comp[top] < (1 + MORE_COMPUTE) * rest:
        return ""
    return (
        f"; rank {top} computes {sig3(100 * (comp[top] / rest - 1))} % more FLOPs per step than "
        f"the others ({sig3(comp[top] / 1e12)} vs {sig3(rest / 1e12)} TFLOP): give every rank "
        "equal work"
    )


def _cause_words(rank: int, cause: str, f: CauseFigure) -> str:
    if cause == PROFILER:
        return f"rank {rank}'s GPU idles while the profiler records its ops"
    if cause == COMPUTE:
        more = 100.0 * f.excess_ms / f.others_ms if f.others_ms > 0 else None
        pct = f"{sig3(more)} % more" if more is not None else f"{sig3(f.excess_ms)} ms more"
        return (
            f"rank {rank} computes {pct} per step ({sig3(f.pace_ms)} vs {sig3(f.others_ms)} ms "
            "on the others): give every rank equal work"
        )
    if cause == UNTRACED:
        return (
            f"rank {rank}: {_fig_words(f)}: Python between ops (a batch made outside a "
            "DataLoader, a sleep, logging, I/O); find it with torch.profiler.record_function or "
            "py-spy, and move it off the step (into DataLoader workers when it makes the batch)"
        )
    if cause == HOST:
        return (
            f"rank {rank}: {_fig_words(f)}: the other ranks dispatch the same work without it, so "
            f"look at rank {rank}'s CPU (other processes on its cores, its NUMA binding) and cut "
            "the dispatch"
        )
    return f"rank {rank}: {_fig_words(f)}"


def _where(rank: int, pattern: str, spikes: tuple[int, ...], shares: Any) -> str:
    if pattern == "spikes":
        steps = ", ".join(str(s) for s in spikes)
        return f", at a few steps only (step{'s' if len(spikes) > 1 else ''} {steps})"
    if pattern == "moving":
        parts = ", ".join(f"rank {r} {v:.0f} %" for r, v in shares)
        return f"; the straggler moves between ranks (share of the caused wait: {parts})"
    return ""


def finding(rep: RunReport, con: Connection | None = None) -> PaceSetterCause | None:
    """:func:`pace_setter_cause` of a rank's report: its matched straggler, every rank's line,
    the pace-setter's mean step and, when the report is the pace-setter's, its profiler cost; with
    ``con``, the untraced host idle (:func:`untraced_idle_ms`) of the pace-setter and the rank that
    waits most for it."""
    s = rep.straggler
    if s is None:
        return None
    prof = rep.profiler if int(rep.rank) == int(s.rank) else None
    un = untraced_for(con, rep) if con is not None else None
    fl = flops_for(con, rep) if con is not None else None
    return pace_setter_cause(s, rep.ranks, profiler=prof, untraced_ms=un, flops_per_step=fl)


def flops_for(con: Connection, rep: RunReport) -> dict[int, float]:
    """The counted FLOPs per step (:func:`gpuscope.analysis.flops.flops_per_step`) of the
    straggler of ``rep`` and of the rank that waits most for it; empty without a straggler."""
    from gpuscope.analysis.flops import flops_per_step
    from gpuscope.analysis.steps import find_window

    s = rep.straggler
    if s is None:
        return {}
    run_id = str(rep.run["id"])
    out = {}
    for r in sorted({int(s.rank), int(s.waiting_rank)}):
        w = find_window(con, run_id, r)
        v = flops_per_step(con, run_id, r, w, len(w.steps)).flops_per_step
        if v:
            out[r] = float(v)
    return out


def untraced_for(con: Connection, rep: RunReport) -> dict[int, float]:
    """:func:`untraced_idle_ms` of the straggler of ``rep`` and of the rank that waits most for it
    (what :func:`pace_setter_cause`'s ``untraced_ms`` takes); empty without a straggler."""
    s = rep.straggler
    if s is None:
        return {}
    run_id = str(rep.run["id"])
    return {
        r: v
        for r in sorted({int(s.rank), int(s.waiting_rank)})
        if (v := untraced_idle_ms(con, run_id, r)) is not None
    }


def untraced_idle_ms(con: Connection, run_id: str, rank: int) -> float | None:
    """The rank's GPU idle per step (ms) while its host was inside no traced span but the step's
    own annotation (``ProfilerStep#N``): Python the profiler does not record (a batch made outside
    a DataLoader, a sleep, logging). Over the rank's window, on its primary device (the one with
    the most activity); None without GPU activity."""
    import numpy as np
    from gpuscope.analysis.event_classes import HOST_CATS, PROFILER_STEP_RE
    from gpuscope.analysis.phase_patterns import _union_ns
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.steps import find_window
    from gpuscope.analysis.store_access import execute, regex, sql_list

    w = find_window(con, run_id, rank)
    ix = RankIndex.shared(con, run_id, rank)
    gaps, devs = ix.gaps(w.start_ns, w.end_ns)
    dev = execute(
        con, f"SELECT dev FROM {devs} GROUP BY dev ORDER BY sum(active_ns) DESC LIMIT 1"
    ).fetchone()
    if dev is None:
        return None
    g = execute(con, f"SELECT gs, ge FROM {gaps} WHERE dev = $d", {"d": dev[0]}).fetchnumpy()
    gs, ge = np.asarray(g["gs"], dtype=np.int64), np.asarray(g["ge"], dtype=np.int64)
    idle = int((ge - gs).sum())
    h = execute(
        con,
        f"""
        SELECT greatest(h.ts_ns, $lo) AS s, least(h.ts_ns + h.dur_ns, $hi) AS e
        FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
        WHERE h.ph = 'X' AND h.dur_ns > 0 AND h.cat IN {sql_list(HOST_CATS)}
          AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo AND NOT {regex(PROFILER_STEP_RE)}
        """,
        {"run": run_id, "lo": int(w.start_ns), "hi": int(w.end_ns)},
    ).fetchnumpy()
    hs, he = np.asarray(h["s"], dtype=np.int64), np.asarray(h["e"], dtype=np.int64)
    # idle covered by host spans = |gaps| + |spans| - |gaps U spans| (the gaps are disjoint)
    both = _union_ns(np.concatenate([gs, hs]), np.concatenate([ge, he]))
    covered = idle + _union_ns(hs, he) - both
    return max(0, idle - covered) / max(1, w.n_steps) / 1e6
