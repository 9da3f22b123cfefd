"""Capture a training job for gpuscope: ``torch.profiler`` with sensible defaults plus an NVML series.

::

    from gpuscope.capture import profile_steps

    with profile_steps("traces/", name="run", model=model) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
            if prof.done:
                break

first times ``untraced_steps`` steps with the profiler off (the step time the job has without the
profiler's own cost: ``gpuscope.untraced_step_ms`` in the trace), then writes ``traces/run_rank<R>.pt.trace.json.gz`` (one per rank) and, on local rank 0,
``traces/run.nvml.jsonl`` (GPU samples every ``interval_ms`` for the whole ``with`` block; with
``.<host>`` before ``.nvml.jsonl`` when torchrun's job spans several nodes), so that
``gpuscope ingest traces/`` picks up both. PyTorch is imported on first use only: importing this
module works without it, using it raises :class:`CaptureError`.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import threading
import time
import urllib.request
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope import __version__

TRACE_SUFFIX = ".pt.trace.json.gz"
NVML_SUFFIX = ".nvml.jsonl"

_warned_nvml = False
_warn_lock = threading.Lock()


class CaptureError(RuntimeError):
    """The capture cannot run here (e.g. PyTorch is not installed)."""


def _torch() -> Any:
    try:
        import torch
        import torch.profiler
    except ImportError as e:
        raise CaptureError(
            f"gpuscope.capture needs PyTorch, which cannot be imported here ({e}); "
            "install it (pip install 'gpuscope[capture]') in the training environment"
        ) from None
    return torch


def torch_flags(torch: Any) -> dict[str, Any]:
    """The process-wide settings that change which kernels run and that a trace cannot show: cuDNN
    benchmark mode (its algorithm search happens before the profiled steps), TF32 for matmuls and
    convolutions, and the fp32 matmul precision. Read when the capture starts."""
    out: dict[str, Any] = {}
    for key, get in (
        ("cudnn_benchmark", lambda: bool(torch.backends.cudnn.benchmark)),
        ("cudnn_allow_tf32", lambda: bool(torch.backends.cudnn.allow_tf32)),
        ("matmul_allow_tf32", lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        ("float32_matmul_precision", lambda: str(torch.get_float32_matmul_precision())),
    ):
        try:
            out[key] = get()
        except (AttributeError, RuntimeError):  # an older or a CPU-only build lacks one
            continue
    return out


def _distributed(getter: str, env: str, default: int) -> int:
    """``torch.distributed.<getter>()`` when the process group is initialised, else the integer in
    ``$<env>``, else ``default``."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(getattr(dist, getter)())
    except ImportError:
        pass
    try:
        return int(os.environ.get(env, str(default)))
    except ValueError:
        return default


def current_rank() -> int:
    """torch.distributed's rank when it is initialised, else ``$RANK``, else 0."""
    return _distributed("get_rank", "RANK", 0)


def local_rank(rank: int | None = None) -> int:
    """``$LOCAL_RANK`` (set by torchrun), else the global rank."""
    try:
        return int(os.environ["LOCAL_RANK"])
    except (KeyError, ValueError):
        return current_rank() if rank is None else rank


def trace_path(out_dir: str | os.PathLike[str], name: str, rank: int, cycle: int = 1) -> Path:
    """Where cycle ``cycle`` (1-based) of ``rank`` is written: the first in ``out_dir``, later ones in
    ``out_dir/cycle<k>/`` so that every folder holds one file per rank."""
    base = Path(out_dir) if cycle <= 1 else Path(out_dir) / f"cycle{cycle}"
    return base / f"{name}_rank{rank}{TRACE_SUFFIX}"


def _node_suffix() -> str:
    """``.<host>`` when torchrun says the job spans several nodes (their rank-0 series would share a
    name in a shared folder), else ``""``."""
    try:
        world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return ""
    return f".{socket.gethostname()}" if world > local else ""


def _warn_nvml_once(reason: str) -> None:
    global _warned_nvml
    with _warn_lock:
        if _warned_nvml:
            return
        _warned_nvml = True
    warnings.warn(
        f"gpuscope.capture: no GPU series will be recorded: {reason}", RuntimeWarning, stacklevel=4
    )


class GpuRecorder:
    """In-process NVML sampling into a JSONL file on a background thread (no HTTP server).

    Raises :class:`~gpuscope.sampler.nvml_api.NvmlUnavailable` when NVML or a GPU is missing.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        interval_ms: float = 100.0,
        indices: Iterable[int] | None = None,
    ) -> None:
        from gpuscope.sampler.loop import SamplerThread
        from gpuscope.sampler.record import SeriesWriter, make_header
        from gpuscope.sampler.sources import LiveSource

        self.path = Path(path)
        self.source = LiveSource(
            interval_ms, indices=list(indices) if indices is not None else None
        )
        try:
            header = make_header(
                self.source.host,
                self.source.interval_ms,
                self.source.gpus,
                time.time_ns(),
                **self.source.header_extra,
                written_by="gpuscope.capture",
            )
            self.writer = SeriesWriter(self.path, header)
        except BaseException:
            self.source.close()
            raise
        self.thread = SamplerThread(self.source, writer=self.writer)

    def start(self) -> GpuRecorder:
        self.thread.start()
        return self

    def stop(self) -> int:
        """Stop sampling, close the file; returns the number of samples written."""
        self.thread.stop()
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        self.writer.close()
        self.source.close()
        return self.thread.n_samples


class UntracedTimer:
    """Times steps with the profiler off, without changing them: a mark at the end of each of the
    steps ``first`` … ``first + n`` (1-based ``step()`` calls), so ``n`` whole steps lie between the
    marks; the first step of the wait phase is not timed (it may still warm caches up).

    With CUDA in use at the first mark, each mark records a CUDA event on the current stream and
    never waits: the host runs ahead of the GPU as it does untimed, and a step's time is the GPU
    clock's time between passing two consecutive marks — the steady-state step period whichever of
    host and GPU sets the pace (a GPU that waits for the host passes each mark as soon as the host
    records it). Without CUDA, ``perf_counter`` marks. The events are read once the GPU has passed
    the last mark: :attr:`ready` asks without waiting, :meth:`step_ms` waits for it."""

    def __init__(self, torch: Any, first: int, n: int) -> None:
        self.torch, self.first, self.n = torch, first, n
        self.marks: list[Any] = []  # CUDA events, or perf_counter seconds
        self.events: bool | None = None  # the clock, chosen at the first mark

    def mark(self, call: int) -> None:
        """Called at the end of step ``call`` (1-based), before the profiler sees it."""
        if self.n <= 0 or not self.first <= call <= self.first + self.n:
            return
        if self.events is None:
            cuda = self.torch.cuda
            self.events = bool(cuda.is_available() and cuda.is_initialized())
        if self.events:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    @property
    def done(self) -> bool:
        """Every mark is taken (its events may still be ahead of the GPU)."""
        return self.n > 0 and len(self.marks) == self.n + 1

    @property
    def ready(self) -> bool:
        """Every mark is taken and the GPU has passed them: :meth:`step_ms` will not wait."""
        return self.done and (not self.events or all(ev.query() for ev in self.marks))

    def step_ms(self) -> list[float]:
        """The timed steps' durations, ms; waits for the GPU to pass the last mark."""
        if not self.events:
            return [1e3 * (b - a) for a, b in zip(self.marks, self.marks[1:], strict=False)]
        for ev in reversed(self.marks):  # the last first: on one stream, the others are past then
            ev.synchronize()
        return [float(a.elapsed_time(b)) for a, b in zip(self.marks, self.marks[1:], strict=False)]

    def metadata(self) -> dict[str, str]:
        """``gpuscope.untraced_*`` trace metadata (JSON text values); empty until every step is
        marked (waits for the GPU to pass the last mark)."""
        if not self.done:
            return {}
        ms = self.step_ms()
        return {
            "gpuscope.untraced_step_ms": json.dumps(round(statistics.median(ms), 4)),
            "gpuscope.untraced_steps": json.dumps(len(ms)),
            "gpuscope.untraced_step_ms_all": json.dumps([round(x, 4) for x in ms]),
            # which clock; absent from traces timed by a synchronise at each step's end
            "gpuscope.untraced_clock": json.dumps("cuda_events" if self.events else "host"),
        }


class ModelProbe:
    """What the ``model`` passed to :func:`profile_steps` tells: its trainable parameter count and the
    shape and dtype of its first tensor input (seen once, by a forward pre-hook that then removes
    itself), from which samples (leading dimension) and tokens (B·S of an integer 2-D input) per
    step on this rank follow."""

    def __init__(self, model: Any) -> None:
        self.params = int(sum(p.numel() for p in model.parameters() if p.requires_grad))
        self.shape: list[int] | None = None
        self.dtype: str | None = None
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module: Any, args: tuple, kwargs: dict) -> None:
        for v in (*args, *kwargs.values()):
            if hasattr(v, "shape") and hasattr(v, "dtype"):
                self.shape, self.dtype = [int(d) for d in v.shape], str(v.dtype)
                break
        self.close()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def metadata(self, world_size: int) -> dict[str, str]:
        """``gpuscope.model_*`` and per-rank ``*_per_step_rank`` trace metadata (JSON text values)."""
        out = {
            "gpuscope.model_params": json.dumps(self.params),
            "gpuscope.world_size": json.dumps(world_size),
        }
        if self.shape is None:
            return out
        out["gpuscope.model_input_shape"] = json.dumps(self.shape)
        out["gpuscope.model_input_dtype"] = json.dumps(self.dtype)
        if self.shape:
            out["gpuscope.samples_per_step_rank"] = json.dumps(self.shape[0])
        integer = self.dtype in ("torch.int64", "torch.int32", "torch.int16", "torch.uint8")
        if integer and len(self.shape) == 2:
            out["gpuscope.tokens_per_step_rank"] = json.dumps(self.shape[0] * self.shape[1])
        return out


JOB_ENV = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")  # where a launcher names the job, first wins


def job_id(env: Mapping[str, str] | None = None) -> str | None:
    """The distributed job's id, the same on every node: ``$TORCHELASTIC_RUN_ID`` (torchrun's
    ``--rdzv-id``; its default ``none`` does not count), else ``$SLURM_JOB_ID``; None outside a
    job. ``gpuscope ingest --job`` without a value reads the same variables."""
    env = os.environ if env is None else env
    for var in JOB_ENV:
        v = (env.get(var) or "").strip()
        if v and v.lower() != "none":
            return v
    return None


def world_size() -> int:
    """torch.distributed's world size when it is initialised, else ``$WORLD_SIZE``, else 1."""
    return max(1, _distributed("get_world_size", "WORLD_SIZE", 1))


class Capture:
    """What ``profile_steps`` yields: call ``step()`` once per training step; ``done`` turns true once
    every trace the schedule asks for is written. Every other attribute is the underlying
    ``torch.profiler.profile``'s."""

    def __init__(self, profiler: Any, out_dir: Path, name: str, rank: int) -> None:
        self.profiler = profiler
        self.out_dir, self.name, self.rank = out_dir, name, rank
        self.trace_paths: list[Path] = []
        self.nvml_path: Path | None = None
        self.nvml_samples = 0
        self.steps = 0  # step() calls so far
        self.steps_needed: int | None = None  # step() calls until the last trace is written
        self.untraced: UntracedTimer | None = None
        self.model: ModelProbe | None = None
        self._late_metadata: dict[str, str] = {}  # added once recording is on, in every cycle
        self.logged: str | None = None  # where log_to sent the run (None: not logged)
        self._metadata_cycle = -1

    @property
    def done(self) -> bool:
        """Every trace of the schedule is written (never, with ``repeat=0``)."""
        return self.steps_needed is not None and self.steps >= self.steps_needed

    @property
    def untraced_step_ms(self) -> float | None:
        """Median step time with the profiler off, ms (None until timed)."""
        if self.untraced is None or not self.untraced.done:
            return None
        return statistics.median(self.untraced.step_ms())

    def step(self) -> None:
        """Mark the end of a training step (drives the wait/warmup/active schedule)."""
        self.steps += 1
        if self.untraced is not None:
            self.untraced.mark(self.steps)
        probe = self.model
        ready = probe is not None and (probe.shape is not None or self.steps > 1)
        if probe is not None and ready and "gpuscope.model_params" not in self._late_metadata:
            self._late_metadata.update(probe.metadata(world_size()))
            self._metadata_cycle = -1
        self.profiler.step()
        self._take_untraced()
        self._add_late_metadata()

    def _recording(self) -> bool:
        """The profiler records the step that begins now."""
        from torch.profiler import ProfilerAction

        return self.profiler.current_action in (
            ProfilerAction.RECORD,
            ProfilerAction.RECORD_AND_SAVE,
        )

    def _take_untraced(self) -> None:
        """The untraced times go into the metadata once the GPU has passed the last mark, or, at
        the latest, when recording begins (waiting for it then: the trace must hold them), so the
        steps between the last mark and the recording do not wait for the GPU either."""
        t = self.untraced
        if t is None or not t.done or "gpuscope.untraced_step_ms" in self._late_metadata:
            return
        if t.ready or self._recording():
            self._late_metadata.update(t.metadata())
            self._metadata_cycle = -1

    def _add_late_metadata(self) -> None:
        if not self._late_metadata or self._metadata_cycle == len(self.trace_paths):
            return
        if self._recording():
            for k, v in self._late_metadata.items():
                self.profiler.add_metadata_json(k, v)
            self._metadata_cycle = len(self.trace_paths)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.profiler, attr)


@contextmanager
def profile_steps(
    out_dir: str | os.PathLike[str] = "traces",
    *,
    name: str = "run",
    wait: int = 1,
    warmup: int = 2,
    active: int = 5,
    repeat: int = 1,
    skip_first: int = 0,
    record_shapes: bool = True,
    with_stack: bool = False,
    profile_memory: bool = False,
    with_flops: bool = False,
    activities: Iterable[Any] | None = None,
    sample_gpu: bool = True,
    interval_ms: float = 100.0,
    metadata: Mapping[str, Any] | None = None,
    rank: int | None = None,
    untraced_steps: int = 5,
    model: Any = None,
    log_to: str | None = None,
    log_options: Mapping[str, Any] | None = None,
) -> Iterator[Capture]:
    """Profile ``wait`` idle + ``warmup`` + ``active`` steps (``repeat`` times; 0 = until the block ends)
    with torch.profiler and write ``<out_dir>/<name>_rank<R>.pt.trace.json.gz`` (later cycles in
    ``<out_dir>/cycle<k>/``). ``activities`` default: CPU, plus CUDA when available. ``metadata``
    (JSON-serialisable values) goes into the trace's top level, with ``gpuscope.torch_version``.

    ``untraced_steps`` (default 5; 0 turns it off, else at least 3) steps of the first wait phase are
    timed with the profiler off, by CUDA events between steps (nothing waits for the GPU, so the
    job runs as it does untimed; :class:`UntracedTimer`): their median is written as
    ``gpuscope.untraced_step_ms``, so the analysis can tell the profiler's own cost from the job's.
    The wait phase is lengthened to ``untraced_steps + 1`` steps when shorter (its first step is not
    timed); ``prof.steps_needed`` says how many ``step()`` calls the schedule takes, ``prof.done``
    when it is over. ``model``: the module being trained; its trainable parameter count and input
    shape go into the trace (``gpuscope.model_params``, ``gpuscope.model_input_shape``, per-rank
    samples/tokens per step), so MFU can be estimated as 6·N·T where op shapes are missing.

    With ``sample_gpu`` on local rank 0, NVML is sampled every ``interval_ms`` ms into
    ``<out_dir>/<name>.nvml.jsonl`` for the whole block; without NVML or a GPU the capture still
    runs and warns once. ``rank`` default: torch.distributed's, else ``$RANK``, else 0.

    ``log_to`` (``mlflow`` or ``wandb``): when the block ends, this rank's first trace is ingested
    into a store (``log_options["store"]``, default the local store) and its figures, fixes and
    report are logged (:func:`gpuscope.trackers.log_run`; ``log_options`` may also give
    ``experiment``, ``tracking_uri``, ``directory``). A failure to log warns and leaves the
    training job alone; ``prof.logged`` says where it went.
    """
    if log_to is not None and log_to not in ("mlflow", "wandb"):
        raise ValueError(f"log_to must be 'mlflow' or 'wandb', not {log_to!r}")
    if any(x < 0 for x in (wait, warmup, skip_first, repeat)) or active < 1:
        raise ValueError("wait, warmup, skip_first, repeat must be >= 0 and active >= 1")
    if untraced_steps != 0 and untraced_steps < 3:
        raise ValueError("untraced_steps must be 0 (off) or >= 3")
    if untraced_steps:
        wait = max(wait, untraced_steps + 1)
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile, schedule

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    r = current_rank() if rank is None else int(rank)
    acts = list(activities) if activities is not None else [ProfilerActivity.CPU]
    if activities is None and torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)

    meta: dict[str, str] = {
        "gpuscope.torch_flags": json.dumps(torch_flags(torch)),
        "gpuscope.torch_version": json.dumps(str(torch.__version__)),
        "gpuscope.version": json.dumps(__version__),
        "gpuscope.rank": json.dumps(r),
    }
    job = job_id()
    if job is not None:  # `gpuscope ingest --job` on each node gathers the ranks into one run
        meta["gpuscope.job_id"] = json.dumps(job)
    for k, v in (metadata or {}).items():
        try:
            meta[str(k)] = json.dumps(v)
        except (TypeError, ValueError) as e:
            raise ValueError(f"metadata[{k!r}] is not JSON-serialisable ({e})") from None

    cap: Capture | None = None

    def on_trace_ready(p: Any) -> None:
        assert cap is not None
        path = trace_path(out, name, r, len(cap.trace_paths) + 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        p.export_chrome_trace(str(path))
        cap.trace_paths.append(path)

    prof = profile(
        activities=acts,
        schedule=schedule(
            wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first
        ),
        on_trace_ready=on_trace_ready,
        record_shapes=record_shapes,
        with_stack=with_stack,
        profile_memory=profile_memory,
        with_flops=with_flops,
    )
    cap = Capture(prof, out, name, r)
    if repeat:
        cap.steps_needed = skip_first + (wait + warmup + active) * repeat
    if untraced_steps:
        cap.untraced = UntracedTimer(torch, skip_first + 1, untraced_steps)
    if model is not None:
        cap.model = ModelProbe(model)
    recorder: GpuRecorder | None = None
    if sample_gpu and local_rank(r) == 0:
        from gpuscope.sampler.nvml_api import NvmlUnavailable

        nvml_path = out / f"{name}{_node_suffix()}{NVML_SUFFIX}"
        try:
            recorder = GpuRecorder(nvml_path, interval_ms=interval_ms).start()
            cap.nvml_path = nvml_path
            meta["gpuscope.nvml_file"] = json.dumps(nvml_path.name)
        except NvmlUnavailable as e:
            _warn_nvml_once(str(e))
    if hasattr(prof, "preset_metadata_json"):
        for k, v in meta.items():
            prof.preset_metadata_json(k, v)  # inserted by torch each time a trace starts
    else:  # pragma: no cover - older torch: add it once recording is on
        cap._late_metadata.update(meta)
    try:
        with prof:
            cap._add_late_metadata()
            yield cap
    finally:
        if cap.model is not None:
            cap.model.close()
        if recorder is not None:
            cap.nvml_samples = recorder.stop()
            if recorder.thread.error is not None:
                warnings.warn(
                    f"gpuscope.capture: GPU sampling stopped early ({recorder.thread.error}); "
                    f"{cap.nvml_path} holds what was sampled before",
                    RuntimeWarning,
                    stacklevel=3,
                )
        if log_to is not None:
            cap.logged = log_at_end(cap, log_to, log_options or {})


def log_at_end(cap: Capture, to: str, options: Mapping[str, Any]) -> str | None:
    """Ingest ``cap``'s first trace into the store ``options["store"]`` (default: the local store)
    and log it to ``to``; returns the line saying where it went, or None (with a warning saying
    why) when there is no trace yet or logging failed: a training job never dies of it."""
    if not cap.trace_paths:
        warnings.warn(
            f"gpuscope.capture: no trace was written, nothing to log to {to}",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    import duckdb
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import open_store
    from gpuscope.trackers import TrackerError, log_run
    from gpuscope.vocabulary.errors import GpuscopeError

    opts = dict(options)
    store = opts.pop("store", None)
    try:
        con = open_store(store)
        try:
            run = ingest_paths(con, [str(cap.trace_paths[0])], name=cap.name)[0]
            return log_run(con, run.run_id, to, **opts)
        finally:
            con.close()
    except (TrackerError, GpuscopeError, ValueError, OSError, duckdb.Error) as e:
        warnings.warn(
            f"gpuscope.capture: the run was not logged to {to} ({e})", RuntimeWarning, stacklevel=4
        )
        return None


# -- traces of slow steps only (issue 24) ---------------------------------------------------------
#
# slow_steps() keeps every step's time and writes the trace of a step slower than k x the running
# median of the steps before it (at most max_traces, plus one per request from the Live page).
# torch.profiler records every step (one-step cycles); a step's trace is exported only when the step
# was slow. With sampler=URL the step times go to a `gpuscope sample` server (POST /api/steps).

DEFAULT_K = 2.0
DEFAULT_MAX_TRACES = 3
DEFAULT_MIN_STEPS = 5
DEFAULT_WINDOW = 100


def is_slow(ms: float, history: list[float] | deque[float], k: float, min_steps: int) -> bool:
    """Whether a step of ``ms`` is slower than ``k`` × the median of ``history`` (the steps
    before it), once ``history`` holds at least ``min_steps`` steps."""
    return len(history) >= min_steps and ms > k * statistics.median(history)


@dataclass
class Report:
    """One report to the sampler: step times ``[step, ms]``, traces written, and how many
    on-request traces had been taken when it was made (:attr:`StepReporter.taken`)."""

    steps: list[list[float]]
    traces: list[dict[str, Any]]
    taken: int


class StepReporter:
    """Sends step times to a ``gpuscope sample`` server (``POST /api/steps``) from a daemon thread,
    every ``every_s`` seconds; learns from its answer whether the Live page asked for a trace."""

    def __init__(self, url: str, every_s: float = 0.5, timeout_s: float = 2.0) -> None:
        self.url = url.rstrip("/") + "/api/steps"
        self.every_s, self.timeout_s = every_s, timeout_s
        self.pending: list[list[float]] = []
        self.traces: list[dict[str, Any]] = []
        self.requested = False
        # on-request traces taken so far: the answer to a report sent before the latest one was
        # taken is stale (the sampler had not heard of that trace) and asks for nothing
        self.taken = 0
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
                self.taken += 1

    def _run(self) -> None:
        while not self.stop_event.wait(self.every_s):
            self.flush()

    def flush(self) -> None:
        """Send the steps and traces not sent yet; take the sampler's answer."""
        report = self.take()
        answer = self.send(report)
        if answer is not None:
            self.answered(answer, report)

    def take(self) -> Report:
        """What the next report sends (the pending steps and traces, handed over)."""
        with self.lock:
            report = Report(self.pending, self.traces, self.taken)
            self.pending, self.traces = [], []
        return report

    def send(self, report: Report) -> Any:
        """POST ``report``; the sampler's answer, or None when it could not be sent (the report
        is then kept for the next try, bounded)."""
        from gpuscope.sampler.token import auth_headers

        body = json.dumps({"steps": report.steps, "traces": report.traces}).encode()
        headers = {"Content-Type": "application/json", **auth_headers(self.url)}  # its token
        req = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                answer = json.loads(r.read(1 << 20) or b"{}")
        except (OSError, ValueError) as e:
            with self.lock:  # keep them for the next try (bounded)
                self.pending = (report.steps + self.pending)[-100_000:]
                self.traces = report.traces + self.traces
            if self.error is None:
                refused = getattr(e, "code", None) == 403  # no token, or not the sampler's
                hint = " (the sampler's token: see $GPUSCOPE_SAMPLER_TOKEN)" if refused else ""
                self.error = f"{self.url}: {e}{hint}"
                warnings.warn(
                    f"gpuscope.capture: cannot report steps to the sampler ({self.error})",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return None
        self.error = None
        return answer

    def answered(self, answer: Any, report: Report) -> None:
        """The sampler's answer to ``report``: a pending request arms the next slow step's trace,
        unless an on-request trace was taken after ``report`` was made (the sampler answered
        without knowing of it: the request it saw is the one that trace honoured)."""
        if isinstance(answer, dict) and answer.get("trace_requested"):
            with self.lock:
                if self.taken == report.taken:
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
