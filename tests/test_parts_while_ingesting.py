"""Each rank's summary parts computed on other threads while the ingest parses the next ranks
(gpuscope.analysis.rank_summary.PartsWhileIngesting, fed by gpuscope.ingest.rank_rows): the same
rows as the parts computed from the store after the ingest, a failure anywhere rolls the ingest
back, and the writer waits when the part threads fall behind (bounded memory)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import duckdb
import pytest
from clitools import run_cli
from gpuscope.analysis import rank_summary as RS
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.ingest import loader
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.rank_rows import RankRows
from gpuscope.store import RUN_TABLES, connect, transaction
from gpuscope.store.schema import EVENTS, NAMES
from tracegen import TraceBuilder

REPO = Path(__file__).resolve().parent.parent
DDP = REPO / "sample_traces" / "ddp"


def ranks_folder(folder: Path, n: int) -> Path:
    """``n`` rank files of 3 steps; rank r runs r + 1 kernels per step (so r + 1 sizes differ),
    the last rank's ``distributedInfo`` written after its events (its rank is learned late)."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(n):
        t = TraceBuilder(rank=rank, world_size=n)
        for s in range(3):
            t0 = 1000.0 + 100.0 * s
            t.step(s, t0, 100.0)
            for k in range(rank + 1):
                t.launch("volta_sgemm_128x64_nn", t0 + 1.0 + k, t0 + 5.0 + 10 * k, 8.0)
        d = t.to_dict()
        if rank == n - 1:
            d["distributedInfo"] = d.pop("distributedInfo")  # after traceEvents
        # no rank in the file name: the late rank is found from its distributedInfo only
        (folder / f"worker{chr(97 + rank)}.json").write_text(json.dumps(d))
    return folder


def parts_of(con, run_id: str) -> dict[tuple[int, str], dict]:  # type: ignore[no-untyped-def]
    rows = con.execute(
        "SELECT rank, part, version, doc FROM rank_summaries WHERE run_id = ? AND part <> 'report'",
        [run_id],
    ).fetchall()  # the ranks' parts (the run's analyze document, report_part, is the run's)
    return {(r, p): (v, json.loads(d)) for r, p, v, d in rows}


def serial(con, result) -> None:  # type: ignore[no-untyped-def]
    """The parts computed from the store after the ingest, as before the sink (no rank_sink)."""
    RS.write_rank_summaries(con, str(result.run_id), RS.EVERY_RANK)


@pytest.mark.parametrize("kept", [10**9, 8])
def test_parts_made_while_ingesting_are_those_made_from_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: int
) -> None:
    # kept=8: ranks of over 8 events are too big to keep, their parts come from the store
    monkeypatch.setattr(loader, "MAX_KEPT_EVENTS", kept)
    computed: list[int] = []
    held: set[tuple[str, ...]] = set()
    original = RS.PartsWhileIngesting._compute

    def spy(self, batch: list[RankRows]) -> list:  # type: ignore[no-untyped-def]
        computed.extend(rows.rank for rows in batch)
        held.update(tuple(f"{f.name}:{f.type}" for f in rows.events.schema) for rows in batch)
        return original(self, batch)

    monkeypatch.setattr(RS.PartsWhileIngesting, "_compute", spy)
    for i, folder in enumerate([DDP, ranks_folder(tmp_path / "t", 5)]):
        with connect(tmp_path / f"a{i}") as con:
            run_id = ingest_paths(con, [folder], after_trace=RS.store_after_ingest)[0].run_id
            made = parts_of(con, run_id)
        with connect(tmp_path / f"b{i}") as con:
            assert ingest_paths(con, [folder], after_trace=serial)[0].run_id == run_id
            assert made == parts_of(con, run_id)
        assert {r for r, _ in made} == set(range(2 if i == 0 else 5))
    if kept > 100:  # every rank of both runs but the late one (its rows say another rank)
        assert sorted(computed) == [0, 0, 1, 1, 2, 3]
        # the rows kept for the part threads: the columns the parts read (the same parts as
        # from the store's every column), the run id as a dictionary
        from gpuscope.analysis.rank_frames import COLUMNS

        (schema,) = held
        assert [f.split(":")[0] for f in schema] == [
            c.name for c in EVENTS.columns if c.name in COLUMNS
        ]
        assert set(COLUMNS) < {
            c.name for c in EVENTS.columns
        } and "run_id:dictionary<values=string" in str(schema)
    else:
        assert computed == []


def counts(con) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES}


def test_a_part_failing_on_its_thread_fails_the_ingest_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    def broken(con, run_id: str, rank: int) -> dict:  # type: ignore[no-untyped-def]
        if threading.current_thread() is threading.main_thread():
            return {}  # only the sink's threads fail: the failure must come from there
        raise IngestError(f"rank {rank}", "summary part failed")

    monkeypatch.setitem(RS.PARTS, "broken", RS.SummaryPart("broken", 1, "fails", broken))
    monkeypatch.setattr(RS, "EVERY_RANK", (*RS.EVERY_RANK, "broken"))
    db = tmp_path / "s"
    with connect(db) as con:
        before = counts(con)
    code, out, err = run_cli(capsys, "ingest", str(DDP), "--db", str(db))
    assert code != 0 and out == ""
    assert err.strip().splitlines() == ["gpuscope: rank 0: summary part failed"]
    with connect(db) as con:
        assert counts(con) == before  # nothing half-written


def empty_rows(rank: int) -> RankRows:
    con = duckdb.connect()
    con.execute(EVENTS.ddl(keys=False))
    con.execute(NAMES.ddl(keys=False))
    return RankRows(
        "r1",
        rank,
        con.execute("SELECT * FROM events").to_arrow_table(),
        [],
        [],
        con.execute("SELECT * FROM names").to_arrow_table(),
    )


def test_the_writer_waits_when_the_part_threads_fall_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def slow(con, run_id: str, rank: int) -> dict:  # type: ignore[no-untyped-def]
        assert release.wait(60)
        return {"rank": rank}

    monkeypatch.setitem(RS.PARTS, "slow", RS.SummaryPart("slow", 1, "waits", slow))
    monkeypatch.setattr(RS, "BATCH_RANKS", 2)
    sink = RS.PartsWhileIngesting("r1", ["slow"], jobs=1)
    handed: list[int] = []

    def writer() -> None:
        for rank in range(5):
            sink.rank_written(empty_rows(rank))
            handed.append(rank)

    t = threading.Thread(target=writer)
    try:
        t.start()
        end = time.monotonic() + 30
        while len(handed) < 3 and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.5)
        # batches of two: one computing (ranks 0, 1), one waiting (2, 3): the hand-over that
        # fills the second batch waits for the thread
        assert handed == [0, 1, 2] and t.is_alive()
        release.set()
        t.join(30)
        assert handed == [0, 1, 2, 3, 4]
        with connect(tmp_path / "s") as con, transaction(con):
            sink.store(con)
            docs = con.execute(
                "SELECT rank, doc FROM rank_summaries WHERE part = 'slow' ORDER BY rank"
            ).fetchall()
        assert [(r, json.loads(d)) for r, d in docs] == [(r, {"rank": r}) for r in range(5)]
    finally:
        release.set()
        sink.close()


def test_a_rank_that_failed_stops_the_ingest_at_the_next_hand_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(con, run_id: str, rank: int) -> dict:  # type: ignore[no-untyped-def]
        raise ValueError(f"part of rank {rank} failed")

    monkeypatch.setitem(RS.PARTS, "broken", RS.SummaryPart("broken", 1, "fails", broken))
    monkeypatch.setattr(RS, "BATCH_RANKS", 1)
    sink = RS.PartsWhileIngesting("r1", ["broken"], jobs=1)
    try:
        sink.rank_written(empty_rows(0))
        sink._futures[0].exception(timeout=30)  # rank 0 has failed on its thread
        with pytest.raises(ValueError, match="part of rank 0 failed"):
            sink.rank_written(empty_rows(1))  # not at the end of the ingest: at once
    finally:
        sink.close()


def test_a_sink_that_cannot_start_fails_the_ingest_stops_its_threads_and_writes_nothing(
    tmp_path: Path,
) -> None:
    class NoSink(RS.StoreAfterIngest):
        def rank_sink(self, run_id: str, jobs: int) -> RS.PartsWhileIngesting:
            raise RuntimeError(f"no part threads for run {run_id}")

    with connect(tmp_path / "s") as con:
        before = counts(con)
        with pytest.raises(RuntimeError, match=r"no part threads for run [0-9a-f]{12}"):
            ingest_paths(con, [DDP], after_trace=NoSink())
        assert counts(con) == before  # nothing half-written
    end = time.monotonic() + 10
    while time.monotonic() < end and any(
        t.name.startswith("gpuscope-parse") for t in threading.enumerate()
    ):
        time.sleep(0.05)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("gpuscope-")]


def handed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int) -> list[RankRows]:
    """The rows the ingest hands each rank's part thread (``ranks_folder`` of ``n`` ranks), by
    rank; their parts are computed as usual."""
    handed: list[RankRows] = []
    original = RS.PartsWhileIngesting._compute

    def spy(self, batch: list[RankRows]) -> list:  # type: ignore[no-untyped-def]
        handed.extend(batch)
        return original(self, batch)

    with monkeypatch.context() as m:
        m.setattr(RS.PartsWhileIngesting, "_compute", spy)
        with connect(tmp_path / "s") as con:
            ingest_paths(con, [ranks_folder(tmp_path / "t", n)], after_trace=RS.store_after_ingest)
    return sorted(handed, key=lambda r: r.rank)


def test_a_part_thread_reuses_one_scratch_database_that_holds_only_the_batch_at_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch of ranks runs in one scratch database of its thread: a part computed rank by
    rank sees that rank's events alone and the batch's ``ranks`` rows; a batched part after it
    reads every rank of the batch (the same rank in two batches gets the same part)."""
    # each rank's rows as the ingest hands them over (ranks of 1..4 kernels per step)
    handed = handed_over(tmp_path, monkeypatch, 4)
    assert len(handed) == 3  # the late rank (its rows say another rank) is computed after
    # each rank gets its own `ranks` row, not every rank's so far (a quadratic copy)
    assert [[row[1] for row in r.ranks] for r in handed] == [[0], [1], [2]]

    seen: list[tuple[int, dict[str, int]]] = []

    def probe(con, run_id: str, rank: int) -> dict:  # type: ignore[no-untyped-def]
        def one(sql: str) -> int:
            return int(con.execute(sql).fetchone()[0])

        seen.append(
            (
                id(con),
                {
                    "events": one("SELECT count(*) FROM events"),
                    "event_ranks": one("SELECT count(DISTINCT rank) FROM events"),
                    "names": one("SELECT count(*) FROM names"),
                    "ranks": one("SELECT count(*) FROM ranks"),
                    "temp": one("SELECT count(*) FROM duckdb_tables() WHERE temporary")
                    # the rank's events and names are its Arrow rows, registered as views
                    + one(
                        "SELECT count(*) FROM duckdb_views() WHERE temporary AND NOT internal "
                        "AND view_name NOT IN ('events', 'names')"
                    ),
                },
            )
        )
        return {}

    monkeypatch.setitem(RS.PARTS, "probe", RS.SummaryPart("probe", 1, "looks", probe))
    monkeypatch.setattr(RS, "BATCH_RANKS", 2)  # batches [0, 1] and [2, 0]
    # the probe first, then the cross-rank part (it makes working tables) on the same database
    sink = RS.PartsWhileIngesting(handed[0].run_id, ["probe", RS.CROSS_RANK.name], jobs=1)
    try:
        for rows in handed + handed[:1]:  # rank 0 twice: the same rows give the same part
            sink.rank_written(
                RankRows(rows.run_id, rows.rank, rows.events, rows.threads, rows.ranks, rows.names)
            )
        docs = [f.result(timeout=60) for f in sink._futures]
    finally:
        sink.close()
    assert len({c for c, _ in seen}) == 1  # one database for the thread, reused
    for (_, got), rows in zip(seen, handed + handed[:1], strict=True):
        assert got == {
            "events": rows.events.num_rows,
            "event_ranks": 1,
            "names": rows.names.num_rows,
            "ranks": 2,  # the batch's rows only
            "temp": 0,  # the last batch's working tables are gone
        }
    assert [[r[1] for r in d] for d in docs] == [[0, 0, 1, 1], [2, 2, 0, 0]]

    def rank0(rows: list) -> list:  # type: ignore[type-arg]
        return [r[:5] for r in rows if r[1] == 0]  # all but the time stamp

    assert rank0(docs[0]) == rank0(docs[-1])
    assert json.loads(rank0(docs[0])[1][4])["busy_ns"] > 0


def test_a_rank_whose_part_failed_leaves_the_scratch_as_it_was_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank runs in a transaction of the scratch that is rolled back at its end: a part that
    made tables and wrote rows, then failed, leaves none of them, nor its rank's rows, to the
    next rank on the same thread (and that rank's part is computed as usual)."""
    first, second = handed_over(tmp_path, monkeypatch, 3)[:2]

    seen: list[dict[str, int]] = []

    def messy(con, run_id: str, rank: int) -> dict:  # type: ignore[no-untyped-def]
        def one(sql: str) -> int:
            return int(con.execute(sql).fetchone()[0])

        seen.append(
            {
                "ranks": one("SELECT count(*) FROM ranks"),
                "event_ranks": one("SELECT count(DISTINCT rank) FROM events"),
                "temp": one("SELECT count(*) FROM duckdb_tables() WHERE temporary"),
                "threads": one("SELECT count(*) FROM threads"),
            }
        )
        if rank == first.rank:
            con.execute("CREATE TEMP TABLE leftover AS SELECT 1 AS x")
            con.execute("INSERT INTO ranks SELECT * REPLACE (99 AS rank) FROM ranks")
            raise RuntimeError("part failed half-way")
        return {}

    monkeypatch.setitem(RS.PARTS, "messy", RS.SummaryPart("messy", 1, "fails", messy))
    monkeypatch.setattr(RS, "BATCH_RANKS", 1)  # each rank a batch of its own
    sink = RS.PartsWhileIngesting(first.run_id, ["messy", RS.CROSS_RANK.name], jobs=1)
    try:
        sink.rank_written(first)
        sink._futures[0].exception(timeout=60)
        with pytest.raises(RuntimeError, match="half-way"):
            sink.rank_written(second)  # the first rank's failure surfaces at the next hand-over
        rows = sink._futures[1].result(timeout=60)
    finally:
        sink.close()
    assert seen[1] == {
        "ranks": 1,  # the second rank's own row only: not the failed rank's insert
        "event_ranks": 1,
        "temp": 0,  # no `leftover`, no working table of the first rank
        "threads": len(second.threads),
    }
    assert [r[2] for r in rows] == ["messy", RS.CROSS_RANK.name]


def test_a_part_thread_sees_exactly_each_ranks_names_as_they_grow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scratch keeps the run's names in a table of its own and adds only the names new since
    its last batch (here each rank a batch): each batch's parts read exactly the ``names`` rows
    of its last rank (the run's names so far: they only grow in an ingest), in their order,
    also when the names handed over do not extend the ones held (then the table is refilled).
    The name ids of a class, kept across the thread's ranks, follow the names."""
    import pyarrow as pa

    def names_of(pairs: list[tuple[int, str]]) -> pa.Table:
        return pa.table({
            "run_id": pa.array(["r1"] * len(pairs), pa.string()),
            "name_id": pa.array([i for i, _ in pairs], pa.int32()),
            "name": pa.array([n for _, n in pairs], pa.string()),
        })  # fmt: skip

    grown = [[(0, "a"), (1, "b")], [(0, "a"), (1, "b")], [(0, "a"), (1, "b"), (2, "c")]]
    other = [[(0, "x")], [(5, "y"), (6, "z")], [(5, "y"), (7, "w")]]  # shrinks; a new run of ids
    seen: list[list[tuple[int, str]]] = []
    ids: list[list[int]] = []

    def probe(con, run_id: str, rank: int) -> dict:  # type: ignore[no-untyped-def]
        seen.append([tuple(r) for r in con.execute("SELECT name_id, name FROM names").fetchall()])
        ids.append(RankIndex.shared(con, run_id, rank).name_ids("name IN ('b', 'c', 'y', 'w')"))
        return {}

    monkeypatch.setitem(RS.PARTS, "probe", RS.SummaryPart("probe", 1, "looks", probe))
    monkeypatch.setattr(RS, "BATCH_RANKS", 1)  # names are synced per batch: here per rank
    sink = RS.PartsWhileIngesting("r1", ["probe"], jobs=1)
    try:
        for rank, pairs in enumerate(grown + other):
            empty = empty_rows(rank)
            sink.rank_written(RankRows("r1", rank, empty.events, [], [], names_of(pairs)))
        for f in sink._futures:
            f.result(timeout=60)
    finally:
        sink.close()
    assert seen == grown + other
    assert ids == [[1], [1], [1, 2], [], [5], [5, 7]]


@pytest.mark.parametrize(("job", "cores", "want"), [(None, 8, 3), ("job-7", 8, 3), (None, 2, 2)])
def test_the_after_trace_hook_runs_on_the_stores_threads_the_ingest_on_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: str | None, cores: int, want: int
) -> None:
    seen: list[int] = []

    def hook(con, result) -> None:  # type: ignore[no-untyped-def]
        seen.append(int(con.execute("SELECT current_setting('threads')").fetchone()[0]))

    monkeypatch.setattr(loader, "usable_cores", lambda: cores)  # the process's CPU affinity
    with connect(tmp_path / "s") as con:
        con.execute("SET threads = 3")
        ingest_paths(con, [DDP], after_trace=hook, job=job)
        # the parse threads are done: the summary parts get the store's threads, at most the
        # cores this process may use
        assert seen == [want]
        assert int(con.execute("SELECT current_setting('threads')").fetchone()[0]) == 3


def test_a_hook_that_fails_on_the_transaction_gives_its_own_error(tmp_path: Path) -> None:
    def hook(con, result) -> None:  # type: ignore[no-untyped-def]
        con.execute("SELECT CAST('no number' AS INTEGER)")  # fails, and aborts the transaction

    with connect(tmp_path / "s") as con:
        con.execute("SET threads = 3")
        before = counts(con)
        with pytest.raises(Exception, match="no number"):  # not "transaction is aborted"
            ingest_paths(con, [DDP], after_trace=hook)
        assert counts(con) == before
        assert int(con.execute("SELECT current_setting('threads')").fetchone()[0]) == 3


def test_the_sink_keeps_the_columns_its_parts_read_or_every_one() -> None:
    """The columns a sink asks the ingest to keep: the union of its parts' columns, in the table's
    order; every column (None) as soon as one part does not say which it reads."""

    def part(name: str, columns: tuple[str, ...] | None) -> RS.SummaryPart:
        return RS.SummaryPart(name, 1, "", lambda con, run, rank: None, None, columns)

    a, b = part("a", ("ts_ns", "run_id")), part("b", ("cat", "ts_ns"))
    assert RS._columns_of([a, b]) == ("run_id", "cat", "ts_ns")
    assert RS._columns_of([a, part("c", None)]) is None
    sink = RS.PartsWhileIngesting("r", RS.EVERY_RANK, 1)
    try:
        from gpuscope.analysis.rank_frames import COLUMNS

        assert sink.columns is not None and set(sink.columns) == set(COLUMNS)
    finally:
        sink.close()
