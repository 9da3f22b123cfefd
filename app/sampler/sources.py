"""Where samples come from: live NVML polls on a fixed grid, or a recorded series replayed as if live.

A source hands out ``(t_ns, gpus)`` pairs, blocking until each is due; ``None`` means it has ended
(or was stopped).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

from gpuscope.ingest.nvml import read_jsonl
from gpuscope.sampler.nvml_api import NvmlSampler, hostname


class Source(Protocol):
    mode: str  # "live" or "replay"
    host: str
    gpus: list[dict[str, Any]]  # header "gpus"
    interval_ms: float
    header_extra: dict[str, Any]

    def next_sample(self, stop: threading.Event) -> tuple[int, list[dict[str, Any]]] | None: ...

    def close(self) -> None: ...


class LiveSource:
    """Polls NVML every ``interval_ms`` on a fixed grid (a slow poll skips the ticks it overran).

    Raises :class:`~gpuscope.sampler.nvml_api.NvmlUnavailable` when there is no NVML or no GPU.
    """

    mode = "live"

    def __init__(
        self,
        interval_ms: float = 100.0,
        *,
        indices: Sequence[int] | None = None,
        skip_pcie: bool = False,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError("interval_ms must be > 0")
        self.sampler = NvmlSampler(indices, skip_pcie=skip_pcie)
        self.host = hostname()
        self.gpus = [g.as_dict() for g in self.sampler.gpus]
        self.interval_ms = float(interval_ms)
        self.header_extra: dict[str, Any] = {"driver_version": self.sampler.driver_version}
        self._interval_s = self.interval_ms / 1000.0
        self._next: float | None = None
        self.skipped_ticks = 0  # polls that took longer than the interval

    def next_sample(self, stop: threading.Event) -> tuple[int, list[dict[str, Any]]] | None:
        now = time.monotonic()
        if self._next is None:
            self._next = now
        elif self._next > now and stop.wait(self._next - now):
            return None
        if stop.is_set():
            return None
        t_ns = time.time_ns()
        rows = self.sampler.poll()
        self._next += self._interval_s
        now = time.monotonic()
        if self._next <= now:  # the poll overran: keep the grid, skip the missed ticks
            missed = int((now - self._next) // self._interval_s) + 1
            self.skipped_ticks += missed
            self._next += missed * self._interval_s
        return t_ns, rows

    def unsupported(self) -> dict[int, dict[str, str]]:
        return self.sampler.unsupported()

    def close(self) -> None:
        self.sampler.close()


class ReplaySource:
    """Serves a recorded JSONL series as if live: timestamps moved to now, the recorded intervals kept
    (divided by ``speed``), looping at the end unless ``loop=False``.

    Raises :class:`~gpuscope.ingest.errors.IngestError` for a bad or empty file.
    """

    mode = "replay"

    def __init__(self, path: str | Path, *, speed: float = 1.0, loop: bool = True) -> None:
        if not speed > 0:
            raise ValueError("speed must be > 0")
        from gpuscope.ingest.errors import IngestError

        self.path = Path(path)
        series = read_jsonl(self.path)
        if not series.samples:
            raise IngestError(self.path, "the series has a header but no samples")
        self.samples = series.samples
        self.speed = float(speed)
        self.loop = loop
        h = series.header
        self.host = h.get("host") or "replay"
        self.gpus = list(h["gpus"])
        t = [s["t_ns"] for s in self.samples]
        self._offsets = [x - t[0] for x in t]
        diffs = [b - a for a, b in pairwise(t) if b > a]
        step_ns = statistics.median(diffs) if diffs else (h.get("interval_ms") or 100.0) * 1e6
        self.recorded_interval_ms = step_ns / 1e6
        self.interval_ms = self.recorded_interval_ms / self.speed
        self._period_ns = (
            self._offsets[-1] + step_ns
        )  # one pass, plus one interval before it repeats
        self.header_extra = {"replay_of": str(self.path), "speed": self.speed}
        self._k = 0
        self._t0_mono: float | None = None
        self._t0_ns = 0
        self.passes = 0

    def next_sample(self, stop: threading.Event) -> tuple[int, list[dict[str, Any]]] | None:
        n = len(self.samples)
        if self._k >= n and not self.loop:
            return None
        if self._t0_mono is None:
            self._t0_mono, self._t0_ns = time.monotonic(), time.time_ns()
        cycle, i = divmod(self._k, n)
        rel_ns = (cycle * self._period_ns + self._offsets[i]) / self.speed
        delay = self._t0_mono + rel_ns / 1e9 - time.monotonic()
        if delay > 0 and stop.wait(delay):
            return None
        if stop.is_set():
            return None
        self._k += 1
        self.passes = cycle + (1 if i == n - 1 else 0)
        return self._t0_ns + int(rel_ns), self.samples[i]["gpus"]

    def close(self) -> None:
        pass
