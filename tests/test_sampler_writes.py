"""Issue 47, the sampler's HTTP API: a write (a step report, a trace request) needs the sampler's
token or its own origin (Origin and Host checked); the sampler binds beyond loopback only with
--allow-remote, and says so; the Live page shows reported trace paths as inert text. Against a real
server (``start_server``), the real `gpuscope sample --replay` CLI and the real Live page (AppTest)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from gpuscope.sampler import token as tokens
from gpuscope.sampler.server import SamplerApp, start_server
from test_sampler import Served

REPO = Path(__file__).resolve().parent.parent
RECORDING = REPO / "sample_traces" / "nvml" / "h200_live.nvml.jsonl"
# the probe's: a backtick closes the code span the old page put the path in
HOSTILE_PATH = (
    "x.json` ![pixel](http://127.0.0.1:9/pixel.png) [Sign in again](http://127.0.0.1:9/login) "
    "<img src=http://127.0.0.1:9/raw.png> `"
)


@pytest.fixture(autouse=True)
def token_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "tokens"
    monkeypatch.setenv(tokens.ENV_TOKEN_DIR, str(d))
    monkeypatch.delenv(tokens.ENV_TOKEN, raising=False)
    return d


@pytest.fixture
def served():
    s = Served(speed=50.0, loop=False)
    s.thread.join(timeout=20)
    yield s
    s.close()


def _post(
    port: int, path: str, body: bytes = b"{}", headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(
            "POST", path, body=body, headers={"Content-Type": "text/plain", **(headers or {})}
        )
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        c.close()


def _state(s: Served) -> tuple[int, int, int]:
    log = s.app.steps
    return log.seq, len(log.traces), log.requests


def test_a_page_on_another_loopback_origin_can_neither_arm_a_trace_nor_forge_steps(served):
    """The probe: a page on http://127.0.0.1:8000 POSTs (a 'simple' request, no preflight)."""
    port = served.server.port
    own = f"127.0.0.1:{port}"
    before = _state(served)
    forged = json.dumps(
        {"steps": [[1, 9999.0]], "traces": [{"step": 1, "path": HOSTILE_PATH}]}
    ).encode()
    for origin in ("http://127.0.0.1:8000", "http://localhost:8501", "null", f"https://{own}"):
        hdr = {"Host": own, "Origin": origin}
        assert _post(port, "/api/trace-request", headers=hdr)[0] == 403
        code, ans = _post(port, "/api/steps", forged, headers=hdr)
        assert code == 403 and "another origin" in ans["error"]
    # another origin with the right token: still refused (a browser page never writes)
    hdr = {"Host": own, "Origin": "http://127.0.0.1:8000", tokens.HEADER: served.app.token}
    assert _post(port, "/api/trace-request", headers=hdr)[0] == 403
    # no Origin and no token (curl, a script): refused
    code, ans = _post(port, "/api/trace-request")
    assert code == 403 and tokens.HEADER in ans["error"]
    assert _post(port, "/api/steps", forged, headers={tokens.HEADER: "wrong"})[0] == 403
    assert _state(served) == before  # nothing taken


def test_dns_rebinding_is_refused_by_the_host_check(served):
    """A name rebound to 127.0.0.1: its page's Origin matches its Host, which is not the sampler's."""
    port = served.server.port
    evil = f"evil.example:{port}"
    before = _state(served)
    code, ans = _post(
        port, "/api/trace-request", headers={"Host": evil, "Origin": f"http://{evil}"}
    )
    assert code == 403 and "Host" in ans["error"]
    # even with the token: a loopback sampler answers writes only for its own names
    hdr = {"Host": evil, tokens.HEADER: served.app.token}
    assert _post(port, "/api/trace-request", headers=hdr)[0] == 403
    # two Host headers (one ours): refused
    raw = (
        f"POST /api/trace-request HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: {evil}\r\n"
        f"{tokens.HEADER}: {served.app.token}\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        assert sock.recv(100).startswith(b"HTTP/1.1 403")
    assert _state(served) == before


def test_writes_with_the_token_or_from_the_samplers_own_origin_work(served, token_dir):
    port = served.server.port
    # the published token: a file of this user's, 0600, in a folder of this user's, 0700
    path = tokens.token_path(port)
    assert path.parent == token_dir and path.read_text() == served.app.token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_dir.stat().st_mode) == 0o700
    assert path.stat().st_uid == os.getuid()
    url = f"http://127.0.0.1:{port}"
    assert tokens.auth_headers(url) == {tokens.HEADER: served.app.token}
    assert tokens.auth_headers(f"http://localhost:{port}/") == {tokens.HEADER: served.app.token}
    assert tokens.auth_headers(f"http://10.0.0.5:{port}") == {}  # never sent to another machine
    body = json.dumps({"steps": [[0, 5.0]]}).encode()
    assert _post(port, "/api/steps", body, headers=tokens.auth_headers(url))[0] == 200
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        hdr = {"Host": host, "Origin": f"http://{host}"}  # the sampler's own origin
        assert _post(port, "/api/trace-request", headers=hdr)[0] == 200
    assert _state(served) == (1, 0, 1)
    # gpuscope's own clients: the capture helper's reporter and the Live page's button
    from gpuscope.capture import StepReporter
    from gpuscope.web.live_steps import request_trace

    r = StepReporter(url, every_s=3600.0)
    try:
        r.add(1, 6.0)
        r.flush()
        assert r.error is None and r.requested
    finally:
        r.close()
    request_trace(url)
    assert served.app.steps.seq == 2 and served.app.steps.requests == 1
    # a token file that others can read is not trusted
    path.chmod(0o644)
    assert tokens.token_for(url) is None
    path.chmod(0o600)
    served.server.server_close()  # withdrawn when the server closes
    assert not path.exists()


def test_binding_beyond_loopback_needs_allow_remote(tmp_path):
    s = Served(speed=50.0, loop=False)
    s.close()
    app = SamplerApp(s.store, s.thread, mode="replay")
    for host in ("0.0.0.0", "", "::"):
        with pytest.raises(ValueError, match="--allow-remote"):
            start_server(app, host, 0)
    server = start_server(app, "0.0.0.0", 0, allow_remote=True)
    try:
        port = server.port
        assert server.own_hosts() is None
        host = f"10.1.2.3:{port}"  # any name reaches it: the token decides
        assert _post(port, "/api/trace-request", headers={"Host": host})[0] == 403
        hdr = {"Host": host, "Origin": f"http://{host}"}  # no own-origin pass beyond loopback
        assert _post(port, "/api/trace-request", headers=hdr)[0] == 403
        hdr = {"Host": host, tokens.HEADER: app.token}
        assert _post(port, "/api/trace-request", headers=hdr)[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def _sample_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", "sample", "--replay", str(RECORDING), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.mark.slow
def test_sample_cli_refuses_a_remote_host_without_the_flag_and_warns_with_it(token_dir):
    env = {tokens.ENV_TOKEN_DIR: str(token_dir)}
    for host in ("0.0.0.0", "::", "gpu-box.example.com"):
        done = _sample_cli("--host", host, "--port", "0", "--duration", "1", env=env)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith("gpuscope: --host ") and "--allow-remote" in line
    done = _sample_cli(
        "--host", "0.0.0.0", "--allow-remote", "--port", "0", "--duration", "1", env=env
    )
    assert done.returncode == 0, done.stderr
    assert "warning: listening on 0.0.0.0, beyond this machine" in done.stderr
    assert f"need the token in {token_dir}" in done.stderr
    done = _sample_cli("--port", "0", "--duration", "1", env=env)  # loopback: no warning
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    assert "need the token in " in done.stderr
    assert list(token_dir.iterdir()) == []  # withdrawn at the stop
    # a token folder others can write: one line, exit 2
    token_dir.chmod(0o777)
    done = _sample_cli("--port", "0", "--duration", "1", env=env)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "writable by no one else" in done.stderr


@pytest.mark.slow
def test_live_page_shows_trace_paths_as_inert_text(served, tmp_path, monkeypatch):
    """The probe: a trace path reported as Markdown showed a remote image and a 'Sign in again'
    link on the Live page."""
    sys.path.insert(0, str(REPO / "tests" / "e2e"))
    from apptools import app_store, open_app, texts

    app_store(tmp_path, monkeypatch)
    port = served.server.port
    url = f"http://127.0.0.1:{port}"
    report = {
        "steps": [[i, 10.0] for i in range(20)],
        "traces": [{"step": 7, "path": HOSTILE_PATH}],
    }
    assert (
        _post(port, "/api/steps", json.dumps(report).encode(), tokens.auth_headers(url))[0] == 200
    )
    at = open_app("screens/live.py", {"sampler": url})
    assert not at.exception, at.exception
    assert any(m.label == "Steps reported" for m in at.metric)
    shown = texts(at, "text")
    assert f"step 7: {HOSTILE_PATH}" in shown  # verbatim, preformatted
    for kind in ("markdown", "caption", "info", "warning", "error"):
        assert not any("Sign in again" in t or "pixel.png" in t for t in texts(at, kind)), kind


def test_the_step_reporter_without_the_token_says_what_is_missing(served, token_dir, monkeypatch):
    """A sampler elsewhere (no token file here, no $GPUSCOPE_SAMPLER_TOKEN): the reporter is refused,
    keeps its steps, and warns once naming the token."""
    from gpuscope.capture import StepReporter

    tokens.token_path(served.server.port).unlink()
    r = StepReporter(f"http://127.0.0.1:{served.server.port}", every_s=3600.0)
    try:
        r.add(0, 5.0)
        with pytest.warns(RuntimeWarning, match=r"403.*GPUSCOPE_SAMPLER_TOKEN"):
            r.flush()
        assert r.pending == [[0, 5.0]] and served.app.steps.seq == 0
        monkeypatch.setenv(tokens.ENV_TOKEN, served.app.token)  # set on both sides: sent
        r.flush()
        assert r.error is None and served.app.steps.seq == 1
    finally:
        r.close()
