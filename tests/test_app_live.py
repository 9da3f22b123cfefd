"""AppTest: the Live page against a stand-in sampler (and none at all)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import REPO, app_store, open_app, texts
from e2e_support import free_port

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
    return app_store(tmp_path, monkeypatch)


@pytest.mark.slow
def test_live_page_reads_the_sampler(sampler: str) -> None:
    at = open_app(LIVE, {"sampler": sampler})
    assert not at.exception, at.exception
    values = {m.label: m.value for m in at.metric}
    assert values["GPU 0 util"] == "90 %" and values["GPU 1 util"] == "50 %"
    assert "SM active" in values
    assert any("node-7" in c for c in texts(at, "caption"))
    # utilization per GPU, and SM activity (reported by GPU 0)
    assert len(at.get("plotly_chart")) == 3
    infos = texts(at, "info")
    assert any("GPU 0 is steadily busy" in i for i in infos)
    # 50 % utilization is half the time idle (issue 46: the sentence agrees with the chart),
    # inside every sample: partly busy, and only a trace can name why
    assert any(
        "GPU 1 is partly busy\\: 50% utilization on average, so idle 50%" in i for i in infos
    )
    assert "**What to do:** nothing, from utilization alone" in infos[0]
    assert "**What to do:** record a trace" in infos[1]
    assert any("GPU Performance Monitoring" in c for c in texts(at, "caption"))  # GPM explained


@pytest.mark.slow
def test_detach_keeps_the_samples_and_stops_polling(sampler: str) -> None:
    at = open_app(LIVE, {"sampler": sampler})
    at.button(key="live_attach_button").click().run()
    assert not at.exception, at.exception
    assert at.session_state["live_attached"] is False
    assert at.button(key="live_attach_button").label == "Attach"
    assert any("Detached" in c for c in texts(at, "caption"))
    assert {m.label for m in at.metric} >= {"GPU 0 util", "GPU 1 util"}  # kept
    at.button(key="live_attach_button").click().run()
    assert at.session_state["live_attached"] is True


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


@pytest.fixture
def replay() -> Iterator[str]:
    """A REAL `gpuscope sample --replay` of the H200 recording (10x speed: ~4 s per pass)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscope",
            "sample",
            "--replay",
            str(REPO / "sample_traces" / "nvml" / "h200_live.nvml.jsonl"),
            "--speed",
            "10",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"replay sampler did not come up: {proc.stderr.read().decode()[-2000:]}")
    time.sleep(1.5)  # some samples in the buffer
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_live_page_against_a_replay_sampler_and_save(replay: str, db: Path) -> None:
    at = open_app(LIVE, {"sampler": replay})
    assert not at.exception, at.exception
    labels = {m.label for m in at.metric}
    assert {"GPU 0 util", "GPU 1 util"} <= labels
    assert any("vm" in c for c in texts(at, "caption"))  # the recording's host
    infos = texts(at, "info")
    assert any(i.startswith("GPU 0 is ") and "of the last" in i for i in infos), infos
    assert any(i.startswith("GPU 1 is ") for i in infos), infos

    at.button(key="live_attach_button").click().run()  # detached: the window stops growing
    held = at.session_state[f"live_buffer_{replay}"]["rows"]
    at.button(key="live_save").click().run()
    assert not at.exception, at.exception
    (ok,) = texts(at, "success")
    assert "saved as run" in ok and f"{held['t_ns'].nunique():,} samples" in ok
    from gpuscope.web import db as webdb

    runs = webdb.query_df("SELECT run_id, kind, name FROM runs")
    assert len(runs) == 1 and runs["kind"][0] == "nvml" and runs["name"][0].startswith("live vm")
    run_id = runs["run_id"][0]
    assert f"`{run_id}`" in ok
    assert len(held) >= 2 * 10  # two GPUs, at least a second of samples at 10x
    stored = webdb.query_df("SELECT * FROM nvml_samples ORDER BY t_ns, gpu")
    _same_samples(stored, held)  # what was saved is what the page held


def _same_samples(stored: pd.DataFrame, held: pd.DataFrame) -> None:
    """The stored run's samples are the window's: the same polls and GPUs, every reading equal
    (N/A stored as NULL)."""
    from gpuscope.analysis.event_classes import NVML_METRIC_FIELDS

    held = held.sort_values(["t_ns", "gpu"]).reset_index(drop=True)
    stored = stored.reset_index(drop=True)
    assert list(stored["t_ns"]) == list(held["t_ns"]) and list(stored["gpu"]) == list(held["gpu"])
    for f in NVML_METRIC_FIELDS:
        want = [None if pd.isna(v) else float(v) for v in held[f]]
        got = [None if pd.isna(v) else float(v) for v in stored[f]]
        assert got == want, f


def test_a_saved_window_is_stored_as_its_samples(con) -> None:
    """The window travels as typed records (one per poll, GPUs by index) into a real store; saving
    it again is a duplicate; a bad window leaves the store unchanged with one line of error."""
    from gpuscope.analysis.event_classes import NVML_METRIC_FIELDS
    from gpuscope.ingest.errors import IngestError
    from gpuscope.ingest.nvml import series_for_run
    from gpuscope.web import live

    assert live.GpuReading.__struct_fields__ == ("gpu", *NVML_METRIC_FIELDS)
    batch = live.parse(json.loads(_body(0)))
    window = live.window_of(batch.rows, host=batch.host, gpus=batch.gpus, interval_ms=100)
    assert len(window.samples) == 50 and [g.index for g in window.gpus] == [0, 1]
    first = window.samples[0].gpus[0]
    assert isinstance(first.mem_used_bytes, int) and first.temp_c is None  # N/A stays N/A
    res = live.store_window(con, window, name="live node-7")
    assert (res.kind, res.name, res.duplicate, res.n_events) == ("nvml", "live node-7", False, 100)
    _same_samples(series_for_run(con, res.run_id), batch.rows)
    assert live.store_window(con, window, name="again").duplicate

    bad = live.window_of(
        batch.rows.assign(t_ns=batch.rows["t_ns"] - T0 - 10**9), host="h", gpus=[], interval_ms=None
    )
    with pytest.raises(IngestError) as e:
        live.store_window(con, bad, name="bad")
    assert "not a Unix time" in str(e.value) and "\n" not in str(e.value)
    assert con.execute("SELECT count(*) FROM nvml_samples").fetchone()[0] == 100
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_diagnosis_says_what_to_do_and_links_the_fix() -> None:
    """Each shape of the live diagnosis comes with what to do; a sawtooth and irregular idle name
    the recommendation that fixes their usual cause, with its code."""
    from gpuscope.analysis.live import LiveDiagnosis
    from gpuscope.web.advice import GPM, what_to_do

    saw = LiveDiagnosis(30.0, 40.0, 1.0, 60.0, 5, "GPU 0 is idle 40% … sawtooth")
    todo = what_to_do(saw)
    assert todo.fix_id == "dataloader_workers" and "num_workers" in todo.code
    irregular = LiveDiagnosis(30.0, 40.0, None, None, 1, "irregular")
    assert what_to_do(irregular).fix_id == "host_sync"
    steady = LiveDiagnosis(30.0, 2.0, None, None, 0, "steady")
    assert what_to_do(steady).fix_id is None and "larger batch" in what_to_do(steady).advice
    assert "GPU Performance Monitoring" in GPM
