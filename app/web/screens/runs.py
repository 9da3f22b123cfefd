"""Runs: upload traces, list and search runs, rename / tag / delete them, pick two to compare."""

from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd
import streamlit as st
from gpuscope.analysis import run_views
from gpuscope.analysis.run_views import RunSummary
from gpuscope.store import Connection
from gpuscope.vocabulary.errors import GpuscopeError
from gpuscope.web import auth, data, db, ui
from gpuscope.web.samples import SAMPLE_TAG
from gpuscope.web.uploads import (
    ONE_RUN,
    SEPARATE,
    UPLOAD_TYPES,
    ingest_uploads,
    is_series_name,
    keep_file_url_answers,
    run_name_for,
    trace_files,
)

# Column widths (px) that fit every column of the list in the 1440 px window the docs' shots use
# (the page's side padding narrowed below): a run id, a date and two short tags whole, longer
# text cut.
RUN_TABLE_WIDTHS = {
    "name": 110,
    "run_id": 104,
    "created": 120,
    "gpu": 96,
    "ranks": 52,
    "step_ms": 70,
    "pace_setter": 80,
    "busy_pct": 68,
    "wait_pct": 66,
    "mfu_pct": 56,
    "tags": 150,
    "uploaded_by": 90,
}
W = RUN_TABLE_WIDTHS

st.title("Runs")
# The list has twelve columns: this page narrows the main pane's side padding (5rem in the wide
# layout) so that each shows whole at 1440 px (RUN_TABLE_WIDTHS).
st.html("<style>[data-testid='stMainBlockContainer']{padding-left:1rem;padding-right:1rem}</style>")
ui.show_flash()

runs = db.runs_df(db.db_path(), db.generation())
viewer = auth.current()  # None: sign-in is off, and everyone who reaches the page may change runs

# -- upload --------------------------------------------------------------------------------------
# Open until the user has uploaded once: while the store holds nothing, or only the sample runs.
only_samples = runs.empty or all(SAMPLE_TAG in list(t or []) for t in runs["tags"])
# This page starts script runs of its own (below: the figures filled in); a file chosen meanwhile
# must still reach the uploader (uploads.keep_file_url_answers).
keep_file_url_answers()
with st.expander("Upload traces", icon=":material/upload:", expanded=only_samples):
    upload_key = f"uploader_{st.session_state.get('upload_round', 0)}"
    dropped = st.file_uploader(
        "PyTorch profiler traces (.json, .json.gz): one file, the rank files of one run, "
        "or a run's folder dropped here; an NVML series (.jsonl) with them is attached to the run, "
        "a torch.cuda.memory._dump_snapshot .pickle goes with them",
        type=UPLOAD_TYPES,
        accept_multiple_files=True,
        key=upload_key,
    )
    files, left_out = trace_files(list(dropped or []))
    n_series = sum(is_series_name(f.name) for f in files)
    if n_series and len(files) > n_series:
        st.caption(
            f"{n_series} NVML series ({', '.join(ui.md(f.name, 60) for f in files if is_series_name(f.name))})"
            " will be attached to the run: its utilization is drawn over the busy plot."
        )
    if left_out:
        st.caption(
            f"{len(files)} file(s) form the run; left out (not traces): "
            + ", ".join(ui.md(n, 60) for n in left_out[:8])
            + (f" and {len(left_out) - 8} more" if len(left_out) > 8 else "")
        )
    mode = ONE_RUN
    if files and len(files) > 1:
        mode = st.radio("These files are", [ONE_RUN, SEPARATE], horizontal=True, key="upload_mode")
    suggested = run_name_for(files) if files and mode == ONE_RUN else ""
    c1, c2 = st.columns(2)
    name = c1.text_input(
        "Name",
        value=suggested,
        key=f"upload_name_{upload_key}_{abs(hash(tuple(f.name for f in files)))}_{mode}",
        help="Filled in from the folder or file names, else from the trace (model, host, date); "
        "change it as you like. Empty: each file is named that way at ingest.",
    )
    tags_text = c2.text_input("Tags (optional, comma-separated)", key=f"upload_tags_{upload_key}")
    untraced = st.number_input(
        "Step time without the profiler, ms (optional)",
        min_value=0.0,
        value=None,
        step=0.1,
        format="%.3f",
        key=f"upload_untraced_{upload_key}",
        help="Time N steps with the profiler off (synchronise CUDA once before and once after, "
        "not at every step: a sync per step slows a host-bound job) and enter ms per step: "
        "host-side findings are then capped at what can exist without the profiler. Traces "
        "recorded with gpuscope.capture carry it already.",
    )
    if st.button("Ingest", type="primary", disabled=not files, key="ingest"):
        bar = st.progress(0.0, text="Starting…")

        def show(frac: float, text: str) -> None:
            bar.progress(min(max(frac, 0.0), 1.0), text=text)

        later = run_views.SummaryLater(run_views.store_after_ingest)
        try:
            with db.writing() as cur:
                results = ingest_uploads(
                    cur,
                    list(files or []),
                    mode=mode,
                    name=name.strip() or None,
                    tags=ui.parse_tags(tags_text),
                    progress=show,
                    untraced_step_ms=untraced or None,
                    uploaded_by=auth.uploader(),
                    summary=later,
                )
                # as after `gpuscope ingest`: expired snapshots and unneeded files go
                upkeep = (
                    cur.maintain_after_ingest() if any(not r.duplicate for r in results) else None
                )
        except GpuscopeError as e:
            bar.empty()
            st.error(f"**Nothing was stored.** {ui.md(str(e), None)}", icon=":material/error:")
        else:
            st.session_state["upload_round"] = st.session_state.get("upload_round", 0) + 1
            new = [r for r in results if not r.duplicate]
            dups = [r for r in results if r.duplicate]
            msgs = [
                f"Stored run **{ui.md(r.name)}** ({ui.md_code(r.run_id)}, {r.n_ranks} rank(s), "
                f"{r.n_events:,} events)."
                for r in new
            ]
            msgs += [
                f"**{ui.md(r.name)}** was stored before as run {ui.md_code(r.run_id)}."
                for r in dups
            ]
            if upkeep:  # the runs are stored; the next upload or ingest maintains again
                msgs.append(f"(Note: {ui.md(upkeep)}.)")
            msgs += [  # stored and whole: its page computes the summary from its events
                f"Run {ui.md_code(run_id)}'s summary could not be computed after the upload "
                f"({ui.md(why)}): its page computes it when it opens."
                for run_id, why in later.failed
            ]
            kind = "warning" if later.failed else "success" if new else "info"
            ui.flash(kind, " ".join(msgs))
            if len(results) == 1:
                st.switch_page("screens/run.py", query_params={"run": results[0].run_id})
            st.rerun()

if runs.empty:
    st.info(
        "No runs yet. Upload a trace above, or run `gpuscope ingest TRACE.json.gz` "
        "(from any terminal, with this page open) and reload.",
        icon=":material/info:",
    )
    st.stop()

# -- list ----------------------------------------------------------------------------------------
query = st.text_input(
    "Search",
    placeholder="name, run id, tag or GPU",
    key="runs_search",
    label_visibility="collapsed",
)

# Each run's figures are computed once per server (then instant). The list is drawn first with the
# figures already known; the runs not yet analysed are computed after the whole page is drawn,
# newest first, for at most data.SUMMARY_BUDGET_S per script run (always one), and the page reruns
# until all are in: a run whose analysis is slow (many ranks, a loaded machine) never holds back
# the list (empty cells read "—" meanwhile).
metrics: list[RunSummary] = []
pending_ids: list[str] = []
for rid, kind in zip(runs["run_id"], runs["kind"], strict=True):
    m = data.known_summary(rid) if kind == "trace" else data.NO_FIGURES
    if m is None:
        pending_ids.append(rid)
        m = data.NO_FIGURES
    metrics.append(m)
pending = len(pending_ids)
# One slot whether or not runs are pending: the elements below keep their places across the
# page's own reruns (no element shown twice while one run replaces the other).
note = st.empty()
if pending:
    note.caption(
        f":material/hourglass_top: Analysing {pending} run(s): their figures appear here as "
        "they are ready."
    )
failed = [str(n) for n, r in zip(runs["name"], runs["run_id"], strict=True) if data.failed(r)]
if failed:
    st.caption(
        f":material/error: {len(failed)} run(s) could not be analysed, so their figures are empty: "
        + ", ".join(ui.md(n, 40) for n in failed[:5])
        + (" …" if len(failed) > 5 else "")
        + ". Open one to see why; the details are in the server log."
    )
owners = auth.owners(db.cursor())  # run id -> uploaded_by (read fresh: it decides the controls)
worlds = data.world_sizes(db.db_path(), db.generation())
table = pd.DataFrame(
    {
        "name": runs["name"],
        "run_id": runs["run_id"],  # second: in view however many figure columns follow
        "created": pd.to_datetime(runs["created_at"]),
        "gpu": runs["gpu_name"].fillna("—").map(ui.short_gpu),
        "ranks": [  # "1 of 2" while a job's nodes still report (issue 20)
            data.ranks_of_world(n, worlds.get(r))
            for n, r in zip(runs["n_ranks"], runs["run_id"], strict=True)
        ],
        # float columns (NaN where a run has no figure): numeric sorts, the placeholder shown
        "step_ms": pd.Series([m.step_ms for m in metrics], dtype="float64"),
        "pace_setter": [
            f"rank {m.pace_setter}" if m.pace_setter is not None else "—" for m in metrics
        ],
        "busy_pct": pd.Series([m.busy_pct for m in metrics], dtype="float64"),
        "wait_pct": pd.Series([m.wait_pct for m in metrics], dtype="float64"),
        "mfu_pct": pd.Series([m.mfu_pct for m in metrics], dtype="float64"),
        "tags": runs["tags"],
        "uploaded_by": [owners.get(r) or "—" for r in runs["run_id"]],
    }
)
if query.strip():
    q = query.strip().lower()
    hay = (
        table["name"]
        + " "
        + table["run_id"]
        + " "
        + runs["gpu_name"].fillna("")
        + " "
        + table["tags"].map(lambda t: " ".join(t))
    ).str.lower()
    table = table[hay.str.contains(q, regex=False)].reset_index(drop=True)

event = st.dataframe(
    table,
    hide_index=True,
    width="stretch",
    on_select="rerun",
    selection_mode="multi-row",
    key=f"runs_table_{db.generation()}",
    placeholder="—",  # a figure the run has not (an NVML series, a run still being analysed)
    column_config={
        "name": st.column_config.TextColumn("Name", width=W["name"]),
        "created": st.column_config.DatetimeColumn(
            "Date (UTC)", format="YYYY-MM-DD HH:mm", width=W["created"]
        ),
        "gpu": st.column_config.TextColumn(
            "GPU", width=W["gpu"], help="The GPU the trace names (without “NVIDIA”)"
        ),
        "ranks": st.column_config.TextColumn(
            "Ranks",
            width=W["ranks"],
            help="Ranks stored; '1 of 2' while the job's other nodes have not reported",
        ),
        "step_ms": st.column_config.NumberColumn(
            "Step time",
            width=W["step_ms"],
            format="%.1f ms",
            help="The job step time: the median period between step completions (a step completes "
            "when its last rank's work for it ends), the same whichever rank; as on the Run page",
        ),
        "pace_setter": st.column_config.TextColumn(
            "Pace-setter",
            width=W["pace_setter"],
            help="The rank the others wait for (a run of several ranks): its fixes are the ones "
            "that shorten the job's step",
        ),
        "busy_pct": st.column_config.NumberColumn(
            "GPU busy",
            width=W["busy_pct"],
            format="%.1f %%",
            help="GPU busy over every rank's window, as on the Run page's verdict",
        ),
        "wait_pct": st.column_config.NumberColumn(
            "Waiting",
            width=W["wait_pct"],
            format="%.1f %%",
            help="Of GPU busy, the part of every rank's window spent in collectives waiting for the last rank "
            "(inside GPU busy)",
        ),
        "mfu_pct": st.column_config.NumberColumn(
            "MFU",
            width=W["mfu_pct"],
            format="%.1f %%",
            help="The pace-setter's FLOPs per step over the job step time",
        ),
        "tags": st.column_config.ListColumn("Tags", width=W["tags"]),
        "uploaded_by": st.column_config.TextColumn(
            "Uploaded by",
            width=W["uploaded_by"],
            help="The signed-in user who uploaded the run (— : not recorded)",
        ),
        "run_id": st.column_config.TextColumn("Run id", width=W["run_id"]),
    },
)
if table.empty:
    st.caption(f"No run matches “{ui.md(query)}”.")
selected_rows = list(getattr(getattr(event, "selection", None), "rows", []) or [])
selected = [table.iloc[i] for i in selected_rows if i < len(table)]

# -- actions on the selection ----------------------------------------------------------------------


def change_runs(
    ids: list[str], change: Callable[[Connection], None], *, refused_title: str, done: str
) -> None:
    """Apply ``change`` to runs ``ids`` under the write lock, after checking again that the viewer
    may change them (never trust the button alone); then say so and rerun, or show the refusal."""
    with db.writing() as cur:
        refused = auth.refusal(cur, ids, viewer)
        if refused is None:
            change(cur)
    if refused is not None:
        st.error(f"**{refused_title}** {ui.md(refused, None)}", icon=":material/lock:")
    else:
        ui.flash("success", done)
        st.rerun()


if not selected:
    st.caption(
        "Select one run in the table to open, rename, tag or delete it; select two to compare them."
    )
else:
    first = selected[0]
    rid = str(first["run_id"])
    ids = [str(r["run_id"]) for r in selected]
    # who may change these runs (sign-in on: the uploader or an admin); checked again on write
    may_rename, why_not_rename = auth.may_change(owners.get(rid), viewer)
    verdicts = [auth.may_change(owners.get(i), viewer) for i in ids]
    may_delete = all(ok for ok, _ in verdicts)
    why_not_delete = next((why for ok, why in verdicts if not ok), "")
    # the selection in full (it wraps), so the buttons' labels stay short and never clip
    st.markdown(
        "**Selected:** "
        + ", ".join(f"{ui.md(r['name'], None)} {ui.md_code(r['run_id'])}" for r in selected[:4])
        + (f" and {len(selected) - 4} more" if len(selected) > 4 else "")
    )
    cols = st.columns([2, 2, 3, 3])
    cols[0].page_link(
        "screens/run.py",
        label="Open the run",
        icon=":material/insights:",
        query_params={"run": rid},
        help=f"Open {ui.md(first['name'], None)}",
    )
    if len(selected) >= 2:
        a, b = sorted(selected[:2], key=lambda r: r["created"])
        cols[1].page_link(
            "screens/compare.py",
            label="Compare the two",
            icon=":material/compare_arrows:",
            query_params={"a": str(a["run_id"]), "b": str(b["run_id"])},
        )
    with cols[2].form(f"rename_{rid}", border=False):
        new_name = st.text_input(
            "Rename", value=str(first["name"]), key=f"rename_text_{rid}", disabled=not may_rename
        )
        new_tags = st.text_input(
            "Tags (comma-separated)",
            value=", ".join(first["tags"]),
            key=f"tags_text_{rid}",
            disabled=not may_rename,
        )
        if st.form_submit_button("Save name and tags", disabled=not may_rename):
            clean = new_name.strip()
            if not clean:
                st.error("A run needs a name.")
            else:
                tags = ui.parse_tags(new_tags)
                change_runs(
                    [rid],
                    lambda cur: ui.rename_and_tag(cur, rid, clean, tags),
                    refused_title="Not saved.",
                    done=f"Saved **{ui.md(clean)}**.",
                )
        if not may_rename:
            st.caption(f":material/lock: {ui.md(why_not_rename, None)}")
    with cols[3]:
        label = f"Delete {len(ids)} runs" if len(ids) > 1 else f"Delete {ui.md(first['name'], 40)}"
        sure = st.checkbox(
            "Yes, delete: this cannot be undone",
            key=f"confirm_delete_{'_'.join(ids)}",
            disabled=not may_delete,
        )
        if st.button(
            label,
            icon=":material/delete:",
            disabled=not (sure and may_delete),
            key=f"delete_{'_'.join(ids)}",
            help=ui.md(why_not_delete, None) or None,
        ):

            def delete_all(cur: Connection) -> None:
                for i in ids:
                    ui.delete(cur, i)

            change_runs(
                ids,
                delete_all,
                refused_title="Nothing was deleted.",
                done=f"Deleted {len(ids)} run(s).",
            )
        if not may_delete:
            st.caption(f":material/lock: {ui.md(why_not_delete, None)}")

# -- compare any two -------------------------------------------------------------------------------
trace_runs = runs[runs["kind"] == "trace"]
if len(trace_runs) >= 2:
    st.subheader("Compare two runs")
    ids = list(trace_runs["run_id"])
    labels = dict(zip(trace_runs["run_id"], trace_runs["name"], strict=True))
    a0, b0 = ui.default_pair(trace_runs)
    if len(selected) == 2:
        sa, sb = sorted(selected, key=lambda r: r["created"])
        a0, b0 = str(sa["run_id"]), str(sb["run_id"])
    c1, c2, c3 = st.columns([3, 3, 2], vertical_alignment="bottom")
    fmt = lambda i: f"{ui.plain(labels[i])}  ·  {i}"  # noqa: E731
    a = c1.selectbox(
        "Before (A)", ids, index=ids.index(a0), format_func=fmt, key=f"cmp_a_{a0}_{b0}"
    )
    b = c2.selectbox("After (B)", ids, index=ids.index(b0), format_func=fmt, key=f"cmp_b_{a0}_{b0}")
    c3.page_link(
        "screens/compare.py",
        label="Compare",
        icon=":material/compare_arrows:",
        query_params={"a": a, "b": b},
        disabled=a == b,
    )

# -- runs still to analyse, once the page is drawn: then a rerun shows their figures ---------------
if pending:
    deadline = time.monotonic() + data.SUMMARY_BUDGET_S
    for i, rid in enumerate(pending_ids):
        if i and time.monotonic() >= deadline:
            break
        data.summary(rid)
    st.rerun()
