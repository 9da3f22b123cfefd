"""Page sections shared by Run and Compare: cards, the zoomable sawtooth, breakdowns, fixes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
from gpuscope.analysis import run_views, sawtooth
from gpuscope.store.errors import catalog_lost, store_fault
from gpuscope.vocabulary.nvml_fields import GPU_UTIL_PCT, MEM_USED_BYTES, POWER_W
from gpuscope.web import data, db, figures, html_safe, palette, ui

LOG = logging.getLogger("gpuscope.web")
N_BUCKETS = 1200  # about one per pixel of a wide plot
FINE_KERNELS = 2000  # at most this many GPU activities in view: look at them one by one
ENVELOPE_SUB = 4  # sub-buckets per bucket for the busy min/max envelope
MIN_VIEW_NS = 2_000
PLOT_CONFIG = {
    "displaylogo": False,
    "scrollZoom": False,
    "modeBarButtonsToRemove": ["lasso2d", "autoScale2d", "toImage"],
}


@contextlib.contextmanager
def section(label: str) -> Iterator[None]:
    """Run one page section so that it fails alone.

    An exception shows one plain error line (no traceback: the user cannot act on one) while
    the traceback goes to the server log (logger ``gpuscope.web``). Streamlit's own control flow
    (``st.rerun``/``st.stop``) derives from ``BaseException`` and passes through.
    """
    try:
        yield
    except Exception as e:  # a bug in one section must not take the page down
        if catalog_lost(e):  # the team store's PostgreSQL stopped: plain words, not a bug
            line = store_fault(e, db.db_path())
            LOG.warning("section %r: %s", label, line)
            st.error(
                f"{label} could not be shown: {ui.md(str(line), None)}", icon=":material/error:"
            )
            return
        LOG.exception("section %r failed", label)
        st.error(
            f"{label} could not be shown: an internal error ({type(e).__name__}). "
            "The details are in the server log.",
            icon=":material/error:",
        )


def _in_apptest() -> bool:
    from streamlit import config

    try:
        return bool(config.get_option("global.appTest"))
    except Exception:  # an option Streamlit no longer has: behave as in a browser
        return False


def _query_now() -> dict[str, list[str]]:
    """This run's query parameters (each with all its values)."""
    return {k: st.query_params.get_all(k) for k in st.query_params}


#: The browser's side of :func:`after_first_paint`: once the busy-time plot has drawn its traces
#: (its chart's key starts with ``saw_``; Plotly adds its SVG root before it draws them), or 2 s
#: after its SVG root if it draws none, or at once on a page without a plot, or after 10 s whatever
#: happened, it clicks the page's hidden button (``%(button)s``) two frames later. A constant but
#: for the button's key (letters, digits, ``_``), the page's wait flag and an int: no data in it.
PAINT_JS = """
<style>.st-key-%(button)s { display: none; }</style>
<script>
(() => {
  const doc = window.parent.document;
  let n = 0, svgAt = -1;
  const timer = setInterval(() => {
    n += 1;
    const chart = doc.querySelector('[class*="st-key-saw_"]');
    if (svgAt < 0 && chart && chart.querySelector(".main-svg")) svgAt = n;
    const drawn = !%(wait)s || (chart && chart.querySelector(".main-svg .trace"))
      || (svgAt >= 0 && n - svgAt > 40);
    if (!drawn && n < 200) return;
    const button = doc.querySelector(".st-key-%(button)s button");
    if (!button) return;
    clearInterval(timer);
    window.requestAnimationFrame(() => window.requestAnimationFrame(() => button.click()));
  }, 50);
})();
</script>
<div data-gpuscope-paint="%(nonce)s"></div>
"""


def paint_script(key: str, *, plot: bool, nonce: int) -> tuple[str, str]:
    """(the hidden button's key, :data:`PAINT_JS` for it): the key is ``paint_`` and ``key`` with
    every character but ASCII letters, digits and ``_`` made ``_``, so nothing of ``key`` can end
    the script or its CSS; ``nonce`` (an int) makes each run's element new, so the browser runs it."""
    button = "paint_" + re.sub(r"[^A-Za-z0-9_]", "_", key)
    js = PAINT_JS % {"button": button, "wait": "true" if plot else "false", "nonce": int(nonce)}
    return button, js


def first_paint_done(key: str) -> bool:
    """Whether this session's page ``key`` has drawn its first screen in the browser (then the
    sections :func:`after_first_paint` held back are drawn in the script run itself). Always true
    under AppTest, which runs scripts once, without a browser."""
    return bool(st.session_state.get(f"_painted_{key}")) or _in_apptest()


def after_first_paint(key: str, *, plot: bool, label: str) -> None:
    """Hold a page's lower sections back until the browser has drawn its first screen.

    A new page's browser work (loading and running the code of every kind of element, drawing
    every chart) all happens at once: sections further down (the rank heatmap, breakdowns, fixes)
    delayed the busy-time plot by seconds. So while :func:`first_paint_done` is false, the page
    draws its first screen, this caption (``label``) and, in a fragment, a hidden button that the
    browser clicks once the busy-time plot has drawn (``plot``: the page has one; :data:`PAINT_JS`).
    The click reruns the fragment only, which marks the session (per ``key``: the Run page passes
    one per run) and reruns the app with everything; later runs of the same key (zooming, another
    rank) draw everything at once.
    A click carries the URL the browser has when it is sent: one sent just after the reader's
    action (a zoom, a rank), before that action's run reached the browser, carries the URL from
    before it, and an app run on it would take the page back there. So the URL this run leaves is
    kept (nothing after this call may write the URL), and a click with another one draws nothing:
    the next run's button is clicked in turn.
    """
    flag, url_key, n_key = f"_painted_{key}", f"_url_{key}", f"_paint_n_{key}"
    st.session_state[url_key] = _query_now()
    st.session_state[n_key] = st.session_state.get(n_key, 0) + 1
    button, js = paint_script(key, plot=plot, nonce=st.session_state[n_key])

    @st.fragment
    def trigger() -> None:
        st.caption(label)
        st.html(js, unsafe_allow_javascript=True)
        clicked = st.button("Draw the rest of the page", key=button, type="tertiary")
        if clicked and _query_now() == st.session_state.get(url_key):  # else stale: no navigation
            st.session_state[flag] = True
            st.rerun()

    trigger()


#: Keeps the section a URL names (``#fixes``) in view while the page still grows: Streamlit
#: scrolls to it when its heading first renders, but charts above it that finish drawing later
#: (slower on a loaded machine) push it down again. For up to 15 s, until the reader scrolls,
#: the heading is brought back to the top whenever it has drifted out of the viewport's top half.
#: The reader's scroll is remembered in the page for its URL, so a keeper the page's next script
#: run draws again does not pull the section back after the reader has moved.
KEEP_ANCHOR_JS = """
<script>
(() => {
  const win = window.parent, doc = win.document;
  const id = decodeURIComponent((win.location.hash || "").slice(1));
  if (!id) return;
  const here = win.location.href;
  if (win.__gpuscopeReaderMoved === here) return;
  let stop = false;
  for (const ev of ["wheel", "touchstart", "keydown", "mousedown"]) {
    doc.addEventListener(ev, () => { stop = true; win.__gpuscopeReaderMoved = here; },
                         { once: true, capture: true });
  }
  let n = 0;
  const timer = setInterval(() => {
    if (stop || win.__gpuscopeReaderMoved === here || ++n > 60) {
      clearInterval(timer); return;
    }
    const el = doc.getElementById(id);
    if (!el) return;
    const top = el.getBoundingClientRect().top;
    if (top < 0 || top > win.innerHeight / 2) el.scrollIntoView({ block: "start" });
  }, 250);
})();
</script>
"""


def keep_anchor_in_view() -> None:
    """The browser keeps the URL's section (``#name``) in view while the page grows
    (:data:`KEEP_ANCHOR_JS`, a constant: no data in it); nothing without a section in the URL.
    An invisible element."""
    st.html(KEEP_ANCHOR_JS, unsafe_allow_javascript=True)


# -- header ------------------------------------------------------------------------------------------


def run_caption(row: dict[str, Any]) -> str:
    parts = [
        ui.md_code(row["run_id"]),
        ui.md(row.get("gpu_name") or "GPU unknown"),
        run_views.ranks_label(
            row["n_ranks"], row.get("world_size")
        ),  # "1 of 2 ranks" while nodes report
        f"{row['n_events']:,} events",
    ]
    created = row.get("created_at")
    if created is not None:
        parts.append(f"stored {str(created)[:16]} UTC")
    if row.get("torch_version"):
        parts.append(f"torch {ui.md(row['torch_version'])}")
    if row.get("tags"):
        parts.append("tags: " + ", ".join(ui.md(t) for t in row["tags"]))
    return " · ".join(parts)


def opening_rank(job: run_views.JobDiagnosis) -> tuple[int, str]:
    """The rank a run's page opens on when its URL names none, and the sentence that says why
    ("" for a run of one rank: there is nothing to choose): the rank the job's cause names where
    it is not the traced pace-setter (that one is late by the profiler's cost only), else the
    job's pace-setter where other ranks wait for it, else the lowest rank (no rank waits for
    another, or no collectives matched)."""
    ranks = sorted(job.ranks)
    if len(ranks) <= 1:
        return (ranks[0] if ranks else 0), ""
    if job.cause_rank is not None and job.cause_rank != job.pace_setter and job.cause_rank in ranks:
        # the traced pace-setter is late only by the profiler's cost; the job's first fix is on
        # the rank that sets the pace without it
        return job.cause_rank, (
            f"Opened on rank {job.cause_rank}, which sets the pace once the profiler's cost is "
            f"gone (under the profiler the others wait for rank {job.pace_setter})."
        )
    if (
        job.waiting_rank is not None
        and (job.wait_ms_per_step or 0) > 0
        and job.pace_setter in ranks
    ):
        return job.pace_setter, (
            f"Opened on rank {job.pace_setter}, the pace-setter: the other ranks wait for it."
        )
    return ranks[0], f"Opened on rank {ranks[0]}, the lowest: no rank waits for another."


def rank_selector(
    run_id: str, *, key: str, param: str = "rank", label: str = "Rank", default: int | None = None
) -> int:
    """The rank shown (query parameter ``rank``; without it ``default`` if the run has that rank,
    else the lowest); a selector only when the run has several."""
    ranks = db.ranks_of(db.db_path(), db.generation(), run_id) or [0]
    raw = st.query_params.get(param)
    chosen = default if default in ranks else ranks[0]
    if raw is not None:
        try:
            r = int(raw)
        except ValueError:
            r = None
        if r in ranks:
            chosen = r
        else:
            st.warning(
                f"Rank “{ui.md(raw, 40)}” is not in this run (ranks {', '.join(map(str, ranks))}); "
                f"showing rank {chosen}."
            )
    if len(ranks) > MAX_RANK_BUTTONS:  # a big run: a list, not a wall of buttons
        listed: int | None = st.selectbox(
            label,
            ranks,
            index=ranks.index(chosen),
            key=f"{key}_{run_id}_{chosen}",
            format_func=lambda r: f"rank {r}",
        )
        if listed is not None and listed != chosen:
            st.query_params[param] = str(listed)
            st.rerun()
    elif len(ranks) > 1:
        picked = st.segmented_control(
            label,
            ranks,
            default=chosen,
            key=f"{key}_{run_id}_{chosen}",
            format_func=lambda r: f"rank {r}",
        )
        if picked is not None and picked != chosen:
            st.query_params[param] = str(picked)
            st.rerun()
        chosen = picked if picked is not None else chosen
    if len(ranks) > 1 or raw is not None:
        st.query_params[param] = str(chosen)
    return int(chosen)


# -- cards -------------------------------------------------------------------------------------------


def evidence_banner(b: run_views.Banners) -> None:
    """The report's warnings: without recognised GPU activity the first one leads the page (no busy
    %, MFU or fix rests on anything); the others as notes."""
    if b.lead is not None:
        st.warning(ui.md(b.lead, limit=None), icon=":material/warning:")
    if b.notes:
        st.caption("Notes: " + " · ".join(ui.md(w, limit=None) for w in b.notes))


def profiler_note(prof: run_views.ProfilerCost | None) -> None:
    """What the profiler itself cost, and the cap it puts on host-side figures (metrics.md,
    "Profiler cost")."""
    if prof is None:
        return
    untraced = prof.untraced_step_ms
    if untraced is not None:
        cap = prof.host_cap_ms_per_step
        cap_text = (
            f"Host-side idle and fixes are capped at {ui.fmt_ms(cap, 2)} per step, what can "
            "exist without it."
            if cap
            else "The GPU is busy longer per traced step than the whole untraced step (the "
            "profiler slows GPU work too), so no host-side idle can be told apart from its cost."
        )
        st.info(
            f"Without the profiler a step takes {ui.fmt_ms(untraced, 2)} (median, "
            f"{'recorded by gpuscope.capture' if prof.untraced_source == 'capture' else 'given'}"
            f"); traced it takes {ui.fmt_ms(prof.traced_step_ms, 2)}: the profiler adds "
            f"{ui.fmt_pct(prof.inflation_pct)}. {cap_text} The cards above are "
            "profiled (read from the trace, with the profiler on); unprofiled throughput and MFU: "
            "`gpuscope analyze`, or Compare.",
            icon=":material/timer:",
        )
    elif prof.suspect and prof.note:
        st.info(ui.md(prof.note, limit=None), icon=":material/timer:")


def rank_overview(run_id: str, ov: run_views.RankOverview) -> None:
    """For a run of several ranks: every rank's figures per step, the straggler with its evidence,
    and each rank's busy-time plot aligned on its first step."""
    ranks = ov.lines
    if len(ranks) < 2:
        return
    st.subheader("Ranks", anchor=False)
    sg = ov.straggler
    if sg is not None:
        st.warning(
            f"Rank {sg.rank} sets the pace: {ui.md(sg.evidence or '', limit=None)}",
            icon=":material/slow_motion_video:",
        )
    st.dataframe(
        rank_table(ov),
        hide_index=True,
        width="stretch",
        column_config=RANK_TABLE_COLUMNS,
        height=min(400, 38 + 35 * len(ranks)),
    )
    rank_heatmap(run_id, ov.rank, pace_setter=sg.rank if sg is not None else None)
    if len(ranks) <= MAX_SAWTOOTH_RANKS:  # never a sawtooth per rank of a big run
        fig = _rank_figure(db.db_path(), db.generation(), run_id)
        if fig is not None:
            st.plotly_chart(fig, width="stretch", config={"displayModeBar": False})


def rank_table(ov: run_views.RankOverview) -> pd.DataFrame:
    """The rank table of the ranks section: one row per rank, numbers (ms, %) that sort as
    numbers, the wait each rank causes the others (ms per step: the others' wait in the
    collectives it arrived last at, the straggler's match; 0 for a rank never last) first, the
    table in decreasing caused wait (then rank). None (not measured) stays empty."""
    sg = ov.straggler
    n = max(1, sg.n_steps) if sg is not None else 1
    caused = dict(sg.per_rank_caused_ns) if sg is not None else {}

    def us_ms(v: float | None) -> float | None:
        return v / 1e3 if v is not None else None

    t = pd.DataFrame(
        {
            "rank": [r.rank for r in ov.lines],
            "caused wait / step": [caused.get(r.rank, 0) / n / 1e6 for r in ov.lines],
            "step time (median)": [r.step_p50_ms for r in ov.lines],
            "p90": [r.step_p90_ms for r in ov.lines],
            "max": [r.step_max_ms for r in ov.lines],
            "GPU busy": [r.gpu_busy_pct for r in ov.lines],
            "of it waiting": [r.comm_wait_pct for r in ov.lines],
            "communication only / step": [us_ms(r.comm_only_us_per_step) for r in ov.lines],
            "idle / step": [us_ms(r.idle_us_per_step) for r in ov.lines],
        }
    )
    t = t.astype({c: "float64" for c in t.columns if c != "rank"})  # None: empty, sorts last
    return t.sort_values(
        ["caused wait / step", "rank"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)


#: How the rank table's numbers read (they stay numbers: a click on a header sorts by value).
RANK_TABLE_COLUMNS = {
    "rank": st.column_config.NumberColumn("rank", format="%d", width="small"),
    "caused wait / step": st.column_config.NumberColumn(
        "caused wait / step",
        format="%.2f ms",
        help="The wait this rank causes the other ranks, summed over them, per step: their wait "
        "in the collectives it arrived last at (the table opens sorted by it: the pace-setter "
        "first)",
    ),
    "step time (median)": st.column_config.NumberColumn(format="%.2f ms"),
    "p90": st.column_config.NumberColumn("p90", format="%.2f ms"),
    "max": st.column_config.NumberColumn("max", format="%.2f ms"),
    "GPU busy": st.column_config.NumberColumn(format="%.1f %%"),
    "of it waiting": st.column_config.NumberColumn(format="%.1f %%"),
    "communication only / step": st.column_config.NumberColumn(format="%.2f ms"),
    "idle / step": st.column_config.NumberColumn(format="%.2f ms"),
}


#: Once a heatmap click has opened a cell, the browser brings the busy plot's heading into view
#: (Streamlit's id for "GPU busy over time") as soon as it is drawn, for up to 8 s while the page
#: still grows, until the reader scrolls. A constant (no data in it) but the click's count,
#: which makes each click's element new (and its script run again).
SCROLL_TO_PLOT_JS = """
<script data-click="__N__">
(() => {
  const win = window.parent, doc = win.document;
  let stop = false, n = 0, seen = false;
  for (const ev of ["wheel", "touchstart", "keydown"]) {
    doc.addEventListener(ev, () => { stop = true; }, { once: true, capture: true });
  }
  const timer = setInterval(() => {
    if (stop || ++n > 40) { clearInterval(timer); return; }
    const el = doc.getElementById("gpu-busy-over-time");
    if (!el) return;
    const top = el.getBoundingClientRect().top;
    if (!seen || top < 0 || top > win.innerHeight / 2) el.scrollIntoView({ block: "start" });
    seen = true;
  }, 200);
})();
</script>
"""


#: The Run page draws every rank's busy plot (small multiples) up to this many ranks; above it,
#: only the rank × step heatmap (one trace, whatever the number of ranks).
MAX_SAWTOOTH_RANKS = 8
#: Above this many ranks the rank is picked from a list, not a row of buttons.
MAX_RANK_BUTTONS = 16


def cell_target(selection: Any) -> tuple[int, int] | None:
    """(rank, step) of the heatmap cell a click selected (its ``customdata``), or None."""
    points = ((selection or {}).get("selection") or {}).get("points") or []
    for p in points:
        cd = p.get("customdata")
        if isinstance(cd, list | tuple) and len(cd) >= 2:
            try:
                return int(cd[0]), int(cd[1])
            except (TypeError, ValueError):
                pass
        # a heatmap's click may come without its customdata: read the cell's labels
        ry = re.search(r"rank (\d+)", str(p.get("y", "")))
        sx = re.search(r"#(\d+)", str(p.get("x", "")))
        if ry and sx:
            return int(ry.group(1)), int(sx.group(1))
    return None


def rank_heatmap(run_id: str, rank: int, *, pace_setter: int | None = None) -> None:
    """Ranks × steps (wait, where any rank waits, else step time; either on a switch), grouped
    by node, outliers ringed, the pace-setter's row named, the spread of step time across ranks
    per step; a click on a cell (or the pickers' Open) opens that rank and step in the busy
    plot, sets the pickers to it and brings the plot into view."""
    path = db.db_path()
    m = data.rank_step_matrix(path, db.generation(), run_id, rank)
    if m.empty:
        return
    views_of = ["wait", "step time"] if float(m["wait_ms"].sum()) > 0 else ["step time", "wait"]
    what = st.radio(
        "Colour the ranks × steps by",
        views_of,
        horizontal=True,
        key=f"heat_{run_id}",
        help="Wait: each rank's wait in the collectives of the step, for the last rank to arrive "
        "(the pace-setter waits least). The colour scale ends at the 99th percentile of the "
        "cells, the profiler's drain step (greyed) left out.",
    )
    fig = _heatmap_figure(
        path, db.generation(), run_id, rank, "wait_ms" if what == "wait" else "step_ms", pace_setter
    )
    key = f"heatmap_{run_id}_{what}"
    rank_key, step_key = f"cell_rank_{run_id}", f"cell_step_{run_id}"
    scroll_key = f"_scroll_to_plot_{run_id}"

    def open_cell(r: int, step: int) -> None:
        st.session_state[rank_key], st.session_state[step_key] = int(r), int(step)
        st.session_state[scroll_key] = int(st.session_state.get(f"{scroll_key}_n", 0)) + 1
        st.session_state[f"{scroll_key}_n"] = st.session_state[scroll_key]
        w = data.window(path, run_id, r)
        row = w.steps[w.steps["number"] == step]
        if not row.empty:
            s, e = int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0])
            st.session_state[f"view_run_{run_id}_{r}"] = (s, e)
            # the URL's zoom says this view too (the busy plot takes a zoom it did not write,
            # e.g. another rank's from an earlier click, as the reader's)
            shown = None if (s, e) == (w.start_ns, w.end_ns) else zoom_param(s, e, w.start_ns)
            if shown is None:
                st.query_params.pop(ZOOM_PARAM, None)
            else:
                st.query_params[ZOOM_PARAM] = shown
            st.session_state[f"view_run_{run_id}_{r}_url"] = shown
        st.query_params["rank"] = str(r)

    def on_pick() -> None:
        picked = cell_target(st.session_state.get(key))
        if picked is not None:
            open_cell(*picked)

    st.plotly_chart(
        fig,
        key=key,
        on_select=on_pick,
        selection_mode="points",
        width="stretch",
        config={"displayModeBar": False},
    )
    spread = run_views.step_spread(m)
    n_out = int(m["outlier"].sum())
    st.caption(
        f"{m['rank'].nunique():,} ranks × {m['step'].nunique():,} steps; "
        + (f"{n_out} outlier cell(s) ringed; " if n_out else "no outlier; ")
        + "pick a cell (click it, or below) to open that rank and step in the busy plot."
    )
    scroll = st.session_state.pop(scroll_key, None)
    if scroll is not None:
        st.html(SCROLL_TO_PLOT_JS.replace("__N__", str(int(scroll))), unsafe_allow_javascript=True)
    all_ranks = [int(r) for r in m["rank"].drop_duplicates()]
    all_steps = sorted(int(x) for x in m["step"].unique())
    # the pickers start on the pace-setter's slowest step (any rank's without one), the
    # profiler's drain step left out; a click or Open sets them to the cell opened
    drain = figures.drain_step(m)
    pool = m[m["step"] != drain] if drain is not None and (m["step"] != drain).any() else m
    if pace_setter is not None and (pool["rank"] == pace_setter).any():
        pool = pool[pool["rank"] == pace_setter]
    worst = pool.sort_values(["step_ms", "rank"], ascending=[False, True]).iloc[0]
    if st.session_state.get(rank_key) not in all_ranks:
        st.session_state[rank_key] = int(worst["rank"])
    if st.session_state.get(step_key) not in all_steps:
        st.session_state[step_key] = int(worst["step"])
    c = st.columns([2, 2, 1], vertical_alignment="bottom")
    pr = c[0].selectbox("Rank", all_ranks, key=rank_key, format_func=lambda r: f"rank {r}")
    ps = c[1].selectbox("Step", all_steps, key=step_key, format_func=lambda x: f"#{x}")
    c[2].button(
        "Open",
        key=f"cell_open_{run_id}",
        on_click=open_cell,
        args=(int(pr), int(ps)),
        width="stretch",
        help="Open this rank and step in the busy plot (default: the pace-setter's slowest "
        "step, the profiler's drain step left out)",
    )
    st.dataframe(
        pd.DataFrame(
            {
                "step": [f"#{s}" for s in spread["step"]],
                "ranks": spread["ranks"],
                "fastest": [ui.fmt_ms(v, 2) for v in spread["min_ms"]],
                "median": [ui.fmt_ms(v, 2) for v in spread["p50_ms"]],
                "slowest": [ui.fmt_ms(v, 2) for v in spread["max_ms"]],
                "slowest rank": spread["slowest_rank"],
                "median wait": [ui.fmt_ms(v, 2) for v in spread["wait_p50_ms"]],
                "outliers": spread["outliers"],
            }
        ),
        hide_index=True,
        width="stretch",
    )


@st.cache_resource(show_spinner=False, max_entries=32)
def _heatmap_figure(
    path: str, gen: int, run_id: str, rank: int, value: str, pace_setter: int | None
) -> Any:
    """The ranks × steps heatmap of ``data.rank_step_matrix`` coloured by ``value``, built once per
    store generation and shared by every session (it is only read afterwards): building it was
    most of the script time of the Run page's lower sections."""
    m = data.rank_step_matrix(path, gen, run_id, rank)
    return figures.rank_step_heatmap(m, value, pace_setter=pace_setter)


@st.cache_resource(show_spinner=False, max_entries=16)
def _rank_figure(path: str, gen: int, run_id: str) -> Any:
    """The ranks' aligned busy plots, built once per store generation and shared (read only)."""
    panels = data.rank_panels(path, gen, run_id)
    if not panels:
        return None
    return figures.aligned_sawtooth(
        [dataclasses.replace(p, label=ui.plot_text(p.label)) for p in panels],
        height_each=170,
        x_title="ms since the rank's first step",
    )


@dataclasses.dataclass(frozen=True)
class Card:
    """One headline card: a label, its value, a few words beside the value and a help text shown
    on hover (each may hold text from a trace: :func:`cards_html` makes it inert)."""

    label: str
    value: str
    beside: str = ""
    help: str = ""


_CARD = (
    "flex:1 1 0;min-width:7.5rem;border:1px solid rgba(128,128,128,0.3);border-radius:0.5rem;"
    "padding:0.55rem 0.8rem"
)
_CARD_LABEL = "font-size:0.85rem;opacity:0.75"
_CARD_VALUE = "font-size:1.4rem;line-height:1.3"
_CARD_MARK = (
    "display:inline-block;width:1.1em;height:1.1em;line-height:1.05em;text-align:center;"
    "border:1px solid currentColor;border-radius:50%;font-size:0.7rem;opacity:0.6"
)
_CARD_BESIDE = "font-size:0.8rem;opacity:0.65"


def cards_html(cards: list[Card], lines: list[tuple[str, str]] | None = None) -> str:
    """The cards as one row of bordered boxes (they wrap on a narrow screen), then ``lines``
    (label, text) under them, a bold label each; every text escaped (:mod:`html_safe`), a card's
    help its ``title`` (the hover text)."""
    items = []
    for c in cards:
        tip = f' title="{html_safe.st_html_attr(c.help)}"' if c.help else ""
        mark = f' <span style="{_CARD_MARK}">?</span>' if c.help else ""
        beside = (
            f'<div class="gs-card-beside" style="{_CARD_BESIDE}">{html_safe.text(c.beside)}</div>'
            if c.beside
            else ""
        )
        items.append(
            f'<div class="gs-card" style="{_CARD}"{tip}>'
            f'<div class="gs-card-label" style="{_CARD_LABEL}">{html_safe.text(c.label)}{mark}'
            f'</div><div class="gs-card-value" style="{_CARD_VALUE}">{html_safe.text(c.value)}'
            f"</div>{beside}</div>"
        )
    out = (
        f'<div class="gs-cards" style="display:flex;flex-wrap:wrap;gap:0.75rem">{"".join(items)}'
        "</div>"
        if items
        else ""
    )
    for label, text in lines or []:
        out += (
            f'<div class="gs-line" style="margin-top:0.6rem"><b>{html_safe.text(label)}:</b> '
            f"{html_safe.text(text)}</div>"
        )
    return out


def show_cards(cards: list[Card], lines: list[tuple[str, str]] | None = None) -> None:
    """The cards and lines in one element (:func:`cards_html`): one block for the browser to lay
    out, where a row of ``st.metric`` in ``st.columns`` is two elements a card and each line a
    Markdown element of its own."""
    if cards or lines:
        st.html(cards_html(cards, lines))


def job_cards(rows: tuple[run_views.HeadlineRow, ...], extra: list[Card] | None = None) -> None:
    """The job's verdict (:func:`gpuscope.analysis.job.headline_rows`, the rows every face
    renders): one card per figure (then ``extra``'s), the first finding and why as lines under
    them."""
    said = ("First fix", "Why")
    cards = [Card(r.label, r.value, r.beside, r.note) for r in rows if r.label not in said]
    lines = [
        (r.label, r.value + (f" · {r.note}" if r.note else "")) for r in rows if r.label in said
    ]
    show_cards(cards + (extra or []), lines)


def headline_cards(h: run_views.Headline) -> None:
    """The job's verdict (:func:`job_cards`), then the shown rank's five cards: step time, GPU
    busy (and the wait in it), MFU, tensor-core share, the top idle cause
    (:class:`run_views.Headline`, built by analysis); a run of one rank shows only the last two
    under the verdict (the others are the verdict's)."""
    if h.job_rows:
        if not h.distributed:
            job_cards(h.job_rows, _rank_extra_cards(h))
            return
        job_cards(h.job_rows)
        st.caption(f"Rank {h.rank}: its own figures")
    # issue 20: the median step (one slow step does not move it), p90 and max beside it
    cards = [
        Card(
            "Step time",
            ui.fmt_ms(h.step_p50_ms),
            f"p90 {ui.fmt_ms(h.step_p90_ms).removesuffix(' ms')} · max {ui.fmt_ms(h.step_max_ms)}",
            f"Profiled: median over {h.n_steps} step(s); 90th percentile and slowest step beside "
            f"it. Mean (window ÷ steps): {ui.fmt_ms(h.step_mean_ms)}.",
        ),
        Card(
            "GPU busy",
            ui.fmt_pct(h.busy_pct),
            f"of it waiting {ui.fmt_pct(h.wait_pct)}" if h.wait_pct is not None else "",
            "Share of the window in which at least one kernel, copy or memset ran on the GPU. "
            "Waiting: the part spent in collectives waiting for the last rank to arrive (busy, "
            'yet no work; docs/metrics.md "Busy, split").',
        ),
        Card(
            "MFU",
            ui.fmt_pct(h.mfu_pct),
            "",
            f"Model FLOPs ÷ (step time × peak {ui.fmt_tflops(h.peak_tflops)}"
            f"{', ' + str(h.dtype) if h.dtype else ''}). "
            f"While busy: {ui.fmt_pct(h.mfu_busy_pct)}. "
            f"FLOPs per step: {ui.fmt_flops(h.flops_per_step)}.",
        ),
    ]
    show_cards(cards + _rank_extra_cards(h))


def _rank_extra_cards(h: run_views.Headline) -> list[Card]:
    """The tensor-core share and the top idle cause cards."""
    tc = Card(
        "Tensor-core share",
        ui.fmt_pct(h.tensor_core_pct),
        "",
        "Share of kernel time spent in tensor-core kernels. Eligible matmuls/convs not on "
        f"tensor cores: {ui.fmt_us_as_ms(h.tc_eligible_not_tc_us)}.",
    )
    top = h.top_idle
    if top is None:
        return [tc, Card("Top idle cause", "none")]
    cause = top.cause
    capped = top.capped_ms_per_step
    return [
        tc,
        Card(
            "Top idle cause",
            ui.fmt_ms(top.ms_per_step, 2) if capped is None else f"≤ {ui.fmt_ms(capped, 2)}",
            f"{palette.cause_label(cause)} · "
            + (
                ui.fmt_pct(top.share_pct)
                if capped is None
                else f"{ui.fmt_ms(top.ms_per_step, 2)} profiled"
            ),
            f"{palette.cause_label(cause)}: the cause with the most idle GPU time in the window; "
            + (
                "ms per step and share of the time."
                if capped is None
                else f"{ui.fmt_ms(top.ms_per_step, 2)} per step in the trace "
                f"({ui.fmt_pct(top.share_pct)} of the time), at most {ui.fmt_ms(capped, 2)} "
                "without the profiler: a host-side cause, capped at the untraced step less the "
                "GPU's own work (the profiler's note below)."
            ),
        ),
    ]


def _swatch(color: str, text: str, *, line: bool = False) -> str:
    shape = "width:14px;height:3px" if line else "width:12px;height:12px;border-radius:2px"
    return (
        f'<span style="display:inline-flex;align-items:center;margin-right:14px;white-space:nowrap">'
        f'<span style="{shape};background:{html_safe.text(color)};display:inline-block;'
        f'margin-right:5px"></span>{html_safe.text(text)}</span>'
    )


def cause_legend(
    *,
    nvml: bool = False,
    categories: list[str] | None = None,
    envelope: bool = False,
    wait: bool = False,
) -> None:
    """The one colour legend of the page's busy plots (the figures draw none): busy (or, when
    kernels are drawn one by one, their categories), each idle cause, the envelope, NVML, steps."""
    if categories:
        items = [
            _swatch(palette.category_color(c), f"busy: {c.replace('_', ' ')}") for c in categories
        ]
    else:
        items = [_swatch(palette.BUSY, "GPU busy")]
    if wait:
        items.append(_swatch(palette.WAIT, "busy: communication wait (for other ranks)"))
    items += [
        _swatch(palette.cause_color(c), f"idle: {palette.cause_label(c)}") for c in palette.CAUSES
    ]
    if envelope:
        items.append(_swatch(palette.ENVELOPE, "busy min–max inside a bucket (band)"))
    if nvml:
        items.append(_swatch(palette.NVML, "NVML GPU util", line=True))
    items.append(_swatch(palette.STEP_LINE, "step start", line=True))
    # st.html (sanitised, a 2 kB script) rather than markdown with raw HTML (a 190 kB parser)
    st.html(f'<div style="font-size:0.85rem;line-height:1.9">{"".join(items)}</div>')


# -- the sawtooth --------------------------------------------------------------------------------------


def _with_detail(gaps: pd.DataFrame) -> pd.DataFrame:
    """Each gap's hover text: its per-cause time when several causes share it."""
    cols = data.cause_columns(gaps)
    detail = (
        [
            " · ".join(
                f"{palette.cause_label(c.removesuffix('_ns'))} {r[c] / 1e6:.3f} ms"
                for c in cols
                if r[c]
            )
            for r in gaps[cols].to_dict("records")
        ]
        if cols
        else [""] * len(gaps)
    )
    return gaps.assign(detail=detail)


def clamp_view(s: int, e: int, ws: int, we: int) -> tuple[int, int]:
    """``[s, e)`` moved/shrunk into the window ``[ws, we)``, at least ``MIN_VIEW_NS`` wide."""
    width = min(max(MIN_VIEW_NS, e - s), we - ws)
    s = max(ws, min(s, we - width))
    return int(s), int(s + width)


def range_from_selection(sel: Any, origin_ns: int) -> tuple[int, int] | None:
    """The x range (ns) of a box selection on a plot whose x axis is ms since ``origin_ns``."""
    boxes = ((sel or {}).get("selection") or {}).get("box") or []
    if not boxes:
        return None
    xs = boxes[0].get("x") or []
    if len(xs) < 2:
        return None
    lo, hi = sorted(float(x) for x in xs[:2])
    return int(origin_ns + lo * 1e6), int(origin_ns + hi * 1e6)


def steps_in_view(steps: pd.DataFrame, s: int, e: int) -> tuple[int | None, int | None]:
    """The numbers of the first and last step that overlap ``[s, e)`` (ns), or ``(None, None)``."""
    if steps is None or steps.empty:
        return None, None
    inside = steps[(steps["end_ns"] > s) & (steps["start_ns"] < e)]
    if inside.empty:
        return None, None
    return int(inside["number"].iloc[0]), int(inside["number"].iloc[-1])


def step_pair(value: Any, nums: list[int]) -> tuple[int, int] | None:
    """A step slider's value as an ordered ``(first, last)`` pair of known step numbers, whatever
    shape it arrives in (a pair, or a single step); ``None`` when it names no known step."""
    if isinstance(value, list | tuple):
        vals = [v for v in value if v in nums]
    else:
        vals = [value] if value in nums else []
    if not vals:
        return None
    idx = sorted(nums.index(v) for v in vals)
    return nums[idx[0]], nums[idx[-1]]


def one_per_pixel(kernels: pd.DataFrame, s: int, e: int, n_px: int) -> bool:
    """Whether each activity gets a pixel of its own in ``[s, e)`` drawn ``n_px`` wide: no pixel
    column holds (any part of) two activities. Otherwise bars would paint a step solid."""
    if kernels.empty:
        return True
    px = (e - s) / n_px
    a = np.floor((kernels["start_ns"].to_numpy(dtype="float64") - s) / px).astype("int64")
    b = np.floor((kernels["end_ns"].to_numpy(dtype="float64") - s - 1) / px).astype("int64")
    order = np.argsort(a, kind="stable")
    a, b = a[order], np.maximum.accumulate(b[order])
    return bool(np.all(a[1:] > b[:-1]))


def _set_view(vkey: str, s: int, e: int, ws: int, we: int) -> None:
    st.session_state[vkey] = clamp_view(s, e, ws, we)


@st.cache_resource(show_spinner=False, max_entries=64)
def _sawtooth_view(path: str, gen: int, run_id: str, rank: int, s: int, e: int) -> dict[str, Any]:
    """The sawtooth figure of one view (``s``..``e``, trace ns) and what its caption says, built
    once per store generation and shared by every session (it is only read afterwards): building
    the figure was most of the page's server time with several viewers."""
    w = data.window(path, run_id, rank)
    ws, we, steps = w.start_ns, w.end_ns, w.steps
    dev = data.primary_device(path, run_id, rank, ws, we)
    n_act = data.kernel_count(path, run_id, rank, dev, s, e)
    kernels = (
        data.kernels_in_range(path, run_id, rank, dev, s, e, FINE_KERNELS)
        if n_act <= FINE_KERNELS
        else None
    )
    if kernels is not None and not one_per_pixel(kernels, s, e, N_BUCKETS):
        kernels = None  # a pixel would hold several activities: the busy share per bucket
    gaps, shares, wait, waits = None, None, None, None
    if kernels is None:
        busy = data.busy_envelope(path, run_id, rank, s, e, N_BUCKETS, ENVELOPE_SUB, dev)
        shares = data.idle_shares(path, run_id, rank, dev, s, e, N_BUCKETS)
        wait = data.wait_share(path, run_id, rank, dev, s, e, N_BUCKETS)  # issue 20
    else:
        busy = data.busy(path, run_id, rank, s, e, N_BUCKETS, dev)
        gaps = _with_detail(data.gaps_in_view(path, run_id, rank, dev, s, e))
        waits = data.wait_spans(path, run_id, rank, s, e)  # issue 20
    nvml = data.nvml_overlay(path, run_id, rank, dev, s, e, N_BUCKETS)
    fig = figures.sawtooth(
        busy,
        origin_ns=ws,
        idle=gaps,
        shares=shares,
        steps=steps,
        nvml=nvml,
        kernels=kernels,
        wait=wait if wait is not None and wait.any() else None,
        waits=waits,
    )
    return {
        "fig": fig,
        "dev": dev,
        "n_act": n_act,
        "kernels": kernels,
        "nvml_on": not nvml.empty,
        "wait_on": bool((wait is not None and wait.any()) or (waits is not None and len(waits))),
    }


ZOOM_PARAM = "zoom"


def zoom_param(s: int, e: int, ws: int) -> str:
    """A view ``[s, e)`` (trace ns) as the URL's ``zoom``: ms since the window's start ``ws``,
    to the nanosecond (``12.345678-23.456789``)."""
    return f"{(s - ws) / 1e6:.6f}-{(e - ws) / 1e6:.6f}"


def parse_zoom(text: str | None, ws: int, we: int) -> tuple[int, int] | None:
    """The view a ``zoom`` value names, clamped into the window ``[ws, we)``; None for no value
    or one that is not ``MS-MS`` (the page then shows the whole window)."""
    if not text:
        return None
    try:
        lo, hi = (float(x) for x in text.split("-", 1))
    except ValueError:
        return None
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:  # NaN, infinite or empty
        return None
    return clamp_view(ws + round(lo * 1e6), ws + round(hi * 1e6), ws, we)


def sawtooth_panel(run_id: str, rank: int, *, key: str) -> bool:
    """The busy % plot with its zoom controls; re-queries DuckDB for the visible range. Whether it
    drew a plot (not for a rank without timed events)."""
    path = db.db_path()
    w = data.window(path, run_id, rank)
    ws, we = w.start_ns, w.end_ns
    steps: pd.DataFrame = w.steps
    if we <= ws:
        st.info("This rank has no timed events to plot.")
        return False
    vkey = f"view_{key}_{run_id}_{rank}"
    # The URL holds the view (``zoom``): a link, a reload or Back sets it; a zoom on the page
    # writes it (each change a history entry, so Back undoes a zoom).
    url_zoom = st.query_params.get(ZOOM_PARAM)
    if url_zoom != st.session_state.get(f"{vkey}_url"):  # the URL changed outside this page
        st.session_state[vkey] = parse_zoom(url_zoom, ws, we) or (ws, we)
    s, e = st.session_state.get(vkey, (ws, we))
    s, e = max(ws, int(s)), min(we, int(e))
    if e - s < MIN_VIEW_NS:
        s, e = ws, we
    shown = None if (s, e) == (ws, we) else zoom_param(s, e, ws)
    if shown != url_zoom:
        if shown is None:
            del st.query_params[ZOOM_PARAM]
        else:
            st.query_params[ZOOM_PARAM] = shown
    st.session_state[f"{vkey}_url"] = shown
    nums = [int(n) for n in steps["number"]]
    # The slider shows the steps the view covers and follows every zoom: its key carries the view,
    # and its value is always passed as a (first, last) pair, so it is always a range slider.
    # (Keyed by the view alone, and created without ``value`` once its key was in the session, it
    # came back as a single-value slider holding an int: "cannot unpack non-iterable int".)
    first, last = steps_in_view(steps, s, e)
    skey = f"steps_{vkey}_{s}_{e}"

    def on_steps() -> None:
        picked = step_pair(st.session_state.get(skey), nums)
        if picked is None:
            return
        ia, ib = nums.index(picked[0]), nums.index(picked[1])
        _set_view(vkey, int(steps["start_ns"].iloc[ia]), int(steps["end_ns"].iloc[ib]), ws, we)

    def zoom(factor: float) -> None:
        c, half = (s + e) / 2, (e - s) * factor / 2
        _set_view(vkey, int(c - half), int(c + half), ws, we)

    def pan(direction: int) -> None:
        d = (e - s) // 2 * direction
        _set_view(vkey, s + d, e + d, ws, we)

    def reset() -> None:
        st.session_state[vkey] = (ws, we)

    st.subheader("GPU busy over time")
    cols = st.columns([12, 1, 1, 1, 1], vertical_alignment="bottom")
    if len(nums) > 1 and first is not None and last is not None:
        cols[0].select_slider(
            "Steps shown",
            options=nums,
            value=(first, last),
            key=skey,
            on_change=on_steps,
            format_func=lambda n: f"#{n}",
        )
    whole = (s, e) == (ws, we)
    buttons: tuple[tuple[str, str, Callable[..., None], tuple[Any, ...], bool], ...] = (
        (":material/chevron_left:", "Pan left", pan, (-1,), s <= ws),
        (":material/chevron_right:", "Pan right", pan, (1,), e >= we),
        (":material/zoom_out:", "Zoom out (×4)", zoom, (4.0,), whole),
        (":material/fit_screen:", "Show the whole window", reset, (), whole),
    )
    for col, (icon, tip, fn, args, off) in zip(cols[1:], buttons, strict=True):
        col.button(
            "",
            icon=icon,
            help=tip,
            on_click=fn,
            args=args,
            disabled=off,
            width="stretch",
            key=f"{tip}_{vkey}",
        )

    view = _sawtooth_view(path, db.generation(), run_id, rank, s, e)
    fig, dev, n_act, kernels = view["fig"], view["dev"], view["n_act"], view["kernels"]
    nvml_on = view["nvml_on"]

    chart_key = f"saw_{vkey}_{s}_{e}"

    def on_box() -> None:
        picked = range_from_selection(st.session_state.get(chart_key), ws)
        if picked is not None:
            _set_view(vkey, picked[0], picked[1], ws, we)

    cats = (
        sorted(set(kernels["category"].fillna("other").astype(str)))
        if kernels is not None
        else None
    )
    cause_legend(
        nvml=nvml_on, categories=cats, envelope=kernels is None, wait=view.get("wait_on", False)
    )
    st.plotly_chart(fig, key=chart_key, on_select=on_box, selection_mode="box", config=PLOT_CONFIG)
    bucket_us = (e - s) / N_BUCKETS / 1e3
    detail = (
        f"each of the {n_act:,} GPU activities drawn"
        if kernels is not None
        else f"{N_BUCKETS:,} buckets of {ui.fmt_duration_us(bucket_us)}, {n_act:,} GPU activities"
        " (busy share per bucket, min–max band inside it)"
    )
    notes = [
        f"{(s - ws) / 1e6:,.3f}–{(e - ws) / 1e6:,.3f} ms of {(we - ws) / 1e6:,.1f} ms",
        detail,
        "drag across the plot to zoom in",
    ]
    if dev is not None:
        notes.insert(1, f"GPU {dev}")
    if nvml_on:
        notes.append("NVML utilization overlaid")
    st.caption(" · ".join(notes))
    return True


# -- breakdowns --------------------------------------------------------------------------------------


def breakdowns(b: run_views.Breakdowns) -> None:
    """Idle time per step by cause, and kernel time per step by category, side by side."""
    c1, c2 = st.columns(2)
    with c1:
        st.subheader("Idle time per step, by cause")
        if b.idle_us_by_cause:
            st.plotly_chart(
                figures.idle_by_cause(b.idle_us_by_cause, per_steps=b.n_steps), config=PLOT_CONFIG
            )
        else:
            st.caption("No idle time attributed.")
    with c2:
        st.subheader("Kernel time per step, by category")
        if b.kernel_us_by_category:
            st.plotly_chart(
                figures.kernel_categories(b.kernel_us_by_category, per_steps=b.n_steps),
                config=PLOT_CONFIG,
            )
        else:
            st.caption("No kernels.")


TOP_COLUMNS = (  # (header, key, how to show it, width), widths in % of the table
    ("Kernel", "name", None, 32),
    ("Category", "category", None, 11),
    ("Count", "count", "int", 6),
    ("Total / step", "total_us", "per_step", 9),
    ("Share", "share_pct", "pct", 6),
    ("Mean", "mean_us", "us", 8),
    ("Min", "min_us", "us", 8),
    ("Max", "max_us", "us", 8),
    ("TC", "tensor_core", "bool", 5),
    ("Dtype", "precision", None, 7),
)
TOP_NAME_CHARS = (
    44  # of a kernel's name in the top-kernels table (what its column shows; full name on hover)
)
TOP_HEADER_HELP = {"TC": "Runs on tensor cores", "Dtype": "Precision of the kernel's math"}


def top_kernels_html(t: run_views.TopKernels) -> str | None:
    """The top-kernels table as HTML: every column visible at 1440 px (fixed layout, long names cut
    with an ellipsis), each kernel's full name on hover (``title``). Text from the trace is
    escaped. ``None`` when the report lists no kernels."""
    top = t.rows
    if not top:
        return None
    steps = t.n_steps
    # names cut in the middle, never two alike (the column shows about this many characters)
    names = [str(r.name or "") for r in top]
    shown = dict(zip(names, run_views.kernel_labels(names, TOP_NAME_CHARS), strict=True))

    def cell(row: run_views.KernelRow, key: str, how: str | None) -> tuple[str, str]:
        v = getattr(row, key)
        if key == "name":
            full = str(row.name or "")
            short = shown.get(full) or str(row.short_name or full)
            tip = html_safe.st_html_attr(ui.plain(full, None))
            return html_safe.text(ui.plain(short, 200)), tip
        if v is None or (isinstance(v, float) and v != v):
            return "—", ""
        if how == "int":
            return f"{int(v):,}", ""
        if how == "per_step":
            return ui.fmt_duration_us(float(v) / steps), ""
        if how == "us":
            return ui.fmt_duration_us(float(v)), ""
        if how == "pct":
            return ui.fmt_pct(float(v)), ""
        if how == "bool":
            return ("yes" if v else "no"), ""
        return html_safe.text(ui.plain(str(v).replace("_", " "), 40)), ""

    cols = "".join(f'<col style="width:{w}%">' for _, _, _, w in TOP_COLUMNS)
    head = "".join(
        f'<th style="text-align:{"left" if how is None else "right"}"'
        + (f' title="{html_safe.st_html_attr(TOP_HEADER_HELP[h])}"' if h in TOP_HEADER_HELP else "")
        + f">{html_safe.text(h)}</th>"
        for h, _, how, _ in TOP_COLUMNS
    )
    body = []
    for row in top:
        tds = []
        for _, key, how, _ in TOP_COLUMNS:
            text, title = cell(row, key, how)
            align = "left" if how is None else "right"
            tip = f' title="{title}"' if title else ""
            tds.append(f'<td style="text-align:{align}"{tip}>{text}</td>')
        body.append(f"<tr>{''.join(tds)}</tr>")
    style = (
        "<style>.gs-top{width:100%;table-layout:fixed;border-collapse:collapse;font-size:0.85rem}"
        ".gs-top th,.gs-top td{padding:4px 6px;border-bottom:1px solid rgba(128,128,128,0.25);"
        "overflow:hidden;text-overflow:ellipsis;white-space:nowrap}"
        ".gs-top th{font-weight:600}</style>"
    )
    return (
        f'{style}<table class="gs-top"><colgroup>{cols}</colgroup>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def top_kernels(t: run_views.TopKernels) -> None:
    """The top-kernels table (:func:`top_kernels_html`) and what its columns hold."""
    st.subheader("Top kernels")
    table = top_kernels_html(t)
    if table is None:
        st.caption("No kernels.")
        return
    st.html(table)
    st.caption(
        f"Per kernel name, over the {t.n_steps} step(s) of the window: total per step, "
        "share of kernel time, mean/min/max per launch. Hover a name for the full one."
    )


def _fmt_value(key: str, v: Any) -> str:
    """A number of the analysis's JSON in display units, chosen by its key's suffix: durations in
    the unit that reads best (µs, ms, s), thousands separators, never an exponent."""
    if isinstance(v, bool) or v is None:
        return "—" if v is None else ("yes" if v else "no")
    if isinstance(v, int | float):
        f = float(v)
        if f != f:  # NaN
            return "—"
        if key.endswith("_us_per_step"):
            return ui.fmt_duration_us(f) + "/step"
        if key.endswith("_ns"):
            return ui.fmt_duration_us(f / 1e3)
        if key.endswith("_us"):
            return ui.fmt_duration_us(f)
        if key.endswith("_ms"):
            return ui.fmt_duration_us(f * 1e3)
        if key.endswith("_pct") or key == "share":
            return ui.fmt_pct(f)
        if key.endswith("_frac"):  # a fraction: shown as a share
            return ui.fmt_pct(100.0 * f)
        if "bytes" in key:
            return f"{f / 2**20:,.1f} MiB" + ("/step" if key.endswith("_per_step") else "")
        if key.endswith("_per_s"):
            return ui.fmt_rate(f, key.removesuffix("_per_s").replace("_", " ") + "/s")
        if key.endswith("_per_step"):
            return f"{ui.fmt_number(f)}/step"
        if key.startswith("assumed_speedup") or key.endswith("_speedup"):
            return f"{ui.fmt_number(f)}×"
        return ui.fmt_number(f)
    return EVIDENCE_VALUES.get(str(v), str(v).replace("_", " "))


#: Evidence keys whose words read better than the key itself (the rest: the key in words).
EVIDENCE_LABELS = {
    "busy": "GPU busy",
    "share": "share of the run",
    "idle": "GPU idle",
    "loader": "DataLoader",
    "memory_used_frac": "memory used",
    "small_grid_mean_sm_fill": "mean SM fill of small-grid kernels",
    "small_grid_kernel_share": "small-grid kernels' share of kernel time",
    "profiler_cap": "profiler cap",
    "capped_by_profiler": "capped by the profiler",
    "gpu": "GPU",
    "fp32_gemm": "fp32 GEMM time",
    "fp32_gemm_share": "fp32 GEMM share of the run",
    "tensor_core": "tensor-core share",
}
#: Evidence values (enumerations of the analysis) in words.
EVIDENCE_VALUES = {
    "single_process": "batches made in the training process (num_workers=0)",
    "workers": "worker processes",
}


def _label(key: str) -> str:
    """An evidence key in words, first letter capitalised: ``memory_used_frac`` -> ``Memory
    used``, ``idle_us_per_step`` -> ``GPU idle``."""
    for suffix in ("_us_per_step", "_us", "_ms", "_pct"):
        key = key.removesuffix(suffix)
    text = EVIDENCE_LABELS.get(key, key.removesuffix("_frac").replace("_", " "))
    return text[:1].upper() + text[1:]


def _rows_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Evidence rows as a table a person reads: durations in ms, missing values as "—" (never a
    literal ``None``), column names in words."""
    df = pd.DataFrame(rows)
    for col in list(df.columns):
        if col.endswith("_us_per_step"):
            df[_label(col) + " (ms/step)"] = pd.to_numeric(df.pop(col), errors="coerce") / 1e3
        elif col.endswith("_us"):
            df[_label(col) + " (ms)"] = pd.to_numeric(df.pop(col), errors="coerce") / 1e3
        elif col.endswith("_ns"):
            df[_label(col.removesuffix("_ns")) + " (ms)"] = (
                pd.to_numeric(df.pop(col), errors="coerce") / 1e6
            )
    for col in list(df.columns):
        if df[col].isna().any():  # Streamlit shows a missing cell as a literal "None"
            if pd.api.types.is_numeric_dtype(df[col]):
                df[col] = df[col].map(lambda x: "—" if x != x else ui.fmt_number(x))
            else:
                df[col] = df[col].map(lambda x: "—" if x is None or x != x else x).astype(object)
    return df.rename(columns={c: _label(c) for c in df.columns if "_" in c and "(" not in c})


def evidence(ev: Any) -> None:
    """A recommendation's evidence: its summary sentence, the numbers, any rows (calls, spans)."""
    if ev is None or ev == "" or ev == [] or ev == {}:
        return
    if isinstance(ev, str):
        st.markdown(ui.md(ev, None))
        return
    if isinstance(ev, list):
        if all(isinstance(x, str) for x in ev):
            st.markdown("\n".join(f"- {ui.md(x, None)}" for x in ev))
        else:
            st.dataframe(_rows_frame([x for x in ev if isinstance(x, dict)]), hide_index=True)
        return
    if not isinstance(ev, dict):
        st.write(ev)
        return
    if ev.get("summary"):
        st.markdown(ui.md(ev["summary"], None))
    scalars = {k: v for k, v in ev.items() if k != "summary" and not isinstance(v, dict | list)}
    if scalars:
        st.caption(
            " · ".join(
                f"{ui.md(_label(k))}: **{ui.md(_fmt_value(k, v))}**" for k, v in scalars.items()
            )
        )
    for k, v in ev.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            with st.expander(f"Evidence: {ui.md(_label(k))} ({len(v)})"):
                st.dataframe(_rows_frame(v), hide_index=True, width="stretch")
        elif isinstance(v, dict) and v:
            with st.expander(f"Evidence: {ui.md(_label(k))}"):
                st.json(json.loads(json.dumps(v, default=str)))


def recommendations(recs: list[run_views.Recommendation]) -> None:
    """The fixes of a report in the analysis's order (the largest estimate first): title, the
    estimate and its range in words ("at most" only after a proven bound), why it helps, the
    evidence, the fix's code and its id."""
    st.subheader("Fixes")
    if not recs:
        st.success(
            "No fixes to suggest: nothing in this run points at a known cause of idle GPU time."
        )
        return
    st.caption(run_views.FIX_ORDER_NOTE)
    for r in recs:
        with st.container(border=True):
            gain = r.gain_phrase  # the analysis's sentence: the estimate, its range, its footing
            head = f"**{ui.md(r.title or r.id, None)}**"
            if gain:
                head += f" — **{ui.md(gain, None)}**"
            st.markdown(head)
            if r.why:
                st.markdown(ui.md(r.why, None))
            evidence(r.evidence)
            if r.fix:
                st.code(str(r.fix), language="python")
            st.caption(f"id {ui.md_code(r.id)}")


# -- an NVML-only run ---------------------------------------------------------------------------------


def nvml_only_run(run_id: str) -> None:
    samples = data.nvml_samples(db.db_path(), run_id)
    if samples.empty:
        st.info("This run holds no samples.")
        return
    origin = int(samples["t_ns"].min())
    st.caption("An NVML series without a trace: utilization, memory and power as sampled.")
    st.plotly_chart(
        figures.nvml_lines(samples, GPU_UTIL_PCT, origin_ns=origin, title="GPU utilization"),
        config=PLOT_CONFIG,
    )
    c1, c2 = st.columns(2)
    if MEM_USED_BYTES in samples:
        mem = samples.assign(mem_used_gib=samples[MEM_USED_BYTES] / 2**30)
        c1.plotly_chart(
            figures.nvml_lines(
                mem, "mem_used_gib", origin_ns=origin, unit="GiB", title="Memory used"
            ),
            config=PLOT_CONFIG,
        )
    if POWER_W in samples:
        c2.plotly_chart(
            figures.nvml_lines(samples, POWER_W, origin_ns=origin, unit="W", title="Power"),
            config=PLOT_CONFIG,
        )


# -- compare -----------------------------------------------------------------------------------------


def lowest_rank(run_id: str) -> int:
    ranks = db.ranks_of(db.db_path(), db.generation(), run_id)
    return ranks[0] if ranks else 0


def aligned_panel(
    run_id: str,
    name: str,
    w: sawtooth.WindowView,
    first: int,
    count: int,
    tag: str,
    n_buckets: int = N_BUCKETS,
) -> sawtooth.BusyPanel:
    """One row of the aligned plot: steps ``first``..``first+count-1`` (1-based positions) of the
    run's lowest rank, with x = 0 at the start of step ``first``."""
    path = db.db_path()
    rank = lowest_rank(run_id)
    steps: pd.DataFrame = w.steps
    i0 = min(max(0, first - 1), len(steps) - 1)
    i1 = min(len(steps) - 1, i0 + max(1, count) - 1)
    s, e = int(steps["start_ns"].iloc[i0]), int(steps["end_ns"].iloc[i1])
    dev = data.primary_device(path, run_id, rank, w.start_ns, w.end_ns)
    busy = data.busy(path, run_id, rank, s, e, n_buckets, dev)
    shares = data.idle_shares(path, run_id, rank, dev, s, e, n_buckets)
    return sawtooth.BusyPanel(
        label=f"{tag} · {ui.plot_text(name)}",
        busy=busy,
        origin_ns=s,
        shares=shares,
        steps=steps.iloc[i0 : i1 + 1],
    )
