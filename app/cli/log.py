"""`gpuscope log RUN --to mlflow|wandb [--experiment X]`: the run's figures as tracker metrics, its
fixes and report as artifacts (MLflow: a run in a tracking store; W&B: an offline run for
`wandb sync`)."""

from __future__ import annotations

import argparse

from gpuscope.cli._common import fail, open_db


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.main import common_db_option

    p = sub.add_parser(
        "log",
        help="log a run's figures, fixes and report to MLflow or W&B (offline)",
        description="Metrics: step time, busy %%, idle %% by cause, MFU, throughput, each fix's "
        "bound, each step's time; artifacts: gpuscope_fixes.json, gpuscope_report.html/.md. "
        "Needs pip install 'gpuscope[trackers]'.",
    )
    p.add_argument("target", metavar="RUN|PATH")
    p.add_argument("--to", required=True, choices=("mlflow", "wandb"), help="the tracker")
    p.add_argument(
        "--experiment",
        metavar="NAME",
        default=None,
        help="MLflow experiment / W&B project (default: gpuscope)",
    )
    p.add_argument(
        "--tracking-uri",
        metavar="URI",
        default=None,
        help="MLflow tracking store, e.g. sqlite:///mlflow.db or file:///path/mlruns "
        "(default: $MLFLOW_TRACKING_URI, else MLflow's default)",
    )
    p.add_argument(
        "--wandb-dir",
        metavar="DIR",
        default=None,
        help="where the offline W&B run is written (default: the current folder)",
    )
    p.add_argument("--rank", type=int, default=None, help="rank to log (default: the lowest)")
    common_db_option(p)


def run(args: argparse.Namespace) -> int:
    from gpuscope.analysis.nvml_run import is_nvml_run
    from gpuscope.cli.analyze import resolve_target
    from gpuscope.trackers import TrackerError, log_run

    con = open_db(args)
    try:
        run_id = resolve_target(con, args.target)
        if is_nvml_run(con, run_id):
            return fail(f"run {run_id}: an NVML-only run: `log` covers trace runs")
        try:
            line = log_run(
                con,
                run_id,
                args.to,
                rank=args.rank,
                experiment=args.experiment,
                tracking_uri=args.tracking_uri,
                directory=args.wandb_dir,
            )
        except ValueError as e:
            return fail(str(e))
        except TrackerError as e:
            return fail(str(e), 1)
    finally:
        con.close()
    print(line)
    return 0
