"""Cuts at Kineto's separator handed on unproven: the batch's parse is the proof
(gpuscope.ingest.parse_pool, json_stream.UnprovenCut). Events, their indexes in error messages and
notes are those of the proven split; a file laid out so that the separator falls inside an event
is split again from that batch, every cut proven."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.ingest import json_stream, parse_pool, source
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.parse_pool import ParsePool
from gpuscope.store import connect
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ingest_stream import kineto_layout

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

# an event whose args hold a list laid out so that Kineto's separator between events
# ("\n  },\n  {") appears inside it, at depth 4: a cut there is not between events
INNER = '[{"x": 1\n  },\n  {"y": 2}]'


def evil(name: str) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": 1.0, "dur": 1.0, "args": {"l": "@@"}}


def layout(events: list, evil_at: set[int]) -> bytes:
    for i in evil_at:
        events[i] = evil(events[i]["name"])
    return kineto_layout({"schemaVersion": 1}, events).replace(b'"@@"', INNER.encode())


def plain(n: int) -> list:
    return [
        {"ph": "X", "cat": "cpu_op", "name": f"e{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(n)
    ]


def pooled(path: Path, *, prove: bool = False, jobs: int = 2) -> list:
    """The names of the events the pool parses, in order, and the batches at which it split the
    file again (``prove``: the splitter proves every cut)."""
    restarts: list[int] = []
    pool = ParsePool([path], jobs, prove_cuts=prove)
    restart = pool._restart

    def spy(index: int, written: int) -> None:
        restarts.append(written)
        restart(index, written)

    pool._restart = spy  # type: ignore[method-assign]
    names = []
    with pool:
        for pb in pool.batches(path):
            names += pb.parsed.table.column("name").to_pylist()
    return [names, restarts]


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def use(batch: int, chunk: int) -> None:
        monkeypatch.setattr(json_stream, "BATCH_BYTES", batch)
        monkeypatch.setattr(
            parse_pool, "iter_json_bytes", lambda p: source.iter_json_bytes(p, chunk=chunk)
        )

    return use


def test_a_cut_inside_an_event_is_split_again_from_that_batch(tmp_path, small_batches) -> None:
    # the whole file in one chunk: the fast cut is at the file's last separator, inside the last
    # event; its parse refuses the batch, so the pool splits the file again, proving every cut
    small_batches(256, 1 << 20)
    events = plain(20)
    raw = layout(events, {19})
    path = tmp_path / "t.json"
    path.write_bytes(raw)
    names, restarts = pooled(path)
    assert names == [e["name"] for e in json.loads(raw)["traceEvents"]]
    assert restarts == [0]
    # the same file, a separator inside an event that is not where any cut falls: no second split
    raw = layout(plain(20), {3})
    path.write_bytes(raw)
    names, restarts = pooled(path)
    assert names == [e["name"] for e in json.loads(raw)["traceEvents"]] and restarts == []


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 40),
    evil_at=st.sets(st.integers(0, 39), max_size=4),
    bad_ts=st.booleans(),
    chunk=st.integers(16, 400),
    batch=st.integers(32, 800),
    jobs=st.integers(1, 3),
)
def test_unproven_cuts_give_the_proven_splits_events(
    tmp_path_factory, small_batches, n, evil_at, bad_ts, chunk, batch, jobs
) -> None:
    """Random files of Kineto's layout with separators inside events, in random chunks and
    batches: the pool's events are json.loads's, in order, or, for an event whose time is not a
    number, the same error, naming its index, as with every cut proven."""
    small_batches(batch, chunk)
    events: list = plain(n)
    if bad_ts:
        events[n - 1]["ts"] = "late"
    raw = layout(events, {i for i in evil_at if i < n - int(bad_ts)})
    path = tmp_path_factory.mktemp("u") / "t.json"
    path.write_bytes(raw)

    def run(prove: bool) -> object:
        try:
            return pooled(path, prove=prove, jobs=jobs)[0]
        except IngestError as e:
            return str(e)

    got = run(False)
    assert got == run(True)
    if not bad_ts:
        assert got == [e["name"] for e in json.loads(raw)["traceEvents"]]
    else:
        assert f"traceEvents[{n - 1}].ts: expected a number" in str(got)


def test_the_index_in_an_error_and_a_note_counts_the_events_of_unproven_batches(
    tmp_path, small_batches
) -> None:
    # many fast cuts before the bad event, none proven by the splitter: the index is exact
    small_batches(300, 100)
    events = plain(60)
    events[41]["args"] = {"grid": "grid(100,)"}  # a value of an odd type: kept, and noted
    path = tmp_path / "noted.json"
    path.write_bytes(kineto_layout({"schemaVersion": 1}, events))
    with connect(tmp_path / "s") as con:
        result = ingest_paths(con, [path])[0]
        assert any("traceEvents[41].args.grid" in w for w in result.warnings), result.warnings
        events[41]["args"] = {}
        events[37]["ts"] = "abc"
        bad = tmp_path / "bad.json"
        bad.write_bytes(kineto_layout({"schemaVersion": 1}, events))
        before = con.execute("SELECT count(*) FROM events").fetchone()
        with pytest.raises(IngestError, match=r"traceEvents\[37\]\.ts: expected a number"):
            ingest_paths(con, [bad])
        assert con.execute("SELECT count(*) FROM events").fetchone() == before
