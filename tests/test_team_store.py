"""The team store: the catalog in a real PostgreSQL, the data in a real S3 server (moto), all through
the real `gpuscope` CLI. First the harness itself (tests/team_servers.py), so a broken harness
fails loudly instead of passing the team tests vacuously."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from team_servers import (
    S3,
    Postgres,
    TeamStore,
    port_open,
    postgres_bin_dir,
    start_postgres,
    stop_postgres,
)

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
