"""The pace-setter's host work of its own: the CPU ops it runs that the other ranks do not.

A rank that sets a job's pace by host work of its own (a per-tensor EMA, per-tensor statistics,
logging: :mod:`gpuscope.analysis.straggler_cause`, "host work of its own") runs more host ops per
step than the others. Which ones, and what they cost, is read from the op names: a name the
pace-setter runs more often per step than the other ranks' median (at least
:data:`MORE_INSTANCES` more, and :data:`MIN_EXTRA_PER_STEP` more per step) is an **extra name**;
its **share** is the part of the pace-setter's instances the others do not run, ``(mine −
theirs) / mine``. The work is the time inside the outermost instances of the extra names on the
pace-setter's main thread, times their share (the instances are alike: which of them are the
extra ones is not known), and, for the loop that drives them, the host time between two
consecutive extra instances (Python the profiler does not record).

The job's fix for it (:func:`gpuscope.analysis.fixes.load_imbalance.own_work_fix`) removes that
time from the pace-setter's step, less the profiler's own cost in it: ``torch.profiler`` adds
about the same time to every event it records (an op, a runtime call), so the rank's **profiler
cost per event** is ``(traced step − untraced step) / host events per step`` of the pace-setter,
and each extra instance's untraced time is its traced time less that cost times the events inside
it. A uniform host scale (the replay's) would shrink these long Python-level ops as much as the
many short ones that make up most of the inflation. Definitions: docs/metrics.md ("Host work of
its own").
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuscope.store import Connection

MORE_INSTANCES = 0.1
"""A name is extra when the pace-setter runs at least this share more of it per step than the
other ranks' median ..."""
MIN_EXTRA_PER_STEP = 4.0
"""... and at least this many more per step (a handful of ops more is not work of its own)."""
LOOP_GAP_NS = 50_000
"""The most host time between two consecutive extra instances that counts as the loop driving
them (ns): a Python iteration takes microseconds; a longer pause is other work."""
CPU_OP = "cpu_op"


@dataclass(frozen=True)
class ExtraOps:
    """The pace-setter's host ops of its own. ``names``: extra name -> (its instances per step,
    the other ranks' median per step); ``spans``: (start, end, share) of each outermost instance
    of an extra name on the main thread (ns, trace time; ``share`` in (0, 1]); ``gaps``: the host
    time between two consecutive such instances, with the smaller share of the two; ``main_tid``:
    the thread they are on; ``n_steps``: the window's steps; ``events_per_step``: the host
    events the profiler recorded inside the spans per step, each times its span's share."""

    rank: int
    names: dict[str, tuple[float, float]]
    spans: tuple[tuple[int, int, float], ...]
    gaps: tuple[tuple[int, int, float], ...]
    main_tid: int
    n_steps: int
    events_per_step: float = 0.0

    @property
    def ops_ms_per_step(self) -> float:
        """The extra instances' own traced time per step, each times its share (ms)."""
        return sum((e - s) * f for s, e, f in self.spans) / max(1, self.n_steps) / 1e6

    @property
    def loop_ms_per_step(self) -> float:
        """The traced host time between consecutive extra instances per step (ms), by share."""
        return sum((e - s) * f for s, e, f in self.gaps) / max(1, self.n_steps) / 1e6

    @property
    def extra_per_step(self) -> float:
        """Instances per step the pace-setter runs beyond the others (every extra name)."""
        return sum(max(0.0, m - t) for m, t in self.names.values())


def extra_names(
    mine: Mapping[str, float], others: Iterable[Mapping[str, float]]
) -> dict[str, tuple[float, float]]:
    """The extra names (module doc) from op counts per step: the pace-setter's (``mine``) and each
    other rank's; name -> (mine, the others' median). Empty without another rank."""
    rest = list(others)
    if not rest:
        return {}
    out = {}
    for name, m in mine.items():
        t = float(statistics.median(float(o.get(name, 0.0)) for o in rest))
        if m - t >= MIN_EXTRA_PER_STEP and m >= (1.0 + MORE_INSTANCES) * t:
            out[name] = (float(m), t)
    return out


def outermost(
    instances: Iterable[tuple[str, int, int]], names: Mapping[str, tuple[float, float]]
) -> tuple[tuple[tuple[int, int, float], ...], tuple[tuple[int, int, float], ...]]:
    """(spans, gaps) of :class:`ExtraOps` from one thread's CPU ops ``(name, start, end)`` (ns):
    an op of an extra name not inside another op of an extra name is a span, with its name's
    share; the time between two consecutive spans with no other outermost op between them (at
    most :data:`LOOP_GAP_NS`) is a gap, with the smaller share of the two."""
    share = {n: (m - t) / m for n, (m, t) in names.items() if m > 0}
    ops = sorted(instances, key=lambda x: (x[1], -x[2]))
    spans: list[tuple[int, int, float]] = []
    gaps: list[tuple[int, int, float]] = []
    end = -1  # the end of the outermost op being inside
    prev_extra: tuple[int, int, float] | None = None
    for name, s, e in ops:
        if s < end:  # nested in the current outermost op
            continue
        end = e
        f = share.get(name)
        if f is None:
            prev_extra = None
            continue
        span = (s, e, f)
        if prev_extra is not None and 0 < s - prev_extra[1] <= LOOP_GAP_NS:
            gaps.append((prev_extra[1], s, min(prev_extra[2], f)))
        spans.append(span)
        prev_extra = span
    return tuple(spans), tuple(gaps)


def op_counts(con: Connection, run_id: str, rank: int) -> dict[str, float]:
    """The rank's CPU ops per step by name, in its window (every op, nested ones too)."""
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.steps import find_window
    from gpuscope.analysis.store_access import execute

    w = find_window(con, run_id, rank)
    ix = RankIndex.shared(con, run_id, rank)
    rows = execute(
        con,
        f"""
        SELECT n.name, count(*) FROM {ix.host()} h
        JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
        WHERE h.ph = 'X' AND h.dur_ns > 0 AND h.cat = '{CPU_OP}'
          AND h.ts_ns >= $lo AND h.ts_ns < $hi
        GROUP BY n.name ORDER BY n.name
        """,
        {"run": run_id, "lo": int(w.start_ns), "hi": int(w.end_ns)},
    ).fetchall()
    n = max(1, w.n_steps)
    return {str(name): float(c) / n for name, c in rows}


def events_inside(spans: tuple[tuple[int, int, float], ...], starts: Iterable[int]) -> float:
    """The events starting inside the spans (``starts``: their start times, ns), each times its
    span's share (the spans do not overlap)."""
    import bisect

    lo = [a for a, _, _ in spans]
    total = 0.0
    for t in starts:
        i = bisect.bisect_right(lo, t) - 1
        if i >= 0 and t < spans[i][1]:
            total += spans[i][2]
    return total


def extra_ops(
    con: Connection, run_id: str, rank: int, others: Iterable[int], main_tid: int
) -> ExtraOps | None:
    """The host ops rank ``rank`` runs beyond ``others`` (module doc), on its thread
    ``main_tid``; None when it runs no extra name."""
    from gpuscope.analysis.event_classes import HOST_CATS, PROFILER_STEP_RE
    from gpuscope.analysis.rank_index import RankIndex
    from gpuscope.analysis.steps import find_window
    from gpuscope.analysis.store_access import execute, regex, sql_list

    names = extra_names(op_counts(con, run_id, rank), [op_counts(con, run_id, r) for r in others])
    if not names:
        return None
    w = find_window(con, run_id, rank)
    ix = RankIndex.shared(con, run_id, rank)
    rows = execute(
        con,
        f"""
        SELECT n.name, h.cat, h.ts_ns, h.ts_ns + h.dur_ns FROM {ix.host()} h
        JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
        WHERE h.ph = 'X' AND h.dur_ns > 0 AND h.cat IN {sql_list(HOST_CATS)} AND h.tid = $tid
          AND h.ts_ns >= $lo AND h.ts_ns < $hi AND NOT {regex(PROFILER_STEP_RE)}
        ORDER BY h.ts_ns, h.dur_ns DESC, n.name
        """,
        {"run": run_id, "lo": int(w.start_ns), "hi": int(w.end_ns), "tid": int(main_tid)},
    ).fetchall()
    ops = [(str(a), int(b), int(c)) for a, cat, b, c in rows if cat == CPU_OP]
    spans, gaps = outermost(ops, names)
    if not spans:
        return None
    n = max(1, w.n_steps)
    inside = events_inside(spans, (int(b) for _, _, b, _ in rows))
    return ExtraOps(int(rank), names, spans, gaps, int(main_tid), n, inside / n)
