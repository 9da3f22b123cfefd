"""The run id is the files' SHA-256, hashed on a thread of its own while the writer maps and sorts
the first batches: the same id and the same refusal of a stored file as hashing first, nothing
written before the id is known, the hash stopped when the ingest fails."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import CancelledError
from pathlib import Path

import pytest
from gpuscope.ingest import loader, parse_pool, source
from gpuscope.ingest.batch_insert import BatchInserter
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.records import run_id_for
from gpuscope.store import RUN_TABLES
from tracegen import TraceBuilder


def trace(tmp_path: Path, name: str, kernels: int = 600, first: str = "k") -> Path:
    t = TraceBuilder()
    for i in range(kernels):
        t.launch(f"{first}{i % 7}", i * 10.0, i * 10.0 + 1, 1.0)
    return t.write(tmp_path / name, indent=None)


def counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES}


def events(con, run_id: str) -> list[tuple]:
    return con.execute(
        "SELECT * EXCLUDE (run_id) FROM events WHERE run_id = ? ORDER BY ALL", [run_id]
    ).fetchall()


def test_the_run_id_and_the_ranks_hash_are_the_files_sha256(con, tmp_path):
    p = trace(tmp_path, "a.json")
    [r] = ingest_paths(con, [p])
    sha = hashlib.sha256(p.read_bytes()).hexdigest()
    assert r.run_id == run_id_for([sha])
    assert con.execute("SELECT sha256 FROM ranks WHERE run_id = ?", [r.run_id]).fetchall() == [
        (sha,)
    ]


def test_the_same_bytes_anywhere_are_one_run_one_byte_more_is_another(con, tmp_path):
    p = trace(tmp_path, "a.json")
    copy = tmp_path / "elsewhere" / "b.json"
    copy.parent.mkdir()
    copy.write_bytes(p.read_bytes())
    other = tmp_path / "c.json"
    other.write_bytes(p.read_bytes() + b"\n")  # the same events, other bytes
    [a] = ingest_paths(con, [p])
    before = counts(con)
    [b] = ingest_paths(con, [copy])
    assert b.duplicate and b.run_id == a.run_id and counts(con) == before
    [c] = ingest_paths(con, [other])
    assert not c.duplicate and c.run_id != a.run_id and c.n_events == a.n_events


@pytest.fixture
def slow_hash(monkeypatch):
    """Each file's hash waits until the writer has mapped ``seen["batches"]`` batches of the
    ingest (1; at most 10 s): ``seen["writer_first"]`` says whether it did. Batches of 20 KB,
    chunks of 300 rows; ``seen["held"]``: the chunks of each hand-over to the flush thread."""
    import gpuscope.ingest.json_stream as js

    seen: dict[str, object] = {"hashed": 0, "batches": 1, "held": []}
    mapped = threading.Semaphore(0)
    insert, write = BatchInserter.insert_parsed, getattr(BatchInserter, "_write_in_turn", None)
    sha = parse_pool.file_sha256

    def insert_parsed(self, *a, **k):  # type: ignore[no-untyped-def]
        mapped.release()
        return insert(self, *a, **k)

    def write_in_turn(self, chunks):  # type: ignore[no-untyped-def]
        seen["held"].append(len(chunks))  # type: ignore[attr-defined]
        return write(self, chunks)

    def waiting_sha(path, stop=None):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 10
        got = [mapped.acquire(timeout=max(0.0, deadline - time.monotonic()))
               for _ in range(int(seen["batches"]))]  # type: ignore[call-overload]  # fmt: skip
        seen["writer_first"] = all(got)
        seen["hashed"] += 1  # type: ignore[operator]
        return sha(path) if stop is None else sha(path, stop)

    def ingest_trace(*a, **k):  # type: ignore[no-untyped-def]
        while mapped.acquire(blocking=False):  # each ingest counts its own batches
            pass
        return trace_one(*a, **k)

    trace_one = loader.ingest_trace
    monkeypatch.setattr(loader, "ingest_trace", ingest_trace)
    monkeypatch.setattr(BatchInserter, "insert_parsed", insert_parsed)
    monkeypatch.setattr(BatchInserter, "_write_in_turn", write_in_turn, raising=False)
    monkeypatch.setattr(parse_pool, "file_sha256", waiting_sha)
    monkeypatch.setattr(js, "BATCH_BYTES", 20_000)  # many batches, read 16 KB at a time
    monkeypatch.setattr(
        parse_pool, "iter_json_bytes", lambda path: source.iter_json_bytes(path, chunk=16_384)
    )
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "300")  # chunks sorted before the id is known
    return seen


def test_the_writer_maps_batches_while_the_file_is_hashed(con, tmp_path, slow_hash):
    p = trace(tmp_path, "a.json", kernels=1200)
    slow_hash["batches"] = 5
    [r] = ingest_paths(con, [p])
    assert slow_hash["writer_first"] is True  # failed before: the writer hashed first (10 s)
    held = max(slow_hash["held"], default=0)  # type: ignore[call-overload]
    assert held > 1  # chunks held for the id, handed over together
    assert r.run_id == run_id_for([hashlib.sha256(p.read_bytes()).hexdigest()])
    got = con.execute("SELECT count(*), count(DISTINCT run_id), min(run_id) FROM events").fetchone()
    assert got == (r.n_events, 1, r.run_id)  # every chunk held got the id


def test_rows_are_the_same_whether_the_id_came_first_or_late(tmp_path, monkeypatch, slow_hash):
    """The same trace into two stores: the writer waits for the id at its first chunk (no
    chunk held), or holds its chunks until the hash is done (after 8 batches)."""
    from gpuscope.ingest import batch_insert
    from gpuscope.store import connect

    p = trace(tmp_path, "a.json", kernels=1500)
    slow_hash["batches"] = 8
    rows = []
    for k, cap in enumerate((0, 1 << 30)):  # 0: wait for the id at the first chunk
        monkeypatch.setattr(batch_insert, "MAX_UNNAMED_BYTES", cap)
        slow_hash["batches"] = 1 if cap == 0 else 8
        con = connect(str(tmp_path / f"s{k}.duckdb"))
        try:
            [r] = ingest_paths(con, [p])
            rows.append((r.run_id, events(con, r.run_id), counts(con)))
        finally:
            con.close()
    assert rows[0] == rows[1] and rows[0][2]["events"] == 2 + 4 * 1500
    assert max(slow_hash["held"], default=0) > 1  # type: ignore[call-overload]


def test_a_stored_file_is_refused_after_the_writer_ran_ahead_and_nothing_is_written(
    con, tmp_path, slow_hash
):
    p = trace(tmp_path, "a.json", kernels=1200)
    [a] = ingest_paths(con, [p])
    before = counts(con)
    [b] = ingest_paths(con, [p])
    assert slow_hash["writer_first"] is True and slow_hash["hashed"] == 2
    assert b.duplicate and b.run_id == a.run_id and counts(con) == before


def test_a_hash_that_fails_fails_the_ingest_and_changes_nothing(con, tmp_path, monkeypatch):
    good = trace(tmp_path, "good.json")
    ingest_paths(con, [good])
    before = counts(con)

    def unreadable(path, stop=None):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "planted: cannot read", str(path))

    monkeypatch.setattr(parse_pool, "file_sha256", unreadable)
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "300")
    with pytest.raises(PermissionError, match="planted"):
        ingest_paths(con, [trace(tmp_path, "b.json", first="other")])
    assert counts(con) == before


def test_a_failing_ingest_stops_the_hash(con, tmp_path, monkeypatch):
    """Bad input found while the file is still being hashed: refused at once, the hash stopped."""
    seen: dict[str, bool] = {}

    def endless(path, stop=None):  # type: ignore[no-untyped-def]
        seen["stopped"] = stop is not None and stop.wait(20)
        raise CancelledError

    monkeypatch.setattr(parse_pool, "file_sha256", endless)
    p = tmp_path / "bad.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "ts": "soon"}]}')
    before = counts(con)
    t0 = time.perf_counter()
    with pytest.raises(IngestError, match=r"traceEvents\[0\]\.ts"):
        ingest_paths(con, [p])
    # not waited for (20 s); cancelled before it began, or stopped
    assert time.perf_counter() - t0 < 15 and seen.get("stopped", True) is True
    assert counts(con) == before
