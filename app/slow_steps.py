"""Traces of slow steps only: every step's time is kept, and a step slower than ``k`` × the running
median of the steps before it is written as a trace (at most ``max_traces``, plus one per request
from the Live page).

::

    from gpuscope.capture import slow_steps

    with slow_steps("traces/", name="run", k=2.0, max_traces=3, sampler="http://127.0.0.1:9401") as s:
        for batch in loader:
            train_step(batch)
            s.step()
    s.step_ms      # every step's time, ms
    s.traces       # [(step number, path)] of the slow steps written

torch.profiler records every step (one-step cycles) and the trace of a step is exported only when
the step was slow, so the overhead of recording is paid on every step while the cost of writing is
paid only for slow ones: the step times compare profiled steps with profiled steps. A step's time is
the host time between two ``step()`` calls (``sync=True`` synchronises CUDA first, so it is the
GPU's too). With ``sampler`` (a ``gpuscope sample`` server), step times are sent to it every
``report_every_s`` seconds in a background thread; the Live page shows their distribution and can
ask for the next slow step's trace (honoured even once ``max_traces`` are written).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.request
import warnings
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DEFAULT_K = 2.0
DEFAULT_MAX_TRACES = 3
DEFAULT_MIN_STEPS = 5
DEFAULT_WINDOW = 100


def is_slow(ms: float, history: list[float] | deque[float], k: float, min_steps: int) -> bool:
    """Whether a step of ``ms`` is slower than ``k`` × the median of ``history`` (the steps
    before it), once ``history`` holds at least ``min_steps`` steps."""
    return len(history) >= min_steps and ms > k * statistics.median(history)


class StepReporter:
    """Sends step times to a ``gpuscope sample`` server (``POST /api/steps``) from a daemon thread,
    every ``every_s`` seconds; learns from its answer whether the Live page asked for a trace."""

    def __init__(self, url: str, every_s: float = 0.5, timeout_s: float = 2.0) -> None:
        self.url = url.rstrip("/") + "/api/steps"
        self.every_s, self.timeout_s = every_s, timeout_s
        self.pending: list[list[float]] = []
        self.traces: list[dict[str, Any]] = []
        self.requested = False
        self.error: str | None = None
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gpuscope-steps", daemon=True)
        self.thread.start()

    def add(self, step: int, ms: float) -> None:
        with self.lock:
            self.pending.append([step, round(ms, 4)])

    def traced(self, step: int, path: Path, on_request: bool) -> None:
        with self.lock:
            self.traces.append({"step": step, "path": str(path), "on_request": on_request})
            if on_request:
                self.requested = False

    def _run(self) -> None:
        while not self.stop_event.wait(self.every_s):
            self.flush()

    def flush(self) -> None:
        with self.lock:
            steps, traces = self.pending, self.traces
            self.pending, self.traces = [], []
        body = json.dumps({"steps": steps, "traces": traces}).encode()
        req = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                answer = json.loads(r.read(1 << 20) or b"{}")
        except (OSError, ValueError) as e:
            with self.lock:  # keep them for the next try (bounded)
                self.pending = (steps + self.pending)[-100_000:]
                self.traces = traces + self.traces
            if self.error is None:
                self.error = f"{self.url}: {e}"
                warnings.warn(
                    f"gpuscope.capture: cannot report steps to the sampler ({self.error})",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return
        self.error = None
        if isinstance(answer, dict) and answer.get("trace_requested"):
            with self.lock:
                self.requested = True

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=self.timeout_s + 1)
        self.flush()


class SlowSteps:
    """What :func:`slow_steps` yields: call ``step()`` at the end of each training step."""

    def __init__(
        self,
        out_dir: Path,
        name: str,
        rank: int,
        *,
        k: float,
        max_traces: int,
        min_steps: int,
        window: int,
        sync: bool,
        torch: Any,
        reporter: StepReporter | None,
    ) -> None:
        self.out_dir, self.name, self.rank = out_dir, name, rank
        self.k, self.max_traces, self.min_steps, self.sync = k, max_traces, min_steps, sync
        self.torch = torch
        self.history: deque[float] = deque(maxlen=window)
        self.step_ms: list[float] = []
        self.traces: list[tuple[int, Path]] = []
        self.requested_traces = 0
        self.reporter = reporter
        self.profiler: Any = None
        self._keep: tuple[int, bool] | None = None  # (step number, on request) to export next
        self._last = time.perf_counter()

    @property
    def steps(self) -> int:
        return len(self.step_ms)

    def step(self) -> None:
        """End of a training step: time it, decide whether it was slow, move the profiler on."""
        if self.sync:
            cuda = self.torch.cuda
            if cuda.is_available() and cuda.is_initialized():
                cuda.synchronize()
        now = time.perf_counter()
        ms = 1e3 * (now - self._last)
        self._last = now
        n = len(self.step_ms)
        slow = is_slow(ms, self.history, self.k, self.min_steps)
        self.step_ms.append(ms)
        self.history.append(ms)
        if self.reporter is not None:
            self.reporter.add(n, ms)
        requested = self.reporter is not None and self.reporter.requested
        if slow and len(self.traces) - self.requested_traces < self.max_traces:
            self._keep = (n, False)
        elif slow and requested:
            self._keep = (n, True)
        else:
            self._keep = None
        if self.profiler is not None:
            self.profiler.step()  # ends this step's cycle: on_trace_ready exports it if kept
        self._last = time.perf_counter()  # the export is not the next step's time

    def on_trace_ready(self, prof: Any) -> None:
        if self._keep is None:
            return
        n, on_request = self._keep
        self._keep = None
        path = self.out_dir / f"{self.name}_rank{self.rank}_step{n}.pt.trace.json.gz"
        prof.export_chrome_trace(str(path))
        self.traces.append((n, path))
        if on_request:
            self.requested_traces += 1
        if self.reporter is not None:
            self.reporter.traced(n, path, on_request)


@contextmanager
def slow_steps(
    out_dir: str | Path = "traces",
    *,
    name: str = "run",
    k: float = DEFAULT_K,
    max_traces: int = DEFAULT_MAX_TRACES,
    min_steps: int = DEFAULT_MIN_STEPS,
    window: int = DEFAULT_WINDOW,
    sync: bool = False,
    sampler: str | None = None,
    report_every_s: float = 0.5,
    rank: int | None = None,
    record_shapes: bool = True,
) -> Iterator[SlowSteps]:
    """Keep every step's time; write ``<out_dir>/<name>_rank<R>_step<N>.pt.trace.json.gz`` for a
    step slower than ``k`` × the median of the ``window`` steps before it (once ``min_steps`` are
    known), at most ``max_traces`` of them (plus one per request from the Live page, with
    ``sampler``). Raises ValueError on bad arguments, CaptureError without PyTorch."""
    from gpuscope.capture import _torch, current_rank

    if not k > 1 or max_traces < 0 or min_steps < 1 or window < 1:
        raise ValueError("k must be > 1, max_traces >= 0, min_steps >= 1, window >= 1")
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile, schedule

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    reporter = StepReporter(sampler, report_every_s) if sampler else None
    s = SlowSteps(
        out,
        name,
        current_rank() if rank is None else int(rank),
        k=k,
        max_traces=max_traces,
        min_steps=min_steps,
        window=window,
        sync=sync,
        torch=torch,
        reporter=reporter,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*warmup.*")  # one-step cycles on purpose
        prof = profile(
            activities=acts,
            schedule=schedule(wait=0, warmup=0, active=1, repeat=0),
            on_trace_ready=s.on_trace_ready,
            record_shapes=record_shapes,
        )
    s.profiler = prof
    try:
        with prof:
            s._last = time.perf_counter()
            yield s
    finally:
        if reporter is not None:
            reporter.close()
