"""The analysis gives the same figures, to the last bit, whatever DuckDB's threads: a store's
stored parts and ``analyze`` document must not depend on the run that computed them.

A rank big enough for DuckDB to scan and aggregate in parallel (700 k kernels and their launches:
several row groups) is analysed with 1, 4 and 8 threads. Before the fix, the kernel breakdown's
per-category µs (float sums in the order a parallel join returned its rows) and the mean SM fill
of small grids (a parallel ``avg`` of doubles) moved in their last bits with the threads (the
1 GB benchmark rank: ``copy_memset`` 162351.318 or 162351.31800000003; SM fill 0.6997549019605086
or ...4905), and so did the ingest's stored ``kernels`` part and document. The rank's host and
runtime tables also held their rows in another order on every such run (DuckDB made their long
``cat IN (...)`` lists a join), which the breakdown's order follows."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gpuscope.analysis import kernels as K
from gpuscope.analysis import report as R
from gpuscope.analysis.rank_index import RankIndex, close_shared
from gpuscope.cli.main import main
from gpuscope.store import connect

pytestmark = pytest.mark.slow

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
N = 700_000  # kernels: the GPU table spans several of DuckDB's row groups (122,880 rows)
STEP_NS = 2000
NAMES = (
    [f"ampere_sgemm_{i}x128_nn" for i in range(20)]
    + [f"void at::native::vectorized_elementwise_kernel<{i}, float>" for i in range(20)]
    + [f"void at::native::reduce_kernel<{i}>" for i in range(20)]
    + ["cudaLaunchKernel"]
)


@pytest.fixture(scope="module")
def big_rank(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A store whose one rank holds N kernels on three streams (60 names, durations and grids
    that are not round; every 50th kernel without a launch) and their launches: the run and
    rank rows of a real sample, its events replaced."""
    db = f"duckdb:{tmp_path_factory.mktemp('threads') / 's.duckdb'}"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["ingest", str(SAMPLES / "before"), "--db", db]) in (0, None)
    con = connect(db)
    run, rank = con.execute("SELECT run_id, rank FROM ranks").fetchone()
    base = con.execute("SELECT max(name_id) + 1 FROM names").fetchone()[0]
    con.execute("BEGIN")
    con.execute(
        "INSERT INTO names SELECT ?, ? + i, n "
        "FROM (SELECT unnest(?) AS n, generate_subscripts(?, 1) - 1 AS i)",
        [run, base, NAMES, NAMES],
    )
    con.execute("DELETE FROM events WHERE run_id = ?", [run])
    con.execute(
        f"""INSERT INTO events BY NAME
        SELECT $run AS run_id, $rank AS rank, 'X' AS ph, 'kernel' AS cat,
               $base + (hash(i) % 60)::INTEGER AS name_id, 0 AS pid, 7 + i % 3 AS tid,
               i * {STEP_NS} AS ts_ns, 1001 + (i * 7919) % 997 AS dur_ns,
               CASE WHEN i % 50 = 0 THEN -i ELSE i END AS correlation, 0 AS device,
               7 + i % 3 AS stream, [1 + (i * 31) % 200, 1, 1] AS grid
        FROM range(1, {N}) t(i)""",
        {"run": run, "rank": rank, "base": base},
    )
    con.execute(
        f"""INSERT INTO events BY NAME
        SELECT $run AS run_id, $rank AS rank, 'X' AS ph, 'cuda_runtime' AS cat,
               $base + 60 AS name_id, 100 AS pid, 100 AS tid, i * {STEP_NS} - 500 AS ts_ns,
               300 AS dur_ns, i AS correlation
        FROM range(1, {N}) t(i)""",
        {"run": run, "rank": rank, "base": base},
    )
    con.execute("COMMIT")
    yield con, run, rank
    close_shared(con)
    con.close()


def _figures(con: Any, run: str, rank: int, threads: int) -> tuple[Any, ...]:
    """The kernel breakdown's JSON and the kernel stats, computed anew with ``threads``."""
    con.execute(f"SET threads = {threads}")
    try:
        window = SimpleNamespace(start_ns=0, end_ns=N * STEP_NS)
        breakdown = K.kernel_breakdown(con, run, rank, window).to_json()
        gpu = RankIndex.shared(con, run, rank).gpu()
        p = {"run": run, "ws": 0, "we": N * STEP_NS, "dev": 0, "gpu": gpu}
        stats = R._kernel_stats(con, p, 132, 0.0)
        return breakdown, stats
    finally:
        close_shared(con)  # the next call builds the rank's tables again


def test_kernel_figures_do_not_depend_on_duckdbs_threads(big_rank: Any) -> None:
    con, run, rank = big_rank
    one = _figures(con, run, rank, 1)
    assert one[1].small_grid_fill is not None and one[0]["by_category"]["gemm"] > 0
    for threads in (4, 8):
        got = _figures(con, run, rank, threads)
        assert got[0]["by_category"] == one[0]["by_category"], threads
        assert got[1].small_grid_fill == one[1].small_grid_fill, threads
        assert got == one, threads
