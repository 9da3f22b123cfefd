"""Compare: two runs side by side and as deltas, sawtooth plots aligned on a step, fixes resolved.

URL: ``/compare?a=<run id>&b=<run id>``; opening it anywhere shows the same comparison.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pandas as pd
import streamlit as st
from gpuscope.web import data, db, figures, model, ui, views

st.title("Compare")
path = db.db_path()
refs = {k: st.query_params.get(k) for k in ("a", "b")}
ids = {k: ui.resolve_or_stop(v, what=f"run {k}=") for k, v in refs.items()}

missing = [k for k in ("a", "b") if ids[k] is None]
if missing:
    runs = db.runs_df(path, db.generation())
    for k in missing:
        if refs[k]:
            st.error(
                f"Run **{ui.md(refs[k])}** (`{k}=` in the link) is not in this store. It may have been "
                "deleted, or the link comes from another gpuscope store.",
                icon=":material/search_off:",
            )
    trace_runs = runs[runs["kind"] == "trace"]
    if len(trace_runs) < 2:
        st.info(
            "Comparing needs two trace runs: upload them on the Runs page.", icon=":material/info:"
        )
        st.page_link("screens/runs.py", label="Runs", icon=":material/table_rows:")
        st.stop()
    opts = list(trace_runs["run_id"])
    labels = dict(zip(trace_runs["run_id"], trace_runs["name"], strict=True))
    a0, b0 = ui.default_pair(trace_runs)
    a0 = ids["a"] or a0
    b0 = ids["b"] or b0
    c1, c2, c3 = st.columns([3, 3, 1], vertical_alignment="bottom")
    fmt = lambda i: f"{ui.plain(labels[i])}  ·  {i}"  # noqa: E731
    a = c1.selectbox("Before (A)", opts, index=opts.index(a0), format_func=fmt)
    b = c2.selectbox("After (B)", opts, index=opts.index(b0) if b0 in opts else 0, format_func=fmt)
    if c3.button("Compare", type="primary", disabled=a == b):
        st.query_params.from_dict({"a": a, "b": b})
        st.rerun()
    st.stop()

a_id, b_id = str(ids["a"]), str(ids["b"])
if refs["a"] != a_id or refs["b"] != b_id:
    st.query_params.from_dict({"a": a_id, "b": b_id})
row_a = db.run_row(path, db.generation(), a_id)
row_b = db.run_row(path, db.generation(), b_id)
assert row_a is not None and row_b is not None
name_a, name_b = row_a["name"], row_b["name"]

st.markdown(
    f"**A** · {ui.md(name_a)} {ui.md_code(a_id)}  →  **B** · {ui.md(name_b)} {ui.md_code(b_id)}",
    help=ui.hover(f"A: {name_a} → B: {name_b}")
    if max(map(len, (name_a, name_b))) > ui.NAME_MAX
    else None,
)
c1, c2, _ = st.columns([1, 1, 5], vertical_alignment="center")
base = (st.context.url or "").split("?")[0]
if not base.endswith("/compare"):
    base = base.rstrip("/") + "/compare" if base else "/compare"
with c1.popover("Copy link", icon=":material/link:"):
    st.caption("This link opens the same comparison in any browser that reaches this dashboard:")
    st.code(f"{base}?{urlencode({'a': a_id, 'b': b_id})}", language=None)
c2.page_link(
    "screens/compare.py",
    label="Swap A/B",
    icon=":material/swap_horiz:",
    query_params={"a": b_id, "b": a_id},
)

if row_a["kind"] != "trace" or row_b["kind"] != "trace":
    st.warning("Only trace runs can be compared; one of these is an NVML series.")
    st.stop()

rep_a = rep_b = comparison = None
with views.section("Analysis"), st.spinner("Analysing…"):
    rep_a = data.report(path, a_id, None)
    rep_b = data.report(path, b_id, None)
if rep_a is not None and rep_b is not None:
    # without it the page falls back to the two reports' own figures, and says the comparison failed
    with views.section("The comparison of A and B"):
        comparison = data.comparison(path, a_id, b_id)

# -- headline deltas ---------------------------------------------------------------------------------
if rep_a is not None and rep_b is not None:
    with views.section("Headline and all metrics"):
        rows = model.comparison_rows(comparison) if comparison else model.compare_rows(rep_a, rep_b)
        mine = {r.metric: r for r in model.compare_rows(rep_a, rep_b)}
        by_name = {**mine, **{r.metric: r for r in rows if r.section == "Headline"}}
        sp = (comparison or {}).get("speedup") or model.speedup(rep_a, rep_b)
        peak_note = model.peak_difference(rep_a, rep_b)
        tp_key, tp_label, tp_unit = model.throughput_kind(rep_a, rep_b)
        # (label, A, B, unit, formatter, lower is better, help)
        cards_spec: list[tuple[str, float | None, float | None, str, Any, bool, str]] = [
            (
                "Step time",
                by_name["Step time (mean)"].a,
                by_name["Step time (mean)"].b,
                "ms",
                ui.fmt_ms,
                True,
                "Mean step time: window ÷ steps.",
            ),
            (
                tp_label,
                model.num(model.get(rep_a, "throughput", tp_key)),
                model.num(model.get(rep_b, "throughput", tp_key)),
                tp_unit,
                lambda v, u=tp_unit: ui.fmt_rate(v, u),
                False,
                "Work per second: the trace's samples/tokens per step ÷ step time.",
            ),
            (
                "Achieved TFLOP/s",
                model.num(rep_a.get("achieved_tflops")),
                model.num(rep_b.get("achieved_tflops")),
                "TFLOP/s",
                ui.fmt_tflops,
                False,
                "Model FLOPs per step ÷ step time.",
            ),
            (
                "MFU (different peaks)" if peak_note else "MFU",
                by_name["MFU"].a,
                by_name["MFU"].b,
                "pp",
                ui.fmt_pct,
                False,
                peak_note
                or "Achieved TFLOP/s ÷ the GPU's peak for the dtype; A and B use the same peak.",
            ),
            (
                "GPU busy",
                by_name["GPU busy"].a,
                by_name["GPU busy"].b,
                "pp",
                ui.fmt_pct,
                False,
                "Share of the window with any GPU activity.",
            ),
            (
                "Idle per step",
                by_name["Idle time (per step)"].a,
                by_name["Idle time (per step)"].b,
                "ms",
                ui.fmt_ms,
                True,
                "GPU idle time per step, all causes.",
            ),
        ]
        # two rows of three: the work done (time, throughput, FLOP/s), then how well (MFU, busy, idle)
        cards = [*st.columns(3), *st.columns(3)]
        for col, (label, va, vb, unit, fmt_v, lower, why) in zip(cards, cards_spec, strict=True):
            col.metric(
                label,
                fmt_v(vb),
                delta=ui.delta_pct(va, vb)
                if unit in ("tokens/s", "samples/s")
                else ui.delta_str(va, vb, unit),
                delta_color="inverse" if lower else "normal",
                border=True,
                help=f"{why} A: {fmt_v(va)} → B: {fmt_v(vb)}.",
            )
        if peak_note:
            st.caption(f":material/warning: {ui.md(peak_note, None)}")
        sp_text = (comparison or {}).get("speedup_text")
        if sp_text:  # by throughput where the work per step is known (analysis.compare)
            st.markdown(f"**{ui.md(sp_text, None)}**")
        elif sp:
            st.markdown(
                f"B runs a step **{sp:.2f}×** {'faster' if sp >= 1 else 'slower'} than A "
                "(step times compare equal work only if the batch is the same)."
            )
        for note in (comparison or {}).get("notes") or []:
            st.caption(f"Note: {ui.md(note, None)}")

        table = pd.DataFrame(
            [
                {
                    "section": r.section,
                    "metric": r.metric,
                    "unit": r.unit,
                    "A": ui.fmt_number(r.a),
                    "B": ui.fmt_number(r.b),
                    "Δ (B − A)": ui.fmt_signed(r.delta),
                    "Δ %": ui.fmt_signed(r.delta_pct, " %", digits=1),
                    "": "better" if r.better else ("worse" if r.better is False else ""),
                }
                for r in rows
            ]
        )
        st.subheader("All metrics")
        st.dataframe(
            table,
            hide_index=True,
            width="stretch",
            column_config={
                "section": st.column_config.TextColumn("Section"),
                "metric": st.column_config.TextColumn("Metric", width="medium"),
                "A": st.column_config.TextColumn(f"A · {ui.plain(name_a, 40)}"),
                "B": st.column_config.TextColumn(f"B · {ui.plain(name_b, 40)}"),
                "Δ (B − A)": st.column_config.TextColumn("Δ (B − A)"),
                "Δ %": st.column_config.TextColumn("Δ %"),
            },
        )

# -- aligned sawtooth plots ---------------------------------------------------------------------------
st.subheader("GPU busy, aligned on a step")
with views.section("Aligned plot"):
    try:
        wa = data.window(path, a_id, views.lowest_rank(a_id))
        wb = data.window(path, b_id, views.lowest_rank(b_id))
    except data.AnalysisUnavailable as e:
        st.warning(f"No aligned plot: {e}.")
    else:
        na, nb = len(wa["steps"]), len(wb["steps"])
        n_common = max(1, min(na, nb))
        c1, c2 = st.columns(2)
        first = c1.number_input(
            "Align on step (position in each run)",
            min_value=1,
            max_value=n_common,
            value=1,
            step=1,
            key=f"align_{a_id}_{b_id}",
        )
        count = c2.number_input(
            "Steps to show",
            min_value=1,
            max_value=n_common - first + 1,
            value=min(3, n_common - first + 1),
            step=1,
            key=f"count_{a_id}_{b_id}_{first}",
        )
        panels = [
            views.aligned_panel(rid, name, w, int(first), int(count), tag)
            for rid, name, w, tag in ((a_id, name_a, wa, "A"), (b_id, name_b, wb, "B"))
        ]
        views.cause_legend()
        st.plotly_chart(figures.aligned_sawtooth(panels), config=views.PLOT_CONFIG)
        st.caption(
            f"x = ms since the start of step {int(first)} of each run (A has {na} steps, B {nb})."
        )

if rep_a is None or rep_b is None:
    st.stop()

# -- idle causes side by side --------------------------------------------------------------------------
st.subheader("Idle time per step, by cause")
with views.section("Idle time by cause"):
    st.plotly_chart(
        figures.idle_compare(
            model.get(rep_a, "idle", "causes") or {},
            model.get(rep_b, "idle", "causes") or {},
            labels=(f"A · {ui.plot_text(name_a, 40)}", f"B · {ui.plot_text(name_b, 40)}"),
            a_steps=model.steps_of(rep_a),
            b_steps=model.steps_of(rep_b),
        ),
        config=views.PLOT_CONFIG,
    )

# -- fixes ------------------------------------------------------------------------------------------------
st.subheader("Fixes")
with views.section("Fixes"):
    status = model.fix_status(rep_a, rep_b, comparison)
    c1, c2, c3 = st.columns(3)
    with c1:
        st.markdown(f"**Resolved in B** ({len(status.resolved)})")
        for r in status.resolved:
            st.markdown(
                f":green[:material/check_circle:] {ui.md(r.get('title') or r.get('id'), None)}"
            )
        if not status.resolved:
            st.caption("None of A's fixes is resolved in B.")
    with c2:
        st.markdown(f"**Still open** ({len(status.remaining)})")
        for ra, rb in status.remaining:
            ga, gb = model.num(ra.get("max_gain_pct")), model.num(rb.get("max_gain_pct"))
            gain = (
                f" — bound {ui.fmt_pct(ga)} → {ui.fmt_pct(gb)}"
                if ga is not None or gb is not None
                else ""
            )
            st.markdown(
                f":orange[:material/pending:] {ui.md(rb.get('title') or rb.get('id'), None)}{gain}"
            )
        if not status.remaining:
            st.caption("Nothing left over from A.")
    with c3:
        st.markdown(f"**New in B** ({len(status.new)})")
        for r in status.new:
            st.markdown(f":red[:material/error:] {ui.md(r.get('title') or r.get('id'), None)}")
        if not status.new:
            st.caption("B raised no new issue.")
    with st.expander("B's fixes in full"):
        views.recommendations(rep_b)
