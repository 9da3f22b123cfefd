"""Run: headline cards, the sawtooth plot, idle causes, kernel categories, top kernels, fixes.

URL: ``/run?run=<run id>&rank=<rank>``.
"""

from __future__ import annotations

import streamlit as st
from gpuscope.analysis.run_views import fixes_lead
from gpuscope.web import (
    critical_path_view,
    data,
    db,
    memory_ops_views,
    perfetto_panel,
    report_button,
    ui,
    views,
)

ui.show_flash()
path = db.db_path()
ref = st.query_params.get("run")
run_id = ui.resolve_or_stop(ref)

if run_id is None:
    st.title("Run")
    runs = db.runs_df(path, db.generation())
    if ref or runs.empty:
        ui.not_found("run", ref)
        st.stop()
    labels = dict(zip(runs["run_id"], runs["name"], strict=True))
    pick = st.selectbox(
        "Open a run",
        list(runs["run_id"]),
        index=None,
        placeholder="Choose a run",
        format_func=lambda i: f"{ui.plain(labels[i])}  ·  {i}",
    )
    if pick:
        st.query_params["run"] = pick
        st.rerun()
    st.stop()

if ref != run_id:  # a prefix or a name: show the canonical id in the URL
    st.query_params["run"] = run_id

row = db.run_row(path, db.generation(), run_id)
assert row is not None
st.title(ui.md(row["name"]), help=ui.hover(row["name"]), anchor=False)
st.caption(views.run_caption(row))

if row["kind"] != "trace":
    views.nvml_only_run(run_id)
    st.stop()

# Without a rank in the URL (or with one the run lacks), the page opens on the job's pace-setter
# (views.opening_rank) and says so while that rank is shown; the URL's rank wins.
opened_key = f"run_opened_on_{run_id}"
all_ranks = db.ranks_of(path, db.generation(), run_id)
if len(all_ranks) > 1 and st.query_params.get("rank") not in {str(r) for r in all_ranks}:
    with views.section("Pace-setter"), st.spinner("Finding the rank the others wait for…"):
        st.session_state[opened_key] = views.opening_rank(data.job(path, run_id))
opened: tuple[int, str] | None = st.session_state.get(opened_key)
rank = views.rank_selector(run_id, key="run_rank", default=opened[0] if opened else None)
if opened is not None and opened[0] == rank and opened[1]:
    st.caption(opened[1])
report_button.download_report(run_id, rank, name=str(row["name"]), key=f"run_{run_id}_{rank}")

report = None
with views.section("Analysis"), st.spinner("Analysing…"):
    report = data.run_report(path, run_id, rank)

# The first screen (headline, busy-time plot) is drawn first; the sections below it, and the rank
# overview between them, once the browser has drawn the plot (views.after_first_paint). Their
# containers stand in the same places in every run, so the plot's element stays the same one.
painted = views.first_paint_done(f"run_{run_id}")
if report is not None:
    with views.section("Warnings"):
        views.evidence_banner(data.banners(path, run_id, rank))
    with views.section("Headline"):
        views.headline_cards(data.headline(path, run_id, rank))
    with views.section("Profiler cost"):
        views.profiler_note(data.banners(path, run_id, rank).profiler)
    ranks_box = st.container()
plot = False
with views.section("Busy-time plot"):
    plot = views.sawtooth_panel(run_id, rank, key="run")
if not painted:  # once per run: a rank change draws everything at once
    views.after_first_paint(
        f"run_{run_id}", plot=plot, label="Loading the breakdowns, top kernels and fixes…"
    )
    st.stop()

if report is not None:
    with ranks_box, views.section("Ranks"):
        views.rank_overview(run_id, data.rank_overview(path, run_id, rank))
    with views.section("Memory line"):
        memory_ops_views.memory_line(run_id, rank, view_key="run")
with views.section("Open in Perfetto"):
    perfetto_panel.perfetto_panel(run_id, rank, str(row["name"]))
if report is not None:
    with views.section("Breakdowns"):
        views.breakdowns(data.breakdowns(path, run_id, rank))
    with views.section("Top kernels"):
        views.top_kernels(data.top_kernels(path, run_id, rank))
    with views.section("Fixes"), st.spinner("Estimating each fix on the critical path…"):
        job = data.job(path, run_id)
        if job.distributed:
            st.caption(fixes_lead(job))
        views.recommendations(data.fixes(path, run_id, job.fix_rank))
    with views.section("Critical path"), st.spinner("Tracing the critical path…"):
        critical_path_view.show(data.critical_path(path, run_id, rank))
    with views.section("Memory"):
        memory_ops_views.memory(data.report_obj(path, run_id, rank).memory)
    with views.section("Roofline"):
        memory_ops_views.roofline(data.roofline(path, run_id, rank))
    with views.section("Modules"):
        memory_ops_views.modules(data.modules(path, run_id, rank))
views.keep_anchor_in_view()  # a section named in the URL (#fixes) stays in view
