"""The sample runs of ``sample_traces/``: loaded into an empty store so a new user sees a comparison.

Layout: ``sample_traces/<config>/`` holds one run's rank files (``*.pt.trace.json.gz``, maybe an
``*.nvml.jsonl``); each sub-folder is one run. A trace file directly in ``sample_traces/`` is a run
of its own. A missing folder is not an error: there is simply nothing to load.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscope.analysis import run_views
from gpuscope.ingest.loader import RunResult, ingest_paths, is_trace_file
from gpuscope.store import Connection
from gpuscope.vocabulary.errors import GpuscopeError

if TYPE_CHECKING:
    from gpuscope.store import Connection

ENV_SAMPLES = "GPUSCOPE_SAMPLES"
SAMPLE_TAG = "sample"


def samples_dir() -> Path | None:
    """``$GPUSCOPE_SAMPLES``, else ``sample_traces/`` of the source tree, else of the working dir."""
    env = os.environ.get(ENV_SAMPLES)
    candidates = [Path(env)] if env else []
    candidates += [
        Path(__file__).resolve().parents[2] / "sample_traces",
        Path.cwd() / "sample_traces",
    ]
    for c in candidates:
        if c.is_dir():
            return c
    return None


def _profiler_trace(path: Path) -> bool:
    """A file named as torch.profiler names its traces (``*.pt.trace.json[.gz]``): the samples'
    other JSON files (``timing.json``, the truth tables of ``fixes/``) are not runs."""
    return is_trace_file(path) and ".pt.trace.json" in path.name.lower()


def sample_runs(root: Path) -> list[Path]:
    """Each sub-folder holding profiler traces, and each loose profiler trace, sorted by name. A
    folder of recordings (``fixes/``, ``multi_gpu/``: their traces one level further down) is a
    collection for tests and benchmarks, not a run, and is left out without a word."""
    runs: list[Path] = []
    for p in sorted(root.iterdir()):
        if p.name.startswith("."):
            continue
        if (p.is_dir() and any(_profiler_trace(f) for f in p.iterdir())) or _profiler_trace(p):
            runs.append(p)
    return runs


def store_is_empty(con: Connection) -> bool:
    return run_views.row_count(con, "runs") == 0


def load_samples(
    con: Connection,
    root: Path | None = None,
    *,
    only_if_empty: bool = True,
    log: Callable[[str], None] = lambda _m: None,
) -> list[RunResult]:
    """Ingest every sample run (each in its own transaction; a bad one is skipped and logged)."""
    root = root if root is not None else samples_dir()
    if root is None or not root.is_dir():
        log("no sample_traces/ folder: starting with an empty store")
        return []
    if only_if_empty and not store_is_empty(con):
        return []
    loaded: list[RunResult] = []
    for path in sample_runs(root):
        later = run_views.SummaryLater(run_views.store_after_ingest)
        try:
            loaded += ingest_paths(con, [path], tags=[SAMPLE_TAG], after_trace=later)
            log(f"loaded sample run {path.name}")
        except GpuscopeError as e:
            log(f"skipped sample {path.name}: {e}")
        for run_id, why in later.failed:
            log(f"sample run {run_id} is stored, but its summary could not be computed ({why})")
    return loaded
