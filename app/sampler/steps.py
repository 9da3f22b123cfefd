"""Step times a training loop reports to the sampler (``POST /api/steps``, sent by
``gpuscope.capture.slow_steps(..., sampler=URL)``), and the Live page's request for the next slow
step's trace (``POST /api/trace-request``). ``GET /api/steps?since=N`` gives them back."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

MAX_STEPS = 100_000  # step times kept (the oldest go first)
MAX_TRACES = 1000
MAX_BODY = 1 << 20  # bytes of one POST


class StepLog:
    """A bounded, thread-safe log of ``(seq, step, ms, t_ns)`` rows; ``seq`` counts every report
    so a reader asks for what is newer than what it has."""

    def __init__(self, capacity: int = MAX_STEPS) -> None:
        self.rows: deque[tuple[int, int, float, int]] = deque(maxlen=capacity)
        self.traces: deque[dict[str, Any]] = deque(maxlen=MAX_TRACES)
        self.seq = 0
        self.requests = 0  # asked by the Live page, not yet honoured
        self.lock = threading.Lock()

    def report(self, body: Any) -> dict[str, Any]:
        """Take one report ``{"steps": [[step, ms], ...], "traces": [{step, path, on_request}]}``;
        returns the answer (``trace_requested``). Raises ValueError on a malformed body."""
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        steps, traces = body.get("steps", []), body.get("traces", [])
        if not isinstance(steps, list) or not isinstance(traces, list):
            raise ValueError("steps and traces must be lists")
        rows = []
        for item in steps:
            if (
                not isinstance(item, list)
                or len(item) != 2
                or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in item)
                or not item[1] >= 0
                or item[1] == float("inf")
            ):
                raise ValueError("each step is [step number, milliseconds >= 0]")
            rows.append((int(item[0]), float(item[1])))
        now = time.time_ns()
        with self.lock:
            for step, ms in rows:
                self.seq += 1
                self.rows.append((self.seq, step, ms, now))
            for t in traces:
                if isinstance(t, dict) and isinstance(t.get("step"), int):
                    self.traces.append(
                        {"step": t["step"], "path": str(t.get("path", ""))[:1000], "t_ns": now}
                    )
                    if t.get("on_request") and self.requests > 0:
                        self.requests -= 1
            return {"ok": True, "trace_requested": self.requests > 0}

    def request_trace(self) -> dict[str, Any]:
        """The Live page asks for the next slow step's trace."""
        with self.lock:
            self.requests = 1  # one pending request at a time
            return {"ok": True, "trace_requested": True}

    def since(self, seq: int, limit: int = MAX_STEPS) -> dict[str, Any]:
        """Rows with ``seq > since`` (oldest first, at most ``limit``), the traces written so far,
        and whether a request is pending."""
        with self.lock:
            rows = [r for r in self.rows if r[0] > seq][:limit]
            return {
                "steps": [{"seq": s, "step": n, "ms": ms, "t_ns": t} for s, n, ms, t in rows],
                "last_seq": self.seq,
                "traces": list(self.traces),
                "trace_requested": self.requests > 0,
            }
