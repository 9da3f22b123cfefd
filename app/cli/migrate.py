"""`gpuscope migrate [FILE]`: move a DuckDB store of older gpuscope into a DuckLake store."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuscope.cli._common import fail, notice, open_db, print_json, store_spec
from gpuscope.store import copy_runs, default_db_path, is_duckdb_file, legacy_default_path
from gpuscope.vocabulary.errors import GpuscopeError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.main import common_db_option

    p = sub.add_parser(
        "migrate",
        help="move a DuckDB store of older gpuscope into the (DuckLake) store",
        description="Without FILE: the local store's location (--db, or the default) still holds "
        "a DuckDB file of older gpuscope, or the old default "
        "~/.local/share/gpuscope/gpuscope.duckdb exists: it becomes a DuckLake store with the same "
        "runs, and the file is kept as <name>.pre-ducklake (this also happens on first open). "
        "With FILE: copy every run of that DuckDB file into the store named by --db/--store "
        "(runs it has already are skipped; FILE is only read).",
    )
    p.add_argument("file", nargs="?", metavar="FILE", help="a DuckDB file of older gpuscope")
    p.add_argument("--json", action="store_true", help="print what was copied as JSON")
    common_db_option(p)


def run(args: argparse.Namespace) -> int:
    spec = store_spec(args)
    if args.file is None:
        root = Path(spec.location)
        pending = spec.kind == "local" and (
            root.is_file()
            or (
                root == default_db_path().absolute()
                and not root.exists()
                and legacy_default_path().is_file()
            )
        )
        if not pending:
            print(f"gpuscope: nothing to migrate: no DuckDB file at {spec.shown()}")
            return 0
        con = open_db(args)  # moves it over, printing one line
        con.close()
        return 0
    source = Path(args.file)
    if not source.is_file() or not is_duckdb_file(source):
        return fail(f"{source}: not a DuckDB file")
    con = open_db(args)
    try:
        result = copy_runs(con, source)
    except GpuscopeError as e:
        return fail(str(e), e.exit_code)
    finally:
        con.close()
    if args.json:
        print_json(result.__dict__)
        return 0
    notice(
        f"copied {len(result.copied)} runs from {source} into {spec.shown()}"
        + (f"; {len(result.skipped)} were there already" if result.skipped else "")
    )
    for rid in result.copied:
        print(rid)
    return 0
