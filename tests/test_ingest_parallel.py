"""The parallel ingest (``jobs`` parse threads, one writer): the same rows as one thread, bounded
read-ahead, one run published atomically, a bad file named and nothing stored."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from clitools import run_cli
from gpuscope.ingest import json_stream
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import collect_trace_files, ingest_paths
from gpuscope.ingest.parse_pool import ParsePool
from gpuscope.store import RUN_TABLES, connect
from tracegen import TraceBuilder

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def rank_trace(rank: int, world: int, n: int = 300) -> TraceBuilder:
    t = TraceBuilder(rank=rank, world_size=world)
    t.step(1, 100.0, 50.0 + n * 10)
    for i in range(n):  # names shared across ranks and names of one rank only
        t.cpu_op(f"aten::op_{i % 7}", 101.0 + i * 10, 5.0, **{"Input Dims": [[i, 2]]})
        t.launch(f"kernel_{rank}_{i % 5}", 102.0 + i * 10, 103.0 + i * 10, 2.5)
    return t


def dump(con) -> dict[str, list[tuple]]:
    """Every table's rows, ordered (the run's created_at aside)."""
    out = {}
    for t in RUN_TABLES:
        excl = " EXCLUDE (created_at)" if t == "runs" else ""
        out[t] = con.execute(f"SELECT *{excl} FROM {t} ORDER BY ALL").fetchall()
    return out


def ingest_dump(paths: list[Path], jobs: int, **kw) -> tuple[dict[str, list[tuple]], list]:
    con = connect(":memory:")
    try:
        results = ingest_paths(con, paths, jobs=jobs, **kw)
        return dump(con), [(r.run_id, r.n_ranks, r.n_events, r.warnings) for r in results]
    finally:
        con.close()


def small_batches(monkeypatch, size: int) -> None:
    """Batches of about ``size`` bytes: the file is read ``size`` bytes at a time, and a batch
    is cut once that much is buffered (many batches, many parsed at once)."""
    from gpuscope.ingest import parse_pool, source

    monkeypatch.setattr(json_stream, "BATCH_BYTES", size)
    monkeypatch.setattr(
        parse_pool, "iter_json_bytes", lambda p: source.iter_json_bytes(p, chunk=size)
    )


@pytest.fixture
def rank_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(6):
        rank_trace(r, 6).write(folder / f"rank{r}.pt.trace.json", gz=r % 2 == 1)
    return folder


@pytest.mark.slow
def test_every_row_is_the_same_with_one_thread_or_many(rank_folder, monkeypatch):
    """Real traces (the DDP pair: Kineto's layout, the fast cut; the memory trace: allocator
    events) and a folder of six hand-built ranks, at the usual batch size and with small batches
    (many parsed at once, finishing in any order): every table row-for-row equal to the
    one-thread ingest's, name and label ids included."""
    paths = [SAMPLES / "ddp", SAMPLES / "memory" / "gpt_mem.pt.trace.json.gz", rank_folder]
    assert ingest_dump(paths, 1) == ingest_dump(paths, 3)  # batches of the usual size
    # (Label ids follow the batches' cut, one thread or many: compare at one batch size.)
    small_batches(monkeypatch, 64 << 10)
    one = ingest_dump(paths, 1)
    many = ingest_dump(paths, 4)
    assert one == many
    tables, results = many
    # Name ids are given in order of first appearance in the files (in file order): what a
    # plain reading of the JSON gives, an oracle independent of the pool.
    for (run_id, *_), path in zip(results, paths, strict=True):
        first: dict[str, int] = {}
        for f in collect_trace_files(path):  # the rank files, in order
            raw = f.read_bytes()
            doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
            for ev in doc["traceEvents"]:
                first.setdefault(ev.get("name") or "", len(first))
        stored = [(i, n) for r, i, n in tables["names"] if r == run_id]
        assert sorted(stored) == sorted((i, n) for n, i in first.items())
    assert [r[1] for r in results] == [2, 1, 6]
    assert len(tables["events"]) == sum(r[2] for r in results) > 50_000
    assert tables["memory_events"], "the memory trace's allocator events were not read"


@pytest.mark.slow
def test_fallback_and_labels_are_the_same_in_parallel(tmp_path, monkeypatch):
    """Batches DuckDB refuses (a raw control character: the msgspec fallback) and non-numeric
    pids/tids (label ids) give the same rows whether parsed on one thread or four."""
    folder = tmp_path / "odd"
    folder.mkdir()
    for r in range(3):
        t = rank_trace(r, 3, n=200)
        t.events.append(
            {"ph": "X", "cat": "cpu_op", "name": "s\x01", "pid": "Spans", "tid": "w", "ts": 1.5}
        )
        t.events[-1]["dur"] = 0.5
        t.write(folder / f"rank{r}.json")
    small_batches(monkeypatch, 4 << 10)
    one = ingest_dump([folder], 1)
    many = ingest_dump([folder], 4)
    assert one == many
    labels = {row[4] for row in many[0]["threads"]}
    assert {"Spans", "w"} <= labels


@pytest.mark.slow
def test_a_bad_rank_among_many_is_named_and_nothing_is_stored(rank_folder, tmp_path):
    """Rank 4 of six is truncated: parsed in parallel, the error names that file, in one line;
    the store is unchanged and no scratch batch file is left."""
    bad = rank_folder / "rank4.pt.trace.json"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    db = connect(tmp_path / "store")
    try:
        before = dump(db)
        with pytest.raises(IngestError) as e:
            ingest_paths(db, [rank_folder], jobs=4)
        assert str(bad) in str(e.value) and "truncated" in str(e.value)
        assert "\n" not in str(e.value)
        assert dump(db) == before
    finally:
        db.close()
    own = f"gpuscope-batch-{os.getpid()}-"
    assert not [p for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith(own)]


@pytest.mark.slow
def test_read_ahead_is_bounded(tmp_path, monkeypatch):
    """A writer slower than the parsers: the pool holds at most ``depth`` batches besides the
    one being written and the one the splitter has in hand, however many the file has."""
    small_batches(monkeypatch, 2 << 10)
    path = rank_trace(0, 1, n=400).write(tmp_path / "t.json")
    from gpuscope.ingest import batch_insert

    lock = threading.Lock()
    parsed = [0]
    orig = batch_insert.BatchParser.parse

    def counting(self, *a, **k):  # type: ignore[no-untyped-def]
        out = orig(self, *a, **k)
        with lock:
            parsed[0] += 1
        return out

    monkeypatch.setattr(batch_insert.BatchParser, "parse", counting)
    ahead = []
    with ParsePool([path], jobs=3) as pool:
        for taken, _ in enumerate(pool.batches(path), start=1):
            time.sleep(0.01)  # a slow writer
            with lock:
                ahead.append(parsed[0] - taken)
    assert len(ahead) > 50, "too few batches to show a bound"
    assert max(ahead) <= pool.depth + 2


@pytest.mark.slow
def test_after_trace_runs_in_the_writer_thread_inside_the_transaction(rank_folder):
    """``--separate`` over six files with four parse threads: the hook is called once per trace
    run, in the calling thread, on the store's connection, where the run's rows already are."""
    seen = []
    con = connect(":memory:")
    try:

        def hook(c, result):  # type: ignore[no-untyped-def]
            n = c.execute("SELECT count(*) FROM events WHERE run_id = ?", [result.run_id])
            seen.append((threading.get_ident(), c is con, n.fetchone()[0], result.n_events))

        results = ingest_paths(con, [rank_folder], separate=True, jobs=4, after_trace=hook)
    finally:
        con.close()
    assert len(results) == len(seen) == 6
    assert all(s == (threading.get_ident(), True, s[3], s[3]) and s[3] > 0 for s in seen)


@pytest.mark.slow
def test_cli_jobs(rank_folder, tmp_path, capsys, monkeypatch):
    """``--jobs N`` ingests the folder as one run; ``--jobs 0`` or a bad
    ``$GPUSCOPE_INGEST_JOBS`` is one line, exit 2, nothing stored."""
    db = str(tmp_path / "store")
    code, _, err = run_cli(capsys, "ingest", str(rank_folder), "--jobs", "0", "--db", db)
    assert code == 2 and "--jobs" in err and err.count("\n") == 1
    monkeypatch.setenv("GPUSCOPE_INGEST_JOBS", "two")
    code, _, err = run_cli(capsys, "ingest", str(rank_folder), "--db", db)
    assert code == 2 and "GPUSCOPE_INGEST_JOBS" in err and err.count("\n") == 1
    monkeypatch.delenv("GPUSCOPE_INGEST_JOBS")
    con = connect(db)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    finally:
        con.close()
    code, _, err = run_cli(capsys, "ingest", str(rank_folder), "--jobs", "3", "--db", db)
    assert code == 0, err
    con = connect(db)
    try:
        assert con.execute("SELECT n_ranks FROM runs").fetchall() == [(6,)]
    finally:
        con.close()


def test_gzip_rank_files_are_read_in_parallel(tmp_path):
    """Compressed and plain rank files mixed: each rank lands once, in rank order of the files."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    for r in range(3):
        text = rank_trace(r, 3, n=5).to_dict()
        data = json.dumps(text).encode()
        if r == 1:
            (folder / f"rank{r}.json.gz").write_bytes(gzip.compress(data))
        else:
            (folder / f"rank{r}.json").write_bytes(data)
    con = connect(":memory:")
    try:
        [r] = ingest_paths(con, [folder], jobs=2)
        ranks = con.execute("SELECT rank, n_events FROM ranks ORDER BY rank").fetchall()
    finally:
        con.close()
    assert [x[0] for x in ranks] == [0, 1, 2] and all(x[1] > 0 for x in ranks)
    shutil.rmtree(folder)
