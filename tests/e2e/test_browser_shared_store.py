"""The dashboard on a shared store, with real processes: a `gpuscope ui` server running while
`gpuscope ingest` / `gpuscope delete` write the same store from other processes. What the browser
shows follows on the next load of the Runs page, with no restart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    REPO,
    Server,
    ddp_rank_files,
    open_uploader,
    real_sample,
    start_server,
    stop_server,
    wait_idle,
)
from synth import training_trace

pytestmark = pytest.mark.browser

CLI_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own: these tests add and delete runs, other modules count on the samples."""
    work = tmp_path_factory.mktemp("shared")
    s = start_server(work, db=work / "store")  # the local store's folder, as `--db` names it
    yield s
    stop_server(s)


def gpuscope(server: Server, *args: str) -> list[str]:
    """A `gpuscope` command line on the server's store."""
    return [sys.executable, "-m", "gpuscope", *args, "--db", str(server.db)]


def run_cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        gpuscope(server, *args),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        cwd=REPO,
        env=dict(os.environ),
    )


def trace(tmp_path: Path, label: str) -> Path:
    """A small trace whose bytes (so whose run id) are its own."""
    t = training_trace("after")
    t.extra_meta.update({"hostname": label})
    return t.write(tmp_path / f"{label}.pt.trace.json")


def grid_text(server: Server, page) -> str:  # type: ignore[no-untyped-def]
    """Load the Runs page afresh and return the text of every cell of its table."""
    page.goto(f"{server.url}/runs")
    wait_idle(page)
    cells = page.locator('[data-testid="stDataFrame"] [role="gridcell"]')
    cells.first.wait_for(state="attached")
    return "\n".join(cells.all_text_contents())


def test_a_cli_ingest_appears_and_a_cli_delete_disappears_without_a_restart(
    shared: Server, new_page, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    assert "from-the-cli" not in grid_text(shared, page)
    done = run_cli(shared, "ingest", str(trace(tmp_path, "x")), "--name", "from-the-cli")
    assert done.returncode == 0, done.stderr
    (run_id,) = done.stdout.split()
    assert "from-the-cli" in grid_text(shared, page)
    assert shared.proc.poll() is None  # the same server, never restarted
    gone = run_cli(shared, "delete", run_id)
    assert gone.returncode == 0, gone.stderr
    assert "from-the-cli" not in grid_text(shared, page)


def test_four_parallel_cli_ingests_all_land_and_all_show(
    shared: Server, new_page, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    grid_text(shared, page)  # the page is open (and its caches warm) while they run
    names = [f"parallel-{i}" for i in range(4)]
    procs = [
        subprocess.Popen(
            gpuscope(shared, "ingest", str(trace(tmp_path, n)), "--name", n),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for n in names
    ]
    outs = [p.communicate(timeout=CLI_TIMEOUT_S) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outs]
    ids = [out.split()[0] for out, _ in outs]
    assert len(set(ids)) == 4
    shown = grid_text(shared, page)
    for n, rid in zip(names, ids, strict=True):
        assert n in shown and rid in shown
    listed = run_cli(shared, "runs", "--json")
    assert listed.returncode == 0 and all(rid in listed.stdout for rid in ids)


def _big_trace(tmp_path: Path) -> Path:
    """A trace big enough that its CLI ingest is still running while the browser's upload is
    ingested: the recorded sample's steps replayed to 60 MB."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from make_big_trace import make_big_trace

    src = real_sample("before")
    if src is None:
        src_file = training_trace("before", steps=12).write(tmp_path / "src.pt.trace.json")
    else:
        src_file = sorted(src.glob("*.pt.trace.json*"))[0]
    out = tmp_path / "big_rank0.pt.trace.json"
    with open(os.devnull, "w") as quiet:
        make_big_trace(src_file, out, 60_000_000, log=quiet)
    return out


def test_an_upload_in_the_browser_while_a_cli_ingest_runs_both_land(
    shared: Server, new_page, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    big = _big_trace(tmp_path)
    page = new_page()
    page.goto(f"{shared.url}/runs")
    wait_idle(page)
    open_uploader(page)  # open already when this test is the first on its worker's store
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
        [str(f) for f in ddp_rank_files(tmp_path)]
    )
    button = page.get_by_role("button", name="Ingest")
    expect(button).to_be_enabled(timeout=90_000)
    cli = subprocess.Popen(
        gpuscope(shared, "ingest", str(big), "--name", "big-from-the-cli"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    button.click()
    running_at_the_click = cli.poll() is None
    page.wait_for_url(re.compile(r"/run\?run=[0-9a-f]{12}"), timeout=180_000)
    uploaded = re.search(r"run=([0-9a-f]{12})", page.url).group(1)  # type: ignore[union-attr]
    # the upload has landed once its Run page opens (the app stores before it switches pages);
    # what that page draws is other tests' to read: the page is left while the CLI ingest ends
    page.goto("about:blank")
    out, err = cli.communicate(timeout=CLI_TIMEOUT_S)
    assert cli.returncode == 0, err
    assert running_at_the_click, "the CLI ingest ended before the upload began"
    shown = grid_text(shared, page)
    assert uploaded in shown and "big-from-the-cli" in shown and out.split()[0] in shown
