"""A rank with more events than ``report.FORGET_BEFORE_PATTERNS_EVENTS`` lets its index's large
values go (the window's launches, its top-level spans) before the stages that do not read them
(the roofline, the modules, the phase patterns), so that they are not held together
(docs/benchmarks.md: the 10 GB rank's ``analyze`` peak); what the analysis says is unchanged."""

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


def test_a_big_rank_lets_its_large_values_go_before_the_later_stages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above the threshold: the top-level spans go before the roofline, every large value before
    the modules and again before the phase patterns (what a stage between asked for is computed
    again); below it, nothing goes; the document is the same."""
    (trace,) = sorted(SAMPLE.glob("*rank0*.pt.trace.json*"))
    held: list[tuple[object, list[str], list[str]]] = []  # (kinds, kept before, kept after)
    real = RP.forget_values

    def forget(con: object, kinds: object = None) -> None:
        def large() -> list[str]:
            indexes = (rank_index._SHARED.get(con) or {}).values()
            return sorted(str(k[0]) for ix in indexes for k in ix._large)

        before = large()
        real(con, kinds)  # type: ignore[arg-type]
        held.append((kinds, before, large()))

    with connect(":memory:") as con:
        run_id = ingest_paths(con, [trace])[0].run_id
        monkeypatch.setattr(RP, "forget_values", forget)
        small = _document(con, run_id)  # the sample's 48 k events: below the threshold
        assert held == []
        monkeypatch.setattr(RP, "FORGET_BEFORE_PATTERNS_EVENTS", 1000)
        big = _document(con, run_id)
    assert [kinds for kinds, _, _ in held] == [("toplevel",), None, None]
    (_, before, after), (_, before_modules, none), (_, _, none_either) = held
    assert "toplevel" in before and "launched" in before
    assert "toplevel" not in after and "launched" in after  # the roofline reads the launches
    assert before_modules and none == [] and none_either == []
    assert big == small
