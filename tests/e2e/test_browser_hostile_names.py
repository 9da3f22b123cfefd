"""Issue 47, item 1, in a real browser: a run whose name, tag, node names, kernel names and folder
name are script and markup payloads is shown on every panel of the Run page (the Perfetto hand-off
included), the Runs page and its HTML report as text: no payload runs in any frame, the browser
asks nothing of another origin, and the hand-off's frame holds exactly its own one script."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Server,
    browser_context,
    clean_env,
    sawtooth_chart,
    screenshot,
    start_server,
    stop_server,
    wait_idle,
)
from synth import ELEM, SGEMM, training_trace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_reports import self_contained

pytestmark = pytest.mark.browser

# the probe's payload (a run renamed to it ran at the dashboard's origin from the Perfetto panel)
SCRIPT = "demo</script><script>window.__pwned=1;fetch('http://127.0.0.1:9/x')</script>"
IMG = "<img src=http://127.0.0.1:9/i onerror=window.__pwned=2>"
SVG = "<svg onload=window.__pwned=3>"
LINK = '<a href="http://127.0.0.1:9/n">n1</a>'  # markup Plotly reads (a link), as a node name
# a folder name cannot hold "/": markup whose image, if it ever rendered, is this server's /x
FOLDER = "<img src=x onerror=window.__pwned=4>"
KERNELS = {
    SGEMM: f"void k<{SCRIPT}>(float*)",
    ELEM: f"{IMG}elementwise",
}
HANDOFF_SCRIPTS = 1  # the hand-off page's own script (app/perfetto.py)


def _hostile_run(root: Path) -> Path:
    """Two rank files in a folder named like markup: hostile node (an image, a link) and kernel
    names."""
    folder = root / FOLDER
    folder.mkdir(parents=True)
    for rank, host in ((0, IMG), (1, LINK)):
        t = training_trace("before", steps=4, rank=rank, world_size=2, seed=rank)
        t.extra_meta["hostname"] = host
        for e in t.events:
            if e.get("ph") == "X" and e.get("name") in KERNELS:
                e["name"] = KERNELS[e["name"]]
        t.write(folder / f"rank{rank}.pt.trace.json.gz")
    return folder


def _ingest(work: Path, db: Path, path: Path, name: str) -> str:
    """``gpuscope ingest PATH --name NAME --tag IMG`` into ``db``; the run id."""
    cmd = [sys.executable, "-m", "gpuscope", "ingest", str(path), "--name", name]
    cmd += ["--tag", IMG, "--db", str(db)]
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=clean_env({}), timeout=300, cwd=work, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[-1]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, str]]:
    """A server on a store holding only two hostile runs (ingested by the CLI, named, tagged):
    the two-rank one, and a one-rank one to compare it with."""
    work = tmp_path_factory.mktemp("hostile")
    db = work / "store.duckdb"
    run_id = _ingest(work, db, _hostile_run(work / "traces"), SCRIPT)
    other = training_trace("after", steps=4).write(work / f"{SVG}.pt.trace.json.gz")
    other_id = _ingest(work, db, other, SVG + SCRIPT.replace("__pwned=1", "__pwned=6"))
    server = start_server(work, load_samples=False, db=db)
    yield server, run_id, other_id
    stop_server(server)


def _same_origin(url: str, base: str) -> bool:
    u, b = urlsplit(url), urlsplit(base)
    if u.scheme not in ("http", "https", "ws", "wss"):
        return True  # data:, blob:, about:srcdoc: nothing leaves the browser
    return (u.hostname, u.port) == (b.hostname, b.port)


def _foreign(requests: list[str], base: str) -> list[str]:
    return [u for u in requests if not _same_origin(u, base)]


def _pwned(page) -> list[str]:  # type: ignore[no-untyped-def]
    """The frames in which a payload ran (``window.__pwned`` set), by URL."""
    return [
        f"{f.url}: {v}"
        for f in page.frames
        if (v := f.evaluate("() => window.__pwned")) is not None
    ]


@pytest.fixture(scope="module")
def run_page(hostile, browser) -> Iterator[dict]:  # type: ignore[no-untyped-def,type-arg]
    """The two-rank run's Run page (rank 0) in a fresh browser context of the module's, loaded by
    the first test that reads it (:func:`_opened`), every request of the context recorded from
    before its first load: the report's download reads the page, then the page's panels and the
    other pages are read in it."""
    ctx = browser_context(browser)
    requests: list[str] = []
    ctx.on("request", lambda r: requests.append(r.url))
    yield {"page": ctx.new_page(), "requests": requests, "url": hostile[0].url, "run": hostile[1]}
    ctx.close()


def _opened(run_page: dict, shown) -> tuple:  # type: ignore[no-untyped-def,type-arg]
    """(page, requests) of :func:`run_page`, its Run page loaded with every section drawn (on its
    first use: in the test's own call, so its failure report shows it)."""
    page = shown(run_page["page"])
    if not run_page.get("loaded"):
        page.goto(f"{run_page['url']}/run?run={run_page['run']}&rank=0")
        sawtooth_chart(page)
        page.get_by_role("heading", name="Fixes").wait_for(timeout=120_000)
        page.get_by_role("heading", name="Modules and phases").wait_for(timeout=120_000)
        run_page["loaded"] = True
    wait_idle(page)
    query = page.url.split("?", 1)[-1].split("&")
    assert "/run?" in page.url and f"run={run_page['run']}" in query and "rank=0" in query, page.url
    return page, run_page["requests"]


def test_hostile_names_report_is_inert(run_page, shown, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The Run page's "Download report" gives an HTML report with no script and no element from a
    name (the names are there, escaped)."""
    page, _ = _opened(run_page, shown)
    with page.expect_download() as d:
        page.get_by_role("button", name="Download report").click()
    dest = tmp_path / "report.html"
    d.value.save_as(dest)
    doc = dest.read_text()
    self_contained(doc)  # balanced, and no script, image, frame or link to fetch
    assert "<svg onload" not in doc
    assert "demo&lt;/script&gt;&lt;script&gt;window.__pwned=1" in doc.replace("\u2060", "")
    assert os.path.getsize(dest) > 1000


def test_hostile_names_run_nowhere(hostile, run_page, shown) -> None:  # type: ignore[no-untyped-def]
    server, run_id, other_id = hostile
    page, requests = _opened(run_page, shown)

    # the Perfetto hand-off, whose title and file name carry the run's name
    page.get_by_role("button", name="Open these events in Perfetto").click()
    wait_idle(page)
    frame_el = page.locator('iframe[srcdoc*="Open in Perfetto UI"]')
    frame_el.wait_for()
    frame = page.frame_locator('iframe[srcdoc*="Open in Perfetto UI"]')
    frame.get_by_role("button", name="Open in Perfetto UI").wait_for()
    page.wait_for_timeout(1500)  # time for any injected script (and its fetch) to run
    assert _pwned(page) == [], "a script from a name ran"
    assert _foreign(requests, server.url) == [], "the browser asked another origin"
    assert frame.locator("script").count() == HANDOFF_SCRIPTS
    handoff = frame_el.element_handle().content_frame()
    assert handoff is not None
    assert handoff.evaluate("() => C.title").startswith(SCRIPT + " rank 0")  # read back whole
    screenshot(page, "run_hostile_names")

    # the names are on the page, as text: the title, the top kernels' full names on hover
    title = page.locator("h1").first.inner_text().replace("\u2060", "")
    assert "</script><script>window.__pwned=1" in title
    tips = page.locator("table.gs-top td[title]").evaluate_all(
        "tds => tds.map(td => td.getAttribute('title'))"
    )
    tips = [t.replace("\u2060", "") for t in tips]
    assert any("<script>window.__pwned=1" in t for t in tips), tips
    assert any(t.startswith("<img src=") for t in tips), tips
    # the rank heatmap's node names, as Plotly text (a tag there would be dropped, not shown)
    ticks = page.locator('[data-testid="stPlotlyChart"] g.ytick text').all_text_contents()
    assert f"{IMG} · rank 0" in ticks and f"{LINK} · rank 1" in ticks, ticks
    assert page.locator('[data-testid="stPlotlyChart"] a[href*="127.0.0.1:9"]').count() == 0

    # the other rank's page
    page.goto(f"{server.url}/run?run={run_id}&rank=1")
    sawtooth_chart(page)
    page.get_by_role("heading", name="Fixes").wait_for(timeout=120_000)
    wait_idle(page)
    assert _pwned(page) == []

    page.goto(f"{server.url}/runs")
    wait_idle(page)
    page.locator('[data-testid="stDataFrame"]').first.wait_for()  # the run list (a canvas grid)
    assert _pwned(page) == []

    # the Compare page: both names in its aligned plots' titles, its bars' legends and hovers
    page.goto(f"{server.url}/compare?a={other_id}&b={run_id}")
    page.get_by_role("heading", name="Fixes").wait_for(timeout=120_000)
    wait_idle(page)
    page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
    titles = page.locator('[data-testid="stPlotlyChart"] text').all_text_contents()
    assert any("<svg onload=window.__pwned=3>" in t for t in titles), titles
    assert _pwned(page) == [] and _foreign(requests, server.url) == []
    to_x = [u for u in requests if urlsplit(u).path in ("/x", "/i")]
    assert to_x == [], f"markup from a name was rendered: {to_x}"
