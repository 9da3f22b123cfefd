"""Traces whose metadata Kineto wrote with ``/"`` for an escaped quote (torch 2.11: its
sanitizeStrForJSON turns every backslash of a metadata value into '/'): ingested with the quote
mended; genuinely malformed JSON still refused in one line naming the file, the store unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clitools import cli_in_process
from gpuscope.ingest.json_stream import TraceSplitter, mend_slash_quotes
from gpuscope.store import RUN_TABLES, connect
from tracegen import BASE_NS, H100, TraceBuilder


def kineto_value(value: Any) -> str:
    """``value`` as Kineto writes a metadata value given to ``add_metadata_json(key,
    json.dumps(value))``: every backslash replaced by '/', newlines removed."""
    return json.dumps(value).replace("\\", "/").replace("\n", "")


def kineto_trace(metadata: dict[str, Any], *, trailer: str = "\n}\n") -> bytes:
    """A one-kernel rank in Kineto's layout (ChromeTraceLogger::handleTraceStart: the metadata
    one key per line before the events; the events one per block)."""
    t = TraceBuilder()
    t.step(1, 100.0, 50.0)
    t.launch("ampere_sgemm_128x64_nn", 102.0, 110.0, 20.0)
    events = t.to_dict()["traceEvents"]
    head = '\n  {\n    "schemaVersion": 1,'
    head += f'\n    "deviceProperties": [{json.dumps(H100)}\n    ],'
    for k, v in metadata.items():
        head += f'\n      "{k}": {kineto_value(v)},'
    head += f'\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {BASE_NS},\n  "traceEvents": ['
    body = ",".join("\n  " + json.dumps(e) for e in events)
    return (head + body + "\n]" + trailer).encode()


FIX = 'torch.compile(model, mode="reduce-overhead")'
METADATA = {
    "gpuscope.planted": {"planted": "launch bound", "fix": FIX, "expected_fix": "cuda_graphs"},
    "note": 'a 27" screen',  # one quote: the quotes before the events are odd in number
    "out_dir": "/tmp/traces/",  # a string that ends in '/': valid, kept as written
    "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2},
}


def counts(db: str) -> dict[str, int]:
    con = connect(db)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES}
    finally:
        con.close()


def test_the_corruption_is_kinetos_shape():
    raw = kineto_trace(METADATA)
    assert b'mode=/"reduce-overhead/")' in raw and b'"a 27/" screen"' in raw
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)


def test_cli_ingests_a_trace_with_kinetos_slash_quotes(tmp_path):
    db = str(tmp_path / "store.duckdb")
    p = tmp_path / "rank1.pt.trace.json"
    p.write_bytes(kineto_trace(METADATA))
    out = cli_in_process("ingest", str(p), "--db", db)
    assert out.returncode == 0, out.stderr
    con = connect(db)
    try:
        rank, meta = con.execute("SELECT rank, metadata FROM ranks").fetchone()
        n = con.execute("SELECT count(*) FROM events WHERE cat = 'kernel'").fetchone()[0]
    finally:
        con.close()
    meta = json.loads(meta)
    assert meta["gpuscope.planted"]["fix"] == FIX
    assert meta["note"] == 'a 27" screen' and meta["out_dir"] == "/tmp/traces/"
    assert rank == 1 and n == 1


def test_the_head_read_before_the_events_is_mended():
    """The rank is known from the metadata before the events (the splitter's ``prefix_meta``)."""
    splitter = TraceSplitter(Path("rank1.json"), iter([kineto_trace(METADATA)]))
    next(splitter.batches())
    head = splitter.prefix_meta
    assert head["distributedInfo"]["rank"] == 1 and head["note"] == 'a 27" screen'
    assert head["gpuscope.planted"]["fix"] == FIX and head["out_dir"] == "/tmp/traces/"


def test_cli_refuses_malformed_json_with_slash_quotes_in_one_line(tmp_path):
    db = str(tmp_path / "store.duckdb")
    good = tmp_path / "good.json"
    good.write_bytes(kineto_trace({"a": 1}))
    assert cli_in_process("ingest", str(good), "--db", db).returncode == 0
    before = counts(db)
    p = tmp_path / "broken.json"
    p.write_bytes(kineto_trace(METADATA, trailer=', "traceName": "x" xyz}'))
    out = cli_in_process("ingest", str(p), "--db", db)
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert f"{p}: malformed JSON outside the events array" in out.stderr
    assert counts(db) == before


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "/tmp/", "b": "x"}',
        '["/", "//", "/\\"/"]',
        '{"a": "say /\\"hi/\\""}',
    ],
)
def test_valid_json_is_not_changed(text):
    assert mend_slash_quotes(text, json.loads) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('{"a": "mode=/"x/")"}', {"a": 'mode="x")'}),
        ('["a /"b/", c"]', ['a "b", c']),
        ('{"a": "/tmp/", "b": "5/" screen"}', {"a": "/tmp/", "b": '5" screen'}),
        ('{"a": "x/", /"y"}', {"a": 'x", "y'}),
        ('{"a": "///"x"}', {"a": '//"x'}),  # Kineto's '//' may have been '\\': read as written
    ],
)
def test_kinetos_slash_quote_is_read_as_a_quote(text, want):
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert mend_slash_quotes(text, json.loads) == want


@pytest.mark.parametrize("text", ['{"a": "x/"y"', '{"a": "x/"y"} z', '{"a": 1,}', '{"a": /"x"}'])
def test_malformed_json_raises_its_first_error(text):
    with pytest.raises(json.JSONDecodeError) as first:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as err:
        mend_slash_quotes(text, json.loads)
    assert (err.value.msg, err.value.pos) == (first.value.msg, first.value.pos)


def test_mending_is_bounded():
    text = '{"a": "' + 'x/"' * 1000 + '"} z'
    with pytest.raises(json.JSONDecodeError):
        mend_slash_quotes(text, json.loads)


def test_mending_work_is_bounded_by_the_text_size(monkeypatch):
    import gpuscope.ingest.json_stream as js

    text = '{"a": "mode=/"x/")"}'  # two mends
    monkeypatch.setattr(js, "MEND_BUDGET_CHARS", 2 * len(text))
    assert mend_slash_quotes(text, json.loads) == {"a": 'mode="x")'}
    monkeypatch.setattr(js, "MEND_BUDGET_CHARS", 2 * len(text) - 1)
    with pytest.raises(json.JSONDecodeError):
        mend_slash_quotes(text, json.loads)
