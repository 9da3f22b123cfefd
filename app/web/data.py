"""The app's calls into ``gpuscope.analysis``, cached per (store, run, rank).

``app/`` is presentation only: every number shown comes from ``gpuscope.analysis``. Runs are
content-addressed (the same files give the same run id), so an analysis result stays valid for as
long as its run exists; pages check existence through ``db`` (keyed by the store's generation).
A function that ``gpuscope.analysis`` does not provide raises :class:`AnalysisUnavailable`, which
pages show as a notice naming the function instead of failing.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st
from gpuscope.web import db

log = logging.getLogger("gpuscope.web")


class AnalysisUnavailable(RuntimeError):
    """``gpuscope.analysis.<module>.<name>`` is missing (still being written)."""


def analysis_fn(module: str, name: str) -> Callable[..., Any]:
    try:
        mod = importlib.import_module(f"gpuscope.analysis.{module}")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("gpuscope.analysis"):
            raise AnalysisUnavailable(f"gpuscope.analysis.{module} is not available") from None
        raise
    except ImportError as e:  # a module mid-change that does not import: say so, do not crash
        raise AnalysisUnavailable(f"gpuscope.analysis.{module} does not import ({e})") from None
    fn = getattr(mod, name, None)
    if fn is None:
        raise AnalysisUnavailable(f"gpuscope.analysis.{module}.{name} is not available")
    return fn


def _jsonable(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "to_json"):
        out = obj.to_json()
    elif hasattr(obj, "as_dict"):
        out = obj.as_dict()
    else:
        out = obj
    if isinstance(out, str):
        import json

        out = json.loads(out)
    return dict(out)


def _rank(run_id: str, rank: int | None) -> int | None:
    if rank is not None:
        return int(rank)
    ranks = db.ranks_of(db.db_path(), db.generation(), run_id)
    return ranks[0] if ranks else None


@st.cache_resource(show_spinner=False, max_entries=24)
def report_obj(path: str, run_id: str, rank: int | None) -> Any:
    """``analyze_run(con, run_id, rank=rank)``: the report object, shared by every session."""
    fn = analysis_fn("report", "analyze_run")
    return fn(db.cursor(), run_id, rank=rank)


@st.cache_data(show_spinner=False, max_entries=64)
def _report_json(path: str, run_id: str, rank: int | None) -> dict[str, Any]:
    return _jsonable(report_obj(path, run_id, rank))


def report(path: str, run_id: str, rank: int | None) -> dict[str, Any]:
    """``analyze_run(con, run_id, rank=rank).to_json()`` (rank None: the run's lowest rank)."""
    return _report_json(path, run_id, _rank(run_id, rank))


@st.cache_data(show_spinner=False, max_entries=32)
def _comparison_json(path: str, a: str, ra: int | None, b: str, rb: int | None) -> dict[str, Any]:
    try:
        fn = analysis_fn("compare", "compare_reports")
    except AnalysisUnavailable:
        return _jsonable(analysis_fn("report", "compare_runs")(db.cursor(), a, b))
    return _jsonable(fn(report_obj(path, a, ra), report_obj(path, b, rb)))


def comparison(path: str, a: str, b: str) -> dict[str, Any]:
    """``compare_reports`` of the two runs' (lowest-rank) reports, as plain data."""
    return _comparison_json(path, a, _rank(a, None), b, _rank(b, None))


def summary(run_id: str) -> dict[str, float | None]:
    """Step time (ms) and GPU busy % of the rank that sets the pace (the straggler, else the least
    busy rank), its rank, and MFU % of the run, for the runs list (None when unknown)."""
    try:
        return dict(_summary(db.db_path(), run_id))
    except Exception:  # one broken run must not break the list: its row says "—", the log why
        log.exception("runs list: run %s could not be analysed", run_id)
        return {"step_ms": None, "busy_pct": None, "mfu_pct": None, "rank": None, "failed": True}


@st.cache_data(show_spinner=False, max_entries=4096)
def _summary(path: str, run_id: str) -> dict[str, float | None]:
    """:func:`summary` of one run, kept for as long as the server runs (a run's content never
    changes): the runs list asks for every run on every rerun, more runs than the report caches
    hold. A failure raises, so it is not kept."""
    r = report(path, run_id, None)
    pace = analysis_fn("ranks", "slowest_rank_figures")(r)
    return {
        "step_ms": _num(pace.get("step_ms")),
        "busy_pct": _num(pace.get("busy_pct")),
        "mfu_pct": _num(r.get("mfu_pct")),
        "rank": pace.get("rank"),
    }


@st.cache_data(show_spinner=False, max_entries=16)
def rank_panels(path: str, gen: int, run_id: str) -> list[dict[str, Any]]:
    """Every rank's busy series over three steps, aligned on each rank's first step
    (``analysis.ranks.rank_busy_panels``), for the Run page's small multiples."""
    return analysis_fn("ranks", "rank_busy_panels")(db.cursor(), run_id)


def _num(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _get(d: dict[str, Any] | None, *keys: str) -> float | None:
    cur: Any = d
    for k in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    return _num(cur)


# -- the sawtooth's inputs ---------------------------------------------------------------------------


@st.cache_data(show_spinner=False, max_entries=64)
def window_obj(path: str, run_id: str, rank: int) -> Any:
    """``steps.find_window``: the analysed window of one rank (a ``Window``)."""
    return analysis_fn("steps", "find_window")(db.cursor(), run_id, rank)


def window(path: str, run_id: str, rank: int) -> dict[str, Any]:
    """The window as plain data: ``start_ns``, ``end_ns`` (trace ns), ``source`` and ``steps``
    (DataFrame: ``number``, ``start_ns``, ``end_ns``, ``duration_ns``)."""
    w = window_obj(path, run_id, rank)
    frame = analysis_fn("steps", "step_frame")(w)
    return {
        "start_ns": int(w.start_ns),
        "end_ns": int(w.end_ns),
        "source": str(w.source),
        "steps": frame[["number", "start_ns", "end_ns", "duration_ns"]],
    }


@st.cache_data(show_spinner=False, max_entries=64)
def primary_device(path: str, run_id: str, rank: int, start_ns: int, end_ns: int) -> int | None:
    fn = analysis_fn("busy", "primary_device")
    return fn(db.cursor(), run_id, rank, start_ns, end_ns)


@st.cache_data(show_spinner=False, max_entries=256)
def busy(
    path: str,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    n_buckets: int,
    device: int | None,
) -> pd.DataFrame:
    """``busy_series``: busy fraction per bucket, computed in DuckDB."""
    fn = analysis_fn("busy", "busy_series")
    return fn(db.cursor(), run_id, rank, start_ns, end_ns, n_buckets, device=device)


@st.cache_data(show_spinner=False, max_entries=32)
def idle_gaps(path: str, run_id: str, rank: int, device: int | None) -> pd.DataFrame:
    """Every idle gap of the rank's window (``idle.idle_gaps``, no evidence): ``start_ns``,
    ``end_ns``, ``cause`` (dominant) and one ``<cause>_ns`` column per cause."""
    fn = analysis_fn("idle", "idle_gaps")
    w = window_obj(path, run_id, rank)
    gaps = fn(db.cursor(), run_id, rank, w, device=device, evidence=False)
    causes = [f"{c}_ns" for c in analysis_fn("idle", "CAUSES")]  # type: ignore[union-attr]
    keep = ["start_ns", "end_ns", "cause", *causes]
    return gaps[[c for c in dict.fromkeys(keep) if c in gaps.columns]].reset_index(drop=True)


def cause_columns(gaps: pd.DataFrame) -> list[str]:
    """The per-cause ns columns of a gaps frame, in the analysis's precedence order."""
    try:
        causes = list(analysis_fn("idle", "CAUSES"))  # type: ignore[arg-type]
    except AnalysisUnavailable:
        causes = []
    cols = [f"{c}_ns" for c in causes if f"{c}_ns" in gaps.columns]
    return cols


@st.cache_data(show_spinner=False, max_entries=256)
def kernel_count(
    path: str, run_id: str, rank: int, device: int | None, start_ns: int, end_ns: int
) -> int:
    """GPU activities (kernels, copies, sets) of the device overlapping the range."""
    from gpuscope.analysis.store_access import GPU_CATS_SQL

    dev_cond = "" if device is None else "AND coalesce(device, CAST(pid AS INTEGER)) = $dev"
    row = (
        db.cursor()
        .execute(
            f"""SELECT count(*) FROM events WHERE run_id = $run AND rank = $rank AND ph = 'X'
            AND cat IN {GPU_CATS_SQL} AND dur_ns > 0 AND ts_ns < $we AND ts_ns + dur_ns > $ws {dev_cond}""",
            {
                "run": run_id,
                "rank": rank,
                "ws": start_ns,
                "we": end_ns,
                **({"dev": device} if device is not None else {}),
            },
        )
        .fetchone()
    )
    return int(row[0]) if row else 0


@st.cache_data(show_spinner=False, max_entries=64)
def kernels_in_range(
    path: str, run_id: str, rank: int, device: int | None, start_ns: int, end_ns: int, limit: int
) -> pd.DataFrame:
    """Each GPU activity overlapping the range (clipped): ``start_ns``, ``end_ns``, ``name``, ``category``."""
    from gpuscope.analysis.store_access import GPU_CATS_SQL

    dev_cond = "" if device is None else "AND coalesce(e.device, CAST(e.pid AS INTEGER)) = $dev"
    df = (
        db.cursor()
        .execute(
            f"""SELECT greatest(e.ts_ns, $ws) AS start_ns, least(e.ts_ns + e.dur_ns, $we) AS end_ns,
                   n.name, e.cat, e.stream
            FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
            WHERE e.run_id = $run AND e.rank = $rank AND e.ph = 'X' AND e.cat IN {GPU_CATS_SQL}
              AND e.dur_ns > 0 AND e.ts_ns < $we AND e.ts_ns + e.dur_ns > $ws {dev_cond}
            ORDER BY start_ns LIMIT $lim""",
            {
                "run": run_id,
                "rank": rank,
                "ws": start_ns,
                "we": end_ns,
                "lim": limit,
                **({"dev": device} if device is not None else {}),
            },
        )
        .df()
    )
    df["category"] = categorize(df["name"], df["cat"])
    return df


def categorize(names: pd.Series, cats: pd.Series) -> pd.Series:
    """Kernel categories from ``gpuscope.analysis.kernels.classify_kernel``, else by event class."""
    try:
        fn = analysis_fn("kernels", "classify_kernel")
    except AnalysisUnavailable:
        return (
            cats.astype(str)
            .str.lower()
            .map(lambda c: "copy_memset" if ("memcpy" in c or "memset" in c) else "kernel")
        )
    return pd.Series(
        [str(fn(str(n), str(c))) for n, c in zip(names, cats, strict=True)],
        index=names.index,
        dtype="object",
    )


@st.cache_data(show_spinner=False, max_entries=64)
def nvml_overlay(
    path: str, run_id: str, gpu: int | None, start_abs_ns: int, end_abs_ns: int, n_buckets: int
) -> pd.DataFrame:
    """``gpu_util_pct`` of one GPU in the range (absolute ns) and the last sample before it,
    averaged per bucket in DuckDB when there are more than ``n_buckets``: ``t_ns`` (absolute),
    ``gpu_util_pct``."""
    cur = db.cursor()
    gpus = [
        int(r[0])
        for r in cur.execute(
            "SELECT DISTINCT gpu FROM nvml_samples WHERE run_id = ? ORDER BY gpu", [run_id]
        ).fetchall()
    ]
    if not gpus:
        return pd.DataFrame(
            {"t_ns": pd.array([], dtype="int64"), "gpu_util_pct": pd.array([], dtype="float64")}
        )
    g = gpu if gpu in gpus else gpus[0]
    p = {"run": run_id, "gpu": g, "lo": start_abs_ns, "hi": end_abs_ns, "n": max(1, n_buckets)}
    # plus the last sample before the range: it holds until the next one, so a zoom between
    # two samples (100 ms apart) still shows the utilisation of that moment
    return cur.execute(
        """
        WITH prev AS (SELECT max(t_ns) AS t FROM nvml_samples
                      WHERE run_id = $run AND gpu = $gpu AND t_ns < $lo
                        AND gpu_util_pct IS NOT NULL),
             s AS (SELECT t_ns, gpu_util_pct FROM nvml_samples, prev
                   WHERE run_id = $run AND gpu = $gpu AND t_ns >= coalesce(prev.t, $lo)
                     AND t_ns <= $hi AND gpu_util_pct IS NOT NULL),
             c AS (SELECT count(*) AS k FROM s)
        SELECT t_ns, gpu_util_pct FROM s, c WHERE c.k <= $n
        UNION ALL
        SELECT CAST(min(t_ns) AS BIGINT) AS t_ns, avg(gpu_util_pct) AS gpu_util_pct FROM s, c
        WHERE c.k > $n
        GROUP BY CAST((CAST(t_ns - $lo AS DOUBLE) * $n) // ($hi - $lo + 1) AS BIGINT)
        ORDER BY t_ns
        """,
        p,
    ).df()


@st.cache_data(show_spinner=False, max_entries=32)
def nvml_samples(path: str, run_id: str, max_points: int = 4000) -> pd.DataFrame:
    """Every NVML sample of a run (an NVML-only run), thinned evenly to at most ``max_points`` per GPU."""
    return (
        db.cursor()
        .execute(
            """SELECT * EXCLUDE (rn, k) FROM (
             SELECT *, row_number() OVER (PARTITION BY gpu ORDER BY t_ns) AS rn,
                    count(*) OVER (PARTITION BY gpu) AS k
             FROM nvml_samples WHERE run_id = $run)
           WHERE k <= $m OR rn % CAST(ceil(k / $m) AS BIGINT) = 0 ORDER BY t_ns, gpu""",
            {"run": run_id, "m": max_points},
        )
        .df()
    )
