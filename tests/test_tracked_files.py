"""The tree a clone gets holds files, not links: sample_traces/validation/device_tree.sh swaps
the validation traces for links into a folder outside the repository while the device runs, and a
commit made meanwhile once stored 203 of them as links (readable only on the machine that made
them). Checked on the working tree, so a clean clone (CI) fails on any committed link."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".git", ".venv", "build", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}


def links_under(root: Path) -> list[str]:
    """Every symbolic link under ``root`` (relative paths), folders in :data:`SKIP` left out."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP and not x.endswith(".egg-info")]
        for name in [*dirs, *files]:
            p = Path(d) / name
            if p.is_symlink():
                out.append(str(p.relative_to(root)))
    return sorted(out)


def test_no_link_in_the_tree():
    assert links_under(ROOT) == []


def test_a_link_is_found(tmp_path):
    (tmp_path / "sample_traces" / "v01").mkdir(parents=True)
    (tmp_path / "real.json.gz").write_bytes(b"x")
    (tmp_path / "sample_traces" / "v01" / "t.json.gz").symlink_to(tmp_path / "real.json.gz")
    assert links_under(tmp_path) == ["sample_traces/v01/t.json.gz"]
