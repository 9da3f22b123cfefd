"""Issue 22, part 1: no store secret in any output.

Every secret form (a URL's password, ``password=`` in a URL query or a libpq DSN, S3 key id,
secret and session token, whatever DuckDB or libpq echo) is masked by ``gpuscope.vocabulary.redact``,
the one place that renders a store error, spec or URL for people. The unit tests pin each form;
the slow tests provoke every store fault we can on a real PostgreSQL and a real S3 (moto) server
of their own (stopped and started here) and grep ALL output for the secrets: the CLI's stdout and
stderr (lines and JSON), the dashboard's page text (AppTest) and the log records of the process.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest
from clitools import cli_in_process
from gpuscope.ingest.errors import IngestError
from gpuscope.store import parse_spec
from gpuscope.store.errors import StoreError, store_fault
from gpuscope.vocabulary.redact import install_log_redaction, redact
from team_servers import (
    S3,
    Postgres,
    TeamStore,
    _as_user,
    free_port,
    start_postgres,
    start_s3,
    stop_postgres,
    stop_s3,
)
from tracegen import TraceBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

REPO = Path(__file__).resolve().parent.parent
BEFORE = REPO / "sample_traces" / "before"
AFTER = REPO / "sample_traces" / "after"

# -- every form, one at a time ----------------------------------------------------------------------

FORMS = [
    ("postgres://gpuscope:Pw0rdUserinfo@db:5432/lake", "Pw0rdUserinfo"),
    ("postgresql://u:p%40ss%2Fword@db/lake", "p%40ss%2Fword"),
    ("postgres://gpuscope@db:5432/lake?password=Pw0rdQuery&sslmode=require", "Pw0rdQuery"),
    ("postgres://gpuscope@db/lake?sslmode=disable&PassWord=Pw0rdCase", "Pw0rdCase"),
    ("host='db' port='5432' user='u' password='Pw0rd Dsn\\'q' dbname='lake'", "Pw0rd Dsn"),
    ('Unable to connect to Postgres at "host=db password=Pw0rdBare dbname=x"', "Pw0rdBare"),
    ("PGPASSWORD=Pw0rdEnv psql -h db", "Pw0rdEnv"),
    ("sslpassword='Pw0rdSsl'", "Pw0rdSsl"),
    ("CREATE SECRET s (TYPE s3, KEY_ID 'AKIAKEYID0001', SECRET 'S3cretKey0001')", "AKIAKEYID0001"),
    ("CREATE SECRET s (TYPE s3, KEY_ID 'AKIAKEYID0001', SECRET 'S3cretKey0001')", "S3cretKey0001"),
    ("(TYPE s3, SESSION_TOKEN 'Tok3nSession01', REGION 'us-east-1')", "Tok3nSession01"),
    ("GET https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIAPRESIGN01%2F2024", "AKIAPRESIGN01"),
    ("GET https://b/k?X-Amz-Signature=5ig0123abc&X-Amz-Security-Token=Tok3n02", "5ig0123abc"),
    ("GET https://b/k?X-Amz-Signature=5ig0123abc&X-Amz-Security-Token=Tok3n02", "Tok3n02"),
    ("aws_secret_access_key = S3cretCfg03", "S3cretCfg03"),
    ("aws_session_token=Tok3nCfg04, region=x", "Tok3nCfg04"),
]


@pytest.mark.parametrize(("text", "secret"), FORMS)
def test_every_secret_form_is_masked(text: str, secret: str) -> None:
    shown = redact(text)
    assert secret not in shown and "***" in shown, shown


@pytest.mark.parametrize(("text", "secret"), FORMS)
def test_redacting_twice_changes_nothing(text: str, secret: str) -> None:
    """The CLI's stream redacts lines made of redacted parts: an error's ``<store>: <problem>``
    keeps its colon after a masked query password."""
    once = redact(text)
    assert redact(once) == once
    err = IngestError(text, "the store failed")
    assert redact(str(err)) == str(err) and str(err).endswith(": the store failed")
    assert secret not in str(err)


def test_what_is_not_a_secret_stays() -> None:
    for text in (
        "postgres://gpuscope@db:5432/lake",
        "/data/store: the disk holding the store is full",
        'FATAL: password authentication failed for user "gpuscope"',
        "kernel void gemm<float>(int, int) took 12 ms",
    ):
        assert redact(text) == text


def test_known_secrets_are_masked_wherever_they_appear(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets of the environment and of every store URL parsed are masked verbatim, raw and
    percent-encoded, in any text (what a library echoes in a form no pattern knows)."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEBoaDL0ng")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    for text in (
        "HTTP 403 for key wJalrXUtnFEMI/K7MDENG",
        "signed with wJalrXUtnFEMI%2FK7MDENG",
        "token FwoGZXIvYXdzEBoaDL0ng expired",
        "Credential=AKIAIOSFODNN7EXAMPLE/20240101",
    ):
        shown = redact(text)
        assert "wJalrXUtnFEMI" not in shown and "FwoGZX" not in shown and "AKIAIOSF" not in shown
    parse_spec("postgres://gpuscope:c0rrect%20horse@db:5432/lake")
    assert redact("libpq: bad auth 'c0rrect horse' for gpuscope") == (
        "libpq: bad auth '***' for gpuscope"
    )


def test_store_spec_shown_masks_a_query_password() -> None:
    """Issue 22 item 2: ``?password=`` in a store URL was echoed by `runs`, `ui` and the sidebar."""
    spec = parse_spec("postgres://u@db:5432/lake?password=QueryPw0001&sslmode=require")
    assert spec.shown() == "postgres://u@db:5432/lake?password=***&sslmode=require"
    spec = parse_spec("postgres://u:UserPw0001@db:5432/lake")
    assert spec.shown() == "postgres://u:***@db:5432/lake"


def test_errors_and_store_faults_render_through_redact() -> None:
    """The fault path (store_fault) masked nothing before: the mechanism (IngestError's text)
    now does, for every error made from any message."""
    url = "postgres://gpuscope:FaultPw0001@127.0.0.1:5432/lake"
    exc = duckdb.IOException(
        "IO Error: Failed to query most recent snapshot for DuckLake: Unable to connect to "
        "Postgres at \"host='127.0.0.1' port='5432' user='gpuscope' password='FaultPw0001' "
        'dbname=\'lake\'": connection to server at "127.0.0.1", port 5432 failed: '
        "Connection refused"
    )
    err = store_fault(exc, url)
    assert isinstance(err, StoreError) and "FaultPw0001" not in str(err)
    assert str(err) == (
        "postgres://gpuscope:***@127.0.0.1:5432/lake: the team store's PostgreSQL stopped "
        "answering; try again once it is back (connection refused)"
    )
    during = store_fault(exc, url, during="the commit")
    assert str(during).endswith(
        "the team store's PostgreSQL stopped answering during the commit; nothing was stored "
        "(connection refused)"
    )
    other = store_fault(
        duckdb.IOException("IO Error: password='FaultPw0001' No space left on device"), url
    )
    assert "FaultPw0001" not in str(other) and "the disk holding the store is full" in str(other)
    bad = IngestError(url, "cannot open (password=FaultPw0001)")
    assert "FaultPw0001" not in str(bad) and "FaultPw0001" not in bad.path + bad.problem


def test_a_rollback_after_the_connection_died_reads_as_the_commit() -> None:
    """Issue 22, low point: mid-commit read `Failed to execute query "ROLLBACK":`, no reason."""
    exc = duckdb.IOException(
        'IO Error: Failed to execute query "ROLLBACK": no connection to the server'
    )
    line = str(store_fault(exc, "postgres://u:***@db/lake", during="the commit"))
    assert line == (
        "postgres://u:***@db/lake: the team store's PostgreSQL stopped answering during the "
        "commit; nothing was stored (no connection to the server)"
    )


def test_a_conflict_at_commit_is_not_an_outage() -> None:
    """A serialization failure at COMMIT is a conflict (retried by Store.retrying), not
    PostgreSQL gone: it stays a duckdb.Error."""
    from gpuscope.store.errors import catalog_lost

    exc = duckdb.TransactionException(
        'Failed to execute query "COMMIT": ERROR:  could not serialize access due to concurrent '
        "update"
    )
    assert not catalog_lost(exc)
    assert catalog_lost(duckdb.IOException('Failed to execute query "COMMIT": '))


def test_a_wrong_password_is_not_an_outage() -> None:
    exc = duckdb.IOException(
        'Unable to connect to Postgres at "x": connection to server at "127.0.0.1", port 5432 '
        'failed: FATAL:  password authentication failed for user "gpuscope"'
    )
    assert "stopped answering" not in str(store_fault(exc, "postgres://db/lake"))


def test_log_records_are_redacted_whatever_handler_writes_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    install_log_redaction()
    log = logging.getLogger("gpuscope.web.test")
    with caplog.at_level(logging.INFO):
        log.info("store %s", "postgres://u:LogPw00001@db/lake")
        try:
            raise duckdb.IOException("Unable to connect: password='LogPw00002'")
        except duckdb.Error:
            log.exception("page failed")
    text = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "LogPw00001" not in text and "LogPw00002" not in text
    assert "postgres://u:***@db/lake" in text and "password=***" in text


def test_cli_output_passes_through_redact(capsys: pytest.CaptureFixture[str]) -> None:
    """Every write of the CLI (lines and JSON) goes through the redacting stream."""
    from gpuscope.cli.main import inert_output

    with inert_output():
        print(json.dumps({"store": "postgres://u@db/lake?password=JsonPw0001"}))
        print("gpuscope: postgres://u:LinePw0001@db/lake: failed", file=sys.stderr)
    out, err = capsys.readouterr()
    assert "JsonPw0001" not in out and "LinePw0001" not in err and "***" in out + err


# -- real servers: every fault we can provoke ---------------------------------------------------


class Servers:
    """A PostgreSQL and a moto S3 of this module alone (these tests stop and start them)."""

    def __init__(self) -> None:
        self.pg: Postgres = start_postgres()
        self.s3: S3 = start_s3()

    def pg_ctl(self, *args: str) -> None:
        pg = self.pg
        opts = f"-c listen_addresses=127.0.0.1 -p {pg.port} -k {pg.socket_dir} -c fsync=off"
        subprocess.run(
            _as_user(
                pg.os_user,
                [str(pg.bin_dir / "pg_ctl"), "-D", str(pg.data_dir), "-l", str(pg.log), *args]
                + (["-o", opts, "-w"] if args[0] == "start" else []),
            ),
            capture_output=True,
            timeout=120,
            check=True,
        )

    def stop_pg(self) -> None:
        self.pg_ctl("stop", "-m", "immediate")

    def start_pg(self) -> None:
        self.pg_ctl("start")


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    s = Servers()
    yield s
    stop_s3(s.s3)
    stop_postgres(s.pg)


# The S3 credentials of these tests: distinctive, so any echo of them is found.
S3_KEY_ID = "AKIAGPUSCOPETEST0042"
S3_SECRET = "s3cret-Key-0042-do-not-print"
S3_TOKEN = "Sess10nToken0042"


def team(servers: Servers, *, query_form: bool = False) -> TeamStore:
    ts = TeamStore(servers.pg, servers.s3, servers.pg.create_database(), servers.s3.create_bucket())
    ts.query_form = query_form  # type: ignore[attr-defined]
    return ts


def store_url(ts: TeamStore) -> str:
    """The store's URL, the password in the user info or (query_form) in ``?password=``."""
    if getattr(ts, "query_form", False):
        pg = ts.pg
        return f"postgres://{pg.user}@127.0.0.1:{pg.port}/{ts.database}?password={pg.password}"
    return ts.url


def env_of(ts: TeamStore) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCOPE_", "AWS_"))}
    return {
        **base,
        **ts.s3.env(),
        "AWS_ACCESS_KEY_ID": S3_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        "AWS_SESSION_TOKEN": S3_TOKEN,
        "GPUSCOPE_STORE": store_url(ts),
        "GPUSCOPE_DATA_PATH": ts.data_path,
    }


def secrets_of(ts: TeamStore) -> list[str]:
    return [ts.pg.password, S3_KEY_ID, S3_SECRET, S3_TOKEN]


def gpuscope(ts: TeamStore, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args],
        capture_output=True,
        text=True,
        env=env_of(ts),
        timeout=300,
    )


def in_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``gpuscope ARGS`` in this process (clitools.cli_in_process) with the GPUSCOPE_* and AWS_*
    variables of ``env`` (and no others): the same exit code and stdout as :func:`gpuscope`. For
    the setup ingests and the state checks (how many runs) only; an output grepped for secrets
    comes from a process of its own (what a library writes to its stderr is in it too)."""
    with pytest.MonkeyPatch.context() as mp:
        for k in list(os.environ):
            if k.startswith(("GPUSCOPE_", "AWS_")):
                mp.delenv(k)
        for k, v in env.items():
            if k.startswith(("GPUSCOPE_", "AWS_")):
                mp.setenv(k, v)
        return cli_in_process(*args)


def small_trace(path: Path, kernel: str = "small_kernel") -> Path:
    """A run of 50 launches of ``kernel`` (its run is named after the file): where what the run
    holds is not the subject (a fault's, a secret's), the sample's analysis need not be paid."""
    t = TraceBuilder()
    for i in range(50):
        t.launch(kernel, i * 10.0, i * 10.0 + 1, 1.0)
    return t.write(path)


def small_run(ts: TeamStore) -> None:
    """Store a run of 50 launches (in this process): the run a fault must leave alone, where
    what it holds is not the subject."""
    path = small_trace(Path(tempfile.mkdtemp(prefix="gpuscope-small-")) / "small.json")
    try:
        done = in_process(env_of(ts), "ingest", str(path))
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    assert done.returncode == 0, done.stderr


def object_count(ts: TeamStore) -> Callable[[], int]:
    """How many objects ``ts`` holds in its bucket (``len(ts.objects())``), asked through one
    boto3 client: the polls below ask every 50 ms, and a client made per ask (ts.objects) costs
    3x the CPU, in this process and in moto's server, which is this process too."""
    pages = ts.s3.client().get_paginator("list_objects_v2")

    def count() -> int:
        listed = pages.paginate(Bucket=ts.bucket, Prefix=ts.prefix + "/")
        return sum(len(page.get("Contents", [])) for page in listed)

    return count


def assert_clean(ts: TeamStore, *outputs: str) -> None:
    text = "\n".join(outputs)
    for secret in secrets_of(ts):
        assert secret not in text, f"a secret in the output: {text[:2000]}"


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def n_runs(ts: TeamStore) -> int:
    """How many runs `gpuscope runs --json` lists (in this process: a state check)."""
    done = in_process(env_of(ts), "runs", "--json")
    assert done.returncode == 0, done.stderr
    return len(json.loads(done.stdout))


# One launch (runtime call, kernel, ac2g flow start and end) as TraceBuilder.launch makes it for
# ``launch(name, c, c + 1, 1.0)`` and json.dumps writes it on one line (floats by repr, as json's).
LAUNCH = (
    '{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000, "tid": 1001, '
    '"ts": {c!r}, "dur": 2.0, "args": {{"cbid": 211, "correlation": {k}}}}}, '
    '{{"ph": "X", "cat": "kernel", "name": {name}, "pid": 0, "tid": 7, "ts": {g!r}, "dur": 1.0, '
    '"args": {{"device": 0, "stream": 7, "correlation": {k}, "registers per thread": 32, '
    '"shared memory": 0, "grid": [1, 1, 1], "block": [128, 1, 1]}}}}, '
    '{{"ph": "s", "id": {k}, "pid": 1000, "tid": 1001, "ts": {c!r}, "cat": "ac2g", '
    '"name": "ac2g"}}, '
    '{{"ph": "f", "id": {k}, "pid": 0, "tid": 7, "ts": {g!r}, "cat": "ac2g", "name": "ac2g", '
    '"bp": "e"}}'
)


def launches_json(n: int) -> str:
    """TraceBuilder's one-line dump of ``n`` launches of ``kernel_{i % 89}`` at ``i * 10`` µs,
    from LAUNCH (a quarter of the CPU of building 4n dicts and encoding them)."""
    t = TraceBuilder()
    empty = json.dumps(t.to_dict())
    last_meta = json.dumps(t.meta_events[-1])
    cut = empty.index(last_meta) + len(last_meta)  # the end of the (meta) events
    names = [json.dumps(f"kernel_{j}") for j in range(89)]
    launches = [
        LAUNCH.format(c=i * 10.0, g=i * 10.0 + 1, k=t._corr + 1 + i, name=names[i % 89])
        for i in range(n)
    ]
    return empty[:cut] + "".join(", " + x for x in launches) + empty[cut:]


def test_launches_json_is_what_tracebuilder_writes(tmp_path: Path) -> None:
    """big_trace's events are TraceBuilder's, byte for byte (so the ingest is the same)."""
    for n in (0, 1, 200):
        t = TraceBuilder()
        for i in range(n):
            t.launch(f"kernel_{i % 89}", i * 10.0, i * 10.0 + 1, 1.0)
        assert launches_json(n) == t.write(tmp_path / "t.json", indent=None).read_text(), n


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """150,000 launches on one line (launches_json: TraceBuilder's bytes, built in 0.9 CPU s
    where TraceBuilder takes 3.4)."""
    path = tmp_path_factory.mktemp("big") / "big.json"
    path.write_text(launches_json(150_000))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("query_form", [False, True], ids=["userinfo", "query"])
def test_postgres_down_at_open_and_a_working_query_password(
    servers: Servers, query_form: bool, tmp_path: Path
) -> None:
    ts = team(servers, query_form=query_form)
    # a small run (what it holds is not the subject: the output of every face of a store that
    # works, then is down, grepped for its secrets); the sample's ingest costs 0.7 CPU s more
    done = gpuscope(ts, "ingest", str(small_trace(tmp_path / "up.json")), "--json")
    assert done.returncode == 0, done.stderr
    listed = gpuscope(ts, "runs")
    as_json = gpuscope(ts, "runs", "--json")
    assert listed.returncode == as_json.returncode == 0
    assert_clean(ts, done.stdout, done.stderr, listed.stdout, listed.stderr, as_json.stdout)
    # the dashboard's start line names the store: masked (issue 22 item 2)
    port = free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "ui", "--headless", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env_of(ts), "PYTHONFAULTHANDLER": "1"},
    )
    try:
        start = ui.stderr.readline() if ui.stderr else ""
    finally:
        ui.terminate()
        try:
            ui.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # say where it hung: faulthandler's dump of its threads
            ui.send_signal(signal.SIGABRT)
            _, err = ui.communicate(timeout=30)
            pytest.fail(f"gpuscope ui went on for 60 s after SIGTERM; its threads:\n{err[-8000:]}")
    assert start.startswith("gpuscope: dashboard on http://localhost:") and "***" in start, start
    assert_clean(ts, start)
    servers.stop_pg()
    try:
        for args in (("runs",), ("runs", "--json"), ("ingest", str(AFTER)), ("analyze", "x")):
            down = gpuscope(ts, *args)
            line = one_line(down, 2)
            assert "Connection refused" in line or "connection refused" in line, line
            assert_clean(ts, down.stdout, down.stderr)
    finally:
        servers.start_pg()
    assert n_runs(ts) == 1


DIE_AT_COMMIT = """
CREATE FUNCTION gs_die() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$;
CREATE TRIGGER gs_die BEFORE INSERT ON ducklake_snapshot FOR EACH ROW EXECUTE FUNCTION gs_die();
"""


@pytest.mark.slow
@pytest.mark.parametrize("query_form", [False, True], ids=["userinfo", "query"])
def test_postgres_gone_mid_commit_is_plain_and_stores_nothing(
    servers: Servers, query_form: bool
) -> None:
    """The catalog's connection dies inside DuckLake's commit (a trigger on the snapshot insert
    terminates its own backend): one plain line, exit 1, no secret, no run."""
    ts = team(servers, query_form=query_form)
    small_run(ts)
    made = ts.pg.psql(DIE_AT_COMMIT, database=ts.database)
    assert made.returncode == 0, made.stderr
    try:
        done = gpuscope(ts, "ingest", str(AFTER), "--json")
    finally:
        dropped = ts.pg.psql("DROP TRIGGER gs_die ON ducklake_snapshot", database=ts.database)
        assert dropped.returncode == 0, dropped.stderr
    line = one_line(done, 1)
    assert (
        line
        == (
            f"gpuscope: postgres://gpuscope:***@127.0.0.1:{ts.pg.port}/{ts.database}"
            if not query_form
            else f"gpuscope: postgres://gpuscope@127.0.0.1:{ts.pg.port}/{ts.database}?password=***"
        )
        + ": the team store's PostgreSQL stopped answering during the commit; nothing was stored"
        + (line.split("nothing was stored", 1)[1])
    ), line
    assert done.stdout == ""
    assert_clean(ts, done.stdout, done.stderr)
    assert n_runs(ts) == 1


@pytest.mark.slow
def test_postgres_stopped_mid_ingest(servers: Servers, big_trace: Path) -> None:
    """PostgreSQL stops while an ingest writes its Parquet files (seen in the bucket): one line,
    exit 1, no secret; once it is back the store has no partial run."""
    ts = team(servers)
    small_run(ts)
    objects = object_count(ts)
    before = objects()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "ingest", str(big_trace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_of(ts),
    )
    deadline = time.monotonic() + 240
    while objects() == before and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the ingest ended before it wrote a file"
    servers.stop_pg()
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        servers.start_pg()
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "the team store's PostgreSQL stopped answering" in lines[0], err
    assert "nothing was stored" in lines[0]
    assert_clean(ts, out, err)
    assert n_runs(ts) == 1


@pytest.mark.slow
def test_s3_faults_keep_the_keys_out(servers: Servers, big_trace: Path) -> None:
    """S3 (moto) with a distinctive key id, secret and session token: a missing bucket at open,
    and the object storage gone mid-ingest. No key, secret or token in any output."""
    ts = team(servers)
    missing = gpuscope(ts, "ingest", str(BEFORE), "--data-path", f"s3://{ts.bucket}-none/x/")
    one_line(missing, 2)
    assert_clean(ts, missing.stdout, missing.stderr)
    s3b = start_s3()  # a server of this test alone, stopped mid-ingest
    try:
        gone = TeamStore(ts.pg, s3b, ts.pg.create_database(), s3b.create_bucket())
        objects = object_count(gone)
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuscope", "ingest", str(big_trace)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_of(gone),
        )
        deadline = time.monotonic() + 240
        while not objects() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop_s3(s3b)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert_clean(gone, out, err)


@pytest.mark.slow
def test_postgres_stopped_while_the_dashboard_shows_a_run(
    servers: Servers, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Mid-page: the Run page is up, PostgreSQL stops, the viewer reloads. The page says so in
    plain words (not "internal error (BinderException)"); no secret in any element of the page
    or any log record; the page works again once PostgreSQL is back."""
    from apptools import MAIN
    from streamlit.testing.v1 import AppTest

    ts = team(servers, query_form=True)
    # the run the page shows, stored and listed in this process (setup: the page and the store's
    # fault are the subject, not what the run holds: a small run, the sample's ingest and Run
    # page cost 3 CPU s more)
    small_run(ts)
    (run_id,) = [r["run_id"] for r in json.loads(in_process(env_of(ts), "runs", "--json").stdout)]
    for k, v in env_of(ts).items():
        if k.startswith(("GPUSCOPE_", "AWS_")):
            monkeypatch.setenv(k, v)
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.run()
    at.switch_page("screens/run.py")
    at.query_params["run"] = run_id
    at.run()
    assert not at.error, [e.value for e in at.error]
    up = page_text(at)  # the sidebar names the store: its ?password= masked (issue 22 item 2)
    assert "password\\=\\*\\*\\*" in up or "password=***" in up, up[:3000]
    assert_clean(ts, up)
    servers.stop_pg()
    try:
        with caplog.at_level(logging.INFO):
            at.run()
        shown = page_text(at)
        errors = [str(e.value) for e in at.error]
    finally:
        servers.start_pg()
    assert errors, shown
    assert any("PostgreSQL stopped answering" in e for e in errors), errors
    assert not any("internal error" in e for e in errors), errors
    assert_clean(ts, shown, caplog.text, *(r.getMessage() for r in caplog.records))
    at.run()  # back: a reload reopens the store
    at.run()
    assert not at.error, [e.value for e in at.error]


def page_text(at: object) -> str:
    """Every value, label and body of every element of the page (AppTest)."""
    out = []
    for kind in ("error", "warning", "info", "success", "markdown", "caption", "text", "code"):
        out += [str(getattr(e, "value", "")) for e in getattr(at, kind)]
    out += [str(getattr(e, "label", "")) for e in at.sidebar]  # type: ignore[attr-defined]
    out += [str(e) for e in at.main]  # type: ignore[attr-defined]
    return "\n".join(out)


def _section_losing_postgres() -> None:
    import duckdb
    from gpuscope.web import views

    with views.section("Run overview"):
        raise duckdb.BinderException(
            "Binder Error: Failed to query most recent snapshot for DuckLake: Unable to connect "
            "to Postgres at \"host='db' port='5432' user='u' password='SectionPw01' dbname='d'\": "
            'connection to server at "db", port 5432 failed: Connection refused'
        )


@pytest.mark.slow
def test_a_section_losing_postgres_mid_page_says_so_in_plain_words(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL stopping between the page's first query and a section's read read "internal
    error (BinderException)": now the section's box says what failed, with no secret."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GPUSCOPE_STORE", "postgres://u:SectionPw01@db:5432/d")
    at = AppTest.from_function(_section_losing_postgres, default_timeout=60)
    with caplog.at_level(logging.INFO):
        at.run()
    assert not at.exception, [str(e.value) for e in at.exception]
    (box,) = [str(e.value) for e in at.error]
    assert box.startswith("Run overview could not be shown: ") and "internal error" not in box
    assert "PostgreSQL stopped answering" in box.replace("\\", "")
    assert "SectionPw01" not in box + caplog.text


# -- team-store orphans: what docs/deploy.md says is what maintenance does ------------------------


@pytest.mark.slow
def test_team_store_orphans_go_at_the_first_maintenance_a_day_after(
    servers: Servers, tmp_path: Path
) -> None:
    """A dead ingest's Parquet files on a team store (untracked by the catalog) are deleted by
    the first maintenance once a day old, and kept before (an ingest on another machine may still
    be writing them): what docs/deploy.md says, and ORPHAN_AGE_TEAM is."""
    from gpuscope.store import ORPHAN_AGE_TEAM

    assert ORPHAN_AGE_TEAM == "1 day"
    deploy = " ".join((REPO / "docs" / "deploy.md").read_text().split())
    assert "the first maintenance a day after they were written deletes them" in deploy
    assert "removed by the next maintenance" not in deploy
    data = tmp_path / "shared"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPUSCOPE_", "AWS_"))},
        "GPUSCOPE_STORE": servers.pg.url(servers.pg.create_database()),
        "GPUSCOPE_DATA_PATH": str(data) + "/",
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        """In this process (in_process): the subject is what maintenance leaves on disk."""
        return in_process(env, *args)

    # a small run: its Parquet files are what maintenance must keep (the sample's: 0.5 s more)
    assert cli("ingest", str(small_trace(tmp_path / "kept.json"))).returncode == 0
    stored = sorted(data.rglob("*.parquet"))
    assert stored
    table_dir = stored[0].parent
    old, young = table_dir / "ducklake-dead-old.parquet", table_dir / "ducklake-dead-new.parquet"
    for f in (old, young):
        f.write_bytes(stored[0].read_bytes())
    two_days_ago = time.time() - 2 * 86400
    os.utime(old, (two_days_ago, two_days_ago))
    done = cli("maintain")
    assert done.returncode == 0, done.stderr
    assert not old.exists() and young.exists()
    assert all(f.exists() for f in stored)  # the stored run's files stay
    assert json.loads(cli("runs", "--json").stdout)[0]["name"] == "kept"


@pytest.mark.slow
def test_the_dashboards_writer_reopens_after_postgres_died_mid_commit(
    servers: Servers, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An upload whose commit lost PostgreSQL is one plain line ("nothing was stored") and the
    next upload works: the dashboard's connections are dropped and reopened, not left dead."""
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.web import db as webdb

    ts = team(servers)
    small_run(ts)
    other = small_trace(tmp_path / "other.json", "other_kernel")  # not small_run's run
    for k, v in env_of(ts).items():
        if k.startswith(("GPUSCOPE_", "AWS_")):
            monkeypatch.setenv(k, v)
    reader = webdb.store()  # open, as the server has before the upload
    assert ts.pg.psql(DIE_AT_COMMIT, database=ts.database).returncode == 0
    try:
        with pytest.raises(StoreError) as failed, webdb.writing() as w:
            writer = w
            ingest_paths(w, [other])
    finally:
        assert (
            ts.pg.psql("DROP TRIGGER gs_die ON ducklake_snapshot", database=ts.database).returncode
            == 0
        )
    assert "stopped answering during the commit; nothing was stored" in str(failed.value)
    assert_clean(ts, str(failed.value))
    # Dropped: both connections of the fault are closed (DuckDB's postgres_scanner would in fact
    # reconnect a kept one, so the next upload alone does not tell a dropped writer from a kept
    # one), and the next use opens new ones.
    for faulted in (reader, writer):
        with pytest.raises(duckdb.ConnectionException):
            faulted.con.execute("SELECT 1")
    with webdb.writing() as w:
        assert w is not writer and webdb.store() is not reader
        ingest_paths(w, [other])
    assert n_runs(ts) == 2
    webdb.drop(webdb.store())
