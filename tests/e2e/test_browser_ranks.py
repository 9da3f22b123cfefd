"""The real 2×H200 DDP sample in a real browser (issue 20): the Run page opens on the pace-setter
(rank 1) and says so; rank 0's communication wait shows beside GPU busy in its headline and in its
own colour in the sawtooth, and the Runs list shows the job's busy and wait."""

from __future__ import annotations

import json
import re
import shutil
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clitools import cli_in_process  # tests/: on the path from tests/conftest.py
from e2e_support import (
    POLL_MS,
    Server,
    browser_context,
    ddp_rank_files,
    sawtooth_chart,
    screenshot,
    start_server,
    stop_server,
    wait_idle,
    wait_still,
)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, dict]]:  # type: ignore[type-arg]
    """A server of its own (the session's server keeps the DDP sample for the upload test), the
    DDP sample ingested into its store from the CLI, and `gpuscope analyze --json` of it."""
    work = tmp_path_factory.mktemp("ranks")
    folder = work / "ddp"
    folder.mkdir()
    for f in ddp_rank_files(work):
        shutil.copy(f, folder / f.name)
    s = start_server(work, db=work / "store", load_samples=False)
    try:

        def cli(*args: str) -> str:  # in this process: no process is the point here
            done = cli_in_process(*args, "--db", str(s.db))
            assert done.returncode == 0, done.stderr
            return done.stdout

        (rid,) = cli("ingest", str(folder), "--name", "ddp").split()
        doc = json.loads(cli("analyze", rid, "--json"))
        yield s, rid, doc
    finally:
        stop_server(s)


def value(page, label: str) -> str:  # type: ignore[no-untyped-def]
    """The value of the job's verdict's card ``label`` (no delta)."""
    c = page.locator(".gs-card").filter(has_text=label).first
    return c.locator(".gs-card-value").inner_text().strip()


def card(page, label: str, *, rank: bool = False) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """(value, delta) of the headline card ``label``: the job's verdict's (the first), or with
    ``rank`` the shown rank's own (under the verdict: the last)."""
    cards = page.locator(".gs-card").filter(has_text=label)
    c = cards.last if rank else cards.first
    value = c.locator(".gs-card-value").inner_text().strip()
    delta = c.locator(".gs-card-beside").inner_text().strip()
    return value, delta


def test_opens_on_the_pace_setter_then_rank_0_waits_and_the_runs_list_agrees(ddp, new_page) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.web import palette, ui

    server, rid, doc = ddp
    assert doc["rank"] == 0 and doc["gpu_wait_pct"] > 50  # rank 0 waits for rank 1
    page = new_page()
    # without a rank in the URL the page opens on the pace-setter, rank 1, and says why
    page.goto(f"{server.url}/run?run={rid}")
    page.get_by_text("Opened on rank 1, the pace-setter: the other ranks wait for it.").wait_for()
    page.wait_for_function("() => /[?&]rank=1(&|$)/.test(location.search)", timeout=30_000)
    selector = page.locator('[data-testid="stButtonGroup"]').first
    assert selector.locator('button[aria-checked="true"]').inner_text().strip() == "rank 1"
    page.locator(".gs-card").filter(has_text="GPU busy").first.wait_for()
    wait_idle(page)
    assert card(page, "GPU busy", rank=True)[1] == "of it waiting 0.0 %"  # it waits for no one
    # the reader picks rank 0, which waits for it
    selector.get_by_text("rank 0", exact=True).click()
    page.wait_for_function("() => /[?&]rank=0(&|$)/.test(location.search)", timeout=30_000)
    page.get_by_text("Opened on rank").wait_for(state="detached")
    page.locator(".gs-card").filter(has_text="GPU busy").first.wait_for()
    wait_idle(page)
    # the job's verdict first, the same whichever rank: the job step time and the pace-setter
    job = doc["job"]
    assert value(page, "Job step time") == ui.fmt_ms(job["step_time_ms"]["p50"])
    assert value(page, "Pace-setter") == f"rank {job['pace_setter']}" == "rank 1"
    # then rank 0's own cards
    busy, waiting = card(page, "GPU busy", rank=True)
    assert busy == ui.fmt_pct(doc["gpu_busy_pct"])
    assert waiting == f"of it waiting {ui.fmt_pct(doc['gpu_wait_pct'])}"
    step, beside = card(page, "Step time", rank=True)
    assert step == ui.fmt_ms(doc["step_time_ms"]["p50"])  # the median, not the mean
    assert beside == (
        f"p90 {doc['step_time_ms']['p90']:.1f} · max {ui.fmt_ms(doc['step_time_ms']['max'])}"
    )
    # the plot: the wait is drawn, filled in its own colour, and named in the legend
    page.get_by_role("heading", name="GPU busy over time").wait_for()
    sawtooth_chart(page)
    page.get_by_text("busy: communication wait (for other ranks)").first.wait_for()
    r, g, b = (int(palette.WAIT[i : i + 2], 16) for i in (1, 3, 5))
    fills = page.locator('[data-testid="stPlotlyChart"] path.js-fill').evaluate_all(
        "els => els.map(e => getComputedStyle(e).fill)"
    )
    assert f"rgb({r}, {g}, {b})" in fills, fills
    screenshot(page, "run_ddp_wait")
    # the Runs list: the job's verdict (job step time, busy and wait over every rank's window)
    # (the sidebar's link, as a reader goes there: the page switches in place, no reload)
    page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Runs").click()
    page.wait_for_url(re.compile(r"/runs(\?|$)"))
    page.get_by_placeholder("name, run id, tag or GPU").wait_for()
    # This server has not listed the run before: the list draws its row first, computes its figures
    # and reruns (runs.py). Between the two runs the page is briefly idle, so wait_idle alone can
    # read the row still empty; its pace-setter's cell is filled by the rerun that fills the rest.
    page.wait_for_function(
        '() => [...document.querySelectorAll(\'[data-testid="stDataFrame"] [role="row"]\')]'
        ".some(r => r.textContent.includes('ddp') && r.textContent.includes('rank 1'))",
        timeout=90_000,
        polling=POLL_MS,
    )
    wait_idle(page)
    cells = page.locator('[data-testid="stDataFrame"] [role="gridcell"]')
    cells.first.wait_for(state="attached")
    screenshot(page, "runs_ddp_wait")
    # the grid's cells hold the values (the canvas draws them formatted: "96.4 %")
    row = [c.strip() for c in cells.all_text_contents()]
    assert "ddp" in row  # the run's row (its id column lies beyond the 1440 px the grid draws)
    nums = []
    for c in row:
        try:
            nums.append(float(c))
        except ValueError:
            continue
    split = job["split"]
    for want in (split["busy_pct"], split["wait_pct"], job["step_time_ms"]["p50"]):
        assert any(abs(v - want) < 1e-6 for v in nums), (want, row)


PLACEHOLDER = "Loading the breakdowns, top kernels and fixes"


def paint_click(message) -> tuple[bool, str]:  # type: ignore[no-untyped-def]
    """(whether a message a page sent on its socket is the click on its hidden "draw the rest"
    button, a fragment's rerun: views.after_first_paint; the URL query it carries)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    m = BackMsg()
    if isinstance(message, bytes):
        m.ParseFromString(message)
    if m.WhichOneof("type") != "rerun_script":
        return False, ""
    rerun = m.rerun_script
    hit = bool(rerun.fragment_id) and any(
        "paint_run_" in w.id and w.trigger_value for w in rerun.widget_states.widgets
    )
    return hit, rerun.query_string


def run_finished(message) -> bool:  # type: ignore[no-untyped-def]
    """Whether a message the server sent on a page's socket ends a script run (a fragment's too)."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    if not isinstance(message, bytes):
        return False
    m = ForwardMsg()
    m.ParseFromString(message)
    return m.WhichOneof("type") == "script_finished"


def paint_socket(page, *, hold: int = 0, drop_after_first: bool = False) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """Control ``page``'s paint clicks (:func:`paint_click`) on its socket: the first ``hold`` of
    them are kept (``state["held"]``, their URL queries in ``state["queries"]``) until the test
    sends them (``state["release"]()``); with ``drop_after_first``, every click after the first
    is dropped (counted in ``state["dropped"]``). Everything else passes. ``state["finished"]``
    counts the script runs the server has ended (:func:`run_finished`)."""
    state: dict = {"held": [], "queries": [], "seen": 0, "dropped": 0, "finished": 0}  # type: ignore[type-arg]

    def route(ws) -> None:  # type: ignore[no-untyped-def]
        srv = ws.connect_to_server()

        def to_server(message) -> None:  # type: ignore[no-untyped-def]
            hit, query = paint_click(message)
            if hit:
                state["seen"] += 1
                if state["seen"] <= hold:
                    state["held"].append(message)
                    state["queries"].append(query)
                    return
                if drop_after_first and state["seen"] > 1:
                    state["dropped"] += 1
                    return
            srv.send(message)

        def release() -> None:
            held, state["held"] = state["held"], []
            for message in held:
                srv.send(message)

        def to_page(message) -> None:  # type: ignore[no-untyped-def]
            if run_finished(message):
                state["finished"] += 1
            ws.send(message)

        state["release"] = release
        ws.on_message(to_server)
        srv.on_message(to_page)

    page.route_web_socket(re.compile(r"/_stcore/stream$"), route)
    return state


def painted_query(page) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """The URL's query once the lower sections have painted and the run is done."""
    page.get_by_role("heading", name="Fixes").wait_for()
    wait_idle(page)
    return urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)


SAWTOOTH = '[class*="st-key-saw_"] [data-testid="stPlotlyChart"]'


def heatmap(page):  # type: ignore[no-untyped-def]
    """The ranks × steps heatmap's chart."""
    return page.locator('[data-testid="stPlotlyChart"]').filter(has=page.locator(".heatmaplayer"))


def click_rank_1_cell(page) -> tuple[list[int], int]:  # type: ignore[no-untyped-def]
    """Click rank 1's cell of the next-to-last step in the heatmap of a page on rank 0 (the rank
    that waits) until the URL names rank 1; (the step numbers of the heatmap's columns, the clicked
    one's index)."""
    chart = heatmap(page)
    chart.locator(".main-svg").first.wait_for(state="visible")
    chart.scroll_into_view_if_needed()  # below the fold: a click outside the viewport is lost
    steps = [int(t.lstrip("#")) for t in chart.locator(".xtick text").all_text_contents()]
    # the plot area: rank 0's row on top (y reversed), rank 1's below; a cell of rank 1, aimed at
    # once the area has stopped moving (sections still drawing below or above can shift it)
    area = chart.locator(".nsewdrag").first
    wait_still(area)
    box = area.bounding_box()
    assert box is not None
    col = len(steps) - 2
    x = box["x"] + (col + 0.5) * box["width"] / len(steps)
    y = box["y"] + 0.75 * box["height"]
    page.mouse.move(x, y)
    page.wait_for_function(
        "el => el.textContent.includes('rank 1')",
        arg=chart.locator(".hoverlayer").element_handle(),
        timeout=10_000,
        polling=POLL_MS,
    )
    page.mouse.click(x, y)
    page.wait_for_function(
        "() => /[?&]rank=1(&|$)/.test(location.search)", timeout=30_000, polling=POLL_MS
    )
    return steps, col


@pytest.fixture(scope="module")
def rank0_page(ddp, browser) -> Iterator[dict]:  # type: ignore[no-untyped-def,type-arg]
    """Rank 0's Run page of the DDP run in a fresh browser context of the module's, read in turn by
    three tests (in this order in the file; each brings the page as far as it needs, whichever runs
    first): its first screen with the paint click held (:func:`first_screen`), its sections painted
    once the click is sent (:func:`painted`), then a cell of rank 1 clicked in its heatmap
    (:func:`heatmap_clicked`). Its paint clicks are controlled on its socket from before its load
    (:func:`paint_socket`): the first held until released, every later one dropped and counted."""
    server, rid, _ = ddp
    ctx = browser_context(browser)
    page = ctx.new_page()
    clicks = paint_socket(page, hold=1, drop_after_first=True)
    yield {"page": page, "clicks": clicks, "url": f"{server.url}/run?run={rid}&rank=0", "at": "new"}
    ctx.close()


def first_screen(rank0: dict, shown):  # type: ignore[no-untyped-def,type-arg]
    """:func:`rank0_page`'s page, loaded (on its first use: in the test's own call, so its failure
    report shows it); its first paint click is held until :func:`painted` sends it."""
    page = shown(rank0["page"])
    if rank0["at"] == "new":
        page.goto(rank0["url"])
        rank0["at"] = "held"
    return page


def painted(rank0: dict, shown):  # type: ignore[no-untyped-def,type-arg]
    """:func:`rank0_page`'s page with its lower sections painted, on rank 0: its held paint click
    sent once the browser has sent it (or the sections are there without one)."""
    page = first_screen(rank0, shown)
    clicks = rank0["clicks"]
    if rank0["at"] == "held":
        page.locator(SAWTOOTH).locator(".main-svg").first.wait_for(state="visible")
        fixes = page.get_by_role("heading", name="Fixes")
        for _ in range(300):
            if clicks["seen"] >= 1 or fixes.count() > 0:
                break
            page.wait_for_timeout(100)
        clicks["release"]()
        rank0["at"] = "released"
    if rank0["at"] == "released":
        assert painted_query(page).get("rank") == ["0"], page.url
        rank0["at"] = "painted"
    return page


def heatmap_clicked(rank0: dict, shown):  # type: ignore[no-untyped-def,type-arg]
    """:func:`painted`'s page once a cell of rank 1 has been clicked in its heatmap (once:
    :func:`click_rank_1_cell`, its steps and column kept in ``rank0``)."""
    page = painted(rank0, shown)
    if rank0["at"] == "painted":
        page.get_by_text("Colour the ranks × steps by").wait_for()
        wait_idle(page)
        rank0["steps"], rank0["col"] = click_rank_1_cell(page)
        rank0["at"] = "clicked"
    return page


def test_the_run_page_draws_its_busy_plot_before_the_sections_below_it(  # type: ignore[no-untyped-def]
    ddp, rank0_page, shown, new_page
) -> None:
    """A new Run page draws its first screen (headline, busy-time plot) before everything else:
    the rank heatmap, breakdowns, fixes and their charts come once the browser has drawn the plot
    and clicked the page's hidden button (views.after_first_paint), not on a timer: with that
    click held back, the page holds one chart, the busy-time plot, and no lower section. Sent, the
    click draws them all, the plot staying the same element (its container kept its place).
    On the module's rank 0 page (:func:`rank0_page`), else (a test before this one has painted it)
    on a page of its own."""
    server, rid, _ = ddp
    if rank0_page["at"] == "new":
        page, clicks = first_screen(rank0_page, shown), rank0_page["clicks"]
    else:
        page = new_page()
        clicks = paint_socket(page, hold=1)
        page.goto(f"{server.url}/run?run={rid}&rank=0")
    plot = page.locator(SAWTOOTH)
    plot.locator(".main-svg").first.wait_for(state="visible")
    page.get_by_text(PLACEHOLDER).wait_for()
    wait_idle(page)
    page.wait_for_timeout(2000)  # a timer would have fired by now (the old one: 2 x 0.4 s)
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 1
    assert page.locator(".gs-card").count() > 0  # the headline is there
    for heading in ("Ranks", "Fixes", "Top kernels", "Idle time per step, by cause"):
        assert page.get_by_role("heading", name=heading).count() == 0, heading
    assert clicks["queries"] and "rank=0" in clicks["queries"][0], clicks["queries"]
    assert not page.get_by_role("button", name="Draw the rest of the page").is_visible()
    plot.evaluate("el => { el.dataset.firstPaint = 'kept'; }")
    clicks["release"]()
    if page is rank0_page["page"]:
        rank0_page["at"] = "released"
    assert painted_query(page).get("rank") == ["0"], page.url
    if page is rank0_page["page"]:
        rank0_page["at"] = "painted"
    heatmap(page).wait_for()
    assert page.get_by_text(PLACEHOLDER).count() == 0
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 4
    assert plot.evaluate("el => el.dataset.firstPaint") == "kept"
    # every other message reached the server, as on a page that holds its first click only
    assert clicks["dropped"] == 0, clicks


def test_a_click_on_a_heatmap_cell_opens_that_rank_and_step(ddp, rank0_page, shown) -> None:  # type: ignore[no-untyped-def]
    """On rank 0's page (the rank that waits: :func:`rank0_page`), a click on a cell of rank 1 in
    the heatmap opens rank 1, its busy plot zoomed on the clicked step."""
    server, rid, _ = ddp
    done = cli_in_process("analyze", rid, "--rank", "1", "--json", "--db", str(server.db))
    assert done.returncode == 0, done.stderr
    rank1_ms = {s["number"]: s["duration_ms"] for s in json.loads(done.stdout)["steps"]}
    page = heatmap_clicked(rank0_page, shown)
    steps, col = rank0_page["steps"], rank0_page["col"]
    assert steps == sorted(rank1_ms), steps  # the heatmap's columns, read before the click
    page.wait_for_function(
        "() => /[?&]rank=1(&|$)/.test(location.search)", timeout=30_000, polling=POLL_MS
    )
    page.wait_for_function(
        "() => /[?&]zoom=/.test(location.search)", timeout=30_000, polling=POLL_MS
    )
    wait_idle(page)
    screenshot(page, "run_ddp_heatmap_click")
    # the busy plot is zoomed on that step of rank 1: the zoom spans its duration
    zoom = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["zoom"][0]
    lo, hi = (float(v) for v in zoom.split("-"))
    assert abs((hi - lo) - rank1_ms[steps[col]]) < 1e-3, (zoom, rank1_ms)


@pytest.mark.slow
def test_a_rank_change_after_the_page_painted_draws_its_sections_without_a_click(  # type: ignore[no-untyped-def]
    rank0_page, shown
) -> None:
    """The paint click serves a page's first paint only: once its sections have painted, another
    rank's page (a heatmap click) draws them in its own run. With every paint click after the
    first dropped (:func:`rank0_page`), the clicked rank still shows its Fixes."""
    page = heatmap_clicked(rank0_page, shown)
    page.wait_for_function(
        "() => /[?&]rank=1(&|$)/.test(location.search)", timeout=30_000, polling=POLL_MS
    )
    wait_idle(page)
    page.get_by_role("heading", name="Fixes").wait_for(timeout=10_000)
    assert page.get_by_text(PLACEHOLDER).count() == 0
    assert rank0_page["clicks"]["dropped"] == 0, rank0_page["clicks"]  # no click was needed


@pytest.mark.slow
def test_a_paint_click_sent_before_a_rank_change_reached_the_browser_does_not_undo_it(  # type: ignore[no-untyped-def]
    ddp, new_page
) -> None:
    """The browser clicks the page's hidden paint button once the busy-time plot has drawn; the
    click carries the URL the browser has. One sent before a rank change's run reached the browser
    carries the URL from before it (rank 0); reaching the server after that run, it must draw
    nothing and not take the page back there. Here the first click (rank 0) is held until rank 1's
    page has sent its own (held too), then sent alone: the page stays on rank 1, unpainted, until
    rank 1's click is sent."""
    server, rid, _ = ddp
    page = new_page()
    clicks = paint_socket(page, hold=2)
    page.goto(f"{server.url}/run?run={rid}&rank=0")
    page.locator(SAWTOOTH).locator(".main-svg").first.wait_for(state="visible")
    wait_idle(page)
    for _ in range(100):
        if clicks["seen"] >= 1:
            break
        page.wait_for_timeout(100)
    assert clicks["seen"] == 1, "the page sent no paint click"
    page.locator('[data-testid="stButtonGroup"]').get_by_text("rank 1").click()
    page.wait_for_function("() => /[?&]rank=1(&|$)/.test(location.search)", timeout=30_000)
    wait_idle(page)
    for _ in range(100):
        if clicks["seen"] >= 2:
            break
        page.wait_for_timeout(100)
    assert clicks["seen"] == 2, "rank 1's page sent no paint click"
    assert "rank=0" in clicks["queries"][0] and "rank=1" in clicks["queries"][1], clicks
    stale, own = clicks["held"]
    clicks["held"] = [stale]
    finished = clicks["finished"]
    clicks["release"]()  # the stale click (rank 0) reaches the server after rank 1's run
    for _ in range(300):  # until the server has ended the run the stale click started
        if clicks["finished"] > finished:
            break
        page.wait_for_timeout(100)
    assert clicks["finished"] > finished, "the server ended no run after the stale click"
    wait_idle(page)
    assert urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query).get("rank") == ["1"]
    assert page.get_by_role("heading", name="Fixes").count() == 0  # it drew nothing
    clicks["held"] = [own]
    clicks["release"]()
    query = painted_query(page)  # painted by rank 1's own click
    assert query.get("rank") == ["1"], page.url
