"""A file chosen in the Runs page's uploader while the page is still filling its figures in is kept:
the uploader lists it, Ingest becomes enabled without choosing it again, and the run is stored.

The Runs page draws its list first and computes the runs' figures afterwards, script run after
script run. Streamlit answers a file chooser's request for upload URLs through the session's
message queue, and a full script run that starts before that answer is sent cleared the queue: the
answer was lost, the uploader waited for it for ever (listing nothing) and Ingest stayed disabled.
Here the server answers late (tests/e2e/late_flush: the answer is held until the next full script
run starts, or 10 s), as a loaded machine does, so that interleaving happens on every run of this
test, and each run summary takes 5 s more, so that the page is still filling when the file is
chosen."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Server,
    click_ingest,
    ddp_rank_files,
    open_uploader,
    start_server,
    stop_server,
)

pytestmark = pytest.mark.browser

HOOKS = Path(__file__).resolve().parent / "late_flush"
FILLING = "run(s): their figures appear here as they are ready"


@pytest.fixture(scope="module")
def filling_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own (nothing analysed yet: the sample runs' figures are still to come), its
    file-URL answers late and its run summaries slow. The tests run in file order."""
    path = os.pathsep.join(p for p in (str(HOOKS), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        "PYTHONPATH": path,
        "GPUSCOPE_TEST_LATE_FLUSH_S": "10",
        "GPUSCOPE_TEST_SLOW_SUMMARY_S": "5",
    }
    s = start_server(tmp_path_factory.mktemp("filling"), extra_env=env)
    yield s
    stop_server(s)


def test_a_file_chosen_while_the_figures_fill_in_is_kept(
    filling_server: Server, new_page, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    chosen = ddp_rank_files(tmp_path)[:1]
    page = new_page()
    page.goto(f"{filling_server.url}/runs")
    note = page.get_by_text(FILLING)
    note.wait_for()  # the list is drawn, its figures not yet
    open_uploader(page)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(chosen)
    assert note.is_visible(), "the page had filled its figures in before the file was chosen"
    # chosen once, never again; the page goes on filling its figures in meanwhile
    listed = page.get_by_role("button", name=f"Remove {chosen[0].name}")  # the uploader's row
    expect(listed).to_be_visible(timeout=60_000)
    expect(page.get_by_role("button", name="Ingest")).to_be_enabled(timeout=60_000)
    expect(note).to_have_count(0, timeout=90_000)  # and it did finish filling them in
    expect(listed).to_be_visible()  # still listed once the page has stopped running by itself
    click_ingest(page, chosen)  # and its bytes are still on the server: the run is stored
    page.wait_for_url(re.compile(r"/run\?run=[0-9a-f]{12}"), timeout=120_000)


def test_late_answers_alone_lose_no_file(filling_server: Server, new_page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The control: on the same server once every figure is in (the page starts no run of its
    own), the late answer arrives when its hold ends and the file is listed: the hook delays, it
    does not drop."""
    from playwright.sync_api import expect

    chosen = ddp_rank_files(tmp_path)[:1]
    page = new_page()
    page.goto(f"{filling_server.url}/runs")
    page.locator('[data-testid="stDataFrame"]').wait_for()
    expect(page.get_by_text(FILLING)).to_have_count(0, timeout=90_000)
    open_uploader(page)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(chosen)
    listed = page.get_by_role("button", name=f"Remove {chosen[0].name}")
    expect(listed).to_be_visible(timeout=60_000)
    expect(page.get_by_role("button", name="Ingest")).to_be_enabled(timeout=60_000)
