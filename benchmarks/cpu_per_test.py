"""A pytest plugin for benchmarks/bench_tests.py: CPU seconds per test (user + sys of the pytest
process and of the children it waited for), one ``cpu_s<TAB>wall_s<TAB>nodeid`` line per test
appended to ``$GPUSCOPE_CPU_PER_TEST`` (each xdist worker appends its own). CPU, not wall: on a
shared machine wall time measures the neighbours. A module fixture's cost lands on the first test
that asks for it."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator

import pytest

ENV = "GPUSCOPE_CPU_PER_TEST"


def cpu_s() -> float:
    """User + sys seconds of this process and of its waited-for children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu0, wall0 = cpu_s(), time.perf_counter()
    yield
    out = os.environ.get(ENV)
    if out:
        line = f"{cpu_s() - cpu0:.3f}\t{time.perf_counter() - wall0:.2f}\t{item.nodeid}\n"
        with open(out, "a") as f:  # one write of one short line: workers' lines do not interleave
            f.write(line)
