"""HTA contender: ``TraceAnalysis(trace_dir=DIR)``, run by the HTA venv's python (pandas < 3).

    benchmarks/out/hta-venv/bin/python benchmarks/hta_load.py DIR

DIR holds only the big trace (HTA takes the rank from the ``"rank": N`` in distributedInfo, else 0).
HTA's default parser backend is used (``ParserBackend.JSON``: ``json.loads`` of the whole file, then
one pandas DataFrame, then its symbol-table compression and profiler-step filtering). Prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import sys
import time

t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis  # noqa: E402

logging.disable(logging.WARNING)  # HTA logs a warning per phase
t1 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
traces = ta.t.get_all_traces()
n_rows = sum(len(df) for df in traces.values())
kernels = 0
sym = ta.t.symbol_table.get_sym_id_map()
for df in traces.values():
    k = sym.get("kernel")
    if k is not None:
        kernels += int((df["cat"] == k).sum())
print(
    json.dumps(
        {
            "ok": n_rows > 0,
            "n_rows": n_rows,
            "kernels": kernels,
            "ranks": sorted(traces),
            "import_s": round(t1 - t0, 2),
            "load_s": round(t2 - t1, 2),
        }
    )
)
