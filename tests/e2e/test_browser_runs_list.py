"""The Runs list in a real browser (issue 46): a run without figures (an NVML series; any run while
it is analysed) has its empty cells drawn "—", never "None", and every column of the list, MFU,
Tags and Uploaded by included, shows whole in a 1440 px window. What the grid draws is read from
its canvas (each string it draws is recorded), as a user sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import POLL_MS, REPO, Server, screenshot, start_server, stop_server, wait_idle
from synth import nvml_series

pytestmark = pytest.mark.browser

#: Records every string drawn on a canvas (the data grid draws its cells and headers so).
DRAWN = (
    "(() => { window.__drawn = []; const p = CanvasRenderingContext2D.prototype;"
    " const fill = p.fillText; p.fillText = function (t, ...a) {"
    " window.__drawn.push(String(t)); return fill.call(this, t, ...a); }; })()"
)


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, dict]]:  # type: ignore[type-arg]
    """A server of its own holding the DDP sample (tagged, with its uploader) and an NVML-only
    run; ``analyze --json`` of the DDP run."""
    work = tmp_path_factory.mktemp("runs_list")
    s = start_server(work, db=work / "store", load_samples=False)
    try:

        def cli(*args: str) -> str:
            done = subprocess.run(
                [sys.executable, "-m", "gpuscope", *args, "--db", str(s.db)],
                capture_output=True, text=True, timeout=300, cwd=REPO,
                env={**os.environ, "GPUSCOPE_ALLOW_UPLOADED_BY": "1"},
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done.stdout

        (rid,) = cli(
            "ingest", str(REPO / "sample_traces" / "ddp"), "--name", "ddp", "--tag", "baseline",
            "--tag", "h200", "--uploaded-by", "alice@example.com",
        ).split()  # fmt: skip
        series = nvml_series(work / "gpu0.nvml.jsonl", seconds=2.0, interval_ms=100.0)
        cli("ingest", str(series), "--name", "nvml only")
        yield s, rid, json.loads(cli("analyze", rid, "--json"))
    finally:
        stop_server(s)


def test_empty_figures_read_as_a_dash_and_every_column_shows_at_1440_px(listed, new_page) -> None:  # type: ignore[no-untyped-def]
    server, _, doc = listed
    job = doc["job"]
    page = new_page()
    assert page.viewport_size["width"] == 1440
    page.add_init_script(DRAWN)
    page.goto(f"{server.url}/runs")
    step = f"{job['step_time_ms']['p50']:.1f} ms"
    page.wait_for_function(
        f"() => window.__drawn.includes({json.dumps(step)})", timeout=180_000, polling=POLL_MS
    )
    wait_idle(page)
    page.wait_for_timeout(500)  # the grid's last frame
    drawn: list[str] = page.evaluate("() => window.__drawn")
    # the DDP run's figures as formatted, the NVML-only run's as a dash: never "None"
    assert f"{job['split']['busy_pct']:.1f} %" in drawn and f"rank {job['pace_setter']}" in drawn
    assert "None" not in drawn and "nan" not in drawn, sorted(set(drawn))
    nvml = page.locator('[data-testid="stDataFrame"] [role="row"]').filter(has_text="nvml only")
    cells = [c.strip() for c in nvml.first.locator('[role="gridcell"]').all_text_contents()]
    assert cells.count("") >= 4, cells  # no step, busy, waiting or MFU: drawn as the dash
    # every column in view, none cut off: the grid scrolls nothing sideways
    grid = page.locator('[data-testid="stDataFrame"]')
    heads = [h.strip() for h in grid.locator('[role="columnheader"]').all_text_contents()]
    for want in ("Name", "Run id", "Step time", "Pace-setter", "MFU", "Tags", "Uploaded by"):
        assert want in heads, heads
        assert want in drawn, want  # drawn on the canvas, not only listed
    scroller = grid.locator(".dvn-scroller").first
    width, shown = scroller.evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert width <= shown, (width, shown)
    assert "alice@example.com" in grid.inner_text() or "alice@example.com" in " ".join(
        grid.locator('[role="gridcell"]').all_text_contents()
    )
    screenshot(page, "runs_list")
