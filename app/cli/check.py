"""`gpuscope check RUN|PATH --max-idle-pct X --min-mfu-pct Y --max-step-ms Z`: a CI gate.

Exit 0 when every bound holds, 1 with a one-line reason naming the first broken bound, 2 on bad
input (no such run or file, no bound given, a bound that cannot be measured).
"""

from __future__ import annotations

import argparse

from gpuscope.cli._common import fail, open_db


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.analyze import add_analysis_options

    p = sub.add_parser(
        "check",
        help="exit 1 when a run breaks a bound (idle %%, MFU %%, step time): for CI",
        description="Exit 0 when every given bound holds, 1 (with one line saying which) when one "
        "is broken, 2 on bad input.",
    )
    p.add_argument("target", metavar="RUN|PATH")
    p.add_argument("--max-idle-pct", type=float, metavar="X", help="fail if GPU idle %% > X")
    p.add_argument("--min-mfu-pct", type=float, metavar="Y", help="fail if MFU %% < Y")
    p.add_argument("--max-step-ms", type=float, metavar="Z", help="fail if mean step time > Z ms")
    p.add_argument("--min-busy-pct", type=float, metavar="B", help="fail if GPU busy %% < B")
    add_analysis_options(p)


def run(args: argparse.Namespace) -> int:
    from gpuscope.analysis.report import analyze_run
    from gpuscope.cli.analyze import analysis_kwargs, resolve_target

    bounds = (args.max_idle_pct, args.min_mfu_pct, args.max_step_ms, args.min_busy_pct)
    if all(b is None for b in bounds):
        return fail("check: give at least one bound (--max-idle-pct, --min-mfu-pct, --max-step-ms)")
    con = open_db(args)
    try:
        run_id = resolve_target(con, args.target)
        try:
            report = analyze_run(
                con,
                run_id,
                all_ranks=False,
                details=False,
                mfu=args.min_mfu_pct is not None,
                **analysis_kwargs(args),
            )
        except ValueError as e:
            return fail(str(e))
    finally:
        con.close()
    name = f"run {run_id} rank {report.rank}"
    if not report.has_gpu_activity:  # no evidence, no figure: nothing to hold to a bound
        return fail(f"{name}: {report.warnings[0]}")
    if args.max_idle_pct is not None and report.idle_pct > args.max_idle_pct:
        return fail(
            f"{name}: GPU idle {report.idle_pct:.2f}% > --max-idle-pct {args.max_idle_pct:g}", 1
        )
    if args.min_busy_pct is not None and report.gpu_busy_pct < args.min_busy_pct:
        return fail(
            f"{name}: GPU busy {report.gpu_busy_pct:.2f}% < --min-busy-pct {args.min_busy_pct:g}", 1
        )
    if args.min_mfu_pct is not None:
        if report.mfu_pct is None:
            return fail(
                f"{name}: MFU unknown (FLOPs or peak missing: pass --model-flops-per-step "
                "and/or --peak-tflops)"
            )
        if report.mfu_pct < args.min_mfu_pct:
            return fail(
                f"{name}: MFU {report.mfu_pct:.2f}% < --min-mfu-pct {args.min_mfu_pct:g}", 1
            )
    step = report.step_stats.mean_ms
    if args.max_step_ms is not None and step > args.max_step_ms:
        return fail(f"{name}: step time {step:.3f} ms > --max-step-ms {args.max_step_ms:g}", 1)
    print(f"{name}: ok")
    return 0
