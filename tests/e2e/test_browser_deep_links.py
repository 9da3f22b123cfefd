"""In a real browser (issue 23): a deep link (``/runs``, ``/run?run=…``) makes no request that
ends in 404. Streamlit's client probes ``/<page>/_stcore/health`` and ``…/host-config`` unless the
page tells it where the server is (app/web/backend_url.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Server, sample_ids, sawtooth_chart, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_deep_links_make_no_404_requests(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    before, _ = sample_ids(server)
    page = new_page()
    missing: list[str] = []
    stcore: list[str] = []

    def seen(response) -> None:  # type: ignore[no-untyped-def]
        if response.status == 404:
            missing.append(response.url)
        if "/_stcore/health" in response.url:
            stcore.append(response.url)

    page.on("response", seen)
    for path in ("/runs", f"/run?run={before}"):
        page.goto(server.url + path)
        if path.startswith("/run?"):
            sawtooth_chart(page)
        wait_idle(page)
    assert stcore, "the client never checked the server's health: the test saw nothing"
    assert all(url.startswith(server.url + "/_stcore/") for url in stcore), stcore
    assert missing == []
