"""Starting and stopping the real servers the browser tests and the UI benchmark drive (`gpuscope
ui`, a bare `streamlit run`, `gpuscope sample`, an OIDC provider), without pytest: the benchmark
imports this too. A server that does not come up raises :class:`NotUp` (e2e_support turns it into
a test failure, benchmarks/bench_ui.py into an exit)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STARTUP_S = 120  # how long a server may take to come up, s


class NotUp(RuntimeError):
    """A server did not come up: ``str()`` names it, its URL and the end of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_up(
    url: str,
    proc: subprocess.Popen[bytes],
    what: str,
    *,
    log: Path | None = None,
    timeout_s: float = STARTUP_S,
    body: bytes | None = None,
) -> None:
    """Poll ``url`` until it answers 200 (with ``body``, stripped, when given). When ``proc`` exits
    or ``timeout_s`` seconds pass first, kill it and raise NotUp (with the end of ``log``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200 and (body is None or r.read().strip() == body):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    tail = f":\n{log.read_text(errors='replace')[-3000:]}" if log and log.exists() else ""
    raise NotUp(f"{what} did not come up on {url}{tail}")


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s`` seconds; returns once it has exited."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_ui(
    workdir: Path,
    args: list[str],
    env: dict[str, str],
    *,
    port: int | None = None,
    log: Path | None = None,
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """``python -m gpuscope ui --port PORT --headless ARGS`` in ``workdir`` (a free port unless
    given), its output in ``log`` (default ``workdir/server.log``); returns (process, URL, log) once
    /_stcore/health says ok. Raises NotUp otherwise."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = log or workdir / "server.log"
    cmd = [sys.executable, "-m", "gpuscope", "ui", "--port", str(port), "--headless", *args]
    proc = subprocess.Popen(
        cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, cwd=workdir
    )
    url = f"http://127.0.0.1:{port}"
    wait_until_up(f"{url}/_stcore/health", proc, "the dashboard", log=log, body=b"ok")
    return proc, url, log
