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


def kineto_layout(doc: dict, events: list) -> bytes:
    """The layout torch's profiler writes: top-level keys, then each event as a block indented by
    2 (``\\n  },\\n  {`` between two events), the array closed by ``\\n  ]``."""
    items = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()]
    blocks = ["\n".join("  " + ln for ln in json.dumps(e, indent=2).splitlines()) for e in events]
    items.append('  "traceEvents": [\n' + ",\n".join(blocks) + "\n  ]")
    return ("{\n" + ",\n".join(items) + "\n}").encode()


def split_batches(raw: bytes, tmp_path: Path, chunk: int, batch: int) -> tuple[list, list, dict]:
    chunks = (raw[i : i + chunk] for i in range(0, len(raw), chunk))
    s = TraceSplitter(tmp_path / "t.json", chunks, batch_bytes=batch)
    batches = list(s.batches())
    events = [e for b in batches for e in json.loads(b.data, strict=False)]
    return events, batches, s.metadata


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(
    events=st.lists(event, min_size=1, max_size=30),
    before=meta,
    chunk=st.integers(1, 500),
    batch=st.integers(1, 600),
)
def test_kineto_layout_cut_at_separators_matches_json_loads(
    tmp_path_factory, events, before, chunk, batch
):
    raw = kineto_layout(before, events)
    got, batches, got_meta = split_batches(raw, tmp_path_factory.mktemp("k"), chunk, batch)
    assert got == json.loads(raw)["traceEvents"]
    assert got_meta == {k: v for k, v in json.loads(raw).items() if k != "traceEvents"}
    # every batch starts where its first event starts, and counts the events before it
    seen = 0
    for b in batches:
        assert raw[b.offset : b.offset + 1] == b"{"
        assert b.first_index == seen
        seen += len(json.loads(b.data, strict=False))


def test_the_fast_cut_is_taken_on_the_real_layout_and_gives_the_scans_events(tmp_path, monkeypatch):
    import gzip

    from gpuscope.ingest import json_stream

    raw = gzip.decompress(
        (Path(__file__).parent.parent / "sample_traces/ddp/ddp_rank0.pt.trace.json.gz").read_bytes()
    )
    cut = json_stream.TraceSplitter._fast_cut
    from_chunks: list[int] = []  # the chunks each fast batch was copied from, in one join

    def spy(self, parts, *a):  # type: ignore[no-untyped-def]
        got = cut(self, parts, *a)
        if got is not None:
            from_chunks.append(len(parts))
        return got

    monkeypatch.setattr(json_stream.TraceSplitter, "_fast_cut", spy)
    fast, batches, meta_fast = split_batches(raw, tmp_path, 1 << 16, 1 << 18)
    assert sum(b.strict is True for b in batches) >= len(batches) - 1  # all but the last
    # each fast batch straight from the chunks read for it (4 of 64 KiB and more), not from
    # a joined buffer
    assert len(from_chunks) >= len(batches) - 1 and min(from_chunks) >= 4, from_chunks
    monkeypatch.setattr(json_stream.TraceSplitter, "_fast_cut", lambda *a: None)
    scan, scan_batches, meta_scan = split_batches(raw, tmp_path, 1 << 16, 1 << 18)
    assert all(b.strict is None for b in scan_batches)
    assert fast == scan and meta_fast == meta_scan
    assert len(fast) == 24656  # the file's traceEvents, by json.loads


def test_a_separator_inside_a_string_with_raw_newlines_is_not_a_cut(tmp_path):
    # PyTorch has written raw control characters inside strings; the cut's syntax pass fails
    # there and the scan cuts instead
    evil = [{"ph": "X", "name": "a"}, {"ph": "X", "name": "PLACEHOLDER"}, {"ph": "X", "name": "c"}]
    raw = kineto_layout({"schemaVersion": 1}, evil).replace(b"PLACEHOLDER", b"x\n  },\n  {y")
    got, _, _ = split_batches(raw, tmp_path, 7, 40)
    assert [e["name"] for e in got] == ["a", "x\n  },\n  {y", "c"]


def test_the_fast_cut_refuses_an_element_that_is_not_an_object(tmp_path):
    # in Kineto's layout a number among the events passes a plain syntax pass; the cut's pass
    # types the elements as objects, so the batch holding it is left to the scan (and the parser,
    # which names it), never proven strict
    events = [{"ph": "X", "name": f"e{i}"} for i in range(12)]
    raw = kineto_layout({"schemaVersion": 1}, [*events[:6], 5, *events[6:]])
    got, batches, _ = split_batches(raw, tmp_path, 64, 250)
    assert got == json.loads(raw)["traceEvents"]
    holding = [b for b in batches if 5 in json.loads(b.data)]
    assert len(holding) == 1 and holding[0].strict is None
    assert any(b.strict is True for b in batches)  # the others went the fast way


def test_the_fast_cut_refuses_an_event_over_the_cap(tmp_path, monkeypatch):
    # batches (1,000 bytes) larger than the cap (300): the fast cut holds the whole event and must
    # measure it; the scan then names it
    monkeypatch.setenv("GPUSCOPE_MAX_EVENT_BYTES", "300")
    events = [{"ph": "X", "name": f"e{i}"} for i in range(24)]
    events[2]["name"] = "x" * 400
    raw = kineto_layout({"schemaVersion": 1}, events)
    with pytest.raises(IngestError, match=r"the event at byte \d+ is larger than 300 bytes"):
        split_batches(raw, tmp_path, 64, 1000)
    monkeypatch.setenv("GPUSCOPE_MAX_EVENT_BYTES", "600")  # the same file under a cap it fits
    got, batches, _ = split_batches(raw, tmp_path, 64, 1000)
    assert got == events and batches[0].strict is True  # cut by the fast path
