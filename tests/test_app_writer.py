"""The dashboard writes through a DuckDB instance of its own (app/web/db.py ``writer``): while an
upload is mid-transaction, the pages of other sessions keep reading the store, with their own
settings, and never see a part of the run being stored.

Before, the upload ran on a cursor of the readers' instance: its instance-wide ``SET threads = 1``
and 160 MB memory limit applied to every page of every session while it ran, and uploads on a
team store hung with the readers (issue 11).
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from synth import training_trace

TIMEOUT_S = 60


class Named(io.BytesIO):
    """An uploaded file as ``st.file_uploader`` gives it: a named binary stream."""

    def __init__(self, name: str, data: bytes) -> None:
        super().__init__(data)
        self.name = name


@pytest.fixture
def web_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """app/web/db.py on a fresh local store (a folder), its connections closed afterwards."""
    monkeypatch.delenv("GPUSCOPE_STORE", raising=False)
    monkeypatch.setenv("GPUSCOPE_DB", str(tmp_path / "store"))
    from gpuscope.web import db

    yield db
    db.drop(db.store())


def setting(cur: object, name: str) -> str:
    (value,) = cur.execute(f"SELECT current_setting('{name}')").fetchone()  # type: ignore[attr-defined]
    return str(value)


def test_pages_read_while_an_upload_is_mid_transaction(web_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.ingest.loader import INGEST_MEMORY_LIMIT
    from gpuscope.store import list_runs
    from gpuscope.web.uploads import ingest_uploads

    db = web_db
    reader = db.cursor()
    threads_before, memory_before = setting(reader, "threads"), setting(reader, "memory_limit")
    data = training_trace("after").write(tmp_path / "up.pt.trace.json").read_bytes()

    mid = threading.Event()  # the upload is inside its transaction
    release = threading.Event()  # the reader has looked
    outcome: dict[str, object] = {}

    def progress(_frac: float, text: str) -> None:
        # "Ingesting…" is reported by the loader from inside the run's transaction, after the
        # ingest's settings are made
        if text.startswith("Ingesting") and not mid.is_set():
            mid.set()
            release.wait(TIMEOUT_S)

    def upload() -> None:
        try:
            with db.writing() as w:
                outcome["results"] = ingest_uploads(
                    w, [Named("up.pt.trace.json", data)], name="mid", progress=progress
                )
        except BaseException as e:  # the test thread reports it below
            outcome["error"] = e

    t = threading.Thread(target=upload)
    t.start()
    try:
        assert mid.wait(TIMEOUT_S), "the upload never reached its transaction"

        # Another session's page, on a thread of its own, reads while the upload is mid-way.
        seen: dict[str, object] = {}

        def page() -> None:
            cur = db.cursor()
            seen["runs"] = list_runs(cur)
            seen["threads"] = setting(cur, "threads")
            seen["memory"] = setting(cur, "memory_limit")

        p = threading.Thread(target=page)
        p.start()
        p.join(TIMEOUT_S)
        assert not p.is_alive(), "a page's read hung behind the upload"
        assert seen["runs"] == []  # nothing of the run is visible before its commit
        assert (seen["threads"], seen["memory"]) == (threads_before, memory_before)
        assert seen["memory"] != INGEST_MEMORY_LIMIT
    finally:
        release.set()
        t.join(TIMEOUT_S)
    assert not t.is_alive(), "the upload did not finish"
    assert "error" not in outcome, outcome.get("error")
    (result,) = outcome["results"]  # type: ignore[misc]
    # Once committed, the readers see the whole run.
    (row,) = list_runs(db.cursor())
    assert row["run_id"] == result.run_id and row["name"] == "mid"
    assert setting(db.cursor(), "memory_limit") == memory_before


def test_the_writer_is_reopened_after_a_fault(web_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A write that faults drops both connections; the next write opens a fresh writer and works."""
    import duckdb
    from gpuscope.store.errors import StoreError

    db = web_db
    first = db.writer()
    with pytest.raises(StoreError) as err, db.writing():
        raise duckdb.IOException("could not write file: Input/output error")
    assert "Input/output error" in str(err.value) and "\n" not in str(err.value)
    second = db.writer()
    assert second is not first
    with db.writing() as w:
        w.execute("SELECT 1").fetchone()
    assert db.writer() is second


def test_the_reading_instance_works_within_its_memory_limit(web_db) -> None:  # type: ignore[no-untyped-def]
    """Every session's analyses share the reading instance: its DuckDB memory is bounded at
    ``READING_MEMORY_LIMIT`` (beyond it the working tables spill), not DuckDB's 80 % of RAM."""
    from gpuscope.store.connection import limit_bytes

    db = web_db
    got = limit_bytes(setting(db.cursor(), "memory_limit"))
    assert got is not None and got <= limit_bytes(db.READING_MEMORY_LIMIT)
    assert got >= 0.9 * limit_bytes(db.READING_MEMORY_LIMIT)  # type: ignore[operator]
