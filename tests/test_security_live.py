"""Item 1 of the hostile-input issue: the Live page fetches only http(s) samplers, bounded.

Local HTTP servers that stream forever, drip bytes, redirect to ``file://`` or answer junk; URLs
of other schemes and of hosts the deployer did not allow. Every case must end in a one-line
SamplerError within seconds, with a bounded read, and never touch the local file system.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from gpuscope.web import live

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import open_app, texts

Handler = Callable[[BaseHTTPRequestHandler], None]


@pytest.fixture(autouse=True)
def _no_allow_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(live.ENV_ALLOW_HOSTS, raising=False)
    monkeypatch.delenv(live.ENV_SAMPLER, raising=False)
    monkeypatch.delenv(live.ENV_MAX_BYTES, raising=False)
    monkeypatch.setenv("GPUSCOPE_DB", str(tmp_path / "store.duckdb"))


def _serve(handle: Handler) -> Iterator[str]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                handle(self)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def endless() -> Iterator[str]:
    """Answers 200 with no length and zeros forever (the /dev/zero of HTTP)."""

    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        block = b"0" * (1 << 16)
        while True:
            h.wfile.write(block)

    yield from _serve(handle)


@pytest.fixture
def drip() -> Iterator[str]:
    """Answers 200 and then one byte every 0.2 s, never finishing (each read succeeds)."""

    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.end_headers()
        for _ in range(600):
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.2)

    yield from _serve(handle)


@pytest.fixture
def redirect() -> Iterator[str]:
    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(302)
        h.send_header("Location", "file:///etc/passwd")
        h.send_header("Content-Length", "0")
        h.end_headers()

    yield from _serve(handle)


@pytest.mark.parametrize(
    "url",
    [
        "file:///dev/zero#",
        "file:///etc/passwd",
        "FILE:///etc/hostname",
        "ftp://127.0.0.1/x",
        "gopher://127.0.0.1:70/",
        "data:application/json,{}",
        "jar:file:///x!/",
    ],
)
def test_other_schemes_are_refused_without_reading(url: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(live.SamplerError, match="refused") as e:
        live.fetch(url, 0)
    assert time.monotonic() - t0 < 0.5
    assert "\n" not in str(e.value) and "passwd" not in str(e.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:9401",
        "http://169.254.169.254",  # cloud metadata
        "https://example.com",
        "http://127.0.0.1.example.com",
        "http://user:pw@127.0.0.1:9401",
        "http://127.0.0.1:9401/?x=1",
        "http://127.0.0.1:9401/#frag",
        "http://127.0.0.1:9401/![b](http:",
        "http://127.0.0.1:notaport",
    ],
)
def test_hosts_and_urls_outside_the_policy_are_refused(url: str) -> None:
    with pytest.raises(live.SamplerError, match="refused") as e:
        live.check_url(url)
    assert "\n" not in str(e.value) and "![" not in str(e.value) and "pw" not in str(e.value)


@pytest.mark.parametrize(
    "url", ["127.0.0.1:9401", "http://localhost:9401", "http://[::1]:9401", "https://127.0.0.2"]
)
def test_loopback_samplers_are_allowed(url: str) -> None:
    assert live.check_url(url).startswith(("http://", "https://"))


def test_the_deployer_allows_more_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(live.SamplerError):
        live.check_url("http://gpu-node-7:9401")
    monkeypatch.setenv(live.ENV_ALLOW_HOSTS, "gpu-node-7, other")
    assert live.check_url("http://GPU-node-7:9401") == "http://gpu-node-7:9401"
    with pytest.raises(live.SamplerError):
        live.check_url("http://gpu-node-8:9401")
    monkeypatch.setenv(live.ENV_ALLOW_HOSTS, "")
    monkeypatch.setenv(live.ENV_SAMPLER, "http://gpu-node-8:9401")  # the default is allowed
    assert live.check_url("http://gpu-node-8:9401")


def test_an_endless_answer_stops_at_the_byte_cap(endless: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(live.SamplerError, match="cap"):
        live.fetch(endless, 0, max_bytes=4 << 20)
    assert time.monotonic() - t0 < 5


def test_the_default_byte_cap_applies(endless: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(live.ENV_MAX_BYTES, str(1 << 20))
    with pytest.raises(live.SamplerError, match="1,048,576-byte cap"):
        live.fetch(endless, 0)


@pytest.mark.slow
def test_a_dripping_answer_stops_at_the_deadline(drip: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(live.SamplerError, match="not complete in time"):
        live.fetch(drip, 0, timeout=1.0, total_timeout=1.5)
    assert time.monotonic() - t0 < 4


def test_a_redirect_is_not_followed(redirect: str) -> None:
    with pytest.raises(live.SamplerError, match="HTTP 302") as e:
        live.fetch(redirect, 0)
    assert "root:" not in str(e.value)


def test_junk_json_is_one_line() -> None:
    def handle(h: BaseHTTPRequestHandler) -> None:
        body = b'{"samples": 5}' if "since_ns=0" in h.path else b"[1, 2]"
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    for url in _serve(handle):
        for since in (0, 1):
            with pytest.raises(live.SamplerError, match="did not return sampler JSON"):
                live.fetch(url, since)


def test_live_page_refuses_a_file_url_from_the_address_bar() -> None:
    at = open_app("screens/live.py", {"sampler": "file:///dev/zero#"})
    assert not at.exception, at.exception
    assert any("refused" in e for e in texts(at, "error"))
    assert any("only http:// and https://" in c for c in texts(at, "code"))
    assert not texts(at, "warning")  # nothing was polled
