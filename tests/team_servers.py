"""Real servers for the team-store tests: PostgreSQL (Debian's `postgresql` package) and S3 (moto in
server mode), both started by the test suite on free loopback ports and torn down at the end.

PostgreSQL refuses to run as root, and the tests run as root here and on CI, so the server runs as
an unprivileged system user (``gpuscope-test``, created with ``useradd`` when missing; another one
through ``GPUSCOPE_TEST_PG_USER``) through ``runuser``. Its data directory and unix socket live in a
fresh directory under the system temp dir (pytest's own temp dirs are private to root).

A missing binary is a failure with one line naming it, never a skip: ``make postgres`` installs it.

Fixtures (registered by ``tests/conftest.py``):
``postgres_server`` / ``s3_server`` (one of each per session), ``team_store`` (a fresh database and a
fresh bucket per test: the ``--store`` URL, the ``--data-path`` and the environment a CLI needs).
"""

from __future__ import annotations

import itertools
import logging
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from processes import alive

PG_ROOT = Path("/usr/lib/postgresql")
PG_BINARIES = ("initdb", "pg_ctl", "psql")
PG_USER = "gpuscope-test"
PG_SUPERUSER = "gpuscope"  # the database role the tests log in as (password auth over TCP)
S3_REGION = "us-east-1"
STARTUP_S = 60

_counter = itertools.count(1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


# -- PostgreSQL ----------------------------------------------------------------------------------


def postgres_bin_dir(root: Path = PG_ROOT) -> Path:
    """The newest ``<root>/<version>/bin`` holding initdb, pg_ctl and psql; a one-line failure naming
    the first missing binary otherwise."""
    versions = sorted(
        (d for d in root.glob("*/bin") if d.parent.name.isdigit()),
        key=lambda d: int(d.parent.name),
        reverse=True,
    )
    for bin_dir in versions:
        if all((bin_dir / b).is_file() for b in PG_BINARIES):
            return bin_dir
    where = versions[0] if versions else root / "<version>" / "bin"
    missing = next((b for b in PG_BINARIES if not (where / b).is_file()), PG_BINARIES[0])
    pytest.fail(
        f"PostgreSQL is not installed: no {missing} in {where} "
        "(run `make postgres`: apt-get install postgresql)",
        pytrace=False,
    )


def server_user(name: str | None = None) -> str:
    """The unprivileged account the server runs as: the current one when it is not root, else
    ``name`` (``GPUSCOPE_TEST_PG_USER`` or ``gpuscope-test``), created as a system user if missing."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    name = name or os.environ.get("GPUSCOPE_TEST_PG_USER") or PG_USER
    try:
        pwd.getpwnam(name)
    except KeyError:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            pytest.fail(
                f"cannot create the unprivileged user {name} for PostgreSQL: "
                f"{made.stderr.strip() or 'useradd failed'}",
                pytrace=False,
            )
    if pwd.getpwnam(name).pw_uid == 0:
        pytest.fail(f"GPUSCOPE_TEST_PG_USER={name} is root; PostgreSQL refuses it", pytrace=False)
    return name


@dataclass
class Postgres:
    """One running PostgreSQL server: TCP on 127.0.0.1:``port`` with password auth, unix socket in
    ``socket_dir``; ``url(db)`` is what ``--store`` takes."""

    bin_dir: Path
    root: Path
    port: int
    os_user: str
    password: str
    user: str = PG_SUPERUSER
    databases: list[str] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgres://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def pid(self) -> int:
        """The postmaster's process id (first line of postmaster.pid)."""
        return int((self.data_dir / "postmaster.pid").read_text().split()[0])

    def psql(
        self, sql: str, *, database: str = "postgres", password: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``psql -c SQL`` over TCP with the password (tuples only, unaligned)."""
        env = {**os.environ, "PGPASSWORD": self.password if password is None else password}
        env.pop("PGSERVICE", None)
        return subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-X",
                "-q",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                self.user,
                "-d",
                database,
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    def create_database(self, prefix: str = "gpuscope") -> str:
        """A new, empty database; its name."""
        name = f"{prefix}_{os.getpid()}_{next(_counter)}"
        done = self.psql(f'CREATE DATABASE "{name}"')
        if done.returncode != 0:
            raise RuntimeError(f"CREATE DATABASE {name}: {done.stderr.strip()}")
        self.databases.append(name)
        return name


def _as_user(user: str, argv: list[str]) -> list[str]:
    return argv if os.geteuid() != 0 else ["runuser", "-u", user, "--", *argv]


OWNER_FILE = "owner.pid"  # the test process that started the server


def reap_orphans(bin_dir: Path, temp: Path | None = None) -> list[Path]:
    """Stop and remove the servers of earlier test processes that died without tearing down
    (killed by a timeout, SIGKILL): each server's folder names the process that started it."""
    reaped = []
    for root in sorted(Path(temp or tempfile.gettempdir()).glob("gpuscope-pg-*")):
        try:
            owner = int((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if alive(owner):
            continue
        user = root.stat().st_uid
        subprocess.run(
            _as_user(
                pwd.getpwuid(user).pw_name,
                [str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "stop"],
            ),
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(root, ignore_errors=True)
        reaped.append(root)
    return reaped


def start_postgres(bin_dir: Path | None = None) -> Postgres:
    """initdb + ``pg_ctl start`` in a fresh temp dir as an unprivileged user, on a free port
    (after stopping the servers that dead test processes left behind)."""
    bin_dir = bin_dir or postgres_bin_dir()
    os_user = server_user()
    info = pwd.getpwnam(os_user)
    reap_orphans(bin_dir)
    root = Path(tempfile.mkdtemp(prefix="gpuscope-pg-"))
    (root / OWNER_FILE).write_text(str(os.getpid()))
    password = secrets.token_hex(12)
    (root / "socket").mkdir()
    pwfile = root / "pwfile"
    pwfile.write_text(password + "\n")
    for p in (root, root / "socket", pwfile):
        os.chown(p, info.pw_uid, info.pw_gid)
    os.chmod(root, 0o700)
    init = subprocess.run(
        _as_user(
            os_user,
            [
                str(bin_dir / "initdb"),
                "-D",
                str(root / "data"),
                "-U",
                PG_SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    pwfile.unlink()
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {init.stderr.strip().splitlines()[-1:]}", pytrace=False)
    last_error = ""
    for _ in range(3):  # a port taken between free_port() and the bind: try another
        pg = Postgres(bin_dir, root, free_port(), os_user, password)
        opts = (
            f"-c listen_addresses=127.0.0.1 -p {pg.port} -k {pg.socket_dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        started = subprocess.run(
            _as_user(
                os_user,
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(pg.data_dir),
                    "-l",
                    str(pg.log),
                    "-o",
                    opts,
                    "-w",
                    "-t",
                    str(STARTUP_S),
                    "start",
                ],
            ),
            capture_output=True,
            text=True,
            timeout=STARTUP_S + 30,
        )
        if started.returncode == 0:
            return pg
        last_error = pg.log.read_text()[-800:] if pg.log.exists() else started.stderr
    shutil.rmtree(root, ignore_errors=True)
    pytest.fail(f"PostgreSQL did not start: {last_error.strip()}", pytrace=False)


def stop_postgres(pg: Postgres) -> None:
    """``pg_ctl stop -m fast`` and remove its directory."""
    subprocess.run(
        _as_user(
            pg.os_user, [str(pg.bin_dir / "pg_ctl"), "-D", str(pg.data_dir), "-m", "fast", "stop"]
        ),
        capture_output=True,
        timeout=120,
    )
    shutil.rmtree(pg.root, ignore_errors=True)


# -- S3 (moto) -----------------------------------------------------------------------------------


@dataclass
class S3:
    """moto's S3 in server mode on 127.0.0.1:``port``; any key pair is accepted."""

    port: int
    server: object
    access_key: str = "gpuscope-test-key"
    secret_key: str = "gpuscope-test-secret"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The AWS_* variables a gpuscope process reads to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": S3_REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def client(self):  # type: ignore[no-untyped-def]
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=S3_REGION,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def create_bucket(self, prefix: str = "gpuscope") -> str:
        name = f"{prefix}-{os.getpid()}-{next(_counter)}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` in ``bucket``."""
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


def start_s3() -> S3:
    """moto's ThreadedMotoServer on a free loopback port, serving once it answers HTTP."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        pytest.fail(f"moto[server] is not installed ({e}): pip install -e '.[dev]'", pytrace=False)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    deadline = time.monotonic() + STARTUP_S
    while not port_open(port):
        if time.monotonic() > deadline:
            server.stop()
            pytest.fail(f"moto's S3 server did not listen on 127.0.0.1:{port}", pytrace=False)
        time.sleep(0.05)
    return S3(port, server)


def stop_s3(s3: S3) -> None:
    s3.server.stop()  # type: ignore[attr-defined]


# -- the team store ------------------------------------------------------------------------------


@dataclass
class TeamStore:
    """A fresh team store: the catalog database on ``pg`` and a bucket on ``s3``."""

    pg: Postgres
    s3: S3
    database: str
    bucket: str
    prefix: str = "runs"

    @property
    def url(self) -> str:
        """``--store``."""
        return self.pg.url(self.database)

    @property
    def data_path(self) -> str:
        """``--data-path``."""
        return f"s3://{self.bucket}/{self.prefix}/"

    def args(self) -> list[str]:
        return ["--store", self.url, "--data-path", self.data_path]

    def env(self) -> dict[str, str]:
        """The environment of a gpuscope process on this store (GPUSCOPE_STORE/DATA_PATH, AWS_*)."""
        return {
            **self.s3.env(),
            "GPUSCOPE_STORE": self.url,
            "GPUSCOPE_DATA_PATH": self.data_path,
        }

    def objects(self) -> list[str]:
        return self.s3.keys(self.bucket, self.prefix + "/")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    pg = start_postgres()
    yield pg
    stop_postgres(pg)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3]:
    s3 = start_s3()
    yield s3
    stop_s3(s3)


@pytest.fixture
def team_store(
    postgres_server: Postgres, s3_server: S3, monkeypatch: pytest.MonkeyPatch
) -> TeamStore:
    """A fresh catalog database and bucket; the AWS_* variables set for in-process calls too."""
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    return TeamStore(
        postgres_server,
        s3_server,
        postgres_server.create_database(),
        s3_server.create_bucket(),
    )
