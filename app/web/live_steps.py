"""The Live page's step times: what a training loop reports to the sampler
(``gpuscope.capture.slow_steps(..., sampler=URL)``), as a distribution, with the slow steps traced
so far and a button that asks for the next slow step's trace."""

from __future__ import annotations

import json
import time
import urllib.error
from typing import Any

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from gpuscope.web import live, palette, views

MAX_BYTES = 16 << 20
KEEP = 100_000


def fetch_steps(url: str, since: int, *, timeout: float = 2.0) -> dict[str, Any]:
    """``GET /api/steps?since=N`` of a checked sampler URL; SamplerError (one line) on failure."""
    base = live.check_url(url)
    try:
        with live._OPENER.open(f"{base}/api/steps?since={int(since)}", timeout=timeout) as r:
            raw = live.read_capped(r, max_bytes=MAX_BYTES, deadline=time.monotonic() + 5, what=base)
        body = json.loads(raw)
    except urllib.error.HTTPError as e:
        raise live.SamplerError(f"{base}: HTTP {e.code} from /api/steps") from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as e:
        raise live.SamplerError(f"{base}: /api/steps: {getattr(e, 'reason', e)}") from None
    if not isinstance(body, dict) or not isinstance(body.get("steps"), list):
        raise live.SamplerError(f"{base}: /api/steps did not return step JSON")
    return body


def request_trace(url: str, *, timeout: float = 2.0) -> None:
    """``POST /api/trace-request``: ask the training loop for the next slow step's trace."""
    import urllib.request

    from gpuscope.sampler.token import auth_headers

    base = live.check_url(url)
    req = urllib.request.Request(
        f"{base}/api/trace-request", data=b"{}", method="POST", headers=auth_headers(base)
    )
    try:
        with live._OPENER.open(req, timeout=timeout) as r:
            r.read(1 << 16)
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise live.SamplerError(f"{base}: /api/trace-request: {getattr(e, 'reason', e)}") from None


def step_histogram(ms: np.ndarray, *, slow_ms: float | None = None) -> go.Figure:
    """The distribution of step times (ms), with the median and, when given, the slow threshold."""
    fig = go.Figure(
        go.Histogram(
            x=ms,
            nbinsx=min(60, max(10, int(np.sqrt(ms.size)) * 2)),
            marker={"color": palette.BUSY},
            hovertemplate="%{x} ms: %{y} steps<extra></extra>",
            name="steps",
        )
    )
    med = float(np.median(ms))
    fig.add_vline(x=med, line={"color": "#444", "dash": "dash"}, annotation_text="median")
    if slow_ms is not None:
        fig.add_vline(x=slow_ms, line={"color": palette.BAD, "dash": "dot"})
    fig.update_layout(
        height=240,
        margin={"l": 40, "r": 10, "t": 30, "b": 40},
        title={"text": "Step time distribution", "x": 0, "font": {"size": 14}},
        showlegend=False,
        bargap=0.05,
    )
    fig.update_xaxes(ticksuffix=" ms")
    fig.update_yaxes(title_text="steps")
    return fig


def steps_panel(url: str, paused: bool) -> None:
    """Polls ``/api/steps`` with the rest of the Live panel; shows nothing until a loop reports."""
    key = f"live_steps_{url}"
    state = st.session_state.setdefault(key, {"since": 0, "ms": [], "traces": [], "req": False})
    if not paused:
        try:
            body = fetch_steps(url, state["since"])
        except live.SamplerError:
            return  # an older sampler, or none: the samples panel above says what is wrong
        new = [float(s["ms"]) for s in body["steps"] if isinstance(s, dict) and "ms" in s]
        state["ms"] = (state["ms"] + new)[-KEEP:]
        state["since"] = int(body.get("last_seq") or state["since"])
        state["traces"] = list(body.get("traces") or [])
        state["req"] = bool(body.get("trace_requested"))
    if not state["ms"]:
        st.caption(
            "No step times: report them from the training loop with "
            "`gpuscope.capture.slow_steps(..., sampler=URL)` to see their distribution here."
        )
        return
    ms = np.asarray(state["ms"], dtype="float64")
    st.subheader("Steps", anchor=False)
    c = st.columns(4)
    c[0].metric("Steps reported", f"{ms.size:,}", border=True)
    c[1].metric("Median step", f"{np.median(ms):,.1f} ms", border=True)
    c[2].metric("p95 step", f"{np.percentile(ms, 95):,.1f} ms", border=True)
    c[3].metric("Slowest step", f"{ms.max():,.1f} ms", border=True)
    st.plotly_chart(step_histogram(ms), config=views.PLOT_CONFIG, key="live_steps_hist")
    traces = state["traces"]
    if traces:  # paths come from whoever reported them: shown as inert text, never Markdown
        st.caption("Slow steps traced:")
        shown = [t for t in traces[-10:] if isinstance(t, dict)]
        st.text("\n".join(f"step {t.get('step')}: {t.get('path', '')}" for t in shown))
    if state["req"]:
        st.info(
            "Asked for the next slow step's trace: it is written when a step is slower than "
            "k × the running median.",
            icon=":material/hourglass_top:",
        )
    elif st.button(
        "Trace the next slow step",
        key="live_trace_next",
        icon=":material/radio_button_checked:",
        help="The training loop writes a trace of the next step slower than k × the running "
        "median, even once its cap of traces is reached",
    ):
        try:
            request_trace(url)
        except live.SamplerError as e:
            st.error(str(e))
            return
        state["req"] = True
        st.rerun(scope="fragment")
