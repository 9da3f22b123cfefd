"""`gpuscope log RUN --to mlflow|wandb` (issue 24): against a real local MLflow tracking store
(SQLite) and a real offline W&B run, read back through MLflow's client and W&B's record format."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import analysis_store, run_cli
from gpuscope.ingest.loader import ingest_paths
from gpuscope.trackers import TrackerError, log_mlflow, log_wandb, tracker_payload
from test_gate import stepped

mlflow = pytest.importorskip("mlflow", reason="pip install 'gpuscope[trackers]'")
pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


@pytest.fixture
def db_path(tmp_path: Path) -> Path | str:
    """The store ``gpuscope log`` is handed: the tracker's record, not the store, is the subject."""
    return analysis_store(tmp_path)


@pytest.fixture(scope="module")
def mlflow_template(tmp_path_factory) -> Path:
    """An MLflow SQLite tracking store as MLflow makes it on first use (its tables, by 60-odd
    Alembic migrations: 1.1 CPU s and seconds of fsyncs each time), made once for the module and
    holding no experiment of ours: :func:`mlflow_db` copies it where a test's tracking URI points.
    A fresh tracking store is still made by MLflow itself in tests/test_trackers_secrets.py."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow") / "template.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
    return path


def mlflow_db(template: Path, path: Path) -> str:
    """A copy of ``template`` at ``path``; its tracking URI."""
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def run_id(tmp_path, con):
    # 4 steps of 1000 µs, each with one 400 µs kernel: step time 1 ms, GPU busy 40 %
    path = stepped([1000, 1000, 1000, 1000], 400).write(tmp_path / "stepped.json")
    return ingest_paths(con, [str(path)], name="stepped")[0].run_id


@pytest.mark.slow
def test_payload_by_hand(con, run_id):
    p = tracker_payload(con, run_id)
    assert p.metrics["step_time_ms"] == pytest.approx(1.0)
    assert p.metrics["gpu_busy_pct"] == pytest.approx(40.0)
    assert p.metrics["idle_pct"] == pytest.approx(60.0)
    assert p.metrics["steps"] == 4 and p.step_ms == pytest.approx([1.0] * 4)
    assert p.metrics["samples_per_s"] == pytest.approx(16 / 1e-3)  # 16 samples per 1 ms step
    assert "mfu_pct" not in p.metrics  # unknown: not logged as a number
    assert p.params["gpuscope_run_id"] == run_id and p.params["gpuscope_run_name"] == "stepped"
    assert set(p.files) == {"gpuscope_fixes.json", "gpuscope_report.html", "gpuscope_report.md"}
    assert p.files["gpuscope_report.md"].startswith("# gpuscope report: stepped")


@pytest.mark.slow
def test_mlflow_sqlite_store(tmp_path, con, run_id, monkeypatch, mlflow_template):
    from mlflow.tracking import MlflowClient

    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    uri = mlflow_db(mlflow_template, tmp_path / "mlflow.db")
    p = tracker_payload(con, run_id)
    exp_id, rid = log_mlflow(p, tracking_uri=uri, experiment="perf")
    client = MlflowClient(tracking_uri=uri)
    assert client.get_experiment_by_name("perf").experiment_id == exp_id
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and run.info.run_name == "stepped"
    got = run.data.metrics
    assert got["gpuscope/step_time_ms"] == pytest.approx(1.0)
    assert got["gpuscope/gpu_busy_pct"] == pytest.approx(40.0)
    assert {k.removeprefix("gpuscope/") for k in got} == {*p.metrics, "step_time_ms_per_step"}
    assert run.data.params["gpuscope_run_id"] == run_id
    hist = client.get_metric_history(rid, "gpuscope/step_time_ms_per_step")
    assert sorted(m.step for m in hist) == [0, 1, 2, 3]
    assert [m.value for m in hist] == pytest.approx([1.0] * 4)
    names = sorted(a.path for a in client.list_artifacts(rid, "gpuscope"))
    assert names == [
        "gpuscope/gpuscope_fixes.json",
        "gpuscope/gpuscope_report.html",
        "gpuscope/gpuscope_report.md",
    ]
    local = Path(client.download_artifacts(rid, "gpuscope/gpuscope_report.md", str(tmp_path)))
    assert local.read_text(encoding="utf-8") == p.files["gpuscope_report.md"]
    # the artifacts lie beside the database, not in the folder the command ran in
    assert (tmp_path / "mlruns").is_dir() and list(elsewhere.iterdir()) == []
    # a second log goes into the same experiment
    assert log_mlflow(p, tracking_uri=uri, experiment="perf")[0] == exp_id


@pytest.mark.slow
def test_log_cli_to_mlflow_and_bad_input(tmp_path, db_path, capsys, monkeypatch, mlflow_template):
    monkeypatch.chdir(tmp_path)
    path = stepped([1000, 1000, 1000], 400).write(tmp_path / "s.json")
    db = ["--db", str(db_path)]
    uri = mlflow_db(mlflow_template, tmp_path / "m.db")
    code, out, err = run_cli(
        capsys, "log", str(path), "--to", "mlflow", "--tracking-uri", uri, "--experiment", "x", *db
    )
    assert code == 0 and out.startswith("mlflow: experiment ") and "3 files" in out, err
    from mlflow.tracking import MlflowClient

    runs = MlflowClient(tracking_uri=uri).search_runs(
        [MlflowClient(tracking_uri=uri).get_experiment_by_name("x").experiment_id]
    )
    assert len(runs) == 1 and runs[0].data.metrics["gpuscope/steps"] == 3
    # a tracking URI MLflow does not know: one line, exit 1
    code, _, err = run_cli(capsys, "log", "s", "--to", "mlflow", "--tracking-uri", "bogus://x", *db)
    assert code == 1 and err.startswith("gpuscope: mlflow (bogus://x): ") and err.count("\n") == 1
    # no client installed: says how to install it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'never.db'}")
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.setitem(sys.modules, name, None)
    code, _, err = run_cli(capsys, "log", "s", "--to", "mlflow", *db)
    assert code == 1 and "pip install 'gpuscope[trackers]'" in err
    assert not (tmp_path / "never.db").exists()
    code, _, err = run_cli(capsys, "log", "nope", "--to", "wandb", *db)
    assert code == 2 and "nope: no such run" in err


# -- W&B offline ------------------------------------------------------------------------------------


def wandb_records(path: Path) -> list[bytes]:
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then 32 KiB
    blocks of chunks, each with a 7-byte header (CRC-32C, length, type: 1 full, 2 first, 3 middle,
    4 last; 0 pads a block's end), as W&B's own reader and ``wandb sync`` read it."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, buf, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            out.append(buf + chunk)
    return out


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for k, v in {
        "WANDB_MODE": "offline",
        "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
        "WANDB_SILENT": "true",
    }.items():
        monkeypatch.setenv(k, v)
    return tmp_path


@pytest.mark.slow
def test_wandb_offline_run_holds_everything(wandb_env, con, run_id):
    from wandb.proto import wandb_internal_pb2 as pb

    p = tracker_payload(con, run_id)
    run_dir = log_wandb(p, project="perf", directory=wandb_env / "out")
    assert run_dir.name.startswith("offline-run-") and run_dir.parent.name == "wandb"
    (file,) = run_dir.glob("run-*.wandb")
    records = [pb.Record.FromString(d) for d in wandb_records(file)]
    kinds = [r.WhichOneof("record_type") for r in records]
    assert kinds.count("run") == 1 and "exit" in kinds
    run = next(r.run for r in records if r.HasField("run"))
    assert run.project == "perf" and run.display_name == "stepped"
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert config["gpuscope_run_id"] == run_id
    history = [
        {(u.key or "/".join(u.nested_key)): json.loads(u.value_json) for u in r.history.item}
        for r in records
        if r.HasField("history")
    ]
    steps = {h["_step"]: h["gpuscope/step_time_ms_per_step"] for h in history}
    assert steps == pytest.approx({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0})
    summary: dict[str, float] = {}
    for r in records:
        if r.HasField("summary"):
            summary.update({u.key: json.loads(u.value_json) for u in r.summary.update if u.key})
    assert summary["gpuscope/gpu_busy_pct"] == pytest.approx(40.0)
    (art,) = [r.artifact for r in records if r.HasField("artifact")]
    assert art.name == f"gpuscope-{run_id}" and art.type == "gpuscope-report"
    staged = {e.path: Path(e.local_path) for e in art.manifest.contents}
    assert set(staged) == set(p.files)
    for name, text in p.files.items():
        assert staged[name].read_text(encoding="utf-8") == text  # staged for the upload
    # wandb's own CLI finds it as a run to upload
    res = subprocess.run(
        [str(Path(sys.executable).parent / "wandb"), "sync", "--dry-run", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=wandb_env,
    )
    assert res.returncode == 0, res.stderr
    assert "Would sync 1 run(s)" in res.stdout + res.stderr


@pytest.mark.slow
def test_log_cli_to_wandb(wandb_env, db_path, capsys):
    path = stepped([1000, 1000], 400).write(wandb_env / "s.json")
    code, out, err = run_cli(
        capsys,
        "log",
        str(path),
        "--to",
        "wandb",
        "--wandb-dir",
        str(wandb_env / "w"),
        "--db",
        str(db_path),
    )
    assert code == 0 and out.startswith("wandb (offline): "), err
    assert len(list((wandb_env / "w" / "wandb").glob("offline-run-*/run-*.wandb"))) == 1


def test_tracker_error_is_one_line():
    assert issubclass(TrackerError, RuntimeError)


# -- gpuscope.capture logs at the end of a profiled run ---------------------------------------------


@pytest.mark.slow
def test_capture_logs_to_mlflow_at_the_end(tmp_path, monkeypatch, mlflow_template, one_thread):
    pytest.importorskip("torch")
    import warnings

    from gpuscope.capture import profile_steps
    from mlflow.tracking import MlflowClient
    from test_capture import train

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RANK", raising=False)
    uri = mlflow_db(mlflow_template, tmp_path / "m.db")
    # the store the run is ingested into is not the subject: a DuckDB file (the lake under
    # GPUSCOPE_TESTS_ON_LAKE=1), 0.8 CPU s less per ingest
    opts = {"store": str(analysis_store(tmp_path)), "tracking_uri": uri, "experiment": "cap"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile_steps(
            tmp_path / "t", name="cap", sample_gpu=False, log_to="mlflow", log_options=opts
        ) as prof:
            train(prof, prof.steps_needed)
    assert prof.logged is not None and prof.logged.startswith("mlflow: experiment ")
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("cap").experiment_id])
    assert run.info.run_name == "cap" and run.data.metrics["gpuscope/steps"] == 5
    # a tracker that fails: a warning with the reason, the job goes on
    bad = {**opts, "tracking_uri": "bogus://x"}
    with (
        pytest.warns(RuntimeWarning, match=r"not logged to mlflow \(mlflow \(bogus://x\)"),
        profile_steps(
            tmp_path / "t2", name="cap2", sample_gpu=False, log_to="mlflow", log_options=bad
        ) as prof2,
    ):
        train(prof2, prof2.steps_needed)
    assert prof2.logged is None and prof2.trace_paths
    with pytest.raises(ValueError, match="log_to"), profile_steps(tmp_path, log_to="neptune"):
        pass
