"""Issue 24 in a real browser: the "Download report" button of the Run and Compare pages gives a
self-contained HTML report of the runs on the page."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from e2e_support import Server, sample_ids, wait_idle
from test_reports import self_contained

pytestmark = pytest.mark.browser


def _download(page, tmp_path: Path) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    button = page.get_by_role("button", name="Download report")
    button.wait_for()
    with page.expect_download() as info:
        button.click()
    d = info.value
    dest = tmp_path / d.suggested_filename
    d.save_as(dest)
    return d.suggested_filename, dest.read_text(encoding="utf-8")


def test_run_page_downloads_its_report(server: Server, new_page, tmp_path) -> None:  # type: ignore[no-untyped-def]
    before, _ = sample_ids(server)
    page = new_page()
    page.goto(f"{server.url}/run?run={before}")
    wait_idle(page)
    name, text = _download(page, tmp_path)
    assert name == "gpuscope-report-before.html"
    p = self_contained(text)
    assert "<title>gpuscope report: before</title>" in text
    assert f"before ({before})" in text and "rank 0: step spans" in text  # the job, then rank 0
    assert sum(1 for tag, _ in p.seen if tag == "svg") == 1
    assert 'id="fix-dataloader_workers"' in text  # the sample's first fix, with its code
    assert "num_workers" in text


def test_compare_page_downloads_the_comparison(server: Server, new_page, tmp_path) -> None:  # type: ignore[no-untyped-def]
    before, after = sample_ids(server)
    page = new_page()
    page.goto(f"{server.url}/compare?a={before}&b={after}")
    wait_idle(page)
    name, text = _download(page, tmp_path)
    assert name == "gpuscope-report-before-vs-after.html"
    p = self_contained(text)
    assert "<title>gpuscope report: before → after</title>" in text
    assert sum(1 for tag, _ in p.seen if tag == "svg") == 2
    assert "Fixes resolved by B:" in text and "dataloader_workers" in text
