"""The Run page's "Open in Perfetto" panel: the events of the rank on the page, in the window the
busy-time plot shows (its zoom), handed to Perfetto's UI, with a download link as the fallback."""

from __future__ import annotations

import re

import streamlit as st
from gpuscope.web import data, db

#: The hand-off frame's height, px: one row of its 38 px buttons, with room for their focus ring.
HANDOFF_HEIGHT_PX = 48


def _span(run_id: str, rank: int) -> tuple[int, int]:
    """The busy-time plot's current view of this rank (its zoom), else the analysed window."""
    w = data.window(db.db_path(), run_id, rank)
    s, e = st.session_state.get(f"view_run_{run_id}_{rank}", (w.start_ns, w.end_ns))
    return max(int(w.start_ns), int(s)), min(int(w.end_ns), int(e))


def perfetto_panel(run_id: str, rank: int, name: str) -> None:
    """A button that builds the trimmed trace of the current view, then the hand-off page."""
    from gpuscope.perfetto import handoff_html, trace_for_perfetto

    s, e = _span(run_id, rank)
    key = f"perfetto_{run_id}_{rank}"
    label = f"{(e - s) / 1e6:,.1f} ms of rank {rank}"
    if st.button(
        f"Open these events in Perfetto ({label})",
        key=f"{key}_go",
        icon=":material/open_in_new:",
        help="The events of this rank in the window the plot shows (zoom to narrow it), as a "
        "trimmed Kineto trace that Perfetto's UI opens in your browser",
    ):
        st.session_state[key] = (s, e)
    if st.session_state.get(key) != (s, e):
        return
    try:
        trace = trace_for_perfetto(db.cursor(), run_id, rank, s, e)
    except ValueError as err:
        st.error(str(err), icon=":material/error:")
        return
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:60] or "run"
    file_name = f"{stem}_rank{rank}_{s}-{e}.pt.trace.json"
    # st.iframe (a srcdoc frame that runs the page's one script; not the deprecated
    # components.v1.html): the name reaches the page only through handoff_html's encoding
    st.iframe(
        handoff_html(trace, title=f"{name} rank {rank} ({label})", file_name=file_name),
        height=HANDOFF_HEIGHT_PX,
        alt="Open these events in Perfetto's UI, or download them",
    )
    st.caption(
        f"{len(trace) / 1e6:,.1f} MB of Kineto JSON. Perfetto's UI loads it in your browser; "
        "if the pop-up is blocked or Perfetto cannot be reached, download it and open it there."
    )
