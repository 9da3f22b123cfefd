"""A kept analysis facade (the web caches one per run and rank, shared by every session) answers
first without the critical path, then with it: the first report's fixes must stay as they were
returned. The estimates order the facade's list in place; a report made before them holds its
own copies (analysis/report.py, ``RunAnalysis.report``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis.report import RunAnalysis, report_of
from gpuscope.ingest.loader import ingest_paths

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

DDP = Path(__file__).resolve().parent.parent / "sample_traces" / "ddp"


def _fixes(rep) -> list[tuple[str, str, object]]:
    return [(r.id, r.title, r.estimate) for r in rep.recommendations]


@pytest.mark.slow
def test_a_report_without_the_path_keeps_its_fixes_after_the_estimates(con) -> None:
    """DDP sample, rank 0: the report without the path lists its fixes in registry order without
    estimates; after the same facade's report with the path (estimated, ordered by estimate), the
    first report still lists them as it did, and the second differs from it (so the check can
    fail: the estimates did reorder or fill the facade's list)."""
    [res] = ingest_paths(con, [DDP])
    a = RunAnalysis(con, res.run_id, 0)
    light = report_of(a, with_path=False)
    before = _fixes(light)
    assert before and all(e is None for _, _, e in before)
    full = report_of(a, with_path=True)
    assert _fixes(light) == before
    assert light.recommendations is not full.recommendations
    after = _fixes(full)
    assert after != before and all(e is not None for _, _, e in after)
    assert sorted(i for i, _, _ in after) == sorted(i for i, _, _ in before)
