"""`gpuscope` command line: one module per subcommand, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import importlib
import io
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TextIO

import duckdb
from gpuscope import __version__
from gpuscope.store import forget_stop, request_stop, stop_exit_code
from gpuscope.store.errors import store_fault
from gpuscope.vocabulary.errors import GpuscopeError
from gpuscope.vocabulary.redact import redact

SUBCOMMANDS = (
    "ingest",
    "runs",
    "delete",
    "analyze",
    "compare",
    "check",
    "sample",
    "ui",
    "migrate",
    "maintain",
    "tag",
    "report",
    "log",
)


def common_db_option(p: argparse.ArgumentParser) -> None:
    """``--db``, ``--store``, ``--data-path``: which store a subcommand reads and writes."""
    p.add_argument(
        "--db",
        metavar="DIR",
        default=None,
        help="the local store's folder (default: $GPUSCOPE_DB, else "
        "~/.local/share/gpuscope/store); a DuckDB file of older gpuscope there is moved over",
    )
    p.add_argument(
        "--store",
        metavar="SPEC",
        default=None,
        help="the store: a folder (local), postgres://user:pw@host:5432/db (team catalog), "
        "duckdb:FILE (legacy, one process) (default: $GPUSCOPE_STORE, else the local store)",
    )
    p.add_argument(
        "--data-path",
        metavar="PATH",
        default=None,
        help="where a team store keeps its Parquet files: s3://bucket/prefix or a shared folder "
        "(default: $GPUSCOPE_DATA_PATH); S3 credentials from the AWS_* variables",
    )


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. When ``argv`` starts with a subcommand, only that subcommand's
    module is imported and its parser added (what runs is the same; ``gpuscope analyze`` then
    does not import the ingest's, the sampler's or the other commands' modules: ~0.2 s of a
    128-rank run's 2.8 s analyze); otherwise (help, ``--version``, a typo) every subcommand's."""
    parser = argparse.ArgumentParser(
        prog="gpuscope", description="Why do your GPUs sit idle? Traces and NVML series, analysed."
    )
    parser.add_argument("--version", action="version", version=f"gpuscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = argv[0] if argv else None
    names = (first,) if first in SUBCOMMANDS else SUBCOMMANDS
    for name in names:  # each module imports its heavy dependencies only when it runs
        importlib.import_module(f"gpuscope.cli.{name}").add_parser(sub)
    return parser


# Text from traces, file names and users reaches the terminal: C0/C1 control characters (but
# newline and tab) and bidi overrides are printed escaped, so `--name $'\e[2J'` cannot clear the
# screen and U+202E cannot reverse a line.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
INERT = {
    c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}")
    for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), *_BIDI)
    if c not in (0x09, 0x0A)
}


def inert(text: str) -> str:
    """``text`` with control characters and bidi overrides escaped (``\\x1b``, ``\\u202e``)."""
    return text.translate(INERT)


class InertStream(io.TextIOBase):
    """A text stream that escapes control characters on the way to ``target`` (a terminal) and
    masks every store secret (``gpuscope.vocabulary.redact``): every line and JSON document the CLI
    prints goes through it."""

    def __init__(self, target: TextIO) -> None:
        self.target = target

    def write(self, s: str) -> int:
        self.target.write(redact(s).translate(INERT))
        return len(s)

    def flush(self) -> None:
        self.target.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.target, "encoding", None) or "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.target, "errors", None)

    def __getattr__(self, name: str) -> Any:  # encoding, buffer, ...
        return getattr(self.target, name)


@contextmanager
def inert_output() -> Iterator[None]:
    """Within: ``sys.stdout`` and ``sys.stderr`` print control characters escaped."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = InertStream(out), InertStream(err)
    try:
        yield
    finally:
        with suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        sys.stdout, sys.stderr = out, err


def _stop(signum: int, _frame: object) -> None:
    """SIGTERM and Ctrl-C end the command where they land, cleanup (rollback, scratch files) still
    running; the stop is also remembered (:mod:`gpuscope.store.stopping`), so that no commit
    follows it and the exit code is the signal's even where the exception was lost on its way."""
    request_stop(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    with inert_output():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    for option in ("name", "tag"):  # text that is stored must be text (paths may be any bytes)
        values = getattr(args, option, None)
        for v in values if isinstance(values, list) else [values]:
            if isinstance(v, str) and not v.isprintable() and _undecodable(v):
                return _fail(f"--{option}: not valid UTF-8 text", 2)
    module = importlib.import_module(f"gpuscope.cli.{args.command}")
    forget_stop()  # a command run in-process after another (tests) starts afresh
    handlers = {}
    with suppress(OSError, ValueError):  # not in the main thread (tests): no handler, no harm
        for sig in (signal.SIGTERM, signal.SIGINT):
            handlers[sig] = signal.signal(sig, _stop)
    try:
        code = int(module.run(args) or 0)
    except BaseException as e:
        # Broad on purpose: a stop asked for by a signal may reach here as any exception (DuckDB
        # turns it into "Query interrupted"); it is told below. Anything else is translated, or
        # raised again with its traceback (a bug).
        code = stop_exit_code() or _translated(e, args)
    finally:
        # A signal can land between a scratch file's creation and the code that owns it: whatever
        # this process still has in the temp folder goes when the command ends, however it ends.
        from gpuscope.ingest.batch_insert import remove_own_scratch

        remove_own_scratch()
        for sig, handler in handlers.items():  # a caller's own handlers again (in-process use)
            signal.signal(sig, handler)
    stop = stop_exit_code()
    if stop is not None:
        return _fail(stopped_line(stop - 128), stop)
    return code


def stopped_line(signum: int) -> str:
    """What the user reads when a signal stopped the command."""
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    return (
        f"stopped by {name}: nothing was committed after it (a run is stored whole or not at all)"
    )


def _translated(e: BaseException, args: argparse.Namespace) -> int:
    """The exit code of an exception that ended a command (after its line on stderr); raises
    what is not ours to translate (``SystemExit`` and bugs, which keep their traceback)."""
    if isinstance(e, KeyboardInterrupt):
        return 130
    if isinstance(e, BrokenPipeError):
        return 0
    if isinstance(e, GpuscopeError):  # the one translation: one line, the kind's exit code
        return _fail(str(e), e.exit_code)
    if isinstance(e, duckdb.Error | OSError):  # not bad input: one plain line, not a traceback
        from gpuscope.cli._common import shown_store

        return _fail(str(store_fault(e, shown_store(args))), 1)
    raise e


def _undecodable(text: str) -> bool:
    """Whether ``text`` holds bytes of the command line that were not UTF-8 (surrogate escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _fail(message: str, code: int) -> int:
    print(f"gpuscope: {' '.join(message.split())}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
