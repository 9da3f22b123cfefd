"""The store as a DuckLake: many processes at once, atomic runs, legacy files moved over, specs.

Real processes (``python -m gpuscope``), real stores on disk, the sample traces.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from clitools import analysis_store, cli_in_process
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import (
    LAKE,
    RUN_TABLES,
    StoreSpec,
    connect,
    list_runs,
    parse_spec,
    postgres_conninfo,
    s3_secret_sql,
)
from gpuscope.store.schema import TABLES
from tracegen import TraceBuilder, stepped_big_run, two_rank_job

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
SAMPLE_RUNS = [SAMPLES / "before", SAMPLES / "after", SAMPLES / "ddp"]


def gpuscope(*args: object, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def in_process(*args: object) -> subprocess.CompletedProcess[str]:
    """``gpuscope ARGS`` in this process (clitools.cli_in_process: the same exit code, stdout and
    stderr), for tests where no process is the point."""
    return cli_in_process(*map(str, args))


def spawn(*args: object, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuscope", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def big_trace(path: Path, kernels: int) -> Path:
    t = TraceBuilder()
    for i in range(kernels):
        t.launch(f"k{i % 50}", i * 10.0, i * 10.0 + 1, 1.0)
    return t.write(path, indent=None)


def table_rows(con, table: str) -> list[tuple]:
    cols = ", ".join(next(t for t in TABLES if t.name == table).column_names)
    if table == "runs":  # created_at and uploaded_by are compared apart
        cols = cols.replace("created_at, ", "")
    return con.execute(f"SELECT {cols} FROM {table} ORDER BY ALL").fetchall()


# -- many processes --------------------------------------------------------------------------------


@pytest.mark.slow
def test_four_parallel_ingests_into_one_local_store_all_land(tmp_path):
    # runs of each kind (two traces, a run of two ranks, an NVML log), small: four writers at
    # once on a store none of them has made yet is the subject, not what the runs hold (the four
    # start together and take about as long to import, so their first opens of the store meet)
    store = tmp_path / "store"
    inputs = [
        big_trace(tmp_path / "before.json", 300),
        big_trace(tmp_path / "after.json", 301),
        two_rank_job(tmp_path / "ddp", (80.0, 20.0)),
        SAMPLES / "nvml" / "synthetic_h100x2_100ms.nvml.jsonl",
    ]
    procs = [spawn("ingest", p, "--db", store, "--json") for p in inputs]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    ids = {r["run_id"] for out, _ in outs for r in json.loads(out)}
    # the listing in-process (clitools.cli_in_process): the four writers are the processes here
    listed = json.loads(in_process("runs", "--json", "--db", store).stdout)
    assert {r["run_id"] for r in listed} == ids and len(ids) == 4
    con = connect(store)
    for r in listed:  # every run whole: its events (or samples) are all there
        table = "events" if r["kind"] == "trace" else "nvml_samples"
        n = con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [r["run_id"]])
        assert n.fetchone()[0] == r["n_events"]
    con.close()


@pytest.mark.slow
def test_a_reader_in_another_process_never_sees_a_partial_run(tmp_path):
    """While `gpuscope ingest` writes a big run (events flushed in many chunks), a reader that
    stays open sees no run and no events, then the whole run: never part of it."""
    trace = stepped_big_run(tmp_path / "big.json", 60000)
    store = tmp_path / "store"
    reader = connect(store)  # opened before, kept open: as the dashboard does
    reader.execute("SET threads = 1")  # small scans: a second thread's waits only cost CPU
    env = {**os.environ, "GPUSCOPE_FLUSH_ROWS": "20000"}
    proc = spawn("ingest", trace, "--db", store, env=env)
    seen = []
    one_snapshot = (  # one statement reads one snapshot; the filters make it read the rows
        "SELECT (SELECT count(*) FROM runs WHERE run_id IS NOT NULL), "
        "(SELECT sum(n_events) FROM runs), (SELECT count(*) FROM events WHERE run_id IS NOT NULL)"
    )
    while proc.poll() is None:
        seen.append(reader.execute(one_snapshot).fetchone())
        time.sleep(0.02)
    assert proc.returncode == 0, proc.stderr.read()
    final = reader.execute("SELECT count(*), sum(n_events) FROM runs").fetchone()
    n_final = reader.execute("SELECT count(*) FROM events").fetchone()[0]
    assert final[0] == 1 and n_final == final[1] == 2 + 4 * (60000 + 2) + 2
    assert len(seen) > 3, "the ingest ended before the reader could look"
    for n_runs, n_listed, n_events in seen:
        assert (n_runs, n_events) == (0, 0) or (n_runs == 1 and n_events == n_listed), seen
    reader.close()


@pytest.mark.slow
def test_concurrent_first_opens_of_a_new_store_all_succeed(tmp_path):
    store = tmp_path / "fresh"
    procs = [spawn("runs", "--json", "--db", store) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and json.loads(out) == [], err
    con = connect(store)
    assert con.execute("SELECT count(*) FROM gpuscope_meta").fetchone()[0] == 1
    tables = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [LAKE]
        ).fetchall()
    }
    assert tables == {t.name for t in TABLES} | {"gpuscope_meta"}
    con.close()


def _catalog_queries(con, sql: str, capfd) -> int:
    """How many queries DuckLake sends the SQLite catalog to answer ``sql``."""
    capfd.readouterr()
    con.execute("SET sqlite_debug_show_queries = true")
    try:
        con.execute(sql).fetchall()
    finally:
        con.execute("SET sqlite_debug_show_queries = false")
    return sum(1 for line in capfd.readouterr().err.splitlines() if line.strip())


def _tables_without_statistics(con) -> set[str]:
    meta = f"__ducklake_metadata_{LAKE}"
    return {
        r[0]
        for r in con.execute(
            f"SELECT table_name FROM {meta}.ducklake_table WHERE end_snapshot IS NULL "
            f"AND table_id NOT IN (SELECT table_id FROM {meta}.ducklake_table_stats)"
        ).fetchall()
    }


def test_every_lake_table_has_statistics_so_scanning_an_empty_one_costs_what_a_full_one_does(
    tmp_path, capfd
):
    """DuckLake re-reads the catalog's statistics once per bound column, on every statement, for
    a table that never held a row (60-100 ms a scan): a new lake and an older one once reopened
    have a statistics row for every table, and no placeholder row is left anywhere."""
    db = tmp_path / "lake"
    con = connect(db)
    assert _tables_without_statistics(con) == set()
    assert {
        t.name: con.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0] for t in TABLES
    } == {t.name: 0 for t in TABLES}
    ingest_paths(con, [SAMPLES / "before" / "before_rank0.pt.trace.json.gz"])
    runs = con.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
    full = _catalog_queries(con, "SELECT * FROM events LIMIT 1", capfd)
    seeded = _catalog_queries(con, "SELECT * FROM memory_events", capfd)
    assert con.execute("SELECT count(*) FROM memory_events").fetchone() == (0,)
    # A lake written before: its empty tables have no statistics row.
    meta = f"__ducklake_metadata_{LAKE}"
    con.execute(
        f"DELETE FROM {meta}.ducklake_table_stats WHERE table_id IN (SELECT table_id FROM "
        f"{meta}.ducklake_table WHERE table_name = 'memory_events' AND end_snapshot IS NULL)"
    )
    con.close()
    con = duckdb_lake(db)
    bare = _catalog_queries(con, "SELECT * FROM memory_events", capfd)
    con.close()
    assert bare > 1.5 * max(full, seeded) and seeded < 1.25 * full, (bare, full, seeded)
    con = connect(db)
    assert _tables_without_statistics(con) == set()
    assert _catalog_queries(con, "SELECT * FROM memory_events", capfd) == seeded
    assert con.execute("SELECT * FROM runs ORDER BY run_id").fetchall() == runs
    assert con.execute("SELECT count(*) FROM memory_events").fetchone() == (0,)
    con.close()


def test_a_statement_over_temporary_tables_reads_nothing_of_the_lake_catalog(tmp_path, capfd):
    """An analysis's working tables are temporary: its statements (functions, casts, temporary
    tables) find every name before the lake, on the store's connection and on each cursor, while
    the lake's tables are still found by their bare names."""
    con = connect(tmp_path / "lake")
    ingest_paths(con, [SAMPLES / "before" / "before_rank0.pt.trace.json.gz"])
    for on in (con, con.cursor()):
        on.execute("CREATE OR REPLACE TEMP TABLE work AS SELECT range AS i FROM range(10)")
        sql = "SELECT sum(abs(i))::BIGINT, current_setting('threads') IS NOT NULL FROM work"
        assert _catalog_queries(on, sql, capfd) == 0
        assert on.execute(sql).fetchone() == (45, True)
        assert _catalog_queries(on, "SELECT count(*) FROM events", capfd) > 0
        assert on.execute("SELECT count(*) FROM runs").fetchone() == (1,)
        with pytest.raises(duckdb.ParserException, match="TEMPORARY"):
            on.execute("CREATE TABLE stray (i INTEGER)")  # never silently beside the lake
    con.close()


def duckdb_lake(db: Path) -> duckdb.DuckDBPyConnection:
    """The lake attached by plain DuckDB, without gpuscope's open (which seeds statistics)."""
    from gpuscope.store.extensions import offline_connection

    con = offline_connection("sqlite_scanner", "ducklake", "parquet")
    con.execute(
        f"ATTACH 'ducklake:sqlite:{db / 'catalog.sqlite'}' AS {LAKE} (DATA_PATH '{db}/data/')"
    )
    con.execute(f"USE {LAKE}")
    return con


@pytest.mark.slow
def test_a_run_written_by_another_process_changes_the_generation(tmp_path, db_path):
    trace = big_trace(tmp_path / "written.json", 50)  # any run: the writer is the subject
    con = connect(db_path)
    before = con.generation()
    assert gpuscope("ingest", trace, "--db", db_path).returncode == 0
    assert con.generation() > before
    assert [r["name"] for r in list_runs(con)] == ["written"]
    con.close()


# -- atomic runs, files ----------------------------------------------------------------------------


def test_a_failed_ingest_leaves_no_rows_and_no_files(tmp_path, db_path, monkeypatch):
    """A bad file after a good one: nothing of either is stored, not even Parquet files."""
    monkeypatch.setenv("GPUSCOPE_FLUSH_ROWS", "1000")
    good = big_trace(tmp_path / "good.json", 3000)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    con = connect(db_path)
    with pytest.raises(IngestError, match=r"bad\.json"):
        ingest_paths(con, [good, bad])
    assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES} == {
        t: 0 for t in RUN_TABLES
    }
    assert sorted((db_path / "data").glob("**/*.parquet")) == []
    con.close()


@pytest.mark.slow
def test_runs_record_who_uploaded_them(tmp_path, monkeypatch):
    # small runs of each kind (a trace, an NVML log, a run of two ranks) in a DuckDB file
    # (clitools.analysis_store; the lake under GPUSCOPE_TESTS_ON_LAKE=1): who uploaded is the
    # subject (runs.uploaded_by, the same column on either), not what the runs hold or the lake
    db_path = analysis_store(tmp_path)
    before, after = big_trace(tmp_path / "before.json", 20), big_trace(tmp_path / "after.json", 21)
    ddp = two_rank_job(tmp_path / "ddp", (80.0, 20.0))
    con = connect(db_path)
    [t] = ingest_paths(con, [before], uploaded_by="ann@example.org")
    [n] = ingest_paths(
        con, [SAMPLES / "nvml" / "synthetic_h100x2_100ms.nvml.jsonl"], uploaded_by="bo"
    )
    assert (t.uploaded_by, n.uploaded_by) == ("ann@example.org", "bo")
    con.close()
    # the CLI in-process (clitools.cli_in_process): who uploaded is the subject, not a process
    assert in_process("ingest", after, "--db", db_path).returncode == 0
    listed = {
        r["name"]: r["uploaded_by"]
        for r in json.loads(in_process("runs", "--json", "--db", db_path).stdout)
    }
    assert listed["before"] == "ann@example.org" and listed["after"] is None
    assert list(listed.values()).count("bo") == 1
    monkeypatch.setenv("GPUSCOPE_ALLOW_UPLOADED_BY", "1")  # an admin's import may name anyone
    r = in_process("ingest", ddp, "--db", db_path, "--uploaded-by", "Cy", "--json")
    assert json.loads(r.stdout)[0]["uploaded_by"] == "cy"
    assert json.loads(r.stdout)[0]["n_ranks"] == 2


@pytest.mark.slow
def test_compaction_merges_small_files_and_keeps_every_row(tmp_path, db_path):
    con = connect(db_path)
    for i in range(4):
        ingest_paths(con, [big_trace(tmp_path / f"t{i}.json", 200 + i)])
    rows = table_rows(con, "events")
    before = len(sorted((db_path / "data").glob("**/events/*.parquet")))
    done = con.maintain(compact=True)
    assert done["merged"] >= 1
    assert table_rows(con, "events") == rows
    files = con.execute(f"SELECT count(*) FROM ducklake_list_files('{LAKE}', 'events')").fetchone()[
        0
    ]
    assert files < before
    con.close()


@pytest.mark.slow
def test_delete_rename_tag_from_the_cli_while_another_process_holds_the_store_open(
    tmp_path, db_path
):
    holder = connect(db_path)
    [r] = ingest_paths(holder, [big_trace(tmp_path / "held.json", 50)])  # any run
    assert gpuscope("runs", "--rename", r.run_id, "renamed", "--db", db_path).returncode == 0
    assert gpuscope("runs", "--tag", r.run_id, "x", "y", "--db", db_path).returncode == 0
    row = holder.execute("SELECT name, tags FROM runs").fetchone()
    assert row == ("renamed", ["x", "y"])
    assert gpuscope("delete", r.run_id, "--db", db_path).stdout.strip() == r.run_id
    assert {t: holder.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES} == {
        t: 0 for t in RUN_TABLES
    }
    holder.close()


# -- extensions offline --------------------------------------------------------------------------


def test_extensions_load_from_their_packages_with_nothing_downloaded(tmp_path):
    """HOME is empty (no ~/.duckdb/extensions) and auto-install is off: the store still opens,
    with every extension it needs loaded from the installed packages."""
    code = (
        "import sys; from gpuscope.store import connect; s = connect(sys.argv[1]);"
        "print(s.execute(\"SELECT current_setting('autoinstall_known_extensions'),"
        " current_setting('autoload_known_extensions')\").fetchone());"
        "print(sorted(r[0] for r in s.execute('SELECT extension_name FROM duckdb_extensions() "
        "WHERE loaded').fetchall()))"
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
    }
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    settings, loaded = r.stdout.splitlines()
    assert settings == "(False, False)"
    assert {"ducklake", "sqlite_scanner", "parquet"} <= set(eval(loaded))
    assert not (home / ".duckdb").exists()


# -- legacy DuckDB files ---------------------------------------------------------------------------


def test_an_extension_file_is_signature_checked_once_per_process_and_again_once_changed(
    tmp_path, monkeypatch
):
    """DuckDB's signature check hashes the whole file on every load into a new database (about
    90 ms an extension). A file checked once in this process loads again without it, the
    connection gets no standing leave to load unsigned code, and a file changed since is checked
    again (here: refused, its bytes no longer match the signature)."""
    from gpuscope.store import extensions

    copy = tmp_path / "sqlite_scanner.duckdb_extension"
    copy.write_bytes(extensions.extension_file("sqlite_scanner").read_bytes())
    monkeypatch.setattr(extensions, "extension_file", lambda name: copy)
    monkeypatch.setattr(extensions, "_VERIFIED", {})

    first = extensions.offline_connection("sqlite_scanner")  # checked: the file is signed
    assert str(copy) in extensions._VERIFIED
    first.close()
    second = extensions.offline_connection("sqlite_scanner")  # unchanged: loaded unchecked
    loaded = "SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner'"
    assert second.execute(loaded).fetchone() == (True,)
    unsigned = "SELECT current_setting('allow_unsigned_extensions')"
    assert second.execute(unsigned).fetchone() == (False,)
    second.close()

    # Replaced as pip replaces a file (a new file renamed over it; writing into the loaded one
    # would change code this process has mapped): same size, other bytes, another inode.
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "new").write_bytes(bytes(data))
    os.replace(tmp_path / "new", copy)
    with pytest.raises(duckdb.Error, match=r"(?i)signature"):
        extensions.offline_connection("sqlite_scanner")
    assert extensions._VERIFIED[str(copy)] != extensions._stamp(copy)  # not trusted either


def test_a_refused_extension_is_one_line_naming_the_store_and_leaves_nothing(
    tmp_path, monkeypatch, capsys
):
    """An extension file DuckDB refuses (its bytes no longer match the signature): `gpuscope runs`
    exits 2 with one line naming the store and the reason, the half-made connection is closed,
    and no store folder is created."""
    import gpuscope.store.extensions as extensions
    from clitools import run_cli

    real = extensions.extension_file("ducklake")
    data = bytearray(real.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "ducklake.duckdb_extension"
    bad.write_bytes(bytes(data))
    checked = extensions.extension_file
    monkeypatch.setattr(
        extensions, "extension_file", lambda name: bad if name == "ducklake" else checked(name)
    )
    opened: list[duckdb.DuckDBPyConnection] = []
    real_connect = duckdb.connect

    def connect(*args, **kwargs):
        opened.append(real_connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(extensions.duckdb, "connect", connect)
    store = tmp_path / "store"
    code, out, err = run_cli(capsys, "runs", "--db", str(store))
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert str(store) in line and "cannot load DuckDB extensions" in line
    assert "signature" in line.lower()
    assert len(opened) == 1
    with pytest.raises(duckdb.ConnectionException):
        opened[0].execute("SELECT 1")
    assert not store.exists()


def legacy_store(path: Path) -> list[str]:
    """A legacy (pre-DuckLake) DuckDB file at ``path`` holding the three sample runs and the NVML
    sample; their run ids."""
    con = connect(f"duckdb:{path}")
    results = ingest_paths(
        con, [*SAMPLE_RUNS, SAMPLES / "nvml" / "synthetic_h100x2_100ms.nvml.jsonl"]
    )
    con.close()
    return sorted(r.run_id for r in results)


@pytest.fixture(scope="module")
def legacy_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """One :func:`legacy_store` for the module, never written: each test copies it (a closed
    DuckDB database is the one file) and moves or reads its own copy."""
    path = tmp_path_factory.mktemp("legacy") / "legacy.duckdb"
    return path, legacy_store(path)


def copy_legacy(legacy_file: tuple[Path, list[str]], path: Path) -> list[str]:
    """``legacy_file`` copied to ``path``: what :func:`legacy_store` makes there; its run ids."""
    template, ids = legacy_file
    assert [f.name for f in template.parent.iterdir()] == [template.name]  # no WAL beside it
    shutil.copyfile(template, path)
    return ids


def dump(con) -> dict[str, list[tuple]]:
    return {t: table_rows(con, t) for t in RUN_TABLES}


@pytest.mark.slow
def test_gpuscope_migrate_moves_a_legacy_file_over_row_for_row(tmp_path, legacy_file):
    legacy = tmp_path / "old.duckdb"
    ids = copy_legacy(legacy_file, legacy)
    raw = duckdb.connect(str(legacy), read_only=True)
    expected = dump(raw)
    raw.close()
    # in-process (clitools.cli_in_process: the same exit code, stdout and stderr): the move of
    # the rows is the subject, not a process
    r = in_process("migrate", "--db", legacy)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("\n") == 1 and "pre-ducklake" in r.stderr
    backup = tmp_path / "old.duckdb.pre-ducklake"
    assert legacy.is_dir() and backup.is_file()
    con = connect(legacy)
    assert sorted(r["run_id"] for r in list_runs(con)) == ids
    assert dump(con) == expected
    con.close()
    again = in_process("migrate", "--db", legacy)
    assert again.returncode == 0 and "nothing to migrate" in again.stdout


@pytest.mark.slow
def test_a_legacy_file_at_the_old_default_moves_over_on_first_open(tmp_path, legacy_file):
    home = tmp_path / "xdg"
    old = home / "gpuscope" / "gpuscope.duckdb"
    old.parent.mkdir(parents=True)
    ids = copy_legacy(legacy_file, old)
    env = {k: v for k, v in os.environ.items() if k not in ("GPUSCOPE_DB", "GPUSCOPE_STORE")}
    env["XDG_DATA_HOME"] = str(home)
    r = gpuscope("runs", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(x["run_id"] for x in json.loads(r.stdout)) == ids
    assert "moved the DuckDB store" in r.stderr and r.stderr.count("\n") == 1
    assert (home / "gpuscope" / "store" / "catalog.sqlite").is_file()
    assert (home / "gpuscope" / "gpuscope.duckdb.pre-ducklake").is_file()
    r2 = gpuscope("runs", "--json", env=env)  # once only
    assert r2.stderr == "" and len(json.loads(r2.stdout)) == len(ids)


@pytest.mark.slow
def test_migrate_file_copies_into_another_store_skipping_runs_it_has(
    tmp_path, db_path, legacy_file
):
    legacy = tmp_path / "old.duckdb"
    ids = copy_legacy(legacy_file, legacy)
    con = connect(db_path)
    ingest_paths(con, [SAMPLES / "before"])
    con.close()
    # in-process (clitools.cli_in_process: the same exit code, stdout and stderr): what is copied
    # and skipped is the subject, not a process
    r = in_process("migrate", legacy, "--db", db_path, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["copied"]) == len(ids) - 1 and len(out["skipped"]) == 1
    assert legacy.is_file()  # only read
    con = connect(db_path)
    assert sorted(x["run_id"] for x in list_runs(con)) == ids
    con.close()
    bad = in_process("migrate", tmp_path / "nope.duckdb", "--db", db_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


# -- specs -----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["--store", "ftp://example.org/x"],
        ["--store", "postgres://nobody:secret@127.0.0.1:1/nodb"],
        ["--store", "duckdb:"],
        ["--db", "a", "--store", "b"],
    ],
)
def test_a_bad_or_unreachable_store_is_one_line_exit_2(args, tmp_path):
    r = gpuscope("runs", *args, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "secret" not in r.stderr  # a password never reaches the terminal


def test_a_file_that_is_not_a_store_is_one_line_exit_2(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    r = gpuscope("runs", "--db", f)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a gpuscope store" in r.stderr


def test_store_specs():
    assert parse_spec(":memory:") == StoreSpec("duckdb", ":memory:")
    assert parse_spec("duckdb:/x/y.duckdb").kind == "duckdb"
    team = parse_spec("postgresql://u:p%40ss@db.example:5433/lake", "s3://b/p")
    assert (team.kind, team.data_path) == ("team", "s3://b/p")
    assert team.shown() == "postgresql://u:***@db.example:5433/lake"
    assert postgres_conninfo(team.location) == (
        "host='db.example' port='5433' user='u' password='p@ss' dbname='lake'"
    )
    local = parse_spec("~/somewhere")
    assert local.kind == "local" and local.location == str(Path.home() / "somewhere")


def test_s3_secret_from_the_standard_environment():
    sql = s3_secret_sql(
        {
            "AWS_ACCESS_KEY_ID": "AK",
            "AWS_SECRET_ACCESS_KEY": "S'K",
            "AWS_REGION": "eu-west-1",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        }
    )
    assert sql == (
        "CREATE OR REPLACE SECRET gpuscope_s3 (TYPE s3, KEY_ID 'AK', SECRET 'S''K', "
        "REGION 'eu-west-1', ENDPOINT '127.0.0.1:9000', USE_SSL false, URL_STYLE 'path')"
    )
    assert s3_secret_sql({}) is None


@pytest.mark.slow
def test_analyses_on_the_lake_equal_those_on_a_plain_duckdb_store(tmp_path, db_path):
    """Every analysis reads the lake exactly as it read a DuckDB file: same report, per sample."""
    from gpuscope.analysis.report import analyze_run

    lake = connect(db_path)
    plain = connect(":memory:")
    for store in (lake, plain):
        ingest_paths(store, SAMPLE_RUNS)
    for r in list_runs(lake):
        on_lake = analyze_run(lake, r["run_id"]).to_json()
        on_plain = analyze_run(plain, r["run_id"]).to_json()
        assert on_lake == on_plain, r["name"]
    lake.close()
    plain.close()


def test_a_lock_that_cannot_be_taken_is_reported_and_leaks_nothing(tmp_path, monkeypatch):
    """WriteLock.held: when flock fails (an interrupted wait, an NFS without locks) the error
    reaches the caller unchanged, the descriptor is closed and the next write takes the lock."""
    import fcntl

    from gpuscope import store as S

    real_flock = fcntl.flock

    lock = S.WriteLock(tmp_path / "w.lock")
    calls = []

    def failing(fd, op):
        calls.append(fd)
        raise OSError(37, "No locks available")

    monkeypatch.setattr(fcntl, "flock", failing)
    with pytest.raises(OSError, match="No locks available"), lock.held():
        pass
    (fd,) = calls
    with pytest.raises(OSError):  # closed: no descriptor left behind
        os.fstat(fd)
    monkeypatch.setattr(fcntl, "flock", real_flock)
    with lock.held():
        assert lock.depth == 1
    assert lock.depth == 0 and lock.fd is None


def test_a_non_duckdb_failure_while_opening_closes_the_connection(tmp_path, monkeypatch):
    """open_store: an error that is not DuckDB's (here a failing schema step) reaches the caller
    unchanged and the half-opened connection is closed, so the store opens afterwards."""
    from gpuscope.store import opening as S

    closed = []

    def boom(store):
        closed.append(store.con)
        raise RuntimeError("schema step failed")

    monkeypatch.setattr(S, "ensure_lake_schema", boom)
    with pytest.raises(RuntimeError, match="schema step failed"):
        S.open_store(str(tmp_path / "store"))
    (con,) = closed
    with pytest.raises(duckdb.Error):  # closed by the cleanup
        con.execute("SELECT 1")
    monkeypatch.undo()
    s = S.open_store(str(tmp_path / "store"))
    assert s.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def _connect_spy(monkeypatch) -> list[dict]:
    """The configs ``duckdb.connect`` is given from now on (a trusted file's connection is made
    with ``allow_unsigned_extensions``: its check skipped)."""
    from gpuscope.store import extensions

    seen: list[dict] = []
    real = duckdb.connect

    def spy(database=":memory:", read_only=False, config=None):  # type: ignore[no-untyped-def]
        seen.append(dict(config or {}))
        return real(database, read_only=read_only, config=config or {})

    monkeypatch.setattr(extensions.duckdb, "connect", spy)
    return seen


def _private_copy(tmp_path, monkeypatch, name: str = "sqlite_scanner"):  # type: ignore[no-untyped-def]
    from gpuscope.store import extensions

    folder = tmp_path / "ext"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    copy = folder / f"{name}.duckdb_extension"
    copy.write_bytes(extensions.extension_file(name).read_bytes())
    monkeypatch.setattr(extensions, "extension_file", lambda n: copy)
    monkeypatch.setattr(extensions, "_VERIFIED", {})
    return copy


def _check_in_another_process(copy: Path) -> None:
    """Load the extension file ``copy`` in a new Python process (its first, checked load)."""
    code = (
        "import sys; from pathlib import Path; from gpuscope.store import extensions as x; "
        "x.extension_file = lambda n: Path(sys.argv[1]); "
        "x.offline_connection('sqlite_scanner').close()"
    )
    r = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_check_stands_for_later_processes_through_the_stamp_beside_the_file(
    tmp_path, monkeypatch
):
    """A process's check leaves a stamp beside the file; a later process loads the same file
    without the check, and the connection it gets has no standing leave to load unsigned code."""
    from gpuscope.store import extensions

    copy = _private_copy(tmp_path, monkeypatch)
    _check_in_another_process(copy)
    stamp = copy.with_name(copy.name + extensions.STAMP_SUFFIX)
    assert json.loads(stamp.read_text()) == {
        "duckdb": duckdb.__version__,
        "file": list(extensions._stamp(copy)),
    }
    seen = _connect_spy(monkeypatch)
    con = extensions.offline_connection("sqlite_scanner")
    assert seen[-1].get("allow_unsigned_extensions") is True  # trusted from the stamp
    assert con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone() == (False,)
    loaded = "SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner'"
    assert con.execute(loaded).fetchone() == (True,)
    con.close()


def test_a_file_changed_after_its_stamp_is_checked_again(tmp_path, monkeypatch):
    """A stamp names one file as it was: the same file written to in place (size and mtime put
    back: the change time still moves) is checked again, and here refused (its bytes no longer
    match the signature). (Another file renamed over it has another inode too.)"""
    from gpuscope.store import extensions

    copy = _private_copy(tmp_path, monkeypatch)
    _check_in_another_process(copy)  # checked and stamped there; never loaded in this process
    assert extensions._disk_trusted(copy)
    before = copy.stat()
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    time.sleep(0.01)  # a change time the clock can tell apart
    with open(copy, "r+b") as f:  # in place, the same inode
        f.write(bytes(data))
    os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert copy.stat().st_size == before.st_size and copy.stat().st_ino == before.st_ino
    assert copy.stat().st_mtime_ns == before.st_mtime_ns
    assert not extensions._disk_trusted(copy)
    seen = _connect_spy(monkeypatch)
    with pytest.raises(duckdb.Error, match=r"(?i)signature"):
        extensions.offline_connection("sqlite_scanner")
    assert not seen[-1].get("allow_unsigned_extensions")


@pytest.mark.parametrize("how", ["folder others may write to", "another duckdb", "not JSON"])
def test_a_stamp_that_cannot_be_relied_on_is_not(tmp_path, monkeypatch, how):
    """A stamp in a folder that others may write to (they could have forged it), one written for
    another duckdb, or one that is not what gpuscope writes: the file is checked again."""
    from gpuscope.store import extensions

    copy = _private_copy(tmp_path, monkeypatch)
    extensions.offline_connection("sqlite_scanner").close()
    stamp = copy.with_name(copy.name + extensions.STAMP_SUFFIX)
    if how == "folder others may write to":
        copy.parent.chmod(0o777)
    elif how == "another duckdb":
        stamp.write_text(json.dumps({"duckdb": "0.0.1", "file": list(extensions._stamp(copy))}))
    else:
        stamp.write_text("{")
    monkeypatch.setattr(extensions, "_VERIFIED", {})
    seen = _connect_spy(monkeypatch)
    extensions.offline_connection("sqlite_scanner").close()
    assert not seen[-1].get("allow_unsigned_extensions")  # checked again
    if how == "folder others may write to":
        assert not extensions._disk_trusted(copy)  # nor stamped anew there


def test_a_read_only_folder_gets_no_stamp_and_loads_as_before(tmp_path, monkeypatch):
    """Where the package's folder is not writable, no stamp is left (and nothing fails): each
    process checks the file, as DuckDB does."""
    from gpuscope.store import extensions

    copy = _private_copy(tmp_path, monkeypatch)
    monkeypatch.setattr(extensions.tempfile, "mkstemp", _refuse)
    extensions.offline_connection("sqlite_scanner").close()
    assert not copy.with_name(copy.name + extensions.STAMP_SUFFIX).exists()
    assert str(copy) in extensions._VERIFIED  # trusted in this process still


def _refuse(*a, **k):  # type: ignore[no-untyped-def]
    raise PermissionError("read-only")


def test_a_stamp_that_fails_half_way_leaves_nothing_beside_the_extension(tmp_path, monkeypatch):
    """A stamp whose rename fails (a full disk, say) leaves neither a stamp nor its temp file;
    the connection is made all the same, and the next process checks the file again."""
    from gpuscope.store import extensions

    copy = _private_copy(tmp_path, monkeypatch)
    before = sorted(p.name for p in copy.parent.iterdir())

    def full(*a, **k):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(extensions.os, "replace", full)
    con = extensions.offline_connection("sqlite_scanner")
    loaded = "SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner'"
    assert con.execute(loaded).fetchone() == (True,)
    con.close()
    assert sorted(p.name for p in copy.parent.iterdir()) == before  # no stamp, no temp file
    assert not extensions._disk_trusted(copy)
