"""Fix unit ``load_imbalance``: this rank waits in collectives for a slower rank; and the job's fix
when the rank that sets the pace computes more (:func:`equal_work_fix`, estimated on its graph)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Recommendation, Words
from gpuscope.analysis.fixes.overlap_communication import comm_floor_ns
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.gains import ByNode, Estimate, node_mask, raw_durations, replay_estimate

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import CriticalPath, Graph, Node
    from gpuscope.analysis.gains import Context, Variant
    from gpuscope.analysis.own_host_work import ExtraOps

WORDS = Words(
    "Speed up the slowest rank: the others wait for it",
    "A collective ends when its last rank arrives: every other rank waits for the slowest one.",
    "sampler = DistributedSampler(dataset, drop_last=True)  # equal work per rank\n"
    "# keep logging / evaluation / checkpointing off the step path of a single rank",
)


def detect(inp: Inputs) -> Finding | None:
    floor, slowest = comm_floor_ns(inp)
    if slowest is None:
        return None
    wait = (inp.comm_only_ns / max(1, inp.n_steps) - floor) * inp.n_steps
    if not fx.significant(wait, inp.window_ns, inp.n_steps):
        return None
    # Without the profiler this rank's step is the untraced one; its GPU work other than the wait
    # stays, so the wait can be at most (untraced step − GPU busy per step + wait per step).
    n = max(1, inp.n_steps)
    gain_ns, capped = wait, False
    if inp.untraced_step_ns:
        busy_per_step = inp.busy_pct / 100.0 * inp.window_ns / n
        cap = max(0.0, inp.untraced_step_ns - (busy_per_step - wait / n)) * n
        if wait > cap:
            gain_ns, capped = cap, True
    ev: dict[str, Any] = {
        "waiting_us_per_step": fx.per_step_us(wait, inp.n_steps),
        "share_pct": fx.share(wait, inp.window_ns),
        "slowest_rank": slowest.rank,
        "slowest_rank_busy_pct": slowest.gpu_busy_pct,
        "slowest_rank_step_time_ms": slowest.step_time_ms,
    }
    ev["summary"] = (
        f"This rank's GPU spent {sig3(ev['waiting_us_per_step'] / 1e3)} ms per step ({sig3(ev['share_pct'])}%) "
        f"in collectives waiting for rank {slowest.rank}, which arrives last (its GPU is busy "
        f"{slowest.gpu_busy_pct or 0:.0f}% of the time): the slowest rank sets the pace."
    )
    if capped:
        ev["capped_wait_us_per_step"] = fx.per_step_us(gain_ns, inp.n_steps)
        ev["summary"] += (
            f" Without the profiler the step takes {sig3((inp.untraced_step_ns or 0) / 1e6)} ms and "
            f"this rank's own GPU work stays, so at most {sig3(gain_ns / n / 1e6)} ms per step of "
            "the wait can be real: the bound is capped there (the profiler slows the slow rank's host)."
        )
    gain = fx.host_gain_pct(gain_ns, inp)
    return Finding(
        ev,
        gain,
        bound_pct=gain,
        title=f"Speed up the slowest rank ({slowest.rank}): the others wait for it",
        code=f"# see why rank {slowest.rank} is slow:  gpuscope analyze RUN --rank {slowest.rank}\n"
        + WORDS.code,
    )


UNIT = FixUnit(
    "load_imbalance",
    WORDS,
    detect,
    proof="Balancing the ranks can remove at most this rank's wait for the slowest one (capped by "
    "the untraced step less this rank's own GPU work).",
)


# -- the job's fix for a pace-setter that computes more (analysis.job) ----------------------------


def is_compute(n: Node) -> bool:
    """A compute kernel of the GPU (not a copy, not communication): the work a rank's share of
    the batch sets."""
    return n.kind == "gpu" and n.cat == "kernels"


def equal_work_factors(pace_ms: float, others_ms: float, n_ranks: int) -> tuple[float, float]:
    """The pace-setter's compute after the fix, as a factor on it: (``balanced``, ``removed``).
    ``balanced``: its extra work moved to the other ranks so that every rank computes the mean,
    ``(pace + (N − 1) × others) / N`` (the total work kept: a batch split unevenly, split
    evenly); ``removed``: its extra work gone, ``others / pace`` (work no other rank needs: an
    evaluation or a logging pass on one rank). 1.0 each when the pace-setter does not compute
    more."""
    if pace_ms <= 0 or others_ms >= pace_ms:
        return 1.0, 1.0
    n = max(2, n_ranks)
    removed = max(0.0, others_ms) / pace_ms
    return (1.0 + (n - 1) * removed) / n, removed


def is_comm(n: Node) -> bool:
    """A communication kernel of the GPU (a collective: its transfer and its wait for the
    others)."""
    return n.kind == "gpu" and n.cat == "communication"


def equal_work_retime(
    balanced: float, removed: float, comm_keep: float = 1.0
) -> dict[str, Variant]:
    """The re-timing of "give the pace-setter equal work" on its own graph: its compute kernels ×
    ``balanced`` (low, mid: the extra work moved, every rank at the mean; kernel time per sample
    falls as a batch grows, so the mean of the ranks' kernel times is the most the larger shares
    can cost) / × ``removed`` (high: the extra work gone). Host work stays: a smaller share of the
    batch launches the same ops. Its communication kernels × ``comm_keep`` in every variant (their
    transfer's share of transfer + wait): a wait for another rank inside this rank's collectives
    is that rank's lateness, not this rank's work; it is there when the profiler made another rank
    late (the rank that computes more, found once the profiler's cost is gone, waits for it).
    :func:`equal_work_fix` counts only what the fix adds to the graph without those waits."""

    def dur(f: float) -> Any:
        def d(v: int, n: Node) -> float:
            if is_compute(n):
                return n.dur * f
            if is_comm(n):
                return n.dur * comm_keep
            return float(n.dur)

        def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
            now = raw_durations(g, None, durs, picked)
            out = np.where(node_mask(g, "comm_kernels", is_comm), now * comm_keep, now)
            return np.where(node_mask(g, "compute_kernels", is_compute), now * f, out)

        return ByNode(d, whole)

    return {k: (dur(f), None) for k, f in (("low", balanced), ("mid", balanced), ("high", removed))}


def equal_work_fix(
    rank: int,
    pace_ms: float,
    others_ms: float,
    n_ranks: int,
    cp: CriticalPath,
    ctx: Context,
    comm_keep: float = 1.0,
) -> Recommendation:
    """The job's fix when rank ``rank`` sets the pace by computing more (``pace_ms`` against the
    others' ``others_ms``, ms per step; ``n_ranks`` ranks): "give it equal work", estimated on
    that rank's own graph (``cp``, ``ctx``) with :func:`equal_work_retime` through the replay
    every fix's estimate uses (:func:`gpuscope.analysis.gains.replay_estimate`: host speeds,
    host variation). ``comm_keep``: its collectives' transfer share of transfer + wait. No
    proven bound (``bound_pct`` None): how much of the extra work leaves is the range's."""
    balanced, removed = equal_work_factors(pace_ms, others_ms, n_ranks)
    more = 100.0 * (pace_ms / others_ms - 1.0) if others_ms > 0 else 0.0
    ev: dict[str, Any] = {
        "rank": rank,
        "compute_ms_per_step": pace_ms,
        "others_compute_ms_per_step": others_ms,
        "ranks": n_ranks,
        "balanced_factor": balanced,
        "removed_factor": removed,
        "comm_kept_factor": comm_keep,
        "summary": (
            f"Rank {rank} computes {sig3(more)} % more per step than the others ({sig3(pace_ms)} "
            f"vs {sig3(others_ms)} ms of kernels) and sets the job's pace: with equal work its "
            f"compute goes × {sig3(balanced)} (its extra work shared by the {n_ranks} ranks), or "
            f"× {sig3(removed)} if the extra work is not needed."
        ),
    }
    step = ctx.step_ms or 0.0
    rec = Recommendation(
        UNIT.id,
        f"Give rank {rank} equal work: it computes {sig3(more)} % more per step",
        WORDS.why,
        ev,
        WORDS.code,
        100.0 * (pace_ms - others_ms) / step if step > 0 else 0.0,
    )
    est = replay_estimate(equal_work_retime(balanced, removed, comm_keep), cp, ctx)
    if comm_keep < 1.0:
        # the waits taken out of the collectives are not the fix's: what the fix adds to the
        # graph without them (fx.on_top), as a share of the step
        waits_gone = replay_estimate(equal_work_retime(1.0, 1.0, comm_keep), cp, ctx)
        est = fx.on_top(est, waits_gone, ctx)
    rec.estimate = est
    return rec


# -- the job's fix for a pace-setter that runs host work of its own (analysis.job) ----------------

PROFILER_EVENT_US = 3.0
"""The profiler's cost per recorded host event (µs) assumed at the low end when the run has no
untraced step: on the two multi-GPU validation runs with host work of their own it was 2.35 (v53)
and 3.18 (v84), (traced − untraced step) / host events per step of the pace-setter."""

OWN_WORK_CODE = (
    "# batch the per-tensor loop into one call over all tensors:\n"
    "torch._foreach_lerp_(ema, params, 1 - decay)   # not: for e, p in zip(ema, params): ...\n"
    "norms = torch._foreach_norm(grads)             # not: [g.norm() for g in grads]\n"
    "# or run it every N steps, or on every rank's spare time, not on one rank's step path"
)


def own_work_bound(base_ms: float, gpu_ms: float | None) -> float | None:
    """The proven bound (%) of taking host work off a pace-setter whose own GPU work is ``gpu_ms``
    per step, on a step of ``base_ms``: its step cannot fall below its GPU's own work, so at most
    ``base_ms - gpu_ms`` goes. None when either is unknown."""
    if gpu_ms is None or base_ms <= 0:
        return None
    return 100.0 * max(0.0, base_ms - gpu_ms) / base_ms


def own_work_estimate(
    extra: ExtraOps, base_ms: float, cost_per_event_us: float | None, gpu_ms: float | None = None
) -> Estimate:
    """The job step's gain (%) with the pace-setter's own host work gone (:mod:`gpuscope.analysis.
    own_host_work`), on ``base_ms`` (its untraced step when known, else its traced one): the
    extra ops' time and the loop between them, less the profiler's cost in them (``cost_per_event_us``
    times the events inside; None: unknown, no deduction at the point, :data:`PROFILER_EVENT_US`
    at the low end). ``low``: the ops alone on a host :data:`~gpuscope.analysis.gains.
    HOST_VARIATION` slower (the fixed process's); ``high``: ops and loop with no deduction on one
    that much faster. The pace-setter is host-bound (its cause): its step loses what its host
    loses, down to its GPU's own work ``gpu_ms`` per step (:func:`own_work_bound`, through
    :func:`~gpuscope.analysis.fixes.base.clip`: a range wholly above it gives way to the bound's own
    estimate)."""
    from gpuscope.analysis.gains import HOST_VARIATION, Context

    c = cost_per_event_us if cost_per_event_us is not None else 0.0
    c_low = cost_per_event_us if cost_per_event_us is not None else PROFILER_EVENT_US
    profiler_ms = extra.events_per_step * c / 1e3
    ops, loop = extra.ops_ms_per_step, extra.loop_ms_per_step
    mid_ms = max(0.0, ops + loop - profiler_ms)
    low_ms = max(0.0, ops - extra.events_per_step * c_low / 1e3) / HOST_VARIATION
    high_ms = (ops + loop) * HOST_VARIATION
    if base_ms <= 0:
        return Estimate(0.0, 0.0, 0.0, None, method="host_ops")

    def pct(ms: float) -> float:
        return 100.0 * min(ms, base_ms) / base_ms

    est = Estimate(
        pct(mid_ms),
        min(pct(low_ms), pct(mid_ms)),
        max(pct(high_ms), pct(mid_ms)),
        base_ms - min(mid_ms, base_ms),
        method="host_ops",
        calibrated=cost_per_event_us is not None,
    )
    bounded = fx.clip(est, own_work_bound(base_ms, gpu_ms), Context(n_steps=1, step_ms=base_ms))
    return replace(bounded, method="host_ops")  # clipped or not, built on the ops


UNTRACED_CODE = (
    "# find it: py-spy dump --pid PID (or record_function('...') around the suspects)\n"
    "# then take it off the step: into DataLoader workers when it makes the batch,\n"
    "# a background thread when it logs or writes, out of the loop when it can wait"
)


def untraced_work_estimate(
    removed_ms: float, base_ms: float, gpu_ms: float | None = None
) -> Estimate:
    """The job step's gain (%) with the pace-setter's code no traced op holds gone: ``removed_ms``
    per step, what the cause's re-timing takes off the job's step, on ``base_ms`` (the
    pace-setter's untraced step for a steady straggler, the job's traced mean step for one that
    spikes: the untraced step is timed over a few steps that may hold no spike). The profiler
    records no event inside that code, so its time is not the profiler's: no deduction. ``low``
    and ``high``: on a host :data:`~gpuscope.analysis.gains.HOST_VARIATION` slower and faster
    (that code runs at the host's speed, which varies between fresh processes); down to the
    pace-setter's own GPU work ``gpu_ms`` per step (:func:`own_work_bound`). Set on the two DDP
    samples whose rank 1 sleeps (sample_traces/multi_gpu: the sleep removed is ``ddp_clean``,
    timed in the same rounds: 53.2 % on ddp_straggler_every, 52.8 % on ddp_straggler_steps, the
    medians of 3 on the mean step)."""
    from gpuscope.analysis.gains import HOST_VARIATION, Context

    if base_ms <= 0:
        return Estimate(0.0, 0.0, 0.0, None, method="untraced_code")

    def pct(ms: float) -> float:
        return 100.0 * min(max(0.0, ms), base_ms) / base_ms

    est = Estimate(
        pct(removed_ms),
        pct(removed_ms / HOST_VARIATION),
        pct(removed_ms * HOST_VARIATION),
        base_ms - min(max(0.0, removed_ms), base_ms),
        method="untraced_code",
    )
    bounded = fx.clip(est, own_work_bound(base_ms, gpu_ms), Context(n_steps=1, step_ms=base_ms))
    return replace(bounded, method="untraced_code")


def untraced_work_fix(
    rank: int, untraced_ms: float, removed_ms: float, base_ms: float, gpu_ms: float | None = None
) -> Recommendation:
    """The job's fix when rank ``rank`` sets the pace by code no traced op holds
    (``untraced_ms`` per step of GPU idle in it, more than the other ranks'): "take it off the
    step", estimated by :func:`untraced_work_estimate`."""
    ev: dict[str, Any] = {
        "rank": rank,
        "untraced_idle_ms_per_step": untraced_ms,
        "removed_ms_per_step": removed_ms,
        "base_ms": base_ms,
        "gpu_ms_per_step": gpu_ms,
        "summary": (
            f"Rank {rank}'s GPU idles {sig3(untraced_ms)} ms per step while its host runs code "
            "no traced op holds (Python between ops: a batch made outside a DataLoader, a sleep, "
            "logging, I/O), more than the other ranks'; the profiler records nothing inside it, "
            f"so its time is not the profiler's. The job's step loses {sig3(removed_ms)} ms per "
            f"step without it, of {sig3(base_ms)} ms."
        ),
    }
    rec = Recommendation(
        UNIT.id,
        f"Take the code no op holds off rank {rank}'s step",
        "A collective ends when its last rank arrives: code only one rank runs between its ops "
        "makes every other rank wait for it.",
        ev,
        UNTRACED_CODE,
        100.0 * removed_ms / base_ms if base_ms > 0 else 0.0,
    )
    rec.bound_pct = own_work_bound(base_ms, gpu_ms)
    rec.estimate = untraced_work_estimate(removed_ms, base_ms, gpu_ms)
    return rec


HOST_WORK_CODE = (
    "# a value read every step on one rank drains its GPU, then Python works on it:\n"
    "correct += (pred == y).sum()          # keep the metric on the GPU (no .item()/.tolist())\n"
    "if step % 100 == 0:\n"
    "    log(correct.item())                 # read it every N steps, on every rank or none"
)


def host_work_fix(
    rank: int, host_ms: float, removed_ms: float, base_ms: float, gpu_ms: float | None = None
) -> Recommendation:
    """The job's fix when rank ``rank`` sets the pace by its host's own work and syncs together
    (``host_work``: ``host_ms`` per step of GPU idle in them more than the other ranks', none of
    dispatch, untraced code or syncs alone explaining the wait): "keep it on the GPU, read it
    every N steps", estimated as :func:`untraced_work_fix` (:func:`untraced_work_estimate`)."""
    rec = untraced_work_fix(rank, host_ms, removed_ms, base_ms, gpu_ms)
    rec.title = f"Take rank {rank}'s own host work and syncs off its step"
    rec.why = (
        "A collective ends when its last rank arrives: a value only one rank reads and works on "
        "at every step makes every other rank wait for it."
    )
    rec.fix = HOST_WORK_CODE
    rec.evidence = {
        **{k: v for k, v in rec.evidence.items() if k != "untraced_idle_ms_per_step"},
        "host_work_idle_ms_per_step": host_ms,
        "summary": (
            f"Rank {rank}'s GPU idles {sig3(host_ms)} ms per step more than the other ranks' "
            "while its host waits in syncs and works between its ops (a value read and worked "
            "on in Python, a metric, a log line), none of them alone explaining the wait. The "
            f"job's step loses {sig3(removed_ms)} ms per step without it, of {sig3(base_ms)} ms."
        ),
    }
    return rec


def own_work_fix(
    extra: ExtraOps, base_ms: float, cost_per_event_us: float | None, gpu_ms: float | None = None
) -> Recommendation:
    """The job's fix when rank ``extra.rank`` sets the pace by host work of its own: "take it off
    the step", estimated by :func:`own_work_estimate`; bound by the pace-setter's own GPU work
    ``gpu_ms`` per step when known (:func:`own_work_bound`)."""
    top = sorted(extra.names.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))
    names = ", ".join(f"{n} ({sig3(m - t)} more per step)" for n, (m, t) in top[:4])
    ops_ms, loop_ms = extra.ops_ms_per_step, extra.loop_ms_per_step
    ev: dict[str, Any] = {
        "rank": extra.rank,
        "extra_ops_per_step": extra.extra_per_step,
        "extra_ops": {n: {"per_step": m, "others_per_step": t} for n, (m, t) in top},
        "ops_ms_per_step": ops_ms,
        "loop_ms_per_step": loop_ms,
        "events_per_step": extra.events_per_step,
        "profiler_us_per_event": cost_per_event_us,
        "gpu_ms_per_step": gpu_ms,
        "summary": (
            f"Rank {extra.rank} runs {sig3(extra.extra_per_step)} host ops per step that the "
            f"other ranks do not: {names}; as traced they take {sig3(ops_ms)} ms per step, and "
            f"the loop between them {sig3(loop_ms)} ms more"
            + (
                f", of which the profiler's own cost is about {sig3(cost_per_event_us)} µs for "
                f"each of the {sig3(extra.events_per_step)} events it recorded in them"
                if cost_per_event_us is not None
                else " (the profiler's own cost in them is not known: no untraced step)"
            )
            + (
                f"; its GPU's own work is {sig3(gpu_ms)} ms per step, below which its step of "
                f"{sig3(base_ms)} ms cannot fall: at most {sig3(own_work_bound(base_ms, gpu_ms))} % "
                "can go"
                if gpu_ms is not None and base_ms > 0
                else ""
            )
            + "."
        ),
    }
    rec = Recommendation(
        UNIT.id,
        f"Take rank {extra.rank}'s own host work off its step: "
        f"{sig3(extra.extra_per_step)} ops per step the others do not run",
        "A collective ends when its last rank arrives: host work only one rank runs makes every "
        "other rank wait for it.",
        ev,
        OWN_WORK_CODE,
        100.0 * (ops_ms + loop_ms) / base_ms if base_ms > 0 else 0.0,
    )
    rec.bound_pct = own_work_bound(base_ms, gpu_ms)
    rec.estimate = own_work_estimate(extra, base_ms, cost_per_event_us, gpu_ms)
    return rec
