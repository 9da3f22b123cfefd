"""Issue 47: trackers never receive a secret. ``gpuscope log RUN --to wandb|mlflow --store
'postgres://u:PW@…'`` against a real team store (PostgreSQL + S3 by moto): the W&B offline run's
files and the MLflow run (SQLite tracking store, its artifacts) are read back and hold no password;
the command line they record is ours, redacted. A tracking store whose driver is missing is one
line, not a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from clitools import run_cli
from test_gate import stepped
from test_team_store import gpuscope
from test_trackers import wandb_records

pytest.importorskip("mlflow", reason="pip install 'gpuscope[trackers]'")
pytest.importorskip("wandb", reason="pip install 'gpuscope[trackers]'")


def _files_holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``secret`` (raw or percent-encoded)."""
    import urllib.parse

    forms = {secret.encode(), urllib.parse.quote(secret, safe="").encode()}
    return [
        str(p) for p in root.rglob("*") if p.is_file() and any(f in p.read_bytes() for f in forms)
    ]


def _wandb_env(root: Path) -> dict[str, str]:
    return {
        "WANDB_MODE": "offline",
        "WANDB_DATA_DIR": str(root / "wandb-data"),
        "WANDB_CACHE_DIR": str(root / "wandb-cache"),
        "WANDB_CONFIG_DIR": str(root / "wandb-config"),
        "WANDB_SILENT": "true",
    }


@pytest.mark.slow
def test_no_tracker_keeps_the_store_password(tmp_path, team_store):
    """The probe's command: the store URL with its password on the command line (so in
    ``sys.argv``), not in the environment."""
    password = team_store.pg.password
    assert len(password) >= 8 and password in team_store.url
    trace = stepped([1000, 1000, 1000], 400).write(tmp_path / "stepped.json")
    env = {**team_store.s3.env(), **_wandb_env(tmp_path)}  # no GPUSCOPE_STORE: argv only
    out = tmp_path / "w"
    done = gpuscope(
        "log",
        str(trace),
        "--to",
        "wandb",
        "--wandb-dir",
        str(out),
        *team_store.args(),
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert password not in done.stdout + done.stderr
    (file,) = out.glob("wandb/offline-run-*/run-*.wandb")
    assert _files_holding(tmp_path, password) == []  # the run, its logs, W&B's own folders
    from wandb.proto import wandb_internal_pb2 as pb

    records = [pb.Record.FromString(d) for d in wandb_records(file)]
    assert not any(r.HasField("environment") for r in records)  # W&B's copy of sys.argv: none
    run = next(r.run for r in records if r.HasField("run"))
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    command = config["gpuscope_command"]
    assert " log " in command and " --to wandb " in command  # `python -m gpuscope`: __main__.py
    assert "--store 'postgres://gpuscope:***@127.0.0.1:" in command, command

    # MLflow: a SQLite tracking store; the database and the artifacts hold no password
    uri = f"sqlite:///{tmp_path / 'ml' / 'mlflow.db'}"
    (tmp_path / "ml").mkdir()
    done = gpuscope(
        "log",
        "stepped",
        "--to",
        "mlflow",
        "--tracking-uri",
        uri,
        *team_store.args(),
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert _files_holding(tmp_path / "ml", password) == []
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (ml_run,) = client.search_runs([client.get_experiment_by_name("gpuscope").experiment_id])
    everything = json.dumps([ml_run.data.tags, ml_run.data.params, ml_run.info.run_name])
    assert password not in everything
    tag = ml_run.data.tags["gpuscope.command"]
    assert "--store 'postgres://gpuscope:***@127.0.0.1:" in tag, tag


def test_recorded_command_is_redacted_by_the_one_redaction():
    from gpuscope.trackers import recorded_command

    got = recorded_command(
        [
            "/opt/venv/bin/gpuscope",
            "log",
            "run 1",
            "--store",
            "postgresql://u:Pa55word-x@db:5432/gs?sslmode=require",
            "--tracking-uri=postgresql://ml:an0ther-secret@h/ml",
            "host=h password='dsn-secret'",
        ]
    )
    assert got == (
        "gpuscope log 'run 1' --store 'postgresql://u:***@db:5432/gs?sslmode=require' "
        "'--tracking-uri=postgresql://ml:***@h/ml' 'host=h password=***'"
    )


def test_a_tracking_store_without_its_driver_is_one_line(tmp_path, db_path, capsys, monkeypatch):
    """The probe: ``--tracking-uri postgresql://…`` with psycopg missing printed a 65-line
    traceback."""
    monkeypatch.chdir(tmp_path)
    for name in ("psycopg", "psycopg2"):  # missing, whether or not this machine has them
        monkeypatch.setitem(sys.modules, name, None)
    path = stepped([1000, 1000, 1000], 400).write(tmp_path / "s.json")
    uri = "postgresql://ml:Tr4cking-secret@127.0.0.1:9/mlflow"
    code, out, err = run_cli(
        capsys, "log", str(path), "--to", "mlflow", "--tracking-uri", uri, "--db", str(db_path)
    )
    assert code == 1 and out == "", err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("gpuscope: mlflow (postgresql://ml:***@127.0.0.1:9/mlflow): ")
    assert "'psycopg'" in err and "not installed" in err and "Tr4cking-secret" not in err
