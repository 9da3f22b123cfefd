"""The analyses a big rank's ingest runs after its commit give what they gave before they were
made cheaper (issue 45): each faster form against the form it replaced, kept here as the
reference (hypothesis over arbitrary inputs, overlapping and tied spans included)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpuscope.analysis import roofline as R
from gpuscope.analysis.json_row import JsonRow
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.steps import Window, find_window
from gpuscope.ingest.loader import ingest_paths
from hypothesis import example, given, settings
from hypothesis import strategies as st


def _stack_parents(tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The parents as :func:`~gpuscope.analysis.roofline.innermost_rows` found them before
    :func:`~gpuscope.analysis.roofline.parents`: one pass with a stack of the thread's open spans
    (pop the ended ones; the top is the parent)."""
    parent = np.full(len(starts), -1, dtype=np.int64)
    stack: list[tuple[int, int]] = []
    prev = None
    for k, (t, s, e) in enumerate(zip(tids.tolist(), starts.tolist(), ends.tolist(), strict=True)):
        if t != prev:
            stack, prev = [], t
        while stack and stack[-1][1] <= s:
            stack.pop()
        parent[k] = stack[-1][0] if stack else -1
        stack.append((k, e))
    return parent


def count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Wrap ``module.name`` so that each call appends 1 to the returned list (then runs it)."""
    real = getattr(module, name)
    calls: list[int] = []

    def spy(*a: Any) -> Any:
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(module, name, spy)
    return calls


_span = st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 40))


@settings(max_examples=300, deadline=None)
@given(st.lists(_span, max_size=80))
def test_parents_are_the_stack_pass(spans: list[tuple[int, int, int]]) -> None:
    """Any spans (overlapping, nested, tied, empty; several threads), sorted as innermost_rows
    sorts them: the pointer-jumping parents are the stack's."""
    a = np.asarray(spans, dtype=np.int64).reshape(-1, 3)
    tids, starts, ends = a[:, 0], a[:, 1], a[:, 1] + a[:, 2]
    order = np.lexsort((-(ends - starts), starts, tids))
    t, s, e = tids[order], starts[order], ends[order]
    assert R.parents(t, s, e).tolist() == _stack_parents(t, s, e).tolist()


def test_parents_of_a_long_run_of_siblings() -> None:
    """100,000 side-by-side spans under one parent, and a nest 500 deep: the stack's parents."""
    n = 100_000
    starts = np.concatenate([[0], np.arange(1, n + 1, dtype=np.int64) * 10])
    ends = np.concatenate([[10 * n + 20], starts[1:] + 5])
    tids = np.zeros(n + 1, dtype=np.int64)
    assert R.parents(tids, starts, ends).tolist() == _stack_parents(tids, starts, ends).tolist()
    deep = np.arange(500, dtype=np.int64)
    got = R.parents(np.zeros(500, dtype=np.int64), deep, 1000 - deep)
    assert got.tolist() == list(range(-1, 499))


# -- on a real trace --------------------------------------------------------------------------


SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
GPT_MEM = SAMPLES / "memory" / "gpt_mem.pt.trace.json.gz"


def _old_count_events(con, run_id: str, rank: int, ws: int, we: int, device: int | None) -> int:
    """critical_path.count_events as it read ``events`` before it read the index's tables."""
    from gpuscope.analysis.critical_path import GPU_CATS, HOST_CATS
    from gpuscope.analysis.store_access import sql_list

    row = con.execute(
        f"""SELECT count(*) FILTER (WHERE e.cat IN {sql_list(HOST_CATS)} AND e.dur_ns IS NOT NULL)
                 + count(*) FILTER (WHERE e.cat IN {sql_list(GPU_CATS)} AND e.dur_ns > 0
                                    AND coalesce(e.device, CAST(e.pid AS INTEGER)) = ?)
            FROM events e
            WHERE e.run_id = ? AND e.rank = ? AND e.ph = 'X'
              AND e.ts_ns < ? AND e.ts_ns + e.dur_ns > ?""",
        [-1 if device is None else int(device), run_id, int(rank), int(we), int(ws)],
    ).fetchone()
    return int(row[0] or 0) if row else 0


@pytest.mark.memory_store
def test_count_events_from_the_index_is_the_events_count(con) -> None:
    """The critical path's event count from the rank index's tables equals the count over
    ``events`` it replaced, for windows over the whole trace, parts of it and none of it, on the
    primary device, another and none."""
    from gpuscope.analysis.critical_path import count_events

    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    w = find_window(con, rid, 0)
    lo, hi = con.execute(
        "SELECT min(ts_ns), max(ts_ns + coalesce(dur_ns, 0)) FROM events WHERE run_id = ?", [rid]
    ).fetchone()
    dev = RankIndex.shared(con, rid, 0).primary_device(w.start_ns, w.end_ns)
    rng = np.random.default_rng(45)
    cuts = [(w.start_ns, w.end_ns), (lo - 1, hi + 1), (hi + 10, hi + 20)]
    cuts += [tuple(sorted(int(x) for x in rng.integers(lo, hi, 2))) for _ in range(8)]
    seen = 0
    for ws, we in cuts:
        for d in (dev, None, 12345):
            win = Window(int(ws), int(we), [])
            got = count_events(con, rid, 0, win, d)
            assert got == _old_count_events(con, rid, 0, int(ws), int(we), d)
            seen += got
    assert seen > 0


@pytest.mark.memory_store
def test_kernel_breakdown_is_computed_once_per_window(con, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ingest's kernels part and its analyze document ask for the same breakdown: computed
    once per rank index, range, device and row counts; each caller gets its own copy."""
    from gpuscope.analysis import kernels as K

    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    w = find_window(con, rid, 0)
    calls: list[tuple[int, int]] = []
    compute = K._kernel_breakdown

    def spy(c, r, k, ws, we, *a):  # type: ignore[no-untyped-def]
        calls.append((ws, we))
        return compute(c, r, k, ws, we, *a)

    monkeypatch.setattr(K, "_kernel_breakdown", spy)
    first = K.kernel_breakdown(con, rid, 0, w)
    want = first.to_json()
    assert want["n_kernels"] > 0 and want["top"]
    first.top.clear()
    first.by_category.clear()
    assert K.kernel_breakdown(con, rid, 0, w).to_json() == want
    assert len(calls) == 1
    K.kernel_breakdown(con, rid, 0, w, top_n=3)
    half = Window(w.start_ns, (w.start_ns + w.end_ns) // 2, [])
    K.kernel_breakdown(con, rid, 0, half)
    assert len(calls) == 3


@pytest.mark.memory_store
def test_busy_split_is_computed_once_per_window(con, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ingest's rank_row part and its analyze document split the same busy time: computed
    once per rank index, range, device and waits; each caller gets its own copy."""
    import pandas as pd
    from gpuscope.analysis import busy as B

    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    w = find_window(con, rid, 0)
    dev = RankIndex.shared(con, rid, 0).primary_device(w.start_ns, w.end_ns)
    calls = count_calls(monkeypatch, B, "_busy_split")
    first = B.busy_split(con, rid, 0, w.start_ns, w.end_ns, dev)
    want = dataclasses.asdict(first)
    assert want["compute_ns"] > 0
    first.compute_ns = -1
    assert dataclasses.asdict(B.busy_split(con, rid, 0, w.start_ns, w.end_ns, dev)) == want
    assert len(calls) == 1
    waits = pd.DataFrame({"start_ns": [w.start_ns], "end_ns": [w.start_ns + 5], "wait_ns": [2]})
    B.busy_split(con, rid, 0, w.start_ns, w.end_ns, dev, waits)
    B.busy_split(con, rid, 0, w.start_ns + 1, w.end_ns, dev)
    assert len(calls) == 3


@pytest.mark.memory_store
def test_store_rows_replaces_only_the_pairs_it_is_given(con) -> None:
    """One DELETE for every (rank, part) pair: those rows replaced, other ranks', parts' and
    runs' rows kept."""
    from gpuscope.analysis import rank_summary as RS

    a, b = RS.PARTS["headline"], RS.PARTS["kernels"]
    old = [
        [run, rank, p.name, p.version, "{}", RS.now_utc()]
        for run in ("r1", "r2")
        for rank in (0, 1)
        for p in (a, b)
    ]
    con.executemany("INSERT INTO rank_summaries VALUES (?, ?, ?, ?, ?, ?)", old)
    new = [["r1", 0, a.name, a.version, '{"new": 1}', RS.now_utc()]]
    RS._store_rows(con, "r1", [(0, a), (1, b)], new)
    got = con.execute("SELECT run_id, rank, part, doc FROM rank_summaries ORDER BY ALL").fetchall()
    assert got == [
        ("r1", 0, "headline", '{"new": 1}'),
        ("r1", 0, "kernels", "{}"),
        ("r1", 1, "headline", "{}"),
        ("r2", 0, "headline", "{}"),
        ("r2", 0, "kernels", "{}"),
        ("r2", 1, "headline", "{}"),
        ("r2", 1, "kernels", "{}"),
    ]


@dataclasses.dataclass(frozen=True)
class _Inner(JsonRow):
    a: Any
    b: Any = None


@dataclasses.dataclass(frozen=True)
class _Outer(JsonRow):
    x: Any
    y: Any
    z: Any = 0


_plain = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)
)
_value = st.recursive(
    _plain,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
        st.builds(_Inner, inner, inner),
        st.builds(np.float64, st.floats(allow_nan=False)),
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(_value, _value, _value)
@example([_Inner(1, [2])], (_Inner(2), 3), {"k": _Inner(None, {"j": [1.5]})})
@example(np.float64(1.5), [1, 2], "s")
def test_json_row_is_asdict(x: Any, y: Any, z: Any) -> None:
    """A record's JSON is :func:`dataclasses.asdict` of it, value for value and type for type,
    whether its fields are plain values, nested records, containers or numpy scalars; the plain
    form is a new dict each time."""
    rec = _Outer(x, y, z)
    got, want = rec.to_json(), dataclasses.asdict(rec)
    assert repr(got) == repr(want) and got == want
    assert rec.to_json() is not got
    for k, v in zip("xyz", (x, y, z), strict=True):
        if isinstance(v, list | dict):  # a copy, as asdict's: the record's own stays unshared
            assert got[k] is not v


@pytest.mark.memory_store
def test_busy_summary_is_computed_once_per_window(con, monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps and rank_row parts and the analyze document read the same busy summary:
    computed once per rank index, range and per_stream; each caller gets frames of its own."""
    from gpuscope.analysis import busy as B

    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    w = find_window(con, rid, 0)
    calls = count_calls(monkeypatch, B, "_devices")
    first = B.busy_summary(con, rid, 0, w.start_ns, w.end_ns)
    want = first.to_json()
    assert want["busy_us"] > 0 and want["streams"]
    first.devices["busy_ns"] = -1  # the caller's frames: the kept summary's stay as they were
    first.streams["busy_ns"] = -1
    assert B.busy_summary(con, rid, 0, w.start_ns, w.end_ns).to_json() == want
    assert len(calls) == 1
    flat = B.busy_summary(con, rid, 0, w.start_ns, w.end_ns, per_stream=False)
    assert flat.busy_ns == first.busy_ns > 0 and flat.streams.empty
    B.busy_summary(con, rid, 0, w.start_ns + 1, w.end_ns)
    assert len(calls) == 3


def _range_join_extents(con, bounds: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """modules._phase_spans' step extents as it joined every span against every step before
    :func:`~gpuscope.analysis.modules.step_extents`."""
    return {
        int(k): (int(s), int(e))
        for k, s, e in con.execute(
            """WITH st AS (SELECT unnest($a) AS a, unnest($b) AS b, unnest($k) AS k)
               SELECT st.k, min(sp.s), max(sp.e) FROM sp JOIN st ON sp.s < st.b AND sp.e > st.a
               GROUP BY st.k""",
            {
                "a": [a for a, _ in bounds] or [0],
                "b": [b for _, b in bounds] or [0],
                "k": list(range(len(bounds))) or [-1],
            },
        ).fetchall()
        if k >= 0
    }


_range = st.tuples(st.integers(-5, 80), st.integers(0, 30))


@pytest.fixture(scope="module")
def scratch() -> Any:
    """One DuckDB connection for the module's random examples, each of which makes its own table
    afresh (a new connection and table cost 13 ms of CPU, ``executemany`` of 30 rows 13 ms more:
    most of an example)."""
    import duckdb

    con = duckdb.connect()
    yield con
    con.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(_range, max_size=60), st.lists(st.tuples(st.integers(-5, 80), st.integers(-3, 30))))
def test_step_extents_are_the_range_join(
    scratch: Any, spans: list[tuple[int, int]], steps: list[tuple[int, int]]
) -> None:
    """Any spans (nested, overlapping, tied, empty) and any ranges (tiling or not, empty or
    reversed ones):
    each range's least start and greatest end of the spans overlapping it are the range join's."""
    from gpuscope.analysis.modules import step_extents

    con = scratch
    con.execute("CREATE OR REPLACE TABLE sp (s BIGINT, e BIGINT)")  # this example's spans alone
    if spans:
        con.execute(
            "INSERT INTO sp SELECT unnest($s::BIGINT[]), unnest($e::BIGINT[])",
            {"s": [s for s, _ in spans], "e": [s + d for s, d in spans]},
        )
    bounds = [(a, a + w) for a, w in steps]
    assert step_extents(con, "SELECT s, e FROM sp", {}, bounds) == _range_join_extents(con, bounds)


@pytest.mark.memory_store
def test_kept_busy_splits_are_bounded(con, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank index keeps the last MEMO_KEEP busy splits (a page that asks for many windows does
    not grow it without bound): the oldest is computed again, the newest is not."""
    from gpuscope.analysis import busy as B

    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    w = find_window(con, rid, 0)
    dev = RankIndex.shared(con, rid, 0).primary_device(w.start_ns, w.end_ns)
    calls: list[int] = []
    compute = B._busy_split

    def spy(*a):  # type: ignore[no-untyped-def]
        calls.append(a[1])
        return compute(*a)

    monkeypatch.setattr(B, "_busy_split", spy)
    starts = [w.start_ns + k for k in range(B.MEMO_KEEP + 1)]
    for s in starts:
        B.busy_split(con, rid, 0, s, w.end_ns, dev)
    B.busy_split(con, rid, 0, starts[-1], w.end_ns, dev)
    assert calls == starts
    B.busy_split(con, rid, 0, starts[0], w.end_ns, dev)
    assert calls == [*starts, starts[0]]
