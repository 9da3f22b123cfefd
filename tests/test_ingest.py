"""Ingest of hand-built traces into a real store: what is kept, exactly, and what is refused."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import RUN_TABLES, connect
from tracegen import BASE_NS, TraceBuilder


def small_trace() -> TraceBuilder:
    t = TraceBuilder()
    t.step(1, 100.0, 50.0)
    t.cpu_op(
        "aten::mm",
        101.0,
        10.0,
        **{"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]},
    )
    t.launch("ampere_sgemm_128x64_nn", 102.0, 110.125, 20.001)
    return t


# Tests marked ``memory_store`` get an in-memory store as ``con`` (tests/conftest.py): their
# subject is what the ingest reads, keeps and refuses (fields, names, ranks, layouts, duplicates,
# NVML series), which the lake stores as memory does (tests/test_store_equivalence.py). Those
# whose subject is the lake (its files, recovery on open, atomicity of a failed ingest, the
# connection while chunks are written) keep it; GPUSCOPE_TESTS_ON_LAKE=1 puts every test on it.


def counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES}


def events(con, run_id: str):
    return con.execute(
        "SELECT e.*, n.name FROM events e JOIN names n USING (run_id, name_id) WHERE run_id = ? "
        "ORDER BY ts_ns NULLS FIRST, ph",
        [run_id],
    ).df()


@pytest.mark.memory_store
def test_kernel_fields_and_exact_ns(con, tmp_path):
    p = small_trace().write(tmp_path / "t.json")
    [r] = ingest_paths(con, [p])
    df = events(con, r.run_id)
    k = df[df["cat"] == "kernel"].iloc[0]
    # 110.125 µs -> 110125 ns and 20.001 µs -> 20001 ns: no rounding to whole µs.
    assert (k.ts_ns, k.dur_ns) == (110125, 20001)
    assert (k.device, k.stream, k.registers, list(k.grid), list(k.block)) == (
        0,
        7,
        32,
        [1, 1, 1],
        [128, 1, 1],
    )
    launch = df[df.name == "cudaLaunchKernel"].iloc[0]
    assert launch.correlation == k.correlation and launch["cat"] == "cuda_runtime"
    op = df[df.name == "aten::mm"].iloc[0]
    assert json.loads(op.input_dims) == [[4, 8], [8, 16]] and json.loads(op.input_types) == [
        "float",
        "float",
    ]
    flows = df[df["cat"] == "ac2g"]
    assert sorted(flows.ph) == ["f", "s"] and set(flows.flow_id) == {k.correlation}
    rank = con.execute("SELECT * FROM ranks").df().iloc[0]
    assert rank["base_time_ns"] == BASE_NS and rank["time_offset_ns"] == BASE_NS
    assert (rank["ts_min_ns"], rank["ts_max_ns"]) == (100000, 150000)
    run = con.execute("SELECT * FROM runs").df().iloc[0]
    assert run["start_ns"] == BASE_NS + 100000 and run["end_ns"] == BASE_NS + 150000
    assert run["gpu_name"] == "NVIDIA H100 80GB HBM3" and run["n_events"] == len(df) == 8
    labels = dict(con.execute("SELECT kind || ':' || id, label FROM threads").fetchall())
    assert labels == {"pid:1000": "python", "tid:1001": "main thread"}


@pytest.mark.memory_store
def test_gzip_is_detected_by_magic_not_extension(con, tmp_path):
    t = small_trace()
    plain = t.write(tmp_path / "a.json")
    disguised = tmp_path / "b.json"
    disguised.write_bytes(gzip.compress(plain.read_bytes()))
    named_gz_but_plain = tmp_path / "c.json.gz"
    named_gz_but_plain.write_bytes(plain.read_bytes() + b"\n")
    res = ingest_paths(con, [plain, disguised, named_gz_but_plain])
    assert [r.n_events for r in res] == [8, 8, 8]


@pytest.mark.memory_store
def test_reingest_is_reported_not_duplicated(con, tmp_path):
    p = small_trace().write(tmp_path / "t.json.gz")
    [a] = ingest_paths(con, [p])
    before = counts(con)
    [b] = ingest_paths(con, [p])
    assert b.duplicate and b.run_id == a.run_id and counts(con) == before


@pytest.mark.memory_store
def test_quirks_string_ids_control_chars_missing_dur_metadata_after(con, tmp_path):
    raw = (
        b'{"schemaVersion": 1, "traceEvents": [\n'
        b'{"ph": "X", "cat": "cpu_op", "name": "bad\x01name\ttab", "pid": "1234", "tid": "PyTorch Profiler (0)",'
        b' "ts": 5.5, "dur": 1},\n'
        b'{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1234, "tid": 7, "ts": 6},\n'
        b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 7.25, "dur": 2.5,'
        b' "args": {"device": 0, "stream": 7, "correlation": 3, "unknown key": {"deep": [1, 2]}}}\n'
        b'], "deviceProperties": [{"name": "NVIDIA H200"}], "distributedInfo": {"rank": 0, "world_size": 1},'
        b' "baseTimeNanoseconds": 1000000000000000000, "traceName": "x"}'
    )
    p = tmp_path / "q.json"
    p.write_bytes(raw)
    [r] = ingest_paths(con, [p])
    df = events(con, r.run_id)
    assert list(df.name) == ["bad\x01name\ttab", "[memory]", "k"]
    assert df.pid.tolist() == [1234, 1234, 0]
    tid_label = con.execute("SELECT id, label FROM threads WHERE kind = 'tid'").fetchall()
    assert len(tid_label) == 1 and tid_label[0][1] == "PyTorch Profiler (0)"
    assert df.tid.iloc[0] == tid_label[0][0] < 0
    assert df.dur_ns.isna().tolist() == [False, True, False]
    meta = con.execute("SELECT * FROM ranks").df().iloc[0]
    assert json.loads(meta["metadata"])["traceName"] == "x"
    assert meta["world_size"] == 1 and r.gpu_name == "NVIDIA H200"


@pytest.mark.memory_store
def test_long_names_are_stored_once(con, tmp_path):
    t = TraceBuilder()
    long = "void cutlass::Kernel2<" + "x" * 5000 + ">"
    for i in range(200):
        t.launch(long, 10.0 * i, 10.0 * i + 5, 1.0)
    ingest_paths(con, [t.write(tmp_path / "l.json")])
    assert con.execute("SELECT count(*) FROM names WHERE name = ?", [long]).fetchone()[0] == 1
    assert (
        con.execute(
            "SELECT count(*) FROM events JOIN names USING (run_id, name_id) WHERE name = ?", [long]
        ).fetchone()[0]
        == 200
    )


def rank_trace(rank: int | None, world: int = 2) -> TraceBuilder:
    t = TraceBuilder(rank=rank, world_size=world)
    t.step(1, 100.0 + (rank or 0), 10.0)
    return t


@pytest.mark.memory_store
def test_folder_is_one_run_ranks_from_distributed_info(con, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    rank_trace(1).write(d / "host_a.pt.trace.json.gz")  # names say nothing; distributedInfo says
    rank_trace(0).write(d / "host_b.pt.trace.json.gz")
    [r] = ingest_paths(con, [d])
    assert r.n_ranks == 2
    got = con.execute("SELECT rank, path FROM ranks ORDER BY rank").fetchall()
    assert [(g[0], Path(g[1]).name) for g in got] == [
        (0, "host_b.pt.trace.json.gz"),
        (1, "host_a.pt.trace.json.gz"),
    ]
    per_rank = con.execute(
        "SELECT rank, min(ts_ns) FROM events WHERE ph = 'X' GROUP BY rank ORDER BY rank"
    ).fetchall()
    assert per_rank == [(0, 100000), (1, 101000)]


@pytest.mark.memory_store
def test_folder_with_torch_named_traces_ignores_other_json(con, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    rank_trace(0).write(d / "job_rank0.pt.trace.json.gz")
    rank_trace(1).write(d / "job_rank1.pt.trace.json.gz")
    (d / "timing.json").write_text('{"step_ms": 12.5}')
    [r] = ingest_paths(con, [d])
    assert r.n_ranks == 2 and all(".pt.trace.json" in p for p in r.paths)


@pytest.mark.memory_store
def test_folder_ranks_from_file_names(con, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    rank_trace(None).write(d / "trace_rank1.json")
    rank_trace(None).write(d / "trace_rank0.json")
    rank_trace(None).write(d / "trace_rank10.json")
    ingest_paths(con, [d])
    assert [r[0] for r in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()] == [
        0,
        1,
        10,
    ]


@pytest.mark.memory_store
def test_folder_without_ranks_is_refused_naming_the_file(con, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    rank_trace(None).write(d / "a.json")
    TraceBuilder().write(d / "b.json")
    with pytest.raises(IngestError, match=r"a\.json: cannot tell its rank"):
        ingest_paths(con, [d])
    assert sum(counts(con).values()) == 0


@pytest.mark.memory_store
def test_two_files_claiming_one_rank_are_refused(con, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    rank_trace(0).write(d / "a.json")
    t = rank_trace(0)
    t.step(2, 500.0, 1.0)  # different content, same rank
    t.write(d / "b.json")
    with pytest.raises(IngestError, match=r"b\.json: rank 0 is also the rank of .*a\.json"):
        ingest_paths(con, [d])
    assert sum(counts(con).values()) == 0


@pytest.mark.memory_store
@pytest.mark.slow
def test_rank_in_trailer_metadata(con, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for rank in (0, 1):
        doc = rank_trace(rank).to_dict()
        info = doc.pop("distributedInfo")
        doc["distributedInfo"] = info  # after traceEvents
        (d / f"w{rank}.json").write_text(json.dumps(doc))
    ingest_paths(con, [d])
    got = con.execute(
        "SELECT DISTINCT rank, min(ts_ns) FROM events WHERE ph = 'X' GROUP BY rank ORDER BY rank"
    )
    assert got.fetchall() == [(0, 100000), (1, 101000)]


def bad(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


GOOD = json.dumps(TraceBuilder().to_dict()).encode()
BAD_INPUTS = {
    "empty": (b"", "empty file"),
    "whitespace": (b"  \n ", "empty file"),
    "not_json": (b"hello world", "not JSON"),
    "json_not_trace": (b'{"a": 1, "b": [1, 2]}', "no traceEvents array"),
    "json_scalar": (b"42", "not JSON"),
    "zero_events": (b'{"traceEvents": []}', "no events"),
    "truncated_in_events": (GOOD[: len(GOOD) // 2], "truncated"),
    "truncated_after_events": (GOOD[:-5], "truncated"),
    "event_not_object": (b'{"traceEvents": [1, 2]}', "expected an event object"),
    "wrong_type_ts": (b'{"traceEvents": [{"ph": "X", "ts": "soon"}]}', r"traceEvents\[0\]\.ts"),
    "malformed_event": (b'{"traceEvents": [{"ph": "X", "ts": 1,}]}', "malformed JSON"),
    "garbage_after": (GOOD + b"xyz", "malformed JSON outside the events"),
    "truncated_gzip": (gzip.compress(GOOD)[:-30], "truncated gzip"),
    "corrupt_gzip": (b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"garbage" * 10, "corrupt gzip"),
    # hostile input (issue 13): ~16 KB of gzip inflating 1000x, refused at 100x its size
    "gzip_bomb": (
        gzip.compress(b'{"traceEvents": [{"name": "' + b"a" * (16 << 20), 9),
        r"inflates beyond the limit of \d+ bytes \(100x its compressed size",
    ),
    "gzip_bomb_of_whitespace": (
        gzip.compress(b'{"traceEvents": [' + b" " * (16 << 20) + b"]}", 9),
        "inflates beyond the limit",
    ),
}


@pytest.fixture(scope="module")
def store_with_a_run(tmp_path_factory):
    """A real store (the lake) holding one good run, opened once for the bad inputs: each is
    refused on it and must leave it as it was, so every case sees the same store (a case that
    wrote would fail itself, and the cases after it)."""
    d = tmp_path_factory.mktemp("refusals")
    con = connect(d / "store")
    ingest_paths(con, [small_trace().write(d / "good.json")])
    yield con
    con.close()


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_refused_and_db_unchanged(store_with_a_run, tmp_path, case):
    con = store_with_a_run
    before = counts(con)
    assert before["runs"] == 1
    data, message = BAD_INPUTS[case]
    p = bad(tmp_path, f"{case}.json", data)
    with pytest.raises(IngestError, match=message) as err:
        ingest_paths(con, [p])
    assert str(err.value).startswith(str(p) + ": ") and "\n" not in str(err.value)
    assert counts(con) == before


def test_one_bad_path_writes_nothing_of_the_others(con, tmp_path):
    good = small_trace().write(tmp_path / "good.json")
    badp = bad(tmp_path, "bad.json", b'{"traceEvents": [')
    with pytest.raises(IngestError, match=r"bad\.json"):
        ingest_paths(con, [good, badp])
    assert sum(counts(con).values()) == 0


@pytest.mark.slow
def test_gzip_bomb_limit(con, tmp_path, monkeypatch):
    t = TraceBuilder()
    for i in range(2000):
        t.launch("k", i * 10.0, i * 10.0 + 1, 1.0)
    p = t.write(tmp_path / "bomb.json.gz")
    monkeypatch.setenv("GPUSCOPE_MAX_JSON_BYTES", "100000")
    with pytest.raises(IngestError, match="inflates beyond the limit of 100000 bytes"):
        ingest_paths(con, [p])
    assert sum(counts(con).values()) == 0


@pytest.mark.memory_store
@pytest.mark.slow
def test_big_trace_many_batches(con, tmp_path, monkeypatch):
    """Small batch size forces hundreds of batches; nothing is lost or duplicated at the seams."""
    import gpuscope.ingest.json_stream as js

    monkeypatch.setattr(js, "BATCH_BYTES", 4096)
    t = TraceBuilder()
    n = 3000
    for i in range(n):
        t.launch(f"kernel_{i % 17}", i * 10.0, i * 10.0 + 3.0, 2.0)
    [r] = ingest_paths(con, [t.write(tmp_path / "big.json.gz")])
    assert r.n_events == 2 + 4 * n
    got = con.execute(
        "SELECT count(*), count(DISTINCT correlation), sum(dur_ns) FROM events WHERE cat = 'kernel'"
    )
    assert got.fetchone() == (n, n, 2000 * n)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``gpuscope ARGS`` in-process (tests/clitools.py); test_module_entry_point starts the real one."""
    from clitools import cli_in_process

    return cli_in_process(*args)


@pytest.mark.slow
def test_cli_ingest_runs_delete(tmp_path):
    db = str(tmp_path / "cli.duckdb")
    p = small_trace().write(tmp_path / "first.json.gz")
    out = cli("ingest", str(p), "--db", db, "--name", "baseline", "--tag", "exp1")
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.strip()
    assert len(run_id) == 12
    again = cli("ingest", str(p), "--db", db)
    assert (
        again.returncode == 0
        and again.stdout.strip() == run_id
        and "already ingested" in again.stderr
    )
    listing = json.loads(cli("runs", "--json", "--db", db).stdout)
    assert [(r["run_id"], r["name"], r["tags"]) for r in listing] == [
        (run_id, "baseline", ["exp1"])
    ]
    badp = bad(tmp_path, "broken.json", b'{"traceEvents": [{"ph": "X"')
    fail = cli("ingest", str(badp), "--db", db)
    assert fail.returncode != 0 and fail.stdout == ""
    assert (
        fail.stderr.strip().count("\n") == 0
        and str(badp) in fail.stderr
        and "truncated" in fail.stderr
    )
    assert cli("delete", run_id[:6], "--db", db).stdout.strip() == run_id
    assert json.loads(cli("runs", "--json", "--db", db).stdout) == []
    assert cli("delete", "nope", "--db", db).returncode == 2


def test_cli_version():
    from gpuscope import __version__

    out = cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"gpuscope {__version__}"


def test_reopen_sees_committed_run(db_path, tmp_path):
    con = connect(db_path)
    [r] = ingest_paths(con, [small_trace().write(tmp_path / "t.json")])
    con.close()
    again = connect(db_path)
    assert again.execute("SELECT run_id FROM runs").fetchall() == [(r.run_id,)]
    again.close()


NVML_FIXTURE = (
    Path(__file__).resolve().parent.parent
    / "sample_traces"
    / "nvml"
    / "synthetic_h100x2_100ms.nvml.jsonl"
)


@pytest.mark.memory_store
def test_folder_attaches_nvml_series_to_the_trace_run(con, tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    small_trace().write(d / "job_rank0.pt.trace.json.gz")
    (d / "job.nvml.jsonl").write_bytes(NVML_FIXTURE.read_bytes())
    [r] = ingest_paths(con, [d])
    assert r.kind == "trace" and len(r.paths) == 2
    n = con.execute("SELECT count(*) FROM nvml_samples WHERE run_id = ?", [r.run_id]).fetchone()[0]
    assert n > 0 and con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


@pytest.mark.memory_store
def test_series_alone_is_its_own_run_and_attach_needs_a_run(con, tmp_path):
    [s] = ingest_paths(con, [NVML_FIXTURE])
    assert s.kind == "nvml" and s.n_events > 0 and not s.duplicate
    [again] = ingest_paths(con, [NVML_FIXTURE])
    assert again.duplicate and again.run_id == s.run_id
    [t] = ingest_paths(con, [small_trace().write(tmp_path / "t.json")])
    ingest_paths(con, [NVML_FIXTURE], attach=t.run_id)
    assert (
        con.execute("SELECT count(*) FROM nvml_series WHERE run_id = ?", [t.run_id]).fetchone()[0]
        == 1
    )
    with pytest.raises(IngestError, match="NVML series files only"):
        ingest_paths(con, [tmp_path / "t.json"], attach=t.run_id)


def parquet_files(store: Path, table: str = "events") -> list[Path]:
    return sorted((store / "data").glob(f"**/{table}/*.parquet"))


@pytest.mark.slow
def test_a_killed_ingest_leaves_nothing_visible_and_is_cleaned_on_open(tmp_path):
    """SIGKILL mid-ingest (its Parquet files half-written): no run is visible, and the next open
    deletes the files it left; the same trace then ingests cleanly."""
    import os
    import signal
    import time

    import msgspec

    n = 139000
    t = TraceBuilder()
    for i in range(n):
        t.launch(f"k{i % 50}", i * 10.0, i * 10.0 + 1, 1.0)
    # compact JSON from msgspec (0.2 s, json.dumps 1.3 s): 139,000 launches are the 73 MB that
    # 120,000 were in json.dumps' spacing, so the ingest has as much left to read after its
    # second file as before (the kill's margin)
    p = tmp_path / "big.json"
    p.write_bytes(msgspec.json.encode(t.to_dict()))
    assert p.stat().st_size > 72_000_000
    db = tmp_path / "k"
    env = {**os.environ, "GPUSCOPE_FLUSH_ROWS": "50000"}  # files written early in the ingest
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "ingest", str(p), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:  # wait until events are being written
        if len(parquet_files(db)) >= 2:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "ingest finished before it could be killed; make the trace bigger"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert parquet_files(db), "the killed ingest wrote no files: the test did not test"
    con = connect(db)  # the next open deletes what the dead writer left
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert parquet_files(db) == []
    [r] = ingest_paths(con, [p])  # and the same trace ingests cleanly afterwards
    assert r.n_events == 2 + 4 * n
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] == r.n_events
    con.close()


def test_a_store_opened_in_the_thread_of_an_open_ingest_leaves_its_files_alone(
    tmp_path, monkeypatch
):
    """The write lock is reentrant in a thread, so opening the store from the thread of an open
    ingest (a hook that reads the store) passes it; the open's recovery of a dead writer's files
    must not take the live ingest's (it did: the ingest then failed reading its own rows)."""
    from gpuscope.store import transaction

    t = TraceBuilder()
    for i in range(3000):
        t.launch(f"k{i % 50}", i * 10.0, i * 10.0 + 1, 1.0)
    p = t.write(tmp_path / "t.json", indent=None)
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "1000")  # Parquet files written in the ingest
    db = tmp_path / "s"
    with connect(db) as con:
        opened = []

        def hook(c, result):  # type: ignore[no-untyped-def]
            assert parquet_files(db), "nothing written yet: the test did not test"
            with connect(db) as other:  # same thread, inside the ingest's transaction
                opened.append(other.execute("SELECT count(*) FROM runs").fetchone()[0])
            # the ingest's own rows are still there to read
            n = c.execute("SELECT count(*) FROM events WHERE run_id = ?", [result.run_id])
            assert n.fetchone()[0] == result.n_events

        [r] = ingest_paths(con, [p], after_trace=hook)
        assert opened == [0]  # the other connection did not see the uncommitted run
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] == r.n_events
        with transaction(con):
            assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_fast_and_fallback_paths_write_identical_rows(tmp_path):
    """DuckDB's reader (fast path) and the msgspec decoder (fallback) must agree row for row."""
    import gpuscope.ingest.batch_insert as bi

    t = small_trace()
    t.cpu_op(
        "aten::addmm",
        120.0,
        3.0,
        **{
            "Input Dims": [[8, 4], [8, 16], [16, 4]],
            "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"],
            "Concrete Inputs": ["", "", "", "1", "1"],
        },
    )
    doc = t.to_dict()
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "s",
            "pid": "Spans",
            "tid": "42",
            "ts": 1.5,
            "dur": 0.001,
        }
    )
    doc["traceEvents"].append(
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "pid": 1, "tid": 2, "ts": 3, "id": "77"}
    )
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))

    def dump(strict_ok: bool) -> list[tuple]:
        con = connect(":memory:")
        orig = bi.strict_json
        bi.strict_json = (lambda b: orig(b)) if strict_ok else (lambda b: False)
        import gpuscope.ingest.loader as loader

        loader.strict_json = bi.strict_json
        try:
            [r] = ingest_paths(con, [p])
        finally:
            bi.strict_json = loader.strict_json = orig
        rows = con.execute(
            "SELECT * EXCLUDE (run_id, name_id), n.name FROM events JOIN names n USING (run_id, name_id) "
            "ORDER BY ALL"
        ).fetchall()
        threads = con.execute("SELECT * EXCLUDE (run_id) FROM threads ORDER BY ALL").fetchall()
        return [r.n_events, rows, threads]

    assert dump(True) == dump(False)


@pytest.mark.slow
def test_a_schema_1_duckdb_store_is_migrated_whole(tmp_path):
    """A plain DuckDB store written by gpuscope 0.1 (schema 1: no events.odd_args, no
    runs.uploaded_by) opens in this version as ``duckdb:FILE``: the columns are added, the version
    bumped, and its runs analyse as before."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.store.schema import SCHEMA_VERSION

    db = f"duckdb:{tmp_path / 'old.duckdb'}"
    con = connect(db)
    sample = NVML_FIXTURE.parent.parent / "before" / "before_rank0.pt.trace.json.gz"
    [run] = ingest_paths(con, [sample])
    before = analyze_run(con, run.run_id).to_json()
    con.execute("ALTER TABLE events DROP COLUMN odd_args")  # the shape schema 1 had
    con.execute("ALTER TABLE runs DROP COLUMN uploaded_by")
    con.execute("UPDATE gpuscope_meta SET value = '1' WHERE key = 'schema_version'")
    n_events = con.execute("SELECT count(*) FROM events").fetchone()[0]
    con.close()

    con = connect(db)
    version = con.execute("SELECT value FROM gpuscope_meta WHERE key = 'schema_version'")
    assert version.fetchone()[0] == str(SCHEMA_VERSION)
    assert "odd_args" in {r[0] for r in con.execute("DESCRIBE events").fetchall()}
    assert "uploaded_by" in {r[0] for r in con.execute("DESCRIBE runs").fetchall()}
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] == n_events
    after = analyze_run(con, run.run_id).to_json()
    assert after["gpu_busy_pct"] == before["gpu_busy_pct"]
    assert after["idle"] == before["idle"]
    con.close()


def test_a_failing_migration_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    """A migration is one transaction: if a statement fails, the store stays at schema 1, with
    no half-added column, and opening it says why."""
    import duckdb
    from gpuscope import store

    db = tmp_path / "old.duckdb"
    con = connect(f"duckdb:{db}")
    con.execute("ALTER TABLE events DROP COLUMN odd_args")
    con.execute("UPDATE gpuscope_meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    bad = ("ALTER TABLE events ADD COLUMN odd_args VARCHAR", "SELECT no_such_function()")
    monkeypatch.setitem(store.MIGRATIONS, 1, bad)
    with pytest.raises(duckdb.Error, match="no_such_function"):
        connect(f"duckdb:{db}")
    con = duckdb.connect(str(db))
    version = con.execute("SELECT value FROM gpuscope_meta WHERE key = 'schema_version'")
    assert version.fetchone()[0] == "1"
    assert "odd_args" not in {r[0] for r in con.execute("DESCRIBE events").fetchall()}
    con.close()


def _slow_flushes(monkeypatch, flush_rows: int = 300) -> dict[str, object]:
    """Chunks written slowly on the flush thread; every statement the ingest sends through the
    store, and every rollback, while a chunk is being written (from its hand-over to the flush
    thread until it is in the store), recorded."""
    import time

    from gpuscope.ingest.batch_insert import BatchInserter
    from gpuscope.store import connection, transactions

    seen: dict[str, object] = {"clashes": [], "writes": 0}
    inserters: list[BatchInserter] = []
    original_write, original_init = BatchInserter._write, BatchInserter.__init__

    def init(self, *a, **k):  # type: ignore[no-untyped-def]
        original_init(self, *a, **k)
        inserters.append(self)

    def slow_write(self, tables):  # type: ignore[no-untyped-def]
        time.sleep(0.05)
        original_write(self, tables)
        seen["writes"] += 1  # type: ignore[operator]

    def watched(fn):  # type: ignore[no-untyped-def]
        def call(*a, **k):  # type: ignore[no-untyped-def]
            if any(i._pending is not None and not i._pending.done() for i in inserters):
                seen["clashes"].append(str(a[1] if len(a) > 1 else a[0])[:60])  # type: ignore[attr-defined]
            return fn(*a, **k)

        return call

    def id_awaited(self):  # type: ignore[no-untyped-def]
        # Chunks go to the flush thread as soon as they fill: the run's id (found on another
        # thread) is waited for, not held for, so when a chunk is written does not depend on
        # how busy the machine is.
        return self.run_id is not None

    monkeypatch.setattr(BatchInserter, "__init__", init)
    monkeypatch.setattr(BatchInserter, "_write", slow_write)
    monkeypatch.setattr(BatchInserter, "run_id_known", id_awaited)
    for name in ("execute", "executemany", "register", "unregister"):
        monkeypatch.setattr(connection.Store, name, watched(getattr(connection.Store, name)))
    for module in (transactions, connection):
        monkeypatch.setattr(module, "rollback_quietly", watched(connection.rollback_quietly))
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", str(flush_rows))
    return seen


def _rank_folder(tmp_path: Path, ranks: int) -> Path:
    """A folder of ``ranks`` rank files, each of 2 + 4 * 400 events."""
    folder = tmp_path / "run"
    folder.mkdir()
    for rank in range(ranks):
        t = TraceBuilder()
        for i in range(400):
            t.launch(f"k{i % 7}", i * 10.0, i * 10.0 + 1, 1.0)
        t.write(folder / f"t_rank{rank}.json", indent=None)
    return folder


def test_the_store_is_not_used_while_the_flush_thread_writes_a_chunk(con, tmp_path, monkeypatch):
    """Chunks are written on a thread of their own; nothing else may use the connection then
    (ranks read, labels, memory rows, names, the commit)."""
    folder = _rank_folder(tmp_path, 3)
    # chunks of ranks 0 and 1 (3,204 rows) written while rank 2 is read, rank 2's at the end
    seen = _slow_flushes(monkeypatch, 2000)
    [r] = ingest_paths(con, [folder])
    assert seen["writes"] == 2  # each chunk written on the flush thread
    assert seen["clashes"] == []
    assert r.n_ranks == 3 and r.n_events == 3 * (2 + 4 * 400)
    n = con.execute("SELECT count(*) FROM events WHERE run_id = ?", [r.run_id]).fetchone()[0]
    assert n == r.n_events


def test_a_failed_ingest_waits_for_the_chunk_being_written_before_it_rolls_back(
    con, tmp_path, monkeypatch
):
    from gpuscope.ingest.batch_insert import BatchInserter

    folder = _rank_folder(tmp_path, 2)
    before = counts(con)
    seen = _slow_flushes(monkeypatch)
    original = BatchInserter.insert_parsed

    def failing(self, parsed, rank, memory_data=None):  # type: ignore[no-untyped-def]
        if self._pending is not None:  # a chunk is being written: fail now
            raise IngestError(folder, "planted fault")
        return original(self, parsed, rank, memory_data)

    monkeypatch.setattr(BatchInserter, "insert_parsed", failing)
    with pytest.raises(IngestError, match="planted fault"):
        ingest_paths(con, [folder])
    assert seen["writes"] == 1
    assert seen["clashes"] == []  # the rollback came after the chunk was written
    assert counts(con) == before


def test_a_chunk_that_fails_to_write_fails_the_ingest_and_changes_nothing(
    con, tmp_path, monkeypatch
):
    import duckdb
    from gpuscope.ingest.batch_insert import BatchInserter

    folder = _rank_folder(tmp_path, 3)
    before = counts(con)
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "300")
    written = []

    def broken(self, tables):  # type: ignore[no-untyped-def]
        written.append(1)
        if len(written) == 2:
            raise duckdb.IOException("planted: the second chunk cannot be written")

    monkeypatch.setattr(BatchInserter, "_write", broken)
    with pytest.raises(duckdb.IOException, match="planted: the second chunk"):
        ingest_paths(con, [folder])
    assert len(written) == 2  # the ingest stopped at the fault, not at its end
    assert counts(con) == before
