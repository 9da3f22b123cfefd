"""Two dashboards, one team store: two real `gpuscope ui` servers on different ports, both on the
same PostgreSQL catalog and S3 bucket (tests/team_servers.py), one configured by options as a
user would on a command line, the other by the environment as compose does. A run ingested by
the CLI, and a run uploaded through one dashboard, open by URL on the other with their figures.
Screenshots: artifacts/screenshots/team_*.png."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    Server,
    clean_env,
    click_ingest,
    open_uploader,
    screenshot,
    stop_server,
    ui_server,
    wait_idle,
)
from team_servers import TeamStore

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
BEFORE = REPO / "sample_traces" / "before"
AFTER = REPO / "sample_traces" / "after"


def start_team_ui(workdir: Path, args: list[str], env: dict[str, str]) -> Server:
    """``python -m gpuscope ui --headless ARGS`` on a free port, no sample runs, with only ``env``
    of the store and AWS variables; returns once /_stcore/health says ok."""
    return ui_server(workdir, args, clean_env(env))


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args],
        capture_output=True,
        text=True,
        env=clean_env(env),
        timeout=300,
    )


@pytest.fixture
def two_dashboards(team_store: TeamStore, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    """Dashboard A: ``--store URL --data-path PATH`` with the AWS variables. Dashboard B: only the
    environment (GPUSCOPE_STORE, GPUSCOPE_DATA_PATH, AWS_*), as compose.yaml configures it."""
    a = start_team_ui(tmp_path / "a", team_store.args(), team_store.s3.env())
    try:
        b = start_team_ui(tmp_path / "b", [], team_store.env())
    except BaseException:
        stop_server(a)
        raise
    yield a, b
    stop_server(a)
    stop_server(b)


def metric(page, label: str) -> str:  # type: ignore[no-untyped-def]
    """The value shown on the headline card ``label``."""
    card = page.locator(".gs-card").filter(has_text=label).first
    return card.locator(".gs-card-value").inner_text().strip()


def expect_run_page(page, url: str, rid: str, name: str, report: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    """``url``/run?run=<rid> shows the run's name and the figures `gpuscope analyze` gives."""
    from gpuscope.web import ui

    page.goto(f"{url}/run?run={rid}")
    page.get_by_role("heading", name=name).wait_for()
    page.locator(".gs-card").filter(has_text="GPU busy").first.wait_for()
    wait_idle(page)
    assert metric(page, "GPU busy") == ui.fmt_pct(report["gpu_busy_pct"])
    # the job's verdict (one rank: the job is that rank): the median period between steps
    assert metric(page, "Step time") == ui.fmt_ms(report["job"]["step_time_ms"]["p50"])
    assert rid in page.locator('[data-testid="stMain"]').inner_text()


def test_a_run_stored_through_one_dashboard_opens_by_url_on_the_other(
    team_store: TeamStore, two_dashboards: tuple[Server, Server], new_page
) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    a, b = two_dashboards
    env = team_store.env()
    # 1. the CLI, from a third process, while both dashboards run
    done = cli("ingest", str(BEFORE), "--json", env=env)
    assert done.returncode == 0, done.stderr
    before = json.loads(done.stdout)[0]["run_id"]

    # 2. an upload through dashboard A's file chooser
    page_a = new_page()
    page_a.goto(f"{a.url}/runs")
    wait_idle(page_a)
    open_uploader(page_a)
    chosen = [str(p) for p in sorted(AFTER.glob("*.pt.trace.json*"))]
    page_a.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(chosen)
    click_ingest(page_a, chosen)
    try:
        page_a.wait_for_url(re.compile(r"/run\?run=[0-9a-f]{12}"))
    except PlaywrightTimeout:
        screenshot(page_a, "team_upload_failed")
        main = page_a.locator('[data-testid="stMain"]').inner_text()
        pytest.fail(
            f"the upload on A did not open its run page; the page says:\n{main[-2000:]}\n"
            f"A's log:\n{a.log.read_text()[-3000:]}",
            pytrace=False,
        )
    after = re.search(r"run=([0-9a-f]{12})", page_a.url).group(1)  # type: ignore[union-attr]
    assert after != before
    # stored once its Run page opens (the app stores before it switches pages): what that page
    # draws is step 3's to read, on the other dashboard; this page is left
    page_a.goto("about:blank")

    reports = {}
    for rid in (before, after):
        out = cli("analyze", rid, "--json", env=env)
        assert out.returncode == 0, out.stderr
        reports[rid] = json.loads(out.stdout)
    name_after = reports[after]["run"]["name"]

    # 3. each run by URL on the dashboard that did not store it, in fresh browser contexts
    run_a = new_page()
    expect_run_page(run_a, a.url, before, "before", reports[before])
    page_b = new_page()
    expect_run_page(page_b, b.url, after, name_after, reports[after])
    screenshot(page_b, "team_run_on_the_other_dashboard")

    # 4. B's Runs page lists both; a comparison link opens on B
    runs_b = new_page()
    runs_b.goto(f"{b.url}/runs")
    wait_idle(runs_b)
    runs_b.locator('[data-testid="stDataFrame"]').wait_for()
    cmp = new_page()
    cmp.goto(f"{b.url}/compare?a={before}&b={after}")
    cmp.get_by_role("heading", name="Compare").wait_for()
    chart = cmp.locator('[data-testid="stPlotlyChart"]').first  # rendered once both runs are read
    chart.locator(".main-svg").first.wait_for(state="visible")
    wait_idle(cmp)
    body = cmp.locator('[data-testid="stMain"]').inner_text()
    assert before in body and after in body and "before" in body and name_after in body
    # the sidebar names the store, but never with the catalog's password
    for page in (run_a, page_b, runs_b, cmp):
        shown = page.locator('[data-testid="stSidebar"]').inner_text()
        assert f"127.0.0.1:{team_store.pg.port}/{team_store.database}" in shown
        assert team_store.pg.password not in page.content()
    screenshot(cmp, "team_compare_on_the_other_dashboard")
