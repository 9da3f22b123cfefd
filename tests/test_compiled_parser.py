"""The compiled parser (ingest/_compiled_parser.c) against DuckDB's JSON reader, table for table.

The rule it must keep: for any batch, either it refuses (the ingest reads the batch with DuckDB),
or its table equals the one DuckDB's reader and ``TO_PARSED`` make of it, and DuckDB accepts
that batch. Checked on every sample trace, on hand-made batches whose values are worked out
here, on random events (hypothesis) and on damaged real batches.
"""

from __future__ import annotations

import glob
import itertools
import json
import random
import sys
import threading
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from gpuscope.ingest import batch_insert, compiled_parser, json_stream
from gpuscope.ingest.json_stream import Batch, TraceSplitter
from gpuscope.ingest.source import iter_json_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from fuzz_compiled_parser import damaged

SAMPLES = sorted(glob.glob("sample_traces/**/*.pt.trace.json*", recursive=True))
_REF = threading.local()

HEAD_ONLY = "sample_traces/validation/"
"""The validation set's traces (85 % of the samples' bytes: one recorder and one torch, model after
model) are read at their head in the corpus tests below (the DuckDB comparison: the first MiB;
the splitter's: the first :data:`HEAD_BATCHES`); every other sample (the wild, multi-GPU, fixes,
DDP and memory traces: each torch version and writer the project holds) whole. Measured over the
whole corpus (2.4 GB of JSON, 2026-11-28): of the 49 kinds of event it holds (keys, ``ph``,
``cat``, argument names and their value types), the heads and the other samples hold 48, and
every lexical form it holds (exponents, negative numbers, long fractions, ``true``, ``false``,
``null``, empty and nested lists, newlines between events); the 49th, a ``cpu_op`` whose shapes
are lists of empty lists, is :func:`test_lists_of_empty_lists_three_deep_as_duckdb_reads_them`'s.
The escapes and non-ASCII text no sample holds are the hand-made, property and fuzz tests'."""

HEAD_BATCHES = 2
"""Batches cut at the head of a :data:`HEAD_ONLY` trace in the splitter's test: a batch ends where
a chunk of the file (4 MiB) does, so the second batch starts across the first chunk's end."""


def _whole(path: str) -> bool:
    return not path.startswith(HEAD_ONLY)


@pytest.fixture(autouse=True, scope="module")
def _close_reference_parser():  # type: ignore[no-untyped-def]
    """The reference parser's scratch file goes with this module's tests: a test of another module
    run later in this process checks that an ingest leaves no scratch file of the process."""
    yield
    parser = getattr(_REF, "parser", None)
    if parser is not None:
        parser.close()
        _REF.parser = None


def duckdb_table(data: bytes) -> pa.Table | None:
    """What DuckDB's reader makes of the batch (the ingest's second reader); None: it refuses."""
    parser = getattr(_REF, "parser", None)
    if parser is None:
        parser = _REF.parser = batch_insert.BatchParser()
    parser.scratch.write_bytes(data)
    raw_sql = batch_insert.RAW_FROM_JSON.format(
        path=str(parser.scratch).replace("'", "''"),
        columns=batch_insert.COLUMNS,
        max_bytes=max(len(data) + 1024, 1 << 20),
    )
    try:
        return parser.db.execute(batch_insert.TO_PARSED.format(src=f"({raw_sql})")).to_arrow_table()
    except duckdb.Error:
        return None


def check_same(data: bytes) -> pa.Table | None:
    """The compiled table, after checking it against DuckDB's (None: refused)."""
    got = compiled_parser.parse(data)
    if got is None:
        return None
    want = duckdb_table(data)
    assert want is not None, f"the compiled parser read a batch DuckDB refuses: {data[:200]!r}"
    assert got.schema == want.schema
    if not got.equals(want):  # the first column that differs, as Python values, in the failure
        for name in got.column_names:
            assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
    assert got.equals(want)
    return got


def one(event: dict[str, Any] | str) -> dict[str, Any]:
    """The single row the compiled parser makes of one event (given as a dict or JSON text)."""
    text = event if isinstance(event, str) else json.dumps(event)
    table = check_same(f"[{text}]".encode())
    assert table is not None, f"refused: {text}"
    assert table.num_rows == 1
    return table.to_pylist()[0]


def test_the_extension_is_built_here() -> None:
    # Optional in the build (gpuscope installs without a C compiler), so a broken build would
    # otherwise only make the ingest slower.
    assert compiled_parser.AVAILABLE
    assert compiled_parser.enabled()


def test_every_sample_batch_is_read_by_the_compiled_parser_as_duckdb_reads_it() -> None:
    # each sample's batches (a validation trace's first: HEAD_ONLY), DuckDB's table and ours equal
    batches = heads = 0
    for f in SAMPLES:
        path = Path(f)
        if _whole(f):
            split = TraceSplitter(path, iter_json_bytes(path), 1 << 20).batches()
        else:  # the first MiB: read in 1 MiB chunks, a batch ends at the first chunk's end
            head = TraceSplitter(path, iter_json_bytes(path, chunk=1 << 20), 1 << 20).batches()
            split = itertools.islice(head, 1)
        for batch in split:
            table = check_same(batch.data)
            assert table is not None, f"{f}: batch at byte {batch.offset} refused"
            batches += 1
        heads += not _whole(f)
    assert batches >= len(SAMPLES) > 10
    assert 0 < heads < len(SAMPLES) and len(SAMPLES) - heads >= 40


def test_lists_of_empty_lists_three_deep_as_duckdb_reads_them() -> None:
    # a cpu_op's shapes as Kineto writes them for a list of tensors per input (one validation
    # trace's rank 1 holds them past its first MiB, where the corpus test reads no further)
    row = one(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::_foreach_mul_",
            "pid": 1,
            "tid": 2,
            "ts": 10.5,
            "dur": 3.25,
            "args": {
                "External id": 7,
                "Record function id": 0,
                "Ev Idx": 4,
                "Sequence number": 9,
                "Fwd thread id": 0,
                "Concrete Inputs": ["", ""],
                "Input type": ["TensorList", ""],
                "Input Dims": [[[]], [[], [2, 3]], []],
                "Input Strides": [[[]], [[], [3, 1]], []],
            },
        }
    )
    assert row["input_dims"] == "[[[]],[[],[2,3]],[]]"
    assert row["input_types"] == '["TensorList",""]'
    assert (row["ts_ns"], row["dur_ns"], row["external_id"]) == (10500, 3250, 7)


@pytest.mark.parametrize("depth", [1, 2, 3, 64, 65, 66])
def test_kept_json_nested_to_the_limit_as_duckdb_renders_it(depth: int) -> None:
    # Kept JSON is read in one loop counting the arrays open: a value inside more than 64 arrays
    # is refused (an empty array as the 65th is no value inside it).
    for inner, deepest in (("", depth - 1), ("1", depth), ('"a", [], [-2, 3]', depth + 1)):
        dims = "[" * depth + inner + "]" * depth
        text = '[{"args": {"Input Dims": ' + dims.replace(",", " ,\n ") + "}}]"
        table = check_same(text.encode())
        if deepest > 64:
            assert table is None, (depth, inner)
        else:
            assert table is not None, (depth, inner)
            assert table.column("input_dims").to_pylist() == [dims.replace(" ", "")]


def test_values_worked_out_by_hand() -> None:
    row = one(
        '{"ph": "X", "cat": "kernel", "name": "caf\\u00e9 \\ud83d\\ude00\\t\\"q\\"\\/", '
        '"pid": 0, "tid": "stream 7", "ts": 1.0005, "dur": 0.0005, "id": "12", '
        '"args": {"correlation": 9, "External id": -3, "device": 2, "stream": 7, '
        '"grid": [1, 2, 3], "block": [], "registers per thread": 40, "shared memory": 0, '
        '"bytes": 123456789012, "Input Dims": [[2, 3], [], [-1]], '
        '"Input type": ["float", "c10::Half", ""], "Concrete Inputs": ["", "1", "True"], '
        '"flops": 1e3, "Sequence number": 5, "Fwd thread id": 1, "Python id": 11, '
        '"Python parent id": 10, "name": "thread_name", "unknown": {"deep": [1, {"x": null}]}}}'
    )
    assert row["name"] == 'café 😀\t"q"/'
    assert (row["ph"], row["cat"]) == ("X", "kernel")
    assert (row["pid_num"], row["pid_label"]) == (0, None)
    assert (row["tid_num"], row["tid_label"]) == (None, "stream 7")
    # round(us * 1000), half away from zero
    assert (row["ts_ns"], row["dur_ns"]) == (1001, 1)  # 1.0005 * 1000 = 1000.5 exactly, in doubles
    assert row["flow_id"] == 12
    assert (row["correlation"], row["external_id"], row["device"], row["stream"]) == (9, -3, 2, 7)
    assert (row["grid"], row["block"]) == ([1, 2, 3], [])
    assert (row["registers"], row["shared_mem"], row["bytes"]) == (40, 0, 123456789012)
    assert row["input_dims"] == "[[2,3],[],[-1]]"
    assert row["input_types"] == '["float","c10::Half",""]'
    assert row["concrete_inputs"] == '["","1","True"]'
    assert row["flops"] == 1000.0
    assert (row["seq_num"], row["fwd_tid"], row["python_id"], row["python_parent_id"]) == (
        5,
        1,
        11,
        10,
    )
    assert row["meta_name"] == "thread_name"
    assert row["odd_args"] is None and row["run_id"] is None and row["name_id"] is None


def test_missing_and_null_values() -> None:
    row = one({"name": None, "args": None, "ts": None})
    assert (row["ph"], row["cat"]) == ("", "")  # never null
    assert row["name"] is None and row["ts_ns"] is None and row["correlation"] is None
    row = one({"args": {"Input Dims": None, "grid": None}})
    assert row["input_dims"] is None and row["grid"] is None
    assert one("{}")["ph"] == ""


@pytest.mark.parametrize(
    ("pid", "num", "label"),
    [
        (17, 17, None),
        (-0, 0, None),
        ("17", 17, None),
        ("-007", -7, None),
        ("Spans", None, "Spans"),
        ("e5", None, "e5"),
        ("nan", None, "nan"),
        ("", None, ""),
        ("Zz 9", None, "Zz 9"),
    ],
)
def test_pids_as_duckdb_casts_them(pid: Any, num: int | None, label: str | None) -> None:
    row = one({"pid": pid, "id": pid})
    assert (row["pid_num"], row["pid_label"]) == (num, label)
    assert row["flow_id"] == num


def test_rounding_of_timestamps() -> None:
    assert one({"ts": 0.0005})["ts_ns"] == 1  # 0.5 ns rounds away from zero
    assert one({"ts": -0.0005})["ts_ns"] == -1
    assert one({"ts": 4523579272795.525})["ts_ns"] == 4523579272795525
    # 16 digits: strtod; the product is the double nearest 1234567890123456000
    assert one({"ts": 1234567890123456})["ts_ns"] == int(1234567890123456 * 1000.0)
    assert compiled_parser.parse(b'[{"ts": 12345678901234567}]') is None  # beyond int64 ns
    # beyond 15 digits: strtod, correctly rounded like DuckDB's reader
    assert one({"ts": 1.2345678901234567})["ts_ns"] == 1235  # 1234.5678901234567
    assert one({"ts": 0.1e-2})["ts_ns"] == 1


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "a", "name": "b"}',  # DuckDB refuses a repeated key it reads
        '{"args": {"correlation": 1, "correlation": 1}}',
        '{"na\\u006de": "a"}',  # an escaped key
        '{"args": {"correlation": 1.0}}',  # DuckDB casts it; so it is left to DuckDB
        '{"args": {"correlation": "5"}}',
        '{"args": {"device": 4294967296}}',  # beyond INTEGER
        '{"args": {"Input Dims": [1.5]}}',  # DuckDB re-renders floats
        '{"args": {"Input Dims": [-0]}}',
        '{"args": {"Input Dims": ["a\\"b"]}}',  # and escapes
        '{"args": {"Input Dims": {"a": 1}}}',
        '{"args": {"grid": [1, null]}}',
        '{"args": []}',
        '{"name": 5}',  # DuckDB writes a number as text
        '{"ts": "5"}',
        '{"ts": 1e400}',
        '{"pid": 1.5}',
        '{"pid": " 12"}',
        '{"pid": "0x10"}',
        '{"name": "x\\ud800"}',  # a lone surrogate
        '{"name": "x\\udc00"}',
        '{"name": "tab\tinside"}',  # a raw control character
        '{"name": "a"},',  # a trailing comma
        '{"name": "a"',  # cut short
        '{"x": ' + "[" * 100 + "]" * 100 + "}",  # deeper than the parser goes
        "5",  # not an object
    ],
)
def test_refused_batches(text: str) -> None:
    assert compiled_parser.parse(f"[{text}]".encode()) is None


@pytest.mark.parametrize(
    "data",
    [b"", b"[", b"]", b"[]]", b"[] x", b"{}", b'[{"name": "\xff"}]', b'[{"name": "\xc0\xaf"}]'],
)
def test_refused_bytes(data: bytes) -> None:
    assert compiled_parser.parse(data) is None


def test_an_empty_batch() -> None:
    table = check_same(b" [ ] ")
    assert table is not None and table.num_rows == 0


# Random events: keys the ingest reads with values of every JSON type, unknown keys, and any
# whitespace between tokens. The compiled parser may refuse; what it reads must equal DuckDB's.
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["", "Spans", "12", "-3", "0x1", " 1", "nan", "e"]),
)
_value = st.recursive(
    _scalar,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=2)
    ),
    max_leaves=6,
)
_ARG_KEYS = [
    "correlation", "External id", "device", "stream", "grid", "block", "registers per thread",
    "shared memory", "bytes", "Input Dims", "Input type", "Concrete Inputs", "flops",
    "Sequence number", "Fwd thread id", "Python id", "Python parent id", "name", "other",
]  # fmt: skip
_TOP_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "other", "Name"]
_args = st.dictionaries(st.sampled_from(_ARG_KEYS), _value, max_size=6)
_event = st.dictionaries(st.sampled_from(_TOP_KEYS), _value, max_size=6) | st.builds(
    lambda e, a: {**e, "args": a},
    st.dictionaries(st.sampled_from(_TOP_KEYS), _value, max_size=4),
    _args,
)


_SPACES = ["", " ", "\n  ", "\t"]
#: the whitespace kinds an example uses: none at all (the first: hypothesis draws it in about a third
#: of the examples, as the simplest ones, and shrinks to it), all four, or one
_SPACINGS = [[""], *[_SPACES] * 12, [" "], ["\n  "], ["\t"]]


class _Layout:
    """How one example writes its JSON: which whitespace kinds it uses between tokens and how many
    of its strings it writes with \\u escapes (one in four, none or all), drawn by hypothesis; then,
    per token and string, a Random seeded by one draw chooses. A hypothesis draw per token and
    string (~130 us each, 150 an example) was three quarters of these tests' CPU, the events' own
    draws a fifth."""

    def __init__(self, data: Any) -> None:
        self.kinds = data.draw(st.sampled_from(_SPACINGS))
        self.escapes = data.draw(st.sampled_from([0.25, 0.0, 1.0]))
        self.rng = data.draw(st.randoms(use_true_random=True))

    def ws(self) -> str:
        return self.rng.choice(self.kinds)

    def escaped(self) -> bool:
        return self.rng.random() < self.escapes


def _dump(value: Any, layout: _Layout) -> str:
    """JSON text with random whitespace and random \\u escapes in strings."""
    ws = layout.ws
    if isinstance(value, dict):
        items = [f"{_dump(k, layout)}{ws()}:{ws()}{_dump(v, layout)}" for k, v in value.items()]
        return "{" + ws() + ("," + ws()).join(items) + ws() + "}"
    if isinstance(value, list):
        return "[" + ws() + ("," + ws()).join(_dump(v, layout) for v in value) + ws() + "]"
    return json.dumps(value, ensure_ascii=layout.escaped())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(_event, max_size=5), data=st.data())
def test_random_events_read_as_duckdb_reads_them_or_refused(
    events: list[dict[str, Any]], data: Any
) -> None:
    layout = _Layout(data)
    text = "[" + ",".join(_dump(e, layout) for e in events) + "]"
    check_same(text.encode())


_typed_event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "i", "M", "s", "f"]),
        "cat": st.text(max_size=8),
        "name": st.text(max_size=12),
        "pid": st.integers(-(10**17), 10**17) | st.sampled_from(["Spans", "Traces", ""]),
        "tid": st.integers(0, 10**6) | st.from_regex(r"[a-z][a-z 0-9]{0,8}", fullmatch=True),
        "ts": st.floats(-1e12, 1e12, allow_nan=False) | st.integers(0, 10**15),
        "dur": st.floats(0, 1e9) | st.integers(0, 10**9),
        "args": st.fixed_dictionaries(
            {},
            optional={
                "correlation": st.integers(-(10**18) + 1, 10**18 - 1),
                "device": st.integers(-(2**31), 2**31 - 1),
                "grid": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3),
                "Input Dims": st.lists(st.lists(st.integers(0, 10**6), max_size=3), max_size=3),
                "Input type": st.lists(
                    st.from_regex(r"[ -!#-\[\]-~]{0,8}", fullmatch=True), max_size=3
                ),
                "flops": st.floats(0, 1e18) | st.integers(0, 10**17),
                "name": st.text(max_size=8),
            },
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_typed_event, max_size=6))
def test_events_of_the_expected_types_are_never_refused(events: list[dict[str, Any]]) -> None:
    # What Kineto writes: the fast path must take it, or the ingest silently slows down.
    assert check_same(json.dumps(events).encode()) is not None


def _real_batch() -> bytes:
    path = Path(SAMPLES[0])
    return next(iter(TraceSplitter(path, iter_json_bytes(path), 64 << 10).batches())).data


def test_damaged_real_batches_are_refused_or_read_as_duckdb_reads_them() -> None:
    base = _real_batch()
    rng = random.Random(20)
    accepted = 0
    for _ in range(300):
        accepted += check_same(damaged(base, rng)) is not None
    assert accepted  # some damage leaves valid JSON (a digit changed...): those are compared too


def test_parses_in_several_threads_at_once() -> None:
    base = _real_batch()
    want = compiled_parser.parse(base)
    assert want is not None
    results: list[bool] = []

    def work() -> None:
        for _ in range(20):
            got = compiled_parser.parse(base)
            results.append(got is not None and got.equals(want))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 80


def test_the_batch_parser_takes_the_compiled_path_and_the_switch_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _real_batch()
    parser = batch_insert.BatchParser()
    try:
        parser.scratch.unlink()  # the DuckDB path writes the batch here; the compiled one does not
        fast = parser.parse(Path("x"), Batch(data, 0, 0, True))
        assert not parser.scratch.exists()
        monkeypatch.setenv(compiled_parser.ENV_SWITCH, "0")
        slow = parser.parse(Path("x"), Batch(data, 0, 0, True))
        assert parser.scratch.exists()
    finally:
        parser.close()
    assert fast.table.equals(slow.table)
    assert (fast.n_timed, fast.ts_min, fast.ts_max) == (slow.n_timed, slow.ts_min, slow.ts_max)
    assert not fast.fallback and fast.table.num_rows > 100


def test_json_stream_batches_are_what_the_compiled_parser_reads() -> None:
    # the splitter's batches start with '[' and hold whole events: the parser's input contract
    path = Path(SAMPLES[0])
    for batch in TraceSplitter(path, iter_json_bytes(path), json_stream.BATCH_BYTES).batches():
        assert batch.data.lstrip().startswith(b"[") and batch.data.rstrip().endswith(b"]")


@pytest.mark.parametrize("special", ['\\"', "\\\\", "é", "\\n", "😀", "\\u0001", "\\/"])
def test_special_characters_at_every_offset_of_a_long_string(special: str) -> None:
    # strings are scanned eight bytes at a time: a special byte in any lane must be seen
    for pos in range(20):
        text = "a" * pos + special + "b" * (19 - pos)
        row = one('{"name": "' + text + '"}')
        assert row["name"] == json.loads('"' + text + '"')


def test_strings_of_every_length_across_the_sixteen_byte_block() -> None:
    # A string whose closing quote is among its first sixteen bytes is classified and copied as
    # one block (string_fast), a longer one sixteen bytes at a time, one among the batch's last
    # sixteen bytes a byte at a time; rows of one column follow each other in one buffer.
    names = ["".join(chr(97 + (i + j) % 26) for j in range(i)) for i in range(41)]
    events = [{"ph": "X", "cat": n[::-1], "name": n} for n in names]
    table = check_same(json.dumps(events).encode())
    assert table is not None
    assert table.column("name").to_pylist() == names
    assert table.column("cat").to_pylist() == [n[::-1] for n in names]
    for n in names:
        assert one('{"name": "' + n + '"}')["name"] == n


def test_raw_control_and_invalid_bytes_at_every_offset_are_refused() -> None:
    for pos in range(20):
        for bad in (b"\x01", b"\x1f", b"\xff", b"\xc3"):  # \xc3: a UTF-8 lead byte cut short
            name = b"a" * pos + bad + b"b" * (19 - pos)
            assert compiled_parser.parse(b'[{"name": "' + name + b'"}]') is None, (pos, bad)


@pytest.mark.parametrize(
    "text",
    [
        "4523579272795.525",  # Kineto's: 16 digits, under 2^53: the one-division path
        "9007199254740.992",  # 2^53 exactly, as digits
        "9007199254740.993",  # just over 2^53: strtod
        "9007199254.7409935",
        "1234567890123.4567",
        "0.000000000000000000001",  # 10^-21
        "123456789e-30",  # beyond 10^22: strtod
        "1234567890.12345678901234",  # 24 significant digits: strtod
        "0.0000000000000000000012345678901234567890123",  # and after leading zeros
        "18446744073709551616e-10",  # 2^64 as digits: 0 in 64 bits, so read as text
        "-4523579272795.525",  # negative: rounded away from zero
        "-0.0025",  # -2.5 ns exactly: -3
        "0.0025",
        "-0.0",
        "4503599627370.4965",  # 2^52 ns and more: a whole double, rounded as it is
        "-4503599627370.4965",
    ],
)
def test_timestamps_round_as_doubles_do(text: str) -> None:
    ns = Decimal(float(text) * 1000)  # the double's exact value
    want = int(ns.to_integral_value(ROUND_HALF_UP))  # half away from zero
    assert one('{"ts": ' + text + "}")["ts_ns"] == want


# -- the splitter's proof of a cut: count_objects ---------------------------------------------


def _msgspec_count(data: bytes) -> int | None:
    import msgspec

    try:
        return len(json_stream._object_list().decode(data))
    except msgspec.DecodeError:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(_event | _value, max_size=5), data=st.data())
def test_count_objects_proves_only_what_msgspec_proves(items: list[Any], data: Any) -> None:
    layout = _Layout(data)
    text = ("[" + ",".join(_dump(v, layout) for v in items) + "]").encode()
    got = compiled_parser.count_objects(text)
    want = _msgspec_count(text)
    assert got is None or got == want
    if all(isinstance(v, dict) for v in items):  # a strict array of objects: never refused
        assert got == want == len(items)


def test_count_objects_on_damaged_batches() -> None:
    base = _real_batch()
    rng = random.Random(33)
    proved = 0
    for _ in range(300):
        d = damaged(base, rng)
        got = compiled_parser.count_objects(d)
        assert got is None or got == _msgspec_count(d)
        proved += got is not None
    assert proved  # some damage leaves a valid array: those counts are compared too
    assert compiled_parser.count_objects(b"[" + b"[" * 70 + b"]" * 70 + b"]") is None  # deep


def test_the_splitter_cuts_the_same_batches_with_and_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cuts(path: Path, chunks: list[bytes]) -> list[tuple[int, int, bool | None, int]]:
        sp = TraceSplitter(path, iter(chunks), 256 << 10)
        out = [(b.offset, b.first_index, b.strict, len(b.data)) for b in sp.batches()]
        return [*out, (-1, sp.n_events, None, 0)]

    def head(path: Path, chunks: list[bytes]) -> list[tuple[int, int, bool | None, int]]:
        sp = TraceSplitter(path, iter(chunks), 256 << 10)
        got = itertools.islice(sp.batches(), HEAD_BATCHES)
        return [(b.offset, b.first_index, b.strict, len(b.data)) for b in got]

    fast: list[tuple[int, int, bool | None, int]] = []
    slow: list[tuple[int, int, bool | None, int]] = []
    past_a_chunk = 0  # head-only traces whose batches reach past their first 4 MiB chunk
    for f in SAMPLES:  # each file inflated once, its chunks split with the switch on, then off
        path = Path(f)
        whole = _whole(f)
        # a HEAD_ONLY trace: its first three chunks (its first HEAD_BATCHES lie in them)
        chunks = list(
            iter_json_bytes(path) if whole else itertools.islice(iter_json_bytes(path), 3)
        )
        split = cuts if whole else head
        got = split(path, chunks)
        fast += got
        past_a_chunk += not whole and any(c[0] + c[3] > 4 << 20 for c in got)
        with monkeypatch.context() as off:
            off.setenv(compiled_parser.ENV_SWITCH, "0")
            assert compiled_parser.count_objects(b"[{}]") is None  # off: msgspec proves the cuts
            slow += split(path, chunks)
    assert slow == fast
    assert sum(1 for c in fast if c[2]) > 20  # batches proven strict by the fast cut
    assert past_a_chunk > 20


@given(st.lists(st.binary(max_size=40), max_size=6), st.data())
def test_concat_is_bytes_join_for_bytes_and_views(parts: list[bytes], data: Any) -> None:
    # each part as bytes, or as a memoryview of a slice of a larger buffer (how the splitter
    # hands the file's chunks over)
    held: list[bytes | memoryview] = []
    for p in parts:
        if data.draw(st.booleans()):
            pad = data.draw(st.binary(max_size=5))
            held.append(memoryview(pad + p + pad)[len(pad) : len(pad) + len(p)])
        else:
            held.append(p)
    got = compiled_parser.concat(tuple(held))
    assert type(got) is bytes
    assert got == b"".join(parts)


def test_concat_refuses_what_is_not_a_tuple_of_buffers() -> None:
    from gpuscope.ingest import _compiled_parser  # type: ignore[attr-defined]

    with pytest.raises(TypeError):
        _compiled_parser.concat([b"a", b"b"])  # a list: the caller passes a tuple
    with pytest.raises(TypeError):
        _compiled_parser.concat((b"a", "b"))  # a str has no buffer
    assert _compiled_parser.concat(()) == b""


@given(
    st.lists(
        st.sampled_from(
            [
                '{"ph": "X", "name": "[memory]", "ts": 1}',
                '{"ph": "i", "name": "[memory]", "ts": 2, "args": {"Bytes": 512}}',
                '{"ph": "X", "name": "aten::mm", "ts": 3, "dur": 4}',
                '{"ph": "X", "name": "[memory", "ts": 5}',
                '{"ph": "X", "name": "memory]", "ts": 6}',
                '{"ph": "X", "name": "k", "ts": 7, "args": {"note": "[memory]"}}',
            ]
        ),
        max_size=6,
    )
)
def test_the_memory_mark_is_looked_for_as_the_bytes_are(events: list[str]) -> None:
    data = ("[" + ", ".join(events) + "]").encode()
    scanned = compiled_parser.scan(data)
    assert scanned is not None
    assert scanned.memory_mark == (batch_insert.MEMORY_MARK in data)
    parsed = batch_insert.Parsed(scanned.table, 0, None, None, memory_mark=scanned.memory_mark)
    assert parsed.memory_data(data) == (data if batch_insert.MEMORY_MARK in data else None)


_MARK_FORMS = [
    ('{"name": "[memory]"}', True),  # the whole text (near the batch's end: string())
    ('{"[memory]": 1}', True),  # a key
    ('{"args": {"note": "[memory]"}}', True),  # a value skipped
    ('{"args": {"Input type": ["[memory]"]}}', True),  # a string of kept JSON
    ('{"name": "a\\"[memory]"}', True),  # after an escaped quote
    ('{"name": "' + "x" * 20 + '\\"[memory]"}', True),  # past the first sixteen bytes
    ('{"name": "' + "x" * 20 + '[memory]"}', False),
    ('{"name": "[memory]' + "y" * 20 + '"}', False),
    ('{"name": "x[memory]"}', False),
    ('{"name": "\\\\[memory]"}', False),  # an escaped backslash before it, no quote
    ('{"name": "[memory]x"}', False),
    ('{"name": "[memor]"}', False),
    ('{"name": "\\u005bmemory]"}', False),  # the same text read, other bytes
]


@pytest.mark.parametrize(("event", "marked"), _MARK_FORMS)
def test_the_memory_mark_in_every_kind_of_string(event: str, marked: bool) -> None:
    # The parser looks for the mark in the strings it reads (not in a pass over the text): each
    # form, alone (its string among the batch's last sixteen bytes), first and last of several.
    other = '{"ph": "X", "name": "' + "z" * 40 + '"}'
    for text in (f"[{event}]", f"[{event}, {other}]", f"[{other},{event}]"):
        data = text.encode()
        assert (batch_insert.MEMORY_MARK in data) == marked
        scanned = compiled_parser.scan(data)
        assert scanned is not None, text
        assert scanned.memory_mark == marked, text


def test_the_memory_mark_of_a_parse_that_did_not_look_is_read_from_the_text() -> None:
    table = compiled_parser.parse(b"[]")
    assert table is not None
    marked, plain = b'[{"name": "[memory]"}]', b'[{"name": "k"}]'
    assert batch_insert.Parsed(table, 0, None, None).memory_data(marked) == marked
    assert batch_insert.Parsed(table, 0, None, None).memory_data(plain) is None


def test_values_under_nulls_are_zeros_after_a_batch_that_filled_them() -> None:
    # Each thread keeps its column buffers from one batch to the next, zeroed as rows come: a
    # batch's null slots hold 0 (as a new buffer's), not the values of the batch before, also
    # after a refused batch that stopped halfway.
    import numpy as np

    full = {"ph": "X", "ts": 5, "dur": 7, "args": {"correlation": 11, "device": 3, "flops": 2.5}}
    full_text = json.dumps([full] * 3000).encode()
    assert compiled_parser.scan(full_text) is not None
    assert compiled_parser.scan(full_text[:-20]) is None
    some = {"ph": "X", "ts": 1, "args": {"correlation": 2, "device": 1, "flops": 1.5}}
    table = check_same(json.dumps([some, {"name": "n"}] * 700).encode())
    assert table is not None
    for name, dtype in [("ts_ns", np.int64), ("correlation", np.int64), ("device", np.int32),
                        ("flops", np.float64), ("dur_ns", np.int64)]:  # fmt: skip
        column = table.column(name).chunk(0)
        values = np.frombuffer(column.buffers()[1], dtype=dtype)[: len(column)]
        assert not values[1::2].any(), name  # the rows without it
        if name != "dur_ns":
            assert values[0::2].all(), name


def test_a_block_kept_from_a_dropped_batch_is_written_over_right() -> None:
    # A batch's columns lie in one block; a dropped batch's mapped block (256 KB and more) is kept
    # for a later batch, whose run of zeros (the columns without a value) is zeroed again there.
    # A's block (~1.6 MB, 2 MiB mapped) fits B (~1.2 MB), whose zeros lie where A's values were.
    ids = ("correlation", "External id", "stream", "bytes", "Sequence number", "Fwd thread id")
    full = {"ph": "X", "ts": 1, "dur": 2, "args": dict.fromkeys(ids, 5)}
    sparse = {"ph": "X", "name": "n" * 30, "ts": 1, "args": dict.fromkeys(ids)}
    for _ in range(3):
        scanned = compiled_parser.scan(json.dumps([full] * 20_000).encode())
        assert scanned is not None and scanned.table.column("correlation").null_count == 0
        del scanned
        table = check_same(json.dumps([sparse] * 20_000).encode())
        assert table is not None
        assert table.column("correlation").null_count == 20_000
        assert table.column("external_id").null_count == 20_000


def test_a_batch_past_the_kept_buffer_size_frees_them_and_the_next_reads_right() -> None:
    # A thread's buffers grown past 64 MB (one huge string here) are freed after its batch.
    huge = "x" * (40 << 20)
    table = compiled_parser.parse(b'[{"name": "' + huge.encode() + b'"}]')
    assert table is not None and table.column("name")[0].as_py() == huge
    del table
    assert one({"ph": "X", "name": "after", "ts": 1})["name"] == "after"


def _rss_mb() -> float:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def test_the_columns_handed_over_without_a_copy_live_as_long_as_their_table() -> None:
    """The C code's column buffers become Arrow's without a copy, a batch's in one block owned by
    a capsule that frees it (or keeps it for a later batch, the last four): the table stays whole
    after the scan's result is gone and the memory it freed is written over (no buffer freed
    early), and a batch scanned again and again, its tables dropped, does not grow the process
    (no block left behind)."""
    import gc

    path = Path("sample_traces/ddp/ddp_rank0.pt.trace.json.gz")
    splitter = TraceSplitter(path, iter_json_bytes(path), 16 << 20)
    batch = max(splitter.batches(), key=lambda b: len(b.data))
    assert len(batch.data) > 4 << 20  # columns of MBs: buffers the C library maps on their own
    want = duckdb_table(batch.data)
    scanned = compiled_parser.scan(batch.data)
    assert scanned is not None and want is not None
    table = scanned.table
    sizes = [b.size for col in table.columns for b in col.chunk(0).buffers() if b is not None]
    del scanned
    gc.collect()
    junk = [b"\xff" * n for n in sizes for _ in range(2)]  # takes any memory freed too early
    assert table.equals(want)
    del junk, table, want
    gc.collect()
    compiled_parser.scan(batch.data)  # the first scan's allocations warm the heap
    before = _rss_mb()
    for _ in range(60):  # ~6 MB of columns each: a leak would be ~360 MB
        got = compiled_parser.scan(batch.data)
        assert got is not None and got.table.num_rows > 0
        del got
    assert _rss_mb() - before < 60


def test_threads_that_end_leave_no_column_buffers_behind() -> None:
    """Each thread's column buffers (kept from one batch to the next) are freed when it ends: a
    thread a batch, thirty times, does not grow the process by thirty threads' buffers."""
    import gc

    path = Path("sample_traces/ddp/ddp_rank0.pt.trace.json.gz")
    splitter = TraceSplitter(path, iter_json_bytes(path), 16 << 20)
    batch = max(splitter.batches(), key=lambda b: len(b.data))
    assert len(batch.data) > 4 << 20  # ~15 MB of buffers a thread

    def work() -> None:
        got = compiled_parser.scan(batch.data)
        assert got is not None and got.table.num_rows > 0

    def in_thread() -> None:
        t = threading.Thread(target=work)
        t.start()
        t.join()

    in_thread()
    gc.collect()
    before = _rss_mb()
    for _ in range(30):
        in_thread()
    gc.collect()
    assert _rss_mb() - before < 100
