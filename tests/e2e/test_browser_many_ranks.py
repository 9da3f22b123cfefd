"""A 128-rank run read at a glance in a real browser (issue 46): the real DDP pair copied to 128
ranks (``benchmarks/bench_ranks.rewrite_rank``: only the rank and world size rewritten), every
rank a copy of the pair's rank 0 except rank 77, a copy of its rank 1 (the one the other waits
for: its host is slow under the profiler). The Runs list names the run before its figures are
computed. The Run page opens on rank 77 and says why. In its heatmap, in its default view (the
wait), the pace-setter's row is labelled and stands out (it waits for no one,
every other rank waits ~20 ms a step), the profiler's drain step sets no colour, a ringed cell
hovers its value, and a click on a cell sets the Rank/Step pickers to it, opens that rank's busy
plot zoomed on that step and brings the plot into view."""

from __future__ import annotations

import gzip
import json
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clitools import cli_in_process  # tests/: on the path from tests/conftest.py
from e2e_support import (
    POLL_MS,
    REPO,
    SHOTS,
    Server,
    screenshot,
    start_server,
    stop_server,
    wait_idle,
    wait_still,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

N, SLOW = 128, 77


def write_ranks(folder: Path) -> None:
    """``folder/rank<i>.pt.trace.json``: the DDP pair's rank 0 as every rank but ``SLOW``, its
    rank 1 as ``SLOW``."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_ranks import rewrite_rank

    ddp = REPO / "sample_traces" / "ddp"
    pair = [
        gzip.decompress((ddp / f"ddp_rank{r}.pt.trace.json.gz").read_bytes()).decode()
        for r in (0, 1)
    ]
    folder.mkdir(parents=True)
    for i in range(N):
        text = rewrite_rank(pair[1 if i == SLOW else 0], i, N)
        (folder / f"rank{i}.pt.trace.json").write_text(text)


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str, dict]]:  # type: ignore[type-arg]
    """A server of its own, the 128-rank run ingested from the CLI, and ``analyze --rank 77
    --json`` of it (the job's pace-setter, rank 77's steps)."""
    work = tmp_path_factory.mktemp("many")
    write_ranks(work / "r128")
    s = start_server(work, db=work / "store", load_samples=False)
    try:

        def cli(*args: str) -> str:  # in this process: no process is the point here
            done = cli_in_process(*args, "--db", str(s.db))
            assert done.returncode == 0, done.stderr
            return done.stdout

        (rid,) = cli("ingest", str(work / "r128"), "--name", "r128").split()
        doc = json.loads(cli("analyze", rid, "--rank", str(SLOW), "--json"))
        yield s, rid, doc
    finally:
        stop_server(s)


#: The busy plot's heading is in the top half of the viewport.
PLOT_IN_VIEW = (
    "() => { const h = document.getElementById('gpu-busy-over-time');"
    " if (!h) return false; const t = h.getBoundingClientRect().top;"
    " return t >= 0 && t < window.innerHeight / 2; }"
)


def heatmap(page):  # type: ignore[no-untyped-def]
    chart = page.locator('[data-testid="stPlotlyChart"]').filter(has=page.locator(".heatmaplayer"))
    chart.locator(".main-svg").first.wait_for(state="visible")
    return chart


def cell_xy(chart, row: int, col: int, n_rows: int, n_cols: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """The page coordinates of a cell's centre (rows top down: y is reversed), the whole heatmap
    brought into the viewport first (a pointer outside it hovers nothing)."""
    chart.evaluate("el => el.scrollIntoView({block: 'center'})")
    area = chart.locator(".nsewdrag").first
    wait_still(area)
    box = area.bounding_box()
    assert box is not None
    return (
        box["x"] + (col + 0.5) * box["width"] / n_cols,
        box["y"] + (row + 0.5) * box["height"] / n_rows,
    )


def hover_text(page, chart, x: float, y: float, want: str) -> str:  # type: ignore[no-untyped-def]
    page.mouse.move(x, y)
    page.wait_for_function(
        "([el, want]) => el.textContent.includes(want)",
        arg=[chart.locator(".hoverlayer").element_handle(), want],
        timeout=10_000,
    )
    return str(chart.locator(".hoverlayer").text_content())


def click_cell(page, chart, x: float, y: float, rank: int) -> None:  # type: ignore[no-untyped-def]
    """Click the cell at (x, y) once and wait until the URL names ``rank``. On a timeout the
    failure says what Plotly saw of the click (its click and selection events on the chart) and
    whether a script run was going on, so a click lost by the browser, by Plotly or by the app
    tell apart; the click is never repeated (a user's lost click is a bug to see, not to hide)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    chart.locator(".js-plotly-plot").first.evaluate(
        "el => { window.__gsPlotly = []; const log = (k) => (e) => window.__gsPlotly.push("
        "[k, e && e.points ? e.points.map(p => [p.x, p.y, p.curveNumber]) : null]);"
        " el.on('plotly_click', log('click')); el.on('plotly_selected', log('selected')); }"
    )
    page.mouse.click(x, y)
    try:
        page.wait_for_function(
            f"() => /[?&]rank={rank}(&|$)/.test(location.search)", timeout=90_000
        )
    except PlaywrightTimeoutError:
        seen = page.evaluate("() => window.__gsPlotly")
        running = page.locator('[data-testid="stStatusWidgetRunningIcon"]').count() > 0
        raise AssertionError(
            f"a click on rank {rank}'s cell did not open it in 90 s: Plotly's events {seen!r}, "
            f"a script run going on: {running}, URL {page.url}"
        ) from None


def picked(page, label: str) -> str:  # type: ignore[no-untyped-def]
    """The value the cell picker labelled ``label`` shows (the last combobox of that name: the
    page's own rank selector comes first)."""
    return str(page.get_by_role("combobox", name=label, exact=True).last.input_value())


def plot_heading_top(page) -> float:  # type: ignore[no-untyped-def]
    h = page.get_by_role("heading", name="GPU busy over time")
    h.wait_for()
    box = h.bounding_box()
    assert box is not None
    return float(box["y"])


def runs_row(page, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The Runs list's cells of the row named ``name`` as the grid holds them ("" for none)."""
    row = page.locator('[data-testid="stDataFrame"] [role="row"]').filter(has_text=name).first
    row.wait_for(state="attached")
    return [c.strip() for c in row.locator('[role="gridcell"]').all_text_contents()]


def test_the_pace_setter_stands_out_and_a_click_opens_its_plot(many, new_page) -> None:  # type: ignore[no-untyped-def]
    server, rid, doc = many
    assert doc["job"]["pace_setter"] == SLOW
    steps_ms = {s["number"]: s["duration_ms"] for s in doc["steps"]}
    page = new_page()
    # the Runs list first, on a server that has not analysed the run: its name is listed before
    # its job's verdict is computed (seconds for 128 ranks), which fills the row in afterwards
    page.goto(f"{server.url}/runs")
    first = runs_row(page, "r128")
    assert "r128" in first and rid in first and "rank" not in " ".join(first), first
    page.wait_for_function(
        '() => [...document.querySelectorAll(\'[data-testid="stDataFrame"] [role="row"]\')]'
        f".some(r => r.textContent.includes('r128') && r.textContent.includes('rank {SLOW}'))",
        timeout=300_000,
        polling=POLL_MS,
    )
    assert f"rank {SLOW}" in runs_row(page, "r128")  # the pace-setter, once analysed
    # the Run page without a rank in the URL opens on the pace-setter, and says why
    page.goto(f"{server.url}/run?run={rid}")
    page.get_by_text(
        f"Opened on rank {SLOW}, the pace-setter: the other ranks wait for it."
    ).wait_for()
    page.wait_for_function(f"() => /[?&]rank={SLOW}(&|$)/.test(location.search)", timeout=90_000)
    page.get_by_text("Colour the ranks × steps by").wait_for()
    wait_idle(page)
    assert page.get_by_role("combobox", name="Rank", exact=True).first.input_value() == (
        f"rank {SLOW}"
    )
    chart = heatmap(page)
    # the rank table opens sorted by the wait each rank causes: the pace-setter first
    table = page.locator('[data-testid="stDataFrame"]').filter(has_text="caused wait / step")
    first = table.locator('[role="gridcell"]').first
    first.wait_for(state="attached")
    assert first.text_content() == str(SLOW)
    # the default view is the wait
    checked = page.locator('[data-testid="stRadio"] label:has(input:checked)')
    assert checked.inner_text().strip() == "wait"
    fig = chart.locator(".js-plotly-plot").evaluate(
        "el => ({z: Array.from(el.data[0].z._inputArray || el.data[0].z, r => Array.from(r)),"
        " y: el.data[0].y, zmax: el.data[0].zmax, x: el.data[0].x,"
        " cs: el.data[0].colorscale, ticks: el.layout.yaxis.ticktext})"
    )
    assert fig["y"][SLOW] == f"rank {SLOW}" and len(fig["y"]) == N
    # labelled: a row label every few ranks, the pace-setter's named (and drawn on the axis)
    assert f"<b>rank {SLOW} ◀ pace-setter</b>" in fig["ticks"] and 30 <= len(fig["ticks"]) <= 40
    labels = chart.locator(".ytick text").all_text_contents()
    assert f"rank {SLOW} ◀ pace-setter" in labels, labels
    # stands out: it waits for no one; every other rank waits at least half the scale's top
    steps = [int(t.lstrip("#")) for t in fig["x"]]
    drain = steps[-1]  # 245: 68.8 ms on the pair's rank 0 (its median step ~17 ms)
    keep = [i for i, s in enumerate(steps) if s != drain]
    assert all(fig["z"][SLOW][i] == 0 for i in keep)
    others = [fig["z"][r][i] for r in range(N) if r != SLOW for i in keep]
    assert min(others) >= 0.5 * fig["zmax"], (min(others), fig["zmax"])
    page.get_by_text("profiler drain").first.wait_for()
    chart.scroll_into_view_if_needed()
    wait_idle(page)
    shot_section(page, "ranks_128")
    # a ringed cell (rank 77 at step 243, an outlier) hovers its value
    x, y = cell_xy(chart, SLOW, keep[2], N, len(steps))
    text = hover_text(page, chart, x, y, f"rank {SLOW} ◀ pace-setter · step")
    assert f"step #{steps[keep[2]]}" in text and "wait (ms) 0.00" in text and "outlier" in text
    # a click on another rank's cell: the pickers follow, that rank opens
    x, y = cell_xy(chart, 5, keep[1], N, len(steps))
    hover_text(page, chart, x, y, "rank 5 · step")
    click_cell(page, chart, x, y, 5)
    wait_idle(page)
    assert (picked(page, "Rank"), picked(page, "Step")) == ("rank 5", f"#{steps[keep[1]]}")
    page.wait_for_function(PLOT_IN_VIEW, timeout=15_000)  # the click brought the plot into view
    # back to the pace-setter: a click on its row lands on its plot, zoomed on the step
    page.mouse.wheel(0, -3000)  # the reader scrolls back up (which ends the scrolling to the plot)
    page.wait_for_timeout(500)
    chart = heatmap(page)
    x, y = cell_xy(chart, SLOW, keep[3], N, len(steps))
    assert plot_heading_top(page) > page.viewport_size["height"]  # the plot is below, out of view
    hover_text(page, chart, x, y, f"rank {SLOW} ◀ pace-setter · step")
    click_cell(page, chart, x, y, SLOW)
    page.wait_for_function("() => /[?&]zoom=/.test(location.search)", timeout=30_000)
    wait_idle(page)
    assert (picked(page, "Rank"), picked(page, "Step")) == (f"rank {SLOW}", f"#{steps[keep[3]]}")
    page.wait_for_function(PLOT_IN_VIEW, timeout=15_000)
    zoom = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["zoom"][0]
    lo, hi = (float(v) for v in zoom.split("-"))
    assert abs((hi - lo) - steps_ms[steps[keep[3]]]) < 1e-3, (zoom, steps_ms)
    screenshot(page, "ranks_128_clicked")


def shot_section(page, name: str) -> Path:  # type: ignore[no-untyped-def]
    """The Run page's ranks section (from its heading to the cell pickers) as ``SHOTS/name.png``
    (docs/img/ranks_128.png is this picture)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    size = page.viewport_size or {"width": 1440, "height": 1000}
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": size["width"], "height": min(int(height) + 40, 8000)})
    page.wait_for_timeout(800)
    top = page.get_by_role("heading", name="Ranks", exact=True).bounding_box()
    end = (
        page.locator('[data-testid="stSelectbox"]')
        .filter(has=page.get_by_text("Step", exact=True))
        .last.bounding_box()
    )
    assert top is not None and end is not None
    clip = {"x": top["x"] - 20, "y": top["y"] - 10, "width": size["width"] - top["x"],
            "height": end["y"] + end["height"] + 20 - top["y"]}  # fmt: skip
    page.screenshot(path=str(path), clip=clip, animations="disabled")
    page.set_viewport_size(size)
    return path
