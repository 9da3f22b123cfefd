"""Run the `gpuscope` CLI in-process for tests: exit code, stdout and stderr."""

from __future__ import annotations

from gpuscope.cli.main import main


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """``gpuscope ARGS``; ``capsys`` is pytest's fixture. (exit code, stdout, stderr)"""
    try:
        code = main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err
