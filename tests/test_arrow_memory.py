"""An ingest makes the C library's allocator Arrow's pool (ingest/arrow_memory.py), unless the
user chose one. The pool is the process's, so each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DDP = ROOT / "sample_traces" / "ddp"

# Ingests the real DDP pair (two rank files: parse threads, parts threads, flush thread) into a
# new store, and prints Arrow's pool before and after, and the run's ranks.
PROBE = """
import json, sys
import pyarrow as pa
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
before = pa.default_memory_pool().backend_name
with connect(sys.argv[2]) as con:
    result = ingest_paths(con, [sys.argv[1]])[0]
after = pa.default_memory_pool().backend_name
print(json.dumps({"before": before, "after": after, "n_ranks": result.n_ranks}))
"""


def _probe(tmp_path: Path, env_pool: str | None) -> dict[str, object]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(DDP), str(tmp_path / "store")],
        capture_output=True, text=True, timeout=300, check=True, env=env,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_an_ingest_takes_the_system_allocator(tmp_path: Path) -> None:
    got = _probe(tmp_path, None)
    assert got["n_ranks"] == 2
    assert got["after"] == "system"


@pytest.mark.slow
def test_a_pool_the_user_chose_stays(tmp_path: Path) -> None:
    import pyarrow as pa

    # mimalloc where this pyarrow has it (Linux and macOS wheels), else jemalloc
    chosen = "mimalloc"
    try:
        pa.mimalloc_memory_pool()
    except NotImplementedError:
        chosen = "jemalloc"
        try:
            pa.jemalloc_memory_pool()
        except NotImplementedError:
            pytest.skip("this pyarrow has only the system allocator")
    got = _probe(tmp_path, chosen)
    assert got["n_ranks"] == 2
    assert got["before"] == chosen
    assert got["after"] == chosen
