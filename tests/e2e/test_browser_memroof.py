"""In a real browser: a memory snapshot uploaded beside a trace (a crafted one is refused and runs
nothing; the real one is kept), and the Run page's memory line, memory, roofline and module
sections on the real H100 sample. Screenshots: artifacts/screenshots/memory_*.png."""

from __future__ import annotations

import os
import pickle
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Server, click_ingest, open_uploader, screenshot, wait_idle

pytestmark = pytest.mark.browser
SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "memory"
TRACE = SAMPLE / "gpt_mem.pt.trace.json.gz"


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def _upload(page, server: Server, files: list[dict | str]) -> None:  # type: ignore[no-untyped-def,type-arg]
    page.goto(f"{server.url}/runs")
    wait_idle(page)
    open_uploader(page)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(files)
    click_ingest(page, files)


def _run_ids(db: Path) -> set[str]:
    from gpuscope.store import connect

    con = connect(db)
    try:
        return {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    finally:
        con.close()


def test_a_callable_snapshot_upload_is_refused(server: Server, new_page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "PWNED"
    evil = pickle.dumps({"segments": [], "x": _Evil(marker)})
    before = _run_ids(server.db)
    page = new_page()
    _upload(
        page,
        server,
        [
            {"name": "evil.pickle", "mimeType": "application/octet-stream", "buffer": evil},
            {"name": TRACE.name, "mimeType": "application/gzip", "buffer": TRACE.read_bytes()},
        ],
    )
    alert = page.locator('[data-testid="stAlertContentError"]')
    alert.wait_for()
    text = alert.inner_text()
    assert "Nothing was stored" in text and "evil.pickle" in text and "refused" in text
    assert not marker.exists()  # nothing of the pickle ran
    assert _run_ids(server.db) == before
    screenshot(page, "memory_snapshot_refused")


def test_trace_with_snapshot_shows_memory_roofline_modules(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    _upload(page, server, [str(TRACE), str(SAMPLE / "gpt_mem.snapshot.pickle")])
    page.wait_for_url(re.compile(r"/run\?run=[0-9a-f]{12}"), timeout=120_000)
    page.get_by_role("heading", name="GPU busy over time").wait_for()
    page.get_by_text("GPU memory over time").wait_for()
    wait_idle(page)
    for heading in ("Memory", "Ops against the roofline", "Modules and phases"):
        page.get_by_role("heading", name=heading).wait_for(timeout=120_000)
    wait_idle(page)
    main = page.locator('[data-testid="stMain"]').inner_text()
    assert "Peak allocated" in main and "0.451 GiB" in main  # 484,664,320 B = max_memory_allocated
    assert "Memory snapshot" in main and "gpt_mem.snapshot.pickle" in main
    # the memory line: its own chart (the sawtooth is the other), drawn once the page settles
    page.locator('[data-testid="stPlotlyChart"]').filter(
        has_text="allocated (tensors)"
    ).first.wait_for(timeout=120_000)
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 2
    screenshot(page, "memory_run")
