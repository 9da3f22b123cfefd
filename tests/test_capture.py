"""gpuscope.capture: a real torch.profiler capture (CPU, plus CUDA and NVML where present).

The main test venv has no torch: there, only the "no torch" behaviour is tested and the captures are
reported as skipped. Run the rest with a venv that has torch (docs/sampler.md says how).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
import warnings
from pathlib import Path

import gpuscope.capture as capture
import pytest
from gpuscope.capture import CaptureError, profile_steps, trace_path
from gpuscope.sampler.nvml_api import nvml_status

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAS_TORCH, reason="torch is not installed in this venv (pip install torch)"
)
NVML_REASON = nvml_status()


def test_without_torch_the_error_is_clear(tmp_path, monkeypatch):
    # Hide torch (installed or not) the way a machine without it looks: importing it fails.
    monkeypatch.setitem(sys.modules, "torch", None)
    with (
        pytest.raises(CaptureError, match=r"needs PyTorch.*pip install 'gpuscope\[capture\]'"),
        profile_steps(tmp_path),
    ):
        pass
    assert not any(tmp_path.iterdir())  # nothing was written


def test_trace_path_names():
    assert trace_path("t", "run", 3) == Path("t/run_rank3.pt.trace.json.gz")
    assert trace_path("t", "run", 0, cycle=2) == Path("t/cycle2/run_rank0.pt.trace.json.gz")


def test_nvml_file_name_per_node(monkeypatch):
    import socket

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert capture._node_suffix() == ""
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert capture._node_suffix() == ""  # one node
    monkeypatch.setenv("WORLD_SIZE", "16")
    assert capture._node_suffix() == f".{socket.gethostname()}"  # two nodes may share the folder


def train(prof, steps: int) -> None:
    import torch

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(32, 64, device=device)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


@pytest.mark.slow
@needs_torch
def test_capture_writes_trace_with_metadata(tmp_path, monkeypatch):
    import torch

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(capture, "_warned_nvml", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile_steps(
            tmp_path, name="toy", metadata={"samples_per_step": 256, "note": "ci"}
        ) as prof:
            train(prof, prof.steps_needed)
    assert prof.done
    [path] = prof.trace_paths
    assert path == tmp_path / "toy_rank0.pt.trace.json.gz"
    trace = load(path)
    assert trace["gpuscope.torch_version"] == torch.__version__
    assert (
        trace["samples_per_step"] == 256 and trace["note"] == "ci" and trace["gpuscope.rank"] == 0
    )
    events = trace["traceEvents"]
    steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    # wait 6 (5 untraced timed steps + 1), warmup 2, active 5
    assert steps == {f"ProfilerStep#{i}" for i in range(8, 13)}
    assert trace["gpuscope.untraced_steps"] == 5 and trace["gpuscope.untraced_step_ms"] > 0
    assert any(e.get("cat") == "cpu_op" and e.get("name") == "aten::addmm" for e in events)
    assert any(e.get("args", {}).get("Input Dims") for e in events)  # record_shapes=True
    nvml_warnings = [w for w in caught if "no GPU series" in str(w.message)]
    if NVML_REASON is None:
        assert prof.nvml_path == tmp_path / "toy.nvml.jsonl" and not nvml_warnings
        assert prof.nvml_samples >= 1 and trace["gpuscope.nvml_file"] == "toy.nvml.jsonl"
    else:
        assert prof.nvml_path is None and len(nvml_warnings) == 1
        assert NVML_REASON in str(nvml_warnings[0].message)
        assert nvml_warnings[0].filename == __file__  # points at the caller's `with` line
        assert sorted(p.name for p in tmp_path.iterdir()) == ["toy_rank0.pt.trace.json.gz"]


@pytest.mark.slow
@needs_torch
@pytest.mark.skipif(NVML_REASON is None, reason="NVML works here: there is nothing to warn about")
def test_nvml_warning_is_given_once(tmp_path, monkeypatch):
    monkeypatch.setattr(capture, "_warned_nvml", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(2):
            with profile_steps(
                tmp_path / str(i), wait=0, warmup=0, active=1, untraced_steps=0
            ) as prof:
                train(prof, 2)
    assert sum("no GPU series" in str(w.message) for w in caught) == 1


@needs_torch
def test_rank_from_env_and_cycles(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv(
        "LOCAL_RANK", "1"
    )  # not local rank 0: no NVML series, and no warning about it
    monkeypatch.setattr(capture, "_warned_nvml", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile_steps(
            tmp_path, name="job", wait=0, warmup=1, active=2, repeat=2, untraced_steps=0
        ) as prof:
            train(prof, 8)
    assert prof.rank == 3 and prof.nvml_path is None
    assert prof.trace_paths == [
        tmp_path / "job_rank3.pt.trace.json.gz",
        tmp_path / "cycle2" / "job_rank3.pt.trace.json.gz",
    ]
    assert not [w for w in caught if "no GPU series" in str(w.message)]
    for p in prof.trace_paths:
        assert load(p)["gpuscope.rank"] == 3  # metadata in every cycle's trace


@pytest.mark.slow
@needs_torch
def test_capture_is_ingestable(tmp_path, monkeypatch):
    """`gpuscope ingest DIR` material: the trace loads as a run; the NVML series (where NVML works)
    attaches to it and overlaps it in time."""
    import torch
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.ingest.nvml import align_offset_ns, ingest_series, series_for_run
    from gpuscope.store import connect, transaction

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile_steps(tmp_path, name="ing", interval_ms=20) as prof:
            train(prof, prof.steps_needed)
    con = connect(":memory:")
    [run] = ingest_paths(con, prof.trace_paths)
    row = con.execute(
        "SELECT torch_version, start_ns, end_ns FROM runs WHERE run_id = ?", [run.run_id]
    ).fetchone()
    assert row[0] == torch.__version__
    if prof.nvml_path is None:
        return
    with transaction(con):
        res = ingest_series(con, prof.nvml_path, run_id=run.run_id)
    df = series_for_run(con, run.run_id)
    assert res.attached and len(df) == res.n_samples > 0
    assert df.t_ns.min() <= row[1] and df.t_ns.max() >= row[2] - 10**9  # the series spans the trace
    assert align_offset_ns(con, run.run_id) > 0


@needs_torch
def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="active >= 1"), profile_steps(tmp_path, active=0):
        pass
    with (
        pytest.raises(ValueError, match="not JSON-serialisable"),
        profile_steps(tmp_path, metadata={"x": object()}),
    ):
        pass


@needs_torch
def test_untraced_step_time_and_model_are_recorded(tmp_path, monkeypatch):
    """The wait phase is lengthened to untraced_steps + 1; those steps run with the profiler off and
    are timed; the model's parameter count and input shape go into the trace beside them."""
    import time as _time

    import torch

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    emb = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 4))
    emb[0].weight.requires_grad_(False)  # frozen: not counted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile_steps(
            tmp_path, name="u", wait=1, warmup=1, active=2, untraced_steps=3, model=emb
        ) as prof:
            assert prof.steps_needed == 4 + 1 + 2  # wait lengthened from 1 to 3 + 1
            n = 0
            while not prof.done:
                emb(torch.randint(0, 50, (6, 5))).sum().backward()
                if prof.steps in (1, 2, 3):  # steps 2..4 are the timed ones: ~20 ms each
                    _time.sleep(0.02)
                prof.step()
                n += 1
    assert n == 7
    trace = load(prof.trace_paths[0])
    steps = {
        e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    }
    assert steps == {"ProfilerStep#5", "ProfilerStep#6"}  # nothing profiled while timing
    assert trace["gpuscope.untraced_steps"] == 3
    assert len(trace["gpuscope.untraced_step_ms_all"]) == 3
    assert 19.0 <= trace["gpuscope.untraced_step_ms"] < 200.0
    assert prof.untraced_step_ms == pytest.approx(trace["gpuscope.untraced_step_ms"], abs=1e-3)
    assert trace["gpuscope.model_params"] == 16 * 4 + 4  # the frozen embedding is left out
    assert trace["gpuscope.model_input_shape"] == [6, 5]
    assert trace["gpuscope.model_input_dtype"] == "torch.int64"
    assert trace["gpuscope.samples_per_step_rank"] == 6
    assert trace["gpuscope.tokens_per_step_rank"] == 30
    assert trace["gpuscope.world_size"] == 1
    flags = trace["gpuscope.torch_flags"]  # what the trace cannot show: read from torch itself
    assert flags["cudnn_benchmark"] is torch.backends.cudnn.benchmark
    assert flags["float32_matmul_precision"] == torch.get_float32_matmul_precision()


@pytest.mark.slow
@needs_torch
def test_torch_flags_follow_the_settings(monkeypatch):
    import torch

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    torch.set_float32_matmul_precision("high")
    try:
        flags = capture.torch_flags(torch)
    finally:
        torch.set_float32_matmul_precision("highest")
    assert flags["cudnn_benchmark"] is True and flags["float32_matmul_precision"] == "high"
    assert set(flags) >= {"cudnn_allow_tf32", "matmul_allow_tf32"}


@pytest.mark.slow
@needs_torch
def test_untraced_steps_off_and_bounds(tmp_path):
    with profile_steps(tmp_path, wait=0, warmup=0, active=1, untraced_steps=0) as prof:
        train(prof, 1)
    assert prof.done and prof.untraced_step_ms is None
    assert "gpuscope.untraced_step_ms" not in load(prof.trace_paths[0])
    with (
        pytest.raises(ValueError, match="untraced_steps"),
        profile_steps(tmp_path, untraced_steps=2),
    ):
        pass


def test_rank_and_world_size_without_a_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """No initialised torch.distributed (or no torch): $RANK and $WORLD_SIZE, else 0 and 1."""
    from gpuscope.capture import current_rank, world_size

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert (current_rank(), world_size()) == (3, 8)
    monkeypatch.setenv("RANK", "x")
    monkeypatch.setenv("WORLD_SIZE", "0")
    assert (current_rank(), world_size()) == (0, 1)
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("WORLD_SIZE", "two")
    assert (current_rank(), world_size()) == (0, 1)


class FakeCuda:
    """``torch.cuda`` as the untraced timer sees it on a GPU that lags the host: the k-th event
    recorded is passed by the GPU at ``gpu_ms[k]`` (its clock), and only once ``lag_passed`` is on
    or something waits for it. ``log`` holds what waited and at which ``step()`` call."""

    def __init__(self, gpu_ms: list[float], lag_passed: bool = False) -> None:
        self.gpu_ms, self.lag_passed = gpu_ms, lag_passed
        self.recorded = 0
        self.passed = 0  # events the GPU has passed
        self.log: list[tuple[str, int]] = []
        self.step_now = lambda: 0  # the test's step() count, for the log

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def synchronize(self) -> None:
        self.log.append(("cuda.synchronize", self.step_now()))
        self.passed = self.recorded

    def Event(self, enable_timing: bool = False) -> FakeEvent:  # torch.cuda.Event
        assert enable_timing
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda, self.k = cuda, -1

    def record(self) -> None:
        self.k = self.cuda.recorded
        self.cuda.recorded += 1
        if self.cuda.lag_passed:
            self.cuda.passed = self.cuda.recorded

    def query(self) -> bool:
        return self.cuda.passed > self.k

    def synchronize(self) -> None:
        if not self.query():
            self.cuda.log.append(("event.synchronize", self.cuda.step_now()))
            self.cuda.passed = self.k + 1

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.query() and end.query(), "read before the GPU passed both events"
        return self.cuda.gpu_ms[end.k] - self.cuda.gpu_ms[self.k]


def test_untraced_timer_records_events_and_never_waits_while_marking():
    """A synchronize at a step's end drains the GPU's queue, so the next step's host work no longer
    overlaps the GPU's tail: the timer marks with CUDA events and waits only when read."""
    from types import SimpleNamespace

    cuda = FakeCuda([0.0, 10.0, 31.0, 42.0, 60.0])
    timer = capture.UntracedTimer(SimpleNamespace(cuda=cuda), first=2, n=3)
    for call in range(1, 8):
        timer.mark(call)
    assert cuda.recorded == 4  # the ends of steps 2, 3, 4, 5: three whole steps between them
    assert cuda.log == []  # nothing waited for the GPU while marking
    assert timer.done and not timer.ready
    assert timer.step_ms() == [10.0, 21.0, 11.0]  # the GPU clock between consecutive marks
    assert cuda.log == [("event.synchronize", 0)]  # the last mark, once, when read
    assert timer.ready
    meta = timer.metadata()
    assert json.loads(meta["gpuscope.untraced_step_ms"]) == 11.0
    assert json.loads(meta["gpuscope.untraced_step_ms_all"]) == [10.0, 21.0, 11.0]
    assert json.loads(meta["gpuscope.untraced_steps"]) == 3
    assert json.loads(meta["gpuscope.untraced_clock"]) == "cuda_events"


def test_untraced_timer_without_cuda_uses_the_host_clock(monkeypatch):
    from types import SimpleNamespace

    cuda = FakeCuda([])
    monkeypatch.setattr(cuda, "is_initialized", lambda: False)  # a CPU job on a GPU host
    clock = iter([1.0, 1.5, 2.25, 3.0])
    monkeypatch.setattr(capture.time, "perf_counter", lambda: next(clock))
    timer = capture.UntracedTimer(SimpleNamespace(cuda=cuda), first=1, n=3)
    for call in range(1, 6):
        timer.mark(call)
    assert cuda.recorded == 0 and cuda.log == [] and timer.ready
    assert timer.step_ms() == [500.0, 750.0, 750.0]
    assert json.loads(timer.metadata()["gpuscope.untraced_clock"]) == "host"


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("lag_passed", [False, True])
def test_untraced_times_are_read_when_recording_begins_at_the_latest(tmp_path, lag_passed):
    """With a real (CPU) profiler and a GPU clock that lags the host: no step waits for the GPU
    while timing or in the warm-up; the times are read when the GPU has passed the last mark, else
    waited for at the step whose end starts recording, so the trace holds them."""
    from types import SimpleNamespace

    cuda = FakeCuda([0.0, 12.0, 25.0, 37.0], lag_passed=lag_passed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile_steps(tmp_path, wait=1, warmup=2, active=1, untraced_steps=3) as prof:
            assert prof.steps_needed == 4 + 2 + 1  # wait lengthened to 3 + 1
            assert prof.untraced is not None and prof.untraced.first == 1
            prof.untraced = capture.UntracedTimer(SimpleNamespace(cuda=cuda), 1, 3)
            cuda.step_now = lambda: prof.steps
            train(prof, 7)
    assert prof.done and cuda.recorded == 4
    # the lagging GPU is waited for once, at step 6: after it the profiler records
    assert cuda.log == ([] if lag_passed else [("event.synchronize", 6)])
    trace = load(prof.trace_paths[0])
    assert trace["gpuscope.untraced_step_ms"] == 12.0
    assert trace["gpuscope.untraced_step_ms_all"] == [12.0, 13.0, 12.0]
    assert trace["gpuscope.untraced_clock"] == "cuda_events"
    assert prof.untraced_step_ms == 12.0
