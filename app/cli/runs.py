"""`gpuscope runs`: list the stored runs; also rename and tag them."""

from __future__ import annotations

import argparse

from gpuscope.cli._common import open_db, print_json, run_id_or_exit
from gpuscope.store import list_runs, set_name, set_tags


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.main import common_db_option

    p = sub.add_parser("runs", help="list runs (newest first)")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--rename", nargs=2, metavar=("RUN", "NAME"), help="give RUN a new display name")
    p.add_argument(
        "--tag", nargs="+", metavar=("RUN", "TAG"), help="set RUN's tags (replaces them)"
    )
    common_db_option(p)


def cell(text: object, width: int) -> str:
    """One table cell: control characters of any kind (newline, carriage return and tab
    included) escaped as ``\\n`` ``\\x1b`` …, so a run name cannot start a row of its own,
    then cut to ``width`` and padded."""
    shown = "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text)
    )
    return f"{shown[:width]:{width}}"


def run(args: argparse.Namespace) -> int:
    con = open_db(args)
    if args.rename:
        set_name(con, run_id_or_exit(con, args.rename[0]), args.rename[1])
    if args.tag:
        set_tags(con, run_id_or_exit(con, args.tag[0]), args.tag[1:])
    runs = list_runs(con)
    con.close()
    if args.json:
        print_json(runs)
        return 0
    if not runs:
        print("no runs yet: gpuscope ingest TRACE.json.gz")
        return 0
    header = (
        f"{'RUN':12}  {'NAME':32}  {'KIND':5}  {'RANKS':>5}  {'EVENTS':>10}  {'GPU':24}  CREATED"
    )
    print(header)
    for r in runs:
        print(
            f"{r['run_id']:12}  {cell(r['name'], 32)}  {r['kind']:5}  {r['n_ranks']:>5}  "
            f"{r['n_events']:>10}  {cell(r['gpu_name'] or '-', 24)}  {r['created_at'][:19]}"
        )
    return 0
