"""Item 6 of the hostile-input issue: eight sessions opening the Run page at once all get it.

Drives a real ``gpuscope ui`` with eight concurrent WebSocket sessions through
``benchmarks/bench_concurrency.py`` (Streamlit's protocol, no browser): every session must end
with the script finished, a chart on the page and no exception element. Times are the
benchmark's business (docs/benchmarks.md); here only a generous bound catches a hang.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_concurrency as bench
import pytest

REPO = bench.REPO


def in_own_loop(coro):  # type: ignore[no-untyped-def]
    """Run a coroutine to the end on a thread of its own: a test run earlier in this process (the
    browser tests' sync Playwright) may leave an event loop running on the main thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.mark.slow
def test_eight_concurrent_sessions_all_get_the_run_page(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    runs = bench.ingest(db, [REPO / "sample_traces" / "before", REPO / "sample_traces" / "after"])
    proc, url = bench.start_ui(db, tmp_path / "server.log")
    try:
        for _ in range(2):  # cold, then warm
            got = in_own_loop(bench.round_of(url, runs, 8, 120.0))
            for r in got:
                assert r["status"] == "FINISHED_SUCCESSFULLY", r
                assert not r["exceptions"], r["exceptions"]
                assert r["charts"], r
                assert float(r["page_s"]) < 60
    finally:
        proc.terminate()
        proc.wait(timeout=30)
