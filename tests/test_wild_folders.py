"""Folders and odd files (issue 8): JSON beside the rank traces, spans of one process,
metadata-only traces."""

from __future__ import annotations

import gzip
import json

import pytest
from clitools import run_cli
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from tracegen import TraceBuilder


def counts(con) -> int:
    return con.execute("SELECT count(*) FROM runs").fetchone()[0]


def rank_trace(rank: int | None, world: int = 2) -> TraceBuilder:
    b = TraceBuilder(rank=rank, world_size=world if rank is not None else None)
    b.step(1, 0, 100)
    b.launch("k", 5, 10, 20)
    return b


@pytest.mark.parametrize("gz", [False, True])
def test_json_beside_rank_traces_is_skipped_with_a_note(con, tmp_path, gz):
    d = tmp_path / "job"
    d.mkdir()
    rank_trace(0).write(d / "rank0.trace.json.gz")
    rank_trace(1).write(d / "rank1.trace.json.gz")
    meta = json.dumps({"job": "resnet", "host": "node1", "args": {"lr": 0.1}}).encode()
    name = "rank0.meta.json" + (".gz" if gz else "")
    (d / name).write_bytes(gzip.compress(meta) if gz else meta)
    res = ingest_paths(con, [d])
    assert len(res) == 1 and res[0].n_ranks == 2
    assert res[0].warnings == [f"skipped {name}: not a trace (a JSON object without traceEvents)"]
    assert all(name not in p for p in res[0].paths)


def test_cli_prints_the_skip_note(capsys, tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    rank_trace(0).write(d / "rank0.trace.json")
    rank_trace(1).write(d / "rank1.trace.json")
    (d / "rank0.meta.json").write_text('{"job": 1}')
    code, _out, err = run_cli(capsys, "ingest", str(d), "--db", str(tmp_path / "s.duckdb"))
    assert code == 0
    assert "gpuscope: note: " in err and "skipped rank0.meta.json: not a trace" in err


def test_a_folder_of_non_traces_is_refused(con, tmp_path):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "a.json").write_text('{"x": 1}')
    with pytest.raises(IngestError, match=r"folder holds no trace files \(skipped a\.json"):
        ingest_paths(con, [d])
    assert counts(con) == 0


def test_a_single_non_trace_file_is_still_an_error(con, tmp_path):
    p = tmp_path / "meta.json"
    p.write_text('{"x": 1}')
    with pytest.raises(IngestError, match="no traceEvents"):
        ingest_paths(con, [p])


def spans(tmp_path, with_rank: bool):
    d = tmp_path / "tb"
    d.mkdir()
    for i, ms in enumerate((1763700000123, 1763700005456)):
        b = rank_trace(0 if with_rank else None, world=1)
        b.events[-3]["ts"] += i  # two different spans
        b.write(d / f"node1_4242.{ms}.pt.trace.json")
    return d


@pytest.mark.parametrize("with_rank", [False, True])
def test_spans_of_one_process_are_named_as_such(con, tmp_path, with_rank):
    d = spans(tmp_path, with_rank)
    with pytest.raises(IngestError) as err:
        ingest_paths(con, [d])
    msg = str(err.value)
    assert "they look like profiling spans of one process" in msg
    assert "node1_4242.<ms>.pt.trace.json" in msg and "--separate" in msg
    assert counts(con) == 0


def test_separate_makes_each_span_a_run(capsys, tmp_path):
    d = spans(tmp_path, False)
    db = str(tmp_path / "s.duckdb")
    code, out, err = run_cli(capsys, "ingest", str(d), "--db", db)
    assert code == 2 and "--separate" in err and "\n" not in err.strip()
    code, out, err = run_cli(capsys, "ingest", str(d), "--separate", "--db", db, "--json")
    assert code == 0, err
    runs = json.loads(out)
    assert len(runs) == 2 and {r["n_ranks"] for r in runs} == {1}
    # tensorboard_trace_handler names say host and start (ms): each span is named by both, to the
    # second, so the two spans of one process get two names (ingest/naming.py)
    assert sorted(r["name"] for r in runs) == [
        "node1 2025-11-21 04:40:00",
        "node1 2025-11-21 04:40:05",
    ]


@pytest.mark.parametrize(
    "extra",
    [
        [],
        [{"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 5, "s": "t"}],
        [{"ph": "s", "id": 3, "pid": 1, "tid": 1, "ts": 5, "cat": "ac2g", "name": "ac2g"}],
    ],
)
def test_metadata_only_trace_is_refused(con, tmp_path, extra):
    b = TraceBuilder()
    b.events = extra
    p = b.write(tmp_path / "meta_only.json")
    with pytest.raises(IngestError, match=r"no events with a duration \(ph X\)"):
        ingest_paths(con, [p])
    assert counts(con) == 0
