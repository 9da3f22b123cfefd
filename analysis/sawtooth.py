"""What the busy-over-time plot (the "sawtooth") shows, as plain data: the analysed window and its
steps, GPU busy per time bucket (with its min-max envelope), the GPU activities of a zoomed range,
and idle time by cause, whole gaps or shares per bucket.

The dashboard draws these; it computes none of them. Times are integer ns of trace time (the rank's
own clock), shares are fractions 0..1 (busy) or % (idle by cause). GPU activity is what
:mod:`gpuscope.analysis.busy` says it is (:func:`~gpuscope.analysis.busy.activity_sql`); buckets
are those of :func:`~gpuscope.analysis.busy.busy_series`: ``[start + d*i//n, start + d*(i+1)//n)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from gpuscope.analysis.busy import busy_series, device_activity, primary_device
from gpuscope.analysis.idle import CAUSES
from gpuscope.analysis.idle import idle_gaps as _idle_gaps
from gpuscope.analysis.kernels import classify_kernel
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.ranks import BusyPanel, rank_busy_panels
from gpuscope.analysis.steps import Window, find_window, step_frame
from gpuscope.analysis.store_access import execute

if TYPE_CHECKING:
    from gpuscope.store import Connection

__all__ = [
    "CAUSES",
    "BusyPanel",
    "WindowView",
    "activities_in_range",
    "activity_count",
    "bucket_edges",
    "busy_envelope",
    "busy_series",
    "cause_columns",
    "cause_segments",
    "fold_envelope",
    "gaps_in_view",
    "idle_gaps",
    "idle_shares",
    "idle_shares_in_view",
    "primary_device",
    "rank_busy_panels",
    "window_view",
]


@dataclass(frozen=True)
class WindowView:
    """The analysed window of one rank: ``[start_ns, end_ns)``, where it comes from (``source``:
    ``ProfilerStep``, ``annotation`` or ``trace``), its ``steps`` (``number``, ``start_ns``,
    ``end_ns``, ``duration_ns``; the bounds tile the window) and the ``window`` itself."""

    start_ns: int
    end_ns: int
    source: str
    steps: pd.DataFrame
    window: Window


def window_view(con: Connection, run_id: str, rank: int) -> WindowView:
    """The window :func:`~gpuscope.analysis.steps.find_window` picks for the rank, with its steps."""
    w = find_window(con, run_id, rank)
    frame = step_frame(w)[["number", "start_ns", "end_ns", "duration_ns"]]
    return WindowView(int(w.start_ns), int(w.end_ns), str(w.source), frame, w)


# -- GPU activity of a range -------------------------------------------------------------------------


def activity_count(
    con: Connection,
    run_id: str,
    rank: int,
    device: int | None,
    start_ns: int,
    end_ns: int,
) -> int:
    """How many GPU activities (kernels, copies, memsets) of ``device`` (None: every device)
    overlap ``[start_ns, end_ns)``."""
    activity, p = device_activity(RankIndex.shared(con, run_id, rank), start_ns, end_ns, device)
    row = execute(con, f"SELECT count(*) FROM ({activity})", p).fetchone()
    return int(row[0]) if row else 0


def activities_in_range(
    con: Connection,
    run_id: str,
    rank: int,
    device: int | None,
    start_ns: int,
    end_ns: int,
    limit: int,
) -> pd.DataFrame:
    """The first ``limit`` GPU activities of ``device`` overlapping ``[start_ns, end_ns)``, by
    start, clipped to it: ``start_ns``, ``end_ns``, ``name``, ``cat``, ``stream`` and ``category``
    (:func:`~gpuscope.analysis.kernels.classify_kernel`)."""
    activity, p = device_activity(RankIndex.shared(con, run_id, rank), start_ns, end_ns, device)
    sql = f"""SELECT a.s AS start_ns, a.e AS end_ns, n.name, a.cat, a.stream
              FROM ({activity}) a JOIN names n ON n.run_id = $run AND n.name_id = a.name_id
              ORDER BY a.s, a.e, a.stream LIMIT $lim"""
    p["lim"] = int(limit)
    df = execute(con, sql, p).df()
    df["category"] = pd.Series(
        [classify_kernel(str(n), str(c)) for n, c in zip(df["name"], df["cat"], strict=True)],
        index=df.index,
        dtype="object",
    )
    return df


# -- busy per bucket ---------------------------------------------------------------------------------


def bucket_edges(start_ns: int, end_ns: int, n: int) -> np.ndarray:
    """The ``n + 1`` integer bucket bounds of ``[start_ns, end_ns)``, those of ``busy_series``."""
    return int(start_ns) + (np.arange(n + 1, dtype="int64") * (int(end_ns) - int(start_ns))) // n


def fold_envelope(busy_fine: pd.DataFrame, n: int) -> pd.DataFrame:
    """``busy_fine`` (``n × k`` equal sub-buckets: ``start_ns``, ``end_ns``, ``busy_frac``) folded
    into ``n`` buckets: ``start_ns``, ``end_ns``, ``busy_frac`` (the exact busy fraction of the
    bucket: the length-weighted mean), ``busy_min``, ``busy_max`` (the extremes of its
    sub-buckets), fractions 0..1. When the rows do not split into ``n`` equal groups, each row is its
    own bucket (min = max = its fraction)."""
    m = len(busy_fine)
    if m == 0 or n <= 0 or m % n:
        return busy_fine.assign(busy_min=busy_fine["busy_frac"], busy_max=busy_fine["busy_frac"])
    k = m // n
    f = busy_fine["busy_frac"].to_numpy(dtype="float64").reshape(n, k)
    w = (busy_fine["end_ns"].to_numpy() - busy_fine["start_ns"].to_numpy()).astype("float64")
    w = w.reshape(n, k)
    mean = np.where(w.sum(axis=1) > 0, (f * w).sum(axis=1) / np.maximum(w.sum(axis=1), 1), 0.0)
    return pd.DataFrame(
        {
            "start_ns": busy_fine["start_ns"].to_numpy()[::k],
            "end_ns": busy_fine["end_ns"].to_numpy()[k - 1 :: k],
            "busy_frac": mean,
            "busy_min": f.min(axis=1),
            "busy_max": f.max(axis=1),
        }
    )


def busy_envelope(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    n_buckets: int,
    sub: int,
    *,
    device: int | None = None,
) -> pd.DataFrame:
    """Busy fraction of ``device`` in ``n_buckets`` buckets of ``[start_ns, end_ns)`` with the
    lowest and highest busy fraction of ``sub`` equal sub-buckets inside each (see
    :func:`fold_envelope`)."""
    fine = busy_series(con, run_id, rank, start_ns, end_ns, n_buckets * max(1, sub), device=device)
    return fold_envelope(fine, n_buckets)


# -- idle time by cause ------------------------------------------------------------------------------


def idle_gaps(
    con: Connection,
    run_id: str,
    rank: int,
    window: Window,
    device: int | None,
) -> pd.DataFrame:
    """Every idle gap of ``device`` in ``window``, without evidence: ``start_ns``, ``end_ns``,
    ``cause`` (the dominant one) and one ``<cause>_ns`` column per cause, in precedence order."""
    gaps = _idle_gaps(con, run_id, rank, window, device=device, evidence=False)
    keep = ["start_ns", "end_ns", "cause", *(f"{c}_ns" for c in CAUSES)]
    return gaps[[c for c in keep if c in gaps.columns]].reset_index(drop=True)


def cause_columns(gaps: pd.DataFrame) -> list[str]:
    """The per-cause ns columns of a gaps frame, in the analysis's precedence order."""
    return [f"{c}_ns" for c in CAUSES if f"{c}_ns" in gaps.columns]


def _overlapping(gaps: pd.DataFrame, start_ns: int, end_ns: int) -> pd.DataFrame:
    return gaps[(gaps["end_ns"] > start_ns) & (gaps["start_ns"] < end_ns)]


def _clip(gaps: pd.DataFrame, start_ns: int, end_ns: int) -> pd.DataFrame:
    return gaps.assign(
        start_ns=np.maximum(gaps["start_ns"], start_ns), end_ns=np.minimum(gaps["end_ns"], end_ns)
    )


def gaps_in_view(gaps: pd.DataFrame, start_ns: int, end_ns: int) -> pd.DataFrame:
    """The gaps overlapping ``[start_ns, end_ns)``, clipped to it; their ``cause`` (dominant) and
    ``<cause>_ns`` columns are the whole gap's (what a hover on the gap says)."""
    return _clip(_overlapping(gaps, start_ns, end_ns), start_ns, end_ns).reset_index(drop=True)


def cause_segments(gaps: pd.DataFrame, cause_cols: Sequence[str]) -> pd.DataFrame:
    """Lay each gap's per-cause time (``<cause>_ns`` columns) end to end from its start, in the
    given (precedence) order: ``start_ns``, ``end_ns``, ``cause`` segments whose lengths are exact
    per cause (positions inside a gap are nominal). Without cause columns: the gaps as they are."""
    if gaps.empty or not cause_cols:
        return gaps[["start_ns", "end_ns", "cause"]] if "cause" in gaps else gaps
    start = gaps["start_ns"].to_numpy(dtype="int64")
    parts = np.stack([gaps[c].fillna(0).to_numpy(dtype="int64") for c in cause_cols], axis=1)
    ends = start[:, None] + np.cumsum(parts, axis=1)
    begins = ends - parts
    keep = parts > 0
    names = np.array([c.removesuffix("_ns") for c in cause_cols], dtype=object)
    return pd.DataFrame(
        {
            "start_ns": begins[keep],
            "end_ns": ends[keep],
            "cause": np.broadcast_to(names, parts.shape)[keep],
        }
    )


def idle_shares(
    segments: pd.DataFrame, edges_ns: Sequence[int] | np.ndarray
) -> dict[str, np.ndarray]:
    """For each cause, the % of each bucket ``[edges[i], edges[i+1])`` covered by its segments
    (``start_ns``, ``end_ns``, ``cause``; the segments of one cause must not overlap).

    Exact: the covered length is a piecewise-linear cumulative function evaluated at the edges, so
    a segment shorter than a bucket still counts for its length."""
    edges = np.asarray(edges_ns, dtype="float64")
    width = np.diff(edges)
    out: dict[str, np.ndarray] = {}
    if segments.empty or edges.size < 2:
        return out
    for cause, g in segments.groupby("cause", sort=True):
        s = g["start_ns"].to_numpy(dtype="float64")
        e = g["end_ns"].to_numpy(dtype="float64")
        order = np.argsort(s)
        s, e = s[order], e[order]
        dur = np.clip(e - s, 0, None)
        before = np.concatenate([[0.0], np.cumsum(dur)])  # covered length before segment k
        k = np.searchsorted(s, edges, side="right") - 1  # last segment starting at or before t
        kk = np.clip(k, 0, None)
        cov = np.where(k >= 0, before[kk] + np.clip(edges - s[kk], 0, dur[kk]), 0.0)
        share = np.where(width > 0, np.diff(cov) / np.where(width > 0, width, 1), 0.0) * 100.0
        out[str(cause)] = np.clip(share, 0, 100)
    return out


def idle_shares_in_view(
    gaps: pd.DataFrame, start_ns: int, end_ns: int, n_buckets: int
) -> dict[str, np.ndarray]:
    """Idle % per cause in each of the ``n_buckets`` buckets of ``[start_ns, end_ns)`` (the buckets
    of ``busy_series``), from the gaps' per-cause time (:func:`cause_segments`)."""
    near = _overlapping(gaps, start_ns, end_ns)
    segments = gaps_in_view(cause_segments(near, cause_columns(near)), start_ns, end_ns)
    return idle_shares(segments, bucket_edges(start_ns, end_ns, n_buckets))
