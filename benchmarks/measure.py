"""Run one command and measure it: wall time, peak RSS, exit status; one JSON line on stdout.

    python benchmarks/measure.py [--timeout S] [--max-rss-mb M] [--stdout FILE] -- CMD ARG...

Each contender is started through its own ``measure.py`` process, so that
``getrusage(RUSAGE_CHILDREN).ru_maxrss`` (the largest RSS of any waited-for descendant) is this
contender's alone. The process tree's summed RSS is also sampled from /proc every 0.2 s (it catches
worker pools, whose RSS ru_maxrss does not add up) and the command is killed, with its process group,
when it runs past ``--timeout`` or its tree's RSS passes ``--max-rss-mb``: the figures are then lower
bounds and ``timed_out`` / ``killed_for_rss`` say so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def own_usage(wall_s: float, file_bytes: int) -> dict[str, float | int]:
    """This process's figures as the A/B benchmarks print them: ``wall_s`` (given), ``cpu_s``
    (user + sys), ``peak_mib`` (peak RSS) and ``peak_x_file`` (peak RSS ÷ ``file_bytes``)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall_s": round(wall_s, 2),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "peak_mib": ru.ru_maxrss // 1024,
        "peak_x_file": round(ru.ru_maxrss * 1024 / file_bytes, 3),
    }


def tree_rss_bytes(root: int) -> int:
    """Summed RSS of ``root`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        pid, ppid = int(d), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * PAGE
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--max-rss-mb", type=float, default=None)
    ap.add_argument("--stdout", type=Path, default=None, help="file for the command's stdout")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    out = open(a.stdout, "wb") if a.stdout else subprocess.DEVNULL  # noqa: SIM115
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out, start_new_session=True)
    peak = 0
    timed_out = killed_for_rss = False
    while True:
        try:
            proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        peak = max(peak, tree_rss_bytes(proc.pid))
        elapsed = time.perf_counter() - t0
        if a.timeout is not None and elapsed > a.timeout:
            timed_out = True
        if a.max_rss_mb is not None and peak > a.max_rss_mb * 2**20:
            killed_for_rss = True
        if timed_out or killed_for_rss:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    if a.stdout:
        out.close()
    print(
        json.dumps(
            {
                "rc": proc.returncode,
                "wall_s": round(wall, 3),
                "ru_maxrss_mb": round(ru.ru_maxrss / 1024, 1),
                "sampled_peak_mb": round(peak / 2**20, 1),
                "peak_rss_mb": round(max(ru.ru_maxrss / 1024, peak / 2**20), 1),
                "user_s": round(ru.ru_utime, 2),
                "sys_s": round(ru.ru_stime, 2),
                "timed_out": timed_out,
                "killed_for_rss": killed_for_rss,
                "loadavg_1m_start": round(load0, 2),
                "loadavg_1m_end": round(os.getloadavg()[0], 2),
            }
        )
    )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
