"""Issue 11's speed work on the store, checked for what it must not change: opening a store imports
no pandas or pyarrow (``gpuscope runs``), and ``read_snapshot`` (one transaction for an analysis of a
lake) gives the same reports, writes nothing, and leaves the store usable after an error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect, delete_run, list_runs, open_store, read_snapshot

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"


def fresh_process_json(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (imports of a fresh process are the subject); the JSON
    of its last line."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The "before" sample ingested once for the module into a lake (closed): each test copies the
    folder (:func:`lake`) and works on its copy, the same lake as its own ingest would give (the
    Parquet files are found under the folder it is opened at), for 0.1 instead of 0.65 CPU s."""
    root = tmp_path_factory.mktemp("stored") / "store"
    store = connect(root)
    try:
        ingest_paths(store, [SAMPLES / "before"])
    finally:
        store.close()
    return root


@pytest.fixture
def lake(stored: Path, db_path: Path):
    """The test's own lake (at ``db_path``) holding the "before" sample, open."""
    shutil.copytree(stored, db_path)
    store = connect(db_path)
    yield store
    store.close()


@pytest.mark.slow
def test_opening_a_store_and_listing_runs_imports_neither_pandas_nor_pyarrow(stored, db_path):
    """What ``gpuscope runs`` does (the CLI's modules, open, list) pulls in no pandas (0.4 s) and
    no pyarrow: binding a query parameter made duckdb import pandas."""
    shutil.copytree(stored, db_path)  # a lake holding the "before" sample
    code = (
        "import sys, json\n"
        "import gpuscope.cli.main, gpuscope.cli.runs\n"
        "from gpuscope.store import open_store, list_runs\n"
        f"s = open_store({str(db_path)!r})\n"
        "runs = list_runs(s)\n"
        "s.close()\n"
        "print(json.dumps({'runs': [r['name'] for r in runs],\n"
        "                  'heavy': [m for m in ('pandas', 'pyarrow') if m in sys.modules]}))\n"
    )
    got = fresh_process_json(code)
    assert got == {"runs": ["before"], "heavy": []}


@pytest.mark.slow
def test_analyze_json_of_a_stored_document_imports_neither_pandas_nor_pyarrow(db_path):
    """``gpuscope analyze RUN --json`` answered from the document stored at ingest (issue 45: ≤ 1 s
    in a fresh process) reads one row: pandas alone would be 0.4 s of it, and duckdb imports
    pandas when a statement binds a parameter, so neither the run's lookup by a prefix of its id
    nor the document's read binds one. The printed JSON is the stored document's."""
    from clitools import cli_in_process

    ingest = cli_in_process("ingest", str(SAMPLES / "before"), "--db", str(db_path))
    assert ingest.returncode == 0, ingest.stderr
    store = connect(db_path)
    (run_id,) = store.execute("SELECT run_id FROM runs").fetchone()
    from gpuscope.analysis import report_part

    # an id that is not the ingest's hex is bound as a parameter, never written into SQL
    assert report_part.stored_text(store, run_id) is not None
    assert report_part.stored_text(store, f"{run_id}' OR true --") is None
    store.close()
    code = (
        "import io, json, sys\n"
        "from contextlib import redirect_stdout\n"
        "from gpuscope.cli.main import main\n"
        "out = io.StringIO()\n"
        "with redirect_stdout(out):\n"
        f"    rc = main(['analyze', {run_id[:6]!r}, '--json', '--db', {str(db_path)!r}])\n"
        "doc = json.loads(out.getvalue())\n"
        "print(json.dumps({'rc': rc, 'run': doc['run']['id'], 'steps': len(doc['steps']),\n"
        "                  'heavy': [m for m in ('pandas', 'pyarrow') if m in sys.modules]}))\n"
    )
    got = fresh_process_json(code)
    assert got == {"rc": 0, "run": run_id, "steps": 5, "heavy": []}


def test_a_new_store_still_gets_its_tables_and_version_on_first_open(db_path):
    store = open_store(db_path)
    try:
        tables = {
            r[0]
            for r in store.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake'"
            ).fetchall()
        }
        assert {"runs", "events", "names", "gpuscope_meta"} <= tables
        (version,) = store.execute(
            "SELECT value FROM gpuscope_meta WHERE key = 'schema_version'"
        ).fetchone()
        assert version == "3"
    finally:
        store.close()


@pytest.mark.slow
def test_analysis_in_a_snapshot_equals_the_analysis_outside_and_writes_nothing(lake, db_path):
    (run_id,) = lake.execute("SELECT run_id FROM runs").fetchone()
    before = lake.generation()
    in_block = analyze_run(lake, run_id).to_json()  # opens its own read_snapshot
    assert lake.generation() == before  # the block's COMMIT made no snapshot
    other = connect(db_path)  # analysed statement by statement (no block: a bare connection)
    try:
        plain = analyze_run(other.con, run_id).to_json()
    finally:
        other.close()
    assert in_block == plain
    assert analyze_run(lake, run_id).to_json() == in_block  # warm, in a new block


@pytest.mark.slow
def test_a_failed_block_rolls_back_and_the_next_analysis_rebuilds_its_tables(lake):
    (run_id,) = lake.execute("SELECT run_id FROM runs").fetchone()
    forgotten = []
    with (
        pytest.raises(duckdb.ConversionException),
        read_snapshot(lake, on_rollback=lambda: forgotten.append(True)) as seq,
    ):
        assert seq > 0 and lake.snapshot_seq == seq
        ix = RankIndex.shared(lake, run_id, 0)
        ix.gpu()  # a temp table, committed by settle_snapshot
        lake.execute("SELECT 'not a number'::INTEGER").fetchall()  # aborts the transaction
    assert forgotten == [True] and lake.snapshot_seq == 0
    lake.execute("SELECT 1").fetchall()  # no transaction left aborted
    report = analyze_run(lake, run_id).to_json()
    assert report["kernels"]["n_kernels"] > 0


def test_a_failed_commit_of_a_block_rolls_back_and_is_raised(lake):
    """The block's COMMIT fails (e.g. the catalog went away): the error reaches the caller as it
    was, the transaction is rolled back, the callers' temp-table names are forgotten, and the
    store works afterwards."""

    class CommitFails:
        def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
            self.real = con

        def execute(self, sql: str, *args: object) -> object:
            if sql.strip().upper() == "COMMIT":
                raise duckdb.IOException("Could not write the catalog: disk I/O error")
            return self.real.execute(sql, *args)

        def __getattr__(self, name: str) -> object:
            return getattr(self.real, name)

    real = lake.con
    forgotten = []
    lake.con = CommitFails(real)
    try:
        with (
            pytest.raises(duckdb.IOException, match="disk I/O error"),
            read_snapshot(lake, on_rollback=lambda: forgotten.append(True)) as seq,
        ):
            assert seq > 0
            lake.execute("SELECT count(*) FROM runs").fetchall()
    finally:
        lake.con = real
    assert forgotten == [True] and lake.snapshot_seq == 0
    assert lake.execute("SELECT count(*) FROM runs").fetchone()[0] >= 1  # no transaction left


def test_a_block_inside_a_write_transaction_joins_it(lake):
    with lake.writing(), read_snapshot(lake) as seq:
        assert seq == 0  # joined: no BEGIN of its own
        lake.execute("SELECT count(*) FROM runs").fetchall()
    with read_snapshot(lake) as outer, read_snapshot(lake) as inner:
        assert outer > 0 and inner == 0


@pytest.mark.slow
def test_a_run_deleted_between_two_analyses_is_noticed(lake, db_path):
    (run_id,) = lake.execute("SELECT run_id FROM runs").fetchone()
    first = analyze_run(lake, run_id).to_json()
    assert first["kernels"]["n_kernels"] > 0
    other = connect(db_path)
    try:
        assert delete_run(other, run_id)
    finally:
        other.close()
    with pytest.raises(ValueError):
        analyze_run(lake, run_id)


def test_an_open_recreates_a_missing_table_and_refuses_another_version(db_path):
    """The one-query fast path on open lets nothing through that the long way would fix or refuse."""
    store = open_store(db_path)
    with store.writing():
        store.execute("DROP TABLE nvml_series")
    store.close()
    store = open_store(db_path)  # incomplete: the long way creates it again
    try:
        assert store.execute("SELECT count(*) FROM nvml_series").fetchone() == (0,)
        with store.writing():
            store.execute("UPDATE gpuscope_meta SET value = '99' WHERE key = 'schema_version'")
    finally:
        store.close()
    with pytest.raises(IngestError, match="schema version 99"):
        open_store(db_path)


@pytest.mark.slow
def test_the_run_names_copy_never_outlives_an_analysis(stored, db_path, monkeypatch):
    """analyze_run reads a run's names once into a temp ``names``; after the call, also one that
    failed half-way (its tables committed mid-block), the store's own table answers again."""
    import gpuscope.analysis.report as report

    shutil.copytree(stored, db_path)  # a lake holding the "before" sample
    store = connect(db_path)
    try:
        ingest_paths(store, [SAMPLES / "after"])
        ids = [r["run_id"] for r in list_runs(store)]

        def names_runs() -> int:
            return store.execute("SELECT count(DISTINCT run_id) FROM names").fetchone()[0]

        assert names_runs() == 2
        first = analyze_run(store, ids[0]).to_json()
        assert names_runs() == 2

        def boom(*a, **k):
            raise RuntimeError("half-way")

        monkeypatch.setattr(report, "idle_analysis", boom)
        with pytest.raises(RuntimeError, match="half-way"):
            analyze_run(store, ids[1])  # find_window built (and committed) its tables first
        assert names_runs() == 2
        monkeypatch.undo()
        assert analyze_run(store, ids[0]).to_json() == first
    finally:
        store.close()
