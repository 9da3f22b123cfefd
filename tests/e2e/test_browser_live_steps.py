"""Issue 24 in a real browser: the Live page shows the step times a training loop reports to a real
`gpuscope sample --replay` server, and its button asks the sampler for the next slow step's trace."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import REPO, Server, free_port, stop_process, wait_up

pytestmark = pytest.mark.browser

RECORDING = REPO / "sample_traces" / "nvml" / "h200_live.nvml.jsonl"
SPEED = ("--speed", "10", "--port")


@pytest.fixture(scope="module")
def sampler() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "sample", "--replay", str(RECORDING), *SPEED, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    wait_up(f"{url}/healthz", proc, "the replay sampler", timeout_s=20)
    yield url
    stop_process(proc, timeout_s=10)


def _post(url: str, body: dict) -> dict:
    from gpuscope.sampler.token import auth_headers  # the sampler's token, as its clients send it

    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers=auth_headers(url)
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_live_page_shows_step_times_and_asks_for_a_trace(
    server: Server,
    sampler: str,
    new_page,  # type: ignore[no-untyped-def]
) -> None:
    # what slow_steps(..., sampler=URL) sends: 99 steps of 10 ms and one of 95 ms
    steps = [[i, 10.0] for i in range(99)] + [[99, 95.0]]
    assert _post(f"{sampler}/api/steps", {"steps": steps})["trace_requested"] is False
    page = new_page()
    page.goto(f"{server.url}/live?sampler={sampler}")
    page.get_by_text("Steps reported").wait_for(timeout=60_000)
    main = page.locator('[data-testid="stMain"]')
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stMain\"]').innerText.includes('95.0 ms')",
        timeout=30_000,
    )
    text = main.inner_text()
    assert "100" in text and "10.0 ms" in text  # 100 steps, median 10 ms, slowest 95 ms
    # the histogram is drawn after the figures above it arrive: wait for it (a loaded machine)
    page.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
    page.get_by_text("Step time distribution").wait_for()
    page.get_by_role("button", name="Trace the next slow step").click()
    page.get_by_text("Asked for the next slow step's trace").wait_for(timeout=30_000)
    # the sampler now tells the training loop, in its answer to the next report
    assert _post(f"{sampler}/api/steps", {"steps": [[100, 10.0]]})["trace_requested"] is True
    # the loop reports the trace it wrote: the request is honoured, the page lists it
    _post(
        f"{sampler}/api/steps",
        {
            "traces": [
                {
                    "step": 101,
                    "path": "traces/run_rank0_step101.pt.trace.json.gz",
                    "on_request": True,
                }
            ]
        },
    )
    page.get_by_text("step 101", exact=False).wait_for(timeout=30_000)
    assert page.get_by_text("Traceback").count() == 0
    # issue 47: a reported path is shown as inert text: no image fetched, no link drawn
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    hostile = "a.json` ![p](http://127.0.0.1:9/pixel.png) [Sign in again](http://127.0.0.1:9/x) `"
    _post(f"{sampler}/api/steps", {"traces": [{"step": 102, "path": hostile}]})
    page.get_by_text("step 102", exact=False).wait_for(timeout=30_000)
    main = page.locator('[data-testid="stMain"]')
    assert hostile in main.inner_text()
    assert main.locator("img[src*='127.0.0.1:9']").count() == 0
    assert main.locator("a", has_text="Sign in again").count() == 0
    assert not [u for u in asked if "127.0.0.1:9/" in u]
