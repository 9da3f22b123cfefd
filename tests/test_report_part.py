"""The run's ``analyze --json`` document, stored at its ingest (gpuscope.analysis.report_part): it
is exactly what the analysis computes from the events, ``analyze --json`` prints it without reading
one event, and a stored document of other code or of a changed run is never printed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from clitools import analysis_spec, analysis_store, run_cli
from gpuscope.analysis import rank_summary as RS
from gpuscope.analysis import report_part as RP
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import Store, connect, set_tags
from stored_samples import beside, stored_spec_copy
from tracegen import TraceBuilder, ddp_job, two_rank_job

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"


def one_rank(path: Path) -> Path:
    """Three steps: a GEMM launched late in each (host-bound), a sync, an allocator event."""
    t = TraceBuilder()
    for n in range(3):
        t0 = 1000.0 + 200.0 * n
        t.step(n, t0, 200.0)
        t.launch("volta_sgemm_128x64_nn", t0 + 60.0, t0 + 70.0, 50.0)
        t.launch("vectorized_elementwise_kernel", t0 + 75.0, t0 + 80.0, 20.0)
        t.runtime("cudaStreamSynchronize", t0 + 90.0, 60.0)
    return t.write(path)


def two_ranks(folder: Path) -> Path:
    """Two rank files of a world of two: rank 1's kernel is the longer one (the pace-setter)."""
    return two_rank_job(folder, (20.0, 80.0))


def two_ranks_stored(db: Path | str) -> str:
    """:func:`two_ranks` ingested with its document into ``db`` (clitools.analysis_store), for the
    tests of what is read from the stored run, not of the ingest: a copy of the store made once
    for the process (tests/stored_samples.py). Its run id."""

    def build(spec: Path | str) -> str:
        with connect(spec) as con:
            trace = two_ranks(beside(spec) / "job")
            return ingest_paths(con, [trace], after_trace=RS.store_after_ingest_with_document)[
                0
            ].run_id

    return stored_spec_copy("test_report_part.two_ranks (parts+document)", build, db)


def printed(doc: dict[str, Any]) -> str:
    """``analyze --json``'s stdout of ``doc`` (print_json)."""
    return json.dumps(doc, indent=2, default=str) + "\n"


def from_events(con: Store, run_id: str) -> str:
    """The document computed from the events now (what analyze printed before the part)."""
    return printed(RP.analyze_json(*RP.analyze(con, run_id)))


def cli_json(capsys: pytest.CaptureFixture[str], db: Path | str, run: str, *extra: str) -> str:
    code, out, err = run_cli(capsys, "analyze", run, "--json", "--db", str(db), *extra)
    assert code == 0, err
    return out


class Spy:
    """Every statement a store runs while it is installed (``Store.execute``/``executemany``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sql: list[str] = []
        execute, executemany = Store.execute, Store.executemany

        def spied(store: Store, sql: str, params: Any = None) -> Any:
            self.sql.append(sql)
            return execute(store, sql, params)

        def spied_many(store: Store, sql: str, params: Any) -> Any:
            self.sql.append(sql)
            return executemany(store, sql, params)

        monkeypatch.setattr(Store, "execute", spied)
        monkeypatch.setattr(Store, "executemany", spied_many)

    def read_events(self) -> list[str]:
        """The statements that name the ``events`` table (not ``n_events``, ``memory_events``)."""
        return [s for s in self.sql if re.search(r"(?<!\w)events\b", s)]


CASES = {
    "one rank by hand": lambda tmp: one_rank(tmp / "t.json"),
    "two ranks by hand": lambda tmp: two_ranks(tmp / "job"),
    "before (sample)": lambda tmp: SAMPLES / "before",
    "ddp (sample)": lambda tmp: SAMPLES / "ddp",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_stored_document_is_the_one_computed_from_the_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    # a DuckDB file (clitools.analysis_store; the lake under GPUSCOPE_TESTS_ON_LAKE=1): the stored
    # document and what analyze reads to print it are the subject, not the store that holds it
    db = analysis_store(tmp_path)
    with connect(db) as con:
        run_id = ingest_paths(
            con, [CASES[case](tmp_path)], after_trace=RS.store_after_ingest_with_document
        )[0].run_id
        text = RP.stored_text(con, run_id)
        assert text is not None, "the ingest stored the run's analyze document"
        want = from_events(con, run_id)
    assert RP.print_text(text) + "\n" == want
    spy = Spy(monkeypatch)
    assert cli_json(capsys, db, run_id) == want  # from the stored row
    assert spy.read_events() == [], "analyze --json of a stored run reads no event"
    assert len(spy.sql) <= 3, spy.sql  # the run's id, the document with its stamp: no analysis


@pytest.mark.slow
def test_the_rank_the_verdict_analysed_is_stored_as_computed_and_printed_without_the_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DDP job of two ranks whose rank 1 computes 1.6 x rank 0's GEMM before each all-reduce:
    its verdict analysed the pace-setter, rank 1, whose document (``analyze RUN --rank 1``) is
    stored beside the default view's, equal to the one computed from the events for that rank,
    and printed by ``analyze --rank 1 --json`` from its row; without the row, computed again."""
    db = analysis_store(tmp_path)  # a DuckDB file (the lake under GPUSCOPE_TESTS_ON_LAKE=1)
    with connect(db) as con:
        run_id = ingest_paths(
            con,
            [ddp_job(tmp_path / "job", (1000.0, 1600.0))],
            after_trace=RS.store_after_ingest_with_document,
        )[0].run_id
        stored = {
            int(r): RP.print_text(json.loads(d)["text"]) + "\n"
            for r, d in con.execute(
                "SELECT rank, doc FROM rank_summaries WHERE run_id = ? AND part = 'report'",
                [run_id],
            ).fetchall()
        }
        job = json.loads(RP.stored_text(con, run_id) or "{}")["job"]
        want = printed(RP.analyze_json(*RP.analyze(con, run_id, rank=1)))
    assert job["pace_setter"] == 1 and set(stored) == {0, 1}
    assert stored[1] == want and stored[0] != want
    spy = Spy(monkeypatch)
    assert cli_json(capsys, db, run_id, "--rank", "1") == want  # from the stored row
    assert spy.read_events() == [], "analyze --rank 1 --json of the pace-setter reads no event"
    code, text, err = run_cli(capsys, "analyze", run_id, "--rank", "1", "--db", str(db))
    assert code == 0, err
    assert spy.read_events() == []
    monkeypatch.undo()
    with connect(db) as con:  # without its row, the same text computed from the events
        con.execute(
            "DELETE FROM rank_summaries WHERE run_id = ? AND part = 'report' AND rank = 1",
            [run_id],
        )
    spy = Spy(monkeypatch)
    assert run_cli(capsys, "analyze", run_id, "--rank", "1", "--db", str(db))[:2] == (0, text)
    assert spy.read_events() != []


@pytest.mark.slow
def test_analyze_prints_the_stored_document_without_the_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The events deleted, ``analyze --json`` prints the same document (it read none of them);
    without the stored row it has only the events left, and says something else."""
    db = analysis_store(tmp_path)  # a DuckDB file (the lake under GPUSCOPE_TESTS_ON_LAKE=1)
    with connect(db) as con:
        run_id = ingest_paths(
            con, [one_rank(tmp_path / "t.json")], after_trace=RS.store_after_ingest_with_document
        )[0].run_id
    want = cli_json(capsys, db, run_id)
    with connect(db) as con:
        con.execute("DELETE FROM events WHERE run_id = ?", [run_id])
    assert cli_json(capsys, db, run_id) == want
    with connect(db) as con:
        con.execute("DELETE FROM rank_summaries WHERE run_id = ? AND part = 'report'", [run_id])
    code, out, _ = run_cli(capsys, "analyze", run_id, "--json", "--db", str(db))
    assert (code, out) != (0, want)


@pytest.mark.slow
def test_a_stale_document_is_computed_from_the_events_and_stored_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another analysis code (its fingerprint), a renamed or re-tagged run, an NVML series
    attached later: the stored document is not printed; ``store`` replaces it."""
    db = analysis_store(tmp_path)  # a DuckDB file (the lake under GPUSCOPE_TESTS_ON_LAKE=1)
    run_id = two_ranks_stored(db)
    with connect(db) as con:
        assert RP.stored_text(con, run_id) is not None
        # the code changed: its version is another one
        monkeypatch.setattr(RP, "version", lambda: 7)
        assert RP.stored_text(con, run_id) is None
        monkeypatch.undo()
        assert RP.stored_text(con, run_id) is not None
        # the run's row changed (tags are in the document's input)
        set_tags(con, run_id, ["nightly"])
        assert RP.stored_text(con, run_id) is None
        assert RP.store(con, run_id)
        text = RP.stored_text(con, run_id)
        assert text is not None and RP.print_text(text) + "\n" == from_events(con, run_id)
        assert con.execute(
            "SELECT count(*) FROM rank_summaries WHERE run_id = ? AND part = 'report'", [run_id]
        ).fetchone() == (1,)
    # an NVML series attached afterwards: the memory figures may read it
    nvml = SAMPLES / "ddp" / "ddp.nvml.jsonl"
    code, _, err = run_cli(capsys, "ingest", str(nvml), "--attach", run_id, "--db", str(db))
    assert code == 0, err
    with connect(db) as con:
        assert RP.stored_text(con, run_id) is None
        want = from_events(con, run_id)
    spy = Spy(monkeypatch)
    assert cli_json(capsys, db, run_id) == want
    assert spy.read_events(), "a stale document is computed from the events"


@pytest.mark.slow
def test_options_other_than_the_default_view_are_computed_from_the_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = analysis_store(tmp_path)  # a DuckDB file (the lake under GPUSCOPE_TESTS_ON_LAKE=1)
    run_id = two_ranks_stored(db)
    with connect(db) as con:
        want = printed(RP.analyze_json(*RP.analyze(con, run_id, rank=1, untraced_step_ms=None)))
    spy = Spy(monkeypatch)
    assert cli_json(capsys, db, run_id, "--rank", "1") == want
    assert spy.read_events()


@pytest.mark.slow
def test_maintain_analyses_stores_the_stale_documents_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade (another analysis code: another version) every stored document is stale;
    ``gpuscope maintain --analyses`` stores each again, once. On the lake: ``maintain`` maintains
    a lake (a DuckDB file has nothing to maintain)."""
    db = tmp_path / "store"
    with connect(db) as con:
        run_id = ingest_paths(
            con, [one_rank(tmp_path / "t.json")], after_trace=RS.store_after_ingest_with_document
        )[0].run_id
    monkeypatch.setattr(RP, "version", lambda: 7)
    with connect(db) as con:
        assert RP.stored_text(con, run_id) is None
    code, out, err = run_cli(capsys, "maintain", "--analyses", "--json", "--db", str(db))
    assert code == 0, err
    assert json.loads(out)["analyses"] == 1
    with connect(db) as con:
        text = RP.stored_text(con, run_id)
        assert text is not None and RP.print_text(text) + "\n" == from_events(con, run_id)
    code, out, err = run_cli(capsys, "maintain", "--analyses", "--json", "--db", str(db))
    assert (code, json.loads(out)["analyses"]) == (0, 0)  # nothing stale left


@pytest.mark.slow
def test_the_document_is_computed_in_bounded_memory_and_again_at_the_next_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The document is computed under MEMORY_LIMITS (the analysis's DuckDB working tables spill
    beyond the first), where DuckDB runs out of memory (planted) again at the next; the store's
    own limit is set back after. The document is the one computed from the events."""
    import duckdb

    def shown(limit: str) -> str:  # how DuckDB writes a limit back (set back: its own rounding)
        with duckdb.connect() as c:
            c.execute(f"SET memory_limit = '{limit}'")
            return str(c.execute("SELECT current_setting('memory_limit')").fetchone()[0])

    # the first at 100 MB: the 1 GB rank's ingest peaks at 0.48x the file there, 0.58x at 200 MB
    # (docs/benchmarks.md, "The ingest's analysis after its commit")
    assert RP.MEMORY_LIMITS == ("100MB", "200MB", "1GB")
    want = [shown(m) for m in RP.MEMORY_LIMITS]
    tries: list[str] = []
    real = RP.analyze

    def analyze(con: Any, run_id: str, **kwargs: Any) -> Any:
        tries.append(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        if len(tries) == 1:
            raise duckdb.OutOfMemoryException("Out of Memory Error: planted")
        return real(con, run_id, **kwargs)

    # in memory (clitools.analysis_spec; the lake under GPUSCOPE_TESTS_ON_LAKE=1): the limits
    # the document is computed under, and the connection's own set back, are the subject
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingest_paths(con, [two_ranks(tmp_path / "job")])[0].run_id  # no hook: no part
        assert RP.stored_text(con, run_id) is None
        own = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        monkeypatch.setattr(RP, "analyze", analyze)
        assert RP.store(con, run_id)
        assert tries == want[:2]  # out of memory at the first, computed at the second
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == own
        monkeypatch.undo()
        text = RP.stored_text(con, run_id)
        assert text is not None and RP.print_text(text) + "\n" == from_events(con, run_id)
        # out of memory at every limit: it propagates, nothing is stored, the limit is set back
        con.execute("DELETE FROM rank_summaries WHERE part = 'report'")
        tries.clear()
        monkeypatch.setattr(RP, "MEMORY_LIMITS", ("200MB",))
        monkeypatch.setattr(RP, "analyze", analyze)
        with pytest.raises(duckdb.OutOfMemoryException, match="planted"):
            RP.store(con, run_id)
        assert RP.stored_text(con, run_id) is None
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == own


def test_only_the_cli_ingest_stores_the_document_and_only_for_a_rank_that_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploads and the sample runs (the library's default hook) store no document: the Run page
    never reads it and it costs a full analysis. ``gpuscope ingest`` stores it, unless the run's
    lowest rank has more events than the ingest's bounded memory allows for it
    (``DOCUMENT_MAX_EVENTS``); ``analyze --json`` then prints the same document, from the events."""
    # in memory, then DuckDB files for the CLI (clitools.analysis_spec, analysis_store; the lake
    # under GPUSCOPE_TESTS_ON_LAKE=1): which ingest stores the document is the subject
    report = "SELECT count(*) FROM rank_summaries WHERE run_id = ? AND part = 'report'"
    with connect(analysis_spec(tmp_path, "up")) as con:
        run_id = ingest_paths(
            con, [one_rank(tmp_path / "up.json")], after_trace=RS.store_after_ingest
        )[0].run_id
        assert con.execute(report, [run_id]).fetchone() == (0,)
    (tmp_path / "cli").mkdir()  # the same trace again would be the run already stored
    db = analysis_store(tmp_path / "cli")
    trace = one_rank(tmp_path / "cli.json")
    code, out, err = run_cli(capsys, "ingest", str(trace), "--db", str(db))
    assert code == 0, err
    cli_run = out.split()[0]
    with connect(db) as con:
        assert con.execute(report, [cli_run]).fetchone() == (1,)
        n_events = con.execute("SELECT n_events FROM ranks WHERE run_id = ?", [cli_run]).fetchone()
    monkeypatch.setattr(RS, "DOCUMENT_MAX_EVENTS", int(n_events[0]) - 1)
    (tmp_path / "big").mkdir()
    db = analysis_store(tmp_path / "big")
    code, out, err = run_cli(capsys, "ingest", str(trace), "--db", str(db))
    assert code == 0, err
    big = out.split()[0]
    with connect(db) as con:
        assert con.execute(report, [big]).fetchone() == (0,)
        want = from_events(con, big)
    assert cli_json(capsys, db, big) == want


def test_the_document_of_a_rank_too_big_to_copy_reuses_the_working_tables_of_its_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank too big to copy gets its parts on the store once the ingest has committed, then the
    run's document: the document reads the working tables the parts built (each of the rank's
    GPU, host, runtime and gap tables is built once, not once more for the document: ~2 CPU s
    of the 1 GB ingest), stores what ``analyze`` computes from the events, and no working table
    is left on the connection afterwards."""
    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)  # the parts computed on the store
    spy = Spy(monkeypatch)
    # in memory (clitools.analysis_spec; the lake under GPUSCOPE_TESTS_ON_LAKE=1): which working
    # tables the parts and the document build on the connection is the subject
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingest_paths(
            con, [one_rank(tmp_path / "t.json")], after_trace=RS.store_after_ingest_with_document
        )[0].run_id
        table = re.compile(r"CREATE TEMP TABLE _ri\d+_[0-9a-f]{8}_([a-z_]+?)\d+_(\w+) ")
        built = [m.groups() for s in spy.sql if (m := table.match(s))]  # (kind, table) each
        left = con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name LIKE '\\_ri%' ESCAPE '\\'"
        ).fetchone()
        stored = RP.stored_text(con, run_id)
        assert stored is not None
        want = from_events(con, run_id)
    kinds = {k: built.count(k) for k in built}
    assert {"gpu", "host", "runtime", "gaps"} <= {kind for kind, _ in kinds}, kinds
    assert all(n == 1 for n in kinds.values()), kinds  # each table once: parts, then document
    assert left == (0,)
    assert RP.print_text(stored) + "\n" == want


def test_the_document_counts_the_flops_the_headline_part_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a rank too big to copy, the headline part (after the commit) and then the run's document
    ask for the same FLOPs per step of the same window: they are counted once (the rank index
    keeps them), and the document is still the one computed from the events."""
    from gpuscope.analysis import flops as F

    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)
    counted: list[int] = []
    count = F.flops_per_step

    def counting(*a: Any, **k: Any) -> Any:
        counted.append(1)
        return count(*a, **k)

    monkeypatch.setattr(F, "flops_per_step", counting)
    # in memory (clitools.analysis_spec; the lake under GPUSCOPE_TESTS_ON_LAKE=1): how often the
    # FLOPs are counted is the subject
    with connect(analysis_spec(tmp_path)) as con:
        run_id = ingest_paths(
            con, [one_rank(tmp_path / "t.json")], after_trace=RS.store_after_ingest_with_document
        )[0].run_id
        assert len(counted) == 1
        stored = RP.stored_text(con, run_id)
        assert stored is not None
        monkeypatch.setattr(F, "flops_per_step", count)
        assert RP.print_text(stored) + "\n" == from_events(con, run_id)


@pytest.mark.parametrize("where", ["parts", "document"])
def test_an_ingest_whose_summary_runs_out_of_memory_after_the_commit_is_stored_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """``gpuscope ingest`` of a rank too big to copy, where DuckDB runs out of memory (planted) in
    the parts computed after the commit, or in the run's document: the run is stored and whole,
    so the command prints its id and exits 0, with a note that names the run and the command
    that computes its summary; ``analyze`` then gives the document computed from the events."""
    import duckdb

    def planted(*a: Any, **k: Any) -> Any:
        raise duckdb.OutOfMemoryException("Out of Memory Error: planted\nmore lines")

    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)  # the parts computed after the commit
    monkeypatch.setattr(
        RS if where == "parts" else RP,
        "store_outside_transaction" if where == "parts" else "store",
        planted,
    )
    db = str(tmp_path / "s")
    code, out, err = run_cli(capsys, "ingest", "--db", db, str(one_rank(tmp_path / "t.json")))
    run_id = out.strip()
    assert code == 0 and len(run_id.split()) == 1, err
    assert err.strip() == (
        f"gpuscope: note: run {run_id} is stored, but its summary could not be computed after "
        f"the ingest (Out of Memory Error: planted): `gpuscope analyze {run_id}` computes it"
    )
    with connect(db) as con:
        assert RP.stored_text(con, run_id) is None
        want = from_events(con, run_id)
    monkeypatch.undo()
    assert cli_json(capsys, db, run_id) == want
