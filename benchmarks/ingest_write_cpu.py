"""The write phase of one trace's ingest (no summary parts) in this process: wall, CPU, page
faults and peak RSS, as one JSON line. For A/B runs of two installs, alternated in fresh processes:

    for r in 1 2 3; do
      PYTHONPATH=OLD_SITE .venv/bin/python benchmarks/ingest_write_cpu.py TRACE
      .venv/bin/python benchmarks/ingest_write_cpu.py TRACE
    done

CPU is user + sys of the whole process (imports and opening the store included): on a busy
machine it holds where the wall time does not. The store is a new one in a temporary folder.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from stores import ingest_into_new_lake


def main() -> int:
    trace = Path(sys.argv[1])
    t0 = time.perf_counter()
    ingest_into_new_lake(trace, "gpuscope-write-")  # gpuscope's imports counted from t0
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime
    size = trace.stat().st_size
    print(
        json.dumps(
            {
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "user_s": round(ru.ru_utime, 2),
                "sys_s": round(ru.ru_stime, 2),
                "minor_faults": ru.ru_minflt,
                "peak_rss_mb": ru.ru_maxrss // 1024,
                "peak_x_file": round(ru.ru_maxrss * 1024 / size, 3),
                "mb_per_s": round(size / 1e6 / wall),
                "mb_per_cpu_s": round(size / 1e6 / cpu),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
