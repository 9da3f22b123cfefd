"""The streaming splitter against a plain json.loads, on random traces, formatting and chunking."""

from __future__ import annotations

import json
import string
from pathlib import Path

import msgspec
import pytest
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.json_stream import TraceSplitter, escape_controls
from hypothesis import given, settings
from hypothesis import strategies as st

names = st.text(alphabet=string.ascii_letters + ' "\\/{}[],:\u00e9\u4e2d', max_size=12)
scalars = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    names,
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(names, c, max_size=3), max_leaves=6
)
event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "i", "s", "f", "M"]),
        "name": names,
        "ts": st.floats(0, 1e9, allow_nan=False),
        "args": st.dictionaries(names, values, max_size=3),
    }
)
meta = st.dictionaries(
    st.sampled_from(["schemaVersion", "deviceProperties", "distributedInfo", "x{y", "a]b"]),
    values,
    max_size=3,
)


def split(raw: bytes, tmp_path: Path, chunk: int, batch: int) -> tuple[list, dict]:
    chunks = (raw[i : i + chunk] for i in range(0, len(raw), chunk))
    s = TraceSplitter(tmp_path / "t.json", chunks, batch_bytes=batch)
    out = []
    for b in s.batches():
        out.extend(json.loads(b.data))
    return out, s.metadata


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(event, min_size=1, max_size=25),
    before=meta,
    after=meta,
    indent=st.sampled_from([None, 0, 1, 2]),
    chunk=st.integers(1, 300),
    batch=st.integers(1, 400),
)
def test_splitter_matches_json_loads(tmp_path_factory, events, before, after, indent, chunk, batch):
    tmp = tmp_path_factory.mktemp("s")
    doc = {**before, "traceEvents": events, **{k + "_after": v for k, v in after.items()}}
    raw = json.dumps(doc, indent=indent).encode()
    got, got_meta = split(raw, tmp, chunk, batch)
    assert got == json.loads(raw)["traceEvents"]
    expected_meta = {k: v for k, v in json.loads(raw).items() if k != "traceEvents"}
    assert got_meta == expected_meta


@pytest.mark.slow
@settings(max_examples=50, deadline=None)
@given(events=st.lists(event, min_size=1, max_size=10), chunk=st.integers(1, 64))
def test_bare_array_form(tmp_path_factory, events, chunk):
    raw = json.dumps(events).encode()
    got, got_meta = split(raw, tmp_path_factory.mktemp("a"), chunk, 64)
    assert got == events and got_meta == {}


@settings(max_examples=80, deadline=None)
@given(text=st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=30))
def test_escape_controls_makes_strict_json(text):
    # Raw control characters inside strings (the PyTorch bug) become escapes; the value is unchanged.
    raw = b'[{"name": "' + text.replace("\\", "\\\\").replace('"', '\\"').encode() + b'"}]'
    fixed = escape_controls(raw)
    assert msgspec.json.decode(fixed) == [{"name": text}]


def test_key_named_traceevents_inside_a_string_is_not_the_array(tmp_path):
    raw = b'{"note": "\\"traceEvents\\": [", "traceEvents": [{"ph": "X", "name": "a"}]}'
    got, m = split(raw, tmp_path, 5, 10)
    assert got == [{"ph": "X", "name": "a"}] and m == {"note": '"traceEvents": ['}


def test_nested_traceevents_key_is_not_the_array(tmp_path):
    raw = b'{"x": {"traceEvents": [1]}}'
    with pytest.raises(IngestError, match="no traceEvents array"):
        split(raw, tmp_path, 4, 8)
