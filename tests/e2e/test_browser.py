"""End to end in a real browser: upload through the file chooser, the run page, a compare link opened
in a fresh browser context, an invalid upload. Screenshots: artifacts/screenshots/*.png."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Server,
    click_ingest,
    ddp_rank_files,
    open_uploader,
    sample_ids,
    sawtooth_chart,
    screenshot,
    wait_idle,
)

pytestmark = pytest.mark.browser


def test_runs_page_lists_the_sample_runs(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.goto(f"{server.url}/")
    wait_idle(page)
    page.get_by_role("heading", name="Runs", exact=True).wait_for()
    # only the samples in the store: the uploader is open, no click needed
    page.locator('[data-testid="stFileUploaderDropzone"]').wait_for(state="visible")
    grid = page.locator('[data-testid="stDataFrame"]')
    grid.wait_for()
    page.get_by_text("Compare two runs").wait_for()
    screenshot(page, "runs")


def test_upload_through_the_file_chooser_shows_the_run(
    server: Server, new_page, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    files = ddp_rank_files(tmp_path)
    page = new_page()
    page.goto(f"{server.url}/runs")
    wait_idle(page)
    open_uploader(page)
    chosen = [str(f) for f in files]
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(chosen)
    click_ingest(page, chosen)  # the default choice: the files are one run's ranks
    page.wait_for_url(re.compile(r"/run\?run=[0-9a-f]{12}"))
    page.get_by_role("heading", name="ddp").wait_for()
    chart = sawtooth_chart(page)
    assert chart.locator(".trace").count() > 0
    page.get_by_role("heading", name="GPU busy over time").wait_for()
    page.get_by_text("rank 1").first.wait_for()  # the rank selector of a 2-rank run
    wait_idle(page)
    page.get_by_role("heading", name="Fixes").wait_for()
    page.get_by_text("Step time").first.wait_for()
    page.locator('[data-testid="stCode"], [data-testid="stAlertContentSuccess"]').first.wait_for()
    screenshot(page, "run_uploaded")


def test_run_page_light_and_dark(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    before, _ = sample_ids(server)
    for scheme in ("light", "dark"):
        page = new_page(color_scheme=scheme)
        page.goto(f"{server.url}/run?run={before}")
        sawtooth_chart(page)
        wait_idle(page)
        page.get_by_role("heading", name="Fixes").wait_for()
        # each fix comes with a copyable code block (rendered once its code has loaded)
        page.locator('[data-testid="stCode"]').first.wait_for()
        wait_idle(page)
        screenshot(page, "run" if scheme == "light" else "run_dark")


def test_compare_url_in_a_fresh_context(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    first = new_page()
    first.goto(f"{server.url}/compare")
    wait_idle(first)
    first.get_by_role("button", name="Compare").click()  # the preselected pair: before -> after
    first.wait_for_url(re.compile(r"/compare\?a=[0-9a-f]{12}&b=[0-9a-f]{12}"))
    url = first.url
    a, b = re.search(r"a=([0-9a-f]{12})&b=([0-9a-f]{12})", url).groups()  # type: ignore[union-attr]
    assert (a, b) == sample_ids(server)
    first.context.close()  # its session ends: nothing but the URL carries the comparison
    page = new_page()  # a new browser context
    page.goto(url)
    page.get_by_role("heading", name="Compare").wait_for()
    sawtooth_chart(page)
    wait_idle(page)
    body = page.locator('[data-testid="stMain"]').inner_text()
    assert a in body and b in body and "before" in body and "after" in body
    page.get_by_role("button", name="Copy link").click()
    link = page.locator('[data-testid="stPopoverBody"] [data-testid="stCode"]')
    link.wait_for()
    assert f"/compare?a={a}&b={b}" in link.inner_text()
    page.keyboard.press("Escape")
    screenshot(page, "compare")


def test_invalid_upload_shows_an_error(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.goto(f"{server.url}/runs")
    wait_idle(page)
    open_uploader(page)
    chosen = [
        {
            "name": "truncated.json",
            "mimeType": "application/json",
            "buffer": b'{"traceEvents": [{"ph":',
        }
    ]
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(files=chosen)
    click_ingest(page, chosen)
    alert = page.locator('[data-testid="stAlertContentError"]')
    alert.wait_for()
    text = alert.inner_text()
    assert "Nothing was stored" in text and "truncated.json" in text
    assert "/runs" in page.url
    screenshot(page, "invalid_upload")


def test_unknown_run_in_the_url(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.goto(f"{server.url}/run?run=feedfacecafe")
    alert = page.locator('[data-testid="stAlertContentError"]')
    alert.wait_for()
    assert "feedfacecafe" in alert.inner_text()
    assert page.locator('[data-testid="stException"]').count() == 0
