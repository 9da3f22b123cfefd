"""A big rank's analysis in bounded memory (issue 45): the batched and SQL forms of the kernel
breakdown's top-level spans and the roofline's op calls give what the whole-at-once forms gave,
batch sizes are honoured, and ``analyze`` runs under DuckDB's working limit."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
from clitools import analysis_store, cli_in_process
from gpuscope.analysis import kernels as K
from gpuscope.analysis import roofline as R
from gpuscope.analysis.rank_index import (
    WORKING_MEMORY_LIMITS,
    RankIndex,
    limit_bytes,
    within_working_memory,
)
from gpuscope.analysis.steps import find_window
from gpuscope.ingest.loader import ingest_paths
from stored_samples import stored_spec_copy

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
GPT_MEM = SAMPLES / "memory" / "gpt_mem.pt.trace.json.gz"


def _nested(rng: np.random.Generator, lo: int, hi: int, depth: int, out: list[tuple[int, int]]):
    """Properly nested spans inside ``[lo, hi)``: children side by side (touching allowed, the
    first may start with its parent), each with children of its own."""
    t = lo
    while depth and t < hi - 2 and rng.random() < 0.8:
        s = t if rng.random() < 0.3 else int(rng.integers(t, hi - 1))
        e = int(rng.integers(s + 1, hi + 1))
        if (s, e) != (lo, hi):
            out.append((s, e))
            _nested(rng, s, e, depth - 1, out)
        t = e


def _brute_innermost(spans: list[tuple[int, int, int]], q: list[tuple[int, int]]) -> list[int]:
    """Per query (thread, time): the row of the span of that thread holding it that started last
    (the shorter on a tie), -1 where none."""
    out = []
    for qt, t in q:
        best = -1
        for i, (tid, s, e) in enumerate(spans):
            if tid == qt and s <= t < e:
                b = spans[best] if best >= 0 else None
                if b is None or (s, -(e - s)) > (b[1], -(b[2] - b[1])):
                    best = i
        out.append(best)
    return out


def test_innermost_rows_is_the_brute_force() -> None:
    rng = np.random.default_rng(45)
    for _ in range(20):
        spans: list[tuple[int, int, int]] = []
        for tid in (7, 3, 11):
            got: list[tuple[int, int]] = []
            _nested(rng, 0, 200, 4, got)
            spans += [(tid, s, e) for s, e in got]
        order = rng.permutation(len(spans))  # rows in no particular order
        spans = [spans[i] for i in order]
        q = [(int(rng.choice([7, 3, 11, 5])), int(rng.integers(-5, 210))) for _ in range(300)]
        a = np.asarray(spans, dtype=np.int64).reshape(-1, 3)
        qa = np.asarray(q, dtype=np.int64)
        got_rows = R.innermost_rows(a[:, 0], a[:, 1], a[:, 2], qa[:, 0], qa[:, 1])
        assert got_rows.tolist() == _brute_innermost(spans, q)


@pytest.mark.parametrize("batch", [1, 2, 5, 1000])
def test_toplevel_in_batches_is_toplevel_of_the_whole(batch: int) -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(1, 60))
        ts = np.sort(rng.integers(0, 100, n)).astype(np.int64)
        dur = rng.integers(0, 30, n).astype(np.int64)
        order = np.lexsort((-(ts + dur), ts))  # (start, longest first), as the SQL sorts
        ts, dur = ts[order], dur[order]
        nid = rng.integers(0, 9, n).astype(np.int64)
        want = K.toplevel(ts, ts + dur, nid)
        parts = [
            (ts[i : i + batch], dur[i : i + batch], nid[i : i + batch]) for i in range(0, n, batch)
        ]
        got = K.toplevel_of_batches(parts)
        for w, g in zip(want, (got.ts, got.end, got.name_id), strict=True):
            assert g.tolist() == w.tolist()


def test_toplevel_intervals_read_in_batches(con, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real trace, the thread's top-level spans read 7 rows at a time are those of the
    whole thread's spans at once, and no batch holds more than 7."""
    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    w = find_window(con, rid, 0)
    threads = K.launched(con, rid, 0, w.start_ns, w.end_ns).threads()
    assert threads
    seen: list[int] = []
    batches = K._span_batches

    def spy(c, sql, params, rows):  # type: ignore[no-untyped-def]
        assert rows == 7
        for b in batches(c, sql, params, rows):
            seen.append(len(b[0]))
            yield b

    monkeypatch.setattr(K, "TOPLEVEL_BATCH_ROWS", 7)
    monkeypatch.setattr(K, "_span_batches", spy)
    got = K.toplevel_intervals(con, rid, 0, threads)
    host = RankIndex.shared(con, rid, 0).host()
    for p, t in threads:
        ts, dur, nid = (
            np.asarray(c, dtype=np.int64)
            for c in zip(
                *con.execute(
                    f"""SELECT ts_ns, dur_ns, name_id FROM {host} WHERE pid = ? AND tid = ?
                        AND cat IN ('cpu_op', 'Operator') AND dur_ns IS NOT NULL""",
                    [p, t],
                ).fetchall(),
                strict=True,
            )
        )
        order = np.lexsort((-dur, ts))
        want = K.toplevel(ts[order], ts[order] + dur[order], nid[order])
        iv = got[(p, t)]
        assert (iv.ts.tolist(), iv.end.tolist()) == (want[0].tolist(), want[1].tolist())
        assert len(iv.ts) < len(ts)  # nested spans were there to drop
    assert seen and max(seen) <= 7 and sum(seen) > 7


def test_modelled_ops_are_the_ops_with_their_text(con) -> None:
    """The roofline's op calls (a signature id each) are the rows of the whole query with its
    text columns, and the working tables they came from are gone."""
    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    with R.modelled_ops(con, rid, 0, -(2**62), 2**62) as ops:
        oid, tid, s, e, sig = ops.overlapping(-(2**62), 2**62)
        n, sigs, fe = len(ops), ops.sigs, ops.foreach_frame()
        some = ops.overlapping(int(np.median(s)), int(np.median(s)))
    rows = con.execute(
        """SELECT e.tid, e.ts_ns, e.ts_ns + e.dur_ns, n.name, e.input_dims, e.input_types,
                  e.concrete_inputs
           FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
           WHERE e.run_id = ? AND e.rank = 0 AND e.ph = 'X' AND e.cat IN ('cpu_op', 'Operator')
             AND e.dur_ns IS NOT NULL
             AND (list_contains(?, n.name) OR starts_with(n.name, 'aten::_foreach_'))""",
        [rid, list(R.MODELS)],
    ).fetchall()
    got = [
        (t, a, b, *sigs[g])
        for t, a, b, g in zip(tid.tolist(), s.tolist(), e.tolist(), sig.tolist(), strict=True)
    ]
    key = lambda r: tuple("" if v is None else str(v) for v in r)  # noqa: E731
    assert len(rows) > 100 and sorted(got, key=key) == sorted(rows, key=key)
    assert len(set(sigs)) == len(sigs) < n == len(rows) and sorted(oid.tolist()) == list(range(n))
    assert len(fe) and fe["name"].str.startswith(R.FOREACH).all()
    assert set(fe.index) <= set(oid.tolist())
    t = int(np.median(s))  # a range of one time: the calls holding it, and only those
    assert 0 < len(some[0]) < n and ((some[2] <= t) & (some[3] > t)).all()
    left = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE '%roof%'"
    ).fetchone()
    assert left == (0,)


def test_roofline_in_small_batches_is_the_same(con, monkeypatch: pytest.MonkeyPatch) -> None:
    """The roofline of 5 launches at a time (the op calls of their range alone in Python) and of
    spans numbered 2 at a time is that of every launch and span at once."""
    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    w = find_window(con, rid, 0)
    dev = RankIndex.shared(con, rid, 0).primary_device(w.start_ns, w.end_ns)
    props = {"name": "NVIDIA H100 80GB HBM3"}
    whole = R.roofline(con, rid, 0, w, dev, props).to_json()
    ranges: list[int] = []
    overlapping = R.OpCalls.overlapping

    def spy(self, a, b, tids=None):  # type: ignore[no-untyped-def]
        got = overlapping(self, a, b, tids)
        assert tids is not None and len(tids) <= 5
        ranges.append(len(got[0]))
        return got

    monkeypatch.setattr(R.OpCalls, "overlapping", spy)
    monkeypatch.setattr(R, "LAUNCH_BATCH_ROWS", 5)
    assert R.roofline(con, rid, 0, w, dev, props).to_json() == whole
    assert whole["n_ops"] > 10 and len(ranges) > 10
    with R.modelled_ops(con, rid, 0, w.start_ns - 10**10, w.end_ns) as ops:
        assert max(ranges) < len(ops)  # no batch read every call


def _limit(con) -> int:
    """DuckDB's memory limit now, MB (rounded: it reads back in MiB to one decimal)."""
    row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    got = limit_bytes(str(row[0]))
    assert got is not None
    return round(got / 1e6)


def _mb(text: str) -> int:
    got = limit_bytes(text)
    assert got is not None
    return round(got / 1e6)


def test_within_working_memory_sets_and_restores_the_limit(con) -> None:
    own = con.execute("SELECT current_setting('memory_limit')").fetchone()
    first = _mb(WORKING_MEMORY_LIMITS[0])
    assert _limit(con) > first
    assert within_working_memory(con, lambda: _limit(con)) == first
    assert con.execute("SELECT current_setting('memory_limit')").fetchone() == own
    # a lower limit of the connection's own is kept: none of the working ones is tried
    con.execute("SET memory_limit = '100MB'")
    assert within_working_memory(con, lambda: _limit(con)) == 100
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "95.3 MiB"


def test_within_working_memory_tries_the_next_limit(con) -> None:
    """Out of memory at the first limit: the shared indexes' tables are dropped and the work runs
    again at the next; out of memory at the last: the error propagates, the limit set back."""
    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    ix = RankIndex.shared(con, rid, 0)
    seen: list[int] = []

    def compute() -> str:
        seen.append(_limit(con))
        if len(seen) == 1:
            ix.gpu()
            raise duckdb.OutOfMemoryException("out of memory")
        return "done"

    assert within_working_memory(con, compute) == "done"
    assert seen == [_mb(x) for x in WORKING_MEMORY_LIMITS[:2]]
    assert ix.table_names() == []  # closed between the tries
    own = con.execute("SELECT current_setting('memory_limit')").fetchone()

    def never() -> None:
        raise duckdb.OutOfMemoryException("out of memory")

    with pytest.raises(duckdb.OutOfMemoryException):
        within_working_memory(con, never)
    assert con.execute("SELECT current_setting('memory_limit')").fetchone() == own
    # the connection's own limit below the last working one: the second try is at its own
    con.execute("SET memory_limit = '512MB'")
    seen.clear()
    assert within_working_memory(con, compute, ("256MB", "1GB")) == "done"
    assert seen == [256, 512]
    assert _limit(con) == 512


def test_within_working_memory_skips_a_limit_too_small_for_the_largest_rank(
    con, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_ids``: a limit below the largest rank's events × WORKING_BYTES_PER_EVENT is not
    tried (the last always is); an unknown run or none given changes nothing."""
    from gpuscope.analysis import rank_index

    rid = ingest_paths(con, [GPT_MEM])[0].run_id
    (n,) = con.execute("SELECT max(n_events) FROM ranks WHERE run_id = ?", [rid]).fetchone()
    assert rank_index.largest_rank_events(con, [rid, "nosuchrun"]) == n > 0
    first = _mb(WORKING_MEMORY_LIMITS[0])
    per_event = -(-(first * 10**6 + 1) // n)  # the first limit just too small for the rank
    monkeypatch.setattr(rank_index, "WORKING_BYTES_PER_EVENT", per_event)
    assert within_working_memory(con, lambda: _limit(con), run_ids=[rid]) == _mb(
        WORKING_MEMORY_LIMITS[1]
    )
    assert within_working_memory(con, lambda: _limit(con), run_ids=["nosuchrun"]) == first
    assert within_working_memory(con, lambda: _limit(con)) == first
    monkeypatch.setattr(rank_index, "WORKING_BYTES_PER_EVENT", per_event - 1)  # it fits again
    assert within_working_memory(con, lambda: _limit(con), run_ids=[rid]) == first
    monkeypatch.setattr(rank_index, "WORKING_BYTES_PER_EVENT", 10**9)  # none fits: the last
    assert within_working_memory(con, lambda: _limit(con), run_ids=[rid]) == _mb(
        WORKING_MEMORY_LIMITS[-1]
    )


def test_limit_bytes() -> None:
    assert limit_bytes("256MB") == 256 * 10**6
    assert limit_bytes("18.6 GiB") == int(18.6 * 2**30)
    assert limit_bytes("1 KiB") == 1024
    assert limit_bytes("lots") is None


def stored_m(tmp_path: Path) -> str:
    """The test's own store for ``--db`` (clitools.analysis_store) holding GPT_MEM as stored by
    ``gpuscope ingest GPT_MEM --name m``: the set-up, not the subject, so a copy of the store made
    once for the process (tests/stored_samples.py)."""
    db = analysis_store(tmp_path)

    def build(spec: Path | str) -> None:
        r = cli_in_process("ingest", str(GPT_MEM), "--db", str(spec), "--name", "m")
        assert r.returncode == 0, r.stderr

    stored_spec_copy(
        "gpuscope ingest sample_traces/memory/gpt_mem.pt.trace.json.gz --name m", build, db
    )
    return str(db)


def test_cli_analyze_runs_under_the_working_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpuscope analyze`` computes a run's analysis (no stored document: ``--peak-tflops``
    asks for another view than the stored one) with DuckDB's limit at the first working one, and
    prints the same JSON."""
    from gpuscope.analysis import report_part

    db = stored_m(tmp_path)
    seen: list[int] = []
    analyze = report_part.analyze

    def spy(con, run_id, **kw):  # type: ignore[no-untyped-def]
        seen.append(_limit(con))
        return analyze(con, run_id, **kw)

    monkeypatch.setattr(report_part, "analyze", spy)
    r = cli_in_process("analyze", "m", "--json", "--peak-tflops", "500", "--db", db)
    assert r.returncode == 0, r.stderr
    assert seen == [_mb(WORKING_MEMORY_LIMITS[0])]
    assert json.loads(r.stdout)["roofline"]["n_ops"] > 10
    # a rank too big for the first limit: the analysis starts at the next, the same JSON
    from gpuscope.analysis import rank_index

    monkeypatch.setattr(rank_index, "WORKING_BYTES_PER_EVENT", 10**4)
    seen.clear()
    big = cli_in_process("analyze", "m", "--json", "--peak-tflops", "500", "--db", db)
    assert big.returncode == 0, big.stderr
    assert seen == [_mb(WORKING_MEMORY_LIMITS[1])]
    assert big.stdout == r.stdout


@pytest.mark.parametrize(
    ("module", "name", "args"),
    [
        ("gpuscope.analysis.report", "analyze_run", ("check", "m", "--max-idle-pct", "100")),
        ("gpuscope.analysis.report", "analyze_run", ("check", "m", "--baseline", "m")),
        ("gpuscope.analysis.compare", "compare_runs", ("compare", "m", "m", "--json")),
    ],
)
def test_cli_check_and_compare_run_under_the_working_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, name: str, args: tuple[str, ...]
) -> None:
    """``gpuscope check`` (bounds or a baseline) and ``gpuscope compare`` analyse with DuckDB's
    limit at the first working one (the working tables spill beyond it), and answer as before."""
    import importlib

    db = stored_m(tmp_path)
    target = importlib.import_module(module)
    real = getattr(target, name)
    seen: list[int] = []

    def spy(con, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append(_limit(con))
        return real(con, *a, **kw)

    monkeypatch.setattr(target, name, spy)
    r = cli_in_process(*args, "--db", db)
    assert r.returncode == 0, r.stderr
    assert seen and set(seen) == {_mb(WORKING_MEMORY_LIMITS[0])}
    if args[0] == "compare":  # a run against itself
        doc = json.loads(r.stdout)
        assert doc["a"]["id"] == doc["b"]["id"] and doc["speedup"] == 1.0
    elif "--baseline" in args:
        assert r.stdout.strip().endswith(
            "ok: no metric worse than the baseline beyond noise and threshold"
        )
    else:
        assert r.stdout.strip().endswith("rank 0: ok")
