"""The "Download report" button of the Run and Compare pages: the self-contained HTML report of
``gpuscope report`` (:mod:`gpuscope.reports`), built only when the button is clicked."""

from __future__ import annotations

import re

import streamlit as st
from gpuscope.web import db


def file_name(name: str, suffix: str = "html") -> str:
    """A safe file name for a run's report: ``gpuscope-report-<name>.html``."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:80] or "run"
    return f"gpuscope-report-{stem}.{suffix}"


def download_report(
    run_id: str, rank: int | None, *, name: str, key: str, compare_to: str | None = None
) -> None:
    """A download button whose file is the HTML report of ``run_id`` (with ``compare_to``: of
    that run as A against ``run_id`` as B), made on click."""

    def make() -> str:
        from gpuscope.reports import build_report

        return build_report(db.cursor(), run_id, fmt="html", rank=rank, compare_to=compare_to)

    st.download_button(
        "Download report",
        data=make,
        file_name=file_name(name),
        mime="text/html",
        key=f"report_{key}",
        on_click="ignore",
        icon=":material/download:",
        help="A self-contained HTML report (headline, idle causes, fixes with code, kernels, "
        "sawtooth) to attach to a pull request or a ticket: `gpuscope report` on the command line",
    )
