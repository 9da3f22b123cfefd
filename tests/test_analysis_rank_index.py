"""RankIndex: the per-rank working tables under names of their own, a cache keyed on what it holds
(never stale after a run is deleted or ingested again, never another window's), a lifetime, and
answers that do not depend on the order of the analysis calls. Also the one definition of GPU
activity: zero-length kernels are neither busy time nor kernels, and kernel time is per device."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from gpuscope.analysis.busy import (
    busy_in_ranges,
    busy_series,
    busy_summary,
    comm_only_ns,
    primary_device,
)
from gpuscope.analysis.idle import idle_analysis, idle_gaps
from gpuscope.analysis.kernels import kernel_breakdown
from gpuscope.analysis.rank_index import (
    NO_NAME,
    SHORT_IDS,
    RankIndex,
    close_shared,
    forget_values,
    ids_param,
    in_ids,
    keep_name_ids,
    name_class,
    names_changed,
    unchanging,
)
from gpuscope.analysis.report import analyze_run
from gpuscope.analysis.steps import find_window
from gpuscope.analysis.tensor_cores import tensor_core_summary
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import delete_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

ANALYSIS = Path(__file__).resolve().parent.parent / "analysis"


def rank_trace(rank: int, kernel: str, *, shift: float = 0.0) -> TraceBuilder:
    """Two steps; kernels on two streams, a DataLoader span, a sync, a pageable copy."""
    t = TraceBuilder(rank=rank, world_size=2)
    t.step(1, 0, 200)
    t.step(2, 200, 200)
    t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5, 30)
    t.launch(kernel, 40, 50 + shift, 40)
    t.launch("ampere_sgemm_128x64_nn", 45, 70 + shift, 60, stream=8)
    t.runtime("cudaStreamSynchronize", 100, 60)
    t.launch(
        "Memcpy HtoD (Pageable -> Device)",
        210,
        230,
        10,
        api="cudaMemcpyAsync",
        cat="gpu_memcpy",
    )
    t.launch(kernel, 250, 300 + shift, 50)
    t.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 260, 360, 20)
    return t


@pytest.fixture
def two_ranks(con, tmp_path) -> str:
    d = tmp_path / "job"
    d.mkdir()
    rank_trace(0, "gemm_rank0").write(d / "rank0.json")
    rank_trace(1, "relu_rank1", shift=7).write(d / "rank1.json")
    return ingest_paths(con, [d])[0].run_id


def _names(con, ix: RankIndex) -> set[str]:
    rows = con.execute(
        f"SELECT DISTINCT n.name FROM {ix.gpu()} g JOIN names n "
        "ON n.run_id = ? AND n.name_id = g.name_id",
        [ix.run_id],
    ).fetchall()
    return {r[0] for r in rows}


def _temp_tables(con) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary "
        "UNION ALL SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal"
    ).fetchall()
    return {r[0] for r in rows}


@pytest.mark.slow
def test_two_ranks_on_one_connection_see_only_their_rows(con, two_ranks):
    with RankIndex(con, two_ranks, 0) as r0, RankIndex(con, two_ranks, 1) as r1:
        assert r0.gpu() != r1.gpu()
        n0, n1 = _names(con, r0), _names(con, r1)
        assert "gemm_rank0" in n0 and "relu_rank1" not in n0
        assert "relu_rank1" in n1 and "gemm_rank0" not in n1
        # gaps of one range on both: each its own table, each its own answer
        g0, _ = r0.gaps(0, 400_000)
        g1, _ = r1.gaps(0, 400_000)
        assert g0 != g1
        s0 = con.execute(f"SELECT min(ge) FROM {g0}").fetchone()
        s1 = con.execute(f"SELECT min(ge) FROM {g1}").fetchone()
        assert s0 == (50_000,) and s1 == (57_000,)  # the first kernel of rank 1 is 7 µs later
    # the shared indexes: one per (run, rank) and connection object; a cursor gets its own
    cur = con.cursor()
    try:
        a = RankIndex.shared(con, two_ranks, 0)
        assert RankIndex.shared(con, two_ranks, 0) is a
        assert RankIndex.shared(con, two_ranks, 1) is not a
        b = RankIndex.shared(cur, two_ranks, 0)
        assert b is not a and b.prefix != a.prefix
        assert _names(cur, b) == _names(con, a)
    finally:
        close_shared(cur)
        cur.close()


@pytest.mark.slow
def test_close_drops_every_table_of_the_index(con, two_ranks):
    w = find_window(con, two_ranks, 0)  # (the shared index of rank 0 holds its tables)
    before = _temp_tables(con)
    with RankIndex(con, two_ranks, 0, (w.start_ns, w.end_ns)) as ix:
        ix.gaps()
        ix.runtime()
        made = set(ix.table_names())
        assert made and made <= _temp_tables(con)
        assert all(n.startswith(ix.prefix) for n in made)
    assert _temp_tables(con) == before
    # the analysis functions' shared indexes go with close_shared
    analyze_run(con, two_ranks, rank=0)
    analyze_run(con, two_ranks, rank=1)
    assert _temp_tables(con) - before
    close_shared(con)
    assert _temp_tables(con) == set()


def test_a_failed_build_leaves_no_table(con, two_ranks):
    ix = RankIndex(con, two_ranks, 0)

    def build(n: dict[str, str]) -> None:
        con.execute(f"CREATE TEMP TABLE {n['a']} AS SELECT 1 AS x")
        con.execute(f"CREATE TEMP TABLE {n['b']} AS SELECT * FROM no_such_table")

    before = _temp_tables(con)
    with pytest.raises(Exception, match="no_such_table"):
        ix.tables(("broken",), ("a", "b"), build)
    assert _temp_tables(con) == before and ix.table_names() == []


def test_in_an_unchanging_block_the_run_row_is_not_checked_again_after_it_is(con, two_ranks):
    ix = RankIndex(con, two_ranks, 0)
    built = ix.gpu()
    assert delete_run(con, two_ranks)  # what an unchanging block promises never happens in it
    with unchanging(con):
        ix.refresh()  # no check: the tables stay
        assert ix.table_names() == [built]
    ix.refresh()  # out of the block, the check is back: the run is gone, so are its tables
    assert ix.table_names() == []
    ix.close()


def test_a_private_store_is_asked_for_the_run_row_only_after_a_commit(con, two_ranks, monkeypatch):
    """On an in-memory store a refresh with nothing committed since the last check asks no
    statement; a commit (the run deleted) makes it ask, and drop what it held."""
    ix = RankIndex(con, two_ranks, 0)
    built = ix.gpu()
    asked: list[str] = []
    real = con.execute
    monkeypatch.setattr(con, "execute", lambda sql, *a: asked.append(sql) or real(sql, *a))
    ix.refresh()
    assert asked == [] and ix.table_names() == [built]
    assert delete_run(con, two_ranks)
    asked.clear()
    ix.refresh()
    assert any("FROM runs" in q for q in asked) and ix.table_names() == []
    ix.close()


@pytest.mark.slow
def test_a_deleted_or_reingested_run_is_never_read_from_the_cache(con, tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("gemm", 1, 10, 40)
    path = t.write(tmp_path / "t.json")
    run = ingest_paths(con, [path])[0].run_id
    w = find_window(con, run, 0)
    assert busy_summary(con, run, 0, w.start_ns, w.end_ns).busy_ns == 40_000
    assert kernel_breakdown(con, run, 0, w).n_kernels == 1
    assert delete_run(con, run)
    # the cached working set, gaps and launches belonged to rows that are gone
    gone = busy_summary(con, run, 0, w.start_ns, w.end_ns)
    assert gone.device is None and gone.busy_ns == 0
    assert kernel_breakdown(con, run, 0, w).n_kernels == 0
    assert ingest_paths(con, [path])[0].run_id == run
    assert busy_summary(con, run, 0, w.start_ns, w.end_ns).busy_ns == 40_000
    assert kernel_breakdown(con, run, 0, w).n_kernels == 1


@pytest.mark.slow
def test_another_window_is_never_answered_from_the_first(con, two_ranks):
    w = find_window(con, two_ranks, 0)
    full = busy_summary(con, two_ranks, 0, w.start_ns, w.end_ns).busy_ns
    first = busy_summary(con, two_ranks, 0, 0, 200_000).busy_ns
    assert (full, first) == (
        busy_summary(con.cursor(), two_ranks, 0, w.start_ns, w.end_ns).busy_ns,
        busy_summary(con.cursor(), two_ranks, 0, 0, 200_000).busy_ns,
    )
    assert first < full
    ix = RankIndex.shared(con, two_ranks, 0)
    assert ix.gaps(0, 200_000) != ix.gaps(w.start_ns, w.end_ns)


def _ops(run: str):
    def win(c):
        return find_window(c, run, 0)

    return {
        "busy": lambda c: busy_summary(c, run, 0, win(c).start_ns, win(c).end_ns).to_json(),
        "busy_step2": lambda c: busy_summary(c, run, 0, 200_000, 400_000).to_json(),
        "series": lambda c: busy_series(c, run, 0, 0, 400_000, 16).to_dict("list"),
        "series_zoom": lambda c: busy_series(c, run, 0, 40_000, 140_000, 10).to_dict("list"),
        "idle": lambda c: idle_analysis(c, run, 0, win(c)).to_json(),
        "gaps_zoom": lambda c: (
            idle_gaps(c, run, 0, win(c), start_ns=0, end_ns=150_000).astype(object).to_dict("list")
        ),
        "kernels": lambda c: kernel_breakdown(c, run, 0, win(c)).to_json(),
        "tc": lambda c: tensor_core_summary(c, run, 0, win(c)).to_json(),
        "ranges": lambda c: busy_in_ranges(c, run, 0, [(0, 100_000), (150_000, 380_000)]),
        "comm": lambda c: comm_only_ns(c, run, 0, 0, 400_000, 0, 10**9),
        "primary": lambda c: primary_device(c, run, 0, 300_000, 400_000),
        "rank1_idle": lambda c: idle_analysis(c, run, 1, find_window(c, run, 1)).to_json(),
        "rank1_busy": lambda c: busy_summary(c, run, 1, 0, 400_000).to_json(),
    }


def _same(a, b) -> bool:
    return repr(a) == repr(b)


_REFERENCE: dict[tuple[int, str], dict[str, object]] = {}


@pytest.mark.slow
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_order_of_calls_does_not_change_any_answer(con, two_ranks, data):
    ops = _ops(two_ranks)
    # Each answer alone, on a connection of its own (no state from another call): computed once
    # per store, not per example (the run id is a content hash, the store is the test's own).
    key = (id(con), two_ranks)
    if key not in _REFERENCE:
        _REFERENCE.clear()
        _REFERENCE[key] = {}
        for name, op in ops.items():
            c = con.cursor()
            try:
                _REFERENCE[key][name] = op(c)
            finally:
                close_shared(c)
                c.close()
    reference = _REFERENCE[key]
    order = data.draw(st.permutations(sorted(ops)))
    c = con.cursor()
    try:
        for name in order:
            assert _same(ops[name](c), reference[name]), (name, order)
    finally:
        close_shared(c)
        c.close()


def test_nothing_outside_rank_index_names_a_temp_table():
    pat = re.compile(r"_gs_|TEMP\s+(?:TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?(?!\{)\w")
    offenders = [
        f"{p.name}:{i}"
        for p in sorted(ANALYSIS.glob("*.py"))
        if p.name != "rank_index.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pat.search(line) or re.search(r"id\(con\)", line)
    ]
    assert offenders == []


# -- GPU activity: one definition -----------------------------------------------------------------


def zero_and_two_devices(tmp_path: Path) -> TraceBuilder:
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("gemm_dev0", 1, 10, 40)  # device 0: 10..50
    t.launch("gemm_dev0", 3, 60, 20)  # device 0: 60..80
    t.launch("zero_len_kernel", 5, 55, 0)  # device 0: zero length
    t.launch("relu_dev1", 7, 20, 30, device=1)  # device 1: 20..50
    return t


@pytest.mark.slow
def test_zero_length_kernels_and_other_devices_are_not_the_primary_devices_kernel_time(
    con, tmp_path
):
    """Old kernels.py rule (``dur IS NOT NULL`` over every device): 4 kernels, 90 µs. The one rule
    (``ph = 'X' AND dur > 0``, per device): the primary device ran 2 kernels for 60 µs, its busy
    time; the zero-length kernel is no launch and device 1 has its own breakdown."""
    run = ingest_paths(con, [zero_and_two_devices(tmp_path).write(tmp_path / "z.json")])[0].run_id
    w = find_window(con, run, 0)
    busy = busy_summary(con, run, 0, w.start_ns, w.end_ns)
    assert busy.device == 0 and busy.busy_ns == 60_000
    kb = kernel_breakdown(con, run, 0, w)
    assert kb.n_kernels == 2 and kb.total_us == 60.0
    assert {r.name for r in kb.top} == {"gemm_dev0"}
    other = kernel_breakdown(con, run, 0, w, device=1)
    assert other.n_kernels == 1 and other.total_us == 30.0
    tc = tensor_core_summary(con, run, 0, w)
    assert tc.kernel_us == 60.0
    doc = analyze_run(con, run).to_json()
    assert doc["kernels"]["n_kernels"] == 2 and doc["kernels"]["total_us"] == 60.0


@pytest.mark.slow
def test_old_ranges_are_dropped_and_rebuilt_on_demand(con, two_ranks):
    """An index keeps the last MAX_PER_KIND gap tables: zooming through many ranges does not grow
    the connection's temp tables without bound, and a dropped range comes back right."""
    from gpuscope.analysis import rank_index

    with RankIndex(con, two_ranks, 0) as ix:
        first = busy_summary(con.cursor(), two_ranks, 0, 0, 60_000).busy_ns
        ranges = [(0, 60_000 + 10_000 * k) for k in range(rank_index.MAX_PER_KIND + 2)]
        names = [ix.gaps(*r)[0] for r in ranges]
        live = _temp_tables(con)
        assert names[0] not in live and names[-1] in live
        assert sum(n.startswith(ix.prefix) and "gaps" in n for n in live) == 2 * (
            rank_index.MAX_PER_KIND
        )
        again, _dev = ix.gaps(*ranges[0])
        assert again != names[0] and again in _temp_tables(con)
        idle = con.execute(f"SELECT coalesce(sum(ge - gs), 0) FROM {again}").fetchone()[0]
        assert 60_000 - idle == first == 10_000
        calls = []
        for k in range(6):
            ix.memo(("big", k), lambda k=k: calls.append(k) or k, keep=2)
        assert ix.memo(("big", 5), lambda: -1, keep=2) == 5  # kept
        assert ix.memo(("big", 0), lambda: -1, keep=2) == -1  # dropped, computed again


def test_host_table_holds_exactly_the_ranks_host_events_in_store_order(con, two_ranks):
    """host() stands in for ``events`` in the host-side queries: each query keeps its own filters, so
    it must hold every host-span row of the rank (every phase) and the fwd->bwd flow ends, in the
    store's order, and nothing of the other rank or of the GPU."""
    cols = "pid, tid, ph, cat, name_id, ts_ns, dur_ns, correlation, external_id"
    for rank in (0, 1):
        with RankIndex(con, two_ranks, rank) as ix:
            got = con.execute(f"SELECT {cols} FROM {ix.host()}").fetchall()
            want = con.execute(
                f"SELECT {cols} FROM events WHERE run_id = ? AND rank = ? AND "
                "(cat IN ('cpu_op', 'Operator', 'user_annotation', 'python_function', "
                "'python_function_call', 'cuda_runtime', 'cuda_driver', 'hip_runtime', "
                "'hip_driver', 'Runtime', 'Driver') OR (cat = 'fwdbwd' AND ph = 'f'))",
                [two_ranks, rank],
            ).fetchall()
            assert got == want and len(got) > 0
            assert not {r[3] for r in got} & {"kernel", "gpu_memcpy", "gpu_memset"}
            # the runtime table derived from it: the launch calls of the rank, as from events
            rt = con.execute(
                f"SELECT correlation, s, e, name_id, pid, tid FROM {ix.runtime()}"
            ).fetchall()
            rt_events = con.execute(
                "SELECT correlation, ts_ns, ts_ns + dur_ns, name_id, pid, tid FROM events "
                "WHERE run_id = ? AND rank = ? AND ph = 'X' AND cat IN ('cuda_runtime', "
                "'cuda_driver', 'hip_runtime', 'hip_driver', 'Runtime', 'Driver') "
                "AND correlation IS NOT NULL AND dur_ns IS NOT NULL",
                [two_ranks, rank],
            ).fetchall()
            assert rt == rt_events and len(rt) >= 4


class _CountingNames:
    """A DuckDB connection that counts the statements reading ``names``."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        self.reads = 0

    def execute(self, sql: str, params: object = None) -> object:
        self.reads += "FROM names" in sql
        return self.con.execute(sql) if params is None else self.con.execute(sql, params)


def test_name_ids_are_read_once_per_index_or_once_per_kept_connection_until_names_change():
    c = _CountingNames()
    c.con.execute("CREATE TABLE names (run_id VARCHAR, name_id INTEGER, name VARCHAR)")
    c.con.execute("INSERT INTO names VALUES ('r', 0, 'ncclDevKernel_AllReduce'), ('r', 1, 'gemm')")
    nccl = "starts_with(name, 'nccl')"
    a, b = RankIndex(c, "r", 0), RankIndex(c, "r", 1)  # type: ignore[arg-type]
    assert a.name_ids(nccl) == b.name_ids(nccl) == a.name_ids(nccl) == [0]
    assert c.reads == 2  # once per index
    assert (
        a.name_ids("name = $n", {"n": "gemm"}) == [1] and a.name_ids("name = $n", {"n": "x"}) == []
    )
    assert ids_param([]) == [NO_NAME] and ids_param([3]) == [3]

    keep_name_ids(c)  # the ranks of a part thread's scratch: one read for all of them
    c.reads = 0
    assert [RankIndex(c, "r", k).name_ids(nccl) for k in range(3)] == [[0]] * 3  # type: ignore[arg-type]
    assert c.reads == 1
    c.con.execute("INSERT INTO names VALUES ('r', 2, 'ncclDevKernel_Broadcast')")
    names_changed(c)  # whoever keeps them says when the names change
    assert RankIndex(c, "r", 3).name_ids(nccl) == [0, 2]  # type: ignore[arg-type]
    assert c.reads == 2


def test_the_registered_classes_of_names_are_read_in_one_statement():
    c = _CountingNames()
    c.con.execute("CREATE TABLE names (run_id VARCHAR, name_id INTEGER, name VARCHAR)")
    c.con.execute(
        "INSERT INTO names VALUES ('r', 0, 'ncclDevKernel_AllReduce'), ('r', 1, 'ProfilerStep#3'), "
        "('r', 2, 'cudaStreamSynchronize'), ('r', 3, NULL), ('s', 4, 'ProfilerStep#4')"
    )
    steps = name_class("regexp_matches(name, '^ProfilerStep#[0-9]+$')")
    sync = name_class("name IN ('cudaStreamSynchronize', 'cudaDeviceSynchronize')")
    ix = RankIndex(c, "r", 0)  # type: ignore[arg-type]
    assert ix.name_ids(steps) == [1]
    assert c.reads == 1
    assert ix.comm_name_ids() == [0] and ix.name_ids(sync) == [2]  # read with the first
    assert c.reads == 1
    assert ix.name_ids("name IS NULL") == [3] and c.reads == 2  # not registered: read alone
    assert RankIndex(c, "s", 0).name_ids(steps) == [4]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def scratch():  # type: ignore[no-untyped-def]
    """One DuckDB connection for the random examples below, each making its table afresh."""
    c = duckdb.connect()
    yield c
    c.close()


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 200), max_size=80, unique=True),
    values=st.lists(st.one_of(st.none(), st.integers(0, 200)), max_size=60),  # ids: 0 up
)
def test_in_ids_selects_exactly_the_ids_short_or_long(scratch, ids, values):
    c = scratch
    c.execute("CREATE OR REPLACE TABLE t (name_id INTEGER)")  # this example's values alone
    if values:
        c.execute("INSERT INTO t SELECT unnest($v::INTEGER[])", {"v": values})
    want = ids_param(sorted(ids))
    got = c.execute(
        f"SELECT name_id FROM t WHERE {in_ids('name_id', 'ids', want)}", {"ids": want}
    ).fetchall()
    assert sorted(r[0] for r in got) == sorted(v for v in values if v is not None and v in ids)
    flags = c.execute(
        f"SELECT coalesce({in_ids('name_id', 'ids', want)}, false) FROM t WHERE name_id IS NOT NULL",
        {"ids": want},
    ).fetchall()
    assert sum(f for (f,) in flags) == len(got)
    # the form follows the length: a hash join beyond SHORT_IDS
    assert ("ANY" in in_ids("x", "p", want)) == (len(want) > SHORT_IDS)


@pytest.mark.slow
def test_forget_values_lets_go_of_large_values_only_and_answers_stay_the_same(con, two_ranks):
    """Between a big rank's parts the index forgets its per-event arrays (launches, top-level
    spans) but keeps its tables and its other values (a value standing for a view it made must
    stay: making the view again fails); the answers after it are the ones before."""
    w = find_window(con, two_ranks, 0)
    before = kernel_breakdown(con, two_ranks, 0, w).to_json()
    idle_before = idle_analysis(con, two_ranks, 0, w).to_json()
    ix = RankIndex.shared(con, two_ranks, 0)
    kinds = {k[0] for k in ix._memo}
    assert {"launched", "toplevel", "idle_view"} <= kinds
    tables = _temp_tables(con)
    forget_values(con)
    kinds_after = {k[0] for k in ix._memo}
    assert not kinds_after & {"launched", "toplevel"}
    assert kinds - {"launched", "toplevel"} == kinds_after
    assert _temp_tables(con) == tables
    assert kernel_breakdown(con, two_ranks, 0, w).to_json() == before
    assert idle_analysis(con, two_ranks, 0, w).to_json() == idle_before
