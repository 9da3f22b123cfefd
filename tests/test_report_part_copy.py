"""The run's ``analyze --json`` document computed on an in-memory copy of the ranks it reads
(gpuscope.analysis.report_part._on_copy): the same text as computed on the store, the ranks it
copies those the analyses read (the viewed rank, the pace-setter, the rank that waits most for it),
a rank the first guess missed copied and the document made again, and the store itself where the
ranks are too big to copy. On an in-memory store (the lake under ``GPUSCOPE_TESTS_ON_LAKE=1``):
the copy's subject is the document's text, the same on either.

A hand-made 4-rank job, 4 steps: each rank runs one GEMM of its own length then an all-reduce
that ends on every rank 200 µs after the last one (rank 2, 3,000 µs) arrives. Rank 2 sets the
pace; rank 3 (800 µs of GEMM) waits longest for it; rank 1 is read by no analysis of the document
(the lowest rank, 0, is the viewed one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from clitools import analysis_spec
from gpuscope.analysis import rank_summary as RS
from gpuscope.analysis import report_part as RP
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import Store, connect
from tracegen import ddp_job

REPO = Path(__file__).resolve().parent.parent
COMPUTE = (1000.0, 1500.0, 3000.0, 800.0)  # µs of GEMM per step, by rank
PERIOD = 3400.0


def write_job(d: Path, compute: tuple[float, ...] = COMPUTE) -> Path:
    """One rank file per entry of ``compute`` (module doc) in ``d``; returns ``d``."""
    return ddp_job(d, compute, steps=4, period=PERIOD)


def copies_made(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The ranks of every copy ``_on_copy`` makes while installed, in order."""
    made: list[list[int]] = []
    real = RP._copy

    def recording(con: Any, run_id: str, ranks: list[int]) -> Any:
        made.append(list(ranks))
        return real(con, run_id, ranks)

    monkeypatch.setattr(RP, "_copy", recording)
    return made


def ingested(con: Store, path: Path, hook: Any = RS.store_after_ingest) -> str:
    return str(ingest_paths(con, [path], after_trace=hook)[0].run_id)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, str]]:
    """The module doc's 4-rank job, written once (its files only read), and its documents as
    computed on the store (``_computed(copy=False)``, by rank) once for the module: a test ingests
    the files into a store of its own and checks what it computes (on a copy, or on the store
    again where that is its subject) against these. The same files give the same text in any
    store (the run id is the content's; no path or store in the document): computing the store's
    document again in each test (~0.8 CPU s) told nothing more."""
    tmp = tmp_path_factory.mktemp("job")
    folder = write_job(tmp / "job")
    with connect(analysis_spec(tmp)) as con:
        return folder, RP._computed(con, ingested(con, folder), copy=False)


CASES = {
    "4 ranks, rank 2 sets the pace, rank 3 waits": (None, [0, 2, 3]),  # the module's ``job``
    "one rank": (lambda tmp: write_job(tmp / "one", (1000.0,)), [0]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_document_on_a_copy_is_the_one_computed_on_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, job: tuple[Path, dict[int, str]]
) -> None:
    make, ranks = CASES[case]
    with connect(analysis_spec(tmp_path)) as con:
        if make is None:
            run_id = ingested(con, job[0])
            on_store = job[1]
        else:
            run_id = ingested(con, make(tmp_path))
            on_store = RP._computed(con, run_id, copy=False)
        made = copies_made(monkeypatch)
        on_copy = RP._computed(con, run_id)
    assert on_copy == on_store
    assert made == [ranks]  # guessed from the stored parts: one copy, of the ranks read


@pytest.mark.slow
def test_the_ddp_samples_document_on_a_copy_is_the_one_computed_on_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingested(con, REPO / "sample_traces" / "ddp")
        on_store = RP._computed(con, run_id, copy=False)
        made = copies_made(monkeypatch)
        assert RP._computed(con, run_id) == on_store
    assert made == [[0, 1]]


def test_a_rank_the_guess_missed_is_copied_and_the_document_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: tuple[Path, dict[int, str]]
) -> None:
    """Without the guess the first copy holds the viewed rank alone; its reports name the
    pace-setter and its waiting rank, so the copy is made again with them: the store's document.
    The copy of rank 0 alone gives another document (the job needs the other ranks' events)."""
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingested(con, job[0])
        on_store = job[1]
        with RP._copy(con, run_id, [0]) as on:
            alone = RP.text_of(RP.analyze_json(*RP.analyze(on, run_id)))
        assert alone != on_store
        monkeypatch.setattr(RP, "_straggler_guess", lambda *a: set())
        made = copies_made(monkeypatch)
        assert RP._computed(con, run_id) == on_store
    assert made == [[0], [0, 2, 3]]


def test_ranks_too_big_to_copy_are_analysed_on_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: tuple[Path, dict[int, str]]
) -> None:
    """Where the ranks read hold more than COPY_MAX_EVENTS events together, no copy is made (also
    when only the second try's ranks pass it): the document is computed on the store."""
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingested(con, job[0])
        on_store = job[1]
        sizes = dict(
            con.execute("SELECT rank, n_events FROM ranks WHERE run_id = ?", [run_id]).fetchall()
        )
        made = copies_made(monkeypatch)
        monkeypatch.setattr(RP, "COPY_MAX_EVENTS", sizes[0] + sizes[2] + sizes[3] - 1)
        assert RP._on_copy(con, run_id) is None
        assert RP._computed(con, run_id) == on_store
        assert made == []
        monkeypatch.setattr(RP, "_straggler_guess", lambda *a: set())  # rank 0 fits alone
        assert RP._on_copy(con, run_id) is None
        assert made == [[0]]


def test_a_run_without_every_ranks_part_is_analysed_on_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank without its cross-rank part (an ingest without the hook, a part of another version):
    the analyses compute it from that rank's events, which a copy would not hold: no copy."""
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingested(con, write_job(tmp_path / "job"), None)  # no parts
        made = copies_made(monkeypatch)
        assert RP._on_copy(con, run_id) is None
        RS.write_rank_summaries(con, run_id, RS.EVERY_RANK)
        con.execute("DELETE FROM rank_summaries WHERE run_id = ? AND rank = 1", [run_id])
        assert RP._on_copy(con, run_id) is None
        assert made == []
        RS.write_rank_summaries(con, run_id, RS.EVERY_RANK)
        assert RP._on_copy(con, run_id) == RP._computed(con, run_id, copy=False)
        assert made == [[0, 2, 3]]


def test_the_copy_is_analysed_under_the_memory_limits_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: tuple[Path, dict[int, str]]
) -> None:
    """Out of memory (planted) at the first of MEMORY_LIMITS on the copy: computed again at the
    next, on the copy; at the last it propagates. The store's own limit is never changed."""
    import duckdb

    tries: list[str] = []
    real = RP.analyze

    def analyze(con: Any, run_id: str, **kwargs: Any) -> Any:
        tries.append(str(con.execute("SELECT current_setting('memory_limit')").fetchone()[0]))
        if len(tries) == 1 or always:
            raise duckdb.OutOfMemoryException("Out of Memory Error: planted")
        return real(con, run_id, **kwargs)

    always = False
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingested(con, job[0])
        want = job[1]
        own = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        made = copies_made(monkeypatch)
        monkeypatch.setattr(RP, "analyze", analyze)
        assert RP._computed(con, run_id) == want
        assert len(tries) == 2 and tries[0] != tries[1] and made == [[0, 2, 3]]  # the first two
        assert own not in tries
        always = True
        with pytest.raises(duckdb.OutOfMemoryException, match="planted"):
            RP._computed(con, run_id)
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == own


def test_the_ingest_stores_the_document_made_on_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: tuple[Path, dict[int, str]]
) -> None:
    """``gpuscope ingest``'s hook computes the run's document on a copy of the ranks it reads
    (their events fit), and stores the text computed on the store; a run of a rank too big to
    copy keeps its document on the store (where its parts left their working tables)."""
    made = copies_made(monkeypatch)
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingested(con, job[0], RS.store_after_ingest_with_document)
        assert made == [[0, 2, 3]]
        want = job[1]  # the default view and rank 1's, by rank
        assert len(want) > 1 and RP.stored_text(con, run_id) == want[0]
        assert {r: RP.stored_text(con, run_id, r) for r in want} == want
    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)  # every rank too big to copy
    made.clear()
    with connect(analysis_spec(tmp_path, "big")) as con:
        run_id = ingested(
            con, write_job(tmp_path / "job2", (900.0, 2000.0)), RS.store_after_ingest_with_document
        )
        assert made == []
        want = RP._computed(con, run_id, copy=False)  # the default view and rank 1's, by rank
        assert len(want) > 1 and RP.stored_text(con, run_id) == want[0]
        assert {r: RP.stored_text(con, run_id, r) for r in want} == want
