"""`gpuscope compare A B`: what changed between two runs, and which fixes B made."""

from __future__ import annotations

import argparse

from gpuscope.cli._common import fail, open_db, print_json


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.analyze import add_analysis_options

    p = sub.add_parser(
        "compare",
        help="compare two runs: step time, busy %%, idle by cause, kernels, recommendations",
        description="A and B are run ids/prefixes/names or trace paths (ingested first).",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    add_analysis_options(p, runs=2)


def run(args: argparse.Namespace) -> int:
    from gpuscope.analysis.compare import compare_runs
    from gpuscope.analysis.nvml_run import analyze_nvml_run, compare_nvml_reports, is_nvml_run
    from gpuscope.analysis.rank_index import within_working_memory
    from gpuscope.cli.analyze import analysis_kwargs, resolve_target

    con = open_db(args)
    try:
        a = resolve_target(con, args.a)
        b = resolve_target(con, args.b)
        try:
            kinds = (is_nvml_run(con, a), is_nvml_run(con, b))
            if all(kinds):
                cmp = compare_nvml_reports(analyze_nvml_run(con, a), analyze_nvml_run(con, b))
            elif any(kinds):
                which = "A" if kinds[0] else "B"
                return fail(
                    f"{a if kinds[0] else b}: {which} is an NVML-only run and the other a trace "
                    "run: compare two trace runs or two NVML runs"
                )
            else:
                kw = analysis_kwargs(args)
                kw["untraced_step_ms"] = tuple(args.untraced_step_ms or (None, None))
                # both runs' working tables spill beyond DuckDB's working limit
                cmp = within_working_memory(
                    con, lambda: compare_runs(con, a, b, **kw), run_ids=[a, b]
                )
        except ValueError as e:
            return fail(str(e))
    finally:
        con.close()
    if args.json:
        print_json(cmp.to_json())
    else:
        print(cmp.table())
    return 0
