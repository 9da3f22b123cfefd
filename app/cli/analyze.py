"""`gpuscope analyze RUN|PATH`: why the GPU sat idle, with the evidence and what to change."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import duckdb
from gpuscope.cli._common import fail, open_db, print_json, run_id_or_exit
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths


def add_analysis_options(p: argparse.ArgumentParser) -> None:
    """Options shared by analyze, compare and check."""
    from gpuscope.cli.main import common_db_option

    p.add_argument("--rank", type=int, default=None, help="rank to analyse (default: the lowest)")
    p.add_argument(
        "--step-annotation",
        metavar="NAME",
        default=None,
        help="annotation that marks a step (default: ProfilerStep#N, else the whole trace)",
    )
    p.add_argument(
        "--peak-tflops", type=float, default=None, metavar="TF", help="peak TFLOP/s for MFU"
    )
    p.add_argument(
        "--model-flops-per-step",
        type=float,
        default=None,
        metavar="FLOPS",
        help="model FLOPs per step of this rank (e.g. 6*N*tokens) instead of counting from shapes",
    )
    common_db_option(p)


def analysis_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "rank": args.rank,
        "step_annotation": args.step_annotation,
        "peak_tflops": args.peak_tflops,
        "model_flops_per_step": args.model_flops_per_step,
    }


def resolve_target(con: duckdb.DuckDBPyConnection, target: str) -> str:
    """A run id/prefix/name, or a trace file or folder (ingested first; a duplicate is fine)."""
    if Path(target).exists():
        try:
            results = ingest_paths(con, [target])
        except IngestError as e:
            raise SystemExit(fail(str(e))) from None
        return results[0].run_id
    return run_id_or_exit(con, target)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "analyze",
        help="analyse a run: busy %%, idle gaps by cause, kernels, MFU, recommendations",
        description="RUN is a run id, unique id prefix or name; PATH a trace file or folder "
        "(ingested first). --json prints the documented JSON (docs/cli-json.md).",
    )
    p.add_argument("target", metavar="RUN|PATH")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_analysis_options(p)


def run(args: argparse.Namespace) -> int:
    from gpuscope.analysis.report import analyze_run

    con = open_db(args)
    try:
        run_id = resolve_target(con, args.target)
        try:
            report = analyze_run(con, run_id, **analysis_kwargs(args))
        except ValueError as e:
            return fail(str(e))
    finally:
        con.close()
    doc = report.to_json()
    if args.json:
        print_json(doc)
    else:
        print(render(doc))
    return 0


def _f(v: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def render(doc: dict[str, Any]) -> str:
    """The report as readable text."""
    r, w, st = doc["run"], doc["window"], doc["step_time_ms"]
    warnings = list(doc.get("warnings") or [])
    # no GPU activity: that warning leads the report (no busy %, MFU or fix below rests on anything)
    top = [f"WARNING: {warnings.pop(0)}"] if doc.get("gpu_busy_pct") is None and warnings else []
    out = [
        *top,
        f"run {r['id']}  {r['name']}  rank {doc['rank']} of {r['ranks']}  GPU {r['gpu'] or '-'}",
        f"window {w['duration_us'] / 1e3:.3f} ms, {w['steps']} steps ({w['source']})",
        f"step time  mean {st['mean']:.3f} ms  p50 {st['p50']:.3f} ms  max {st['max']:.3f} ms",
    ]
    tp = doc.get("throughput")
    if tp and tp.get("samples_per_s"):
        out.append(f"throughput {tp['samples_per_s']:.1f} samples/s")
    idle = doc["idle"]
    out.append(
        f"GPU busy {_f(doc['gpu_busy_pct'], '.1f', '%')}   idle {_f(idle['pct'], '.1f', '%')}"
    )
    for cause, v in sorted(idle["causes"].items(), key=lambda kv: -kv[1]):
        if v and idle["pct"] is not None:
            out.append(f"  {cause:16} {v / 1e3:10.3f} ms  {idle['causes_pct'][cause]:5.1f}%")
    out.append(
        f"tensor cores {_f(doc['tensor_core_pct'], '.1f', '%')}   dtype {doc['dtype'] or '-'}   "
        f"MFU {_f(doc['mfu_pct'], '.1f', '%')}   MFU while busy {_f(doc['mfu_busy_pct'], '.1f', '%')}"
    )
    recs = doc["recommendations"]
    out.append("")
    if recs:
        out.append("recommendations:")
    elif doc.get("gpu_busy_pct") is None:
        out.append("recommendations: none (no GPU activity to base them on)")
    else:
        out.append("recommendations: none (no cost above noise)")
    for rec in recs:
        out.append(f"* [{rec['id']}] {rec['title']}  (up to {rec['max_gain_pct']:.1f}% faster)")
        out.append(f"    {rec['evidence'].get('summary', '')}")
        out += ["    | " + line for line in rec["fix"].splitlines()]
    for wmsg in warnings:
        print(f"gpuscope: warning: {wmsg}", file=sys.stderr)
    return "\n".join(out)
