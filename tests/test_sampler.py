"""The GPU sampler: NVML access (N/A and no-GPU paths), the JSONL recorder, the HTTP server, replay,
and the `gpuscope sample` command as a real process."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from itertools import pairwise
from pathlib import Path

import pytest
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.nvml import METRIC_FIELDS, ingest_series, parse_jsonl, read_jsonl
from gpuscope.sampler.loop import SamplerThread, SampleStore
from gpuscope.sampler.nvml_api import NvmlSampler, NvmlUnavailable, nvml_status
from gpuscope.sampler.record import SeriesWriter, make_header
from gpuscope.sampler.server import SamplerApp, render_metrics, start_server
from gpuscope.sampler.sources import ReplaySource
from gpuscope.store import connect, transaction
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

FIXTURE = (
    Path(__file__).resolve().parent.parent
    / "sample_traces"
    / "nvml"
    / "synthetic_h100x2_100ms.nvml.jsonl"
)
NVML_REASON = nvml_status()  # None where NVML and a GPU work
needs_no_gpu = pytest.mark.skipif(
    NVML_REASON is None, reason="NVML and a GPU are present on this machine"
)
needs_gpu = pytest.mark.skipif(
    NVML_REASON is not None, reason=f"no usable NVML GPU here: {NVML_REASON}"
)
MIB = 1 << 20


def fixture_samples() -> list[dict]:
    return [json.loads(x) for x in FIXTURE.read_text().splitlines()[1:]]


# --- NVML access: no library / no GPU ----------------------------------------------------------------


@needs_no_gpu
def test_no_nvml_raises_one_line_error():
    with pytest.raises(NvmlUnavailable) as e:
        NvmlSampler()
    assert "NVML" in str(e.value) and "\n" not in str(e.value)


@needs_gpu
def test_real_gpu_poll():
    with NvmlSampler() as s:
        gpus = s.gpus
        assert gpus and all(g.name and g.uuid and g.mem_total_bytes for g in gpus)
        s.poll()
        time.sleep(0.15)
        rows = s.poll()
    assert [r["gpu"] for r in rows] == [g.index for g in gpus]
    for r in rows:
        assert set(r) == {"gpu", *METRIC_FIELDS}
        # v2 memory info: used excludes driver-reserved memory, so an idle GPU may read 0 (as nvidia-smi)
        assert 0 <= r["gpu_util_pct"] <= 100 and 0 <= r["mem_used_bytes"] <= r["mem_total_bytes"]
        assert r["power_w"] is None or 0 < r["power_w"] < 2000
        for f in ("sm_active_pct", "tensor_active_pct"):
            assert r[f] is None or 0 <= r[f] <= 100


# --- NVML access: a fake pynvml (the third-party module) with some fields unsupported --------------


class _Util:
    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu, self.memory = gpu, memory


class _Mem:
    def __init__(self, used: int, total: int) -> None:
        self.used, self.total = used, total


def fake_pynvml(*, count: int = 2, init_error: int | None = None) -> tuple[types.ModuleType, dict]:
    """pynvml with its real constants, errors and ctypes structs, and fake device functions: GPU 0
    supports everything (GPM too), GPU 1 (pre-Hopper) lacks power, utilization, PCIe and GPM."""
    import pynvml as real

    nv = types.ModuleType("pynvml")
    nv.__dict__.update({k: v for k, v in real.__dict__.items() if not k.startswith("__")})
    calls: dict = {}

    def count_call(name, idx):
        calls[(name, idx)] = calls.get((name, idx), 0) + 1

    def unsupported():
        return real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)

    def init():
        if init_error is not None:
            raise real.NVMLError(init_error)

    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: count
    nv.nvmlSystemGetDriverVersion = lambda: "999.1"
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: b"Fake H100" if h == 0 else "Fake V100"
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-fake-{h}"

    def util(h):
        count_call("util", h)
        if h == 1:
            raise unsupported()
        return _Util(77, 33)

    def memory(h, version=None):
        if version is not None:
            raise real.NVMLError(
                real.NVML_ERROR_FUNCTION_NOT_FOUND
            )  # an old driver: falls back to v1
        return _Mem(3 * MIB, 80 * MIB)

    def power(h):
        count_call("power", h)
        if h == 1:
            raise unsupported()
        return 312_345  # mW

    def pcie(h, counter):
        count_call("pcie", h)
        if h == 1:
            raise real.NVMLError(real.NVML_ERROR_NO_PERMISSION)
        return 1000  # KB/s

    def gpm_support(h):
        return types.SimpleNamespace(isSupportedDevice=1 if h == 0 else 0)

    def gpm_get(mg):
        values = {
            real.NVML_GPM_METRIC_SM_UTIL: 87.5,
            real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 101.0,
            real.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3.0,
            real.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 0.5,
        }
        for i in range(mg.numMetrics):
            mg.metrics[i].value = values[mg.metrics[i].metricId]
            mg.metrics[i].nvmlReturn = real.NVML_SUCCESS
        count_call("gpm_get", 0)
        return mg

    nv.nvmlDeviceGetUtilizationRates = util
    nv.nvmlDeviceGetMemoryInfo = memory
    nv.nvmlDeviceGetPowerUsage = power
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1980 if c == real.NVML_CLOCK_SM else 2619
    nv.nvmlDeviceGetTemperature = lambda h, s: 41 + h
    nv.nvmlDeviceGetPcieThroughput = pcie
    nv.nvmlGpmQueryDeviceSupport = gpm_support
    nv.nvmlGpmSampleAlloc = lambda: real.c_nvmlGpmSample_t()  # an opaque (null) handle
    nv.nvmlGpmSampleFree = lambda s: None
    nv.nvmlGpmSampleGet = lambda h, s: s
    nv.nvmlGpmMetricsGet = gpm_get
    return nv, calls


def test_fake_nvml_fields_and_na(monkeypatch):
    nv, calls = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with NvmlSampler() as s:
        assert [g.as_dict() for g in s.gpus] == [
            {"index": 0, "name": "Fake H100", "uuid": "GPU-fake-0", "mem_total_bytes": 80 * MIB},
            {"index": 1, "name": "Fake V100", "uuid": "GPU-fake-1", "mem_total_bytes": 80 * MIB},
        ]
        assert s.driver_version == "999.1"
        for _ in range(5):
            g0, g1 = s.poll()
        reasons = s.unsupported()
    # GPU 0: every field; GPM percentages clamped to 100
    assert g0 == {
        "gpu": 0,
        "gpu_util_pct": 77,
        "mem_util_pct": 33,
        "mem_used_bytes": 3 * MIB,
        "mem_total_bytes": 80 * MIB,
        "power_w": 312.345,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temp_c": 41,
        "pcie_rx_bytes_s": 3.0 * MIB,
        "pcie_tx_bytes_s": 0.5 * MIB,
        "sm_active_pct": 87.5,
        "tensor_active_pct": 100.0,
    }
    assert g1 == {
        "gpu": 1,
        "gpu_util_pct": None,
        "mem_util_pct": None,
        "mem_used_bytes": 3 * MIB,
        "mem_total_bytes": 80 * MIB,
        "power_w": None,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temp_c": 42,
        "pcie_rx_bytes_s": None,
        "pcie_tx_bytes_s": None,
        "sm_active_pct": None,
        "tensor_active_pct": None,
    }
    # an unsupported field is asked once, not on every poll; GPM's PCIe rates spare GPU 0 the blocking call
    assert calls[("power", 1)] == 1 and calls[("util", 1)] == 1 and calls[("pcie", 1)] == 2
    assert calls[("power", 0)] == 5 and ("pcie", 0) not in calls and calls[("gpm_get", 0)] == 5
    assert reasons[0] == {}
    assert (
        reasons[1]["power_w"] == "Not Supported"
        and reasons[1]["pcie_rx_bytes_s"] == "Insufficient Permissions"
    )
    assert "Hopper" in reasons[1]["gpm"]


def test_fake_nvml_gpu_lost_is_retried(monkeypatch):
    nv, _ = fake_pynvml(count=1)
    lost = {"n": 2}

    def temp(h, s):
        if lost["n"]:
            lost["n"] -= 1
            raise nv.NVMLError(nv.NVML_ERROR_GPU_IS_LOST)
        return 50

    nv.nvmlDeviceGetTemperature = temp
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with NvmlSampler() as s:
        assert [s.poll()[0]["temp_c"] for _ in range(3)] == [None, None, 50]


def test_fake_nvml_gpm_failure_turns_gpm_off(monkeypatch):
    nv, _ = fake_pynvml(count=1)

    def broken(mg):
        raise nv.NVMLError(nv.NVML_ERROR_UNKNOWN)

    nv.nvmlGpmMetricsGet = broken
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with NvmlSampler() as s:
        rows = [s.poll()[0] for _ in range(3)]
        assert "GPM read failed" in s.unsupported()[0]["gpm"]
    assert all(r["sm_active_pct"] is None for r in rows)
    # falls back to NVML's KB/s counter, in bytes/s
    assert rows[-1]["pcie_rx_bytes_s"] == 1000 * 1024


def test_fake_nvml_skip_pcie(monkeypatch):
    nv, calls = fake_pynvml(count=1)
    nv.nvmlGpmQueryDeviceSupport = lambda h: types.SimpleNamespace(isSupportedDevice=0)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with NvmlSampler(skip_pcie=True) as s:
        row = s.poll()[0]
    assert row["pcie_rx_bytes_s"] is None and ("pcie", 0) not in calls


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"init_error": 12}, "NVML is unavailable: NVML Shared Library Not Found"),
        ({"init_error": 9}, "NVML is unavailable: Driver Not Loaded"),
        ({"count": 0}, "NVML found no GPU"),
    ],
)
def test_fake_nvml_unavailable(monkeypatch, kw, message):
    nv, _ = fake_pynvml(**kw)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with pytest.raises(NvmlUnavailable, match=message):
        NvmlSampler()
    assert nvml_status() == message


def test_fake_nvml_bad_index(monkeypatch):
    nv, _ = fake_pynvml(count=2)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with pytest.raises(NvmlUnavailable, match="no GPU with index 5"):
        NvmlSampler([5])
    with NvmlSampler([1]) as s:
        assert [r["gpu"] for r in s.poll()] == [1]


def test_fake_nvml_broken_gpu_is_left_out(monkeypatch):
    nv, _ = fake_pynvml(count=3)
    real_handle = nv.nvmlDeviceGetHandleByIndex

    def handle(i):
        if i == 1:
            raise nv.NVMLError(nv.NVML_ERROR_NO_PERMISSION)
        return real_handle(i)

    nv.nvmlDeviceGetHandleByIndex = handle
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with NvmlSampler([2, 0, 1, 2]) as s:  # duplicates dropped, order kept
        assert [g.index for g in s.gpus] == [2, 0]
        assert [r["gpu"] for r in s.poll()] == [2, 0]
        assert s.unsupported()[1] == {"gpu": "Insufficient Permissions"}
    with pytest.raises(NvmlUnavailable, match="no GPU could be opened"):
        NvmlSampler([1])


# --- recorder: writer + reader, cut files -------------------------------------------------------------

value = st.one_of(
    st.none(), st.integers(0, 2**53), st.floats(0, 1e12, allow_nan=False, allow_infinity=False)
)
gpu_row = st.fixed_dictionaries({"gpu": st.integers(0, 3)} | {f: value for f in METRIC_FIELDS})


def header(gpus=(0, 1, 2, 3)) -> dict:
    return make_header(
        "host-a",
        100.0,
        [{"index": i, "name": f"G{i}", "uuid": f"U{i}", "mem_total_bytes": 1} for i in gpus],
        1_000,
    )


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.lists(gpu_row, min_size=1, max_size=3), min_size=1, max_size=8),
    cut=st.integers(0, 10**6),
)
def test_writer_reader_roundtrip_and_any_cut(tmp_path_factory, rows, cut):
    path = tmp_path_factory.mktemp("w") / "s.jsonl"
    t = [1_700_000_000_000_000_000 + i * 100_000_000 for i in range(len(rows))]
    with SeriesWriter(path, header()) as w:
        for ti, r in zip(t, rows, strict=True):
            w.write_sample(ti, r)
    data = path.read_bytes()
    s = parse_jsonl(path, data)
    assert [x["t_ns"] for x in s.samples] == t and [x["gpus"] for x in s.samples] == rows
    assert not s.truncated and s.header["host"] == "host-a"
    # a file cut anywhere (a crash, a full disk) reads as the complete lines before the cut
    cut %= len(data) + 1
    head_len = data.index(b"\n") + 1
    if cut < head_len - 1:
        with pytest.raises(IngestError):
            parse_jsonl(path, data[:cut])
        return
    part = parse_jsonl(path, data[:cut])
    complete = data[:cut].count(b"\n") - 1
    n = len(part.samples)
    assert n in (complete, complete + 1)  # + 1: cut exactly before a line's newline
    assert part.samples == s.samples[:n]
    assert part.truncated == (n == complete and not data[:cut].endswith(b"\n") and cut > head_len)


def test_writer_refuses_existing_without_overwrite(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("keep me")
    with pytest.raises(FileExistsError):
        SeriesWriter(p, header(), overwrite=False)
    assert p.read_text() == "keep me"


def test_writer_lines_hit_the_disk_at_once(tmp_path):
    """Each line is on disk as soon as write_sample returns (no user-space buffer to lose)."""
    p = tmp_path / "x.jsonl"
    w = SeriesWriter(p, header())
    w.write_sample(5, [{"gpu": 0, "temp_c": 30}])
    other_reader = read_jsonl(p)  # another open of the file, while the writer is still open
    [sample] = other_reader.samples
    assert sample["t_ns"] == 5 and sample["gpus"][0]["temp_c"] == 30
    assert sample["gpus"][0] == {"gpu": 0, "temp_c": 30} | {
        f: None for f in METRIC_FIELDS if f != "temp_c"
    }
    w.close()


# --- replay + HTTP server, in process ------------------------------------------------------------------


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


class Served:
    def __init__(self, path: Path = FIXTURE, *, speed: float = 1.0, loop: bool = True) -> None:
        self.source = ReplaySource(path, speed=speed, loop=loop)
        self.store = SampleStore(self.source.host, self.source.gpus, self.source.interval_ms)
        self.thread = SamplerThread(self.source, store=self.store)
        self.app = SamplerApp(self.store, self.thread, mode="replay")
        self.server = start_server(self.app, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.port}"
        self.thread.start()

    def wait_samples(self, n: int, timeout: float = 20) -> None:
        end = time.monotonic() + timeout
        while self.store.total < n:
            assert time.monotonic() < end, f"only {self.store.total} samples"
            time.sleep(0.01)

    def close(self) -> None:
        self.thread.stop()
        self.thread.join()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served_once():
    s = Served(speed=50.0, loop=False)  # the 40 samples in ~80 ms, then the source ends
    s.thread.join(timeout=20)
    yield s
    s.close()


def test_metrics_endpoint(served_once):
    status, ctype, body = get(served_once.url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    last = fixture_samples()[-1]["gpus"]
    hdr = json.loads(FIXTURE.read_text().splitlines()[0])
    expect = {
        "DCGM_FI_DEV_GPU_UTIL": lambda g: g["gpu_util_pct"],
        "DCGM_FI_DEV_MEM_COPY_UTIL": lambda g: g["mem_util_pct"],
        "DCGM_FI_DEV_FB_USED": lambda g: g["mem_used_bytes"] // MIB,
        "DCGM_FI_DEV_FB_FREE": lambda g: (g["mem_total_bytes"] - g["mem_used_bytes"]) // MIB,
        "DCGM_FI_DEV_POWER_USAGE": lambda g: g["power_w"],
        "DCGM_FI_DEV_SM_CLOCK": lambda g: g["sm_clock_mhz"],
        "DCGM_FI_DEV_MEM_CLOCK": lambda g: g["mem_clock_mhz"],
        "DCGM_FI_DEV_GPU_TEMP": lambda g: g["temp_c"],
        "DCGM_FI_PROF_SM_ACTIVE": lambda g: g["sm_active_pct"] and g["sm_active_pct"] / 100,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": lambda g: (
            g["tensor_active_pct"] and g["tensor_active_pct"] / 100
        ),
        "DCGM_FI_PROF_PCIE_RX_BYTES": lambda g: g["pcie_rx_bytes_s"],
        "DCGM_FI_PROF_PCIE_TX_BYTES": lambda g: g["pcie_tx_bytes_s"],
    }
    for name, fn in expect.items():
        fam = fams[name]
        assert fam.type == "gauge" and fam.documentation
        got = {s.labels["gpu"]: s.value for s in fam.samples}
        want = {
            str(g["gpu"]): fn(g)
            for g in last
            if g[METRIC_FIELDS[0]] is not None and fn(g) is not None
        }
        want = {k: v for k, v in want.items() if v is not None}
        assert got == pytest.approx(want), name
        for s in fam.samples:
            info = hdr["gpus"][int(s.labels["gpu"])]
            assert s.labels == {
                "gpu": s.labels["gpu"],
                "UUID": info["uuid"],
                "modelName": info["name"],
                "Hostname": "synthetic-node-01",
            }
    # GPU 1's N/A readings are left out, not exported as 0 or NaN
    assert [s.labels["gpu"] for s in fams["DCGM_FI_PROF_SM_ACTIVE"].samples] == ["0"]
    assert [s.labels["gpu"] for s in fams["DCGM_FI_PROF_PCIE_RX_BYTES"].samples] == ["0"]
    assert fams["gpuscope_sampler_samples"].samples[0].value == 40


def test_api_samples_since(served_once):
    status, ctype, body = get(served_once.url + "/api/samples?since_ns=0")
    assert status == 200 and ctype == "application/json"
    d = json.loads(body)
    assert d["host"] == "synthetic-node-01" and [g["index"] for g in d["gpus"]] == [0, 1]
    orig = fixture_samples()
    samples = d["samples"]
    assert len(samples) == 40
    # readings unchanged, ints kept
    assert [s["gpus"] for s in samples] == [o["gpus"] for o in orig]
    t = [s["t_ns"] for s in samples]
    # re-timestamped to now, the recorded intervals kept (÷ speed)
    assert d["now_ns"] - 30 * 10**9 < t[0] <= t[-1] <= d["now_ns"]
    for (a, b), (oa, ob) in zip(pairwise(t), pairwise(orig), strict=True):
        assert b - a == pytest.approx((ob["t_ns"] - oa["t_ns"]) / 50.0, abs=2)
    since = t[9]
    d2 = json.loads(get(served_once.url + f"/api/samples?since_ns={since}")[2])
    assert [s["t_ns"] for s in d2["samples"]] == t[10:]
    d3 = json.loads(get(served_once.url + "/api/samples?since_ns=0&limit=3")[2])
    assert [s["t_ns"] for s in d3["samples"]] == t[-3:]
    assert json.loads(get(served_once.url + f"/api/samples?since_ns={t[-1]}")[2])["samples"] == []


def test_api_errors_status_health(served_once):
    assert get(served_once.url + "/api/samples?since_ns=abc")[0] == 400
    assert get(served_once.url + "/api/samples?limit=-1")[0] == 400
    assert get(served_once.url + "/nope")[0] == 404
    st_code, _, body = get(served_once.url + "/api/status")
    s = json.loads(body)
    assert (
        st_code == 200
        and s["mode"] == "replay"
        and s["samples_total"] == 40
        and s["buffered"] == 40
    )
    assert s["running"] is False and s["ended"] == "the recording ended"
    assert s["cpu_s"] >= 0 and s["interval_ms"] == pytest.approx(100.0 / 50, rel=0.05)
    code, _, why = get(served_once.url + "/healthz")  # a finished replay is not healthy
    assert code == 503 and "stopped" in why
    assert get(served_once.url + "/")[0] == 200


def test_healthz_while_running():
    s = Served(speed=1.0)
    try:
        s.wait_samples(1)
        assert get(s.url + "/healthz")[:1] == (200,)
    finally:
        s.close()


def test_replay_loops_with_steady_timestamps():
    s = Served(speed=40.0)  # one pass ~100 ms
    try:
        s.wait_samples(100)
    finally:
        s.close()
    d = json.loads(b"[" + b",".join(s.store.since(0)) + b"]")
    t = [x["t_ns"] for x in d]
    assert len(t) >= 100 and all(b > a for a, b in pairwise(t))
    orig = fixture_samples()
    # the second pass, same readings
    assert [x["gpus"] for x in d[40:80]] == [o["gpus"] for o in orig]
    gap = t[40] - t[39]  # end of pass 1 -> start of pass 2: one median interval
    assert gap == pytest.approx(s.source.recorded_interval_ms * 1e6 / 40.0, rel=0.01)
    assert s.source.passes >= 2


def test_store_ring_buffer_is_bounded():
    store = SampleStore("h", [], interval_ms=1000.0, buffer_s=5)
    for i in range(1, 20):
        store.add(i, [], b'{"t_ns":%d}' % i)
    assert store.capacity == 6 and store.extent() == (14, 19, 6) and store.total == 19
    assert store.since(16) == [b'{"t_ns":17}', b'{"t_ns":18}', b'{"t_ns":19}']


def test_render_metrics_escapes_labels_and_omits_na():
    gpus = [{"index": 0, "name": 'Odd "GPU"\\x', "uuid": "U\n1"}]
    text = render_metrics('h"1', gpus, (10**18, [{"gpu": 0, "gpu_util_pct": 5, "power_w": None}]))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    [sample] = fams["DCGM_FI_DEV_GPU_UTIL"].samples
    assert sample.labels == {
        "gpu": "0",
        "UUID": "U\n1",
        "modelName": 'Odd "GPU"\\x',
        "Hostname": 'h"1',
    }
    assert "DCGM_FI_DEV_POWER_USAGE" not in fams
    # nothing sampled yet: only the sampler's own metrics
    assert render_metrics("h", [], None).count("DCGM") == 0


def test_replay_refuses_bad_files(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"format": "gpuscope-nvml", "version": 1, "gpus": [{"index": 0}]}\n')
    with pytest.raises(IngestError, match="no samples"):
        ReplaySource(p)
    with pytest.raises(IngestError):
        ReplaySource(tmp_path / "missing.jsonl")


# --- the `gpuscope sample` command, as a real process -------------------------------------------------


class Proc:
    """`python -m gpuscope sample ...` with its stderr read line by line on a thread."""

    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "gpuscope", "sample", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.err.append(line)
            self.lines.put(line)

    def wait_line(self, pattern: str, timeout: float = 30) -> re.Match:
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line matching {pattern!r}; stderr: {''.join(self.err)}"
                ) from None
            m = re.search(pattern, line)
            if m:
                return m

    def port(self) -> int:
        return int(self.wait_line(r"serving http://127\.0\.0\.1:(\d+)/metrics").group(1))

    def wait(self, timeout: float = 30) -> int:
        rc = self.p.wait(timeout=timeout)
        time.sleep(0.05)  # let the reader thread take the last lines
        return rc

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started.append
    for p in started:
        p.kill()


def wait_lines(path: Path, n: int, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not path.exists() or path.read_bytes().count(b"\n") < n:
        assert time.monotonic() < end, f"{path} did not reach {n} lines"
        time.sleep(0.02)


@pytest.mark.slow
def test_cli_replay_serves_and_stops_on_sigterm(tmp_path, procs):
    out = tmp_path / "rec.nvml.jsonl"
    p = Proc("--replay", str(FIXTURE), "--port", "0", "--speed", "4", "--out", str(out))
    procs(p)
    port = p.port()
    wait_lines(out, 6)
    status, _, body = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and "DCGM_FI_DEV_GPU_UTIL{" in body
    d = json.loads(get(f"http://127.0.0.1:{port}/api/samples?since_ns=0")[2])
    assert d["samples"] and d["host"] == "synthetic-node-01"
    p.p.send_signal(signal.SIGTERM)
    assert p.wait() == 0
    assert re.search(r"\d+ samples in .* CPU .*% of one core; written to", "".join(p.err))
    s = read_jsonl(out)
    assert not s.truncated and len(s.samples) >= 5
    assert s.header["replay_of"] == str(FIXTURE) and s.header["speed"] == 4.0
    assert s.header["interval_ms"] == pytest.approx(25.0, rel=0.05)


@pytest.mark.slow
def test_cli_sigint_stops_cleanly(tmp_path, procs):
    p = Proc("--replay", str(FIXTURE), "--port", "0", "--speed", "10")
    procs(p)
    p.port()
    p.p.send_signal(signal.SIGINT)
    assert p.wait() == 0 and "Traceback" not in "".join(p.err)


def test_cli_sigkill_mid_run_leaves_a_readable_file(tmp_path, procs):
    out = tmp_path / "killed.nvml.jsonl"
    p = Proc("--replay", str(FIXTURE), "--no-serve", "--speed", "50", "--out", str(out))
    procs(p)
    wait_lines(out, 120)  # several passes in
    p.p.send_signal(signal.SIGKILL)
    p.wait()
    s = read_jsonl(out)  # whatever line the kill hit, the file reads
    assert len(s.samples) >= 119
    t = [x["t_ns"] for x in s.samples]
    assert all(b > a for a, b in pairwise(t))
    con = connect(":memory:")
    with transaction(con):
        res = ingest_series(con, out)
    assert res.n_samples == 2 * len(s.samples)
    # and a file cut inside a line (as a full disk leaves it) is read up to the cut
    data = out.read_bytes()
    cut_at = data.rindex(b"\n", 0, len(data) - 1) + 25
    out.write_bytes(data[:cut_at])
    cut = read_jsonl(out)
    assert cut.truncated and cut.samples == s.samples[: len(cut.samples)]
    assert len(cut.samples) == data[:cut_at].count(b"\n") - 1


@pytest.mark.slow
def test_cli_no_loop_replay_records_every_sample(tmp_path, procs):
    out = tmp_path / "once.nvml.jsonl"
    p = Proc(
        "--replay", str(FIXTURE), "--no-serve", "--no-loop", "--speed", "20", "--out", str(out)
    )
    procs(p)
    assert p.wait() == 0
    assert "40 samples" in "".join(p.err) and "the recording ended" in "".join(p.err)
    s = read_jsonl(out)
    orig = fixture_samples()
    assert [x["gpus"] for x in s.samples] == [o["gpus"] for o in orig]
    t = [x["t_ns"] for x in s.samples]
    assert t[-1] - t[0] == pytest.approx((orig[-1]["t_ns"] - orig[0]["t_ns"]) / 20, abs=40)


@pytest.mark.slow
def test_cli_duration(tmp_path, procs):
    p = Proc("--replay", str(FIXTURE), "--port", "0", "--duration", "0.5")
    procs(p)
    t = time.monotonic()
    assert p.wait() == 0
    assert time.monotonic() - t < 10


def cli(*args: str) -> subprocess.CompletedProcess:
    """The subcommand's own entry point (``python -m gpuscope.cli.sample``): the same ``run(args)`` as
    ``gpuscope sample`` without importing every other subcommand (the Proc tests use the real one)."""
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.sample", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speed", "2"], "--speed and --no-loop need --replay"),
        (["--no-loop"], "--speed and --no-loop need --replay"),
        (["--replay", str(FIXTURE), "--no-serve"], "--no-serve without --out"),
        (["--replay", str(FIXTURE), "--gpus", "0"], "apply to live sampling"),
        (["--replay", "/nonexistent/x.jsonl"], "no such file"),
        (["--replay", str(FIXTURE), "--port", "70000"], "not a TCP port"),
    ],
)
def test_cli_usage_errors_exit_2(args, message):
    r = cli(*args)
    assert r.returncode == 2 and message in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("gpuscope: ")


@pytest.mark.slow
def test_cli_argparse_errors_exit_2():
    for args in (
        ["--speed", "0", "--replay", str(FIXTURE)],
        ["--interval-ms", "-5"],
        ["--gpus", "a"],
    ):
        assert cli(*args).returncode == 2


@pytest.mark.slow
def test_cli_refuses_to_overwrite(tmp_path):
    out = tmp_path / "x.jsonl"
    out.write_text("precious\n")
    r = cli(
        "--replay", str(FIXTURE), "--no-serve", "--no-loop", "--speed", "100", "--out", str(out)
    )
    assert r.returncode == 2 and "--force" in r.stderr and out.read_text() == "precious\n"
    r = cli(
        "--replay",
        str(FIXTURE),
        "--no-serve",
        "--no-loop",
        "--speed",
        "100",
        "--out",
        str(out),
        "--force",
    )
    assert r.returncode == 0 and len(read_jsonl(out).samples) == 40


def test_cli_port_in_use_exits_2():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = cli("--replay", str(FIXTURE), "--port", str(port))
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr


@needs_no_gpu
def test_cli_without_gpu_exits_2_with_one_line():
    r = cli("--duration", "1")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "NVML" in r.stderr and "--replay" in r.stderr


@needs_gpu
def test_cli_live_records(tmp_path, procs):
    out = tmp_path / "live.nvml.jsonl"
    p = Proc("--out", str(out), "--port", "0", "--interval-ms", "100")
    procs(p)
    port = p.port()
    wait_lines(out, 6)
    fams = {
        f.name for f in text_string_to_metric_families(get(f"http://127.0.0.1:{port}/metrics")[2])
    }
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_SM_CLOCK"} <= fams
    status = json.loads(get(f"http://127.0.0.1:{port}/api/status")[2])
    assert status["mode"] == "live" and status["gpus"]
    p.p.send_signal(signal.SIGTERM)
    assert p.wait() == 0
    s = read_jsonl(out)
    t = [x["t_ns"] for x in s.samples]
    assert len(t) >= 5 and all(90e6 <= b - a <= 250e6 for a, b in pairwise(t))
