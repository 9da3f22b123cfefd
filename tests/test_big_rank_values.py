"""A rank with more events than ``report.FORGET_BEFORE_PATTERNS_EVENTS`` lets its index's large
values go (the window's launches, its top-level spans) before the phase patterns read theirs, so
that they are not held together (docs/benchmarks.md: the 10 GB rank's ``analyze`` peak); what the
analysis says is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.analysis import rank_index
from gpuscope.analysis import report as RP
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "before"


def _document(con: object, run_id: str) -> str:
    return json.dumps(RP.analyze_run(con, run_id).to_json(), sort_keys=True)  # type: ignore[arg-type]


def test_a_big_rank_lets_its_large_values_go_before_the_phase_patterns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (trace,) = sorted(SAMPLE.glob("*rank0*.pt.trace.json*"))
    held: list[tuple[int, int]] = []  # (large values before, after) at each call
    real = RP.forget_values

    def forget(con: object) -> None:
        def large() -> int:
            return sum(len(ix._large) for ix in (rank_index._SHARED.get(con) or {}).values())

        before = large()
        real(con)  # type: ignore[arg-type]
        held.append((before, large()))

    with connect(":memory:") as con:
        run_id = ingest_paths(con, [trace])[0].run_id
        monkeypatch.setattr(RP, "forget_values", forget)
        small = _document(con, run_id)  # the sample's 48 k events: below the threshold
        assert held == []
        monkeypatch.setattr(RP, "FORGET_BEFORE_PATTERNS_EVENTS", 1000)
        big = _document(con, run_id)
    assert len(held) == 1 and held[0][0] > 0 and held[0][1] == 0
    assert big == small
