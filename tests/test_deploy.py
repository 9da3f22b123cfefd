"""The team deployment, read (there is no Docker engine here): compose.yaml's services, and that the
names and values it hands the dashboard are the ones the code reads; the Dockerfile's image uses
the team store when GPUSCOPE_STORE is set and the local store on its volume otherwise;
docs/deploy.md names what a deployer must set."""

from __future__ import annotations

import json
import re
import shlex
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("app", "ingest", "analysis", "store", "vocabulary")


def compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "compose.yaml").read_text())


def service(name: str) -> dict[str, Any]:
    return compose()["services"][name]


def env_of(name: str) -> dict[str, str]:
    env = service(name).get("environment", {})
    assert isinstance(env, dict), f"{name}: environment as a mapping"
    return {k: str(v) for k, v in env.items()}


def interpolated(value: str, dotenv: dict[str, str]) -> str:
    """``value`` with compose's ``${NAME:?message}`` / ``${NAME}`` replaced from ``dotenv``; a name
    that is not there is an error, as it is for compose."""

    def one(m: re.Match[str]) -> str:
        return dotenv[m.group(1)]

    return re.sub(r"\$\{(\w+)(?::?[?-][^}]*)?\}", one, value)


def names_read_by_the_code() -> set[str]:
    """Every GPUSCOPE_*/AWS_* string literal in the package's sources."""
    found: set[str] = set()
    for root in SOURCES:
        for path in (REPO / root).rglob("*.py"):
            found |= set(re.findall(r"[\"']((?:GPUSCOPE|AWS)_[A-Z0-9_]+)[\"']", path.read_text()))
    return found


DOTENV = {
    "POSTGRES_PASSWORD": "catalog-pw",
    "MINIO_ROOT_USER": "root-user",
    "MINIO_ROOT_PASSWORD": "root-password",
    "S3_ACCESS_KEY_ID": "gpuscope-key",
    "S3_SECRET_ACCESS_KEY": "gpuscope-secret",
}


def test_compose_runs_catalog_object_storage_bucket_and_dashboard() -> None:
    c = compose()
    assert set(c["services"]) == {"postgres", "minio", "create-bucket", "ui"}
    pg, minio, ui = service("postgres"), service("minio"), service("ui")
    assert pg["image"].startswith("postgres:") and minio["image"].startswith("minio/minio")
    # state on named volumes, at the paths the images keep it
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])
    assert any(v.endswith(":" + minio["command"][1]) for v in minio["volumes"])
    assert {v.split(":")[0] for v in pg["volumes"] + minio["volumes"]} <= set(c["volumes"])
    for s in (pg, minio):
        assert s["healthcheck"]["test"], "a healthcheck the dashboard waits for"
    # the dashboard: built from this Dockerfile, started once the catalog is healthy and the
    # bucket exists, on the port the image exposes
    assert ui["build"] == "." and (REPO / "Dockerfile").exists()
    assert ui["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "create-bucket": {"condition": "service_completed_successfully"},
    }
    assert ui["ports"] == ["8501:8501"]
    assert "EXPOSE 8501" in (REPO / "Dockerfile").read_text()


def test_every_secret_comes_from_dotenv_and_none_has_a_default() -> None:
    text = (REPO / "compose.yaml").read_text()
    used = set(re.findall(r"\$\{(\w+)", text))
    assert used == set(DOTENV)
    for m in re.finditer(r"\$\{(\w+)([^}]*)\}", text):
        assert m.group(2).startswith(":?"), f"${{{m.group(1)}}} must be required, not defaulted"
    for name in DOTENV:  # the header and the deploy guide list what to put in .env
        assert (
            name in text.split("name:")[0] and f"{name}=" in (REPO / "docs/deploy.md").read_text()
        )


def test_the_dashboard_store_url_points_at_the_catalog_service() -> None:
    pg_env = env_of("postgres")
    url = urllib.parse.urlsplit(interpolated(env_of("ui")["GPUSCOPE_STORE"], DOTENV))
    assert url.scheme in ("postgres", "postgresql")
    assert url.hostname == "postgres" and url.port == 5432
    assert url.username == pg_env["POSTGRES_USER"]
    assert url.password == interpolated(pg_env["POSTGRES_PASSWORD"], DOTENV)
    assert url.path == "/" + pg_env["POSTGRES_DB"]
    assert "pg_isready" in " ".join(service("postgres")["healthcheck"]["test"])


def test_the_bucket_and_key_pair_the_dashboard_uses_are_the_ones_created() -> None:
    ui = env_of("ui")
    script = " ".join(service("create-bucket")["command"])
    data = urllib.parse.urlsplit(ui["GPUSCOPE_DATA_PATH"])
    assert data.scheme == "s3" and data.path.endswith("/")
    assert f"mc mb --ignore-existing store/{data.hostname} " in script + " "
    # the key pair gpuscope uses is made and given read/write on the bucket's server, and it is
    # not MinIO's administrator
    bucket_env = env_of("create-bucket")
    assert ui["AWS_ACCESS_KEY_ID"] == bucket_env["S3_ACCESS_KEY_ID"]
    assert ui["AWS_SECRET_ACCESS_KEY"] == bucket_env["S3_SECRET_ACCESS_KEY"]
    assert ui["AWS_ACCESS_KEY_ID"] != env_of("minio")["MINIO_ROOT_USER"]
    assert 'mc admin user add store "$$S3_ACCESS_KEY_ID" "$$S3_SECRET_ACCESS_KEY"' in script
    assert "readwrite --user" in script
    endpoint = urllib.parse.urlsplit(ui["AWS_ENDPOINT_URL"])
    assert (endpoint.hostname, endpoint.port) == ("minio", 9000)
    assert "minio:9000" in script and "9000:9000" in service("minio")["ports"]


def test_every_variable_the_dashboard_gets_is_one_the_code_reads() -> None:
    read = names_read_by_the_code()
    needed = {
        "GPUSCOPE_AUTH_CONFIG",
        "GPUSCOPE_STORE",
        "GPUSCOPE_DATA_PATH",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
    }
    ui = env_of("ui")
    assert needed <= ui.keys()
    assert needed <= read, f"the code does not read {sorted(needed - read)}"
    unread = set(ui) - read - needed
    assert not unread, f"compose sets {sorted(unread)} that nothing reads"


def test_the_s3_settings_reach_duckdb_as_the_compose_file_means_them() -> None:
    """The code's own translation of the dashboard's AWS_* into DuckDB's S3 secret: MinIO's
    endpoint without TLS, path-style URLs, the key pair from .env."""
    from gpuscope.store import s3_secret_sql

    env = {k: interpolated(v, DOTENV) for k, v in env_of("ui").items()}
    sql = s3_secret_sql(env)
    assert sql is not None
    assert "'minio:9000'" in sql and "'gpuscope-key'" in sql and "'gpuscope-secret'" in sql
    assert re.search(r"USE_SSL\s+false", sql, re.I) and re.search(r"URL_STYLE\s+'path'", sql, re.I)


def test_the_dashboard_service_serves_the_team_store_with_sign_in() -> None:
    ui = service("ui")
    assert ui["secrets"] == ["gpuscope_auth"]
    assert env_of("ui")["GPUSCOPE_AUTH_CONFIG"] == "/run/secrets/gpuscope_auth"
    assert compose()["secrets"]["gpuscope_auth"]["file"] == "./auth.toml"
    cmd = ui.get("command")
    assert cmd is not None, "compose starts the dashboard without the sample runs"
    from gpuscope.cli.main import build_parser

    args = build_parser().parse_args(cmd[1:])
    assert cmd[:2] == ["gpuscope", "ui"]
    assert args.host == "0.0.0.0" and args.port == 8501
    assert not args.load_samples, "a team store starts empty: no sample runs in everyone's store"
    assert not getattr(args, "db", None) and not getattr(args, "store", None), (
        "--db/--store on the command line would override GPUSCOPE_STORE"
    )
    assert not getattr(args, "no_auth", False)


@pytest.mark.parametrize("team", [True, False], ids=["team", "local"])
def test_the_image_uses_the_team_store_when_configured_and_its_volume_otherwise(
    team: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Dockerfile's CMD, parsed by the real CLI with the image's environment (plus compose's
    GPUSCOPE_STORE/GPUSCOPE_DATA_PATH for the team): which store `gpuscope ui` opens."""
    from gpuscope.cli._common import store_spec
    from gpuscope.cli.main import build_parser

    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    image_env = dict(
        kv.split("=", 1)
        for line in text.splitlines()
        if line.startswith("ENV ")
        for kv in shlex.split(line[4:])
    )
    cmd = json.loads(re.search(r"^CMD (.*)$", text, re.M).group(1))  # type: ignore[union-attr]
    for k in ("GPUSCOPE_STORE", "GPUSCOPE_DATA_PATH", "GPUSCOPE_DB"):
        monkeypatch.delenv(k, raising=False)
    for k, v in image_env.items():
        monkeypatch.setenv(k, v)
    ui = {k: interpolated(v, DOTENV) for k, v in env_of("ui").items()}
    if team:
        monkeypatch.setenv("GPUSCOPE_STORE", ui["GPUSCOPE_STORE"])
        monkeypatch.setenv("GPUSCOPE_DATA_PATH", ui["GPUSCOPE_DATA_PATH"])
    spec = store_spec(build_parser().parse_args(cmd[1:]))
    if team:
        assert spec.kind == "team"
        assert spec.data_path == ui["GPUSCOPE_DATA_PATH"]
        assert "catalog-pw" not in spec.shown()
    else:
        assert spec.kind == "local"
        volumes = re.findall(r'^VOLUME \["([^"]+)"\]', text, re.M)
        assert any(spec.location.startswith(v.rstrip("/") + "/") for v in volumes), spec


def _doc_commands() -> list[str]:
    text = (REPO / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [line.strip() for b in blocks for line in b.splitlines() if line.strip()]


def test_every_gpuscope_command_in_the_deploy_guide_exists() -> None:
    from gpuscope.cli.main import SUBCOMMANDS

    used = {m for line in _doc_commands() for m in re.findall(r"\bgpuscope (\w+)", line)}
    assert {"ingest", "runs"} <= used
    assert used <= set(SUBCOMMANDS), f"docs/deploy.md runs {sorted(used - set(SUBCOMMANDS))}"
    for w in ("compose.yaml", "auth.toml", ".env", "GPUSCOPE_STORE", "GPUSCOPE_DATA_PATH"):
        assert w in (REPO / "docs" / "deploy.md").read_text()


@pytest.mark.slow
def test_the_guide_s_maintenance_command_runs_on_a_store(tmp_path: Path) -> None:
    """The maintenance command the guide gives, run as written (plus --json) on a real store."""
    import os
    import subprocess
    import sys

    line = next(c for c in _doc_commands() if c.startswith("gpuscope maintain"))
    args = shlex.split(line)[1:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSCOPE_", "AWS_"))}
    env["GPUSCOPE_DB"] = str(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-m", "gpuscope", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts == {"merged": 0, "expired": 0, "deleted": 0, "orphans": 0}
