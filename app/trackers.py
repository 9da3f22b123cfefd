"""A run's figures in the experiment tracker a team already uses: MLflow and Weights & Biases.

:func:`tracker_payload` gathers what is logged, from the same analysis as ``gpuscope analyze``:
headline figures as metrics (``gpuscope/step_time_ms``, ``gpuscope/gpu_busy_pct``, idle % by cause,
MFU, throughput, each fix's bound), each step's time as a series (step = its index in the window),
the run's identity as parameters, and three files as artifacts: ``gpuscope_fixes.json`` (the
recommendations, with their evidence and code), ``gpuscope_report.html`` and
``gpuscope_report.md`` (:mod:`gpuscope.reports`). :func:`log_mlflow` and :func:`log_wandb` send it;
each imports its client only when called (``pip install 'gpuscope[trackers]'``).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuscope.vocabulary.redact import redact

if TYPE_CHECKING:
    from gpuscope.store import Connection

PREFIX = "gpuscope/"
TARGETS = ("mlflow", "wandb")


class TrackerError(RuntimeError):
    """The tracker cannot be reached or its client is missing: one line for the user."""


@dataclass
class TrackerPayload:
    """What is logged: ``metrics`` (name -> number, names without the ``gpuscope/`` prefix),
    ``step_ms`` (each step's time, ms), ``params`` (name -> text) and ``files`` (artifact name ->
    its text)."""

    run_id: str
    name: str
    metrics: dict[str, float]
    step_ms: list[float]
    params: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def payload_from_doc(doc: dict[str, Any], report_html: str, report_md: str) -> TrackerPayload:
    """The payload of one ``analyze --json`` document and its two reports."""
    job = doc.get("job") or {}
    job_step = job.get("step_time_ms") or {}
    job_split = job.get("split") or {}
    m: dict[str, float | None] = {
        # the job step time (docs/metrics.md "The job"), as every face says it; the shown rank's
        # own step spans under rank_*
        "step_time_ms": job_step.get("p50", doc["step_time_ms"]["p50"]),
        "step_time_p90_ms": job_step.get("p90"),
        "step_time_max_ms": job_step.get("max", doc["step_time_ms"]["max"]),
        "job_gpu_busy_pct": job_split.get("busy_pct"),
        "job_wait_pct": job_split.get("wait_pct"),
        "job_mfu_pct": job.get("mfu_pct"),
        "pace_setter": job.get("pace_setter") if len(job.get("ranks") or []) > 1 else None,
        "rank_step_time_p50_ms": doc["step_time_ms"]["p50"],
        "rank_step_time_mean_ms": doc["step_time_ms"]["mean"],
        "gpu_busy_pct": doc.get("gpu_busy_pct"),
        "idle_pct": doc["idle"].get("pct"),
        "mfu_pct": doc.get("mfu_pct"),
        "achieved_tflops": doc.get("achieved_tflops"),
        "tensor_core_pct": doc.get("tensor_core_pct"),
        "steps": doc["window"]["steps"],
    }
    tp = doc.get("throughput") or {}
    for k in ("samples_per_s", "tokens_per_s", "samples_per_s_untraced", "tokens_per_s_untraced"):
        m[k] = tp.get(k)
    for cause, pct in (doc["idle"].get("causes_pct") or {}).items():
        m[f"idle_{cause}_pct"] = pct
    for r in doc.get("recommendations") or []:
        m[f"fix_{r['id']}_gain_pct"] = (r.get("estimate") or {}).get("gain_pct")
        m[f"fix_{r['id']}_bound_pct"] = r.get("bound_pct")  # only a proven bound
    metrics = {k: f for k, v in m.items() if (f := _num(v)) is not None}
    run = doc["run"]
    params = {
        "gpuscope_run_id": str(run["id"]),
        "gpuscope_run_name": str(run["name"]),
        "gpu": str(run.get("gpu") or ""),
        "rank": str(doc["rank"]),
        "dtype": str(doc.get("dtype") or ""),
        "fixes": ",".join(r["id"] for r in doc.get("recommendations") or []) or "none",
    }
    fixes = json.dumps(doc.get("recommendations") or [], indent=2, default=str)
    steps = [float(s["duration_ms"]) for s in doc.get("steps") or [] if s.get("duration_ms")]
    return TrackerPayload(
        str(run["id"]),
        str(run["name"]),
        metrics,
        steps,
        params,
        {
            "gpuscope_fixes.json": fixes,
            "gpuscope_report.html": report_html,
            "gpuscope_report.md": report_md,
        },
    )


def tracker_payload(con: Connection, run_id: str, *, rank: int | None = None) -> TrackerPayload:
    """Analyse one rank of a trace run (default: the lowest) and build its payload."""
    from gpuscope.reports import render, report_parts

    parts = report_parts(con, run_id, rank=rank)  # the job's verdict too (its step time)
    return payload_from_doc(parts.doc, render(parts, "html"), render(parts, "md"))


def recorded_command(argv: Sequence[str] | None = None) -> str:
    """The command line a tracker records for a run: ``argv`` (default this process's
    ``sys.argv``), its program by base name, each argument passed through the one redaction
    (:func:`~gpuscope.vocabulary.redact.redact`: store URLs' passwords, ``password=``, S3 keys and
    every known secret masked), joined as a shell reads it. Trackers get this, never ``sys.argv``."""
    args = [str(a) for a in (sys.argv if argv is None else argv)]
    if args:
        args[0] = Path(args[0]).name
    return shlex.join(redact(a) for a in args)


def _missing_module(uri: str | None, e: ImportError) -> TrackerError:
    """One line for a tracking store whose driver is not installed (MLflow imports it lazily,
    e.g. psycopg for a ``postgresql://`` URI)."""
    name = e.name or str(e)
    return TrackerError(
        f"mlflow ({redact(uri or 'default tracking URI')}): this tracking store needs the Python "
        f"module {name!r}, which is not installed (pip install {name.split('.')[0]})"
    )


def _staged(payload: TrackerPayload, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in payload.files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def log_mlflow(
    payload: TrackerPayload,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    run_name: str | None = None,
) -> tuple[str, str]:
    """Log ``payload`` as a new, finished MLflow run in ``experiment`` (default ``gpuscope``; made
    when missing) of the tracking store ``tracking_uri`` (default ``$MLFLOW_TRACKING_URI``, else
    MLflow's own default). Returns (experiment id, MLflow run id). Raises TrackerError."""
    try:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError as e:
        raise TrackerError(
            f"--to mlflow needs the mlflow client ({e}): pip install 'gpuscope[trackers]'"
        ) from None
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    try:
        client = MlflowClient(tracking_uri=uri)
        exp_name = experiment or "gpuscope"
        exp = client.get_experiment_by_name(exp_name)
        exp_id = (
            exp.experiment_id
            if exp is not None
            else client.create_experiment(exp_name, artifact_location=_artifacts_beside(uri))
        )
        run = client.create_run(
            exp_id,
            run_name=run_name or payload.name,
            tags={
                "gpuscope.run_id": payload.run_id,
                "mlflow.source.name": "gpuscope",
                "gpuscope.command": recorded_command()[:5000],
            },
        )
        rid = run.info.run_id
        now = int(time.time() * 1000)
        metrics = [Metric(PREFIX + k, v, now, 0) for k, v in sorted(payload.metrics.items())]
        metrics += [
            Metric(PREFIX + "step_time_ms_per_step", v, now, i)
            for i, v in enumerate(payload.step_ms)
        ]
        params = [Param(k, v[:6000]) for k, v in sorted(payload.params.items())]
        for i in range(0, max(len(metrics), 1), 1000):  # MLflow takes 1000 metrics per batch
            client.log_batch(
                rid,
                metrics=metrics[i : i + 1000],
                params=params if i == 0 else [],
                tags=[RunTag("gpuscope.fixes", payload.params["fixes"])] if i == 0 else [],
            )
        with tempfile.TemporaryDirectory(prefix="gpuscope-mlflow-") as tmp:
            client.log_artifacts(rid, str(_staged(payload, Path(tmp) / "gpuscope")), "gpuscope")
        client.set_terminated(rid)
    except MlflowException as e:
        raise TrackerError(
            f"mlflow ({redact(tracking_uri or 'default tracking URI')}): {e}"
        ) from None
    except ImportError as e:  # the store's driver, imported on first use
        raise _missing_module(tracking_uri, e) from None
    return str(exp_id), str(rid)


def _artifacts_beside(uri: str | None) -> str | None:
    """For a SQLite tracking store, a new experiment's artifacts go to ``mlruns/`` beside the
    database file (MLflow's default is ``./mlruns`` of whatever folder the command ran in); for
    other stores, MLflow's default (None)."""
    if not uri or not uri.startswith("sqlite:///"):
        return None
    db = Path(uri.removeprefix("sqlite:///"))
    if not db.is_absolute():
        db = Path.cwd() / db
    return (db.parent / "mlruns").resolve().as_uri()


def log_wandb(
    payload: TrackerPayload,
    *,
    project: str | None = None,
    directory: str | os.PathLike[str] | None = None,
    run_name: str | None = None,
    mode: str = "offline",
) -> Path:
    """Log ``payload`` as a W&B run (``mode`` ``offline`` by default: written under
    ``directory``/wandb/offline-run-*, for ``wandb sync`` to upload). Metrics go to the summary,
    each step's time to the history (step = its index), params to the config, the three files to an
    artifact ``gpuscope-<run id>`` of type ``gpuscope-report``. Returns the run's folder. Raises
    TrackerError."""
    try:
        import wandb
    except ImportError as e:
        raise TrackerError(
            f"--to wandb needs the wandb client ({e}): pip install 'gpuscope[trackers]'"
        ) from None
    folder = Path(directory or ".").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        run = wandb.init(
            project=project or "gpuscope",
            name=run_name or payload.name,
            dir=str(folder),
            mode=mode,  # type: ignore[arg-type]
            config={**payload.params, "gpuscope_command": recorded_command()},
            tags=["gpuscope"],
            # x_disable_meta: W&B records no environment of its own (its copy of sys.argv, which
            # can hold a store password); the command line it gets is ours, redacted, in config
            settings=wandb.Settings(
                silent=True, console="off", save_code=False, x_disable_meta=True
            ),
        )
    except (wandb.Error, OSError) as e:
        raise TrackerError(f"wandb ({folder}): {e}") from None
    try:
        for i, v in enumerate(payload.step_ms):
            run.log({PREFIX + "step_time_ms_per_step": v}, step=i)
        run.summary.update({PREFIX + k: v for k, v in payload.metrics.items()})
        art = wandb.Artifact(f"gpuscope-{payload.run_id}", type="gpuscope-report")
        with tempfile.TemporaryDirectory(prefix="gpuscope-wandb-") as tmp:
            staged = _staged(payload, Path(tmp))
            for name in payload.files:
                art.add_file(str(staged / name), name=name)
            run.log_artifact(art)
        run_dir = Path(run.dir).parent  # .../wandb/offline-run-<time>-<id>/files -> the run
    finally:
        run.finish()
        # finish() can return before W&B's service has written the run's file (under load the
        # file held no record yet); the service writes and closes it when it stops
        wandb.teardown()
    return run_dir


def log_run(
    con: Connection,
    run_id: str,
    to: str,
    *,
    rank: int | None = None,
    experiment: str | None = None,
    tracking_uri: str | None = None,
    directory: str | os.PathLike[str] | None = None,
) -> str:
    """Analyse and log a run to ``to`` (``mlflow`` or ``wandb``); returns one line saying where it
    went. ``experiment``: the MLflow experiment or the W&B project. Raises TrackerError or
    ValueError."""
    if to not in TARGETS:
        raise ValueError(f"--to {to!r}: one of {', '.join(TARGETS)}")
    payload = tracker_payload(con, run_id, rank=rank)
    if to == "mlflow":
        exp_id, rid = log_mlflow(payload, tracking_uri=tracking_uri, experiment=experiment)
        return f"mlflow: experiment {exp_id}, run {rid} ({len(payload.metrics)} metrics, 3 files)"
    path = log_wandb(payload, project=experiment, directory=directory)
    return f"wandb (offline): {path} (upload with `wandb sync {path}`)"
