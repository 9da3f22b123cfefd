"""``gpuscope analyze RUN`` (text) and ``analyze RUN --rank LOWEST`` read the run's stored
``analyze`` document (gpuscope.analysis.report_part) instead of analysing its events: the text is
the one rendered from the analyses, the job's verdict rebuilt from its JSON
(``JobDiagnosis.from_json``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from clitools import run_cli
from gpuscope.analysis import rank_summary as RS
from gpuscope.analysis import report_part as RP
from gpuscope.analysis.job import JobDiagnosis, headline_rows, rank_rows
from gpuscope.cli.analyze import render
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect
from stored_samples import sample_copy, stored_copy
from test_report_part import CASES, Spy

pytestmark = pytest.mark.slow  # ingests and analyses of sample runs


#: The cases of sample runs, by their folder under sample_traces/.
SAMPLE_CASES = {"ddp (sample)": "ddp", "before (sample)": "before"}


def _stored(tmp_path: Path, case: str, *, text: bool = True) -> tuple[Path, str, str | None]:
    """The case ingested with its document stored (the ingest is the set-up: a copy of the one
    made for this process, tests/stored_samples.py): (the test's own store, run id, the text the
    analyses give, computed from the events of the test's store; None unless ``text``)."""
    db = tmp_path / "store"
    if case in SAMPLE_CASES:
        (run_id,) = sample_copy(
            db, SAMPLE_CASES[case], after_trace=RS.store_after_ingest_with_document
        )
    else:

        def build(at: Path) -> str:
            with connect(at) as con:
                return ingest_paths(
                    con, [CASES[case](at.parent)], after_trace=RS.store_after_ingest_with_document
                )[0].run_id

        run_id = stored_copy(f"test_report_part.CASES[{case!r}] (parts+document)", build, db)
    with connect(db) as con:
        assert RP.stored_text(con, run_id) is not None
        if not text:
            return db, run_id, None
        report, job = RP.analyze(con, run_id)
    return db, run_id, render(RP.analyze_json(report, job), job) + "\n"


@dataclass(frozen=True)
class Analysed:
    """A case's store (the module's own copy, :func:`_stored`), its run id, and what the analyses
    computed from that store's events give: the text ``analyze`` renders (``text``), the same
    with ``--all-ranks`` (``all_ranks``), and the job's verdict (``job``), all of one analysis."""

    db: Path
    run_id: str
    text: str
    all_ranks: str
    job: JobDiagnosis


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Analysed]:
    """case -> :class:`Analysed`, each case stored and analysed once for the module: ``analyze``
    of a stored run only reads its store, and the faces render one analysis (as the CLI's and the
    web's do), so the module's tests read one copy and one analysis of each case instead of one
    each. Both texts are rendered before any test reads the verdict."""
    done: dict[str, Analysed] = {}

    def get(case: str) -> Analysed:
        if case not in done:
            db, run_id, _ = _stored(tmp_path_factory.mktemp("analysed"), case, text=False)
            with connect(db) as con:
                report, job = RP.analyze(con, run_id)
            text = render(RP.analyze_json(report, job), job) + "\n"
            all_ranks = render(RP.analyze_json(report, job), job, all_ranks=True) + "\n"
            done[case] = Analysed(db, run_id, text, all_ranks, job)
        return done[case]

    return get


@pytest.mark.parametrize("case", ["two ranks by hand", "ddp (sample)", "before (sample)"])
def test_the_text_report_of_a_stored_run_is_the_computed_one_without_the_events(
    analysed: Callable[[str], Analysed],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    a = analysed(case)
    db, run_id = a.db, a.run_id
    spy = Spy(monkeypatch)
    code, out, err = run_cli(capsys, "analyze", run_id, "--db", str(db))
    assert code == 0, err
    assert out == a.text
    assert spy.read_events() == [], "the text of a stored run reads no event"
    code, all_ranks, err = run_cli(capsys, "analyze", run_id, "--all-ranks", "--db", str(db))
    assert code == 0, err
    assert all_ranks == a.all_ranks


def test_the_lowest_rank_asked_by_number_is_the_stored_default_view(
    analysed: Callable[[str], Analysed],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db, run_id = analysed("ddp (sample)").db, analysed("ddp (sample)").run_id
    code, default, _ = run_cli(capsys, "analyze", run_id, "--json", "--db", str(db))
    spy = Spy(monkeypatch)
    code, rank0, err = run_cli(capsys, "analyze", run_id, "--rank", "0", "--json", "--db", str(db))
    assert code == 0, err
    assert rank0 == default
    assert spy.read_events() == []
    # rank 1, the pace-setter the verdict analysed, is stored too: its row, as computed
    code, rank1, err = run_cli(capsys, "analyze", run_id, "--rank", "1", "--json", "--db", str(db))
    assert code == 0, err
    assert '"rank": 1' in rank1 and spy.read_events() == []
    monkeypatch.undo()
    with connect(db) as con:
        computed = json.dumps(
            RP.analyze_json(*RP.analyze(con, run_id, rank=1)), indent=2, default=str
        )
    assert rank1 == computed + "\n"


def test_the_verdict_rebuilt_from_its_json_is_the_verdict(
    analysed: Callable[[str], Analysed],
) -> None:
    """Every field the faces read: the JSON again, the headline rows, the rank rows (the DDP
    sample's verdict, computed from its events)."""
    a = analysed("ddp (sample)")
    run_id, job = a.run_id, a.job
    doc = job.to_json()
    back = JobDiagnosis.from_json(doc, run_id)
    assert back.to_json() == doc
    assert headline_rows(back) == headline_rows(job)
    assert rank_rows(back, 8) == rank_rows(job, 8)
    assert back.fixes and back.fixes[0].estimate == job.fixes[0].estimate
