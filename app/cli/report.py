"""`gpuscope report RUN [--compare RUN] --format md|html [-o FILE]`: a self-contained report for a
pull request or a ticket (headline, idle causes, fixes with estimates and code, kernels, sawtooth)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from gpuscope.cli._common import fail, open_db


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.analyze import add_analysis_options

    p = sub.add_parser(
        "report",
        help="a self-contained Markdown or HTML report of a run (or of a comparison)",
        description="The headline, idle causes, fixes with estimates and code, top kernels and "
        "the sawtooth (an embedded SVG); no network needed to read it. With --compare OTHER: OTHER "
        "is A (before), RUN is B (after).",
    )
    p.add_argument("target", metavar="RUN|PATH")
    p.add_argument(
        "--compare", metavar="RUN|TAG", default=None, help="compare with this run or tag (A)"
    )
    p.add_argument("--format", choices=("md", "html"), default="md", help="default: md")
    p.add_argument(
        "-o", "--output", metavar="FILE", default=None, help="write here (default: stdout)"
    )
    add_analysis_options(p)


def run(args: argparse.Namespace) -> int:
    from gpuscope.analysis.nvml_run import is_nvml_run
    from gpuscope.cli.analyze import resolve_target
    from gpuscope.cli.tag import resolve_baseline
    from gpuscope.reports import build_report

    con = open_db(args)
    try:
        run_id = resolve_target(con, args.target)
        other = None
        if args.compare:  # a run, a trace path, or a tag (baseline/main)
            other = (
                resolve_target(con, args.compare)
                if Path(args.compare).exists()
                else resolve_baseline(con, args.compare)[0]
            )
        for rid in (run_id, other):
            if rid is not None and is_nvml_run(con, rid):
                return fail(f"run {rid}: an NVML-only run: reports cover trace runs")
        try:
            text = build_report(
                con,
                run_id,
                fmt=args.format,
                rank=args.rank,
                compare_to=other,
                step_annotation=args.step_annotation,
                peak_tflops=args.peak_tflops,
                model_flops_per_step=args.model_flops_per_step,
            )
        except ValueError as e:
            return fail(str(e))
    finally:
        con.close()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_atomically(Path(args.output), text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def write_atomically(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file beside it (no half-written report)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file (mkstemp makes it 0600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
