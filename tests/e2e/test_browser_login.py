"""The whole sign-in in a real browser: a real `gpuscope ui --auth-config` server and a real OIDC
provider (`oidc-provider-mock`, its own process), driven by Playwright in Debian's chromium.

Alice signs in through the provider's form, uploads a trace (the run records her as its uploader),
Bob signs in and may not delete it (the control is disabled and says why), Alice deletes it and
signs out. Screenshots: artifacts/screenshots/signin_*.png."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    free_port,
    real_sample,
    screenshot,
    stop_process,
    stop_server,
    ui_server,
    wait_idle,
    wait_up,
)
from synth import training_trace

pytestmark = pytest.mark.browser

ALICE = {"sub": "alice", "email": "alice@example.com", "name": "Alice Liddell"}
BOB = "bob@example.com"  # typed as the subject: the provider makes {"email": sub} its claims


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """oidc-provider-mock on a free port, Alice predefined with a name; its base URL."""
    work = tmp_path_factory.mktemp("oidc")
    port = free_port()
    log = work / "provider.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oidc_provider_mock",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--user-claims",
            json.dumps(ALICE),
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    wait_up(f"{url}/.well-known/openid-configuration", proc, "the OIDC provider", log=log)
    yield url
    stop_process(proc)


@dataclass
class SignInServer:
    url: str
    db: Path
    log: Path


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory, provider: str) -> Iterator[SignInServer]:
    """`gpuscope ui --auth-config FILE` on a free port against an empty store."""
    work = tmp_path_factory.mktemp("signin")
    port = free_port()
    config = work / "auth.toml"
    config.write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        f'cookie_secret = "{secrets.token_hex(32)}"\n'
        'client_id = "gpuscope-e2e"\n'
        f'client_secret = "{secrets.token_hex(16)}"\n'
        f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n'
        "\n[gpuscope]\n"
        'admins = ["carol@example.com"]\n'
    )
    db = work / "store.duckdb"
    server = ui_server(
        work, ["--db", str(db), "--auth-config", str(config)], dict(os.environ), port=port, db=db
    )
    yield SignInServer(server.url, db, server.log)
    stop_server(server)


def _sign_in(page, dashboard: SignInServer, provider: str, subject: str) -> None:  # type: ignore[no-untyped-def]
    """From the dashboard's sign-in page through the provider's form and back."""
    page.goto(f"{dashboard.url}/runs")
    wait_idle(page)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(provider) + r"/oauth2/authorize"))
    page.locator('input[name="sub"]').fill(subject)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(re.compile(re.escape(dashboard.url)))
    wait_idle(page)


def _sidebar(page) -> str:  # type: ignore[no-untyped-def]
    return page.locator('[data-testid="stSidebar"]').inner_text()


def _select_first_row(page) -> None:  # type: ignore[no-untyped-def]
    """Tick the first row's selection box (the row-marker column at the grid's left edge)."""
    grid = page.locator('[data-testid="stDataFrame"]')
    grid.wait_for()
    box = grid.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)  # below the header row, first row
    page.get_by_text("Yes, delete: this cannot be undone").wait_for()
    wait_idle(page)


def _trace(tmp_path: Path) -> Path:
    """The recorded "before" sample's trace, else a hand-built one."""
    sample = real_sample("before")
    if sample is not None:
        return sorted(sample.glob("*.pt.trace.json*"))[0]
    return training_trace("before").write(tmp_path / "before.pt.trace.json.gz")


def test_sign_in_upload_delete_only_by_the_uploader_sign_out(
    dashboard: SignInServer, provider: str, new_page, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    # -- a visitor sees the sign-in page and nothing of the store
    alice = new_page()
    alice.goto(f"{dashboard.url}/runs")
    wait_idle(alice)
    alice.get_by_role("button", name="Sign in").wait_for()
    main = alice.locator('[data-testid="stMain"]').inner_text()
    assert "Sign in to see the runs" in main and "Upload traces" not in main
    assert alice.get_by_role("heading", name="Runs", exact=True).count() == 0
    screenshot(alice, "signin_page")

    # -- Alice signs in at the provider and comes back signed in, her name shown
    _sign_in(alice, dashboard, provider, ALICE["sub"])
    alice.get_by_text("Signed in as").wait_for()
    side = _sidebar(alice)
    assert "Alice Liddell" in side and "alice" in side and "example.com" in side
    alice.get_by_role("button", name="Sign out").wait_for()

    # -- she uploads a trace: the run records her as its uploader
    alice.goto(f"{dashboard.url}/runs")
    wait_idle(alice)
    alice.get_by_role("heading", name="Runs", exact=True).wait_for()
    alice.locator('[data-testid="stFileUploaderDropzone"]').wait_for(state="visible")
    alice.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
        str(_trace(tmp_path))
    )
    ingest = alice.get_by_role("button", name="Ingest")
    expect(ingest).to_be_enabled(timeout=90_000)
    ingest.click()
    alice.wait_for_url(re.compile(r"/run\?run=[0-9a-f]{12}"))  # stored: its page opens
    alice.goto(f"{dashboard.url}/runs")  # what the Run page draws is other tests' to read
    wait_idle(alice)
    _select_first_row(alice)
    confirm = alice.get_by_role("checkbox", name="Yes, delete: this cannot be undone")
    expect(confirm).to_be_enabled()
    screenshot(alice, "signin_owner")

    # -- Bob signs in (another browser) and may not delete Alice's run; the page says why
    bob = new_page()
    _sign_in(bob, dashboard, provider, BOB)
    bob.get_by_text("Signed in as").wait_for()
    assert BOB.split("@")[0] in _sidebar(bob)
    bob.goto(f"{dashboard.url}/runs")
    wait_idle(bob)
    _select_first_row(bob)
    body = bob.locator('[data-testid="stMain"]').inner_text()
    assert "who uploaded this run, or an admin may change it" in body
    assert "alice" in body.split("who uploaded this run")[0].rsplit("Only", 1)[1]
    expect(bob.get_by_role("checkbox", name="Yes, delete: this cannot be undone")).to_be_disabled()
    expect(bob.get_by_role("button", name=re.compile(r"^Delete"))).to_be_disabled()
    expect(bob.get_by_role("button", name="Save name and tags")).to_be_disabled()
    screenshot(bob, "signin_not_owner")

    # -- Alice deletes her run
    alice.get_by_text("Yes, delete: this cannot be undone").click()  # the label covers the box
    expect(confirm).to_be_checked()
    wait_idle(alice)
    delete = alice.get_by_role("button", name=re.compile(r"^Delete"))
    expect(delete).to_be_enabled()
    delete.click()
    alice.get_by_text("Deleted 1 run(s).").wait_for()
    alice.get_by_text("No runs yet").wait_for()

    # -- and signs out: the next visit asks her to sign in again
    alice.get_by_role("button", name="Sign out").click()
    # Streamlit ends the provider's session too (its end_session_endpoint), which asks to confirm
    alice.wait_for_url(re.compile(re.escape(provider) + r"/oauth2/end_session"))
    alice.get_by_role("button", name="End session").click()
    alice.wait_for_url(re.compile(re.escape(dashboard.url)))
    alice.goto(f"{dashboard.url}/runs")
    wait_idle(alice)
    alice.get_by_role("button", name="Sign in").wait_for()
    assert "Signed in as" not in alice.locator('[data-testid="stApp"]').inner_text()
