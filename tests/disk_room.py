"""The disk room the suite needs before it starts: one line naming the folder and the shortfall,
instead of hundreds of errors from stores, traces and browser profiles that could not be written."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest

SUITE_NEEDS_BYTES = 4 * 2**30
"""Free space (bytes) the whole suite needs on each filesystem it writes to: its temporary
folders (stores, traces, Parquet files, chromium profiles, pytest's last three temporary
folders, which it keeps) and the repository (the sample store). Measured over a clean-clone
`make test` (`df` every 10 s): the disk in use grew by 3.1 GB while pytest ran, its virtual
environment (1.7 GB) already made."""


def written_folders(repo: Path) -> list[Path]:
    """The folders the suite writes under: the temporary folder pytest and the tests use, and
    the repository."""
    return [Path(tempfile.gettempdir()), repo]


def shortfall(folders: Iterable[Path], need: int) -> str | None:
    """One line per filesystem among ``folders`` with less than ``need`` bytes free (None: room
    everywhere). Each filesystem is named once, by the first folder on it."""
    seen: set[int] = set()
    short = []
    for folder in folders:
        dev = os.stat(folder).st_dev
        if dev in seen:
            continue
        seen.add(dev)
        free = shutil.disk_usage(folder).free
        if free < need:
            short.append(
                f"{folder}: {free / 2**30:.1f} GiB free, the test suite needs "
                f"{need / 2**30:.1f} GiB there (free some space and run it again)"
            )
    return "; ".join(short) or None


def pytest_sessionstart(session: pytest.Session) -> None:
    """The controller stops at once, in one line, where a filesystem the suite writes to has
    less than :data:`SUITE_NEEDS_BYTES` free: a full disk otherwise errors every test that
    writes, and a browser crashes its worker."""
    if hasattr(session.config, "workerinput"):
        return
    short = shortfall(written_folders(Path(__file__).resolve().parent.parent), SUITE_NEEDS_BYTES)
    if short:
        pytest.exit(f"not enough disk: {short}", returncode=pytest.ExitCode.USAGE_ERROR)
