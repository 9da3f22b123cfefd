"""Maintenance beside readers: what every ingest runs afterwards never rewrites a stored run's
files (DuckLake's merge does, and a reader in another process scanning while it commits can see
none of a run's rows); compaction only on request (`gpuscope maintain --compact`); an upload in
the dashboard maintains as `gpuscope ingest` does.

Real stores on disk, the sample traces; real processes where a reader in another process is
the point or the exit code of one (the CLI in-process elsewhere: ``in_process``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import cli_in_process
from gpuscope.store import LAKE, RUN_TABLES, connect
from tracegen import TraceBuilder, stepped_big_run

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))


def gpuscope(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def in_process(*args: object) -> subprocess.CompletedProcess[str]:
    """``gpuscope ARGS`` in this process (clitools.cli_in_process): the same exit code, stdout and
    stderr, for tests where no process is the point (readers in other processes: ``spawn``)."""
    return cli_in_process(*map(str, args))


def spawn(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuscope", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def small_trace(path: Path, kernels: int, host: str) -> Path:
    t = TraceBuilder(extra_meta={"hostname": host})  # bytes of its own: a run of its own
    for i in range(kernels):
        t.launch(f"k{i % 7}", i * 10.0, i * 10.0 + 1, 1.0)
    return t.write(path, indent=None)


def live_files(store: Path) -> set[tuple[str, str]]:
    """(table, file) of every data file the store's current snapshot reads."""
    con = connect(store)
    try:
        return {
            (t, row[0])
            for t in RUN_TABLES
            for row in con.execute(
                f"SELECT data_file FROM ducklake_list_files('{LAKE}', '{t}')"
            ).fetchall()
        }
    finally:
        con.close()


def rows(store: Path) -> dict[str, list[tuple]]:
    con = connect(store)
    try:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in RUN_TABLES}
    finally:
        con.close()


@pytest.mark.slow
def test_an_ingest_s_maintenance_never_rewrites_a_stored_run_s_files(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert in_process("ingest", SAMPLES / "before", "--db", store).returncode == 0
    first = live_files(store)
    assert first, "the run left no data file to watch"
    done = in_process("ingest", SAMPLES / "after", "--db", store)  # then maintains
    assert done.returncode == 0, done.stderr
    assert "note:" not in done.stderr
    assert first <= live_files(store)  # every file the first run reads is still the one it reads


@pytest.mark.slow
def test_a_reader_polling_through_ingests_sees_every_run_whole(tmp_path: Path) -> None:
    """A reader that stays open (as the dashboard does) polls without pause while two ingests
    store and maintain: each read of one statement sees either no run or whole runs, never a run
    whose events are missing. (With the merge that ingests used to run, about one read in a
    hundred saw a stored run with 0 events.)"""
    store = tmp_path / "store"
    traces = [stepped_big_run(tmp_path / f"t{i}.json", 30000, 7, f"host{i}") for i in range(2)]
    reader = connect(store)
    # on one DuckDB thread: each read scans a few files, and on a busy machine a second thread's
    # waits cost the reader a third more CPU for no more reads (as many or more on one: 780 and
    # 1,037 reads against 725 and 713, 17.6-21.5 CPU s against 26.7)
    reader.execute("SET threads = 1")
    # count(*) over an expression of each row: the events are scanned, not counted from stats
    one_read = (
        "SELECT (SELECT count(*) FROM runs), (SELECT coalesce(sum(n_events), 0) FROM runs), "
        "(SELECT count(*) FROM events WHERE length(run_id) + 0 > 0)"
    )
    seen = []
    try:
        for trace in traces:
            proc = spawn("ingest", trace, "--db", store)
            while proc.poll() is None:
                seen.append(reader.execute(one_read).fetchone())
            assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
            seen.append(reader.execute(one_read).fetchone())
    finally:
        reader.close()
    assert len(seen) > 20, "the ingests ended before the reader could look"
    bad = [s for s in seen if s[1] != s[2]]
    assert not bad, f"{len(bad)} of {len(seen)} reads saw runs without their events: {bad[:5]}"
    assert seen[-1][0] == 2


@pytest.mark.slow
def test_compaction_only_on_request(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for i in range(3):
        trace = small_trace(tmp_path / f"c{i}.json", 200 + i, f"c{i}")
        assert in_process("ingest", trace, "--db", store).returncode == 0
    before_rows, before_files = rows(store), live_files(store)

    plain = in_process("maintain", "--db", store, "--json")
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["merged"] == 0
    assert "--compact" in plain.stderr  # says how to compact, and when
    assert live_files(store) == before_files

    compact = in_process("maintain", "--db", store, "--compact", "--json")
    assert compact.returncode == 0, compact.stderr
    assert json.loads(compact.stdout)["merged"] >= 1
    events = {f for t, f in live_files(store) if t == "events"}
    assert len(events) < len({f for t, f in before_files if t == "events"})
    assert rows(store) == before_rows


def test_maintain_on_a_store_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    done = gpuscope("maintain", "--db", blocker / "store")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and str(blocker) in done.stderr


@pytest.fixture
def app_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("GPUSCOPE_STORE", raising=False)
    store = tmp_path / "store"
    monkeypatch.setenv("GPUSCOPE_DB", str(store))
    return store


@pytest.mark.slow
def test_an_upload_maintains_as_an_ingest_does(app_store: Path, tmp_path: Path) -> None:
    """A file a dead ingest left in the store's data folder is gone after an upload, as after
    `gpuscope ingest`; the uploaded run is stored whole."""
    from apptools import open_app

    assert in_process("ingest", SAMPLES / "before", "--db", app_store).returncode == 0
    leftover = next((app_store / "data").rglob("*.parquet")).parent / "ducklake-dead-ingest.parquet"
    leftover.write_bytes(b"PAR1 left by an ingest that was killed")
    at = open_app()
    data = small_trace(tmp_path / "up.json", 500, "up").read_bytes()
    at.file_uploader[0].set_value(("up.pt.trace.json", data, "application/json"))
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception
    assert at.query_params.get("run")
    assert not leftover.exists()
    listed = json.loads(in_process("runs", "--db", app_store, "--json").stdout)
    assert len(listed) == 2
