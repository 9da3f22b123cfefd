"""In a real browser (issue 23): the address bar holds the whole view and Back and reload restore
it (Compare's A/B order and aligned step, the Run page's zoom and section), and Compare colours a
change by whether it is good for the user, on the real before/after samples."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import POLL_MS, Server, sample_ids, sawtooth_chart, screenshot, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _rgb(css: str) -> tuple[int, int, int]:
    r, g, b = (int(x) for x in re.findall(r"\d+", css)[:3])
    return r, g, b


def _hue(css: str) -> str:
    """``green``, ``red`` or ``gray`` for a CSS colour."""
    r, g, b = _rgb(css)
    if g > r + 30 and g > b:
        return "green"
    if r > g + 40 and r > b + 40:
        return "red"
    if max(r, g, b) - min(r, g, b) < 40:
        return "gray"
    return css


def _delta_colour(page, label: str) -> str:  # type: ignore[no-untyped-def]
    card = page.locator('[data-testid="stMetric"]', has_text=label).first
    card.wait_for()
    delta = card.locator('[data-testid="stMetricDelta"]')
    return _hue(delta.evaluate("e => getComputedStyle(e).color"))


def _header(page) -> str:  # type: ignore[no-untyped-def]
    return page.locator('[data-testid="stMarkdownContainer"]', has_text="→").first.inner_text()


def _wait_header_order(page, first: str, second: str) -> None:  # type: ignore[no-untyped-def]
    """Until the header names ``first`` before ``second``, then until that run has finished. The
    URL changes when the rerun sets it, before the page is drawn again: a header read right after
    the URL (even after ``wait_idle``, which can look before the rerun shows as running) may
    still be the old one."""
    page.wait_for_function(
        "([a, b]) => { const t = [...document.querySelectorAll("
        "'[data-testid=\"stMarkdownContainer\"]')].map(e => e.innerText)"
        ".find(s => s.includes('→')) || '';"
        " return t.indexOf(a) >= 0 && t.indexOf(b) >= 0 && t.indexOf(a) < t.indexOf(b); }",
        arg=[first, second],
        polling=POLL_MS,
    )
    wait_idle(page)


def test_compare_colours_swap_reload_and_back(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    before, after = sample_ids(server)
    page = new_page()
    page.goto(f"{server.url}/compare?a={before}&b={after}")
    sawtooth_chart(page)
    wait_idle(page)
    page.get_by_text("of B's trace is profiler overhead").first.wait_for()
    # B is 5.6x faster without the profiler: throughput green; its busy share fell and its idle
    # per step rose, which is not a loss for a faster run: gray, never red
    assert _delta_colour(page, "Throughput · unprofiled") == "green"
    assert _delta_colour(page, "Step time · unprofiled") == "green"
    assert _delta_colour(page, "GPU busy · profiled") == "gray"
    assert _delta_colour(page, "Idle per step · profiled") == "gray"
    busy = page.locator('[data-testid="stMetric"]', has_text="GPU busy").first
    assert busy.locator('[data-testid="stMetricDelta"]').inner_text().strip().endswith("pp")
    screenshot(page, "compare")

    page.get_by_role("button", name="Swap A/B").click()
    page.wait_for_url(re.compile(rf"a={after}&b={before}"))
    _wait_header_order(page, "after", "before")
    assert _header(page).index("after") < _header(page).index("before")
    # swapped, A is the faster run: its throughput change is bad for the user
    assert _delta_colour(page, "Throughput · unprofiled") == "red"
    page.reload()
    sawtooth_chart(page)
    wait_idle(page)
    assert f"a={after}&b={before}" in page.url
    assert _header(page).index("after") < _header(page).index("before")
    page.go_back()
    page.wait_for_url(re.compile(rf"a={before}&b={after}"))
    # the rerun Back started has finished: the swapped view's widgets are gone
    _wait_header_order(page, "before", "after")
    # the aligned step goes into the URL, and a reload keeps it
    box = page.get_by_label("Align on step (position in each run)")
    page.wait_for_function(
        "() => document.querySelectorAll("
        "'input[aria-label=\"Align on step (position in each run)\"]').length === 1",
        polling=POLL_MS,
    )
    box.fill("3")
    box.press("Enter")
    page.wait_for_url(re.compile(r"step=3"))
    wait_idle(page)
    page.reload()
    sawtooth_chart(page)
    wait_idle(page)
    page.get_by_text("start of step 3 of each run").wait_for()


def _view_caption(page) -> str:  # type: ignore[no-untyped-def]
    cap = page.locator('[data-testid="stCaptionContainer"]', has_text="drag across the plot")
    cap.first.wait_for()
    return cap.first.inner_text()


def test_run_zoom_and_section_live_in_the_url(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    before, _ = sample_ids(server)
    page = new_page()
    page.goto(f"{server.url}/run?run={before}")
    chart = sawtooth_chart(page)
    wait_idle(page)
    page.get_by_role("heading", name="Fixes").wait_for()
    wait_idle(page)
    whole = _view_caption(page)
    area = chart.locator(".nsewdrag").first
    area.scroll_into_view_if_needed()  # the job's cards above can push it below the fold
    box = area.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    for i in range(1, 11):
        page.mouse.move(box["x"] + box["width"] * (0.3 + 0.3 * i / 10), y)
    page.mouse.up()
    page.wait_for_url(re.compile(r"zoom=\d+\.\d+-\d+\.\d+"))
    wait_idle(page)
    zoomed = _view_caption(page)
    assert zoomed != whole
    page.reload()
    sawtooth_chart(page)
    wait_idle(page)
    assert _view_caption(page).split(" · ")[0] == zoomed.split(" · ")[0]  # the same range
    page.get_by_role("heading", name="Fixes").wait_for()  # the reload's below-the-fold run is done
    wait_idle(page)
    page.go_back()  # before the zoom: the whole window
    page.wait_for_url(re.compile(rf"/run\?run={before}$"))
    wait_idle(page)
    page.wait_for_function(
        "(w) => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
        ".some(e => e.innerText.split(' · ')[0] === w)",
        arg=whole.split(" · ")[0],
        polling=POLL_MS,
    )
    # a section in the URL (the page opens scrolled to it): the next test's first load


FIXES_IN_VIEW = (
    "() => { const h = [...document.querySelectorAll('h3')].find(e => e.innerText.trim() "
    "=== 'Fixes'); if (!h) return false; const r = h.getBoundingClientRect();"
    " return r.top >= 0 && r.top < window.innerHeight / 2; }"
)


def test_the_section_in_the_url_is_brought_back_until_the_reader_scrolls(
    server: Server, new_page
) -> None:  # type: ignore[no-untyped-def]
    # Streamlit scrolls to the section once, when its heading first renders; under load that
    # scroll can be lost (the page reruns below the fold, charts above finish later). The page
    # brings the section back into view until the reader scrolls.
    before, _ = sample_ids(server)
    page = new_page()
    page.goto(f"{server.url}/run?run={before}#fixes")  # a fresh context, a section in the URL
    sawtooth_chart(page)
    page.get_by_role("heading", name="Fixes").wait_for()
    page.wait_for_function(
        FIXES_IN_VIEW, timeout=30_000, polling=POLL_MS
    )  # the page opens scrolled to it
    # the scroll lost: back at the top, by the page (no reader's event)
    page.evaluate(
        "() => { for (const e of document.querySelectorAll('*'))"
        " if (e.scrollTop > 0) e.scrollTop = 0; }"
    )
    page.wait_for_function(FIXES_IN_VIEW, timeout=5_000, polling=POLL_MS)
    # once the reader scrolls, the page leaves the scroll to them
    page.mouse.move(900, 500)  # over the page's main pane
    page.mouse.wheel(0, -4000)
    page.wait_for_timeout(1500)  # six of the keeper's ticks
    assert not page.evaluate(FIXES_IN_VIEW)
    # a keeper drawn again by a later script run of the page (as under load) leaves it so too
    from gpuscope.web.views import KEEP_ANCHOR_JS

    body = KEEP_ANCHOR_JS.strip().removeprefix("<script>").removesuffix("</script>")
    page.evaluate(f"() => {{ {body} }}")
    page.wait_for_timeout(1500)
    assert not page.evaluate(FIXES_IN_VIEW)
