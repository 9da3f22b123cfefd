"""Run the `gpuscope` CLI in-process for tests: exit code, stdout and stderr.

In-process costs a call, not a process start (about 1 s of CPU each for the interpreter and the
imports). Tests keep a real process where the process is the point: signals and kills, the real
interpreter's exit status (``python -m gpuscope``), environment handling, imports of a fresh
process, concurrent processes on one store. :func:`analysis_store` and :func:`analysis_spec` give
tests whose subject is the analysis a store cheaper than the lake (``GPUSCOPE_TESTS_ON_LAKE=1``:
the lake)."""

from __future__ import annotations

import io
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from gpuscope.cli.main import main


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """``gpuscope ARGS``; ``capsys`` is pytest's fixture. (exit code, stdout, stderr)"""
    try:
        code = main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def cli_in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``gpuscope ARGS`` in this process, answered as ``subprocess.run([...], capture_output=True,
    text=True)`` answers: returncode, stdout, stderr (a ``SystemExit`` message goes to stderr with
    exit 1, as the interpreter does)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=err)
                code = 1
            else:
                code = e.code
    return subprocess.CompletedProcess(
        ["gpuscope", *args], int(code or 0), out.getvalue(), err.getvalue()
    )


def analysis_store(tmp_path: Path) -> Path | str:
    """A store for CLI tests whose subject is the analysis, not the store, to hand to ``--db``: a
    DuckDB file (``duckdb:PATH``: the same door and analysis as the lake's,
    tests/test_store_equivalence.py; a third less CPU per ``analyze``), the lake under
    ``GPUSCOPE_TESTS_ON_LAKE=1``."""
    if os.environ.get("GPUSCOPE_TESTS_ON_LAKE"):
        return tmp_path / "store"
    return f"duckdb:{tmp_path / 'store.duckdb'}"


def analysis_spec(tmp_path: Path, name: str = "s") -> Path | str:
    """A store opened in-process by a test whose subject is the analysis (stored parts included),
    not the store: in memory (``":memory:"``: the same tables and door as the lake's,
    tests/test_store_equivalence.py), the lake under ``GPUSCOPE_TESTS_ON_LAKE=1``."""
    return tmp_path / name if os.environ.get("GPUSCOPE_TESTS_ON_LAKE") else ":memory:"
