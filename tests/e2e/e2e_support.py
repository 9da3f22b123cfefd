"""Helpers of the browser tests and the UI benchmark: a real `gpuscope ui` server on a free port,
Debian's chromium, screenshots (artifacts/screenshots/, kept as CI artefacts)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth import write_sample_tree

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STARTUP_S = 120
PAGE_TIMEOUT_MS = 90_000


def chromium_path() -> str:
    """Debian's chromium; a clear failure (not a skip) when it is missing: CI installs it."""
    for candidate in (
        os.environ.get("GPUSCOPE_CHROMIUM"),
        shutil.which("chromium"),
        "/usr/bin/chromium",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail(
        "Debian's chromium is not installed: run `make browser` "
        "(apt-get install chromium) or set GPUSCOPE_CHROMIUM",
        pytrace=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


@dataclass
class Server:
    url: str
    db: Path
    samples: Path
    log: Path
    proc: subprocess.Popen[bytes]


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
    port = free_port()
    log = workdir / "server.log"
    env = {**os.environ, "GPUSCOPE_SAMPLES": str(samples), **(extra_env or {})}
    cmd = [
        sys.executable,
        "-m",
        "gpuscope",
        "ui",
        "--db",
        str(db),
        "--port",
        str(port),
        "--headless",
    ]
    if load_samples:
        cmd.append("--load-samples")
    proc = subprocess.Popen(
        cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, cwd=workdir
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return Server(url, db, samples, log, proc)
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    pytest.fail(
        f"the dashboard did not come up on {url}:\n{log.read_text()[-3000:]}", pytrace=False
    )


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


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


def wait_idle(page, timeout_ms: int = PAGE_TIMEOUT_MS) -> None:  # type: ignore[no-untyped-def]
    """Until the app has rendered and its script run has finished (no "Running…" status)."""
    page.locator('[data-testid="stApp"]').wait_for(timeout=timeout_ms)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stMain\"]') !== null && "
        '!document.querySelector(\'[data-testid="stStatusWidget"] [data-testid="stStatusWidgetRunningIcon"]\')'
        " && document.querySelectorAll('[data-stale=\"true\"]').length === 0",
        timeout=timeout_ms,
    )
