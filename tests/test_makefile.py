"""The Makefile's install stamp: re-install when a package file is added or removed, never because
Python wrote a ``__pycache__`` folder (a second ``make run`` would re-run pip for nothing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _stamp_is_current(tree: Path) -> bool:
    """``make -q`` of the stamp in ``tree``: 0 when nothing would be rebuilt."""
    r = subprocess.run(
        ["make", "-q", "-f", str(tree / "Makefile"), ".venv/.installed"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_pycache_does_not_stale_the_install_but_a_new_module_does(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(REPO / "Makefile", tree / "Makefile")
    shutil.copy(REPO / "pyproject.toml", tree / "pyproject.toml")
    for d in ("app/web", "ingest", "analysis", "vocabulary", "store"):
        (tree / d).mkdir(parents=True)
        (tree / d / "__init__.py").write_text("")
    (tree / "ingest" / "_compiled_parser.c").write_text("")
    assert not _stamp_is_current(tree)  # no venv yet: the manifest is written, the stamp missing
    past = time.time() - 60
    for f in (tree / "pyproject.toml", tree / "ingest" / "_compiled_parser.c"):
        os.utime(f, (past, past))
    os.utime(tree / ".venv" / ".package-files", (past, past))
    (tree / ".venv" / ".installed").write_text("")
    assert _stamp_is_current(tree)
    # Python compiles a module: a __pycache__ folder and a .pyc appear, the folder is newer
    (tree / "app" / "web" / "__pycache__").mkdir()
    (tree / "app" / "web" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    assert _stamp_is_current(tree)
    # a module added: the strict editable tree must be re-linked
    (tree / "app" / "web" / "new_page.py").write_text("")
    assert not _stamp_is_current(tree)


# -- `make test`: lint and type-check beside pytest ------------------------------------------------

FAKE_TOOL = """#!/bin/sh
# A stand-in for {name}: says it ran, waits up to 5 s for the other side to start, exits $RC_{var}.
log="$(dirname "$0")/../../calls.log"
echo "{name} start $*" >>"$log"
touch "$(dirname "$0")/../../{name}.started"
i=0
while [ ! -e "$(dirname "$0")/../../{other}.started" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
[ -e "$(dirname "$0")/../../{other}.started" ] && echo "{name} saw {other} running" >>"$log"
echo "output of {name}"
exit ${{RC_{var}:-0}}
"""


def _tree_with_fake_tools(tmp_path: Path) -> Path:
    """A copy of the Makefile whose install stamps are current and whose .venv/bin holds fakes of
    mypy, ruff and python (pytest) that log their calls."""
    tree = tmp_path / "tree"
    for d in ("app", "ingest", "analysis", "vocabulary", "store"):
        (tree / d).mkdir(parents=True)
    shutil.copy(REPO / "Makefile", tree / "Makefile")
    shutil.copy(REPO / "pyproject.toml", tree / "pyproject.toml")
    (tree / "ingest" / "_compiled_parser.c").write_text("")
    bin_ = tree / ".venv" / "bin"
    bin_.mkdir(parents=True)
    fakes = {"mypy": ("MYPY", "python"), "ruff": ("RUFF", "python"), "python": ("PYTEST", "mypy")}
    for name, (var, other) in fakes.items():
        (bin_ / name).write_text(FAKE_TOOL.format(name=name, var=var, other=other))
        (bin_ / name).chmod(0o755)
    # the manifest (written by make's first parse) and the stamps, all current
    _stamp_is_current(tree)
    past = time.time() - 60
    for f in (tree / "pyproject.toml", tree / "ingest" / "_compiled_parser.c"):
        os.utime(f, (past, past))
    os.utime(tree / ".venv" / ".package-files", (past, past))
    (tree / ".venv" / ".installed").write_text("")
    (tree / ".venv" / ".torch").write_text("")
    return tree


def _make_test(tree: Path, **rcs: int) -> subprocess.CompletedProcess[str]:
    for f in tree.glob("*.started"):
        f.unlink()
    (tree / "calls.log").write_text("")
    env = {**os.environ, **{f"RC_{k}": str(v) for k, v in rcs.items()}}
    # browser and postgres install Debian packages: taken as done here
    return subprocess.run(
        ["make", "-s", "-o", "browser", "-o", "postgres", "test"],
        cwd=tree,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_test_runs_lint_beside_pytest_and_fails_when_either_fails(tmp_path: Path) -> None:
    tree = _tree_with_fake_tools(tmp_path)

    ok = _make_test(tree)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    calls = (tree / "calls.log").read_text().splitlines()
    # mypy was still running when pytest started, and the other way round: side by side
    assert "mypy saw python running" in calls and "python saw mypy running" in calls, calls
    assert [c.split()[0] for c in calls if " start " in c].count("ruff") == 2  # check, format
    assert any(c.startswith("python start -m pytest") for c in calls), calls
    # pytest's own output streams; the lint's comes after, under its header
    out = ok.stdout
    assert (
        out.index("output of python")
        < out.index("== lint and type-check")
        < out.index("output of mypy")
    )

    lint_fails = _make_test(tree, MYPY=1)
    assert lint_fails.returncode != 0
    assert "lint or type-check failed" in lint_fails.stderr
    # ruff still ran after mypy failed: every finding in one run
    assert (tree / "calls.log").read_text().count("ruff start") == 2

    tests_fail = _make_test(tree, PYTEST=1)
    assert tests_fail.returncode != 0
    assert "pytest failed (exit 1)" in tests_fail.stderr

    format_fails = _make_test(tree, RUFF=1)
    assert format_fails.returncode != 0 and "lint or type-check failed" in format_fails.stderr
