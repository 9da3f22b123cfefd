"""tests/stored_samples.py, the per-process cache of stored samples the slow tests copy: a build
that fails passes its error on and leaves no template (the next call builds again), a key is built
once, every copy is the caller's own, and the folders of dead processes are swept."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import stored_samples as SS
from processes import alive


def _file_store(at: Path, text: str) -> str:
    """A stand-in store: one file (stored_copy copies a file whole, as a DuckDB store)."""
    at.write_text(text)
    return text


def test_a_failed_build_passes_its_error_on_and_leaves_no_template(tmp_path: Path) -> None:
    """The build's own error reaches the caller; its half-made folder is gone; the next call for
    the key builds again and copies what that build made."""
    key = f"failing-{tmp_path.name}"
    folders_before = set(SS._folder().iterdir())

    def broken(at: Path) -> str:
        at.write_text("half")
        raise RuntimeError("the sample would not ingest")

    with pytest.raises(RuntimeError, match="the sample would not ingest"):
        SS.stored_copy(key, broken, tmp_path / "a")
    assert set(SS._folder().iterdir()) == folders_before
    assert key not in SS._templates and not (tmp_path / "a").exists()
    assert SS.stored_copy(key, lambda at: _file_store(at, "whole"), tmp_path / "b") == "whole"
    assert (tmp_path / "b").read_text() == "whole"


def test_a_build_that_writes_no_store_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="wrote no store"):
        SS.stored_copy(f"empty-{tmp_path.name}", lambda at: "nothing", tmp_path / "a")


def test_one_build_per_key_and_each_copy_its_own(tmp_path: Path) -> None:
    """Two calls, one build; each returns its own copy of what the build returned, and each
    destination its own copy of the store."""
    calls: list[Path] = []

    def build(at: Path) -> dict[str, list[int]]:
        calls.append(at)
        at.write_text("store")
        return {"runs": [1]}

    key = f"once-{tmp_path.name}"
    first = SS.stored_copy(key, build, tmp_path / "a")
    first["runs"].append(2)
    assert SS.stored_copy(key, build, tmp_path / "b") == {"runs": [1]}
    assert len(calls) == 1
    (tmp_path / "a").write_text("changed by a test")
    assert (tmp_path / "b").read_text() == "store" and calls[0].read_text() == "store"


def test_the_folders_of_dead_processes_are_swept(tmp_path: Path) -> None:
    """A folder named for a process that has exited goes when a process makes its own; a live
    process's folder stays."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    assert not alive(pid) and alive(os.getpid())
    tmp = Path(tempfile.gettempdir())  # where stored_samples keeps its folders
    left = tmp / f"{SS.PREFIX}{pid}-left"
    left.mkdir()
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import stored_samples as S; S._folder()"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert not left.exists()
    assert SS._folder().exists()  # this live process's own folder is kept
