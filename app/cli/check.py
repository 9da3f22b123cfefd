"""`gpuscope check RUN|PATH --max-idle-pct X --min-busy-pct B --min-mfu-pct Y --max-step-ms Z`:
a CI gate.

Exit 0 when every bound holds, 1 with one line naming every broken bound, 2 on bad
input (no such run or file, no bound given, a bound that cannot be measured).
"""

from __future__ import annotations

import argparse
from typing import Any

from gpuscope.cli._common import fail, open_db, print_json

BOUNDS = ("--max-idle-pct", "--min-busy-pct", "--min-mfu-pct", "--max-step-ms")
"""Every bound ``check`` takes (the one-line error without any names them all)."""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.analyze import add_analysis_options

    p = sub.add_parser(
        "check",
        help="exit 1 when a run breaks a bound (idle %%, busy %%, MFU %%, step time): for CI",
        description="Exit 0 when every given bound holds, 1 (with one line naming every broken "
        "bound) when any is broken, 2 on bad input.",
    )
    p.add_argument("target", metavar="RUN|PATH")
    p.add_argument("--max-idle-pct", type=float, metavar="X", help="fail if GPU idle %% > X")
    p.add_argument("--min-mfu-pct", type=float, metavar="Y", help="fail if MFU %% < Y")
    p.add_argument(
        "--max-step-ms",
        type=float,
        metavar="Z",
        help="fail if the job step time (the median period between step completions, the same "
        "whichever rank; docs/metrics.md) > Z ms",
    )
    p.add_argument("--min-busy-pct", type=float, metavar="B", help="fail if GPU busy %% < B")
    add_analysis_options(p)
    add_gate_options(p)


def run(args: argparse.Namespace) -> int:
    from gpuscope.analysis.job import job_step_time
    from gpuscope.analysis.nvml_run import is_nvml_run
    from gpuscope.analysis.rank_index import within_working_memory
    from gpuscope.analysis.report import analyze_run
    from gpuscope.cli.analyze import analysis_kwargs, resolve_target

    if getattr(args, "baseline", None) is not None:
        return run_gate(args)
    bounds = (args.max_idle_pct, args.min_mfu_pct, args.max_step_ms, args.min_busy_pct)
    if all(b is None for b in bounds):
        return fail(
            f"check: give at least one bound ({', '.join(BOUNDS)}) or a baseline (--baseline RUN|TAG)"
        )
    con = open_db(args)
    try:
        run_id = resolve_target(con, args.target)
        if is_nvml_run(con, run_id):
            return check_nvml(con, run_id, args)
        try:
            # the rank's working tables spill beyond DuckDB's working limit
            report = within_working_memory(
                con,
                lambda: analyze_run(
                    con,
                    run_id,
                    all_ranks=False,
                    details=False,
                    mfu=args.min_mfu_pct is not None,
                    **analysis_kwargs(args),
                ),
                run_ids=[run_id],
            )
            job_step_ms = (
                job_step_time(con, run_id).p50_ms if args.max_step_ms is not None else None
            )
        except ValueError as e:
            return fail(str(e))
    finally:
        con.close()
    name = f"run {run_id} rank {report.rank}"
    if not report.has_gpu_activity:  # no evidence, no figure: nothing to hold to a bound
        return fail(f"{name}: {report.warnings[0]}")
    broken = broken_bounds(report, args, job_step_ms)
    if broken is None:
        return fail(
            f"{name}: MFU unknown (FLOPs or peak missing: pass --model-flops-per-step "
            "and/or --peak-tflops)"
        )
    if broken:
        return fail(f"{name}: " + "; ".join(broken), 1)
    print(f"{name}: ok")
    return 0


def broken_bounds(
    report: Any, args: argparse.Namespace, job_step_ms: float | None = None
) -> list[str] | None:
    """Every broken bound as a phrase (empty: all hold); None when ``--min-mfu-pct`` is given
    and MFU is unknown (bad input, exit 2). ``job_step_ms``: the job step time
    (:func:`gpuscope.analysis.job.job_step_time`) that ``--max-step-ms`` holds."""
    out: list[str] = []
    if args.max_idle_pct is not None and report.idle_pct > args.max_idle_pct:
        out.append(f"GPU idle {report.idle_pct:.2f}% > --max-idle-pct {args.max_idle_pct:g}")
    if args.min_busy_pct is not None and report.gpu_busy_pct < args.min_busy_pct:
        out.append(f"GPU busy {report.gpu_busy_pct:.2f}% < --min-busy-pct {args.min_busy_pct:g}")
    if args.min_mfu_pct is not None:
        if report.mfu_pct is None:
            return None
        if report.mfu_pct < args.min_mfu_pct:
            out.append(f"MFU {report.mfu_pct:.2f}% < --min-mfu-pct {args.min_mfu_pct:g}")
    step = job_step_ms if job_step_ms is not None else report.step_stats.p50_ms
    if args.max_step_ms is not None and step > args.max_step_ms:
        out.append(f"job step time {step:.3f} ms > --max-step-ms {args.max_step_ms:g}")
    return out


def check_nvml(con: Any, run_id: str, args: argparse.Namespace) -> int:
    """``check`` of an NVML-only run: idle and busy bounds against the least busy GPU's idle
    share; MFU and step time cannot be measured from NVML samples (exit 2)."""
    from gpuscope.analysis.nvml_run import analyze_nvml_run

    if args.min_mfu_pct is not None or args.max_step_ms is not None:
        return fail(
            f"run {run_id}: an NVML-only run has no MFU or step time: use --max-idle-pct or "
            "--min-busy-pct"
        )
    try:
        rep = analyze_nvml_run(con, run_id)
    except ValueError as e:
        return fail(str(e))
    idle, busy = rep.idle_pct, rep.busy_pct
    name = f"run {run_id} (NVML)"
    out: list[str] = []
    if args.max_idle_pct is not None and idle is not None and idle > args.max_idle_pct:
        out.append(f"GPU idle {idle:.2f}% > --max-idle-pct {args.max_idle_pct:g}")
    if args.min_busy_pct is not None and busy is not None and busy < args.min_busy_pct:
        out.append(f"GPU busy {busy:.2f}% < --min-busy-pct {args.min_busy_pct:g}")
    if out:
        return fail(f"{name}: " + "; ".join(out), 1)
    print(f"{name}: ok")
    return 0


# -- the gate against a baseline run (issue 24) ---------------------------------------------------


def add_gate_options(p: argparse.ArgumentParser) -> None:
    """``--baseline``, ``--max-regression``, ``--noise-z``, ``--json``, ``--markdown``."""
    from gpuscope.analysis.gate import DEFAULT_MAX_REGRESSION_PCT, DEFAULT_Z

    g = p.add_argument_group(
        "against a baseline",
        "compare per-step medians of step time, throughput, MFU and GPU busy %% with a baseline "
        "run; exit 1 only when a metric is worse beyond the noise of both runs and beyond "
        "--max-regression",
    )
    g.add_argument("--baseline", metavar="RUN|TAG", help="the baseline run, or its tag")
    g.add_argument(
        "--max-regression",
        type=float,
        default=DEFAULT_MAX_REGRESSION_PCT,
        metavar="PCT",
        help=f"tolerated regression, %% of the baseline's median (default {DEFAULT_MAX_REGRESSION_PCT:g})",
    )
    g.add_argument(
        "--noise-z",
        type=float,
        default=DEFAULT_Z,
        metavar="Z",
        help=f"noise band: Z standard errors of the difference of medians (default {DEFAULT_Z:g})",
    )
    out = g.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the verdict as JSON")
    out.add_argument("--markdown", action="store_true", help="print the verdict as Markdown")


def run_gate(args: argparse.Namespace) -> int:
    """``check RUN --baseline RUN|TAG``: exit 0 (no regression), 1 (a metric regressed beyond
    noise and threshold, or a given absolute bound broke), 2 (bad input)."""
    from gpuscope.analysis.gate import gate, step_series
    from gpuscope.analysis.job import job_step_time
    from gpuscope.analysis.nvml_run import is_nvml_run
    from gpuscope.analysis.rank_index import within_working_memory
    from gpuscope.analysis.report import analyze_run
    from gpuscope.cli.analyze import analysis_kwargs, resolve_target
    from gpuscope.cli.tag import resolve_baseline

    con = open_db(args)
    try:
        run_id = resolve_target(con, args.target)
        base_id, tag = resolve_baseline(con, args.baseline)
        for rid in (base_id, run_id):
            if is_nvml_run(con, rid):
                return fail(
                    f"run {rid}: an NVML-only run has no steps to compare: the gate needs two "
                    "trace runs"
                )
        kw = analysis_kwargs(args)
        try:
            cand, base = within_working_memory(
                con,
                lambda: (
                    analyze_run(con, run_id, all_ranks=False, **kw),
                    analyze_run(con, base_id, all_ranks=False, **{**kw, "untraced_step_ms": None}),
                ),
                run_ids=[run_id, base_id],
            )
            job_step_ms = (
                job_step_time(con, run_id).p50_ms if args.max_step_ms is not None else None
            )
            # a run of several ranks: its step times are the job's periods (docs/metrics.md)
            periods = {
                rid: job_step_time(con, rid).kept_ms
                for rid, rep in ((base_id, base), (run_id, cand))
                if len(rep.run["ranks"]) > 1
            }
        except ValueError as e:
            return fail(str(e))
    finally:
        con.close()
    for rep in (base, cand):
        if not rep.has_gpu_activity:
            return fail(f"run {rep.run['id']} rank {rep.rank}: {rep.warnings[0]}")
    try:
        result = gate(
            step_series(base, periods.get(base_id)),
            step_series(cand, periods.get(run_id)),
            baseline_run={**_who(base), "tag": tag},
            candidate_run=_who(cand),
            max_regression_pct=args.max_regression,
            z=args.noise_z,
        )
    except ValueError as e:
        return fail(str(e))
    broken = broken_bounds(cand, args, job_step_ms)  # absolute bounds beside --baseline hold too
    if broken is None:
        return fail(f"run {cand.run['id']}: MFU unknown (FLOPs or peak missing)")
    if args.json:
        print_json({**result.to_json(), "broken_bounds": broken})
    elif args.markdown:
        print(result.markdown() + "".join(f"\n- ❌ bound: {b}" for b in broken))
    else:
        print(result.table())
    name = f"run {cand.run['id']} rank {cand.rank}"
    if result.failed or broken:
        why = [result.summary()] if result.failed else []
        return fail(f"{name} vs baseline {base.run['id']}: " + "; ".join(why + broken), 1)
    return 0


def _who(rep: Any) -> dict[str, Any]:
    return {"id": rep.run["id"], "name": rep.run["name"], "rank": rep.rank}
