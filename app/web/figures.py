"""Pure figure builders: plain data in, ``plotly.graph_objects.Figure`` out (no Streamlit, no DB).

They draw what :mod:`gpuscope.analysis` computed (busy and idle shares per bucket, gaps, kernels)
and compute nothing themselves beyond placing it on the axes.

Units everywhere: time in ms (x axes: ms since the start of the shown window or step), shares in %,
throughput in TFLOP/s. Colours come from :mod:`gpuscope.web.palette` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from gpuscope.vocabulary.nvml_fields import GPU_UTIL_PCT, MEM_USED_BYTES
from gpuscope.web import html_safe, palette
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from gpuscope.analysis.sawtooth import BusyPanel

NS_PER_MS = 1e6
MAX_STEP_LABELS = 40


def _ms(ns: Any, origin_ns: int) -> np.ndarray:
    return (np.asarray(ns, dtype="float64") - float(origin_ns)) / NS_PER_MS


def _base_layout(
    fig: go.Figure, *, height: int, y_title: str | None = None, x_title: str | None = None
) -> go.Figure:
    fig.update_layout(
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.02,
            "xanchor": "left",
            "x": 0,
            "title": None,
        },
        bargap=0,
    )
    if y_title:
        fig.update_yaxes(title_text=y_title)
    if x_title:
        fig.update_xaxes(title_text=x_title)
    return fig


# -- the sawtooth ------------------------------------------------------------------------------------


def _step_lines(
    fig: go.Figure,
    steps: pd.DataFrame | None,
    origin_ns: int,
    lo_ms: float,
    hi_ms: float,
    *,
    row: int | None = None,
    showlegend: bool = True,
    y_top: float = 100.0,
) -> None:
    if steps is None or steps.empty:
        return
    x = _ms(steps["start_ns"], origin_ns)
    nums = steps["number"].to_numpy()
    keep = (x >= lo_ms) & (x <= hi_ms)
    x, nums = x[keep], nums[keep]
    if x.size == 0:
        return
    # one trace for every step line: numeric arrays with NaN breaks travel as compact typed arrays
    xs = np.repeat(x, 3)
    xs[2::3] = np.nan
    ys = np.tile(np.array([0.0, y_top, np.nan], dtype="float32"), x.size)
    kw = {"row": row, "col": 1} if row else {}
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines",
            name="step start",
            legendgroup="steps",
            showlegend=showlegend,
            connectgaps=False,
            line={"color": palette.STEP_LINE, "width": 1, "dash": "dot"},
            customdata=np.repeat(nums.astype("int32"), 3),
            hovertemplate="step %{customdata:.0f} starts at %{x:.3f} ms<extra></extra>",
        ),
        **kw,
    )
    if x.size <= MAX_STEP_LABELS:
        for xi, n in zip(x, nums, strict=True):
            fig.add_annotation(
                x=xi,
                y=y_top,
                text=f"#{n}",
                showarrow=False,
                yanchor="bottom",
                xanchor="left",
                font={"size": 10, "color": palette.STEP_LINE},
                **({"row": row, "col": 1} if row else {}),
            )


def _esc(text: Any) -> str:
    """Text for a Plotly hover/label (Plotly reads ``<b>``, ``<a href>``…: kernel names hold ``<``):
    :func:`gpuscope.web.html_safe.plotly_text`."""
    return html_safe.plotly_text(text)


def _busy_and_idle(
    x_step: np.ndarray,
    busy_pct: np.ndarray,
    shares: Mapping[str, np.ndarray],
    causes: Sequence[str],
    *,
    stackgroup: str,
    busy_legend: bool = True,
    wait_pct: np.ndarray | None = None,
) -> list[go.Scatter]:
    """A sawtooth row's stacked areas: busy % at the bottom, then each of ``causes``' idle % (its
    ``shares``, one value per bucket). ``x_step``: the n + 1 bucket edges (ms); each value holds to
    the next edge. Only the busy area may show in a legend (``busy_legend``). ``wait_pct`` (the
    communication wait % per bucket, part of busy): busy is drawn as work (busy − wait) in the busy
    colour with the wait stacked on it in its own colour."""
    work = busy_pct if wait_pct is None else np.clip(busy_pct - wait_pct, 0.0, None)
    traces = [
        go.Scatter(
            x=x_step,
            y=np.append(work, work[-1]),
            name="GPU busy",
            stackgroup=stackgroup,
            legendgroup="busy",
            showlegend=busy_legend,
            line={"color": palette.BUSY, "width": 1, "shape": "hv"},
            fillcolor=palette.BUSY_FILL,
            hovertemplate=(
                "busy %{y:.1f} %<extra></extra>"
                if wait_pct is None
                else "busy, working %{y:.1f} %<extra></extra>"
            ),
        )
    ]
    if wait_pct is not None:
        w = np.minimum(wait_pct, busy_pct)
        traces.append(
            go.Scatter(
                x=x_step,
                y=np.append(w, w[-1]),
                name="communication wait",
                stackgroup=stackgroup,
                legendgroup="wait",
                showlegend=False,
                line={"color": palette.WAIT, "width": 0, "shape": "hv"},
                fillcolor=palette.WAIT_FILL,
                hovertemplate="busy, waiting for other ranks %{y:.1f} %<extra></extra>",
            )
        )
    for cause in causes:
        y, color, label = shares[cause], palette.cause_color(cause), palette.cause_label(cause)
        traces.append(
            go.Scatter(
                x=x_step,
                y=np.append(y, y[-1]),
                name=label,
                stackgroup=stackgroup,
                legendgroup=f"c_{cause}",
                showlegend=False,
                line={"color": color, "width": 0, "shape": "hv"},
                fillcolor=palette.rgba(color, 0.55),
                hovertemplate=f"idle: {_esc(label)} %{{y:.1f}} %<extra></extra>",
            )
        )
    return traces


def sawtooth(
    busy: pd.DataFrame,
    *,
    origin_ns: int,
    idle: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
    nvml: pd.DataFrame | None = None,
    kernels: pd.DataFrame | None = None,
    shares: dict[str, np.ndarray] | None = None,
    height: int = 380,
    title: str | None = None,
    wait: np.ndarray | None = None,
    waits: pd.DataFrame | None = None,
) -> go.Figure:
    """GPU busy % over time, idle time coloured by cause, step starts marked, NVML overlaid.

    Communication wait (busy, waiting in a collective for the last rank) in its own colour:
    ``wait`` (bucket series: the fraction 0..1 of each bucket of ``busy``) or ``waits`` (with
    ``kernels``: ``start_ns``, ``end_ns``, ``last_rank`` spans, drawn over the kernels).

    ``busy``: ``start_ns``, ``end_ns``, ``busy_frac`` (0..1) per bucket (trace ns), optionally
    ``busy_min``/``busy_max`` (the envelope inside each bucket: ``sawtooth.busy_envelope``).
    ``idle`` (with ``kernels``): ``start_ns``, ``end_ns``, ``cause`` gaps, optionally ``detail``
    (hover text). ``steps``: ``number``, ``start_ns``.
    ``nvml``: ``t_ns`` (trace ns) and ``gpu_util_pct``; the sample before the view holds until
    the next, so a zoom between two samples still shows the line. ``kernels`` (a zoom where each
    activity is wider than a pixel): ``start_ns``, ``end_ns``, ``name``, ``category``; when given,
    kernels and idle gaps are drawn as bars of ONE trace with a colour per bar, instead of the
    bucket series. ``shares``: the idle % per cause in each bucket of ``busy``
    (``sawtooth.idle_shares_in_view``), stacked on busy. The x axis is ms since ``origin_ns``.
    The legend is the page's (HTML): the figure has none.
    """
    fig = go.Figure()
    if busy.empty:
        return _base_layout(fig, height=height, y_title="%", x_title="ms")
    lo_ms = float(_ms([busy["start_ns"].iloc[0]], origin_ns)[0])
    hi_ms = float(_ms([busy["end_ns"].iloc[-1]], origin_ns)[0])
    edges = np.concatenate([busy["start_ns"].to_numpy(), [busy["end_ns"].iloc[-1]]])
    x_edges = _ms(edges, origin_ns)
    fine = kernels is not None

    if fine:
        assert kernels is not None
        ks = _ms(kernels["start_ns"], origin_ns)
        ke = _ms(kernels["end_ns"], origin_ns)
        kcat = kernels["category"].fillna("other").astype(str).to_numpy()
        colors = [palette.category_color(c) for c in kcat]
        text = [
            f"{_esc(str(n)[:120])}<br>{_esc(c.replace('_', ' '))} · {d:,.3f} ms"
            for n, c, d in zip(kernels["name"], kcat, ke - ks, strict=True)
        ]
        mids, widths = list((ks + ke) / 2), list(np.maximum(ke - ks, 1e-6))
        if idle is not None and not idle.empty:
            gs = np.clip(_ms(idle["start_ns"], origin_ns), lo_ms, hi_ms)
            ge = np.clip(_ms(idle["end_ns"], origin_ns), lo_ms, hi_ms)
            detail = (
                idle["detail"].astype(str) if "detail" in idle else pd.Series("", index=idle.index)
            ).to_numpy()
            for a, b, cause, det in zip(gs, ge, idle["cause"].astype(str), detail, strict=True):
                if b <= a:
                    continue
                label = palette.cause_label(cause)
                line = f"idle: {_esc(label)} · {b - a:,.3f} ms"
                if " · " in det:  # several causes share the gap: their split
                    line += f"<br>{_esc(det)}"
                mids.append((a + b) / 2)
                widths.append(b - a)
                colors.append(palette.rgba(palette.cause_color(cause), 0.6))
                text.append(line)
        fig.add_trace(
            go.Bar(
                x=np.asarray(mids, dtype="float64"),
                y=np.full(len(mids), 100.0, dtype="float32"),
                width=np.asarray(widths, dtype="float64"),
                name="activities",
                marker={"color": colors, "line": {"width": 0}},
                customdata=text,
                hovertemplate="%{customdata}<extra></extra>",
            )
        )
        if waits is not None and not waits.empty:
            ws_ = np.clip(_ms(waits["start_ns"], origin_ns), lo_ms, hi_ms)
            we_ = np.clip(_ms(waits["end_ns"], origin_ns), lo_ms, hi_ms)
            who = [f"rank {int(r)}" for r in waits["last_rank"]] if "last_rank" in waits else None
            fig.add_trace(
                go.Bar(
                    x=(ws_ + we_) / 2,
                    y=np.full(len(ws_), 100.0, dtype="float32"),
                    width=np.maximum(we_ - ws_, 1e-6),
                    name="communication wait",
                    marker={"color": palette.WAIT, "line": {"width": 0}},
                    customdata=[
                        f"communication wait · {b - a:,.3f} ms"
                        + (f"<br>waiting for {who[i]}" if who else "")
                        for i, (a, b) in enumerate(zip(ws_, we_, strict=True))
                    ],
                    hovertemplate="%{customdata}<extra></extra>",
                )
            )
    else:
        shares = shares or {}
        fig.add_traces(
            _busy_and_idle(
                x_edges,
                busy["busy_frac"].to_numpy(dtype="float64") * 100.0,
                shares,
                sorted(shares, key=lambda c: -shares[c].sum()),
                stackgroup="share",
                wait_pct=None if wait is None else np.asarray(wait, dtype="float64") * 100.0,
            )
        )
        if "busy_min" in busy and "busy_max" in busy:
            # the envelope: a band from the lowest to the highest busy % inside each bucket, one
            # closed polygon (max left to right, min back), so no pixel-wide strokes
            lo = busy["busy_min"].to_numpy(dtype="float64") * 100.0
            hi = busy["busy_max"].to_numpy(dtype="float64") * 100.0
            corners = np.repeat(x_edges, 2)[1:-1]  # bucket steps as explicit corners
            fig.add_trace(
                go.Scatter(
                    x=np.concatenate([corners, corners[::-1]]),
                    y=np.concatenate([np.repeat(hi, 2), np.repeat(lo, 2)[::-1]]),
                    name="busy min–max",
                    mode="lines",
                    fill="toself",
                    fillcolor=palette.ENVELOPE,
                    line={"width": 0},
                    hoverinfo="skip",
                )
            )
    if nvml is not None and not nvml.empty:
        t = _ms(nvml["t_ns"], origin_ns)
        u = nvml[GPU_UTIL_PCT].to_numpy(dtype="float64")
        before = t < lo_ms
        # the last sample before the view holds at its left edge; samples after it are dropped
        first = int(np.flatnonzero(before)[-1]) if before.any() else None
        keep = (t >= lo_ms) & (t <= hi_ms)
        xs, ys = list(t[keep]), list(u[keep])
        if first is not None:
            xs, ys = [lo_ms, *xs], [float(u[first]), *ys]
        if xs:
            xs.append(hi_ms)  # the last value holds to the right edge
            ys.append(ys[-1])
            fig.add_trace(
                go.Scatter(
                    x=np.asarray(xs),
                    y=np.asarray(ys),
                    mode="lines",
                    name="NVML GPU util",
                    line={"color": palette.NVML, "width": 2, "shape": "hv"},
                    hovertemplate="NVML util %{y:.0f} %<extra></extra>",
                )
            )
    _step_lines(fig, steps, origin_ns, lo_ms, hi_ms, showlegend=False)
    fig.update_layout(
        title={"text": title, "x": 0, "font": {"size": 14}} if title else None,
        dragmode="select",
        selectdirection="h",
        hovermode="closest" if fine else "x",
        barmode="overlay",
        showlegend=False,
    )
    fig.update_yaxes(range=[0, 108], ticksuffix=" %", fixedrange=True)
    fig.update_xaxes(range=[lo_ms, hi_ms], ticksuffix=" ms")
    return _base_layout(fig, height=height)


def aligned_sawtooth(
    panels: Sequence[BusyPanel],
    *,
    height_each: int = 260,
    x_title: str = "ms since step start",
) -> go.Figure:
    """Two (or more) sawtooth rows on one shared x axis, one per :class:`BusyPanel` (its busy
    series, with its ``shares``: idle % per cause and bucket, its ``wait``: the communication
    wait fraction per bucket, drawn in its own colour, and its ``steps``): the origins align the
    chosen step."""
    n = len(panels)
    fig = make_subplots(
        rows=n,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=[str(p.label) for p in panels],
    )
    seen: set[str] = set()
    hi = 0.0
    for i, p in enumerate(panels, start=1):
        busy: pd.DataFrame = p.busy
        if busy.empty:
            continue
        origin = int(p.origin_ns)
        edges = np.concatenate([busy["start_ns"].to_numpy(), [busy["end_ns"].iloc[-1]]])
        xe = _ms(edges, origin)
        hi = max(hi, float(xe[-1]))
        shares = p.shares or {}
        traces = _busy_and_idle(
            xe,
            busy["busy_frac"].to_numpy(dtype="float64") * 100.0,
            shares,
            sorted(shares),
            stackgroup=f"s{i}",
            busy_legend="busy" not in seen,
            wait_pct=(
                np.asarray(p.wait, dtype="float64") * 100.0
                if p.wait is not None and np.asarray(p.wait).any()
                else None
            ),
        )
        fig.add_traces(traces, rows=[i] * len(traces), cols=[1] * len(traces))
        seen.update(["busy", *shares])
        _step_lines(
            fig,
            p.steps,
            origin,
            float(xe[0]),
            float(xe[-1]),
            row=i,
            showlegend="steps" not in seen,
        )
        seen.add("steps")
        fig.update_yaxes(range=[0, 108], ticksuffix=" %", fixedrange=True, row=i, col=1)
    fig.update_xaxes(ticksuffix=" ms")
    fig.update_xaxes(title_text=x_title, row=n, col=1)
    if hi > 0:
        fig.update_xaxes(range=[0, hi])
    fig.update_layout(hovermode="x", barmode="overlay", showlegend=False)  # the page's legend
    return _base_layout(fig, height=height_each * n + 60)


# -- breakdowns ---------------------------------------------------------------------------------------


def idle_by_cause(
    causes_us: Mapping[str, float], *, per_steps: int | None = None, height: int = 300
) -> go.Figure:
    """Horizontal bars: idle time per cause, ms (per step when ``per_steps`` is given)."""
    items = sorted(((str(c), float(v or 0.0)) for c, v in causes_us.items()), key=lambda kv: kv[1])
    div = 1e3 * (per_steps if per_steps else 1)
    fig = go.Figure(
        go.Bar(
            x=[v / div for _, v in items],
            y=[palette.cause_label(c) for c, _ in items],
            orientation="h",
            marker={"color": [palette.cause_color(c) for c, _ in items]},
            text=[f"{v / div:,.2f} ms" for _, v in items],
            textposition="auto",
            hovertemplate="%{y}: %{x:,.2f} ms" + ("/step" if per_steps else "") + "<extra></extra>",
        )
    )
    fig.update_xaxes(ticksuffix=" ms", title_text="idle per step" if per_steps else "idle time")
    return _base_layout(fig, height=height)


def kernel_categories(
    by_category: Mapping[str, float],
    *,
    per_steps: int | None = None,
    height: int = 300,
) -> go.Figure:
    """Kernel time by category (µs in; ms per step shown when ``per_steps`` is given, the unit of
    the idle chart beside it), with each category's share of kernel time in the bar's text."""
    rows = sorted(((str(c), float(v or 0.0)) for c, v in by_category.items()), key=lambda r: r[1])
    total = sum(v for _, v in rows) or 1.0
    div = 1e3 * (per_steps if per_steps else 1)
    unit = "ms/step" if per_steps else "ms"
    fig = go.Figure(
        go.Bar(
            x=[v / div for _, v in rows],
            y=[_esc(c.replace("_", " ")) for c, _ in rows],
            orientation="h",
            marker={"color": [palette.category_color(c) for c, _ in rows]},
            text=[f"{100 * v / total:.1f} %" for _, v in rows],
            textposition="auto",
            hovertemplate=f"%{{y}}: %{{x:,.2f}} {unit}<extra></extra>",
        )
    )
    fig.update_xaxes(
        ticksuffix=" ms", title_text="kernel time per step" if per_steps else "kernel time"
    )
    return _base_layout(fig, height=height)


def compare_bars(
    rows: Sequence[tuple[str, float | None, float | None, str]],
    *,
    labels: tuple[str, str] = ("A", "B"),
    height: int = 320,
) -> go.Figure:
    """Grouped bars of A and B per metric; each row is (metric, a, b, unit)."""
    fig = make_subplots(
        rows=1, cols=max(1, len(rows)), subplot_titles=[f"{m} ({u})" for m, _, _, u in rows]
    )
    for i, (_m, a, b, _u) in enumerate(rows, start=1):
        for label, value, color, group in (
            (labels[0], a, palette.RUN_A, "a"),
            (labels[1], b, palette.RUN_B, "b"),
        ):
            fig.add_trace(
                go.Bar(
                    x=[label],
                    y=[value or 0],
                    name=label,
                    marker={"color": color},
                    showlegend=i == 1,
                    legendgroup=group,
                    hovertemplate=f"{label}: %{{y:.2f}}<extra></extra>",
                ),
                row=1,
                col=i,
            )
    fig.update_xaxes(showticklabels=False)
    return _base_layout(fig, height=height)


def idle_compare(
    a_ms_per_step: Mapping[str, float],
    b_ms_per_step: Mapping[str, float],
    *,
    labels: tuple[str, str],
    height: int = 320,
) -> go.Figure:
    """Idle ms per step by cause, A vs B, as grouped horizontal bars coloured by cause, the causes
    in order of A's time."""
    causes = sorted(
        dict.fromkeys([*a_ms_per_step, *b_ms_per_step]),
        key=lambda c: -float(a_ms_per_step.get(c) or 0),
    )
    fig = go.Figure()
    for lab, src, pattern in ((labels[0], a_ms_per_step, "/"), (labels[1], b_ms_per_step, "")):
        fig.add_trace(
            go.Bar(
                y=[palette.cause_label(c) for c in causes],
                x=[float(src.get(c) or 0) for c in causes],
                orientation="h",
                name=lab,
                marker={
                    "color": [palette.cause_color(c) for c in causes],
                    "pattern": {"shape": pattern},
                    "line": {"width": 1, "color": palette.RUN_A if pattern else palette.RUN_B},
                },
                hovertemplate=f"{lab} · %{{y}}: %{{x:.2f}} ms/step<extra></extra>",
            )
        )
    fig.update_layout(barmode="group", yaxis={"autorange": "reversed"})
    fig.update_xaxes(ticksuffix=" ms", title_text="idle per step")
    return _base_layout(fig, height=height)


def nvml_lines(
    samples: pd.DataFrame,
    field: str,
    *,
    origin_ns: int,
    unit: str = "%",
    height: int = 260,
    title: str | None = None,
) -> go.Figure:
    """One line per GPU of ``samples`` (``t_ns``, ``gpu``, ``field``), x in seconds since origin."""
    fig = go.Figure()
    if not samples.empty and field in samples:
        for gpu, g in samples.groupby("gpu", sort=True):
            fig.add_trace(
                go.Scatter(
                    x=(g["t_ns"].to_numpy(dtype="float64") - origin_ns) / 1e9,
                    y=g[field],
                    mode="lines",
                    name=f"GPU {gpu}",
                    line={"color": palette.EXTRA[int(gpu) % len(palette.EXTRA)], "width": 2},
                    hovertemplate=f"GPU {gpu}: %{{y:.1f}} {unit}<extra></extra>",
                )
            )
    fig.update_xaxes(ticksuffix=" s")
    fig.update_yaxes(ticksuffix=f" {unit}" if unit else "")
    if unit == "%":
        fig.update_yaxes(range=[0, 105])
    _base_layout(fig, height=height)
    # the title on top, the legend (only with several GPUs) below the plot: never one over the other
    n_gpus = samples["gpu"].nunique() if not samples.empty and "gpu" in samples else 0
    fig.update_layout(
        title={"text": title, "x": 0, "y": 0.98, "yanchor": "top", "font": {"size": 14}}
        if title
        else None,
        hovermode="x unified",
        showlegend=n_gpus > 1,
        legend={"orientation": "h", "yanchor": "top", "y": -0.18, "xanchor": "left", "x": 0},
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 50 if n_gpus > 1 else 10},
    )
    return fig


#: The heatmap's colour scale ends at this percentile of its cells (the profiler's drain step left
#: out): one long step never washes out the others; cells above it take the top colour.
HEATMAP_CLIP_PCT = 99.0
#: Above this many ranks the heatmap labels a subset of its rows (about this many), the
#: pace-setter's row and each node's first always among them.
HEATMAP_MAX_ROW_LABELS = 32


def drain_step(matrix: pd.DataFrame) -> int | None:
    """The profiler's drain step of a rank × step matrix (``rank``, ``step``, ``step_ms``): the
    last step when, on some rank of at least 3 steps, it lasts more than
    :data:`gpuscope.analysis.job.DRAIN_FACTOR` times the median of that rank's other steps (the
    job step time's rule: the host stopped stepping while the GPU emptied the queue); None
    otherwise."""
    from gpuscope.analysis.run_views import DRAIN_FACTOR

    if matrix.empty:
        return None
    last = int(matrix["step"].max())
    for _, g in matrix.groupby("rank", sort=False):
        if len(g) < 3 or int(g["step"].max()) != last:
            continue
        at_last = g["step"] == last
        others = g.loc[~at_last, "step_ms"].to_numpy(dtype="float64")
        tail = float(g.loc[at_last, "step_ms"].iloc[0])
        if others.size and tail > DRAIN_FACTOR * float(np.median(others)):
            return last
    return None


def _row_ticks(
    labels: Sequence[str], ranks: Sequence[int], nodes: Sequence[str], pace_setter: int | None
) -> tuple[list[str], list[str]]:
    """(tick values, tick texts) of the heatmap's rows: every row up to
    :data:`HEATMAP_MAX_ROW_LABELS` × 2 ranks, else every k-th row, each node's first row and the
    pace-setter's; the pace-setter's text in bold and named."""
    n = len(labels)
    if n <= 2 * HEATMAP_MAX_ROW_LABELS:
        keep = set(range(n))
    else:
        k = int(np.ceil(n / HEATMAP_MAX_ROW_LABELS))
        keep = set(range(0, n, k)) | {n - 1}
        keep |= {i for i in range(n) if i == 0 or nodes[i] != nodes[i - 1]}
    pace = {i for i, r in enumerate(ranks) if r == pace_setter}
    if n > 2 * HEATMAP_MAX_ROW_LABELS:  # no label so near another that their texts overlap
        keep = {i for i in keep if not any(0 < abs(i - j) < 3 for j in pace)}
        keep -= {i for i in keep if 0 < n - 1 - i < 3}  # the last row's label is kept
    rows = sorted(keep | pace)
    texts = [
        f"<b>{labels[i]} ◀ pace-setter</b>" if ranks[i] == pace_setter else labels[i] for i in rows
    ]
    return [labels[i] for i in rows], texts


def rank_step_heatmap(
    matrix: pd.DataFrame,
    value: str = "step_ms",
    *,
    height: int | None = None,
    pace_setter: int | None = None,
) -> go.Figure:
    """Ranks (rows, grouped by node) × steps (columns), one cell per rank and step coloured by
    ``value`` (``step_ms`` or ``wait_ms``), outlier cells marked with a ring: ONE heatmap trace
    whatever the number of ranks (never a sawtooth per rank). A cell's ``customdata`` is
    ``[rank, step]`` (what a click opens).

    The colour scale ends at the :data:`HEATMAP_CLIP_PCT` percentile of the cells outside the
    profiler's drain step (:func:`drain_step`); the drain's column is greyed over and named.
    Rows are labelled (a subset above 64 ranks, :func:`_row_ticks`); ``pace_setter``'s row is
    named, in bold, and framed. Every cell's hover (ringed or not) says its rank, step and
    value."""
    fig = go.Figure()
    if matrix.empty:
        return _base_layout(fig, height=height or 200, y_title="rank", x_title="step")
    order = matrix[["node", "rank"]].drop_duplicates()
    labels = [  # node names come from the traces: Plotly labels read HTML
        f"{_esc(n)} · rank {r}" if n != "?" else f"rank {r}"
        for n, r in zip(order["node"], order["rank"], strict=True)
    ]
    steps = sorted(int(s) for s in matrix["step"].unique())
    piv = matrix.pivot_table(index="rank", columns="step", values=value, aggfunc="first")
    piv = piv.reindex(index=list(order["rank"]), columns=steps)
    ranks = [int(r) for r in order["rank"]]
    custom = [[[int(r), int(s)] for s in steps] for r in ranks]
    title = "wait (ms)" if value == "wait_ms" else "step time (ms)"
    drain = drain_step(matrix)
    z = piv.to_numpy(dtype="float64")
    kept = z[:, [i for i, s in enumerate(steps) if s != drain]] if drain is not None else z
    finite = kept[np.isfinite(kept)]
    scale: dict[str, float] = {}
    if finite.size:
        lo = 0.0 if value == "wait_ms" else float(finite.min())
        hi = float(np.percentile(finite, HEATMAP_CLIP_PCT))
        if hi > lo:
            scale = {"zmin": lo, "zmax": hi}
    clipped = bool(scale) and bool(np.nanmax(z) > scale["zmax"])
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=[f"#{s}" for s in steps],
            y=labels,
            customdata=custom,
            colorscale="YlOrBr" if value == "wait_ms" else "Blues",
            colorbar={
                "title": {"text": title + ("<br>(top colour: ≥)" if clipped else "")},
                "thickness": 12,
            },
            hoverinfo="skip",  # the cells' points below carry the hover and the click
            name=title,
            **scale,
        )
    )
    # the cells as invisible points: a heatmap has no selectable points, these do. A
    # click selects the point under the pointer among the HOVERABLE traces (a trace with
    # hoverinfo "skip" is never picked: the click then selects nothing), so these points hold
    # the hover text (every cell's, ringed or not), and their customdata says the rank and step
    # a click opens
    pos = {r: i for i, r in enumerate(ranks)}
    n = len(ranks)
    fig_height = height or min(900, max(220, 60 + 14 * n))
    # a point no taller than its row: Plotly's hover picks, among the points whose marker holds
    # the pointer, one at random-ish, so a marker over three rows could answer for a neighbour
    point = float(np.clip(0.9 * (fig_height - 50) / n, 2.0, 14.0))
    notes = [
        (" · outlier (ringed)" if bool(o) else "")
        + (" · the profiler's drain step (outside the colour scale)" if int(s) == drain else "")
        for s, o in zip(matrix["step"], matrix["outlier"], strict=True)
    ]
    fig.add_trace(
        go.Scatter(
            x=[f"#{int(s)}" for s in matrix["step"]],
            y=[labels[pos[int(r)]] for r in matrix["rank"]],
            mode="markers",
            marker={"size": point, "opacity": 0, "color": "#000000"},  # hoverable, not drawn
            name="cells",
            customdata=[
                [int(r), int(s), float(v), note]
                for r, s, v, note in zip(
                    matrix["rank"], matrix["step"], matrix[value], notes, strict=True
                )
            ],
            hovertemplate="%{y} · step %{x}<br>"
            + title
            + " %{customdata[2]:.2f}%{customdata[3]}<extra></extra>",
            showlegend=False,
        )
    )
    out = matrix[matrix["outlier"]]
    if not out.empty:
        fig.add_trace(
            go.Scatter(
                x=[f"#{int(s)}" for s in out["step"]],
                y=[labels[pos[int(r)]] for r in out["rank"]],
                mode="markers",
                marker={
                    "symbol": "circle-open",
                    "size": 12,
                    "color": palette.BAD,
                    "line": {"width": 2},
                },
                name="outlier",
                customdata=[
                    [int(r), int(s)] for r, s in zip(out["rank"], out["step"], strict=True)
                ],
                # the ring is drawn only: the cell's point under it answers the hover and the
                # click (with the value), wherever the pointer is on the ring
                hoverinfo="skip",
            )
        )
    tickvals, ticktext = _row_ticks(labels, ranks, list(order["node"]), pace_setter)
    fig.update_yaxes(  # the rows fill the plot (the cells' points would pad it)
        range=[n - 0.5, -0.5], type="category", tickmode="array", tickvals=tickvals,
        ticktext=ticktext, tickfont={"size": 11 if n <= 2 * HEATMAP_MAX_ROW_LABELS else 10},
    )  # fmt: skip
    fig.update_xaxes(type="category", range=[-0.5, len(steps) - 0.5])
    if drain is not None:
        k = steps.index(drain)
        fig.add_shape(
            type="rect", xref="x", yref="paper", x0=k - 0.5, x1=k + 0.5, y0=0, y1=1,
            fillcolor="rgba(150,150,150,0.85)", line={"width": 0}, layer="above",
        )  # fmt: skip
        fig.add_annotation(
            x=k, xref="x", y=1, yref="paper", yanchor="bottom", showarrow=False,
            text="profiler drain", font={"size": 11, "color": "#666666"},
        )  # fmt: skip
    if pace_setter in pos:
        i = pos[int(pace_setter)]
        fig.add_shape(
            type="rect", xref="paper", yref="y", x0=0, x1=1, y0=i - 0.5, y1=i + 0.5,
            line={"color": palette.BAD, "width": 2}, fillcolor="rgba(0,0,0,0)", layer="above",
        )  # fmt: skip
    # the nearest cell answers wherever the pointer is in the plot (not only near a cell's centre)
    fig.update_layout(showlegend=False, clickmode="event+select", hoverdistance=-1)
    return _base_layout(fig, height=fig_height)


# -- memory ------------------------------------------------------------------------------------------


def memory_line(
    series: pd.DataFrame,
    *,
    origin_ns: int,
    x_range_ns: tuple[int, int],
    nvml: pd.DataFrame | None = None,
    total_bytes: int | None = None,
    height: int = 220,
) -> go.Figure:
    """The allocator's memory over time (``series``: ``t_ns``, ``allocated``, ``reserved``, bytes;
    a step line, each value holding until the next event), NVML memory.used (``t_ns``,
    ``mem_used_bytes``) beside it, in GiB; x in ms since ``origin_ns`` over ``x_range_ns``, the
    sawtooth's axis. The device's memory is drawn only when the peak comes within half of it."""
    fig = go.Figure()
    gib = float(2**30)
    lines = [("reserved", "reserved (allocator's cache)", palette.RUN_A),
             ("allocated", "allocated (tensors)", palette.BUSY)]  # fmt: skip
    for col, name, color in lines:
        if not series.empty and col in series:
            fig.add_trace(
                go.Scatter(
                    x=_ms(series["t_ns"], origin_ns),
                    y=series[col].to_numpy(dtype="float64") / gib,
                    mode="lines",
                    name=name,
                    line={"color": color, "width": 2, "shape": "hv"},
                    hovertemplate=f"{name}: %{{y:.3f}} GiB<extra></extra>",
                )
            )
    if nvml is not None and not nvml.empty:
        fig.add_trace(
            go.Scatter(
                x=_ms(nvml["t_ns"], origin_ns),
                y=nvml[MEM_USED_BYTES].to_numpy(dtype="float64") / gib,
                mode="lines",
                name="NVML memory.used",
                line={"color": palette.NVML, "width": 2, "shape": "hv", "dash": "dot"},
                hovertemplate="NVML used: %{y:.3f} GiB<extra></extra>",
            )
        )
    peak = float(series["reserved"].max()) if not series.empty and "reserved" in series else 0.0
    if total_bytes and peak >= 0.5 * total_bytes:
        fig.add_hline(
            y=total_bytes / gib,
            line={"color": palette.BAD, "width": 1, "dash": "dash"},
            annotation_text="GPU memory",
            annotation_position="top left",
        )
    fig.update_xaxes(range=list(_ms(list(x_range_ns), origin_ns)))
    fig.update_yaxes(rangemode="tozero")
    return _base_layout(fig, height=height, y_title="GiB", x_title="ms")
