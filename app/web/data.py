"""The pages' data: Streamlit-cached calls of the analysis facade, per (store, run, rank).

``app/`` is presentation only: every number shown is computed by ``gpuscope.analysis`` (the facade
modules ``run_views``, ``sawtooth``, ``nvml_run`` and ``compare``); nothing here queries the store
or computes. Runs are content-addressed (the same files give the same run id), so an analysis result
stays valid for as long as its run exists; pages check existence through ``db`` (keyed by the
store's generation).
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pandas as pd
import streamlit as st
from gpuscope.analysis import compare, nvml_run, run_views, sawtooth
from gpuscope.web import db

log = logging.getLogger("gpuscope.web")


def _rank(run_id: str, rank: int | None) -> int | None:
    if rank is not None:
        return int(rank)
    ranks = db.ranks_of(db.db_path(), db.generation(), run_id)
    return ranks[0] if ranks else None


class Facade:
    """One (run, rank)'s analysis facade (``run_views.open_analysis``: each analysis computed once,
    on first use) and the reports read from it, shared by every session: the report without the
    critical path (the cards, first), then with it (the fixes' estimates, the path section), from
    the same analyses. A lock serialises its reads: the facade's connection is the cursor of the
    thread that made it (its rank indexes live there), used by one thread at a time."""

    def __init__(self, run_id: str, rank: int | None) -> None:
        self.analysis = run_views.open_analysis(db.cursor(), run_id, rank)
        self._lock = threading.Lock()
        self._reports: dict[bool, run_views.RunReport] = {}

    def report(self, *, with_path: bool) -> run_views.RunReport:
        """The report, with or without the critical path (each read once)."""
        with self._lock:
            if with_path not in self._reports:
                self._reports[with_path] = run_views.report_of(self.analysis, with_path=with_path)
            return self._reports[with_path]


@st.cache_resource(show_spinner=False, max_entries=24)
def _facade(path: str, gen: int, run_id: str, rank: int | None) -> Facade:
    return Facade(run_id, rank)


def facade(path: str, run_id: str, rank: int | None) -> Facade:
    """The analysis facade of (run, rank), one per store generation (:class:`Facade`)."""
    return _facade(path, db.generation(), run_id, rank)


def report_obj(path: str, run_id: str, rank: int | None) -> run_views.RunReport:
    """The report of (run, rank) without the critical path (seconds on large windows: it is left
    to the sections below the fold), from the shared facade."""
    return facade(path, run_id, rank).report(with_path=False)


def path_report(path: str, run_id: str, rank: int | None) -> run_views.RunReport:
    """The report of (run, rank) with the critical path and the fixes' estimates, from the same
    facade as :func:`report_obj` (the analyses it holds are not computed again)."""
    return facade(path, run_id, rank).report(with_path=True)


def run_report(path: str, run_id: str, rank: int | None) -> run_views.RunReport:
    """:func:`report_obj` of (run, rank) (rank None: the run's lowest rank): the report the page
    models below are built from."""
    return report_obj(path, run_id, _rank(run_id, rank))


def critical_path(path: str, run_id: str, rank: int | None) -> run_views.PathSection:
    """The Run page's critical-path section of (run, rank) (``run_views.critical_path_section``
    of the report with the path: each step's path and the fixes' estimates)."""
    return run_views.critical_path_section(path_report(path, run_id, _rank(run_id, rank)))


@st.cache_resource(show_spinner=False, max_entries=24)
def _job(path: str, gen: int, run_id: str) -> run_views.JobDiagnosis:
    # the pace-setter's report with the critical path: its fixes ordered by their estimates, as
    # every other face orders them
    return run_views.diagnose(db.cursor(), run_id, lambda r: path_report(path, run_id, r))


def job(path: str, run_id: str) -> run_views.JobDiagnosis:
    """The job's verdict of a run (``run_views.diagnose``), built once per run and store
    generation from the cached reports (:func:`report_obj`: the pace-setter's, shared with the
    Run page when it shows that rank)."""
    return _job(path, db.generation(), run_id)


def headline(path: str, run_id: str, rank: int | None) -> run_views.Headline:
    """The Run page's headline cards of (run, rank) under the job's verdict
    (``run_views.headline``)."""
    return run_views.headline(report_obj(path, run_id, _rank(run_id, rank)), job(path, run_id))


def banners(path: str, run_id: str, rank: int | None) -> run_views.Banners:
    """The Run page's warnings and profiler note of (run, rank) (``run_views.banners``)."""
    return run_views.banners(report_obj(path, run_id, _rank(run_id, rank)))


def breakdowns(path: str, run_id: str, rank: int | None) -> run_views.Breakdowns:
    """The Run page's breakdowns of (run, rank) (``run_views.breakdowns``)."""
    return run_views.breakdowns(report_obj(path, run_id, _rank(run_id, rank)))


def top_kernels(path: str, run_id: str, rank: int | None) -> run_views.TopKernels:
    """The Run page's top kernels of (run, rank) (``run_views.top_kernels``)."""
    return run_views.top_kernels(report_obj(path, run_id, _rank(run_id, rank)))


def fixes(path: str, run_id: str, rank: int | None) -> list[run_views.Recommendation]:
    """The fixes of (run, rank), each with its estimate re-timed on the critical path, the largest
    estimate first (the analysis's order: the same in every face)."""
    return list(path_report(path, run_id, _rank(run_id, rank)).recommendations)


def rank_overview(path: str, run_id: str, rank: int | None) -> run_views.RankOverview:
    """The Run page's ranks section of (run, rank) (``run_views.rank_overview``)."""
    return run_views.rank_overview(run_report(path, run_id, rank))


def roofline(path: str, run_id: str, rank: int | None) -> run_views.RooflineView | None:
    """The Run page's roofline section of (run, rank) (``run_views.roofline``)."""
    return run_views.roofline(run_report(path, run_id, rank))


def modules(path: str, run_id: str, rank: int | None) -> run_views.ModulesView | None:
    """The Run page's modules section of (run, rank) (``run_views.modules``)."""
    return run_views.modules(run_report(path, run_id, rank))


def compared_rank(path: str, run_id: str) -> int | None:
    """The rank a run is compared by: its job's pace-setter (``fix_rank``, the rank the job's
    fixes are for); None for a run without ranks."""
    if _rank(run_id, None) is None:
        return None
    return job(path, run_id).fix_rank


def compared_report(path: str, run_id: str) -> run_views.RunReport:
    """The report of the rank a run is compared by (:func:`compared_rank`)."""
    return report_obj(path, run_id, compared_rank(path, run_id))


@st.cache_resource(show_spinner=False, max_entries=32)
def _compare_view(path: str, gen: int, a: str, b: str) -> compare.CompareView:
    return compare.compare_view(
        compared_report(path, a), compared_report(path, b), jobs=(job(path, a), job(path, b))
    )


def comparison(path: str, a: str, b: str) -> compare.CompareView:
    """Everything the Compare page shows of the two runs as jobs (``compare.compare_view`` with
    their verdicts: the jobs' figures and fixes, each pace-setter's report for the rest), once
    per store generation."""
    return _compare_view(path, db.generation(), a, b)


# The runs list's figures of each run, kept for as long as the server runs (a run's content never
# changes): (store, run id) -> figures. A dict rather than st.cache_data so that the Runs page can
# ask which runs are known without computing the others (it computes a few per script run).
_summaries: dict[tuple[str, str], run_views.RunSummary] = {}
_summaries_lock = threading.Lock()
MAX_SUMMARIES = 4096
SUMMARY_BUDGET_S = 0.3  # the Runs page's time for runs new to this server, per script run (s)
#: The runs list's figures of a run that has none: an NVML series, a run still to be analysed, or
#: one whose analysis failed (:func:`failed`).
NO_FIGURES = run_views.RunSummary(rank=None, step_ms=None, busy_pct=None, mfu_pct=None)


# Runs whose analysis failed: (store, run id) -> the store generation it failed at. Tried again
# once anything is committed (or the store is reopened after a fault), not on every rerun.
_failures: dict[tuple[str, str], int] = {}


def failed(run_id: str) -> bool:
    """Whether the run's analysis failed at this store generation (its figures are
    :data:`NO_FIGURES`; tried again after the store's next commit)."""
    key = (db.db_path(), run_id)
    with _summaries_lock:
        failed_at = _failures.get(key)
    return failed_at is not None and failed_at == db.generation()


def known_summary(run_id: str) -> run_views.RunSummary | None:
    """The runs list's figures of a run if this server has computed them (:data:`NO_FIGURES` if
    its analysis failed at this store generation), else None. Instant."""
    with _summaries_lock:
        known = _summaries.get((db.db_path(), run_id))
    if known is not None:
        return known
    return NO_FIGURES if failed(run_id) else None


def summary(run_id: str) -> run_views.RunSummary:
    """The runs list's figures of a run (``run_views.run_summary`` of its job's verdict: job step
    time, pace-setter, busy, wait, MFU); :data:`NO_FIGURES` when the run cannot be analysed
    (:func:`failed` says so; tried again after the store's next commit)."""
    key = (db.db_path(), run_id)
    known = known_summary(run_id)
    if known is not None:
        return known
    try:
        stored = run_views.stored_run_summary(db.cursor(), run_id)  # no events read
        figures = stored if stored is not None else run_views.run_summary(job(key[0], run_id))
    except Exception:  # one broken run must not break the list: its row says "—", the log why
        log.exception("runs list: run %s could not be analysed", run_id)
        with _summaries_lock:
            _failures[key] = db.generation()
        return NO_FIGURES
    with _summaries_lock:
        _failures.pop(key, None)
        if len(_summaries) >= MAX_SUMMARIES:
            _summaries.pop(next(iter(_summaries)))  # the oldest entry
        _summaries[key] = figures
    return figures


@st.cache_data(show_spinner=False, max_entries=16)
def rank_panels(path: str, gen: int, run_id: str) -> list[sawtooth.BusyPanel]:
    """Every rank's busy series over three steps, aligned on each rank's first step
    (``sawtooth.rank_busy_panels``), for the Run page's small multiples."""
    ranks = db.ranks_of(path, gen, run_id)
    match = report_obj(path, run_id, ranks[0]).collectives if ranks else None
    return sawtooth.rank_busy_panels(db.cursor(), run_id, match=match)


# -- the sawtooth's inputs ---------------------------------------------------------------------------


@st.cache_data(show_spinner=False, max_entries=64)
def window(path: str, run_id: str, rank: int) -> sawtooth.WindowView:
    """``sawtooth.window_view``: the analysed window of one rank and its steps."""
    return sawtooth.window_view(db.cursor(), run_id, rank)


@st.cache_data(show_spinner=False, max_entries=64)
def primary_device(path: str, run_id: str, rank: int, start_ns: int, end_ns: int) -> int | None:
    """``sawtooth.primary_device``: the device with the most GPU activity in the range."""
    return sawtooth.primary_device(db.cursor(), run_id, rank, start_ns, end_ns)


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
    """``sawtooth.busy_series``: busy fraction per bucket."""
    return sawtooth.busy_series(
        db.cursor(), run_id, rank, start_ns, end_ns, n_buckets, device=device
    )


@st.cache_data(show_spinner=False, max_entries=128)
def busy_envelope(
    path: str,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    n_buckets: int,
    sub: int,
    device: int | None,
) -> pd.DataFrame:
    """``sawtooth.busy_envelope``: busy fraction per bucket with its min-max inside the bucket."""
    return sawtooth.busy_envelope(
        db.cursor(), run_id, rank, start_ns, end_ns, n_buckets, sub, device=device
    )


@st.cache_data(show_spinner=False, max_entries=32)
def idle_gaps(path: str, run_id: str, rank: int, device: int | None) -> pd.DataFrame:
    """``sawtooth.idle_gaps``: every idle gap of the rank's window, by cause."""
    w = window(path, run_id, rank)
    return sawtooth.idle_gaps(db.cursor(), run_id, rank, w.window, device)


@st.cache_data(show_spinner=False, max_entries=128)
def idle_shares(
    path: str, run_id: str, rank: int, device: int | None, start_ns: int, end_ns: int, n: int
) -> dict[str, np.ndarray]:
    """``sawtooth.idle_shares_in_view``: idle % per cause in each of ``n`` buckets of the range."""
    gaps = idle_gaps(path, run_id, rank, device)
    return sawtooth.idle_shares_in_view(gaps, start_ns, end_ns, n)


@st.cache_data(show_spinner=False, max_entries=64)
def gaps_in_view(
    path: str, run_id: str, rank: int, device: int | None, start_ns: int, end_ns: int
) -> pd.DataFrame:
    """``sawtooth.gaps_in_view``: the whole gaps in the range, clipped, with their per-cause time."""
    return sawtooth.gaps_in_view(idle_gaps(path, run_id, rank, device), start_ns, end_ns)


def cause_columns(gaps: pd.DataFrame) -> list[str]:
    """The per-cause ns columns of a gaps frame, in the analysis's precedence order."""
    return sawtooth.cause_columns(gaps)


@st.cache_data(show_spinner=False, max_entries=256)
def kernel_count(
    path: str, run_id: str, rank: int, device: int | None, start_ns: int, end_ns: int
) -> int:
    """``sawtooth.activity_count``: GPU activities of the device overlapping the range."""
    return sawtooth.activity_count(db.cursor(), run_id, rank, device, start_ns, end_ns)


@st.cache_data(show_spinner=False, max_entries=64)
def kernels_in_range(
    path: str, run_id: str, rank: int, device: int | None, start_ns: int, end_ns: int, limit: int
) -> pd.DataFrame:
    """``sawtooth.activities_in_range``: each GPU activity in the range, clipped, categorised."""
    return sawtooth.activities_in_range(db.cursor(), run_id, rank, device, start_ns, end_ns, limit)


@st.cache_data(show_spinner=False, max_entries=64)
def nvml_overlay(
    path: str, run_id: str, rank: int, gpu: int | None, start_ns: int, end_ns: int, n_buckets: int
) -> pd.DataFrame:
    """``nvml_run.nvml_overlay``: NVML utilization of the GPU in the range, in the rank's trace ns."""
    return nvml_run.nvml_overlay(db.cursor(), run_id, rank, gpu, start_ns, end_ns, n_buckets)


@st.cache_data(show_spinner=False, max_entries=32)
def nvml_samples(path: str, run_id: str, max_points: int = 4000) -> pd.DataFrame:
    """``nvml_run.nvml_series``: every NVML sample of a run, thinned to ``max_points`` per GPU."""
    return nvml_run.nvml_series(db.cursor(), run_id, max_points)


@st.cache_data(show_spinner=False, max_entries=128)
def wait_share(
    path: str, run_id: str, rank: int, device: int | None, start_ns: int, end_ns: int, n: int
) -> np.ndarray:
    """``run_views.wait_in_view``: the fraction (0..1) of each of ``n`` buckets of the range the
    rank spent waiting in collectives for the last rank (zeros for a run of one rank)."""
    match = report_obj(path, run_id, rank).collectives
    df = run_views.wait_in_view(db.cursor(), run_id, rank, device, start_ns, end_ns, n, match)
    return df["wait_frac"].to_numpy(dtype="float64")


@st.cache_data(show_spinner=False, max_entries=64)
def wait_spans(path: str, run_id: str, rank: int, start_ns: int, end_ns: int) -> pd.DataFrame:
    """``run_views.wait_spans``: the rank's waits in the range, for a zoom that draws kernels."""
    match = report_obj(path, run_id, rank).collectives
    return run_views.wait_spans(db.cursor(), run_id, rank, start_ns, end_ns, match)


@st.cache_data(show_spinner=False, max_entries=16)
def world_sizes(path: str, gen: int) -> dict[str, int | None]:
    """``run_views.world_sizes``: each run's world size as its ranks say, by run id."""
    return run_views.world_sizes(db.cursor())


def ranks_of_world(n_ranks: int, world_size: int | None) -> str:
    """``run_views.ranks_of_world``: ``2``, or ``1 of 2`` while a job's nodes still report."""
    return run_views.ranks_of_world(n_ranks, world_size)


@st.cache_data(show_spinner=False, max_entries=16)
def rank_step_matrix(path: str, gen: int, run_id: str, rank: int) -> pd.DataFrame:
    """``run_views.rank_step_matrix`` of the ranks' lines of the run's report (every rank × step:
    step time, wait, outliers), ranks grouped by the node their trace names (``ranks.rank_nodes``)."""
    lines = rank_overview(path, run_id, rank).lines
    return run_views.rank_step_matrix(lines, run_views.rank_nodes(db.cursor(), run_id))
