"""Figures of the critical path: one stacked bar per step, by "bound by" category."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from gpuscope.analysis.run_views import StepPath
from gpuscope.vocabulary.causes import DATA_LOADING

#: The "bound by" categories (gpuscope.analysis.critical_path.BOUND_BY) and their colours.
PATH_COLORS: dict[str, str] = {
    "cpu": "#8d99ae",
    "launch": "#e9c46a",
    "kernels": "#3b82c4",
    "copies": "#9b5de5",
    "communication": "#f4a261",
    DATA_LOADING: "#d1495b",
    "sync": "#2a9d8f",
}
PATH_LABELS: dict[str, str] = {
    "cpu": "CPU",
    "launch": "Launch overhead",
    "kernels": "Kernels",
    "copies": "Copies",
    "communication": "Communication",
    DATA_LOADING: "Data loading",
    "sync": "Sync",
}


def critical_path_bars(steps: Sequence[StepPath], *, height: int = 320) -> go.Figure:
    """Horizontal stacked bars, one per step (the report's :class:`StepPath`): ms of the step's
    critical path per category; each bar's length is the step time."""
    labels = [f"step {s.number}" for s in steps]
    by_ms = [s.bound_by_ms for s in steps]
    fig = go.Figure()
    for cat, color in PATH_COLORS.items():
        xs = [float(b.get(cat) or 0.0) for b in by_ms]
        if not any(xs):
            continue
        fig.add_trace(
            go.Bar(
                x=xs,
                y=labels,
                name=PATH_LABELS[cat],
                orientation="h",
                marker={"color": color},
                hovertemplate="%{y}: " + PATH_LABELS[cat] + " %{x:,.3f} ms<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(ticksuffix=" ms", title_text="critical path of the step")
    return fig
