"""AppTest: the Live page against a stand-in sampler (and none at all)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import open_app, texts

LIVE = "screens/live.py"
T0 = 1_763_700_000_000_000_000


def _body(since: int) -> bytes:
    samples = [
        {
            "t_ns": T0 + i * 100_000_000,
            "gpus": [
                {
                    "gpu": g,
                    "gpu_util_pct": 90 - 40 * g,
                    "sm_active_pct": 70.5 if g == 0 else None,
                    "tensor_active_pct": 40.0 if g == 0 else None,
                    "mem_used_bytes": 40 << 30,
                    "power_w": 500.0 - 300 * g,
                }
                for g in (0, 1)
            ],
        }
        for i in range(50)
    ]
    return json.dumps(
        {
            "host": "node-7",
            "gpus": [{"index": 0}, {"index": 1}],
            "interval_ms": 100,
            "samples": [s for s in samples if s["t_ns"] > since],
            "now_ns": T0 + 5 * 10**9,
        }
    ).encode()


@pytest.fixture
def sampler() -> Iterator[str]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            since = (
                int(self.path.split("since_ns=")[1].split("&")[0])
                if "since_ns=" in self.path
                else 0
            )
            body = _body(since)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(autouse=True)
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "store.duckdb"
    monkeypatch.setenv("GPUSCOPE_DB", str(path))
    return path


def test_live_page_reads_the_sampler(sampler: str) -> None:
    at = open_app(LIVE, {"sampler": sampler})
    assert not at.exception, at.exception
    values = {m.label: m.value for m in at.metric}
    assert values["GPU 0 util"] == "90 %" and values["GPU 1 util"] == "50 %"
    assert "SM active" in values
    assert any("node-7" in c for c in texts(at, "caption"))
    assert len(at.get("plotly_chart")) == 2  # utilization, and SM activity (reported by GPU 0)


def test_live_page_without_a_sampler() -> None:
    at = open_app(LIVE, {"sampler": "http://127.0.0.1:9"})
    assert not at.exception
    (w,) = texts(at, "warning")
    assert "cannot connect" in w and "gpuscope sample" in w


def test_fold_keeps_a_bounded_window() -> None:
    from gpuscope.web import live

    b1 = live.parse(json.loads(_body(0))).rows
    assert len(b1) == 100 and set(b1["gpu"]) == {0, 1}
    folded = live.fold(None, b1, keep_ns=1_000_000_000)
    assert folded["t_ns"].min() >= folded["t_ns"].max() - 1_000_000_000
    assert live.normalise_url("localhost:9401/") == "http://localhost:9401"
