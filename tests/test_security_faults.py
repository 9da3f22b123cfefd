"""Item 3 of the hostile-input issue: a store fault is one line and poisons nothing.

The disk holding the store fills up during an ingest (a tiny tmpfs where this runs as root and may
mount one; otherwise RLIMIT_FSIZE, which fails the same writes with EFBIG): the CLI prints one line
and exits 1; the dashboard's write path raises one StoreError line, drops its connection, and the
next action (a read, another ingest) works once space is back. Nothing half-written is visible.
Rollbacks never replace the error on its way; a killed ingest leaves no scratch batch files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from clitools import cli_in_process
from gpuscope.cli import main as cli_main
from gpuscope.ingest import compiled_parser, loader
from gpuscope.ingest.batch_insert import SCRATCH_PREFIX, sweep_scratch
from gpuscope.store import (
    connect,
    forget_stop,
    request_stop,
    rollback_quietly,
    stop_exit_code,
    transaction,
)
from gpuscope.store.errors import StoreError, store_fault
from tracegen import TraceBuilder, stepped_big_run

TESTS = Path(__file__).resolve().parent
N_LAUNCH = 60_000  # ~240k events: ~2 MiB of Parquet files of ~480 KiB, more than Disk.fill leaves
ROOM = 1 << 20  # what a full tmpfs still takes: about half of the big run's files
HEADROOM = 64 << 10  # RLIMIT_FSIZE above the store's biggest file: the catalog grows ~32 KiB a run


class Disk:
    """Where the store goes, and how to make its disk full (``limit``) and free it again."""

    def __init__(self, root: Path, tmpfs: bool) -> None:
        self.root, self.tmpfs = root, tmpfs
        self.fsize: int | None = None  # RLIMIT_FSIZE for the subprocess when not a tmpfs

    def fill(self) -> None:
        """Leave less room than the big run needs. A tmpfs: ROOM more than the whole store folder
        holds now (its catalog, data files, lock). Otherwise RLIMIT_FSIZE, which caps each file,
        not the disk: above every file the store holds now (its files grow a little: the catalog)
        and below one data file of the big run (the store is a folder of files written whole, so
        a limit from its total would be one no file reaches and nothing would fail)."""
        if self.tmpfs:
            st = os.statvfs(self.root)
            used_k = (st.f_blocks - st.f_bfree) * st.f_frsize // 1024
            size = f"size={used_k + ROOM // 1024}k"
            subprocess.run(["mount", "-o", f"remount,{size}", str(self.root)], check=True)
        else:
            biggest = max(p.stat().st_size for p in self.root.rglob("*") if p.is_file())
            self.fsize = biggest + HEADROOM

    def free(self) -> None:
        if self.tmpfs:
            subprocess.run(["mount", "-o", "remount,size=400m", str(self.root)], check=True)
        self.fsize = None

    def command(self, args: tuple[str, ...]) -> list[str]:
        """``gpuscope ARGS`` run under this disk's limits: set in a small Python that then execs
        gpuscope (no ``preexec_fn``: that makes subprocess fork the whole test worker, whose
        address space a test with tiny ingest batches grows to tens of GB of reserved memory, and
        the kernel then refuses the fork: ENOMEM)."""
        return [sys.executable, "-c", LIMITED, str(self.fsize or 0), *args]


# SIGXFSZ ignored (write() then fails with EFBIG), RLIMIT_FSIZE set (0: none), then gpuscope
LIMITED = """
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
if int(sys.argv[1]):
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
os.execv(sys.executable, [sys.executable, "-m", "gpuscope", *sys.argv[2:]])
"""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    root = tmp_path / "disk"
    root.mkdir()
    mounted = (
        os.geteuid() == 0
        and not os.environ.get("GPUSCOPE_TEST_NO_TMPFS")  # to exercise the RLIMIT_FSIZE way
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(root)], capture_output=True
        ).returncode
        == 0
    )
    yield Disk(root, mounted)
    if mounted:
        subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """N_LAUNCH launches (97 kernel names) after two short profiler steps: the events and store
    bytes of N_LAUNCH launches (the steps add 7 events), but the analysis an ingest that succeeds
    makes (the recovery ingest of test_cli_disk_full_...) reads the steps' window, not every
    launch (tracegen.stepped_big_run). One line (indent=None: json's C encoder, 1.1 CPU s where
    indent=1's pure-Python encoder takes 3.3): the CLI now ingests it no slower than the indented
    dump that commit a0f6182 chose (3.33-3.37 against 3.39-3.53 CPU s, interleaved, load 5-9)."""
    return stepped_big_run(tmp_path_factory.mktemp("big") / "big.json", N_LAUNCH, 97)


def small_trace(path: Path, name: str) -> Path:
    t = TraceBuilder()
    for i in range(50):
        t.launch(name, i * 10.0, i * 10.0 + 1, 1.0)
    return t.write(path)


def cli(*args: str, disk: Disk | None = None, env: dict[str, str] | None = None):
    return subprocess.run(
        disk.command(args) if disk else [sys.executable, "-m", "gpuscope", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_cli_disk_full_is_one_line_and_the_store_recovers(
    disk: Disk, big_trace: Path, tmp_path: Path
) -> None:
    db = disk.root / "store.duckdb"
    first = small_trace(tmp_path / "first.json", "first")
    # setup, the listing and the recovery ingest below: in this process (clitools.cli_in_process),
    # the same exit code and stdout; the faulted ingest is a process (the disk's limits)
    assert cli_in_process("ingest", str(first), "--db", str(db)).returncode == 0
    disk.fill()
    p = cli("ingest", str(big_trace), "--db", str(db), disk=disk)
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    if disk.tmpfs:
        assert lines[0].startswith(f"gpuscope: {db}: the disk holding the store is full: ")
    else:  # the store or a scratch file, whichever hits the limit first
        assert lines[0].startswith("gpuscope: ") and "hit the file-size limit" in lines[0]
        if compiled_parser.enabled():  # no scratch file (DuckDB parsing a batch writes one): the
            # store's file, a data file of the big run
            assert lines[0].startswith(f"gpuscope: {db}: the store hit the file-size limit")
            assert f"{db}/data/" in lines[0], lines[0]
    disk.free()
    runs = cli_in_process("runs", "--db", str(db), "--json")
    assert runs.returncode == 0, runs.stderr
    assert '"first"' in runs.stdout and '"big"' not in runs.stdout  # nothing half-written
    con = connect(db)  # the faulted ingest deleted the files it wrote (the disk is not left full):
    assert untracked_files(con) == 0  # before the next ingest, whose maintenance deletes orphans
    con.close()
    again = cli_in_process("ingest", str(big_trace), "--db", str(db))
    assert again.returncode == 0, again.stderr
    con = connect(db)
    n = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert (n, untracked_files(con)) == (2, 0)  # and none is left after it
    con.close()


def untracked_files(con) -> int:
    """Parquet files in the store's data folder that no run owns (a failed ingest's)."""
    return (
        con.execute(
            "FROM ducklake_delete_orphaned_files('lake', dry_run => true, cleanup_all => true)"
        )
        .to_arrow_table()
        .num_rows
    )


WEB_SCRIPT = textwrap.dedent(
    """
    import io, os, pathlib, resource, signal, sys, time
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from gpuscope.web import db
    from gpuscope.vocabulary.errors import GpuscopeError
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.web.uploads import ingest_uploads
    first, big, second, headroom, flag = sys.argv[1:6]
    with db.writing() as cur:
        ingest_paths(cur, [first])
    old = db.store()
    limit = []
    if int(headroom):  # Disk.fill's RLIMIT_FSIZE: above every file of the store folder now
        files = pathlib.Path(os.environ["GPUSCOPE_DB"]).rglob("*")
        limit.append(max(p.stat().st_size for p in files if p.is_file()) + int(headroom))
    else:
        open(flag, "w").close()  # the parent makes the disk full now
        while os.path.exists(flag):
            time.sleep(0.01)
    def progress(fraction, text):
        # set once the upload is saved (its copy, the whole trace, would pass any such limit
        # first): the store's writes are what pass it
        if limit and text.startswith("Ingesting"):
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit.pop(), resource.RLIM_INFINITY))
    class Upload(io.BytesIO):
        name = "big.pt.trace.json"
    try:  # the browser's path: the upload is copied to a temp folder, then ingested
        with db.writing() as cur:
            ingest_uploads(cur, [Upload(open(big, "rb").read())], progress=progress)
        print("NO FAULT")
    except GpuscopeError as e:
        print("FAULT", type(e).__name__, str(e))
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    if not int(headroom):
        open(flag, "w").close()  # the parent frees the disk now
        while os.path.exists(flag):
            time.sleep(0.01)
    print("REOPENED", db.store() is not old)
    print("RUNS", sorted(db.runs_df(db.db_path(), db.generation())["name"]))
    with db.writing() as cur:
        ingest_paths(cur, [second])
    print("RUNS", sorted(db.runs_df(db.db_path(), db.generation())["name"]))
    orphans = db.cursor().execute(
        "FROM ducklake_delete_orphaned_files('lake', dry_run => true, cleanup_all => true)"
    ).to_arrow_table().num_rows
    print("ORPHANS", orphans)
    """
)


@pytest.mark.slow
def test_dashboard_write_fault_is_one_line_and_the_next_action_works(
    disk: Disk, big_trace: Path, tmp_path: Path
) -> None:
    db = disk.root / "store.duckdb"
    flag = tmp_path / "flag"
    first = small_trace(tmp_path / "first.json", "first")
    second = small_trace(tmp_path / "second.json", "second")
    headroom = 0 if disk.tmpfs else HEADROOM  # the store or a scratch batch passes the limit
    proc = subprocess.Popen(
        [sys.executable, "-c", WEB_SCRIPT, *map(str, (first, big_trace, second, headroom, flag))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GPUSCOPE_DB": str(db)},
    )
    if disk.tmpfs:
        for step in (disk.fill, disk.free):
            deadline = time.monotonic() + 120
            while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            step()
            flag.unlink(missing_ok=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    kind, message = lines["FAULT"].split(" ", 1)
    assert kind == "StoreError" and "\n" not in message
    if disk.tmpfs:
        assert message.startswith(f"{db}: the disk holding the store is full: ")
    elif compiled_parser.enabled():  # no scratch batch file: a data file of the store
        assert message.startswith(f"{db}: the store hit the file-size limit"), message
        assert f"{db}/data/" in message, message
    assert lines["REOPENED"] == "True"
    assert lines["RUNS"] == "['first', 'second']"  # the faulted run is not there, half or whole
    assert lines["ORPHANS"] == "0"  # no file of the faulted run is left either
    assert "Traceback" not in err


def test_rollback_never_replaces_the_error_on_its_way(tmp_path: Path) -> None:
    con = connect(tmp_path / "s.duckdb")
    with pytest.raises(ValueError, match="the real problem"), transaction(con):
        con.execute("ROLLBACK")  # no transaction left to roll back
        raise ValueError("the real problem")
    other = connect(":memory:")
    other.close()
    rollback_quietly(other)  # closed: no error
    with pytest.raises(KeyError), transaction(con):
        con.close()
        raise KeyError("x")


def test_store_fault_lines() -> None:
    full = duckdb.IOException('Could not write file "/d/s.duckdb.wal": No space left on device')
    assert str(store_fault(full, "/d/s.duckdb")) == (
        '/d/s.duckdb: the disk holding the store is full: Could not write file "/d/s.duckdb.wal": '
        "No space left on device"
    )
    scratch = OSError(28, "No space left on device", "/tmp/gpuscope-batch-1-x.json")
    assert str(store_fault(scratch, "/d/s.duckdb")) == (
        "/tmp/gpuscope-batch-1-x.json: the disk holding it is full: No space left on device"
    )
    gone = duckdb.FatalException(
        "FATAL Error: database has been invalidated because of a\nprevious error"
    )
    err = store_fault(gone, "/d/s")
    assert isinstance(err, StoreError) and "\n" not in str(err)
    assert "invalidated by an earlier fault" in str(err)


# A signal inside a DuckDB statement: DuckDB reads it, runs the handler, and raises
# "RuntimeError: Query interrupted" in place of the handler's exception.
SIGNAL_IN_A_STATEMENT = """
import os, signal, sys, threading
from gpuscope.cli import main as cli_main
from gpuscope.ingest import loader
sig = int(sys.argv[1])
finish = loader.TraceRunWriter.finish
def finish_then_signal(self, *a, **k):
    out = finish(self, *a, **k)
    threading.Timer(0.3, os.kill, (os.getpid(), sig)).start()
    self.con.execute("SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3").fetchall()
    return out
loader.TraceRunWriter.finish = finish_then_signal
raise SystemExit(cli_main.main(sys.argv[2:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_inside_a_statement_ends_the_ingest_with_its_reason(
    sig: int, tmp_path: Path
) -> None:
    db = tmp_path / "s"
    small = small_trace(tmp_path / "small.json", "small")
    args = ["ingest", str(small), "--db", str(db)]
    p = subprocess.run(
        [sys.executable, "-c", SIGNAL_IN_A_STATEMENT, str(int(sig)), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the reason, and no "Query interrupted" traceback
    assert (p.returncode, p.stderr) == (128 + sig, f"gpuscope: {cli_main.stopped_line(sig)}\n")
    assert "Ctrl-C" in p.stderr if sig == signal.SIGINT else "SIGTERM" in p.stderr
    con = connect(db)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM events").fetchone() == (0,)
    con.close()


@pytest.mark.slow
def test_a_stop_whose_exception_was_lost_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """DuckDB can swallow the handler's exception (it raised in a Python frame that DuckDB's
    lookup of objects by name inspects): the ingest goes on, but its commit must not happen."""
    db = tmp_path / "s"
    small = small_trace(tmp_path / "small.json", "small")
    finish = loader.TraceRunWriter.finish

    def finish_then_lost_stop(self: loader.TraceRunWriter) -> None:
        finish(self)
        request_stop(signal.SIGTERM)  # what the handler leaves when its exception is lost

    monkeypatch.setattr(loader.TraceRunWriter, "finish", finish_then_lost_stop)
    try:
        assert cli_main.main(["ingest", str(small), "--db", str(db)]) == 128 + signal.SIGTERM
    finally:
        forget_stop()
    assert capsys.readouterr().err == (
        "gpuscope: stopped by SIGTERM: nothing was committed after it "
        "(a run is stored whole or not at all)\n"
    )
    con = connect(db)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    con.close()


def test_a_bug_keeps_its_traceback_and_is_not_taken_for_a_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's catch-all is for stops: an exception of a bug passes through it unchanged."""

    def finish_with_a_bug(self: loader.TraceRunWriter) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(loader.TraceRunWriter, "finish", finish_with_a_bug)
    small = small_trace(tmp_path / "small.json", "small")
    with pytest.raises(ZeroDivisionError, match="a bug"):
        cli_main.main(["ingest", str(small), "--db", str(tmp_path / "s")])
    assert "stopped" not in capsys.readouterr().err
    assert stop_exit_code() is None


def test_no_commit_after_a_stop(tmp_path: Path) -> None:
    con = connect(tmp_path / "s")
    try:
        with pytest.raises(SystemExit) as e, transaction(con):
            con.execute("CREATE TABLE lake.t AS SELECT 1 AS x")
            request_stop(signal.SIGTERM)
        assert e.value.code == 128 + signal.SIGTERM
        request_stop(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt), transaction(con):
            con.execute("CREATE TABLE lake.t AS SELECT 1 AS x")
    finally:
        forget_stop()
    assert stop_exit_code() is None
    with transaction(con):  # forgotten: commits again
        con.execute("CREATE TABLE lake.t AS SELECT 2 AS x")
    assert con.execute("SELECT x FROM t").fetchall() == [(2,)]
    con.close()


@pytest.mark.slow
def test_a_killed_ingest_leaves_no_scratch_files(big_trace: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    db = tmp_path / "s.duckdb"
    env = {**os.environ, "TMPDIR": str(scratch)}
    for sig, code in ((signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGKILL, -signal.SIGKILL)):
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuscope", "ingest", str(big_trace), "--db", str(db)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not list(scratch.glob(f"{SCRATCH_PREFIX}*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list(scratch.glob(f"{SCRATCH_PREFIX}{proc.pid}-*.json")), "no scratch file seen"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == code, err
        assert "Traceback" not in err
        if sig == signal.SIGTERM:  # cleanup ran: nothing left behind
            assert not list(scratch.iterdir())
    # SIGKILL: nothing can run in the process; the next ingest sweeps what it left
    assert list(scratch.glob(f"{SCRATCH_PREFIX}*"))
    live_one = scratch / f"{SCRATCH_PREFIX}{os.getpid()}-mine.json"  # a running ingest's: kept
    live_one.write_bytes(b"[]")
    small = small_trace(tmp_path / "small.json", "small")
    p = cli("ingest", str(small), "--db", str(db), env={"TMPDIR": str(scratch)})
    assert p.returncode == 0, p.stderr
    assert [q.name for q in scratch.iterdir()] == [live_one.name]
    assert sweep_scratch(str(scratch)) == []
    con = connect(db)
    assert con.execute("SELECT name FROM runs").fetchall() == [("small",)]
    con.close()


@pytest.mark.slow
def test_cli_prints_control_characters_escaped(tmp_path: Path) -> None:
    """Item 4 (CLI): `--name $'\\e[2J'` must not clear the screen of whoever runs `gpuscope runs`."""
    db = str(tmp_path / "s.duckdb")
    name = "\x1b[2J\u202eevil\x07\x9b"
    # the run stored under that name (setup: in this process, the same name; what `runs` prints
    # of it, the subject, comes from processes)
    p = cli_in_process(
        "ingest", str(small_trace(tmp_path / "t.json", "k")), "--name", name, "--db", db
    )
    assert p.returncode == 0, p.stderr
    runs = cli("runs", "--db", db)
    assert runs.returncode == 0, runs.stderr
    assert "\\x1b[2J\\u202eevil\\x07\\x9b" in runs.stdout
    for c in ("\x1b", "\u202e", "\x07", "\x9b"):
        assert c not in runs.stdout
    bad = cli("ingest", str(tmp_path / "\x1b[31mmissing.json"), "--db", db)
    assert bad.returncode != 0 and "\x1b" not in bad.stderr
    assert "\\x1b[31mmissing.json" in bad.stderr and len(bad.stderr.splitlines()) == 1
    as_json = cli("runs", "--db", db, "--json")
    assert "\x1b" not in as_json.stdout and "\\u001b[2J" in as_json.stdout
    undecodable = subprocess.run(
        [sys.executable.encode(), b"-m", b"gpuscope", b"ingest", b"x.json", b"--name", b"\xff\x1b"],
        capture_output=True,
        timeout=120,
    )
    assert undecodable.returncode == 2
    assert undecodable.stderr.strip() == b"gpuscope: --name: not valid UTF-8 text"


def test_an_invalidated_store_is_reopened_on_the_next_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuscope.web import db

    monkeypatch.setenv("GPUSCOPE_DB", str(tmp_path / "s.duckdb"))
    db._open_store.clear()
    old = db.store()
    assert db.count_rows("runs") == 0
    real_cursor = db.cursor

    class Invalidated:
        def execute(self, *a: object) -> None:
            raise duckdb.FatalException(
                "FATAL Error: Failed: database has been invalidated because of a previous fatal "
                "error.\nThe database must be restarted prior to being used again."
            )

    monkeypatch.setattr(db, "cursor", lambda: Invalidated())
    with pytest.raises(StoreError) as e:
        db.query_df("SELECT * FROM runs")
    assert "invalidated by an earlier fault" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setattr(db, "cursor", real_cursor)
    assert db.store() is not old  # dropped: the next action opens the file afresh
    assert db.count_rows("runs") == 0
    with pytest.raises(duckdb.ConnectionException):
        old.con.execute("SELECT 1")  # the faulted connection is closed
    db._open_store.clear()
