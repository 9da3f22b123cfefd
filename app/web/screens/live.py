"""Live: GPU utilization from a running ``gpuscope sample`` server, refreshed every second.

URL: ``/live?sampler=http://host:port`` (default ``$GPUSCOPE_SAMPLER_URL`` or 127.0.0.1:9401).
"""

from __future__ import annotations

import time

import streamlit as st
from gpuscope.vocabulary.errors import GpuscopeError
from gpuscope.vocabulary.nvml_fields import GPU_UTIL_PCT, MEM_USED_BYTES, SM_ACTIVE_PCT
from gpuscope.web import auth, db, figures, live, live_steps, ui, views
from gpuscope.web.advice import GPM, what_to_do

st.title("Live")
st.caption(
    "GPU utilization as `gpuscope sample` polls it through NVML. Start one with "
    "`gpuscope sample` on the training node (or `gpuscope sample --replay FILE` to replay a "
    "recording), then point this page at it."
)

url0 = st.query_params.get("sampler") or live.default_url()
c1, c2, c3 = st.columns([5, 3, 1], vertical_alignment="bottom")
url = live.normalise_url(c1.text_input("Sampler URL", value=url0, key="live_url"))
try:  # scheme and host policy (docs/security.md), checked before anything is fetched
    url = live.check_url(url)
except live.SamplerError as e:
    st.error("Not polled: this sampler URL is refused.", icon=":material/block:")
    st.code(str(e), language=None, wrap_lines=True)  # as text, never Markdown
    st.stop()
window_s = c2.select_slider(
    "Show the last",
    options=[30, 60, 300, 900],
    value=60,
    format_func=lambda s: f"{s // 60} min" if s >= 60 else f"{s} s",
)
st.session_state.setdefault("live_attached", True)


def _flip_attached() -> None:
    st.session_state["live_attached"] = not st.session_state["live_attached"]


attached = bool(st.session_state["live_attached"])
c3.button(
    "Detach" if attached else "Attach",
    key="live_attach_button",
    icon=":material/link_off:" if attached else ":material/link:",
    on_click=_flip_attached,
    help="Detached: no polling; the samples held so far stay on the page",
)
paused = not attached
if url and url != st.query_params.get("sampler") and url != live.DEFAULT_URL:
    st.query_params["sampler"] = url

state_key = f"live_buffer_{url}"


@st.fragment(run_every=None if paused else 1.0)
def panel() -> None:
    state = st.session_state.setdefault(state_key, {"since": 0, "rows": None, "host": None})
    if not paused:
        try:
            batch = live.fetch(url, state["since"])
        except live.SamplerError as e:
            st.warning(
                f"No samples: {e}. Is `gpuscope sample` running there?",
                icon=":material/sensors_off:",
            )
            return
        if not batch.rows.empty:
            state["since"] = int(batch.rows["t_ns"].max())
            state["rows"] = live.fold(state["rows"], batch.rows, keep_ns=900 * 10**9)
        state["host"] = batch.host or state["host"]
        state["gpus"] = batch.gpus or state.get("gpus") or []
        state["interval_ms"] = batch.interval_ms or state.get("interval_ms")
    else:
        st.caption(":material/link_off: Detached: not polling. **Attach** to resume.")
    rows = state["rows"]
    if rows is None or rows.empty:
        st.info("Connected; waiting for the first sample…", icon=":material/hourglass_top:")
        return
    newest = int(rows["t_ns"].max())
    view = live.shown(rows, window_s)  # what the charts draw and the diagnosis reads
    latest = view[view["t_ns"] == newest]
    st.caption(
        f"host **{ui.md(state['host'] or '?')}** · {view['gpu'].nunique()} GPU(s) · "
        f"{len(view) // max(1, view['gpu'].nunique()):,} samples shown"
    )
    for r in latest.sort_values("gpu").itertuples():
        cols = st.columns(5)
        cols[0].metric(
            f"GPU {r.gpu} util",
            ui.fmt_pct(r.gpu_util_pct, 0),
            border=True,
            help="NVML utilization.gpu: share of the sample period in which any kernel ran",
        )
        cols[1].metric(
            "SM active",
            ui.fmt_pct(r.sm_active_pct),
            border=True,
            help=f"Share of the streaming multiprocessors (SMs) that were working. {GPM}",
        )
        cols[2].metric(
            "Tensor active",
            ui.fmt_pct(r.tensor_active_pct),
            border=True,
            help=f"Share of the time the tensor cores were working. {GPM}",
        )
        peak = view.loc[view["gpu"] == r.gpu, MEM_USED_BYTES].max()
        cols[3].metric(
            "Memory used",
            live.fmt_bytes(r.mem_used_bytes),
            delta=f"peak {live.fmt_bytes(peak)} shown" if peak == peak else None,
            delta_color="off",
            border=True,
            help="Now (the newest sample); below it, the most in the samples the chart shows",
        )
        cols[4].metric(
            "Power", f"{r.power_w:,.0f} W" if r.power_w == r.power_w else "—", border=True
        )
    origin = newest  # x: seconds before the newest sample
    diagnosis = live.diagnose(rows, window_s)
    for gpu, g in view.groupby("gpu", sort=True):
        st.plotly_chart(
            figures.nvml_lines(
                g, GPU_UTIL_PCT, origin_ns=origin, title=f"GPU {gpu} utilization (NVML)"
            ),
            config=views.PLOT_CONFIG,
            key=f"live_util_{gpu}",
        )
        d = diagnosis.get(int(gpu))
        if d is not None:
            todo = what_to_do(d)
            st.info(
                f"{ui.md(d.summary, None)}\n\n**What to do:** {todo.advice}",
                icon=":material/troubleshoot:",
            )
            if todo.fix_id:
                with st.expander(f"The fix: {todo.title} (`{todo.fix_id}`)"):
                    st.code(todo.code, language="python")
                    st.caption(
                        "The same fix the Run page recommends when a trace shows this cause "
                        "(docs/metrics.md, Recommendations). Record a few steps with "
                        "`gpuscope.capture.profile_steps` and upload them to confirm the cause "
                        "and bound the gain."
                    )
    if view[SM_ACTIVE_PCT].notna().any():
        st.plotly_chart(
            figures.nvml_lines(
                view, SM_ACTIVE_PCT, origin_ns=origin, title="SM active (GPM counters)"
            ),
            config=views.PLOT_CONFIG,
            key="live_sm",
        )
        st.caption(GPM)
    live_steps.steps_panel(url, paused)


panel()


def _save() -> None:
    """The samples held in this session, as typed records, -> an NVML-only run."""
    state = st.session_state.get(state_key) or {}
    rows = state.get("rows")
    if rows is None or rows.empty:
        st.session_state["live_saved"] = ("warning", "No samples to save yet.", None)
        return
    window = live.window_of(
        rows,
        host=state.get("host") or "sampler",
        gpus=state.get("gpus") or [],
        interval_ms=state.get("interval_ms"),
    )
    name = f"live {window.host} {time.strftime('%Y-%m-%d %H:%M:%S')}"
    try:
        with db.writing() as cur:
            res = live.store_window(cur, window, name=name, uploaded_by=auth.uploader())
            if not res.duplicate:  # as after `gpuscope ingest`; a failure only skips it
                cur.maintain_after_ingest()
    except (GpuscopeError, db.StoreUnavailable) as e:
        st.session_state["live_saved"] = ("error", f"Not saved: {ui.md(str(e), None)}", None)
        return
    what = "already stored as" if res.duplicate else "saved as run"
    st.session_state["live_saved"] = (
        "success",
        f"{len(window.samples):,} samples {what} {ui.md_code(res.run_id)} ({ui.md(res.name)}).",
        res.run_id,
    )


st.button(
    "Save window as a run",
    key="live_save",
    icon=":material/save:",
    on_click=_save,
    help="Store every sample this page holds (up to 15 min) as an NVML-only run, to compare later",
)
saved = st.session_state.get("live_saved")
if saved:
    kind, message, run_id = saved
    getattr(st, kind)(message)
    if run_id:
        st.page_link(
            "screens/run.py",
            label="Open the saved run",
            icon=":material/insights:",
            query_params={"run": run_id},
        )
