"""`gpuscope maintain [--compact] [--analyses]`: reclaim what the store no longer needs (e.g. nightly)."""

from __future__ import annotations

import argparse

import duckdb
from gpuscope.cli._common import fail, notice, open_db, print_json, shown_store

STEPS = (
    ("merged", "tables compacted"),
    ("expired", "snapshots expired"),
    ("deleted", "unneeded files deleted"),
    ("orphans", "files of dead ingests deleted"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.main import common_db_option

    p = sub.add_parser(
        "maintain",
        help="expire old snapshots and delete files no run needs (every ingest does it too)",
        description="Expires catalog snapshots older than a day, deletes the files that no "
        "snapshot has needed for an hour (deleted runs) and those of ingests that died. Safe "
        "while dashboards and ingests run; every ingest ends with it. --compact also merges the "
        "small files of many small runs into fewer: run it only while nothing reads the store "
        "(a reader during the merge can miss a run's rows).",
    )
    p.add_argument(
        "--compact",
        action="store_true",
        help="also merge small files; only while no dashboard, analysis or ingest reads the store",
    )
    p.add_argument(
        "--analyses",
        action="store_true",
        help="also store the analyze document of every run whose stored one is missing or stale "
        "(after an upgrade: a full analysis per such run; analyze --json then reads it)",
    )
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    common_db_option(p)


def run(args: argparse.Namespace) -> int:
    con = open_db(args)
    try:
        if not con.is_lake:
            print(f"gpuscope: {con.shown()}: a legacy DuckDB store has nothing to maintain")
            return 0
        counts = con.maintain(compact=args.compact)
        if getattr(args, "analyses", False):
            from gpuscope.analysis.report_part import refresh

            counts["analyses"] = refresh(con)
    except duckdb.Error as e:  # the catalog or the object storage failed: one line, exit 2
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        return fail(f"{shown_store(args)}: maintenance failed ({first.strip()})")
    finally:
        con.close()
    if args.json:
        print_json(counts)
    else:
        for key, label in STEPS:
            if key != "merged" or args.compact:
                print(f"{counts.get(key, 0):>8,}  {label}")
        if "analyses" in counts:
            print(f"{counts['analyses']:>8,}  analyze documents stored")
    if not args.compact:
        notice(
            "note: small files were not merged (`gpuscope maintain --compact`, while nothing reads)"
        )
    return 0
