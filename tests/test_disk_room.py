"""The suite's disk check (tests/disk_room.py) on the real disk: it names the folder and the
shortfall where the room asked for is not there, and passes where it is."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from disk_room import SUITE_NEEDS_BYTES, shortfall, written_folders

REPO = Path(__file__).resolve().parent.parent


def test_a_folder_without_the_room_is_named_with_what_it_has_and_needs(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    need = free + 2**40  # a TiB more than the disk has
    line = shortfall([tmp_path, tmp_path / "."], need)
    assert line is not None
    assert line.count(str(tmp_path)) == 1  # one filesystem, named once
    assert f"{free / 2**30:.1f} GiB free" in line
    assert f"needs {need / 2**30:.1f} GiB" in line


def test_room_enough_says_nothing(tmp_path: Path) -> None:
    assert shortfall([tmp_path], 1) is None


def test_the_suite_checks_the_temporary_folder_and_the_repository() -> None:
    folders = written_folders(REPO)
    assert REPO in folders and len(folders) == 2
    assert SUITE_NEEDS_BYTES >= 2**30


def test_pytest_stops_in_one_line_when_the_disk_is_short(tmp_path: Path) -> None:
    # a real pytest session with the suite's hook and the room it asks for set past any disk's:
    # it stops before running the module's one test, in one line, with a usage-error exit
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO / 'tests')!r})\n"
        "import disk_room\ndisk_room.SUITE_NEEDS_BYTES = 2**60\n"
        "from disk_room import pytest_sessionstart\n"
    )
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 4, out.stdout + out.stderr  # pytest.ExitCode.USAGE_ERROR
    said = "the test suite needs 1073741824.0 GiB there (free some space and run it again)"
    lines = [x for x in (out.stdout + out.stderr).splitlines() if "not enough disk" in x]
    assert lines and all(said in x for x in lines)  # pytest's banner and its exit line
    assert "passed" not in out.stdout
