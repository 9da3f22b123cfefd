"""Where a gpuscope command's memory goes: its RSS over time, each sample beside the code running.

    python benchmarks/mem_timeline.py [--every 0.2] [--log FILE] -- ingest TRACE --store S
    python benchmarks/mem_timeline.py -- analyze RUN --json --store S

Runs ``gpuscope ARGS`` in this process (``gpuscope.cli.main.main``) while a thread samples, every
``--every`` s, the process's resident set (``VmRSS`` of ``/proc/self/status``, KiB: DuckDB's and
Arrow's native memory included, which ``tracemalloc`` does not see) and the main thread's stack.
Each sample is charged to the innermost frame of gpuscope's own code above the store's query doors (``file:line function``), so
a rise of RSS names the code that made it. Prints to stderr (the command's stdout stays its own):
the peak (``VmHWM``) and the stack at the highest sample, then the frames with the most growth
(the sum of positive RSS steps charged to them) and the highest RSS seen under each. ``--log``
also writes every sample as a line as it is taken (``t_s rss_mib frame``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType

#: the store's generic doors (every query passes them): a sample is charged to the frame above
GENERIC = ("store/connection.py", "analysis/store_access.py")
MARKS = (os.sep + "gpuscope" + os.sep, "/analysis/", "/ingest/", "/store/", "/app/")


def _kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split(f"{key}:")[1].split()[0])


def _ours(frame: FrameType | None) -> list[str]:
    """The stack's frames in gpuscope's code, innermost first (``file:line function``)."""
    out: list[str] = []
    while frame is not None:
        name = frame.f_code.co_filename
        if any(m in name for m in MARKS) and "mem_timeline" not in name:
            out.append(
                f"{Path(name).parent.name}/{Path(name).name}:{frame.f_lineno} {frame.f_code.co_name}"
            )
        frame = frame.f_back
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--every", type=float, default=0.2, help="seconds between samples")
    ap.add_argument("--log", type=Path, default=None, help="write every sample here")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then gpuscope's arguments")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    main_id = threading.get_ident()
    samples: list[tuple[float, int, list[str]]] = []
    stop = threading.Event()
    t0 = time.perf_counter()

    log = a.log.open("w", buffering=1) if a.log is not None else None

    def sample() -> None:
        while not stop.wait(a.every):
            frame = sys._current_frames().get(main_id)
            t, rss, stack = time.perf_counter() - t0, _kib("VmRSS"), _ours(frame)
            samples.append((t, rss, stack))
            if log is not None:
                log.write(f"{t:.2f} {rss / 1024:.0f} {' < '.join(stack[:4]) or '-'}\n")

    def stopped(signum: int, _frame: object) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stopped)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    from gpuscope.cli.main import main as gpuscope_main

    try:
        code: int | str | None = gpuscope_main(args)
    except SystemExit as e:  # the CLI's exits (one line on stderr, then its code)
        code = e.code
    finally:
        stop.set()
        th.join()
    growth: dict[str, int] = defaultdict(int)
    top: dict[str, int] = defaultdict(int)
    prev = samples[0][1] if samples else 0
    for _, rss, stack in samples:
        where = next((f for f in stack if not f.startswith(GENERIC)), "(outside gpuscope)")
        growth[where] += max(0, rss - prev)
        top[where] = max(top[where], rss)
        prev = rss
    err = sys.stderr
    wall = time.perf_counter() - t0
    print(f"exit {code}, {wall:.1f} s, peak RSS {_kib('VmHWM') / 1024:.0f} MiB", file=err)
    if samples:
        t, rss, stack = max(samples, key=lambda s: s[1])
        print(f"highest sample: {rss / 1024:.0f} MiB at {t:.1f} s, in:", file=err)
        for f in stack[:12]:
            print(f"    {f}", file=err)
    print("growth (MiB, sum of rises) | highest RSS under it (MiB) | frame", file=err)
    for where, g in sorted(growth.items(), key=lambda kv: -kv[1])[:15]:
        print(f"{g / 1024:9.0f} | {top[where] / 1024:9.0f} | {where}", file=err)
    if log is not None:
        log.close()
    if isinstance(code, str):
        print(code, file=err)
        return 1
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
