"""device_tree.sh: ``out`` swaps the tracked validation traces for links to copies outside the
tree (what the device counts against its 64 MiB shrinks to the links), ``back`` restores them from
git; the files read the same throughout. Run on a throw-away git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "sample_traces" / "validation" / "device_tree.sh"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def test_out_links_the_traces_and_back_restores_them(tmp_path: Path) -> None:
    repo, hold = tmp_path / "repo", tmp_path / "hold"
    case = repo / "sample_traces" / "validation" / "v01"
    case.mkdir(parents=True)
    trace = case / "v01_x_rank0.pt.trace.json.gz"
    trace.write_bytes(b"\x1f\x8b" + b"x" * 5000)
    (case / "timing.json").write_text("{}")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    run = ["bash", str(SCRIPT)]
    done = subprocess.run([*run, "out", str(hold)], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert trace.is_symlink() and trace.read_bytes() == b"\x1f\x8b" + b"x" * 5000
    assert not (case / "timing.json").is_symlink()  # only the traces
    assert (hold / trace.relative_to(repo)).is_file()
    assert "tracked, as it travels: 0.0 MiB" in done.stdout
    again = subprocess.run([*run, "out", str(hold)], cwd=repo, capture_output=True, text=True)
    assert again.returncode == 0 and trace.read_bytes() == b"\x1f\x8b" + b"x" * 5000
    back = subprocess.run([*run, "back"], cwd=repo, capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    assert not trace.is_symlink() and trace.read_bytes() == b"\x1f\x8b" + b"x" * 5000
    assert _git(repo, "status", "--short") == ""
    assert subprocess.run([*run, "sideways"], cwd=repo, capture_output=True).returncode == 2
