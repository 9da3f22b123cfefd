"""The events files of a local store are pyarrow's, registered with ``ducklake_add_data_files``
(batch_insert.write_events_file): written as chosen, the same rows as DuckDB's INSERT writes, and
removed as DuckLake's own are: by a failed or stopped ingest, and with a deleted run by the
store's maintenance."""

from __future__ import annotations

import signal
from pathlib import Path

import duckdb
import pytest
from gpuscope.ingest import batch_insert
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import LAKE, RUN_TABLES, connect
from gpuscope.store.runs import delete_run
from gpuscope.store.stopping import forget_stop, request_stop
from tracegen import TraceBuilder


def launches(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` kernel launches (runtime call, kernel, flow events), with shapes on their CPU ops."""
    t = TraceBuilder()
    for i in range(n):
        t.launch(f"k{seed}_{i % 13}", i * 10.0, i * 10.0 + 1, 1.0)
        if i % 50 == 0:
            t.cpu_op("aten::mm", i * 10.0, 0.5, **{"Input Dims": [[i % 7, 3], [3, 4]]})
    return t.write(path, indent=None)


def events_files(store: Path) -> list[Path]:
    return sorted((store / "data").glob("**/events/*.parquet"))


def digest(con) -> tuple:  # type: ignore[no-untyped-def]
    return con.execute("SELECT count(*), sum(hash(COLUMNS(*))) FROM events").fetchone()


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 64 KiB (of 4 MiB), read 16 KiB at a time: a small trace is flushed as several
    chunks, a file each."""
    from gpuscope.ingest import json_stream, parse_pool, source

    monkeypatch.setattr(json_stream, "BATCH_BYTES", 64 << 10)
    monkeypatch.setattr(
        parse_pool, "iter_json_bytes", lambda path: source.iter_json_bytes(path, chunk=16_384)
    )


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths of the events files pyarrow writes in this test, in order."""
    paths: list[Path] = []
    write = batch_insert.write_events_file

    def recorded(*args, **kwargs):  # type: ignore[no-untyped-def]
        paths.append(write(*args, **kwargs))
        return paths[-1]

    monkeypatch.setattr(batch_insert, "write_events_file", recorded)
    return paths


def test_events_files_are_pyarrow_s_as_chosen_and_hold_the_insert_s_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: list[Path]
) -> None:
    trace = launches(tmp_path / "t.json", 3000)
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "2000")  # several files
    with connect(tmp_path / "a") as con:
        [run] = ingest_paths(con, [trace])
        ours = digest(con)
        meta = f"__ducklake_metadata_{LAKE}"
        registered = con.execute(
            f"SELECT f.path, f.path_is_relative FROM {meta}.ducklake_data_file f "
            f"JOIN {meta}.ducklake_table t USING (table_id) WHERE t.table_name = 'events'"
        ).fetchall()
    files = events_files(tmp_path / "a")
    assert len(files) >= 2 and files == sorted(written)
    # relative to the table's folder, as DuckLake's own: the store's folder may move
    assert sorted(p for p, _ in registered) == [f.name for f in files]
    assert all(relative for _, relative in registered)
    monkeypatch.setenv(batch_insert.ENV_PARQUET_WRITER, "duckdb")
    with connect(tmp_path / "b") as con:
        ingest_paths(con, [trace])
        assert digest(con) == ours  # the same rows, every column
    plain = duckdb.connect()
    for f in files:
        (made_by,) = plain.execute(
            "SELECT created_by FROM parquet_file_metadata(?)", [str(f)]
        ).fetchone()
        assert made_by.startswith("parquet-cpp-arrow"), made_by
        chunks = dict(
            plain.execute(
                "SELECT path_in_schema, encodings || ' ' || compression FROM parquet_metadata(?)",
                [str(f)],
            ).fetchall()
        )
        assert all(v.endswith("SNAPPY") for v in chunks.values()), chunks
        for column in ("run_id", "cat", "name_id", "input_dims"):
            assert "DICTIONARY" in chunks[column], (column, chunks[column])
        for column in ("ts_ns", "dur_ns", "correlation", "external_id"):
            assert "DICTIONARY" not in chunks[column], (column, chunks[column])
        kinds = dict(
            plain.execute("SELECT name, converted_type FROM parquet_schema(?)", [str(f)]).fetchall()
        )
        assert all(kinds[c] == "JSON" for c in batch_insert.JSON_COLUMNS), kinds
        keys = plain.execute("SELECT key FROM parquet_kv_metadata(?)", [str(f)]).fetchall()
        assert (b"ARROW:schema",) not in keys
    assert {f.name for f in events_files(tmp_path / "b")}.isdisjoint(f.name for f in files)
    (made_by,) = plain.execute(
        "SELECT created_by FROM parquet_file_metadata(?)", [str(events_files(tmp_path / "b")[0])]
    ).fetchone()
    assert made_by.startswith("DuckDB"), made_by
    assert run.n_events == ours[0]


def test_a_failed_ingest_leaves_none_of_the_files_pyarrow_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: list[Path]
) -> None:
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "1000")
    good = launches(tmp_path / "good.json", 3000)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    with connect(tmp_path / "s") as con:
        with pytest.raises(IngestError, match=r"bad\.json"):
            ingest_paths(con, [good, bad])
        assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES} == {
            t: 0 for t in RUN_TABLES
        }
    assert written, "pyarrow wrote no file: the test did not test"
    assert [p for p in written if p.exists()] == []
    assert sorted((tmp_path / "s").glob("**/*.parquet")) == []


def test_a_full_disk_under_pyarrow_s_write_is_the_store_s_one_line_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow's OSError names no file (it read as "a temporary file: the disk holding it is
    full"): the CLI's line names the store and the file, exit 1, nothing stored, no file left.
    The real full disk and file-size limit: tests/test_security_faults.py (slow)."""
    import pyarrow.parquet as pq
    from clitools import cli_in_process

    db = tmp_path / "store"
    with connect(db) as con:
        ingest_paths(con, [launches(tmp_path / "first.json", 600, seed=1)])
    before = events_files(db)
    assert before, "pyarrow wrote no file: the test did not test"
    write = pq.write_table

    def full(table, where, **kwargs):  # type: ignore[no-untyped-def]
        write(table.slice(0, 1), where, **kwargs)  # a partial file, as a full disk leaves one
        raise OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    p = cli_in_process("ingest", str(launches(tmp_path / "big.json", 600)), "--db", str(db))
    assert p.returncode == 1
    [line] = p.stderr.strip().splitlines()
    assert line.startswith(
        f'gpuscope: {db}: the disk holding the store is full: Could not write file "{db}/data/'
    ), line
    assert line.endswith('.parquet": No space left on device'), line
    with connect(db) as con:
        assert con.execute("SELECT name FROM runs").fetchall() == [("first",)]
    assert events_files(db) == before


def test_a_stopped_ingest_leaves_none_of_the_files_pyarrow_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop (SIGTERM's request, as the CLI's handler makes it) after the second file: the
    ingest ends, nothing of it is stored, its files are gone."""
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "1000")
    trace = launches(tmp_path / "t.json", 3000)
    written: list[Path] = []
    write = batch_insert.write_events_file

    def then_stop(*args, **kwargs):  # type: ignore[no-untyped-def]
        written.append(write(*args, **kwargs))
        if len(written) == 2:
            request_stop(signal.SIGTERM)
        return written[-1]

    monkeypatch.setattr(batch_insert, "write_events_file", then_stop)
    try:
        with connect(tmp_path / "s") as con:
            with pytest.raises(SystemExit):
                ingest_paths(con, [trace])
            forget_stop()
            assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
            assert con.execute("SELECT count(*) FROM events").fetchone() == (0,)
    finally:
        forget_stop()
    assert len(written) >= 2
    assert [p for p in written if p.exists()] == []
    assert events_files(tmp_path / "s") == []


def test_a_deleted_run_s_files_go_with_the_store_s_maintenance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: list[Path]
) -> None:
    import gpuscope.store.connection as store_connection

    # no snapshot kept, no wait for readers: what maintenance deletes, it deletes now
    monkeypatch.setattr(store_connection, "SNAPSHOT_KEEP", "0 seconds")
    monkeypatch.setattr(store_connection, "CLEANUP_AGE", "0 seconds")
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "2000")
    with connect(tmp_path / "s") as con:
        [gone] = ingest_paths(con, [launches(tmp_path / "a.json", 3000, 1)])
        first = list(written)
        [kept] = ingest_paths(con, [launches(tmp_path / "b.json", 2000, 2)])
        assert len(first) >= 2 and len(written) > len(first)
        assert delete_run(con, gone.run_id)
        done = con.maintain()
        assert done["deleted"] >= len(first), done
        assert [p for p in first if p.exists()] == []
        assert all(p.exists() for p in written[len(first) :])
        assert con.execute("SELECT count(*) FROM events").fetchone() == (kept.n_events,)
        rows = digest(con)
        assert con.maintain(compact=True)["merged"] >= 1  # pyarrow's files merge as DuckLake's
        assert digest(con) == rows


def test_the_insert_writes_where_pyarrow_may_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(f"duckdb:{tmp_path / 'plain.duckdb'}") as con:  # a plain DuckDB file
        assert batch_insert.BatchInserter(con, "r").parquet_folder is None
    with connect(tmp_path / "s") as con:
        folder = batch_insert.BatchInserter(con, "r").parquet_folder
        assert folder == tmp_path / "s" / "data" / "main" / "events"
        monkeypatch.setenv(batch_insert.ENV_PARQUET_WRITER, "duckdb")
        assert batch_insert.BatchInserter(con, "r").parquet_folder is None
        monkeypatch.setenv(batch_insert.ENV_PARQUET_WRITER, "arrow")
        with pytest.raises(ValueError, match="pyarrow or duckdb"):
            batch_insert.BatchInserter(con, "r")


def test_an_encrypted_lake_s_files_are_written_by_the_insert(tmp_path: Path) -> None:
    """DuckLake encrypts the files of a lake made encrypted; pyarrow's would not be."""
    from gpuscope.store.extensions import offline_connection

    made = offline_connection("sqlite_scanner", "ducklake", "parquet")
    made.execute(
        f"ATTACH 'ducklake:sqlite:{tmp_path / 'catalog.sqlite'}' AS x "
        f"(DATA_PATH '{tmp_path}/data/', ENCRYPTED)"
    )
    made.close()
    with connect(tmp_path) as con:
        assert batch_insert.BatchInserter(con, "r").parquet_folder is None


def test_chunks_ducklake_would_inline_are_written_by_the_insert(
    tmp_path: Path, written: list[Path]
) -> None:
    """A chunk of no more rows than DuckLake keeps in its catalog (data inlining) goes to the
    INSERT, which keeps it there: a file of so few rows would outlive its deleted run (DuckLake
    inlines the deletion instead of retiring the file)."""
    with connect(tmp_path / "s") as con:
        assert batch_insert.BatchInserter(con, "r").inlined_rows == 10  # DuckLake's default
        con.execute(
            f"CALL {LAKE}.set_option('data_inlining_row_limit', '50', table_name => 'events')"
        )
        inserter = batch_insert.BatchInserter(con, "r")
        assert inserter.inlined_rows == 50
        [run] = ingest_paths(con, [launches(tmp_path / "t.json", 10)])  # 43 events
        assert run.n_events <= 50 and written == [] and events_files(tmp_path / "s") == []
        assert con.execute("SELECT count(*) FROM events").fetchone() == (run.n_events,)


def test_a_chunk_with_a_null_where_events_has_none_is_refused(tmp_path: Path) -> None:
    """ducklake_add_data_files does not check NOT NULL: such a chunk goes to the INSERT, which
    refuses it, and nothing is stored."""
    import pyarrow as pa

    with connect(tmp_path / "s") as con:
        inserter = batch_insert.BatchInserter(con, "r")
        assert inserter.parquet_folder is not None
        types = {c.name: c.type.replace(" NOT NULL", "") for c in batch_insert.EVENTS.columns}
        n = inserter.inlined_rows + 1  # more than DuckLake would inline: pyarrow's, but for this
        chunk = con.execute(
            "SELECT "
            + ", ".join(f"CAST(NULL AS {types[c]}) AS {c}" for c in batch_insert.BUFFERED_NAMES)
            + f" FROM range({n})"
        ).to_arrow_table()
        chunk = chunk.set_column(0, "rank", pa.array([0] * n, pa.int32()))
        with pytest.raises(duckdb.ConstraintException), con.writing():
            inserter._write(chunk)
        assert con.execute("SELECT count(*) FROM events").fetchone() == (0,)
    assert events_files(tmp_path / "s") == []
