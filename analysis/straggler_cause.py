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
        untraced_ms=, flops_per_step=,        # the pace-setter's and its top waiter's
        host_ops=, host_work=,                # (host ops, host work per step: host_ops_for,
                                              # host_work_for)
        chain: Chain | None = None,           # the chain across ranks (cross_rank_chain)
    ) -> PaceSetterCause | None               # None: no straggler, so no pace-setter to explain

    finding(rep: RunReport, con=None) -> PaceSetterCause | None   # the same from a rank's report
                                              # (with ``con``: untraced time, FLOPs, the chain)
    cross_rank_chain(con, run_id, match, pace, waiting) -> Chain | None
    host_ops_per_step(con, run_id, rank) -> float   # host_ops_for(con, rep): the pair's
    host_work_per_step(con, run_id, rank) -> float | None   # host_work_for(con, rep)
    step_segments(con, run_id, rank, match) -> {step: {part: ns}}
    retimed_by_step(chain, cause) -> {step: ms}

The wait to explain, ``W`` (ms per step), is the straggler's: the wait of the rank that waits
longest for it. Each candidate cause is a time per step on the pace-setter minus the median of the
other ranks' (its **excess**): host dispatch (GPU idle on ``cpu_overhead`` + ``launch_overhead``),
data loading, a host sync, pageable copies (idle by cause), longer compute (compute share × step),
communication itself (transfer share × step + idle in ``communication``). A cause is named when its
excess is at least :data:`EXPLAINS` of ``W`` and at least :data:`SINGLES_OUT` times the next
cause's; otherwise the result abstains (``cause == "abstained"``) and says why. Host dispatch that
the profiler's cost can account for (the pace-setter's host cap, untraced step − GPU busy per step,
below half of it) is named ``profiler``, unless the pace-setter runs host work of its own (at
least :data:`MORE_HOST_OPS` more host ops per step than the others, :func:`host_ops_per_step`):
the profiler's per-op cost is the same on every rank, so its host time is then compared with
theirs as traced, against how much longer the waiting rank waits in the chain's steps. Re-timing (a simple model): the job step shrinks by
``min(W, excess)``, on the **mean** step (a stall at a few steps leaves the median step as it is
and lengthens the mean: the mean is what it costs). The caused wait per step says whether the lateness is steady or **spikes** at a
few steps; the other ranks' share of the caused wait whether the straggler **moves** between ranks.

**The chain across ranks** (docs/metrics.md, "The chain across ranks"): with the store at hand the
figures come from each step's segment on the pace-setter and on the rank that waits most for it
(:func:`step_segments`: from the end of the previous step's last matched collective to the end of
this step's, split into compute / transfer / wait / GPU idle by cause), so the excess is what the
late rank has **more** of in the same steps. When the profiler is the cause and the waiting rank
computes more (kernel time and counted FLOPs), that rank sets the pace once the profiler's cost is
gone: its compute is named (``profiled_rank``: the rank late under the profiler).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
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
    from gpuscope.analysis.collectives import CollectiveMatch, Straggler
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
HOST_WORK = "host_work"
ABSTAINED = "abstained"
CAUSES: tuple[str, ...] = (
    HOST,
    UNTRACED,
    DATA,
    SYNC,
    PAGEABLE,
    COMPUTE,
    COMM,
    PROFILER,
    HOST_WORK,
)
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
    HOST_WORK: ".load_imbalance",
}


HOST_DISPATCH_UNITS: tuple[str, ...] = (
    ".dtensor_dispatch",
    ".optimizer_fused",
    ".cuda_graphs",
    ".kernel_fusion",
    ".compiled_overhead",
)
"""The fix units that cut a rank's host dispatch (Python and launch work per step), named as in
:data:`FIX_UNIT_OF`: for a pace-setter named for :data:`HOST`, the job's fix is the first of them
in that rank's own fix list (its order: largest estimate first, a cause found in the step before
torch.compile and CUDA graphs), :data:`FIX_UNIT_OF`'s when none of them is estimated to help
there (:func:`host_dispatch_fixes`)."""


def host_dispatch_fixes() -> frozenset[str]:
    """The fix ids of :data:`HOST_DISPATCH_UNITS`."""
    from importlib import import_module

    return frozenset(
        str(import_module(m, "gpuscope.analysis.fixes").UNIT.id) for m in HOST_DISPATCH_UNITS
    )


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
MORE_HOST_OPS = 0.1
"""The pace-setter runs its own extra host work when its host ops per step exceed the other
ranks' median by this share (ranks running the same code differ by at most 3.1 % on every real
multi-GPU trace of the project; the profiler's per-op cost is the same on every rank)."""
MIN_HOST_OPS = 100
"""... counted only where every compared rank runs at least this many host ops per step (the
profiler's per-op cost is a cost of many small ops; a step of a handful of ops is read by the
host cap alone)."""
SAME_DISPATCH = 0.5
"""A pace-setter named for host dispatch whose waiting rank's own traced host work per step
(:func:`host_work_per_step`) takes at least this share of the gain away (the job's step re-timed
with no step of the waiting rank below its host work, against re-timed without that floor) does
not set the pace alone: every rank's host is busy for most of its step, and the waiting rank's GPU
hides its dispatch inside the collective wait. Its words then say so (not "look at this rank's
CPU"). The tensor-parallel pairs with eager DTensor on both ranks keep 31 % (v27), 40 % (v171)
and 41 % (v190) of the gain; the pace-setters that dispatch more than their waiting rank keep 91 %
(multi_gpu/tp), 73 % and 79 % (v185, v186: FSDP2) and 61 % (multi_gpu/fsdp_noprefetch)."""

"""A rank computing this much more per step than the others' median is said beside the verdict."""
HOST_FAMILY: tuple[str, ...] = (HOST, UNTRACED, SYNC)
"""The causes that are the pace-setter's host being late: its dispatch, code no traced op holds,
and its waits in syncs. Where none singles out the wait alone, their excesses together may
(:data:`HOST_WORK`): a metric read with ``.tolist()`` and computed in Python on one rank shows as
a sync and the host work after it (v210, fifteenth blind part: rank 0's sync 17.3 ms, dispatch
16.6 and untraced code 2.4 ms per step more than rank 1's, against a wait of 50.9 ms; the metric
kept on the GPU gained 36.7 %)."""
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
    HOST_WORK: "its GPU idles while its host works or waits in syncs the others do not",
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
    share of all caused wait (%); ``candidates``: every cause's figures; ``profiled_rank``: the
    rank late under the profiler when the cause is found once the profiler's cost is gone (None
    otherwise); ``chain``: the chain across ranks it was read from; ``step_retimed``: (step, its
    segment re-timed with the cause removed, ms) for the chain's steps (empty when the verdict
    re-times the whole step); ``host_work``: (rank, its traced host work per step, ms) of the
    pace-setter and the rank that waits most for it, when read (:func:`host_work_per_step`)."""

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
    profiled_rank: int | None = None
    chain: Chain | None = None
    step_retimed: tuple[tuple[int, float], ...] = ()
    host_work: tuple[tuple[int, float], ...] = ()

    def retimed_as(self, gain_pct: float, how: str) -> PaceSetterCause:
        """This cause with the job's step re-timed by a gain (%) estimated elsewhere (the fix's
        own model, ``how`` in words), its words saying so; unchanged without a job step."""
        if self.job_step_ms is None:
            return self
        new = self.job_step_ms * (1.0 - gain_pct / 100.0)
        old = _timed_words(self.job_step_ms, self.retimed_job_step_ms)
        words = (
            self.words.replace(old, _timed_words(self.job_step_ms, new, how)) if old else self.words
        )
        return replace(self, words=words, retimed_job_step_ms=new, step_retimed=())

    def with_fix(self, fix_id: str | None, none_because: str = "") -> PaceSetterCause:
        """This cause with another fix (a registry id), its words naming it; ``None``: no fix,
        the words saying ``none_because`` in its place."""
        if fix_id == self.fix_id:
            return self
        old = _fix_words(self.fix_id)
        new = (
            _fix_words(fix_id)
            if fix_id
            else (f"; no fix named: {none_because}" if none_because else "")
        )
        words = self.words.replace(old, new) if old else self.words
        return replace(self, words=words, fix_id=fix_id)

    @property
    def id(self) -> str:
        """The finding's id: ``pace_setter_<cause>``."""
        return f"pace_setter_{self.cause}"

    @property
    def title(self) -> str:
        if self.profiled_rank is not None and self.profiled_rank != self.rank:
            return f"Rank {self.rank} sets the pace once the profiler's cost is gone: {_WHAT[self.cause]}"
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
            "profiled_rank": self.profiled_rank,
            "chain": self.chain.to_json() if self.chain is not None else None,
            "step_retimed_ms": {str(k): v for k, v in self.step_retimed},
            "host_work_ms_per_step": {str(r): v for r, v in self.host_work},
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


def _host_family(
    cands: list[CauseFigure], cap: float | None, left: float
) -> tuple[CauseFigure, float] | None:
    """The pace-setter's host causes together (:data:`HOST_FAMILY`) as one figure
    (:data:`HOST_WORK`) where they explain the wait and single it out, none alone having done so,
    a host sync among them (a value read, then host work on it): their summed excess is at least :data:`EXPLAINS` of ``left`` and :data:`SINGLES_OUT` times
    the largest excess of any other cause. With the host cap known (``cap``: untraced step − GPU
    busy per step, ms), the pace-setter's summed host time is at most the cap; what it loses there
    is the profiler's (the second value, ms per step). None otherwise."""
    fam = [f for f in cands if f.cause in HOST_FAMILY and f.excess_ms > 0]
    if len(fam) < 2 or SYNC not in {f.cause for f in fam}:
        return None  # a value read, then host work on it: without a sync, dispatch and own code
        # differ on every rank under the profiler (v209, v39: the family there promised 27.1 %
        # where 1.5 x the work on the other rank measured -1.6, and 59.0 against 41.6)
    pace_ms = sum(f.pace_ms for f in fam)
    others_ms = sum(f.others_ms for f in fam)
    removed = 0.0
    if cap is not None and pace_ms > cap:
        removed, pace_ms = pace_ms - cap, cap
    fig = CauseFigure(HOST_WORK, pace_ms, others_ms)
    rest = max((f.excess_ms for f in cands if f.cause not in HOST_FAMILY), default=0.0)
    if fig.excess_ms <= 0 or fig.excess_ms < EXPLAINS * max(0.0, left - removed):
        return None
    if rest > 0 and fig.excess_ms < SINGLES_OUT * rest:
        return None
    return fig, removed


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
    chain: Chain | None = None,
    steps: Collection[int] | None = None,
    host_ops: Mapping[int, float] | None = None,
    host_work: Mapping[int, float] | None = None,
) -> PaceSetterCause | None:
    """The pace-setter's own cause (module doc); None when there is no straggler (no rank makes
    the others wait above the collectives' threshold) or no other rank's line to compare with.
    ``steps``: the step numbers ``job_step_ms`` is the mean of (the chain's re-timing averages
    its gain over those of its steps; default: all). ``host_ops``: host ops per step by rank
    (:func:`host_ops_per_step`; the pace-setter's own extra host work, module doc).
    ``host_work``: traced host work per step by rank (ms, :func:`host_work_per_step`): a
    dispatch-bound pace-setter whose waiting rank works as long on its host
    (:data:`SAME_DISPATCH`) is said to share its dispatch with every rank, and no step is
    re-timed below the waiting rank's host work."""
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
    if chain is not None and chain.steps and chain.pace == int(pace.rank):
        # the chain's segments: the pace-setter's against the rank that waits most for it
        mine = _chain_figures(chain.parts_ms(chain.pace))
        theirs = [_chain_figures(chain.parts_ms(chain.waiting))]
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
    own_ops = _own_host_ops(int(pace.rank), host_ops)
    to_explain = wait  # the wait its own causes must explain, before the profiler's part
    by_chain_now = chain is not None and bool(chain.steps) and chain.pace == int(pace.rank)
    if own_ops is not None:
        # the pace-setter runs host work the others do not: the profiler's per-op cost is the
        # same on every rank, so its host time is compared with theirs as traced (no cap), and
        # the wait it explains is how much longer the other rank waits in the same steps
        cap = None
        if by_chain_now:
            assert chain is not None
            net = chain.parts_ms(chain.waiting).get("wait", 0.0) - chain.parts_ms(chain.pace).get(
                "wait", 0.0
            )
            to_explain = min(wait, max(0.0, net))
    removed = 0.0
    raw_host = next((f.excess_ms for f in cands if f.cause == HOST), 0.0)
    if cap is not None and mine.get(HOST) is not None:
        untraced = mine.get(UNTRACED) or 0.0
        real = max(0.0, min(float(mine[HOST] or 0.0), cap - min(untraced, cap)))
        removed = float(mine[HOST] or 0.0) - real
        cands = [CauseFigure(f.cause, real, f.others_ms) if f.cause == HOST else f for f in cands]
    left = max(0.0, to_explain - removed)  # the wait its own causes must explain
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
            chain=chain,
        )

    if pattern == "moving":
        return abstain(
            "the straggler moves between ranks, so no one rank's own cause sets the pace"
            + _late_words(chain)
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
    elif not explained and (family := _host_family(cands, cap, left)) is not None:
        cause, best, family_removed = HOST_WORK, family[0], family[1]
        note = ""
        if family_removed > 0:
            note = (
                f"; without the profiler its step leaves at most {sig3(cap)} ms per step of host "
                f"time (untraced step − GPU busy per step): {sig3(family_removed)} ms per step of "
                "it is the profiler's own cost"
            )
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
        if cause == HOST and own_ops is not None:
            mine_n, theirs_n = own_ops
            note = (
                f"; it runs {sig3(mine_n)} host ops per step against {sig3(theirs_n)} on the "
                f"others ({sig3(100.0 * (mine_n / theirs_n - 1))} % more): work of its own, not "
                "the profiler's (whose per-op cost every rank pays alike)"
            )
    explain = wait if cause == PROFILER else left
    gain = min(explain, best.excess_ms)
    by_chain = chain is not None and chain.steps and chain.pace == int(pace.rank)
    hw = {int(r): float(v) for r, v in (host_work or {}).items()}
    hw = {r: v for r, v in hw.items() if r in (int(pace.rank), int(straggler.waiting_rank))}
    # the waiting rank's own host work per step: no step of it gets shorter once the pace-setter
    # dispatches faster (its GPU hides that dispatch inside the collective wait)
    host_floor = hw.get(int(straggler.waiting_rank)) if cause == HOST and own_ops is None else None

    def retime(floor_ms: float | None) -> tuple[float | None, dict[int, float]]:
        """(the job's mean step, each chain step) with the cause removed, no step of the waiting
        rank below ``floor_ms``."""
        per: dict[int, float] = {}
        if by_chain and cause != PROFILER:
            assert chain is not None
            # the dispatch the profiler accounts for leaves each step's extra in proportion
            scale = (
                best.excess_ms / raw_host if cause == HOST and removed > 0 and raw_host > 0 else 1.0
            )
            if cause == HOST_WORK:
                raw = sum(max(0.0, f.excess_ms) for f in cands if f.cause in HOST_FAMILY)
                raw += removed  # the dispatch the cap took out of the host figure
                scale = best.excess_ms / raw if raw > 0 else 1.0
            per = retimed_by_step(chain, cause, min(1.0, max(0.0, scale)), floor_ms or 0.0)
        out = step - gain if step is not None else None
        if out is not None and per:
            assert chain is not None and step is not None
            kept = [c for c in chain.steps if steps is None or c.step in steps] or list(chain.steps)
            out = step - sum(c.segment_ms - per[c.step] for c in kept) / len(kept)
        elif out is not None:
            # no rank's step gets shorter than its own work: the pace-setter's GPU busy per step,
            # each other rank's step less its wait, the waiting rank's host work
            busy = _busy_ms(pace)
            if busy is not None and cause in (COMPUTE, COMM):
                busy -= best.excess_ms  # the work the cause adds leaves with it
            floors = [busy, floor_ms] + [_own_ms(o) for o in others]
            out = max([out, *[f for f in floors if f is not None]])
            if step is not None:
                out = min(step, out)
        return out, per

    alone, _ = retime(None)
    retimed, per_step = retime(host_floor)
    # the waiting rank's own dispatch takes at least half the gain away: every rank's host holds
    # the step, not this one's alone
    mine_hw = hw.get(int(pace.rank))
    shared = (
        host_floor is not None
        and mine_hw is not None
        and step is not None
        and alone is not None
        and retimed is not None
        and step - retimed < SAME_DISPATCH * (step - alone)
    )
    if cause == PROFILER and profiler is not None and profiler.untraced_step_ms is not None:
        # measured: the pace-setter's step without the profiler
        retimed = min(step, profiler.untraced_step_ms) if step is not None else None
    if cause == PROFILER and chain is not None and chain.pace == int(pace.rank):
        hidden = _hidden_compute(chain, flops_per_step)
        if hidden is not None:
            return _hidden_verdict(
                straggler,
                hidden,
                chain,
                wait,
                step,
                retimed,
                removed,
                pattern,
                spikes,
                shares,
                tuple(cands),
                flops_per_step,
                profiler,
            )
    known = (
        (int(straggler.waiting_rank), mine_hw, host_floor)
        if mine_hw is not None and host_floor is not None
        else None
    )
    what = _cause_words(straggler.rank, cause, best, own_ops is not None, known)
    if shared:
        assert host_floor is not None and mine_hw is not None
        what = _shared_dispatch_words(
            straggler.rank, straggler.waiting_rank, best, mine_hw, host_floor
        )
    # host work of its own (more host ops than the others): keep it off this rank's step
    fix = fix_of(COMPUTE if cause == HOST and own_ops is not None else cause)
    fix_words = _fix_words(fix)
    timed = _timed_words(step, retimed)
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
        chain=chain,
        step_retimed=tuple(sorted(per_step.items())),
        host_work=tuple(sorted(hw.items())),
    )


def _shared_dispatch_words(
    rank: int, waiting: int, f: CauseFigure, mine_ms: float, theirs_ms: float
) -> str:
    """A dispatch-bound pace-setter whose waiting rank's host works as long (:data:`SAME_DISPATCH`):
    the dispatch is every rank's, not one slow host's."""
    return (
        f"rank {rank}: {_fig_words(f)}: every rank's host is busy for most of its step (traced "
        f"host work per step: rank {rank} {sig3(mine_ms)} ms, rank {waiting} {sig3(theirs_ms)} "
        f"ms), so the dispatch holds every rank and rank {rank} only ends it last; rank "
        f"{waiting}'s GPU hides its own dispatch inside the collective wait. Cut the dispatch on "
        "every rank"
    )


def _timed_words(step: float | None, retimed: float | None, how: str = "") -> str:
    """The verdict's re-timing in words ("" when either step is unknown); ``how``: how the cause
    was removed, when not as its excess."""
    if step is None or retimed is None:
        return ""
    return (
        f"; with it removed{how} the job's mean step goes from {sig3(step)} to {sig3(retimed)} ms"
    )


def _own_host_ops(rank: int, host_ops: Mapping[int, float] | None) -> tuple[float, float] | None:
    """(the rank's host ops per step, the other ranks' median) when the rank runs its own extra
    host work (at least :data:`MORE_HOST_OPS` more, every rank at least :data:`MIN_HOST_OPS`),
    else None."""
    ops = dict(host_ops or {})
    mine = ops.pop(rank, None)
    if mine is None or not ops:
        return None
    rest = float(statistics.median(ops.values()))
    if min(mine, rest) < MIN_HOST_OPS or mine < (1 + MORE_HOST_OPS) * rest:
        return None
    return float(mine), rest


def _busy_ms(line: RankRow) -> float | None:
    """The rank's GPU compute and transfer per step (ms), None when unknown."""
    c, t = _share_ms(line, line.compute_pct), _share_ms(line, line.comm_transfer_pct)
    return None if c is None else c + (t or 0.0)


def _own_ms(line: RankRow) -> float | None:
    """The rank's mean step less its wait in collectives (ms), None when unknown."""
    if line.step_time_ms is None or line.comm_wait_us_per_step is None:
        return None
    return float(line.step_time_ms) - line.comm_wait_us_per_step / 1e3


def _fix_words(fix_id: str | None) -> str:
    """The words a verdict ends its fix with ("" without one)."""
    return f"; first fix: {fix_title(fix_id)} ({fix_id})" if fix_id else ""


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


def _cause_words(
    rank: int,
    cause: str,
    f: CauseFigure,
    own_work: bool = False,
    host_work: tuple[int, float, float] | None = None,
) -> str:
    """The cause in words; ``host_work``: (the waiting rank, the pace-setter's and its traced host
    work per step, ms), said beside host dispatch."""
    if cause == PROFILER:
        return f"rank {rank}'s GPU idles while the profiler records its ops"
    if cause == COMPUTE:
        more = 100.0 * f.excess_ms / f.others_ms if f.others_ms > 0 else None
        pct = f"{sig3(more)} % more" if more is not None else f"{sig3(f.excess_ms)} ms more"
        return (
            f"rank {rank} computes {pct} per step ({sig3(f.pace_ms)} vs {sig3(f.others_ms)} ms "
            "on the others): give every rank equal work"
        )
    if cause == HOST_WORK:
        return (
            f"rank {rank}: {_fig_words(f)}: its host is late at every step with work the other "
            "ranks do not run (a value read with .item() / .tolist() / .cpu(), then Python on "
            "it: metrics, logging); keep that work on the GPU and read it every N steps, or "
            "move it off the step"
        )
    if cause == UNTRACED:
        return (
            f"rank {rank}: {_fig_words(f)}: Python between ops (a batch made outside a "
            "DataLoader, a sleep, logging, I/O); find it with torch.profiler.record_function or "
            "py-spy, and move it off the step (into DataLoader workers when it makes the batch)"
        )
    if cause == HOST and own_work:
        return (
            f"rank {rank}: {_fig_words(f)}: its host runs work the other ranks do not (logging, "
            "per-tensor statistics, evaluation): move it off the step or batch it"
        )
    if cause == HOST:
        hw = ""
        if host_work is not None:
            w, mine, theirs = host_work
            hw = (
                f" (traced host work per step: rank {rank} {sig3(mine)} ms, rank {w} "
                f"{sig3(theirs)} ms)"
            )
        return (
            f"rank {rank}: {_fig_words(f)}: the other ranks dispatch the same work without "
            f"it{hw}, so "
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
    ch = chain_for(con, rep) if con is not None else None
    ops = host_ops_for(con, rep) if con is not None else None
    hw = host_work_for(con, rep) if con is not None else None
    return pace_setter_cause(
        s,
        rep.ranks,
        profiler=prof,
        untraced_ms=un,
        flops_per_step=fl,
        chain=ch,
        host_ops=ops,
        host_work=hw,
    )


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


def _of_pair(
    con: Connection, rep: RunReport, per_rank: Callable[[Connection, str, int], float | None]
) -> dict[int, float]:
    """``per_rank(con, run_id, rank)`` of the straggler of ``rep`` and of the rank that waits
    most for it, the ranks it has no figure for left out; empty without a straggler."""
    s = rep.straggler
    if s is None:
        return {}
    run_id = str(rep.run["id"])
    return {
        r: float(v)
        for r in sorted({int(s.rank), int(s.waiting_rank)})
        if (v := per_rank(con, run_id, r)) is not None
    }


def untraced_for(con: Connection, rep: RunReport) -> dict[int, float]:
    """:func:`untraced_idle_ms` of the pair (:func:`_of_pair`): what :func:`pace_setter_cause`'s
    ``untraced_ms`` takes."""
    return _of_pair(con, rep, untraced_idle_ms)


def host_ops_for(con: Connection, rep: RunReport) -> dict[int, float]:
    """:func:`host_ops_per_step` of the pair (:func:`_of_pair`): what :func:`pace_setter_cause`'s
    ``host_ops`` takes."""
    return _of_pair(con, rep, host_ops_per_step)


def host_work_for(con: Connection, rep: RunReport) -> dict[int, float]:
    """:func:`host_work_per_step` of the pair (:func:`_of_pair`): what :func:`pace_setter_cause`'s
    ``host_work`` takes."""
    return _of_pair(con, rep, host_work_per_step)


def host_ops_per_step(con: Connection, run_id: str, rank: int) -> float:
    """The rank's host ops per step: its host spans (CPU ops, runtime calls, annotations but the
    step's own) that start in its window, over the window's steps."""
    from gpuscope.analysis.event_classes import HOST_CATS, PROFILER_STEP_RE
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.steps import find_window
    from gpuscope.analysis.store_access import execute, regex, sql_list

    w = find_window(con, run_id, rank)
    ix = RankIndex.shared(con, run_id, rank)
    row = execute(
        con,
        f"""
        SELECT count(*) FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
        WHERE h.ph = 'X' AND h.dur_ns > 0 AND h.cat IN {sql_list(HOST_CATS)}
          AND h.ts_ns >= $lo AND h.ts_ns < $hi AND NOT {regex(PROFILER_STEP_RE)}
        """,
        {"run": run_id, "lo": int(w.start_ns), "hi": int(w.end_ns)},
    ).fetchone()
    return float(row[0] if row else 0) / max(1, w.n_steps)


def host_work_per_step(con: Connection, run_id: str, rank: int) -> float | None:
    """The rank's traced host work per step (ms): the union of its host spans (CPU ops, runtime
    calls, annotations but the step's own) inside its window, less the time the host was blocked
    on the GPU: the calls that block until the GPU is done
    (:data:`~gpuscope.analysis.event_classes.SYNC_APIS`), and any runtime call during which GPU
    activity ended, from its start to the last such end (a copy to pageable memory, a launch into
    a full queue: the op around it covers the same wait); over the window's steps. None without
    steps."""
    import numpy as np
    from gpuscope.analysis.event_classes import (
        HOST_CATS,
        PROFILER_STEP_RE,
        RUNTIME_CATS,
        SYNC_APIS,
    )
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.steps import find_window
    from gpuscope.analysis.store_access import execute, regex, sql_list

    w = find_window(con, run_id, rank)
    if not w.n_steps:
        return None
    ix = RankIndex.shared(con, run_id, rank)
    lo, hi = int(w.start_ns), int(w.end_ns)
    h = execute(
        con,
        f"""
        SELECT greatest(h.ts_ns, $lo) AS s, least(h.ts_ns + h.dur_ns, $hi) AS e,
               n.name IN {sql_list(SYNC_APIS)} AS sync, h.cat IN {sql_list(RUNTIME_CATS)} AS rt
        FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
        WHERE h.ph = 'X' AND h.dur_ns > 0 AND h.cat IN {sql_list(HOST_CATS)}
          AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo AND NOT {regex(PROFILER_STEP_RE)}
        """,
        {"run": run_id, "lo": lo, "hi": hi},
    ).fetchnumpy()
    hs, he = np.asarray(h["s"], dtype=np.int64), np.asarray(h["e"], dtype=np.int64)
    sync = np.asarray(h["sync"], dtype=bool)
    rt = np.asarray(h["rt"], dtype=bool) & ~sync
    g = execute(
        con,
        f"SELECT e FROM {ix.gpu()} WHERE e > $lo AND e < $hi ORDER BY e",
        {"lo": lo, "hi": hi},
    ).fetchnumpy()
    ends = np.asarray(g["e"], dtype=np.int64)
    # each runtime call's last GPU end before its own end: blocked from its start to there
    i = np.searchsorted(ends, he[rt], side="left") - 1
    last = np.where(i >= 0, ends[np.maximum(i, 0)], np.iinfo(np.int64).min)
    blocked = last >= hs[rt]
    us, ue = _merge(hs, he)
    ss, se = _merge(
        np.concatenate([hs[sync], hs[rt][blocked]]), np.concatenate([he[sync], last[blocked]])
    )
    A, B = np.array([lo]), np.array([hi])
    work = int(_covered(us, ue, A, B)[0]) - int(_covered(ss, se, A, B)[0])
    return max(0, work) / w.n_steps / 1e6


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


# -- the chain across ranks: each step's segment on the late rank against the waiting rank's ----------

#: The parts a rank's step segment is split into (ms, summing to the segment): GPU compute (any
#: non-communication activity), communication transfer, the wait in collectives for a later rank,
#: and the GPU idle by cause (host dispatch, untraced host time, data loading, a sync, pageable
#: copies, communication called on the host, other).
PARTS: tuple[str, ...] = (
    COMPUTE,
    "transfer",
    "wait",
    HOST,
    UNTRACED,
    DATA,
    SYNC,
    PAGEABLE,
    "comm_idle",
    "other",
)
#: The bound-by split of the job's critical path (a step's segment on its late rank): each part of
#: :data:`PARTS` goes to one of these.
BOUND_BY: dict[str, str] = {
    COMPUTE: "compute",
    "transfer": "comm",
    "comm_idle": "comm",
    "wait": "wait",
    DATA: "data",
    HOST: "host",
    UNTRACED: "host",
    SYNC: "host",
    PAGEABLE: "host",
    "other": "host",
}
BOUND_ORDER: tuple[str, ...] = ("compute", "host", "data", "comm", "wait")


def _merge(s: Any, e: Any) -> tuple[Any, Any]:
    """The union of intervals [s, e) as sorted disjoint arrays (int64)."""
    import numpy as np

    s, e = np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)
    if s.size == 0:
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > reach[:-1]))
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _covered(us: Any, ue: Any, a: Any, b: Any) -> Any:
    """For each range [a_i, b_i): how much of it the disjoint sorted union (us, ue) covers (ns)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if us.size == 0:
        return np.zeros(a.shape, dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(ue - us)))

    def upto(t: Any) -> Any:  # covered length of (-inf, t)
        i = np.searchsorted(us, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.clip(t - us[np.maximum(i - 1, 0)], 0, None), 0)
        part = np.minimum(last, np.where(i > 0, (ue - us)[np.maximum(i - 1, 0)], 0))
        return np.where(i > 0, full + part, 0)

    return np.maximum(0, upto(b) - upto(a))


def step_segments(
    con: Connection, run_id: str, rank: int, match: CollectiveMatch
) -> dict[int, dict[str, float]]:
    """The rank's step segments split into :data:`PARTS` (ns each), by step number. A step's
    segment runs from the end of the rank's last matched collective launched in the previous step
    that has one to the end of its last matched collective launched in this step: the ranks leave
    a collective together, so the segments of a step start and end at about the same time on
    every rank, and a rank that waits holds the wait inside its own segment. The window's first
    step with a collective has no segment (nothing in the window before it ends a collective).
    Measured on the rank's primary device; GPU idle by the idle gaps' causes (each gap's cause ns
    scaled by how much of it the segment holds), the untraced host time (idle while the host is in
    no traced span but the step's own) taken out of the CPU overhead."""
    import numpy as np
    from gpuscope.analysis.collectives import rank_offset_ns
    from gpuscope.analysis.event_classes import HOST_CATS, PROFILER_STEP_RE
    from gpuscope.analysis.idle import idle_gaps
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.steps import find_window
    from gpuscope.analysis.store_access import execute, regex, sql_list

    rows = match.rows
    mine = rows[(rows["rank"] == rank) & rows["step"].notna()]
    if mine.empty:
        return {}
    off = rank_offset_ns(con, run_id, rank)
    ends = mine.groupby("step")["end_ns"].max().sort_index()
    bounds = [(int(s), int(e) - off) for s, e in ends.items()]
    if len(bounds) < 2:
        return {}
    w = find_window(con, run_id, rank)
    ix = RankIndex.shared(con, run_id, rank)
    dev = ix.primary_device(w.start_ns, w.end_ns)
    if dev is None:
        return {}
    lo, hi = bounds[0][1], bounds[-1][1]
    comm_ids = ix.comm_name_ids()
    g = execute(
        con,
        f"SELECT s, e, name_id FROM {ix.gpu()} WHERE dev = $d AND s < $hi AND e > $lo",
        {"d": dev, "lo": lo, "hi": hi},
    ).fetchnumpy()
    gs, ge = np.asarray(g["s"], dtype=np.int64), np.asarray(g["e"], dtype=np.int64)
    is_comm = np.isin(np.asarray(g["name_id"], dtype=np.int64), np.asarray(comm_ids, np.int64))
    busy = _merge(gs, ge)
    comp = _merge(gs[~is_comm], ge[~is_comm])
    ws = mine["start_ns"].to_numpy(np.int64) - off
    wait = _merge(ws, ws + mine["wait_ns"].to_numpy(np.int64))
    wait_or_comp = _merge(np.concatenate([wait[0], comp[0]]), np.concatenate([wait[1], comp[1]]))
    gaps = idle_gaps(con, run_id, rank, w, device=dev, start_ns=lo, end_ns=hi, evidence=False)
    h = execute(
        con,
        f"""
        SELECT h.ts_ns AS s, h.ts_ns + h.dur_ns AS e
        FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
        WHERE h.ph = 'X' AND h.dur_ns > 0 AND h.cat IN {sql_list(HOST_CATS)}
          AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo AND NOT {regex(PROFILER_STEP_RE)}
        """,
        {"run": run_id, "lo": lo, "hi": hi},
    ).fetchnumpy()
    host = _merge(h["s"], h["e"])
    g0 = gaps["start_ns"].to_numpy(np.int64)
    g1 = gaps["end_ns"].to_numpy(np.int64)
    gdur = np.maximum(1, g1 - g0).astype(float)
    untraced_gap = (g1 - g0) - _covered(*host, g0, g1)
    by_gap = {
        HOST: gaps[f"{CPU_OVERHEAD}_ns"].to_numpy(float)
        + gaps[f"{LAUNCH_OVERHEAD}_ns"].to_numpy(float),
        DATA: gaps[f"{DATA_LOADING}_ns"].to_numpy(float),
        SYNC: gaps[f"{HOST_SYNC}_ns"].to_numpy(float),
        PAGEABLE: gaps[f"{PAGEABLE_COPY}_ns"].to_numpy(float),
        "comm_idle": gaps[f"{COMMUNICATION}_ns"].to_numpy(float),
        "other": gaps["other_ns"].to_numpy(float),
    }
    by_gap[UNTRACED] = np.minimum(untraced_gap, gaps[f"{CPU_OVERHEAD}_ns"].to_numpy(float))
    by_gap[HOST] = by_gap[HOST] - by_gap[UNTRACED]
    out: dict[int, dict[str, float]] = {}
    for (_, a), (step, b) in itertools.pairwise(bounds):
        if b <= a:
            continue
        A, B = np.array([a]), np.array([b])
        n_busy = int(_covered(*busy, A, B)[0])
        n_comp = int(_covered(*comp, A, B)[0])
        n_wait = int(_covered(*wait_or_comp, A, B)[0]) - n_comp
        n_wait = max(0, min(n_wait, n_busy - n_comp))
        share = np.clip(np.minimum(g1, b) - np.maximum(g0, a), 0, None) / gdur
        parts = {
            COMPUTE: float(n_comp),
            "transfer": float(n_busy - n_comp - n_wait),
            "wait": float(n_wait),
        }
        for k, v in by_gap.items():
            parts[k] = float((v * share).sum())
        idle = (b - a) - n_busy
        told = sum(
            by_gap_v for kk, by_gap_v in parts.items() if kk not in (COMPUTE, "transfer", "wait")
        )
        parts["other"] += max(0.0, idle - told)  # idle the gaps' causes do not hold
        out[step] = parts
    return out


@dataclass(frozen=True)
class ChainStep:
    """One step of the chain between the pace-setter and the rank that waits most for it: each
    rank's segment (:func:`step_segments`) split into :data:`PARTS` (ms). ``late_rank``: the rank
    whose segment holds less wait (the one the other waits for in this step: the job's critical
    path runs through its segment)."""

    step: int
    late_rank: int
    other_rank: int
    late_ms: Mapping[str, float]
    other_ms: Mapping[str, float]

    @property
    def segment_ms(self) -> float:
        """The late rank's segment (ms): the job's step as the critical path runs it."""
        return float(sum(self.late_ms.values()))

    @property
    def wait_ms(self) -> float:
        """The other rank's wait in this step less the late rank's own (ms, >= 0)."""
        return max(0.0, self.other_ms.get("wait", 0.0) - self.late_ms.get("wait", 0.0))

    @property
    def bound_by_ms(self) -> dict[str, float]:
        """The late rank's segment by :data:`BOUND_ORDER` (ms, summing to the segment)."""
        out = dict.fromkeys(BOUND_ORDER, 0.0)
        for k, v in self.late_ms.items():
            out[BOUND_BY[k]] += v
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "late_rank": self.late_rank,
            "other_rank": self.other_rank,
            "segment_ms": self.segment_ms,
            "wait_ms": self.wait_ms,
            "bound_by_ms": self.bound_by_ms,
            "late_parts_ms": dict(self.late_ms),
            "other_parts_ms": dict(self.other_ms),
        }


@dataclass(frozen=True)
class Chain:
    """The chain across ranks (:func:`cross_rank_chain`): the pace-setter ``pace``, the rank that
    waits most for it ``waiting``, and each step's segments on both (:class:`ChainStep`)."""

    pace: int
    waiting: int
    steps: tuple[ChainStep, ...]

    def parts_ms(self, rank: int) -> dict[str, float]:
        """The rank's mean segment by :data:`PARTS` (ms per step) over the chain's steps."""
        n = max(1, len(self.steps))
        out = dict.fromkeys(PARTS, 0.0)
        for s in self.steps:
            src = s.late_ms if s.late_rank == rank else s.other_ms
            for k in PARTS:
                out[k] += src.get(k, 0.0) / n
        return out

    @property
    def bound_by_pct(self) -> dict[str, float]:
        """The job's critical path over the chain's steps by :data:`BOUND_ORDER` (% of the sum of
        the late ranks' segments)."""
        tot = dict.fromkeys(BOUND_ORDER, 0.0)
        for s in self.steps:
            for k, v in s.bound_by_ms.items():
                tot[k] += v
        whole = sum(tot.values())
        return {k: (100.0 * v / whole if whole > 0 else 0.0) for k, v in tot.items()}

    @property
    def late_by_step(self) -> dict[int, int]:
        return {s.step: s.late_rank for s in self.steps}

    def to_json(self) -> dict[str, Any]:
        return {
            "pace_rank": self.pace,
            "waiting_rank": self.waiting,
            "bound_by_pct": self.bound_by_pct,
            "steps": [s.to_json() for s in self.steps],
        }


def cross_rank_chain(
    con: Connection, run_id: str, match: CollectiveMatch, pace: int, waiting: int
) -> Chain | None:
    """The chain between ``pace`` and ``waiting`` over the steps where both have a segment
    (:func:`step_segments`); None when no step has one on both."""
    a = step_segments(con, run_id, pace, match)
    b = step_segments(con, run_id, waiting, match)
    steps = []
    for s in sorted(set(a) & set(b)):
        pa_, pb = {k: v / 1e6 for k, v in a[s].items()}, {k: v / 1e6 for k, v in b[s].items()}
        if pa_.get("wait", 0.0) <= pb.get("wait", 0.0):
            steps.append(ChainStep(s, pace, waiting, pa_, pb))
        else:
            steps.append(ChainStep(s, waiting, pace, pb, pa_))
    return Chain(pace, waiting, tuple(steps)) if steps else None


def chain_for(con: Connection, rep: RunReport) -> Chain | None:
    """:func:`cross_rank_chain` of ``rep``'s straggler and the rank that waits most for it."""
    s, m = rep.straggler, rep.collectives
    if s is None or m is None or int(s.rank) == int(s.waiting_rank):
        return None
    return cross_rank_chain(con, str(rep.run["id"]), m, int(s.rank), int(s.waiting_rank))


HIDDEN_KERNEL_MORE = 0.25
"""Without counted FLOPs, a waiting rank's kernel time must exceed the pace-setter's by this share
to say it computes more (its kernels run slower beside the collective kernels spinning on its SMs:
+11 % on the real clean DDP pair's segments)."""


def _chain_figures(parts: Mapping[str, float]) -> dict[str, float | None]:
    """A rank's candidate figures (ms per step) from its mean chain segment; :data:`HOST_WORK`
    the sum of :data:`HOST_FAMILY`'s."""
    return {
        HOST_WORK: sum(parts.get(c, 0.0) for c in HOST_FAMILY),
        HOST: parts.get(HOST, 0.0),
        UNTRACED: parts.get(UNTRACED, 0.0),
        DATA: parts.get(DATA, 0.0),
        SYNC: parts.get(SYNC, 0.0),
        PAGEABLE: parts.get(PAGEABLE, 0.0),
        COMPUTE: parts.get(COMPUTE, 0.0),
        COMM: parts.get("transfer", 0.0) + parts.get("comm_idle", 0.0),
    }


def _part_ms(parts: Mapping[str, float], cause: str) -> float:
    v = _chain_figures(parts).get(cause)
    return float(v or 0.0)


def retimed_by_step(
    chain: Chain, cause: str, scale: float = 1.0, floor_ms: float = 0.0
) -> dict[int, float]:
    """Each chain step's segment (ms) with ``cause`` removed on the pace-setter: in a step it sets
    the pace, its part of that cause becomes the waiting rank's (``scale`` × the extra part, at
    most the wait it caused, goes); the step then lasts the longer of that, the waiting rank's
    segment less its wait and ``floor_ms`` (the waiting rank's own host work per step), never
    longer than it was. A step the other rank sets keeps its length."""
    out = {}
    for s in chain.steps:
        if s.late_rank != chain.pace:
            out[s.step] = s.segment_ms
            continue
        extra = scale * max(0.0, _part_ms(s.late_ms, cause) - _part_ms(s.other_ms, cause))
        own_other = sum(s.other_ms.values()) - s.other_ms.get("wait", 0.0)
        out[s.step] = min(
            s.segment_ms, max(s.segment_ms - min(extra, s.wait_ms), own_other, floor_ms)
        )
    return out


def _hidden_compute(chain: Chain, flops: Mapping[int, float] | None) -> CauseFigure | None:
    """The waiting rank's compute against the pace-setter's when it computes more (ms per step:
    ``pace_ms`` the waiting rank's kernel time, ``others_ms`` the pace-setter's), None when it does
    not: kernel time at least :data:`MORE_COMPUTE` more and counted FLOPs at least as much more
    where both ranks have them (else kernel time at least :data:`HIDDEN_KERNEL_MORE` more)."""
    mine = chain.parts_ms(chain.waiting).get(COMPUTE, 0.0)
    theirs = chain.parts_ms(chain.pace).get(COMPUTE, 0.0)
    if theirs <= 0:
        return None
    fl = flops or {}
    f_w, f_p = fl.get(chain.waiting), fl.get(chain.pace)
    if f_w and f_p:
        if f_w < (1 + MORE_COMPUTE) * f_p or mine < (1 + MORE_COMPUTE) * theirs:
            return None
    elif mine < (1 + HIDDEN_KERNEL_MORE) * theirs:
        return None
    return CauseFigure(COMPUTE, mine, theirs)


def _hidden_verdict(
    s: Straggler,
    f: CauseFigure,
    chain: Chain,
    wait: float,
    step: float | None,
    retimed_profiled: float | None,
    removed: float,
    pattern: str,
    spikes: tuple[int, ...],
    shares: tuple[tuple[int, float], ...],
    cands: tuple[CauseFigure, ...],
    flops: Mapping[int, float] | None,
    profiler: ProfilerCost | None,
) -> PaceSetterCause:
    """The verdict when the profiler's cost makes the pace-setter late and the rank that waits
    computes more: that rank sets the pace without the profiler. Re-timed on the step without the
    profiler (measured, else the profiled step with the profiler's part removed): less the extra
    compute, never below the pace-setter's own GPU work."""
    w, p = chain.waiting, chain.pace
    pct = 100.0 * f.excess_ms / f.others_ms
    fl = flops or {}
    fl_words = ""
    if fl.get(w) and fl.get(p):
        fl_words = f"; {sig3(100.0 * (fl[w] / fl[p] - 1))} % more FLOPs"
    base = retimed_profiled if retimed_profiled is not None else step
    retimed = None
    if base is not None:
        own = chain.parts_ms(p)
        floor = own.get(COMPUTE, 0.0) + own.get("transfer", 0.0)
        retimed = max(base - f.excess_ms, floor)
    fix = fix_of(COMPUTE)
    fix_words = _fix_words(fix)
    timed = (
        f"; with it removed the job's step without the profiler goes from {sig3(base)} to "
        f"{sig3(retimed)} ms"
        if base is not None and retimed is not None
        else ""
    )
    unprof = (
        f" (measured without it: {sig3(profiler.untraced_step_ms)} ms per step)"
        if profiler is not None and profiler.untraced_step_ms is not None
        else ""
    )
    words = (
        f"rank {w} computes {sig3(pct)} % more per step (its kernels take {sig3(f.pace_ms)} vs "
        f"{sig3(f.others_ms)} ms on rank {p}{fl_words}): give it equal work "
        "(DistributedSampler, the same batch on every rank); under the profiler rank "
        f"{s.waiting_rank} waits {sig3(wait)} ms per step for rank {s.rank} (it arrives last at "
        f"{s.last_arrivals} of {s.instances} collectives), but {sig3(removed)} ms per step of "
        f"rank {s.rank}'s dispatch is the profiler's own cost{unprof}{timed}{fix_words}."
    )
    return PaceSetterCause(
        w,
        COMPUTE,
        words,
        f.excess_ms,
        fix,
        wait,
        base,
        retimed,
        pattern,
        spikes,
        shares,
        cands,
        profiled_rank=int(s.rank),
        chain=chain,
    )


def _late_words(chain: Chain | None) -> str:
    """Which rank sets the pace at which steps (the chain's late rank by step), '' without one."""
    if chain is None or not chain.steps:
        return ""
    by: dict[int, list[int]] = {}
    for s in chain.steps:
        by.setdefault(s.late_rank, []).append(s.step)
    if len(by) < 2:
        return ""
    parts = "; ".join(
        f"rank {r} at step{'s' if len(v) > 1 else ''} {', '.join(map(str, v))}"
        for r, v in sorted(by.items())
    )
    return f" (it sets the pace {parts})"
