"""The Run page's "Critical path" section: a bar per step (what bounds it) and each fix's gain
re-timed along the path (gpuscope.analysis.critical_path, gpuscope.analysis.gains)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st
from gpuscope.analysis import run_views
from gpuscope.web.figures_path import PATH_LABELS, critical_path_bars

PLOT_CONFIG = {"displaylogo": False, "scrollZoom": False}


def gain_range(low_pct: float, high_pct: float) -> str:
    """An estimate's range of gain (% of the step): "44 to 71 %"; a low end below zero is a fix
    that may slow the step, said in words ("23 % slower to 41 % faster"), not as "-23 – 41 %"."""
    low, high = round(low_pct), round(high_pct)
    if low < 0:
        return f"{-low} % slower to {high} % faster" if high > 0 else f"{-high} to {-low} % slower"
    return f"{low} to {high} %"


def estimates_frame(estimates: Sequence[run_views.FixEstimate]) -> pd.DataFrame:
    """One row per fix with an estimate: fix, estimated gain and range (%), step after."""
    rows = []
    for f in estimates:
        est = f.estimate
        what = "per-sample time (4× batch)" if f.footing == "per_sample_time" else "step time"
        rows.append(
            {
                "Fix": f.fix,
                "Estimated gain": f"{est.gain_pct:.0f}% of the {what}",
                "Range": gain_range(est.low_pct, est.high_pct),
                "Step after (ms)": f"{est.step_ms:.3g}" if est.step_ms else "–",
            }
        )
    return pd.DataFrame(rows)


def show(section: run_views.PathSection) -> None:
    """The section: nothing but a caption when the report has no critical path."""
    st.subheader("Critical path of each step")
    if not section.steps:
        st.caption("No critical path: the window holds no GPU activity.")
        return
    dom = section.dominant
    pct = section.bound_by_pct.get(dom or "", 0.0)
    st.caption(
        f"Bound by {PATH_LABELS.get(dom or '', dom or '-').lower()} ({pct:.0f}% of the path). "
        "Each bar is a step; its parts are the time of the step's critical path by what it "
        "waited on, and sum to the step time."
    )
    st.plotly_chart(critical_path_bars(section.steps), config=PLOT_CONFIG)
    est = estimates_frame(section.estimates)
    if not est.empty:
        st.markdown("**Gains re-timed along the path**")
        st.dataframe(est, hide_index=True)
