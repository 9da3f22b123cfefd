"""`gpuscope ingest PATH...`: load traces (files, or folders of rank files) into the store."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from gpuscope.cli._common import fail, open_db, print_json, run_id_or_exit
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.memory_snapshot import META_KEY as SNAPSHOT_KEY
from gpuscope.ingest.memory_snapshot import SNAPSHOT_SUFFIXES, read_snapshot
from gpuscope.vocabulary.errors import GpuscopeError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.main import common_db_option

    p = sub.add_parser(
        "ingest",
        help="load traces into the store; prints one run id per line",
        description="Each PATH is one run: a trace file (.json or .json.gz), a folder "
        "holding one trace file per rank (NVML series files beside them are attached to the run), "
        "or an NVML series (gpuscope sampler .jsonl or nvidia-smi CSV). All paths are published "
        "together: on any error nothing is stored.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--name", help="display name (only with a single PATH)")
    p.add_argument("--tag", action="append", default=[], help="tag the run(s); repeatable")
    p.add_argument("--attach", metavar="RUN", help="attach NVML series files to this existing run")
    p.add_argument("--tz", help="time zone of nvidia-smi CSV timestamps (default: this machine's)")
    p.add_argument(
        "--smi-columns",
        metavar="LIST",
        help="the --query-gpu list of nvidia-smi CSV logs written with --format=csv,noheader "
        "(e.g. timestamp,index,utilization.gpu,memory.used,power.draw)",
    )
    p.add_argument(
        "--separate",
        action="store_true",
        help="each trace file of a folder is its own run (e.g. profiling spans of one process)",
    )
    p.add_argument(
        "--untraced-step-ms",
        type=float,
        metavar="MS",
        help="step time measured without the profiler, ms, stored with the trace run(s) as "
        "gpuscope.capture would have (caps host-side findings at what can exist without the "
        "profiler)",
    )
    p.add_argument(
        "--uploaded-by",
        metavar="WHO",
        help=f"who stores the run(s), kept in runs.uploaded_by: only ${ENV_UPLOADER} (this "
        f"node's service identity, set by the deployer; the default) unless "
        f"${ENV_ALLOW_UPLOADED_BY}=1 allows naming anyone (docs/security.md)",
    )
    p.add_argument(
        "--memory-snapshot",
        metavar="FILE",
        help="a torch.cuda.memory._dump_snapshot pickle of the same job, kept with the trace run "
        "(read without running code: only containers, numbers and strings; a .pickle among the "
        "PATHs is taken the same way)",
    )
    add_job_options(p)
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="threads that parse the trace files while one writes them (default: the cores this "
        "process may use, or $GPUSCOPE_INGEST_JOBS); peak memory grows by about 20 MB per "
        "thread, not with the files' number or size",
    )
    p.add_argument("--json", action="store_true", help="print details as JSON")
    common_db_option(p)


ENV_UPLOADER = "GPUSCOPE_UPLOADER"  # the ingest node's service identity, set by the deployer
ENV_ALLOW_UPLOADED_BY = "GPUSCOPE_ALLOW_UPLOADED_BY"  # "1": --uploaded-by may name anyone


def uploader(claimed: str | None) -> str | None:
    """Who a CLI ingest records as ``runs.uploaded_by``: ``$GPUSCOPE_UPLOADER`` (case-folded), or
    None when unset. ``--uploaded-by`` may only repeat it, unless ``$GPUSCOPE_ALLOW_UPLOADED_BY=1``
    (an admin's import) lets it name anyone. Raises ValueError (one line) for a claim refused."""
    from gpuscope.web.auth import fold

    service = os.environ.get(ENV_UPLOADER, "").strip()
    own = fold(service) if service else None
    if claimed is None:
        return own
    if not claimed.strip():
        raise ValueError("--uploaded-by: an empty name")
    wanted = fold(claimed)
    if wanted == own or os.environ.get(ENV_ALLOW_UPLOADED_BY, "").strip() == "1":
        return wanted
    who = f"this node's identity is {own} (${ENV_UPLOADER})" if own else f"${ENV_UPLOADER} is unset"
    raise ValueError(
        f"--uploaded-by {claimed}: a run is credited to the identity the deployer gave this node, "
        f"not to a name typed here ({who}); ${ENV_ALLOW_UPLOADED_BY}=1 allows it for an admin's "
        "import"
    )


def add_job_options(p: argparse.ArgumentParser) -> None:
    """``--job``: the ranks of one distributed job, ingested node by node into one run."""
    p.add_argument(
        "--job",
        metavar="ID",
        nargs="?",
        const="",
        help="the PATHs (trace files, or folders of them) are ranks of job ID: they are added "
        "to the job's one run, which fills in as each node runs this; without ID, "
        "$TORCHELASTIC_RUN_ID, else $SLURM_JOB_ID; a rank the run holds already is refused",
    )


def run(args: argparse.Namespace) -> int:
    if args.name and len(args.paths) > 1:
        return fail("--name needs exactly one PATH")
    try:
        uploaded_by = uploader(args.uploaded_by)
    except ValueError as e:
        return fail(str(e))
    metadata: dict[str, object] = {}
    if args.untraced_step_ms is not None:
        if not math.isfinite(args.untraced_step_ms) or args.untraced_step_ms <= 0:
            return fail(f"--untraced-step-ms: {args.untraced_step_ms:g} is not a step time > 0 ms")
        metadata["gpuscope.untraced_step_ms"] = args.untraced_step_ms
    snapshots = [x for x in args.paths if str(x).lower().endswith(SNAPSHOT_SUFFIXES)]
    args.paths = [x for x in args.paths if x not in snapshots]
    if args.memory_snapshot:
        snapshots.append(args.memory_snapshot)
    if len(snapshots) > 1:
        return fail(f"{snapshots[1]}: one memory snapshot per ingest ({snapshots[0]} is the other)")
    if snapshots and not args.paths:
        return fail(f"{snapshots[0]}: a memory snapshot goes with a trace: name the trace too")
    if snapshots:  # read (or refused) before the store is opened: a refusal changes nothing
        try:
            metadata[SNAPSHOT_KEY] = read_snapshot(snapshots[0])
        except IngestError as e:
            return fail(str(e))
    if args.jobs is not None and args.jobs < 1:
        return fail(f"--jobs: {args.jobs} is not a number of threads >= 1")
    if args.job is not None and (args.attach or args.separate):
        return fail("--job cannot be combined with --attach or --separate")
    if args.job == "":
        from gpuscope.capture import job_id

        args.job = job_id()
        if args.job is None:
            return fail(
                "--job: no ID given and neither $TORCHELASTIC_RUN_ID nor $SLURM_JOB_ID is set"
            )
    con = open_db(args)
    try:
        attach = run_id_or_exit(con, args.attach) if args.attach else None
        results = ingest_paths(
            con,
            args.paths,
            name=args.name,
            tags=args.tag,
            attach=attach,
            tz=args.tz,
            separate=args.separate,
            smi_columns=args.smi_columns,
            metadata=metadata,
            uploaded_by=uploaded_by,
            jobs=args.jobs,
            **summary_options(args),
        )
        if any(not r.duplicate for r in results):  # expired snapshots, unneeded files
            note = con.maintain_after_ingest()
            if note:
                print(f"gpuscope: note: {note}", file=sys.stderr)
    except GpuscopeError as e:  # a store fault (StoreError) exits 1, bad input 2
        return fail(str(e), e.exit_code)
    finally:
        con.close()
    for run_id, why in getattr(getattr(args, "summary_later", None), "failed", ()):
        print(
            f"gpuscope: note: run {run_id} is stored, but its summary could not be computed "
            f"after the ingest ({why}): `gpuscope analyze {run_id}` computes it",
            file=sys.stderr,
        )
    for r in results:
        for w in r.warnings:
            print(f"gpuscope: note: {r.paths[0]}: {w}", file=sys.stderr)
        if args.job is not None and args.name and r.name != args.name:  # the first name stands
            print(
                f"gpuscope: note: --name {args.name!r} not applied: job {args.job}'s run keeps "
                f"the name it was given first, {r.name!r} (gpuscope runs --rename "
                f"{r.run_id} NAME renames it)",
                file=sys.stderr,
            )
        if r.duplicate:
            print(
                f"gpuscope: {r.paths[0]}: already ingested as run {r.run_id} ({r.name})",
                file=sys.stderr,
            )
    if args.json:
        print_json([r.as_dict() for r in results])
    else:
        for r in results:
            print(r.run_id)
    return 0


def summary_options(args: argparse.Namespace) -> dict[str, Any]:
    """``ingest_paths`` options of the distributed-run flags: the job, and each trace run's rank
    summaries computed inside the ingest's transaction (gpuscope.analysis.rank_summary), and the
    run's ``analyze --json`` document once it has committed (``analyze`` follows an ingest),
    through :class:`SummaryLater` (``args.summary_later``)."""
    from gpuscope.analysis.rank_summary import SummaryLater, store_after_ingest_with_document

    args.summary_later = SummaryLater(store_after_ingest_with_document)
    return {"job": getattr(args, "job", None), "after_trace": args.summary_later}
