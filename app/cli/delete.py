"""`gpuscope delete RUN...`: remove runs from the store."""

from __future__ import annotations

import argparse

from gpuscope.cli._common import fail, open_db
from gpuscope.store import delete_run, resolve_run
from gpuscope.vocabulary.errors import GpuscopeError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.main import common_db_option

    p = sub.add_parser("delete", help="delete runs (by id, unique id prefix, or exact name)")
    p.add_argument("runs", nargs="+", metavar="RUN")
    common_db_option(p)


def run(args: argparse.Namespace) -> int:
    con = open_db(args)
    ids = []
    for ref in args.runs:
        try:
            rid = resolve_run(con, ref)
        except GpuscopeError as e:  # ambiguous: the error lists the matching runs
            con.close()
            return fail(str(e), e.exit_code)
        if rid is None:
            con.close()
            return fail(f"{ref}: no such run (see `gpuscope runs`)")
        ids.append(rid)
    for rid in ids:
        delete_run(con, rid)
        print(rid)
    con.close()
    return 0
