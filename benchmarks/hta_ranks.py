"""HTA contender of bench_ranks: load a folder of rank files, then the temporal and idle time
breakdowns; run by the HTA venv's python. Prints one JSON line (phase seconds, rows, ranks).

    benchmarks/out/hta-venv/bin/python benchmarks/hta_ranks.py DIR

A breakdown that fails on HTA's negative GPU durations (``dur = -1`` for zero-length events, which
trips its own ``non_compute_time >= 0`` assert) is run again after those rows' ``dur`` is set to 0
(timed, as bench_analysis does).
"""

from __future__ import annotations

import json
import logging
import sys
import time

t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis  # noqa: E402

logging.disable(logging.WARNING)  # HTA logs a warning per phase
out: dict[str, object] = {"import_s": round(time.perf_counter() - t0, 2)}
t = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
out["load_s"] = round(time.perf_counter() - t, 2)
traces = ta.t.get_all_traces()
out["ranks"] = len(traces)
out["rows"] = sum(len(df) for df in traces.values())


def clip() -> None:
    for df in ta.t.traces.values():
        neg = (df["dur"] < 0) & df["stream"].ne(-1)
        df.loc[neg, "dur"] = 0


errors = []
for step, call in (
    ("temporal", lambda: ta.get_temporal_breakdown(visualize=False)),
    ("idle", lambda: ta.get_idle_time_breakdown(visualize=False)),
):
    t = time.perf_counter()
    try:
        call()
    except Exception as e:  # HTA's own assert on negative durations: clip, run again (timed)
        errors.append(f"{step}: {e!r}"[:200])
        clip()
        call()
    out[f"{step}_s"] = round(time.perf_counter() - t, 2)
out["errors"] = errors
out["ok"] = out["rows"] > 0  # type: ignore[operator]
out["total_s"] = round(time.perf_counter() - t0, 2)
print(json.dumps(out))
