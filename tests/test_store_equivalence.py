"""Analysis answers the same on the DuckLake as on an in-memory store.

The analysis tests (modules marked ``memory_store``) run on an in-memory store, 5x cheaper to open
and fill than a lake (tests/conftest.py, ``con``). This is what makes their answers the lake's:
the whole report of a hand-built two-rank job (every idle cause, a straggler, collectives) and of
a real sample, computed on each store from the same files, must be equal. Run the whole suite on
the lake with ``GPUSCOPE_TESTS_ON_LAKE=1``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
from test_analysis_idle import every_cause
from test_analysis_rank_index import rank_trace

REPO = Path(__file__).resolve().parents[1]


def job(folder: Path) -> Path:
    """Two ranks: rank 0 with every idle cause, rank 1 a shifted copy of another kernel mix."""
    folder.mkdir()
    every_cause().write(folder / "rank0.json")
    rank_trace(1, "relu_rank1", shift=7).write(folder / "rank1.json")
    return folder


def reports(store_spec: str, path: Path, ranks: int) -> list[dict]:
    """The first ``ranks`` ranks' whole reports (``to_json``), stored parts read and not."""
    con = connect(store_spec)
    try:
        [res] = ingest_paths(con, [path])
        all_ranks = [
            r
            for (r,) in con.execute(
                "SELECT rank FROM ranks WHERE run_id = ? ORDER BY 1", [res.run_id]
            ).fetchall()
        ]
        out = []
        for rank in all_ranks[:ranks]:
            for stored_parts in (True, False):
                rep = analyze_run(con, res.run_id, rank=rank, stored_parts=stored_parts)
                out.append(json.loads(json.dumps(rep.to_json(), default=str)))
        return out
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "source", ["hand-built job", "sample_traces/ddp"], ids=["hand_built_job", "ddp_sample"]
)
def test_analysis_on_the_lake_equals_analysis_in_memory(tmp_path: Path, source: str) -> None:
    path = job(tmp_path / "job") if source == "hand-built job" else REPO / source
    ranks = 2 if source == "hand-built job" else 1
    lake = reports(str(tmp_path / "lake"), path, ranks)
    memory = reports(":memory:", path, ranks)
    assert len(lake) == 2 * ranks and len(json.dumps(lake)) > 2000  # whole reports, not stubs
    assert lake == memory
