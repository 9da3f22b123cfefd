"""The in-app light/dark switch (issue 46): the app menu (Streamlit's viewer toolbar,
app/web/.streamlit/config.toml ``client.toolbarMode = "viewer"``) offers System, Light and Dark;
choosing Dark turns the page dark whatever the system's scheme, and Light back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Server, screenshot, wait_idle

pytestmark = pytest.mark.browser


def background(page) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    rgb = page.locator('[data-testid="stApp"]').evaluate(
        "el => getComputedStyle(el).backgroundColor"
    )
    r, g, b = (int(v) for v in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return r, g, b


def choose(page, theme: str) -> None:  # type: ignore[no-untyped-def]
    page.locator('[data-testid="stMainMenu"]').click()
    page.get_by_test_id(f"stMainMenuItem-theme-{theme}").click()
    page.keyboard.press("Escape")


def test_the_app_menu_switches_light_and_dark(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page(color_scheme="light")
    page.goto(f"{server.url}/runs")
    wait_idle(page)
    assert sum(background(page)) > 600  # the system's light
    choose(page, "Dark")
    page.wait_for_function(
        "() => { const c = getComputedStyle(document.querySelector('[data-testid=\"stApp\"]'))"
        ".backgroundColor.match(/\\d+/g).slice(0, 3).map(Number);"
        " return c[0] + c[1] + c[2] < 150; }",
        timeout=10_000,
    )
    page.locator('[data-testid="stDataFrame"]').first.wait_for()  # its rerun drew the page
    wait_idle(page)
    screenshot(page, "runs_dark_switch")
    page.reload()  # the choice is the viewer's: it stays
    wait_idle(page)
    assert sum(background(page)) < 150
    choose(page, "Light")
    page.wait_for_function(
        "() => { const c = getComputedStyle(document.querySelector('[data-testid=\"stApp\"]'))"
        ".backgroundColor.match(/\\d+/g).slice(0, 3).map(Number);"
        " return c[0] + c[1] + c[2] > 600; }",
        timeout=10_000,
    )
