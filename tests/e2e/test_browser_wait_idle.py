"""The browser tests' own wait (e2e_support.wait_idle) in a real browser: on a bare Streamlit page
whose script asks for two reruns (``st.rerun()``, as the Runs list does to fill its figures in,
and the Run page on a rank switch), it returns only once the last run has drawn. Streamlit
reports the session idle for a moment between a run and the rerun it asked for, and shows its
"Running…" icon only after a run has lasted 500 ms: a wait on either alone returns early."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import free_port, stop_process, wait_idle, wait_up

pytestmark = pytest.mark.browser

# Three runs, each shorter than the 500 ms after which the "Running…" icon shows; the page says
# which run drew it, and "done" once the last one has.
RERUNS = """import time

import streamlit as st

n = st.session_state.get("n", 0)
st.write(f"run {n}")
if n < 2:
    st.session_state["n"] = n + 1
    time.sleep(0.3)
    st.rerun()
st.write("done")
"""


@pytest.fixture(scope="module")
def reruns_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A bare ``streamlit run`` of :data:`RERUNS` on a free port; its URL."""
    work = tmp_path_factory.mktemp("reruns")
    script = work / "reruns.py"
    script.write_text(RERUNS)
    port, log = free_port(), work / "server.log"
    cmd = [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true"]
    cmd += ["--server.port", str(port), "--server.address", "127.0.0.1"]
    cmd += ["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=work)
    url = f"http://127.0.0.1:{port}"
    wait_up(f"{url}/_stcore/health", proc, "the bare page", log=log)
    yield url
    stop_process(proc)


def test_wait_idle_returns_after_the_last_of_chained_reruns(reruns_page: str, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.goto(reruns_page)
    wait_idle(page)
    main = page.locator('[data-testid="stMain"]').inner_text()
    assert "run 2" in main and "done" in main, main
