"""The caching allocator's ``[memory]`` instants (``profile_memory=True``) -> ``memory_events`` rows.

``events`` keeps a fixed set of ``args`` keys, read by DuckDB's JSON reader into one STRUCT; a
memory event's ``args.Bytes`` cannot sit beside a copy's ``args.bytes`` there (STRUCT field names
ignore case). So a batch that holds ``"[memory]"`` is decoded a second time, here, for those events
alone: ``Total Allocated``, ``Total Reserved``, ``Bytes``, ``Addr``, ``Device Id``, ``Device Type``.
A value of an unexpected type becomes NULL (the event itself is kept in ``events`` as always).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pyarrow as pa
from gpuscope.ingest.json_stream import escape_controls
from gpuscope.ingest.kineto import as_float, as_int
from gpuscope.store.schema import MEMORY_EVENTS

_I32 = 2**31


class _MemArgs(msgspec.Struct):
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    bytes: Any = msgspec.field(default=None, name="Bytes")
    addr: Any = msgspec.field(default=None, name="Addr")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")


class _MemEvent(msgspec.Struct):
    name: Any = None
    tid: Any = None
    ts: Any = None
    args: Any = None


_DECODER = msgspec.json.Decoder(list[_MemEvent])


def memory_rows(data: bytes, run_id: str, rank: int) -> list[tuple[Any, ...]]:
    """The ``memory_events`` rows of one batch (a JSON array of whole events). A batch that does not
    decode gives none: the events path names its fault (it reads the batch first, or after)."""
    try:
        events = _DECODER.decode(data)
    except msgspec.DecodeError:
        try:
            events = _DECODER.decode(escape_controls(data))
        except msgspec.DecodeError:
            return []
    out = []
    for ev in events:
        if ev.name != "[memory]" or not isinstance(ev.args, dict):
            continue
        ts = as_float(ev.ts)
        if ts is None:
            continue
        try:
            a = msgspec.convert(ev.args, _MemArgs)
        except msgspec.ValidationError:
            continue
        out.append((
            run_id,
            rank,
            as_int(ev.tid),
            round(ts * 1000),
            as_int(a.device_type, _I32),
            as_int(a.device_id, _I32),
            as_int(a.addr),
            as_int(a.bytes),
            as_int(a.total_allocated),
            as_int(a.total_reserved),
        ))  # fmt: skip
    return out


_TYPES = {"VARCHAR": pa.string(), "INTEGER": pa.int32(), "BIGINT": pa.int64()}
_SCHEMA = pa.schema([
    (c.name, _TYPES[c.type.replace(" NOT NULL", "")]) for c in MEMORY_EVENTS.columns
])  # fmt: skip


def memory_table(rows: list[tuple[Any, ...]]) -> pa.Table:
    """Rows of :func:`memory_rows` as an Arrow table in ``memory_events``' column order."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(_SCHEMA)
    return pa.table(
        [pa.array(list(c), f.type) for c, f in zip(cols, _SCHEMA, strict=True)], schema=_SCHEMA
    )
