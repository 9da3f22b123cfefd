#!/usr/bin/env python3
"""Times the test tiers the way the Makefile runs them, against the inner loop's target.

    python benchmarks/bench_tests.py               # the fast tier (make test-fast's pytest)
    python benchmarks/bench_tests.py --tier slow   # the slow tier (make test-slow's pytest)
    python benchmarks/bench_tests.py --tier all    # every non-browser test, in one run
    python benchmarks/bench_tests.py --tier suite  # everything, browser tests too: make test's pytest
    python benchmarks/bench_tests.py --tier all tests/test_job.py tests/test_store.py  # modules

Runs pytest on every core (pytest-xdist, as the Makefile does) with ``--durations=0``, then
prints the wall time against the target (90 s for the fast tier on 2 cores), the summed test time,
the tests that ran, and the unmarked tests whose setup + call + teardown took ``--threshold``
seconds or more (candidates for ``@pytest.mark.slow``, or for a faster test). It also prints the
CPU time (user + sys) of the whole pytest process tree, the CPU of every process under it sampled
from /proc by kind (chromium's renderers, never waited for, escape the tree's rusage), which tests
failed, and the modules and tests that took the most CPU (benchmarks/cpu_per_test.py, a pytest
plugin): on a machine shared with others, CPU is the figure to compare, wall time measures the
neighbours. Exits 1 when the fast tier is over its
target or pytest failed. Speed lives here, not in timed unit tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIERS = {
    "fast": "not browser and not slow",
    "slow": "slow and not browser",
    "all": "not browser",
    "suite": "",  # no marker filter: what `make test` (and CI) runs
}
FAST_TARGET_S = 90.0
DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)")
SUMMARY = re.compile(r"(\d+) passed")


def per_test_seconds(output: str) -> Counter[str]:
    """Seconds per test id (setup + call + teardown), from pytest's ``--durations=0`` lines."""
    seconds: Counter[str] = Counter()
    for line in output.splitlines():
        m = DURATION.match(line)
        if m:
            seconds[m.group(3)] += float(m.group(1))
    return seconds


def cpu_per_test(path: Path) -> Counter[str]:
    """CPU seconds per test id, from benchmarks/cpu_per_test.py's lines (``cpu<TAB>wall<TAB>id``)."""
    cpu: Counter[str] = Counter()
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split("\t")
        if len(parts) == 3:
            cpu[parts[2]] += float(parts[0])
    return cpu


def marked_slow(ids: list[str], paths: list[str]) -> set[str]:
    """The ids among ``ids`` that carry the ``slow`` marker (pytest's own collection of ``paths``,
    default every test, says)."""
    if not ids:
        return set()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "slow",
            "-p",
            "no:xdist",
            *paths,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout
    return {line.strip() for line in out.splitlines()} & set(ids)


class TreeCPU:
    """CPU seconds (user + sys) of every process under ``root``, sampled from /proc every
    ``period_s`` seconds while :meth:`start`ed: unlike ``getrusage(RUSAGE_CHILDREN)`` it counts the
    processes nobody waits for (chromium's renderers, whose parent exits first). Each process
    counts its CPU at its last sample: one that lives less than ``period_s`` may count less."""

    def __init__(self, root: int, period_s: float = 0.5) -> None:
        self.root, self.period_s = root, period_s
        self.seen: dict[tuple[int, str], tuple[float, str]] = {}  # (pid, start) -> (cpu s, kind)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._hz = os.sysconf("SC_CLK_TCK")

    def start(self) -> TreeCPU:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        children: dict[int, list[tuple[int, list[str]]]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:  # gone since listdir
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            children.setdefault(int(fields[1]), []).append((int(name), fields))
        todo = [self.root]
        while todo:
            for pid, fields in children.get(todo.pop(), []):
                todo.append(pid)
                key = (pid, fields[19])  # the start time tells a reused pid apart
                cpu = (int(fields[11]) + int(fields[12])) / self._hz
                kind = self.seen[key][1] if key in self.seen else process_kind(pid)
                self.seen[key] = (cpu, kind)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def by_kind(self) -> Counter[str]:
        kinds: Counter[str] = Counter()
        for cpu, kind in self.seen.values():
            kinds[kind] += cpu
        return kinds


def process_kind(pid: int) -> str:
    """What a test-run process is, from its command line: chromium, a dashboard, a CLI process,
    a pytest worker, or other."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    cmd = b" ".join(argv).decode(errors="replace")
    if "chromium" in cmd or cmd.startswith("/proc/self/exe"):
        return "chromium"
    if "gpuscope ui" in cmd or "streamlit run" in cmd:
        return "dashboards (gpuscope ui, streamlit run)"
    if "-m gpuscope" in cmd or "/bin/gpuscope" in cmd:
        return "gpuscope CLI processes"
    if "exec(eval(sys.stdin.readline()))" in cmd or "pytest" in cmd:
        return "pytest (workers and controller)"
    return "other"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", choices=sorted(TIERS), default="fast")
    ap.add_argument("--workers", default="auto", help="pytest-xdist -n (default: every core)")
    ap.add_argument("--threshold", type=float, default=1.0, help="seconds (default 1.0)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument(
        "paths", nargs="*", help="test modules or ids (default: every test of the tier)"
    )
    args = ap.parse_args()

    cpu_file = Path(tempfile.mkstemp(prefix="gpuscope-cpu-per-test-", suffix=".tsv")[1])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO / "benchmarks"), env.get("PYTHONPATH")])
    )
    env["GPUSCOPE_CPU_PER_TEST"] = str(cpu_file)
    marker = ["-m", TIERS[args.tier]] if TIERS[args.tier] else []
    # whole modules to each worker, costliest first (tests/conftest.py), as `make test` does
    cmd = [sys.executable, "-m", "pytest", "-q", *marker, "-n", args.workers, "--dist", "loadfile"]
    cmd += ["--no-loadscope-reorder", "-p", "no:cacheprovider", "--durations=0"]
    cmd += ["-p", "cpu_per_test", *args.paths]
    print("$", " ".join(cmd[1:]), flush=True)
    load0 = os.getloadavg()[0]
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    tree = TreeCPU(os.getpid()).start()
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    tree.stop()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, sys_s = kids.ru_utime - kids0.ru_utime, kids.ru_stime - kids0.ru_stime
    per_test = cpu_per_test(cpu_file)
    cpu_file.unlink(missing_ok=True)
    seconds = per_test_seconds(r.stdout)
    passed = SUMMARY.search(r.stdout.splitlines()[-1] if r.stdout.strip() else "")
    print(r.stdout.splitlines()[-1] if r.stdout.strip() else r.stderr[-2000:])
    for line in r.stdout.splitlines():  # pytest's short summary: which tests failed
        if line.startswith(("FAILED ", "ERROR ")):
            print(line[:300])

    over = sorted(((t, tid) for tid, t in seconds.items() if t >= args.threshold), reverse=True)
    if args.tier != "slow":
        slow = marked_slow([tid for _, tid in over], args.paths)
        over = [(t, tid) for t, tid in over if tid not in slow]
    target = FAST_TARGET_S if args.tier == "fast" and not args.paths else None  # a whole tier's
    load = os.getloadavg()[0]
    print(
        f"{args.tier} tier: {wall:.1f} s wall on {os.cpu_count()} CPUs (load average "
        f"{load0:.1f} at the start, {load:.1f} at the end), {sum(seconds.values()):.0f} s of test time"
        + (f"; target {target:.0f} s: {'met' if wall <= target else 'NOT met'}" if target else "")
    )
    print(
        f"CPU of the pytest process tree: {user + sys_s:.1f} s (user {user:.1f} + sys {sys_s:.1f}); "
        f"summed over the tests: {sum(per_test.values()):.1f} s"
    )
    kinds = tree.by_kind()
    print(
        f"CPU of every process under it, sampled from /proc (chromium included): "
        f"{sum(kinds.values()):.1f} s: "
        + ", ".join(f"{kind} {cpu:.1f}" for kind, cpu in kinds.most_common())
    )
    modules: Counter[str] = Counter()
    for tid, cpu in per_test.items():
        modules[tid.split("::")[0]] += cpu
    print(f"modules by CPU (s), the {args.top} costliest:")
    for module, cpu in modules.most_common(args.top):
        print(f"  {cpu:7.1f}  {module}")
    print(f"tests by CPU (s; a module fixture counts in its first test), the {args.top} costliest:")
    for tid, cpu in per_test.most_common(args.top):
        print(f"  {cpu:7.2f}  {tid}")
    if over and args.tier == "slow":
        print(f"slowest tests of {args.threshold:g} s or more:")
        for t, tid in over[: args.top]:
            print(f"  {t:6.2f} s  {tid}")
    elif over:
        print(f"unmarked tests of {args.threshold:g} s or more (mark slow, or make them faster):")
        for t, tid in over[: args.top]:
            print(f"  {t:6.2f} s  {tid}")
    print(
        json.dumps(
            {
                "tier": args.tier,
                "wall_s": round(wall, 1),
                "test_s": round(sum(seconds.values()), 1),
                "passed": int(passed.group(1)) if passed else None,
                "pytest_rc": r.returncode,
                "cpu_s": round(user + sys_s, 1),
                "cpu_sampled_s": round(sum(kinds.values()), 1),
                "load_avg_1m_start": round(load0, 2),
                "unmarked_over_threshold": len(over) if args.tier != "slow" else 0,
                "cpus": os.cpu_count(),
                "load_avg_1m": round(load, 2),
                "target_s": target,
            }
        )
    )
    failed = r.returncode != 0 or (target is not None and wall > target)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
