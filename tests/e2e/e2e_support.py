"""Helpers of the browser tests and the UI benchmark: a real `gpuscope ui` server on a free port,
Debian's chromium, screenshots (artifacts/screenshots/, kept as CI artefacts)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve import (
    CHROMIUM_ARGS,
    STARTUP_S,
    NotUp,
    free_port,
    start_ui,
    stop_process,
    wait_until_up,
)
from synth import training_trace, write_sample_tree

__all__ = ["CHROMIUM_ARGS", "STARTUP_S", "free_port", "stop_process"]

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "artifacts" / "screenshots"
PAGE_TIMEOUT_MS = 90_000


#: Debian's headless shell of chromium (package chromium-headless-shell, built from the same
#: source as chromium: the same Blink and V8, without the desktop browser's windowing): what
#: Playwright itself runs headless. It draws the same pages for less CPU than chromium.
HEADLESS_SHELL = "/usr/lib/chromium/chromium-headless-shell"


def chromium_path() -> str:
    """Debian's chromium: ``$GPUSCOPE_CHROMIUM``, else its headless shell, else chromium itself
    (`make browser` installs both); a clear failure (not a skip) when none is there."""
    for candidate in (
        os.environ.get("GPUSCOPE_CHROMIUM"),
        HEADLESS_SHELL,
        shutil.which("chromium-headless-shell"),
        shutil.which("chromium"),
        "/usr/bin/chromium",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail(
        "Debian's chromium is not installed: run `make browser` "
        "(apt-get install chromium chromium-headless-shell) or set GPUSCOPE_CHROMIUM",
        pytrace=False,
    )


def real_sample(name: str) -> Path | None:
    """``sample_traces/<name>/`` of the repository when it holds a trace (the recorded samples)."""
    d = REPO / "sample_traces" / name
    return d if d.is_dir() and any(d.glob("*.pt.trace.json*")) else None


def sample_tree(dest: Path) -> Path:
    """The runs `--load-samples` loads: the repository's recorded before/after samples (what
    `make run` shows), else hand-built ones. The DDP sample is left for the upload test."""
    before, after = real_sample("before"), real_sample("after")
    if before is None or after is None:
        return write_sample_tree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for d in (before, after):
        shutil.copytree(d, dest / d.name)
    return dest


def ddp_rank_files(tmp_path: Path) -> list[Path]:
    """The recorded DDP sample's two rank files (one run), else two hand-built ones."""
    ddp = real_sample("ddp")
    if ddp is not None:
        return sorted(ddp.glob("*.pt.trace.json*"))
    return [
        training_trace("after", rank=r, world_size=2, seed=r).write(
            tmp_path / f"ddp_rank{r}.pt.trace.json.gz"
        )
        for r in (0, 1)
    ]


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without any store or AWS variable, plus ``extra``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCOPE_", "AWS_"))}
    return {**base, **extra}


def wait_up(
    url: str,
    proc: subprocess.Popen[bytes],
    what: str,
    *,
    log: Path | None = None,
    timeout_s: float = STARTUP_S,
) -> None:
    """Until ``url`` answers 200 (:func:`serve.wait_until_up`); a test failure naming ``what``
    and showing the end of ``log`` when it does not come up."""
    try:
        wait_until_up(url, proc, what, log=log, timeout_s=timeout_s)
    except NotUp as e:
        pytest.fail(str(e), pytrace=False)


@dataclass
class Server:
    url: str
    db: Path
    samples: Path
    log: Path
    proc: subprocess.Popen[bytes]


def ui_server(
    workdir: Path,
    args: list[str],
    env: dict[str, str],
    *,
    port: int | None = None,
    db: Path | None = None,
    samples: Path | None = None,
) -> Server:
    """``python -m gpuscope ui --headless ARGS`` in ``workdir`` with exactly ``env``, on ``port``
    (default: a free one); returns once /_stcore/health says ok, else fails the test with the
    server's log. ``db``/``samples``: what the returned Server says (default ``workdir``)."""
    try:
        proc, url, log = start_ui(workdir, args, env, port=port)
    except NotUp as e:
        pytest.fail(str(e), pytrace=False)
    return Server(url, db or workdir, samples or workdir, log, proc)


def start_server(
    workdir: Path,
    *,
    load_samples: bool = True,
    db: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> Server:
    """`python -m gpuscope ui --headless` on a free port; returns once /_stcore/health says ok."""
    workdir.mkdir(parents=True, exist_ok=True)
    samples = sample_tree(workdir / "sample_traces")
    db = db or workdir / "store.duckdb"
    env = {**os.environ, "GPUSCOPE_SAMPLES": str(samples), **(extra_env or {})}
    args = ["--db", str(db), *(["--load-samples"] if load_samples else [])]
    return ui_server(workdir, args, env, db=db, samples=samples)


def stop_server(server: Server) -> None:
    stop_process(server.proc)


# -- the pages ---------------------------------------------------------------------------------


def sample_ids(server: Server) -> tuple[str, str]:
    """The run ids of the before/after samples the server loaded (content-derived)."""
    from gpuscope.ingest.loader import run_id_for
    from gpuscope.ingest.source import file_sha256

    def rid(d: Path) -> str:
        return run_id_for([file_sha256(p) for p in sorted(d.glob("*.pt.trace.json*"))])

    return rid(server.samples / "before"), rid(server.samples / "after")


def open_uploader(page) -> None:  # type: ignore[no-untyped-def]
    """Open the uploader; it opens by itself while the store holds only the samples (a first
    visit), where a blind click would close it."""
    details = page.locator('[data-testid="stExpander"] details').filter(has_text="Upload traces")
    details.wait_for()
    if details.get_attribute("open") is None:
        page.get_by_text("Upload traces").click()
    page.locator('[data-testid="stFileUploaderDropzone"]').wait_for(state="visible")


def click_ingest(page, files: list | None = None) -> None:  # type: ignore[no-untyped-def,type-arg]
    """Click Ingest once the upload has reached the server (the button is enabled then).

    The files are chosen once: where Ingest is still disabled after 90 s, the test fails, saying
    what the uploader lists and which of ``files`` (what was given to the file chooser: paths or
    Playwright's file payloads) it does not; a file chosen must never need choosing again."""
    from playwright.sync_api import expect

    button = page.get_by_role("button", name="Ingest")
    try:
        expect(button).to_be_enabled(timeout=90_000)
    except AssertionError:  # playwright's expect raises the builtin
        listed = page.locator('[data-testid="stFileUploader"]').first.inner_text()
        names = [f["name"] if isinstance(f, dict) else Path(f).name for f in files or []]
        missing = [n for n in names if page.get_by_role("button", name=f"Remove {n}").count() == 0]
        pytest.fail(
            f"Ingest stayed disabled 90 s after the files were chosen; the uploader showed "
            f"{listed[:300]!r}" + (f"; not listed: {missing}" if missing else ""),
            pytrace=False,
        )
    button.click()


def browser_context(browser, color_scheme: str = "light"):  # type: ignore[no-untyped-def]
    """A fresh browser context (no shared cookies or storage) of a 1440 x 1000 viewport, whose
    pages watch how Streamlit's script runs end (:data:`RUN_END_JS`: ``wait_idle`` reads it)."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000}, color_scheme=color_scheme)
    ctx.set_default_timeout(PAGE_TIMEOUT_MS)
    ctx.add_init_script(RUN_END_JS)
    return ctx


def pages_report(
    contexts: list[Any], name: str, log: Path | None, *, timeout_ms: int = 10_000
) -> str:
    """What each page of ``contexts`` shows, for a failed test's report: its URL, the start of its
    visible text and a full-page screenshot ``SHOTS/<name>-<context>-<page>.png``; a page that
    cannot be read (hung, crashed) says why instead. Then the end of the server's ``log``."""
    from playwright.sync_api import Error as PlaywrightError

    lines = []
    for i, ctx in enumerate(contexts):
        for j, pg in enumerate(ctx.pages):
            shot = f"{name}-{i}-{j}.png"
            try:
                SHOTS.mkdir(parents=True, exist_ok=True)
                pg.screenshot(path=str(SHOTS / shot), full_page=True, timeout=timeout_ms)
                text = pg.evaluate("() => document.body.innerText")[:1500]
                lines.append(f"--- page {i}.{j} {pg.url} ({shot})\n{text}")
            except PlaywrightError as exc:  # keeps the test's own error; says why not this page
                lines.append(f"--- page {i}.{j} {pg.url}: could not be read: {exc.message}"[:300])
    if log is not None and Path(log).exists():
        lines.append("--- end of the server log\n" + Path(log).read_text(errors="replace")[-3000:])
    return "\n".join(lines)


def sawtooth_chart(page):  # type: ignore[no-untyped-def]
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.locator(".main-svg").first.wait_for(state="visible")
    return chart


def screenshot(page, name: str) -> Path:  # type: ignore[no-untyped-def]
    """Save the whole page (Streamlit scrolls inside its main pane, so the viewport is stretched
    to the content's height for the shot) as a test artefact."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    size = page.viewport_size or {"width": 1440, "height": 1000}
    height = page.evaluate(
        "() => { const m = document.querySelector('[data-testid=\"stMain\"]'); "
        "return m ? m.scrollHeight : document.body.scrollHeight; }"
    )
    page.set_viewport_size(
        {"width": size["width"], "height": max(size["height"], min(int(height) + 40, 8000))}
    )
    page.wait_for_timeout(500)
    page.screenshot(path=str(path), animations="disabled")
    page.set_viewport_size(size)
    return path


#: How often a page-side wait checks its condition, ms. Playwright's default polls on every
#: animation frame, which keeps chromium drawing frames for as long as the wait lasts (0.35 CPU s
#: per 5 s waited against 0.05-0.24 s at 100 ms: measured on the Run page, 2-core VM).
POLL_MS = 100


def wait_still(locator) -> None:  # type: ignore[no-untyped-def]
    """Until ``locator``'s element has kept its box (position and size) over two animation frames:
    after a scroll or a resize, before a pointer aims at it. One still moving after 300 frames
    fails the test."""
    still = locator.evaluate(
        "el => new Promise(done => { let last = '', n = 0; const tick = () => {"
        " const b = el.getBoundingClientRect(); const now = [b.x, b.y, b.width, b.height].join();"
        " if (now === last) done(true); else if (++n > 300) done(false);"
        " else { last = now; requestAnimationFrame(tick); } }; requestAnimationFrame(tick); })"
    )
    assert still, f"{locator} kept moving over 300 animation frames"


#: A page script (``context.add_init_script``; the ``new_page`` fixture adds it to every page)
#: that keeps in ``window.__gsRunEnd`` how Streamlit's last script run ended, from the server's
#: own ``script_finished`` message on the page's socket (ForwardMsg field 6, a varint:
#: 0 finished, 1 compile error, 2 ended early for a rerun, 3 a fragment's run finished); null
#: until one has come. Between a run that asked for a rerun (``st.rerun()``) and that rerun,
#: Streamlit reports the session idle (40-210 ms measured at load 19); only this tells the gap.
RUN_END_JS = """(() => {
  if (window.__gsRunEnd !== undefined) return;
  window.__gsRunEnd = null;
  const varint = (b, i) => { let v = 0, m = 1, x;
    do { x = b[i++]; v += (x & 127) * m; m *= 128; } while (x & 128); return [v, i]; };
  const seen = (data) => {
    if (!(data instanceof ArrayBuffer)) return;
    const b = new Uint8Array(data);
    let i = 0;
    while (i < b.length) {
      let key, v; [key, i] = varint(b, i);
      const wire = key & 7;
      if (wire === 0) { [v, i] = varint(b, i); if (key === 48) window.__gsRunEnd = v; }
      else if (wire === 2) { [v, i] = varint(b, i); i += v; }
      else if (wire === 1) i += 8;
      else if (wire === 5) i += 4;
      else return;
    }
  };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) { super(...args); this.addEventListener("message", (e) => seen(e.data)); }
  };
})();"""

#: How long :func:`wait_idle` wants the app idle on a page without :data:`RUN_END_JS` (or before
#: a run has ended on it), ms: the gap between a run and its rerun is mostly shorter.
IDLE_SETTLE_MS = 300

#: The app is idle: Streamlit's own run state (``stApp``'s ``data-test-script-state``, set as the
#: server reports it; the "Running…" icon shows only after a run has lasted 500 ms) says no run
#: is going on, the last run did not end for a rerun (:data:`RUN_END_JS`), the main pane is there
#: and no element is stale. Where the run's end is unknown, once that has held at every poll for
#: ``settle`` ms (the poll's own clock, kept per call by ``token``).
_IDLE_JS = """([token, settle]) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const idle = app !== null && app.getAttribute('data-test-script-state') === 'notRunning'
    && window.__gsRunEnd !== 2
    && document.querySelector('[data-testid="stMain"]') !== null
    && !document.querySelector('[data-testid="stStatusWidget"] [data-testid="stStatusWidgetRunningIcon"]')
    && document.querySelectorAll('[data-stale="true"]').length === 0;
  if (idle && (window.__gsRunEnd === 0 || window.__gsRunEnd === 1 || window.__gsRunEnd === 3))
    return true;
  const now = performance.now();
  const seen = window.__gsIdle;
  if (!idle) { window.__gsIdle = {token, since: null}; return false; }
  if (!seen || seen.token !== token || seen.since === null) window.__gsIdle = {token, since: now};
  return now - window.__gsIdle.since >= settle;
}"""
_idle_calls = itertools.count()


def wait_idle(page, timeout_ms: int = PAGE_TIMEOUT_MS) -> None:  # type: ignore[no-untyped-def]
    """Until the app has rendered and its script runs have finished: no run going on, nor one
    asked for by the last (:data:`RUN_END_JS`; on a page without it, none for
    :data:`IDLE_SETTLE_MS` on end), and no stale element."""
    page.locator('[data-testid="stApp"]').wait_for(timeout=timeout_ms)
    page.wait_for_function(
        _IDLE_JS,
        arg=[next(_idle_calls), IDLE_SETTLE_MS],
        timeout=timeout_ms,
        polling=POLL_MS,
    )
