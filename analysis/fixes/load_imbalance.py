"""Fix unit ``load_imbalance``: this rank waits in collectives for a slower rank."""

from __future__ import annotations

from typing import Any

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fixes.overlap_communication import comm_floor_ns
from gpuscope.analysis.fmt import sig3

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
