"""``runs.uploaded_by`` in the store: recorded on the runs an ingest creates (traces and NVML series
of their own), never moved by a series attached later or a duplicate upload; an older store gains
the column with its runs intact; the write-side check reads it afresh."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect

REPO = Path(__file__).resolve().parent.parent
BEFORE = REPO / "sample_traces" / "before"
SERIES = REPO / "sample_traces" / "nvml" / "synthetic_h100x2_100ms.nvml.jsonl"


def _owners(con: duckdb.DuckDBPyConnection) -> dict[str, str | None]:
    return dict(con.execute("SELECT run_id, uploaded_by FROM runs").fetchall())


@pytest.mark.slow
def test_an_ingest_records_its_uploader_on_the_runs_it_creates(tmp_path: Path) -> None:
    con = connect(tmp_path / "s.duckdb")
    trace, series = ingest_paths(con, [BEFORE, SERIES], uploaded_by="ana@example.com")
    assert trace.kind == "trace" and series.kind == "nvml"
    assert _owners(con) == {trace.run_id: "ana@example.com", series.run_id: "ana@example.com"}
    con.close()


@pytest.mark.slow
def test_no_uploader_is_null(tmp_path: Path) -> None:
    con = connect(tmp_path / "s.duckdb")
    (run,) = ingest_paths(con, [BEFORE])
    assert _owners(con) == {run.run_id: None}
    con.close()


@pytest.mark.slow
def test_a_later_series_or_duplicate_does_not_change_the_uploader(tmp_path: Path) -> None:
    con = connect(tmp_path / "s.duckdb")
    trace_only = tmp_path / "t"
    trace_only.mkdir()
    shutil.copy(next(BEFORE.glob("*.pt.trace.json.gz")), trace_only)
    (run,) = ingest_paths(con, [trace_only], uploaded_by="ana@example.com")
    ingest_paths(con, [next(BEFORE.glob("*.nvml.jsonl"))], attach=run.run_id, uploaded_by="bo")
    (dup,) = ingest_paths(con, [trace_only], uploaded_by="bo")
    assert dup.duplicate and dup.run_id == run.run_id
    assert _owners(con) == {run.run_id: "ana@example.com"}
    assert con.execute("SELECT count(*) FROM nvml_series").fetchone()[0] == 1  # it did attach
    con.close()


@pytest.mark.slow
def test_a_schema_2_store_gains_the_column_and_keeps_its_runs(tmp_path: Path) -> None:
    """A gpuscope 0.1-era DuckDB file (schema 2, no uploaded_by) at the store's location becomes a
    DuckLake store on first open: its runs kept (uploader unknown), new runs record theirs."""
    from gpuscope.store.schema import SCHEMA_VERSION

    db = tmp_path / "store"
    con = connect(f"duckdb:{db}")
    (run,) = ingest_paths(con, [BEFORE])
    con.execute("ALTER TABLE runs DROP COLUMN uploaded_by")  # the shape schema 2 had
    con.execute("UPDATE gpuscope_meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    con = connect(db)
    version = con.execute("SELECT value FROM gpuscope_meta WHERE key = 'schema_version'")
    assert version.fetchone()[0] == str(SCHEMA_VERSION) == "3"
    assert db.is_dir()  # the file became the lake's folder
    assert _owners(con) == {run.run_id: None}
    (new,) = ingest_paths(con, [SERIES], uploaded_by="ana@example.com")
    assert _owners(con)[new.run_id] == "ana@example.com"
    con.close()


@pytest.mark.slow
def test_the_write_side_check_reads_the_store(tmp_path: Path) -> None:
    from gpuscope.web.auth import refusal, viewer_from_claims

    con = connect(tmp_path / "s.duckdb")
    (mine,) = ingest_paths(con, [BEFORE], uploaded_by="ana@example.com")
    (theirs,) = ingest_paths(con, [SERIES], uploaded_by="bo@example.com")
    ana = viewer_from_claims({"email": "ana@example.com"}, frozenset())
    admin = viewer_from_claims({"email": "root@example.com"}, frozenset({"root@example.com"}))
    assert refusal(con, [mine.run_id], ana) is None
    assert refusal(con, [mine.run_id, theirs.run_id], ana) == (
        "Only bo@example.com, who uploaded this run, or an admin may change it."
    )
    assert refusal(con, [mine.run_id, theirs.run_id], admin) is None
    assert refusal(con, ["000000000000"], ana) is None  # gone already: nothing to refuse
    assert refusal(con, [theirs.run_id], None) is None  # sign-in off
    con.close()
