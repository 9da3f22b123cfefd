"""The sampling loop: a background thread that takes samples from a source and hands each one to an
in-memory ring buffer (for the HTTP server) and to the recorder file."""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Any

from gpuscope.sampler.record import SeriesWriter, encode_line
from gpuscope.sampler.sources import Source

DEFAULT_BUFFER_S = 3600.0
MAX_BUFFER_SAMPLES = 1_000_000


class SampleStore:
    """The last ``buffer_s`` seconds of samples (at the source's interval), kept as encoded JSON lines.

    Thread-safe: the sampler thread adds, HTTP handler threads read.
    """

    def __init__(
        self,
        host: str,
        gpus: list[dict[str, Any]],
        interval_ms: float,
        buffer_s: float = DEFAULT_BUFFER_S,
    ) -> None:
        self.host, self.gpus, self.interval_ms = host, gpus, interval_ms
        self.buffer_s = buffer_s
        maxlen = min(MAX_BUFFER_SAMPLES, max(1, math.ceil(buffer_s * 1000.0 / interval_ms) + 1))
        self._buf: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._latest: tuple[int, list[dict[str, Any]]] | None = None
        self.total = 0

    @property
    def capacity(self) -> int:
        return self._buf.maxlen or 0

    def add(self, t_ns: int, gpus: list[dict[str, Any]], line: bytes) -> None:
        """``line``: the sample's JSON (a trailing newline is stripped)."""
        with self._lock:
            self._buf.append((t_ns, line.rstrip(b"\n")))
            self._latest = (t_ns, gpus)
            self.total += 1

    def latest(self) -> tuple[int, list[dict[str, Any]]] | None:
        with self._lock:
            return self._latest

    def since(self, since_ns: int, limit: int | None = None) -> list[bytes]:
        """Encoded samples with ``t_ns > since_ns``, oldest first; with ``limit``, only the newest ``limit``."""
        out: list[bytes] = []
        with self._lock:
            for t, line in reversed(self._buf):
                if t <= since_ns or (limit is not None and len(out) >= limit):
                    break
                out.append(line)
        out.reverse()
        return out

    def extent(self) -> tuple[int | None, int | None, int]:
        """(oldest t_ns, newest t_ns, samples held)."""
        with self._lock:
            if not self._buf:
                return None, None, 0
            return self._buf[0][0], self._buf[-1][0], len(self._buf)


class SamplerThread(threading.Thread):
    """Runs ``source`` until it ends, ``stop()`` is called, or ``duration_s`` has passed; each sample
    goes to ``writer`` (the JSONL file) and ``store`` (the ring buffer). ``finished`` is set when it
    ends; ``error`` holds what stopped it if that was an exception."""

    def __init__(
        self,
        source: Source,
        *,
        writer: SeriesWriter | None = None,
        store: SampleStore | None = None,
        duration_s: float | None = None,
    ) -> None:
        super().__init__(name="gpuscope-sampler", daemon=True)
        self.source, self.writer, self.store = source, writer, store
        self.duration_s = duration_s
        self.finished = threading.Event()
        self._stop_event = threading.Event()
        self.error: BaseException | None = None
        self.n_samples = 0
        self.started_mono: float | None = None
        self.started_ns: int | None = None
        self.cpu_start: float | None = None
        self.ended_reason = ""

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        self.started_mono, self.started_ns = time.monotonic(), time.time_ns()
        self.cpu_start = time.process_time()
        timer = None
        timed_out = threading.Event()

        def time_up() -> None:
            timed_out.set()
            self._stop_event.set()

        if self.duration_s is not None:
            timer = threading.Timer(self.duration_s, time_up)
            timer.daemon = True
            timer.start()
        try:
            while not self._stop_event.is_set():
                item = self.source.next_sample(self._stop_event)
                if item is None:
                    break
                t_ns, gpus = item
                line = encode_line({"t_ns": t_ns, "gpus": gpus})
                if self.writer is not None:
                    self.writer.write_encoded(line)
                if self.store is not None:
                    self.store.add(t_ns, gpus, line)
                self.n_samples += 1
            if timed_out.is_set():
                self.ended_reason = "duration reached"
            elif self._stop_event.is_set():
                self.ended_reason = "stopped"
            else:
                self.ended_reason = "the recording ended"
        except BaseException as e:  # a failing disk, a vanished GPU: report, don't hang the CLI
            self.error = e
            self.ended_reason = f"error: {e}"
        finally:
            if timer is not None:
                timer.cancel()
            self.finished.set()

    def uptime_s(self) -> float:
        return 0.0 if self.started_mono is None else time.monotonic() - self.started_mono
