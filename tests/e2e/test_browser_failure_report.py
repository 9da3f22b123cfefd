"""A failed browser test's report (``e2e_support.pages_report``, attached by the e2e conftest):
what each page showed, a page that cannot be read said plainly, the end of the server's log."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import SHOTS, pages_report

pytestmark = [pytest.mark.browser]


def test_the_report_shows_each_page_and_says_why_a_hung_one_is_missing(
    browser, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "server.log"
    log.write_text("early line\n" + "x" * 5000 + "\nthe server's last words\n")
    shown, hung = browser.new_context(), browser.new_context()
    try:
        page = shown.new_page()
        page.set_content("<h3>Fixes</h3><p>Raise num_workers</p>")
        stuck = hung.new_page()
        stuck.set_content("<p>about to hang</p>")
        stuck.evaluate("() => { setTimeout(() => { for (;;) {} }, 0); }")  # the page never answers
        text = pages_report([shown, hung], "failed-probe", log, timeout_ms=2_000)
    finally:
        shown.close()
        hung.close()
    first, second, tail = text.split("--- ")[1:]
    assert first.startswith("page 0.0 about:blank (failed-probe-0-0.png)")
    assert "Fixes\n\nRaise num_workers" in first
    assert (SHOTS / "failed-probe-0-0.png").stat().st_size > 0
    assert second.startswith("page 1.0 about:blank: could not be read: ")
    assert "Timeout 2000ms exceeded" in second
    assert tail.startswith("end of the server log\n")
    assert tail.rstrip().endswith("the server's last words")
    assert "early line" not in tail  # only the end of the log
