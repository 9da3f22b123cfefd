"""Browser test of the Live page: a real `gpuscope sample --replay` of the H200 recording and a real
`gpuscope ui` server (empty store), driven by Playwright in Debian's chromium."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    REPO,
    Server,
    free_port,
    screenshot,
    start_server,
    stop_process,
    stop_server,
    wait_up,
)

pytestmark = pytest.mark.browser

RECORDING = REPO / "sample_traces" / "nvml" / "h200_live.nvml.jsonl"


@pytest.fixture(scope="module")
def replay_sampler() -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "gpuscope", "sample", "--replay", str(RECORDING)]
    proc = subprocess.Popen(
        [*cmd, "--speed", "10", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    wait_up(f"{url}/healthz", proc, "the replay sampler", timeout_s=20)
    yield url
    stop_process(proc, timeout_s=10)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("e2e_live"), load_samples=False)
    yield s
    stop_server(s)


def test_live_page_follows_a_replay_sampler(
    live_server: Server,
    replay_sampler: str,
    new_page,  # type: ignore[no-untyped-def]
) -> None:
    page = new_page()
    page.goto(f"{live_server.url}/live?sampler={replay_sampler}")
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(timeout=60_000)
    diagnosis = page.get_by_text("GPU 0 is ", exact=False).first
    diagnosis.wait_for(timeout=30_000)
    assert "of the last" in diagnosis.inner_text()
    assert page.get_by_text("GPU 1 util").count() >= 1
    # a few more polls, with no traceback on the page
    page.wait_for_timeout(1500)
    assert page.get_by_text("Traceback").count() == 0
    path = screenshot(page, "live")
    assert path.stat().st_size > 10_000
