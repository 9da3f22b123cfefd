"""The writer buffers events without their ``run_id`` (one value, written by each chunk's INSERT:
``batch_insert.BUFFERED_NAMES``); what a rank sink is handed of them (``rows_kept``) still has
the run's id, where the sink's columns ask for it, as the stored rows have."""

from __future__ import annotations

import pyarrow as pa
from gpuscope.ingest.batch_insert import BUFFERED_NAMES, EVENT_NAMES, rows_kept


def _buffered(n: int = 3) -> pa.Table:
    return pa.table({"rank": pa.array([0] * n, pa.int32()), "ts_ns": pa.array(range(n))})


def test_the_buffered_rows_are_events_but_the_run_id() -> None:
    assert EVENT_NAMES[0] == "run_id" and EVENT_NAMES[1:] == BUFFERED_NAMES


def test_kept_columns_get_the_run_id_where_asked() -> None:
    got = rows_kept(_buffered(), ["run_id", "ts_ns"], "abc")
    assert got.column_names == ["run_id", "ts_ns"]
    assert got.column("run_id").to_pylist() == ["abc"] * 3
    assert pa.types.is_dictionary(got.schema.field("run_id").type)
    assert rows_kept(_buffered(), ["ts_ns", "run_id"], "abc").column_names == ["ts_ns", "run_id"]
    assert rows_kept(_buffered(), ["ts_ns"], "abc").column_names == ["ts_ns"]


def test_every_column_kept_gets_the_run_id_first() -> None:
    got = rows_kept(_buffered(), None, "abc")
    assert got.column_names == ["run_id", "rank", "ts_ns"]
    assert got.column("run_id").to_pylist() == ["abc"] * 3


def test_stored_rows_keep_their_own_run_id() -> None:
    stored = _buffered().add_column(0, "run_id", pa.array(["xyz"] * 3))
    assert rows_kept(stored, None, "abc") is stored
    assert rows_kept(stored, ["run_id", "rank"], "abc").column("run_id").to_pylist() == ["abc"] * 3
