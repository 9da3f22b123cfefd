"""Helpers shared by the subcommands: opening the store, resolving runs, one-line errors."""

from __future__ import annotations

import json
import sys
from typing import Any

import duckdb
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.store import connect, resolve_run


def fail(message: str, code: int = 2) -> int:
    """Print a one-line error on stderr and return the exit code."""
    print(f"gpuscope: {' '.join(message.split())}", file=sys.stderr)
    return code


def open_db(args: Any, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    try:
        return connect(args.db, read_only=read_only)
    except duckdb.IOException as e:
        raise SystemExit(
            fail(f"{args.db or 'database'}: cannot open ({str(e).splitlines()[0]})")
        ) from None


def run_id_or_exit(con: duckdb.DuckDBPyConnection, ref: str) -> str:
    try:
        rid = resolve_run(con, ref)
    except IngestError as e:  # a name or prefix of several runs: the error lists them
        raise SystemExit(fail(str(e))) from None
    if rid is None:
        raise SystemExit(fail(f"{ref}: no such run (see `gpuscope runs`)"))
    return rid


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))
