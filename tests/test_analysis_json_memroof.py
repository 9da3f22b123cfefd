"""docs/cli-json.md's memory / roofline / modules table against the real sample's analyze JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths
from test_cli_analysis import documented, key_paths

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "memory"


@pytest.mark.slow
def test_memory_roofline_modules_keys_match_docs(con) -> None:
    rid = ingest_paths(con, [SAMPLE / "gpt_mem.pt.trace.json.gz"])[0].run_id
    doc = analyze_run(con, rid).to_json()
    keys, leaves = documented("analyze: memory, roofline and modules")
    got = key_paths({k: doc[k] for k in ("memory", "roofline", "modules")}, leaves)
    assert got - keys == set(), "output keys missing from docs/cli-json.md"
    assert keys - got == set(), "documented keys missing from the output"
    _, top_leaves = documented("analyze")
    assert {"memory", "roofline", "modules"} <= top_leaves  # broken down in their own section
