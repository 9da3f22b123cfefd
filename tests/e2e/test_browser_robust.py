"""The dashboard never breaks in a browser: the run page loaded fresh again and again and zoomed by
dragging across the sawtooth shows no exception element and no failed section; a run named like
Markdown is shown as text and makes the browser fetch nothing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Server,
    click_ingest,
    open_uploader,
    sample_ids,
    sawtooth_chart,
    screenshot,
    wait_idle,
)
from synth import training_trace

pytestmark = pytest.mark.browser

FRESH_LOADS = 10
DRAG_ZOOMS = 5
# what a broken page shows: Streamlit's exception box, or a section's one-line failure
BROKEN = '[data-testid="stException"]'
FAILED_SECTION = re.compile(r"could not be shown|cannot unpack|Traceback")


def _assert_unbroken(page, what: str) -> None:  # type: ignore[no-untyped-def]
    assert page.locator(BROKEN).count() == 0, f"{what}: an exception element is on the page"
    body = page.locator('[data-testid="stMain"]').inner_text()
    found = FAILED_SECTION.search(body)
    assert found is None, f"{what}: the page says {found.group(0)!r}:\n{body[:2000]}"


def _view_caption(page) -> str:  # type: ignore[no-untyped-def]
    cap = page.locator('[data-testid="stCaptionContainer"]', has_text="drag across the plot")
    cap.first.wait_for()
    return cap.first.inner_text()


def _slider_thumbs(page) -> list[str]:  # type: ignore[no-untyped-def]
    """The step numbers the "Steps shown" slider's two thumbs show, e.g. ``["#1", "#6"]``."""
    thumbs = page.locator('[data-testid="stSliderThumbValue"]')
    thumbs.first.wait_for()
    return [t.inner_text() for t in thumbs.all()]


def _drag(page, chart, x0: float, x1: float) -> None:  # type: ignore[no-untyped-def]
    """Drag across the plot area from ``x0`` to ``x1`` (fractions of its width), scrolled into
    view first as a reader would (the job's cards above it can push it below a 1000 px fold)."""
    area = chart.locator(".nsewdrag").first
    area.scroll_into_view_if_needed()
    box = area.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * x0, y)
    page.mouse.down()
    for i in range(1, 11):
        page.mouse.move(box["x"] + box["width"] * (x0 + (x1 - x0) * i / 10), y)
    page.mouse.up()


def test_run_page_fresh_loads_and_drag_zooms_never_break(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    before, _ = sample_ids(server)
    url = f"{server.url}/run?run={before}"
    for i in range(FRESH_LOADS):
        page = new_page()  # a fresh browser context: a new session every time
        page.goto(url)
        sawtooth_chart(page)
        wait_idle(page)
        page.get_by_role("heading", name="Fixes").wait_for()  # the below-the-fold rerun is done
        wait_idle(page)
        _assert_unbroken(page, f"fresh load {i + 1}")
        if i < FRESH_LOADS - 1:
            page.context.close()

    # the last fresh load's page, drawn to its end, is zoomed by dragging across the sawtooth
    caption = _view_caption(page)
    whole_steps = _slider_thumbs(page)
    for i in range(DRAG_ZOOMS):
        chart = sawtooth_chart(page)
        _drag(page, chart, 0.3, 0.6)
        page.wait_for_function(
            "(old) => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
            ".some(e => e.innerText.includes('drag across the plot') && e.innerText !== old)",
            arg=caption,
        )
        wait_idle(page)
        _assert_unbroken(page, f"drag-zoom {i + 1}")
        new = _view_caption(page)
        assert new != caption, f"drag-zoom {i + 1} did not change the view"
        caption = new
    # the step slider follows the zoom: it no longer spans every step
    assert _slider_thumbs(page) != whole_steps
    assert "NVML" not in caption or "NVML utilization overlaid" in caption
    screenshot(page, "run_zoomed")


HOSTILE = "![b](http://beacon.invalid/x.png) [link](http://beacon.invalid/l) www.beacon.invalid"


def test_a_run_named_like_markdown_is_shown_as_text(
    server: Server, new_page, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    fetched: list[str] = []
    page = new_page()
    page.on("request", lambda r: fetched.append(r.url) if "beacon" in r.url else None)
    page.goto(f"{server.url}/runs")
    wait_idle(page)
    open_uploader(page)
    trace = training_trace("after", steps=3).write(tmp_path / "hostile.pt.trace.json.gz")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files([str(trace)])
    name = page.get_by_role("textbox", name="Name", exact=True)
    from playwright.sync_api import expect

    expect(name).to_have_value("hostile")  # the default name, shown before Ingest
    name.fill(HOSTILE)
    name.press("Enter")
    click_ingest(page)
    page.wait_for_url(re.compile(r"/run\?run=[0-9a-f]{12}"))
    heading = page.locator("h1").first
    heading.wait_for()
    sawtooth_chart(page)
    wait_idle(page)
    shown = heading.inner_text().replace("\u2060", "").strip()  # word joiners break autolinks
    assert shown.startswith("![b](http://beacon.invalid/x.png) [link](http://beacon.invalid/l)")
    main = page.locator('[data-testid="stMain"]')
    assert main.locator("img[src*='beacon']").count() == 0
    links = main.locator("a[href*='beacon']")
    assert links.count() == 0, [
        links.nth(i).evaluate("e => e.outerHTML") for i in range(links.count())
    ]
    page.goto(f"{server.url}/runs")  # the run list and the flash message show it as text too
    wait_idle(page)
    assert page.locator("img[src*='beacon']").count() == 0
    assert fetched == [], f"the browser fetched {fetched}"
