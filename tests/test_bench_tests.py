"""benchmarks/bench_tests.py's CPU of every process under the test run, sampled from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from bench_tests import TreeCPU, process_kind

BURN = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.6: pass"


def test_the_sampler_counts_a_grandchild_while_it_runs() -> None:
    """A process under a child (sh -> python burning 0.6 s of CPU) is counted from /proc while it
    runs, whoever waits for it."""
    burn = subprocess.list2cmdline([sys.executable, "-c", BURN])
    # the tree is rooted at the child, not at this worker: a worker's other children (a session's
    # dashboard, chromium) would be counted too; the child waits until the sampler has started
    outer = f"import subprocess, time; time.sleep(0.3); subprocess.run(['sh', '-c', {burn + '; true'!r}])"
    child = subprocess.Popen([sys.executable, "-c", outer])  # child -> sh -> the burning python
    tree = TreeCPU(child.pid, period_s=0.05).start()
    assert child.wait(timeout=60) == 0
    tree.stop()
    assert 0.4 <= sum(tree.by_kind().values()) <= 5.0, tree.seen


def test_process_kinds() -> None:
    assert process_kind(os.getpid()) == "pytest (workers and controller)"
    assert process_kind(2**31 - 1) == "other"  # no such process
