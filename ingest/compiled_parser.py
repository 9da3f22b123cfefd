"""The compiled fast path of a batch's parse: C (``_compiled_parser.c``) reads the events in one
pass, without the GIL, into the Arrow columns of the parsed layout
(:data:`gpuscope.ingest.batch_insert.TO_PARSED`).

It reads only what it is certain to read exactly as DuckDB's JSON reader does; any other batch
(an escaped key, a number of a type DuckDB would cast, a JSON value it would re-render...) it
refuses, and :class:`~gpuscope.ingest.batch_insert.BatchParser` reads that batch with DuckDB.
``tests/test_compiled_parser.py`` holds the two readers to the same tables.

The extension is built when gpuscope is installed; where no C compiler was at hand it is missing,
:data:`AVAILABLE` is False and every batch is read by DuckDB (slower, same rows).
``$GPUSCOPE_COMPILED_PARSER=0`` turns it off (for benchmarks that compare the two).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from gpuscope.store.schema import EVENTS

if TYPE_CHECKING:
    import pyarrow as pa

try:
    from gpuscope.ingest import _compiled_parser  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: DuckDB reads every batch
    _compiled_parser = None

AVAILABLE = _compiled_parser is not None
ENV_SWITCH = "GPUSCOPE_COMPILED_PARSER"  # "0": read every batch with DuckDB

# The columns the C code fills, in its order (``enum Col``).
COLUMNS = (
    "ph", "cat", "ts_ns", "dur_ns", "correlation", "external_id", "device", "stream", "flow_id",
    "grid", "block", "registers", "shared_mem", "bytes", "input_dims", "input_types",
    "concrete_inputs", "flops", "seq_num", "fwd_tid", "python_id", "python_parent_id", "name",
    "pid_num", "pid_label", "tid_num", "tid_label", "meta_name",
)  # fmt: skip


def enabled() -> bool:
    """Whether batches go through the compiled parser first (built, and not switched off)."""
    return AVAILABLE and os.environ.get(ENV_SWITCH, "1") != "0"


def count_objects(data: bytes) -> int | None:
    """How many objects ``data`` holds when it is a strict JSON array of objects, checked in C
    without the GIL (the splitter's proof of a cut); None when it is not, or where the
    compiled parser is off (the caller then checks it with msgspec)."""
    if _compiled_parser is None or not enabled():
        return None
    n: int | None = _compiled_parser.count_objects(data)
    return n


@cache
def _schema() -> pa.Schema:
    """The parsed layout as Arrow types: ``events``' columns, then the raw ones the writer maps."""
    import pyarrow as pa

    types = {
        "VARCHAR": pa.string(),
        "JSON": pa.string(),
        "INTEGER": pa.int32(),
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
        "INTEGER[]": pa.list_(pa.field("l", pa.int32())),
    }
    fields = [pa.field(c.name, types[c.type.replace(" NOT NULL", "")]) for c in EVENTS.columns]
    raw = {"pid_num": pa.int64(), "tid_num": pa.int64()}
    for name in ("name", "pid_num", "pid_label", "tid_num", "tid_label", "meta_name"):
        fields.append(pa.field(name, raw.get(name, pa.string())))
    return pa.schema(fields)


def concat(parts: tuple[bytes | memoryview, ...]) -> bytes:
    """``b"".join(parts)``, copied in C without the GIL where the extension is built (a batch's
    text is ~8 MB: the splitting thread would hold the GIL through the copy and its page faults
    while the parse and writer threads wait for it)."""
    if _compiled_parser is None:
        return b"".join(parts)
    out: bytes = _compiled_parser.concat(parts)
    return out


@dataclass(frozen=True)
class Scanned:
    """A batch read by the compiled parser: its rows in the parsed layout, and whether its text
    holds :data:`~gpuscope.ingest.batch_insert.MEMORY_MARK` (looked for in C, without the GIL)."""

    table: pa.Table
    memory_mark: bool


def parse(data: bytes) -> pa.Table | None:
    """The batch's rows in the parsed layout, or None when the compiled parser refuses it."""
    got = scan(data)
    return None if got is None else got.table


def _buffer(held: bytes | tuple[int, int, object]) -> pa.Buffer:
    """A column buffer the C code handed over: ``b""``, or (address, length, owner) with no copy
    (the Arrow buffer keeps the owner, which frees the memory when the last array goes)."""
    import pyarrow as pa

    if isinstance(held, bytes):
        return pa.py_buffer(held)
    address, length, owner = held
    return pa.foreign_buffer(address, length, base=owner)


def _nulls(typ: pa.DataType, n: int, zeros: pa.Buffer) -> pa.Array:
    """A column of ``n`` nulls of type ``typ`` over ``zeros`` ((n + 1) * 8 zero bytes): bitmap,
    values and offsets all 0, as ``pa.nulls`` makes them, without allocating (and faulting in)
    memory of its own per batch."""
    import pyarrow as pa

    empty = pa.py_buffer(b"")
    if pa.types.is_string(typ):
        return pa.Array.from_buffers(typ, n, [zeros, zeros, empty], null_count=n)
    if pa.types.is_list(typ):
        child = pa.Array.from_buffers(typ.value_type, 0, [None, empty])
        return pa.Array.from_buffers(typ, n, [zeros, zeros], null_count=n, children=[child])
    return pa.Array.from_buffers(typ, n, [zeros, zeros], null_count=n)


def scan(data: bytes) -> Scanned | None:
    """The batch read in C (:class:`Scanned`), or None when the compiled parser refuses it."""
    import pyarrow as pa

    if _compiled_parser is None:
        return None
    got = _compiled_parser.scan(data)
    if got is None:
        return None
    n, buffers, mark, zeros_held = got
    schema = _schema()
    zeros = _buffer(zeros_held)
    filled: dict[str, pa.Array] = {}
    for name, (valid, values, items, nulls) in zip(COLUMNS, buffers, strict=True):
        typ = schema.field(name).type
        bitmap = _buffer(valid) if nulls else None
        if pa.types.is_string(typ):
            bufs = [bitmap, _buffer(values), _buffer(items)]
            filled[name] = pa.Array.from_buffers(typ, n, bufs, null_count=nulls)
        elif pa.types.is_list(typ):
            child_items = _buffer(items)
            child = pa.Array.from_buffers(
                typ.value_type, child_items.size // 4, [None, child_items]
            )
            filled[name] = pa.Array.from_buffers(
                typ, n, [bitmap, _buffer(values)], null_count=nulls, children=[child]
            )
        else:
            filled[name] = pa.Array.from_buffers(
                typ, n, [bitmap, _buffer(values)], null_count=nulls
            )
    columns = [filled[f.name] if f.name in filled else _nulls(f.type, n, zeros) for f in schema]
    return Scanned(pa.Table.from_arrays(columns, schema=schema), bool(mark))
