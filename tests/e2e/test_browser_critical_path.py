"""In a real browser: the Run page's critical-path section (a bar per step, the estimates table).
Screenshot: artifacts/screenshots/run_critical_path.png."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Server, sample_ids, sawtooth_chart, screenshot, wait_idle

pytestmark = pytest.mark.browser


def test_run_page_shows_the_critical_path(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    before, _ = sample_ids(server)
    page = new_page()
    page.goto(f"{server.url}/run?run={before}")
    sawtooth_chart(page)
    heading = page.get_by_role("heading", name="Critical path of each step")
    heading.wait_for(timeout=120_000)
    wait_idle(page)
    heading.scroll_into_view_if_needed()
    assert page.get_by_text("Bound by", exact=False).first.is_visible()
    # the stacked bars: one y label per step of the sample (ProfilerStep#3..7)
    chart = page.locator('[data-testid="stPlotlyChart"]').last
    labels = chart.locator("g.ytick text").all_text_contents()
    assert labels and all(t.startswith("step ") for t in labels), labels
    assert "Gains re-timed along the path" in page.content()
    screenshot(page, "run_critical_path")
