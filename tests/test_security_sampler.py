"""Item 5 of the hostile-input issue: the sampler's HTTP server under idle and rude clients.

Many idle keep-alive clients must not grow a thread each without bound; idle connections time
out; a connection over the cap gets a 503 at once; a client resetting its connection is one line
on stderr, not a traceback; the server keeps answering throughout.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpuscope.sampler.loop import SamplerThread, SampleStore
from gpuscope.sampler.server import SamplerApp, start_server
from gpuscope.sampler.sources import ReplaySource

FIXTURE = (
    Path(__file__).resolve().parent.parent
    / "sample_traces"
    / "nvml"
    / "synthetic_h100x2_100ms.nvml.jsonl"
)
CAP = 16
IDLE_S = 1.0


def _serve(idle_s: float) -> Iterator[tuple[object, str]]:
    source = ReplaySource(FIXTURE, speed=50.0, loop=False)
    store = SampleStore(source.host, source.gpus, source.interval_ms)
    thread = SamplerThread(source, store=store)
    app = SamplerApp(store, thread, mode="replay")
    srv = start_server(app, "127.0.0.1", 0, max_connections=CAP, idle_timeout_s=idle_s)
    thread.start()
    thread.join(timeout=20)
    yield srv, f"http://127.0.0.1:{srv.port}"
    thread.stop()
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def server() -> Iterator[tuple[object, str]]:
    yield from _serve(IDLE_S)


@pytest.fixture
def slow_server() -> Iterator[tuple[object, str]]:
    yield from _serve(4.0)


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as r:
        r.read()
        return r.status


def _keepalive_client(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\n")
    return s


@pytest.mark.slow
def test_many_idle_keepalive_clients_keep_threads_bounded(slow_server) -> None:
    srv, url = slow_server
    before = threading.active_count()
    n = 10 * CAP  # 160 idle keep-alive clients, 16 slots
    clients = [_keepalive_client(srv.port) for _ in range(n)]
    deadline = time.monotonic() + 3
    while srv.refused < n - CAP and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.refused == n - CAP
    assert threading.active_count() - before <= CAP, "a thread per idle client"
    answers = [c.recv(200) for c in clients]
    assert sum(b"too many connections" in a for a in answers) == n - CAP
    assert sum(a.startswith(b"HTTP/1.1 200") for a in answers) == CAP
    # the idle ones are closed after the idle timeout, their threads end; it serves again
    for c in clients:
        c.settimeout(8)
        while c.recv(1 << 16):  # the rest of the answer, then the server's close
            pass
        c.close()
    time.sleep(0.2)
    assert threading.active_count() - before <= 1
    assert _get(url + "/api/status") == 200


@pytest.mark.slow
def test_a_silent_connection_times_out(server) -> None:
    srv, _ = server
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)  # sends nothing at all
    t0 = time.monotonic()
    assert s.recv(100) == b""  # closed by the server
    assert time.monotonic() - t0 < IDLE_S + 2
    s.close()


def test_a_reset_is_one_line_on_stderr(server, capfd: pytest.CaptureFixture[str]) -> None:
    srv, url = server
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"GET /api/samples?since_ns=0 HTTP/1.1\r\nHost: x\r\n")  # unfinished request
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(0.05)
        s.close()  # linger 0: an RST, not a FIN
    deadline = time.monotonic() + 5
    while srv.resets < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _get(url + "/api/status") == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if "reset by the client" in ln]
    assert len(lines) == srv.resets == 3, err
    assert all(ln.startswith("gpuscope sample: connection from 127.0.0.1:") for ln in lines)


def test_a_bad_limit_in_the_environment_is_one_line(tmp_path: Path) -> None:
    """Every limit read from the environment goes through one reader (ingest/env.py): a bad value
    names the variable and the value; `gpuscope sample` prints it as one line and exits 2."""
    import os
    import subprocess
    import sys

    from gpuscope.ingest.env import positive_int, positive_number

    replay = Path(__file__).resolve().parent.parent / "sample_traces" / "nvml"
    replay = replay / "synthetic_h100x2_100ms.nvml.jsonl"
    env = {**os.environ, "GPUSCOPE_SAMPLER_MAX_CONNECTIONS": "lots"}
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "sample", "--replay", str(replay), "--port", "0",
         "--duration", "1", "--out", str(tmp_path / "o.jsonl")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr
    assert "GPUSCOPE_SAMPLER_MAX_CONNECTIONS='lots' is not a number" in p.stderr
    os.environ["GPUSCOPE_TEST_LIMIT"] = "1.5"
    try:
        assert positive_number("GPUSCOPE_TEST_LIMIT", 9) == 1.5
        with pytest.raises(ValueError, match="whole number"):
            positive_int("GPUSCOPE_TEST_LIMIT", 9)
        os.environ["GPUSCOPE_TEST_LIMIT"] = "-3"
        with pytest.raises(ValueError, match="must be a positive number"):
            positive_number("GPUSCOPE_TEST_LIMIT", 9)
        os.environ["GPUSCOPE_TEST_LIMIT"] = ""
        assert positive_int("GPUSCOPE_TEST_LIMIT", 9) == 9
    finally:
        del os.environ["GPUSCOPE_TEST_LIMIT"]


def test_no_thread_for_a_connection_is_a_503_and_the_slot_comes_back(server, monkeypatch, capsys):
    """When the OS gives no thread for a connection, that client gets the busy answer, stderr one
    line, and its slot is released: once threads can start again every request is served."""
    srv, url = server
    refused = srv.refused

    def no_thread(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("can't start new thread")

    real = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(url + "/api/status")
    finally:
        monkeypatch.setattr(threading.Thread, "start", real)
    assert e.value.code == 503 and srv.refused == refused + 1
    err = capsys.readouterr().err
    assert "refused: can't start new thread" in err and "Traceback" not in err
    for _ in range(CAP + 2):  # more requests than slots: none was lost to the failure
        assert _get(url + "/api/status") == 200
