"""A trace written on one line (or compact, an event per line, another indent) is cut into batches
the way Kineto's layout is: at a separator between two events, proven by a syntax pass or by the
batch's parse, never by the vectorised scan of the whole text (several times the CPU per byte).
The splitter's ``scanned_bytes`` counts what that scan reads; the stored rows are the same
whatever the layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuscope.ingest import json_stream, parse_pool, source
from gpuscope.ingest.json_stream import TraceSplitter
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.parse_pool import ParsePool
from gpuscope.store import RUN_TABLES
from tracegen import TraceBuilder

CHUNK = 4 << 10
BATCH = 16 << 10


def trace(n: int = 400) -> dict:
    t = TraceBuilder()
    for i in range(n):
        t.launch(f"kernel_{i % 7}", i * 10.0, i * 10.0 + 1, 1.0)
    return t.to_dict()


def one_event_per_line(doc: dict) -> bytes:
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    events = ",\n".join(json.dumps(e) for e in doc["traceEvents"])
    return (json.dumps(head)[:-1] + ', "traceEvents": [\n' + events + "\n]}").encode()


LAYOUTS = {
    "one line": lambda d: json.dumps(d).encode(),
    "compact": lambda d: json.dumps(d, separators=(",", ":")).encode(),
    "indent 1 (Kineto's separator)": lambda d: json.dumps(d, indent=1).encode(),
    "indent 4": lambda d: json.dumps(d, indent=4).encode(),
    "an event per line": one_event_per_line,
    "bare array, one line": lambda d: json.dumps(d["traceEvents"]).encode(),
}


def split(raw: bytes, tmp_path: Path, *, prove: bool) -> tuple[list, list, TraceSplitter]:
    chunks = (raw[i : i + CHUNK] for i in range(0, len(raw), CHUNK))
    s = TraceSplitter(tmp_path / "t.json", chunks, batch_bytes=BATCH, prove_cuts=prove)
    batches = list(s.batches())
    return [e for b in batches for e in json.loads(b.data)], batches, s


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("prove", [True, False])
def test_every_layout_is_cut_between_events_without_the_scan(tmp_path, layout, prove) -> None:
    doc = trace()
    raw = LAYOUTS[layout](doc)
    got, batches, s = split(raw, tmp_path, prove=prove)
    assert got == doc["traceEvents"]
    assert len(batches) >= 10, len(batches)
    # every batch but the last (what is left at the end of the file) is a fast cut
    assert all(b.strict is True for b in batches[:-1]), [b.strict for b in batches]
    assert all(raw[b.offset : b.offset + 1] == b"{" for b in batches)
    # the scan reads only the end of the array: a batch and a chunk at most, in any layout (a
    # layout the fast cut misses has the whole file scanned, and the rest rescanned per batch)
    assert s.scanned_bytes <= BATCH + CHUNK, (s.scanned_bytes, len(raw))


def test_one_line_and_indented_read_the_same_events_per_byte_of_scan(tmp_path) -> None:
    # the same events in both layouts: the scan reads no more of the one-line text than of the
    # indented one, though the batches of the one-line text hold more events each
    doc = trace(800)
    splits = {
        name: split(LAYOUTS[name](doc), tmp_path, prove=True)
        for name in ("one line", "indent 1 (Kineto's separator)")
    }
    (one_events, one_batches, one), (ind_events, ind_batches, ind) = splits.values()
    assert one_events == ind_events == doc["traceEvents"]
    assert len(one_batches) < len(ind_batches)  # fewer bytes per event on one line
    assert one.scanned_bytes <= BATCH + CHUNK and ind.scanned_bytes <= BATCH + CHUNK


def nested_and_quoted(n: int) -> dict:
    """Events whose args end with two objects in a list and whose names hold the one-line
    separator: the last separator of a batch often falls inside an event."""
    t = TraceBuilder()
    for i in range(n):
        t.cpu_op(f"op}}, {{{i}", i * 10.0, 5.0, **{"l": [{"a": i}, {"b": [{"c": 1}, {"d": 2}]}]})
    return t.to_dict()


@pytest.mark.parametrize("layout", ["one line", "compact"])
def test_a_separator_inside_an_event_is_not_a_cut(tmp_path, layout) -> None:
    doc = nested_and_quoted(300)
    raw = LAYOUTS[layout](doc)
    got, batches, s = split(raw, tmp_path, prove=True)
    assert got == doc["traceEvents"]
    # the splitter proves its cuts: a separator inside an event fails, an earlier one is tried
    assert all(b.strict is True for b in batches[:-1]), [b.strict for b in batches]
    assert s.scanned_bytes <= BATCH + CHUNK, (s.scanned_bytes, len(raw))


@pytest.fixture
def whole_file_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_stream, "BATCH_BYTES", BATCH)
    monkeypatch.setattr(
        parse_pool, "iter_json_bytes", lambda p: source.iter_json_bytes(p, chunk=1 << 20)
    )


@pytest.mark.parametrize("layout", ["one line", "compact"])
def test_the_pool_reads_a_one_line_file_with_separators_inside_events(
    tmp_path, whole_file_chunks, layout
) -> None:
    # the pool hands the fast cuts on unproven. The file read in one chunk, the first cut is at
    # its last separator, inside the last event: it does not parse, and the file is split again
    # from that batch, every cut proven. The events are json.loads's, in order
    doc = nested_and_quoted(300)
    path = tmp_path / "t.json"
    path.write_bytes(LAYOUTS[layout](doc))
    names: list[str] = []
    restarts: list[int] = []
    with ParsePool([path], 2) as pool:
        restart = pool._restart

        def spy(index: int, written: int) -> None:
            restarts.append(written)
            restart(index, written)

        pool._restart = spy  # type: ignore[method-assign]
        for pb in pool.batches(path):
            names += pb.parsed.table.column("name").to_pylist()
    assert names == [e["name"] for e in doc["traceEvents"]]
    assert restarts == [0]


# what tells two runs of the same events apart: the run's own row (name, times), the file's path,
# size and hash, when a summary was computed
OF_THE_FILE = {
    "runs": None,
    "ranks": ("path", "file_bytes", "json_bytes", "sha256"),
    "rank_summaries": ("computed_at",),
}


def stored(con, run_id: str) -> dict[str, list]:
    """Every row the run stored but what tells its file apart (:data:`OF_THE_FILE`)."""
    out = {}
    for table in RUN_TABLES:
        if table in OF_THE_FILE and OF_THE_FILE[table] is None:
            continue
        left_out = ", ".join(("run_id", *(OF_THE_FILE.get(table) or ())))
        df = con.execute(
            f"SELECT * EXCLUDE ({left_out}) FROM {table} WHERE run_id = ?", [run_id]
        ).df()
        out[table] = sorted(map(repr, df.itertuples(index=False)))
    return out


# in memory (tests/conftest.py): the subject is the rows the layouts make, which the lake keeps
# as memory does (tests/test_store_equivalence.py); GPUSCOPE_TESTS_ON_LAKE=1 runs it on the lake
@pytest.mark.memory_store
@pytest.mark.slow
def test_one_line_and_indented_files_store_the_same_rows(con, tmp_path) -> None:
    doc = trace(2000)
    rows = {}
    for name in ("one line", "indent 1 (Kineto's separator)", "an event per line"):
        folder = tmp_path / str(len(rows))
        folder.mkdir()
        path = folder / "t.json"
        path.write_bytes(LAYOUTS[name](doc))
        [r] = ingest_paths(con, [path])
        rows[name] = stored(con, r.run_id)
    first, *others = rows.values()
    assert sum(map(len, first.values())) > 8000
    assert all(other == first for other in others)
