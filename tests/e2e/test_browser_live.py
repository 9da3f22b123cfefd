"""Browser test of the Live page: a real `gpuscope sample --replay` of the H200 recording and a real
`gpuscope ui` server (empty store), driven by Playwright in Debian's chromium."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    REPO,
    Server,
    browser_context,
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


@pytest.fixture(scope="module")
def live_page(live_server: Server, replay_sampler: str, browser) -> Iterator[dict]:  # type: ignore[no-untyped-def,type-arg]
    """The Live page following the replay sampler, in a fresh browser context of the module's, read
    in turn by both tests (in this order in the file): polling (:func:`following`), then detached
    by the second test. Loaded on its first use, in that test's own call (its failure report shows
    it)."""
    ctx = browser_context(browser)
    page = ctx.new_page()
    url = f"{live_server.url}/live?sampler={replay_sampler}"
    yield {"page": page, "url": url, "at": "new", "gpu0_at": None}
    ctx.close()


def following(live: dict, shown):  # type: ignore[no-untyped-def,type-arg]
    """:func:`live_page`'s page, loaded on its first use, still polling the sampler."""
    page = shown(live["page"])
    if live["at"] == "new":
        page.goto(live["url"])
        live["at"] = "polling"
    return page


def gpu0_shown(page, live: dict | None) -> float:  # type: ignore[no-untyped-def,type-arg]
    """Until GPU 0's sentence shows; when it first showed on the page (monotonic seconds; kept in
    ``live`` for the module's page)."""
    page.get_by_text("GPU 0 is ", exact=False).first.wait_for(timeout=60_000)
    if live is None:
        return time.monotonic()
    if live["gpu0_at"] is None:
        live["gpu0_at"] = time.monotonic()
    return live["gpu0_at"]


def test_live_page_follows_a_replay_sampler(
    live_server: Server,
    replay_sampler: str,
    live_page,  # type: ignore[no-untyped-def]
    shown,  # type: ignore[no-untyped-def]
    new_page,  # type: ignore[no-untyped-def]
) -> None:
    """On the module's Live page (:func:`live_page`) while it polls, else (the other test has
    detached it) on a page of its own."""
    if live_page["at"] in ("new", "polling"):
        page = following(live_page, shown)
    else:
        page = new_page()
        page.goto(f"{live_server.url}/live?sampler={replay_sampler}")
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(timeout=60_000)
    diagnosis = page.get_by_text("GPU 0 is ", exact=False).first
    diagnosis.wait_for(timeout=30_000)
    if page is live_page["page"]:
        gpu0_shown(page, live_page)
    assert "of the last" in diagnosis.inner_text()
    assert page.get_by_text("GPU 1 util").count() >= 1
    # a few more polls, with no traceback on the page
    page.wait_for_timeout(1500)
    assert page.get_by_text("Traceback").count() == 0
    path = screenshot(page, "live")
    assert path.stat().st_size > 10_000


def test_live_sentence_agrees_with_its_chart(live_page, shown) -> None:  # type: ignore[no-untyped-def]
    """Issue 46: the idle share in the sentence under GPU 0's chart is 100 − the time-weighted
    mean of the utilization that chart draws (read from the plot in the browser, detached so
    both come from one poll); the memory card shows the bytes the newest sample holds.
    On the module's Live page (:func:`live_page`), detached here."""
    import itertools
    import re

    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = following(live_page, shown)
    shown_at = gpu0_shown(page, live_page)
    # a few polls (4 s since GPU 0's sentence showed): some of the recording's work in view
    page.wait_for_timeout(max(0.0, 4000 - 1000 * (time.monotonic() - shown_at)))
    live_page["at"] = "detached"
    attach = page.get_by_role("button", name="Attach")
    for _ in range(5):  # a click during a poll's rerun can be lost: click until it shows
        page.get_by_role("button", name="Detach").click()
        try:
            attach.wait_for(timeout=5_000)
            break
        except PlaywrightTimeout:
            continue
    page.get_by_text("Detached: not polling", exact=False).wait_for(timeout=20_000)
    page.wait_for_timeout(1000)
    sentence = page.get_by_text("GPU 0 is ", exact=False).first.inner_text()
    m = re.search(r"idle (\d+)%|\((\d+)% of the last", sentence)
    assert m, sentence
    said = int(m.group(1) or m.group(2))
    xs, ys = page.evaluate(
        """() => {
            const title = p => {
                const t = (p._fullLayout || p.layout || {}).title;
                return t ? String(t.text || t) : '';
            };
            const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
            const plot = plots.find(p => title(p).includes('GPU 0 utilization'));
            if (!plot) { return [plots.map(title), []]; }
            const tr = (plot._fullData || plot.data)[0];
            return [Array.from(tr.x), Array.from(tr.y)];
        }"""
    )
    assert len(xs) == len(ys) > 10
    held = [b - a for a, b in itertools.pairwise(xs)]
    held.append(sorted(held)[len(held) // 2])
    mean = sum(h * y for h, y in zip(held, ys, strict=True)) / sum(held)
    assert abs((100 - mean) - said) <= 1.0, (said, 100 - mean, sentence)
    assert page.get_by_text("peak", exact=False).count() >= 1
