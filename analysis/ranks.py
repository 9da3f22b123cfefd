"""Many ranks: a table of every rank's headline figures; the straggler is matched.

In a synchronous job (DDP, FSDP) every rank's step is as long as the slowest one's: the others
wait for it inside collectives. The straggler is found by matching every collective across ranks
(:mod:`gpuscope.analysis.collectives`): the rank whose late arrivals make the others wait longest in
total, with the steps and phases where it happens (it replaces the earlier aggregate, the rank with
the least communication-only time, which missed a straggler that moves between ranks or only shows
in one phase). docs/metrics.md, "Collectives across ranks".
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from gpuscope.analysis.busy import busy_series
from gpuscope.analysis.collectives import CollectiveMatch, Straggler, wait_in_view
from gpuscope.analysis.idle import CAUSES
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.steps import find_window
from gpuscope.analysis.store_access import ranks_of

__all__ = ["Straggler", "rank_busy_panels", "rank_table"]


def rank_table(ranks: list[dict[str, Any]]) -> pd.DataFrame:
    """The rank rows of a report (``RunReport.ranks``) as a DataFrame, one row per rank: ``rank``,
    ``step_time_ms``, ``gpu_busy_pct``, ``comm_only_ms_per_step``, ``idle_ms_per_step``,
    ``comm_wait_pct`` (% of the window), ``comm_wait_ms_per_step``, ``step_p50_ms``/``p90``/``max``
    and ``idle_<cause>_ms_per_step`` for every cause (ms per step; NaN where not computed)."""
    rows = []
    for r in ranks:
        row: dict[str, Any] = {
            "rank": r["rank"],
            "step_time_ms": r.get("step_time_ms"),
            "gpu_busy_pct": r.get("gpu_busy_pct"),
            "comm_only_ms_per_step": (r.get("comm_only_us_per_step") or 0.0) / 1e3,
            "idle_ms_per_step": _ms(r.get("idle_us_per_step")),
            "comm_wait_pct": r.get("comm_wait_pct"),
            "comm_wait_ms_per_step": _ms(r.get("comm_wait_us_per_step")),
            "step_p50_ms": r.get("step_p50_ms"),
            "step_p90_ms": r.get("step_p90_ms"),
            "step_max_ms": r.get("step_max_ms"),
        }
        by = r.get("idle_by_cause_us_per_step") or {}
        for c in CAUSES:
            row[f"idle_{c}_ms_per_step"] = _ms(by.get(c))
        rows.append(row)
    return pd.DataFrame(rows).sort_values("rank").reset_index(drop=True)


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1e3


def rank_busy_panels(
    con: Any,
    run_id: str,
    *,
    step_number: int | None = None,
    n_steps: int = 3,
    n_buckets: int = 300,
    step_annotation: str | None = None,
    match: CollectiveMatch | None = None,
) -> list[dict[str, Any]]:
    """Small-multiple sawtooths of every rank, aligned on one step: per rank a dict with
    ``label``, ``rank``, ``origin_ns`` (the CPU start of step ``step_number`` on that rank, in its
    own trace clock; default: each rank's first step) and ``busy`` (:func:`busy.busy_series` over
    ``n_steps`` steps from there, ``n_buckets`` buckets): what
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
        panels.append(
            {
                "label": f"rank {rank}",
                "rank": rank,
                "origin_ns": start,
                "busy": busy_series(con, run_id, rank, start, end, n_buckets),
            }
        )
        if match is not None:
            dev = RankIndex.shared(con, run_id, rank).primary_device(start, end)
            panels[-1]["wait"] = wait_in_view(con, run_id, rank, dev, start, end, n_buckets, match)[
                "wait_frac"
            ].to_numpy(dtype="float64")
    return panels
