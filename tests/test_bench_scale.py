"""The scale benchmarks' own tools: ``benchmarks/mem_timeline.py`` charges a command's RSS to the
gpuscope code running, and keeps the command's exit code and stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "before" / "before_rank0.pt.trace.json.gz"

pytestmark = pytest.mark.slow


def _timeline(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUSCOPE_STORE": str(tmp_path / "store")}
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "mem_timeline.py"), "--every", "0.02",
         "--log", str(tmp_path / "log.txt"), "--", *args],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_mem_timeline_charges_rss_to_the_ingest_code_and_keeps_its_output(tmp_path: Path) -> None:
    done = _timeline(tmp_path, "ingest", str(SAMPLE))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[0]
    assert len(run_id) == 12  # the command's own stdout, untouched
    err = done.stderr.splitlines()
    assert err[0].startswith("exit 0, ") and "peak RSS" in err[0]
    peak = int(err[0].split("peak RSS ")[1].split()[0])
    assert peak > 50  # MiB: Python, DuckDB and the rank
    growth = err[err.index("growth (MiB, sum of rises) | highest RSS under it (MiB) | frame") + 1 :]
    frames = [line.split("|")[2].strip() for line in growth]
    assert any(f.startswith(("ingest/", "analysis/")) for f in frames), frames
    log = (tmp_path / "log.txt").read_text().splitlines()
    assert log and all(len(line.split(" ", 2)) == 3 for line in log)
    assert max(int(line.split()[1]) for line in log) <= peak + 1


def test_mem_timeline_passes_a_failing_commands_exit_code(tmp_path: Path) -> None:
    done = _timeline(tmp_path, "analyze", "no-such-run", "--json")
    assert done.returncode != 0
    assert "no-such-run" in done.stderr  # gpuscope's one line
    assert f"exit {done.returncode}, " in done.stderr
