"""``gpuscope analyze --json`` of a few sample traces, byte for byte as recorded in
tests/golden/analyze/ (a change detector for refactors that must keep the output: the run facade,
issue 21). A deliberate change of the output regenerates the files:
``.venv/bin/python tests/test_analyze_golden.py`` (then read the diff before committing it)."""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden" / "analyze"
SAMPLES = REPO / "sample_traces"
#: name -> (the path analysed, extra arguments): one GPU, two ranks (each rank), the allocator's
#: memory, pageable copies, a trace with no GPU activity.
CASES = {
    "before": ("before", ()),
    "ddp_rank0": ("ddp", ()),
    "ddp_rank1": ("ddp", ("--rank", "1")),
    "memory": ("memory", ()),
    "pin_memory": ("fixes/pin_memory", ()),
    "cuda_only": ("wild/cuda_only", ()),
}


ON_FILE = {"ddp_rank0", "ddp_rank1"}


def analyze_json(db: Path | str, name: str) -> str:
    """``gpuscope analyze SAMPLE --json`` (in-process) into the store ``db``: its stdout."""
    from gpuscope.cli.main import main

    sample, extra = CASES[name]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["analyze", str(SAMPLES / sample), "--json", "--db", str(db), *extra])
    assert code in (0, None), f"{name}: exit {code}"
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_analyze_json_is_unchanged(tmp_path: Path, name: str) -> None:
    # The goldens are the lake's; the DDP pair is read from a single-process DuckDB file (less CPU),
    # so the same bytes also prove that store's analysis equal to the lake's.
    got = analyze_json(
        f"duckdb:{tmp_path / 'store.duckdb'}" if name in ON_FILE else tmp_path / "store", name
    )
    want = (GOLDEN / f"{name}.json").read_text()
    assert got == want, f"analyze --json of {name} changed (regenerate: see the module doc)"


if __name__ == "__main__":  # regenerate the golden files
    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            (GOLDEN / f"{case}.json").write_text(analyze_json(Path(tmp) / "store", case))
            print(f"wrote {GOLDEN / case}.json", file=sys.stderr)
