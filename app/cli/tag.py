"""`gpuscope tag RUN TAG`: give a run a tag that names it alone (``baseline/main``), for
``gpuscope check --baseline TAG``; ``--remove`` takes it off."""

from __future__ import annotations

import argparse

from gpuscope.cli._common import fail, open_db, run_id_or_exit
from gpuscope.store import (
    Connection,
    move_tag,
    resolve_run,
    runs_with_tag,
    set_tags,
    tags_of,
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.main import common_db_option

    p = sub.add_parser(
        "tag",
        help="tag a run as a baseline (e.g. baseline/main) for `check --baseline TAG`",
        description="The tag names one run: tagging a run takes the tag from any other run that "
        "had it. `gpuscope runs` lists the tags.",
    )
    p.add_argument("run_ref", metavar="RUN", help="run id, unique id prefix or name")
    p.add_argument("tag", metavar="TAG", help="the tag, e.g. baseline/main")
    p.add_argument("--remove", action="store_true", help="take the tag off RUN instead")
    common_db_option(p)


def check_tag(tag: str) -> str | None:
    """Why ``tag`` cannot be a tag (None: it can): non-empty printable text without spaces,
    at most 200 characters."""
    if not tag or len(tag) > 200 or not tag.isprintable() or any(c.isspace() for c in tag):
        return f"{tag!r}: a tag is 1-200 printable characters without spaces"
    return None


def run(args: argparse.Namespace) -> int:
    problem = check_tag(args.tag)
    if problem:
        return fail(problem)
    con = open_db(args)
    try:
        run_id = run_id_or_exit(con, args.run_ref)
        if args.remove:
            tags = [t for t in tags_of(con, run_id) if t != args.tag]
            set_tags(con, run_id, tags)
            print(f"run {run_id}: tag {args.tag} removed")
            return 0
        taken = move_tag(con, run_id, args.tag)
    finally:
        con.close()
    moved = f" (taken from {', '.join(taken)})" if taken else ""
    print(f"run {run_id}: tagged {args.tag}{moved}")
    return 0


def resolve_baseline(con: Connection, ref: str) -> tuple[str, str | None]:
    """A baseline reference -> (run id, the tag it was found by, or None). A tag wins over a
    run name; a reference that is both a tag and another run's id or name is refused (exit 2),
    as is one that names nothing. A tag on several runs (``runs --tag`` allows it) names the
    newest of them."""
    from gpuscope.store import AmbiguousRunName

    holders = runs_with_tag(con, ref)
    try:
        as_run = resolve_run(con, ref)
    except AmbiguousRunName as e:  # an ambiguous name: only a problem when it is not a tag
        if not holders:
            raise SystemExit(fail(str(e))) from None
        as_run = None
    if holders:
        if as_run is not None and as_run not in holders:
            raise SystemExit(
                fail(
                    f"{ref}: both the tag of run {holders[0]} and the id or name of run {as_run}: "
                    "give the run id"
                )
            )
        return holders[0], ref
    if as_run is None:
        raise SystemExit(fail(f"{ref}: no such run or tag (see `gpuscope runs`)"))
    return as_run, None
