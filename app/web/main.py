"""gpuscope dashboard: the Streamlit entry script (``gpuscope ui`` runs ``streamlit run`` on it).

Pages: Runs (upload, list, manage), Run (one run's analysis), Compare (two runs, ``?a=…&b=…``),
Live (a running ``gpuscope sample`` server). Every page is a script in ``screens/``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb
import streamlit as st
from gpuscope import __version__
from gpuscope.vocabulary.errors import GpuscopeError
from gpuscope.vocabulary.redact import install_log_redaction
from gpuscope.web import auth, db, ui
from gpuscope.web.redrawn_downloads import serve_redrawn_downloads
from gpuscope.web.uploads import keep_file_url_answers

install_log_redaction()  # every log record of the server masks store secrets (idempotent)
keep_file_url_answers()  # answers the browser waits on (uploads, a deferred download) outlive a rerun
serve_redrawn_downloads()  # a download clicked while a rerun redraws its button still gets its file
ICON = Path(__file__).resolve().parent / "static" / "favicon.png"  # local: no font CDN request
st.set_page_config(
    page_title="gpuscope", page_icon=str(ICON) if ICON.is_file() else None, layout="wide"
)

RUNS = st.Page("screens/runs.py", title="Runs", icon=":material/table_rows:", url_path="runs")
PAGES = [
    RUNS,
    st.Page("screens/run.py", title="Run", icon=":material/insights:", url_path="run"),
    st.Page(
        "screens/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"
    ),
    st.Page("screens/live.py", title="Live", icon=":material/sensors:", url_path="live"),
]


def _home() -> None:
    """``/`` opens the Runs page at its own URL (``/runs``), so every page has one stable address."""
    st.switch_page(RUNS)


HOME = st.Page(_home, title="gpuscope", url_path="home", default=True, visibility="hidden")

# With sign-in on, a visitor who has not signed in sees the sign-in page only (no page list).
locked = auth.enabled() and not auth.signed_in()
page = st.navigation([HOME, *PAGES], position="hidden" if locked else "sidebar")
auth.gate()
with st.sidebar:
    # shown(): a team store's URL without its password (every visitor sees the sidebar); a bad
    # spec is reported by db.store() below
    try:
        shown = db.db_path()
    except GpuscopeError:
        shown = "?"
    st.caption(f"gpuscope {__version__} · store {ui.md_code(shown, None)}")
try:
    db.store()
    db.begin_script_run()  # the store's generation, read once: what other processes committed
except (db.StoreUnavailable, GpuscopeError) as e:  # a bad spec, or a store fault: store dropped
    st.error(ui.md(str(e), None), icon=":material/error:")
    st.stop()
try:
    page.run()
except GpuscopeError as e:  # the one translation: a store fault on a write (db.writing) and
    # anything else a section let through: one plain line, store reopened
    st.error(f"**Nothing was stored.** {ui.md(str(e), None)}", icon=":material/error:")
except duckdb.Error as e:  # a store fault on a read: drop the connection, the next action reopens
    st.error(ui.md(str(db.fault(e)), None), icon=":material/error:")
except Exception as e:  # a bug outside every section: one plain line here, the traceback in the log
    logging.getLogger("gpuscope.web").exception("page %r failed", page.title)
    st.error(
        f"This page could not be shown: an internal error ({type(e).__name__}). "
        "The details are in the server log.",
        icon=":material/error:",
    )
