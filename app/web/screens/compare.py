"""Compare: two runs side by side and as deltas, sawtooth plots aligned on a step, fixes resolved.

URL: ``/compare?a=<run id>&b=<run id>``; opening it anywhere shows the same comparison.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pandas as pd
import streamlit as st
from gpuscope.web import data, db, figures, report_button, ui, views

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
if refs["a"] != a_id or refs["b"] != b_id:  # canonical ids; the rest of the view stays
    st.query_params.update({"a": a_id, "b": b_id})
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
link_slot = c1.empty()  # filled once the aligned plot has put its step range in the URL
if c2.button("Swap A/B", icon=":material/swap_horiz:", key="swap_ab"):
    # through the URL (a history entry: Back swaps back; a reload keeps the swap)
    st.query_params.update({"a": b_id, "b": a_id})
    st.rerun()


def _copy_link() -> None:
    """The Copy-link popover: the page's whole state (runs, order, aligned steps) as a URL."""
    with link_slot.popover("Copy link", icon=":material/link:"):
        st.caption(
            "This link opens the same comparison in any browser that reaches this dashboard:"
        )
        params = {"a": a_id, "b": b_id}
        params.update({k: v for k, v in st.query_params.to_dict().items() if k in ALIGN_PARAMS})
        st.code(f"{base}?{urlencode(params)}", language=None)


if row_a["kind"] != "trace" or row_b["kind"] != "trace":
    _copy_link()
    st.warning("Only trace runs can be compared; one of these is an NVML series.")
    st.stop()
report_button.download_report(
    b_id, None, name=f"{name_a}-vs-{name_b}", key=f"cmp_{a_id}_{b_id}", compare_to=a_id
)

rep_a = rep_b = view = None
with views.section("Analysis"), st.spinner("Analysing…"):
    rep_a = data.compared_report(path, a_id)
    rep_b = data.compared_report(path, b_id)
if rep_a is not None and rep_b is not None:
    with views.section("The comparison of A and B"):
        view = data.comparison(path, a_id, b_id)

# -- headline deltas ---------------------------------------------------------------------------------
# how each card's unit reads
CARD_FORMAT: dict[str, Any] = {"ms": ui.fmt_ms, "%": ui.fmt_pct, "TFLOP/s": ui.fmt_tflops}
CARD_HELP = {
    "step_time": "The job's step time: the median period between step completions, a step "
    "complete when its last rank is done, as on the Runs list (unprofiled: the median step timed "
    "with the profiler off).",
    "throughput": "Work per second: the trace's samples/tokens per step ÷ step time.",
    "achieved_tflops": "Model FLOPs per step ÷ step time.",
    "mfu": "The job's MFU: FLOPs per step over the job's step time, against the GPU's peak for "
    "the dtype; A and B use the same peak (unprofiled: over the step timed without the profiler).",
    "gpu_busy": "Share of the trace's window with any GPU activity, over every rank's window (only "
    "a trace can say it).",
    "idle_per_step": "GPU idle time per step, all causes (only a trace can say it).",
}
# a change's colour says whether it is good for the user, not which way the number moved
TONE_COLOR = {"good": "green", "bad": "red", "neutral": "gray"}
if view is not None:
    with views.section("Headline and all metrics"):
        if view.speedup_text:  # by throughput where the work per step is known
            st.markdown(f"**{ui.md(view.speedup_text, None)}**")
        if view.overhead_text:
            st.caption(f":material/timer: {ui.md(view.overhead_text, None)}.")
        # two rows of three: the work done (throughput, time, FLOP/s), then how well (MFU, busy, idle)
        cols = [*st.columns(3), *st.columns(3)]
        for col, card in zip(cols, view.cards, strict=True):
            fmt_v = CARD_FORMAT.get(card.unit, lambda v, u=card.unit: ui.fmt_rate(v, u))
            why = (view.peak_note if card.key == "mfu" else None) or CARD_HELP[card.key]
            if card.why:
                why += f" {card.why}"
            col.metric(
                f"{card.label} · {card.basis}" if card.basis else card.label,
                fmt_v(card.b),
                delta=card.delta,
                delta_color=TONE_COLOR[card.tone],  # type: ignore[arg-type]
                delta_arrow="off" if card.delta == "unchanged" else "auto",
                border=True,
                help=f"{why} A: {fmt_v(card.a)} → B: {fmt_v(card.b)}.",
            )
        ca, cb = view.comparison.a, view.comparison.b
        if ca.ranks > 1 or cb.ranks > 1:
            st.caption(
                "Step time, MFU and GPU busy are each job's; the other figures and the fixes' "
                f"details are its pace-setter's: A's rank {ca.rank}, B's rank {cb.rank}."
            )
        if view.peak_note:
            st.caption(f":material/warning: {ui.md(view.peak_note, None)}")
        for note in view.notes:
            st.caption(f"Note: {ui.md(note, None)}")

        table = pd.DataFrame(
            [
                {
                    "section": sec.title,
                    "metric": d.metric,
                    "basis": d.basis or "—",
                    "unit": d.unit,
                    "A": ui.fmt_number(d.a),
                    "B": ui.fmt_number(d.b),
                    "Δ (B − A)": ui.fmt_signed(d.delta, " pp" if d.unit == "%" else ""),
                    "change": d.change if d.change != "-" else "—",
                    "": d.verdict or "",
                }
                for sec in view.sections
                for d in sec.rows
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
                "basis": st.column_config.TextColumn(
                    "Basis", help="profiled: from the trace; unprofiled: timed without the profiler"
                ),
                "Δ (B − A)": st.column_config.TextColumn("Δ (B − A)"),
                "change": st.column_config.TextColumn(
                    "Change",
                    help="In % of A; percentages in points (pp); within noise: unchanged",
                ),
            },
        )

# -- aligned sawtooth plots ---------------------------------------------------------------------------
ALIGN_PARAMS = ("step", "steps")


def _param_int(name: str, lo: int, hi: int, default: int) -> int:
    """The URL's integer ``name`` within ``lo..hi``, else ``default``."""
    try:
        v = int(st.query_params.get(name) or "")
    except ValueError:
        return default
    return v if lo <= v <= hi else default


def _set_params(values: dict[str, int | None]) -> None:
    """Write the changed ones into the URL (None: removed)."""
    for k, v in values.items():
        now = st.query_params.get(k)
        if v is None and now is not None:
            del st.query_params[k]
        elif v is not None and now != str(v):
            st.query_params[k] = str(v)


st.subheader("GPU busy, aligned on a step")
with views.section("Aligned plot"):
    # the compared ranks (each job's pace-setter); the lowest where the comparison failed
    rank_a = view.comparison.a.rank if view is not None else None
    rank_b = view.comparison.b.rank if view is not None else None
    rank_a = views.lowest_rank(a_id) if rank_a is None else rank_a
    rank_b = views.lowest_rank(b_id) if rank_b is None else rank_b
    wa = data.window(path, a_id, rank_a)
    wb = data.window(path, b_id, rank_b)
    na, nb = len(wa.steps), len(wb.steps)
    n_common = max(1, min(na, nb))
    c1, c2 = st.columns(2)
    # the URL holds them (``step``, ``steps``); each widget is keyed by the URL's value, so a
    # link, a reload or Back shows what the URL says
    url_first = _param_int("step", 1, n_common, 1)
    first = c1.number_input(
        "Align on step (position in each run)",
        min_value=1,
        max_value=n_common,
        value=url_first,
        step=1,
        key=f"align_{a_id}_{b_id}_{url_first}",
    )
    room = n_common - int(first) + 1
    url_count = _param_int("steps", 1, room, min(3, room))
    count = c2.number_input(
        "Steps to show",
        min_value=1,
        max_value=room,
        value=url_count,
        step=1,
        key=f"count_{a_id}_{b_id}_{first}_{url_count}",
    )
    _set_params(
        {
            "step": int(first) if first != 1 else None,
            "steps": int(count) if count != min(3, room) else None,
        }
    )
    panels = [
        views.aligned_panel(rid, name, w, int(first), int(count), tag)
        for rid, name, w, tag in ((a_id, name_a, wa, "A"), (b_id, name_b, wb, "B"))
    ]
    views.cause_legend()
    st.plotly_chart(figures.aligned_sawtooth(panels), config=views.PLOT_CONFIG)
    st.caption(
        f"x = ms since the start of step {int(first)} of each run (A has {na} steps, B {nb}; "
        f"A's rank {rank_a}, B's rank {rank_b})."
    )

_copy_link()
if view is None or rep_b is None:
    st.stop()

# -- idle causes side by side --------------------------------------------------------------------------
st.subheader("Idle time per step, by cause")
with views.section("Idle time by cause"):
    st.plotly_chart(
        figures.idle_compare(
            *view.idle_ms_per_step,
            labels=(f"A · {ui.plot_text(name_a, 40)}", f"B · {ui.plot_text(name_b, 40)}"),
        ),
        config=views.PLOT_CONFIG,
    )


def _fix_column(heading: str, lines: list[str], empty: str) -> None:
    """One column of the fixes comparison: ``heading`` with the number of ``lines``, then each
    line (Markdown, one fix each), or the caption ``empty`` when there are none."""
    st.markdown(f"**{heading}** ({len(lines)})")
    for line in lines:
        st.markdown(line)
    if not lines:
        st.caption(empty)


# -- fixes ------------------------------------------------------------------------------------------------
st.subheader("Fixes")
with views.section("Fixes"):
    fixes = view.fixes
    c1, c2, c3 = st.columns(3)
    with c1:
        _fix_column(
            "Resolved in B",
            [f":green[:material/check_circle:] {ui.md(f.title, None)}" for f in fixes.resolved],
            "None of A's fixes is resolved in B.",
        )
    with c2:
        _fix_column(
            "Still open",
            [
                f":orange[:material/pending:] {ui.md(fb.title, None)}"
                + (  # the analysis's own sentences for the bound (per step or per sample)
                    f" — A: {ui.md(fa.gain, None)}; B: {ui.md(fb.gain, None)}"
                    if fa.gain and fb.gain
                    else ""
                )
                for fa, fb in fixes.remaining
            ],
            "Nothing left over from A.",
        )
    with c3:
        _fix_column(
            "New in B",
            [f":red[:material/error:] {ui.md(f.title, None)}" for f in fixes.new],
            "B raised no new issue.",
        )
    with st.expander("B's fixes in full"):
        views.recommendations(data.fixes(path, b_id, None))
