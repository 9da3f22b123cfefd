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
