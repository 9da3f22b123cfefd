"""A stop asked for by a signal (SIGTERM, Ctrl-C), remembered so that no commit follows it.

The CLI's handler raises where the signal lands, so that cleanup runs (rollback, scratch files).
But a signal can land where the exception it raises is replaced or lost: DuckDB reads signals
while a statement runs and raises ``RuntimeError: Query interrupted`` in place of ours, and its
lookup of Python objects by name swallows an exception raised in a frame it inspects (the
command then went on and committed). So the request is also remembered here: every commit of a
store checks it first (:func:`raise_if_stopping`), and the CLI ends with the signal's exit code whatever
reached it (:func:`stop_exit_code`)."""

from __future__ import annotations

import signal

_requested: int | None = None


def request_stop(signum: int) -> None:
    """Remember that signal ``signum`` asked this process to stop (a signal handler calls this)."""
    global _requested
    _requested = signum


def stop_exit_code() -> int | None:
    """128 + the signal's number once a stop was asked for (the shell's convention), else None."""
    return None if _requested is None else 128 + _requested


def raise_if_stopping() -> None:
    """Raise once a stop was asked for: :class:`KeyboardInterrupt` for Ctrl-C, else
    ``SystemExit(128 + signal)``. Called before every commit, so a stop whose exception was lost
    on its way still rolls the transaction back."""
    if _requested is None:
        return
    if _requested == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + _requested)


def forget_stop() -> None:
    """Forget a request (a test that sends signals to its own process)."""
    global _requested
    _requested = None
