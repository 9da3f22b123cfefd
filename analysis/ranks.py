"""Many ranks: a table of every rank's headline figures; the straggler is matched.

In a synchronous job (DDP, FSDP) every rank's step is as long as the slowest one's: the others
wait for it inside collectives. The straggler is found by matching every collective across ranks
(:mod:`gpuscope.analysis.collectives`): the rank whose late arrivals make the others wait longest in
total, with the steps and phases where it happens (it replaces the earlier aggregate, the rank with
the least communication-only time, which missed a straggler that moves between ranks or only shows
in one phase). docs/metrics.md, "Collectives across ranks".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from gpuscope.analysis.busy import busy_series
from gpuscope.analysis.collectives import CollectiveMatch, Straggler, wait_in_view
from gpuscope.analysis.idle import CAUSES
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.rank_row import RankRow
from gpuscope.analysis.steps import find_window
from gpuscope.analysis.store_access import ranks_of

__all__ = [
    "BusyPanel",
    "RankLine",
    "RankOverview",
    "Straggler",
    "rank_busy_panels",
    "rank_overview",
    "rank_table",
]


def rank_table(ranks: Sequence[RankRow]) -> pd.DataFrame:
    """The rank rows of a report (``RunReport.ranks``) as a DataFrame, one row per rank: ``rank``,
    ``step_time_ms``, ``gpu_busy_pct``, ``comm_only_ms_per_step``, ``idle_ms_per_step``,
    ``comm_wait_pct`` (% of the window), ``comm_wait_ms_per_step``, ``step_p50_ms``/``p90``/``max``
    and ``idle_<cause>_ms_per_step`` for every cause (ms per step; NaN where not computed)."""
    rows = []
    for r in ranks:
        row: dict[str, Any] = {
            "rank": r.rank,
            "step_time_ms": r.step_time_ms,
            "gpu_busy_pct": r.gpu_busy_pct,
            "comm_only_ms_per_step": (r.comm_only_us_per_step or 0.0) / 1e3,
            "idle_ms_per_step": _ms(r.idle_us_per_step),
            "comm_wait_pct": r.comm_wait_pct,
            "comm_wait_ms_per_step": _ms(r.comm_wait_us_per_step),
            "step_p50_ms": r.step_p50_ms,
            "step_p90_ms": r.step_p90_ms,
            "step_max_ms": r.step_max_ms,
        }
        by = r.idle_by_cause_us_per_step or {}
        for c in CAUSES:
            row[f"idle_{c}_ms_per_step"] = _ms(by.get(c))
        rows.append(row)
    return pd.DataFrame(rows).sort_values("rank").reset_index(drop=True)


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1e3


@dataclass(frozen=True, eq=False)
class BusyPanel:
    """One row of an aligned busy plot (``gpuscope.web.figures.aligned_sawtooth``): its label,
    the busy fraction per bucket (a :func:`busy.busy_series` frame), the ns its x axis starts at
    (a step's start, in the rank's trace clock), and where known: the rank it shows, the
    fraction (0..1) of each bucket spent waiting in collectives for the last rank, idle % per
    cause and bucket, and the steps to mark (``number``, ``start_ns``)."""

    label: str
    busy: pd.DataFrame
    origin_ns: int
    rank: int | None = None
    wait: np.ndarray | None = None
    shares: dict[str, np.ndarray] | None = None
    steps: pd.DataFrame | None = None


def rank_busy_panels(
    con: Any,
    run_id: str,
    *,
    step_number: int | None = None,
    n_steps: int = 3,
    n_buckets: int = 300,
    step_annotation: str | None = None,
    match: CollectiveMatch | None = None,
) -> list[BusyPanel]:
    """Small-multiple sawtooths of every rank, aligned on one step: per rank a
    :class:`BusyPanel` labelled ``rank N``, its x axis starting at the CPU start of step
    ``step_number`` on that rank, in its own trace clock (default: each rank's first step),
    busy over ``n_steps`` steps from there in ``n_buckets`` buckets: what
    ``gpuscope.web.figures.aligned_sawtooth`` draws. Ranks without that step are left out. With
    ``match`` (the run's matched collectives) each panel also has ``wait``: the fraction of each
    bucket the rank waited in collectives for the last rank (:func:`collectives.wait_in_view`)."""

    panels = []
    for rank in ranks_of(con, run_id):
        w = find_window(con, run_id, rank, step_annotation)
        bounds = w.step_bounds_ns()
        nums = [s.number for s in w.steps] or [0]
        i = nums.index(step_number) if step_number in nums else (0 if step_number is None else -1)
        if i < 0:
            continue
        j = min(len(bounds), i + max(1, n_steps)) - 1
        start, end = bounds[i][0], bounds[j][1]
        busy = busy_series(con, run_id, rank, start, end, n_buckets)
        wait = None
        if match is not None:
            dev = RankIndex.shared(con, run_id, rank).primary_device(start, end)
            wait = wait_in_view(con, run_id, rank, dev, start, end, n_buckets, match)[
                "wait_frac"
            ].to_numpy(dtype="float64")
        panels.append(BusyPanel(f"rank {rank}", busy, start, rank=rank, wait=wait))
    return panels


#: A rank-step cell is an outlier when its step time is this many robust standard deviations
#: (1.4826 x the median absolute deviation across ranks, in that step) above the step's median...
OUTLIER_Z = 3.5
#: ... and at least this much (%) above it (so that a tight spread does not flag noise).
OUTLIER_MIN_PCT = 5.0


@dataclass(frozen=True)
class RankLine:
    """One rank's line of the Run page's rank table (a row of ``RunReport.ranks``): its step time
    (ms: median, 90th percentile, slowest), GPU busy and the communication wait inside it (% of
    its window), communication-only and idle time (µs per step), and per step (step number ->
    ms) its step time and its wait in the collectives launched in that step (empty for a
    trace-wide window). None: not measured (no GPU activity: no evidence, no figure)."""

    rank: int
    step_p50_ms: float | None
    step_p90_ms: float | None
    step_max_ms: float | None
    gpu_busy_pct: float | None
    comm_wait_pct: float | None
    comm_only_us_per_step: float | None
    idle_us_per_step: float | None
    step_ms_by_step: dict[int, float]
    wait_ms_by_step: dict[int, float]

    @classmethod
    def of(cls, row: RankRow) -> RankLine:
        """The line of a rank row as the analysis builds it (a :class:`RankRow` of
        ``RunReport.ranks``)."""
        return cls(
            rank=row.rank,
            step_p50_ms=row.step_p50_ms,
            step_p90_ms=row.step_p90_ms,
            step_max_ms=row.step_max_ms,
            gpu_busy_pct=row.gpu_busy_pct,
            comm_wait_pct=row.comm_wait_pct,
            comm_only_us_per_step=row.comm_only_us_per_step,
            idle_us_per_step=row.idle_us_per_step,
            step_ms_by_step={k: float(v) for k, v in row.step_ms_by_step.items()},
            wait_ms_by_step={k: float(v or 0.0) for k, v in row.wait_ms_by_step.items()},
        )


@dataclass(frozen=True)
class RankOverview:
    """The Run page's ranks section: the rank the page shows, every rank's line (in the report's
    order) and the straggler (the rank whose late arrivals at collectives make the others wait
    longest; None with fewer than two ranks matched)."""

    rank: int
    lines: tuple[RankLine, ...]
    straggler: Straggler | None


def rank_overview(rank: int, rows: Sequence[RankRow], straggler: Straggler | None) -> RankOverview:
    """The ranks section of a report's rank, its rank rows and its straggler."""
    return RankOverview(int(rank), tuple(RankLine.of(r) for r in rows), straggler)


def rank_step_matrix(
    lines: Sequence[RankLine], nodes: Mapping[int, str] | None = None
) -> pd.DataFrame:
    """Every rank's every step from the ranks' lines (:class:`RankLine`: their step times and
    waits by step; no events), long form, ranks grouped by node then rank: ``node``, ``rank``,
    ``step``, ``step_ms``, ``wait_ms``, ``step_p50_ms`` (the step's median across ranks),
    ``outlier`` (step time above the step's median by :data:`OUTLIER_Z` robust deviations and
    :data:`OUTLIER_MIN_PCT` %). ``nodes``: rank -> node name (default: every rank on ``"?"``)."""
    rows = [
        {
            "node": (nodes or {}).get(line.rank, "?"),
            "rank": line.rank,
            "step": step,
            "step_ms": ms,
            "wait_ms": line.wait_ms_by_step.get(step, 0.0),
        }
        for line in lines
        for step, ms in line.step_ms_by_step.items()
    ]
    cols = ["node", "rank", "step", "step_ms", "wait_ms", "step_p50_ms", "outlier"]
    if not rows:
        return pd.DataFrame({c: [] for c in cols})
    m = pd.DataFrame(rows)
    g = m.groupby("step")["step_ms"]
    m["step_p50_ms"] = g.transform("median")
    mad = (m["step_ms"] - m["step_p50_ms"]).abs().groupby(m["step"]).transform("median")
    excess = m["step_ms"] - m["step_p50_ms"]
    m["outlier"] = (excess > OUTLIER_Z * 1.4826 * mad) & (
        excess > m["step_p50_ms"] * OUTLIER_MIN_PCT / 100.0
    )
    return m.sort_values(["node", "rank", "step"], kind="stable").reset_index(drop=True)[cols]


def step_spread(matrix: pd.DataFrame) -> pd.DataFrame:
    """Per step, the spread of step time across ranks: ``step``, ``ranks``, ``min_ms``,
    ``p50_ms``, ``max_ms``, ``slowest_rank``, ``wait_p50_ms`` (median wait across ranks),
    ``outliers`` (number of outlier ranks)."""
    cols = [
        "step",
        "ranks",
        "min_ms",
        "p50_ms",
        "max_ms",
        "slowest_rank",
        "wait_p50_ms",
        "outliers",
    ]
    if matrix.empty:
        return pd.DataFrame({c: [] for c in cols})
    g = matrix.groupby("step")
    out = g.agg(
        ranks=("rank", "nunique"),
        min_ms=("step_ms", "min"),
        p50_ms=("step_ms", "median"),
        max_ms=("step_ms", "max"),
        wait_p50_ms=("wait_ms", "median"),
        outliers=("outlier", "sum"),
    ).reset_index()
    slow = matrix.sort_values(["step", "step_ms", "rank"], ascending=[True, False, True])
    out["slowest_rank"] = out["step"].map(slow.drop_duplicates("step").set_index("step")["rank"])
    out["outliers"] = out["outliers"].astype("int64")
    return out[cols]


_HOST_KEYS = ("hostname", "host", "gpuscope.hostname", "node", "nodename")


def rank_nodes(con: Any, run_id: str) -> dict[int, str]:
    """Rank -> node name, from the trace metadata (``hostname``, ``host``, ``node``, ...) or the
    ``distributedInfo``; ranks whose trace names none are left out (shown as node ``?``)."""
    import json

    out: dict[int, str] = {}
    rows = con.execute(
        "SELECT rank, metadata, distributed_info FROM ranks WHERE run_id = ? ORDER BY rank",
        [run_id],
    ).fetchall()
    for rank, meta, dist in rows:
        for blob in (meta, dist):
            try:
                d = json.loads(blob) if isinstance(blob, str) else (blob or {})
            except ValueError:
                d = {}
            host = next((d[k] for k in _HOST_KEYS if isinstance(d, dict) and d.get(k)), None)
            if host:
                out[int(rank)] = str(host)
                break
    return out


def world_sizes(con: Any, run_ids: list[str] | None = None) -> dict[str, int | None]:
    """The world size each run's ranks say (``distributedInfo.world_size``; the largest; None
    when no rank says), by run id: every run with ranks, or only ``run_ids``."""
    sql = "SELECT run_id, max(world_size) FROM ranks"
    rows = (
        con.execute(f"{sql} GROUP BY run_id").fetchall()
        if run_ids is None
        else con.execute(
            f"{sql} WHERE list_contains(?, run_id) GROUP BY run_id", [list(run_ids)]
        ).fetchall()
    )
    return {str(r): (int(w) if w is not None else None) for r, w in rows}


def ranks_of_world(n_ranks: int, world_size: int | None) -> str:
    """How many ranks a run holds, as the pages and ``analyze`` say it: ``2`` when it holds
    every rank its traces' world size names (or none is named), ``1 of 2`` when fewer (nodes
    still to report: ``gpuscope ingest --job`` adds them)."""
    n = int(n_ranks)
    if world_size is not None and int(world_size) > n:
        return f"{n} of {int(world_size)}"
    return str(n)


def ranks_label(n_ranks: int, world_size: int | None) -> str:
    """:func:`ranks_of_world` with its noun: ``1 rank``, ``2 ranks``, ``1 of 2 ranks``."""
    text = ranks_of_world(n_ranks, world_size)
    plural = int(world_size or 0) > 1 if " of " in text else int(n_ranks) != 1
    return f"{text} rank{'s' if plural else ''}"
