"""`gpuscope` command line: one module per subcommand, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpuscope import __version__

SUBCOMMANDS = ("ingest", "runs", "delete", "analyze", "compare", "check", "sample", "ui")


def common_db_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        metavar="FILE",
        default=None,
        help="DuckDB file (default: $GPUSCOPE_DB, else ~/.local/share/gpuscope/gpuscope.duckdb)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuscope", description="Why do your GPUs sit idle? Traces and NVML series, analysed."
    )
    parser.add_argument("--version", action="version", version=f"gpuscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"gpuscope.cli.{name}")
        except ModuleNotFoundError as e:  # a subcommand still being written; tests require all
            if e.name != f"gpuscope.cli.{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    module = importlib.import_module(f"gpuscope.cli.{args.command}")
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
