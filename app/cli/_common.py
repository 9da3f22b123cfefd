"""Helpers shared by the subcommands: opening the store, resolving runs, one-line errors."""

from __future__ import annotations

import json
import sys
from typing import Any

from gpuscope.store import Store, StoreSpec, open_store, parse_spec, resolve_run
from gpuscope.vocabulary.errors import GpuscopeError, NotFound


def fail(message: str, code: int = 2) -> int:
    """Print a one-line error on stderr and return the exit code."""
    print(f"gpuscope: {' '.join(message.split())}", file=sys.stderr)
    return code


def notice(message: str) -> None:
    print(f"gpuscope: {' '.join(message.split())}", file=sys.stderr)


def store_spec(args: Any) -> StoreSpec:
    """The store the options name: ``--store``, else ``--db`` (the local store's folder), else
    ``$GPUSCOPE_STORE``, else ``$GPUSCOPE_DB``, else the default local store. Exits 2 (one line)
    on a bad spec."""
    store = getattr(args, "store", None)
    db = getattr(args, "db", None)
    if store and db:
        raise SystemExit(fail("--store and --db name two stores: give one"))
    try:
        return parse_spec(store or db, getattr(args, "data_path", None))
    except GpuscopeError as e:
        raise SystemExit(fail(str(e), e.exit_code)) from None


def open_db(args: Any) -> Store:
    """Open the store the options name (see :func:`store_spec`); a store that cannot be opened
    (bad spec, unreachable catalog, missing extension) is one line and exit 2: nothing was done
    yet, so it reads as a wrong ``--store`` (docs/deploy.md), whatever its kind."""
    spec = store_spec(args)
    try:
        return open_store(spec, notice=notice)
    except GpuscopeError as e:
        raise SystemExit(fail(str(e), 2)) from None


def shown_store(args: Any) -> str:
    """The store named by the options, for messages (no password)."""
    try:
        return store_spec(args).shown()
    except SystemExit:
        return str(getattr(args, "store", None) or getattr(args, "db", None) or "the store")


def run_id_or_exit(con: Any, ref: str) -> str:
    try:
        rid = resolve_run(con, ref)
        if rid is None:
            raise NotFound(ref, "no such run (see `gpuscope runs`)")
    except GpuscopeError as e:  # none, or a name or prefix of several runs (the error lists them)
        raise SystemExit(fail(str(e), e.exit_code)) from None
    return rid


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))
