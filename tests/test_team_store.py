"""The team store: the catalog in a real PostgreSQL, the data in a real S3 server (moto), all through
the real `gpuscope` CLI (the local store its figures are compared with is written and read by the
CLI in this process, a DuckDB file: clitools.analysis_store). First the harness itself
(tests/team_servers.py), so a broken harness fails loudly instead of passing the team tests
vacuously."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clitools import analysis_store, cli_in_process
from team_servers import (
    OWNER_FILE,
    S3,
    Postgres,
    TeamStore,
    free_port,
    port_open,
    postgres_bin_dir,
    reap_orphans,
    start_postgres,
    stop_postgres,
)
from tracegen import TraceBuilder

# Every test here starts or uses real servers (PostgreSQL, S3) and `gpuscope` processes.
pytestmark = pytest.mark.slow

# -- the harness ---------------------------------------------------------------------------------


def test_a_missing_postgres_binary_is_a_one_line_failure_naming_it(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception) as none:
        postgres_bin_dir(tmp_path)
    assert "initdb" in str(none.value) and "make postgres" in str(none.value)
    bin_dir = tmp_path / "15" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "initdb").write_text("")
    with pytest.raises(pytest.fail.Exception) as partial:
        postgres_bin_dir(tmp_path)
    message = str(partial.value)
    assert "pg_ctl" in message and str(bin_dir) in message and "\n" not in message
    (bin_dir / "pg_ctl").write_text("")
    (bin_dir / "psql").write_text("")
    assert postgres_bin_dir(tmp_path) == bin_dir


def test_postgres_runs_unprivileged_on_loopback_with_password_auth(
    postgres_server: Postgres,
) -> None:
    status = Path(f"/proc/{postgres_server.pid()}/status").read_text()
    uid = int(status.split("Uid:")[1].split()[0])
    assert uid != 0
    ok = postgres_server.psql("SELECT current_user; SHOW listen_addresses")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == [postgres_server.user, "127.0.0.1"]
    bad = postgres_server.psql("SELECT 1", password="not-the-password")
    assert bad.returncode != 0 and "password authentication failed" in bad.stderr
    assert (postgres_server.socket_dir / f".s.PGSQL.{postgres_server.port}").exists()


def test_each_database_is_its_own(postgres_server: Postgres) -> None:
    a, b = postgres_server.create_database(), postgres_server.create_database()
    assert a != b
    made = postgres_server.psql("CREATE TABLE marker (x int)", database=a)
    assert made.returncode == 0, made.stderr
    seen = "SELECT count(*) FROM pg_tables WHERE tablename = 'marker'"
    assert postgres_server.psql(seen, database=a).stdout.strip() == "1"
    assert postgres_server.psql(seen, database=b).stdout.strip() == "0"


def test_postgres_teardown_stops_the_server_and_removes_its_files() -> None:
    pg = start_postgres()
    try:
        assert port_open(pg.port) and pg.data_dir.is_dir()
    finally:
        stop_postgres(pg)
    assert not port_open(pg.port)
    assert not pg.root.exists()


def test_a_server_left_by_a_killed_test_process_is_stopped_by_the_next_start() -> None:
    """A run killed by a timeout cannot tear down; the next start stops and removes its server."""
    pg = start_postgres()
    try:
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        )
        (pg.root / OWNER_FILE).write_text(dead.stdout.strip())  # its owner is gone now
        assert port_open(pg.port)
        reaped = reap_orphans(pg.bin_dir)
        assert pg.root in reaped
        assert not port_open(pg.port) and not pg.root.exists()
    finally:
        stop_postgres(pg)


def test_s3_server_stores_lists_and_refuses_a_missing_bucket(s3_server: S3) -> None:
    from botocore.exceptions import ClientError

    bucket = s3_server.create_bucket()
    c = s3_server.client()
    c.put_object(Bucket=bucket, Key="runs/a.parquet", Body=b"PAR1")
    c.put_object(Bucket=bucket, Key="other/b", Body=b"x")
    assert s3_server.keys(bucket, "runs/") == ["runs/a.parquet"]
    assert c.get_object(Bucket=bucket, Key="runs/a.parquet")["Body"].read() == b"PAR1"
    with pytest.raises(ClientError, match="NoSuchBucket"):
        c.list_objects_v2(Bucket=bucket + "-missing")


def test_team_store_fixture_is_fresh_and_complete(team_store: TeamStore) -> None:
    url = urllib.parse.urlsplit(team_store.url)
    assert url.scheme == "postgres" and url.hostname == "127.0.0.1"
    assert url.port == team_store.pg.port and url.path == f"/{team_store.database}"
    assert team_store.data_path == f"s3://{team_store.bucket}/runs/"
    assert team_store.objects() == []
    env = team_store.env()
    assert {"GPUSCOPE_STORE", "GPUSCOPE_DATA_PATH", "AWS_ENDPOINT_URL"} <= env.keys()
    assert port_open(team_store.s3.port)


# -- the team store through the CLI ----------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent
BEFORE = REPO / "sample_traces" / "before"
AFTER = REPO / "sample_traces" / "after"
CLI_TIMEOUT_S = 300


def gpuscope(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m gpuscope ARGS`` in a process of its own; ``env`` on top of a clean environment
    (no store variables inherited from the caller)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCOPE_", "AWS_"))}
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=cwd,
        timeout=CLI_TIMEOUT_S,
    )


def local_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``gpuscope ARGS`` in this process (clitools.cli_in_process) on the local reference store
    (``--db`` among ARGS): what the team store's processes are compared with, not under test."""
    return cli_in_process(*args)


def ok_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a command that must fail with exit code 2."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuscope: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@dataclass
class Populated:
    """A team store holding the before/after samples, ingested by the CLI, and a local store with
    the same two traces for reference (a DuckDB file, whose figures equal the lake's:
    tests/test_store_equivalence.py; the lake under GPUSCOPE_TESTS_ON_LAKE=1)."""

    team: TeamStore
    local: Path | str
    ids: dict[str, str]  # name -> run id


def _fresh_team(postgres_server: Postgres, s3_server: S3) -> TeamStore:
    return TeamStore(
        postgres_server,
        s3_server,
        postgres_server.create_database(),
        s3_server.create_bucket(),
    )


@pytest.fixture(scope="module")
def populated(
    postgres_server: Postgres, s3_server: S3, tmp_path_factory: pytest.TempPathFactory
) -> Populated:
    team = _fresh_team(postgres_server, s3_server)
    runs = ok_json(
        gpuscope("ingest", str(BEFORE), str(AFTER), "--json", *team.args(), env=team.s3.env())
    )
    ids = {r["name"]: r["run_id"] for r in runs}
    assert set(ids) == {"before", "after"}
    local = analysis_store(tmp_path_factory.mktemp("local"))
    ok_json(local_cli("ingest", str(BEFORE), str(AFTER), "--json", "--db", str(local)))
    return Populated(team, local, ids)


def test_ingested_runs_are_parquet_objects_in_the_bucket(populated: Populated) -> None:
    keys = populated.team.objects()
    assert keys, "no object under the data path"
    assert all(k.startswith(populated.team.prefix + "/") for k in keys)
    parquet = [k for k in keys if k.endswith(".parquet")]
    assert len(parquet) >= 2, keys
    body = populated.team.s3.client().get_object(Bucket=populated.team.bucket, Key=parquet[0])
    data = body["Body"].read()
    assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"
    # nothing lands beside the catalog: the local data dir of the CLI's cwd stays unused
    assert not (REPO / "runs").exists()


def test_runs_lists_them_from_another_process_configured_by_the_environment(
    populated: Populated,
) -> None:
    env = populated.team.env()  # GPUSCOPE_STORE / GPUSCOPE_DATA_PATH / AWS_*, no options
    listed = ok_json(gpuscope("runs", "--json", env=env))
    assert {r["run_id"]: r["name"] for r in listed} == {v: k for k, v in populated.ids.items()}
    text = gpuscope("runs", env=env)
    assert text.returncode == 0 and "before" in text.stdout and "after" in text.stdout
    assert populated.team.pg.password not in text.stdout + text.stderr


@pytest.mark.parametrize("name", ["before", "after"])
def test_analyze_gives_the_same_figures_as_the_local_store(populated: Populated, name: str) -> None:
    rid = populated.ids[name]
    team = ok_json(
        gpuscope("analyze", rid, "--json", *populated.team.args(), env=populated.team.s3.env())
    )
    local = ok_json(local_cli("analyze", rid, "--json", "--db", str(populated.local)))
    assert team["run"]["id"] == rid and team["run"]["name"] == name
    assert team["gpu_busy_pct"] is not None and team["step_time_ms"]["mean"] > 0
    assert team == local


def test_compare_gives_the_same_figures_as_the_local_store(populated: Populated) -> None:
    a, b = populated.ids["before"], populated.ids["after"]
    team = ok_json(gpuscope("compare", a, b, "--json", env=populated.team.env()))
    local = ok_json(local_cli("compare", a, b, "--json", "--db", str(populated.local)))
    assert team == local
    text = gpuscope("compare", "before", "after", env=populated.team.env())
    assert text.returncode == 0, text.stderr
    assert a in text.stdout and b in text.stdout


def test_delete_removes_the_run_for_every_process(
    postgres_server: Postgres, s3_server: S3, tmp_path: Path
) -> None:
    team = _fresh_team(postgres_server, s3_server)
    env = team.env()
    # two small stepped runs, not the samples: the delete is the subject, not what a run holds
    # (the samples' ingest and analysis on the team store are populated's and its tests')
    runs = [small_stepped_run(tmp_path / f"{name}.json", name) for name in ("first", "second")]
    ids = [r["run_id"] for r in ok_json(gpuscope("ingest", *map(str, runs), "--json", env=env))]
    assert len(ids) == 2
    done = gpuscope("delete", ids[0], env=env)
    assert done.returncode == 0, done.stderr
    assert [r["run_id"] for r in ok_json(gpuscope("runs", "--json", env=env))] == [ids[1]]
    gone = gpuscope("analyze", ids[0], "--json", env=env)
    assert gone.returncode != 0 and ids[0] in gone.stderr
    ok_json(gpuscope("analyze", ids[1], "--json", env=env))


def small_stepped_run(path: Path, kernel: str) -> Path:
    """A one-rank trace of three 100 us profiler steps, one ``kernel`` launch in each."""
    t = TraceBuilder()
    for n in range(3):
        t.step(n, 1000.0 + 100.0 * n, 100.0)
        t.launch(kernel, 1001.0 + 100.0 * n, 1005.0 + 100.0 * n, 20.0)
    return t.write(path)


WRONG_PASSWORD = "not-the-password-4711"


def bad_store(case: str, pg: Postgres, s3: S3) -> tuple[list[str], str]:
    """(--store/--data-path arguments, what the error line must name) of a store that cannot be
    used, by ``case``."""
    bucket = s3.create_bucket()
    data = ["--data-path", f"s3://{bucket}/runs/"]
    if case == "port out of range":
        return ["--store", "postgres://gpuscope@127.0.0.1:99999/gpuscope", *data], "99999"
    if case == "no host or database":
        return ["--store", "postgres://", *data], "postgres://"
    if case == "nothing listens":
        port = free_port()
        return ["--store", f"postgres://gpuscope:{WRONG_PASSWORD}@127.0.0.1:{port}/x", *data], str(
            port
        )
    if case == "wrong password":
        url = pg.url(pg.create_database()).replace(pg.password, WRONG_PASSWORD)
        return ["--store", url, *data], "password"
    if case == "missing database":
        return ["--store", pg.url("no_such_database"), *data], "no_such_database"
    if case == "missing bucket":
        url = pg.url(pg.create_database())
        return ["--store", url, "--data-path", f"s3://{bucket}-missing/runs/"], f"{bucket}-missing"
    if case == "new store without a data path":
        return ["--store", pg.url(pg.create_database())], "data_path"
    raise AssertionError(case)


BAD_STORES = [
    "port out of range",
    "no host or database",
    "nothing listens",
    "wrong password",
    "missing database",
    "missing bucket",
    "new store without a data path",
]


@pytest.mark.parametrize("case", BAD_STORES)
def test_a_store_that_cannot_be_used_is_one_line_and_exit_2(
    case: str, postgres_server: Postgres, s3_server: S3
) -> None:
    args, named = bad_store(case, postgres_server, s3_server)
    done = gpuscope("ingest", str(BEFORE), "--json", *args, env=s3_server.env())
    line = one_line_error(done)
    assert named in line.replace("DATA_PATH", "data_path"), line
    for secret in (postgres_server.password, WRONG_PASSWORD):
        assert secret not in done.stdout + done.stderr, "a password in the output"
    # nothing stored: the store either cannot be listed (one line, exit 2) or lists no run
    listed = gpuscope("runs", "--json", *args, env=s3_server.env())
    if listed.returncode == 0:
        assert json.loads(listed.stdout) == []
    else:
        one_line_error(listed)
