"""Kineto (PyTorch profiler) events: typed decoding of a batch (the fallback path) into Arrow columns."""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Any

import msgspec
import pyarrow as pa
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.json_stream import Batch, escape_controls

Raw = msgspec.Raw
_EMPTY = Raw(b"")


class Args(msgspec.Struct, frozen=True):
    """The ``args`` keys gpuscope keeps; every other key is skipped while decoding."""

    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    device: int | None = None
    stream: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = msgspec.field(default=None, name="registers per thread")
    shared_mem: int | None = msgspec.field(default=None, name="shared memory")
    bytes: int | None = None
    input_dims: Raw = msgspec.field(default=_EMPTY, name="Input Dims")
    input_types: Raw = msgspec.field(default=_EMPTY, name="Input type")
    concrete_inputs: Raw = msgspec.field(default=_EMPTY, name="Concrete Inputs")
    flops: float | None = None
    seq_num: int | None = msgspec.field(default=None, name="Sequence number")
    fwd_tid: int | None = msgspec.field(default=None, name="Fwd thread id")
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    name: str | None = None  # process_name / thread_name metadata events


_NO_ARGS = Args()


class Event(msgspec.Struct, frozen=True):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    args: Args = _NO_ARGS


_DECODER = msgspec.json.Decoder(list[Event])
_AT = re.compile(r"\$\[(\d+)\](\S*)")
_BYTE = re.compile(r"\(byte (\d+)\)")

ARGS_INT = (
    "correlation",
    "external_id",
    "device",
    "stream",
    "registers",
    "shared_mem",
    "bytes",
    "seq_num",
    "fwd_tid",
    "python_id",
    "python_parent_id",
)


def decode_batch(path: object, batch: Batch) -> list[Event]:
    """Typed decoding; raises IngestError naming the event (index and byte offset) that is wrong."""
    try:
        return _DECODER.decode(batch.data)
    except msgspec.ValidationError as e:
        raise _validation_error(path, batch, e) from None
    except msgspec.DecodeError as e:
        if "invalid character" in str(e):
            fixed = escape_controls(batch.data)
            if fixed is not batch.data:
                try:
                    return _DECODER.decode(fixed)
                except msgspec.ValidationError as e2:
                    raise _validation_error(path, batch, e2) from None
                except msgspec.DecodeError:
                    pass
        m = _BYTE.search(str(e))
        where = f" at byte {batch.offset + int(m.group(1)) - 1}" if m else ""
        raise IngestError(path, f"malformed JSON in traceEvents{where}: {_short(e)}") from None


def _short(e: Exception) -> str:
    return str(e).replace("JSON is malformed: ", "")


def _validation_error(path: object, batch: Batch, e: Exception) -> IngestError:
    msg = str(e)
    m = _AT.search(msg)
    if m:
        idx = batch.first_index + int(m.group(1))
        fld = m.group(2).lstrip(".") or "event"
        head = msg.split(" - at ")[0]
        return IngestError(path, f"traceEvents[{idx}].{fld}: {head.lower()}")
    return IngestError(path, f"wrong types in traceEvents: {msg}")


RAW_SCHEMA = pa.schema([
    ("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()),
    ("pid_num", pa.int64()), ("pid_label", pa.string()), ("tid_num", pa.int64()), ("tid_label", pa.string()),
    ("ts", pa.float64()), ("dur", pa.float64()), ("flow_id", pa.int64()),
    ("correlation", pa.int64()), ("external_id", pa.int64()), ("device", pa.int32()), ("stream", pa.int64()),
    ("grid", pa.list_(pa.int32())), ("block", pa.list_(pa.int32())), ("registers", pa.int32()),
    ("shared_mem", pa.int64()), ("bytes", pa.int64()),
    ("input_dims", pa.string()), ("input_types", pa.string()), ("concrete_inputs", pa.string()),
    ("flops", pa.float64()), ("seq_num", pa.int64()), ("fwd_tid", pa.int64()), ("python_id", pa.int64()),
    ("python_parent_id", pa.int64()), ("meta_name", pa.string()),
])  # fmt: skip


def _num(v: int | str | None) -> int | None:
    """An id as DuckDB's TRY_CAST(... AS BIGINT) reads it: ints and integer strings, else None."""
    if v is None or type(v) is int:
        return v
    try:
        return int(str(v).strip())
    except ValueError:
        return None


def _label(v: int | str | None) -> str | None:
    return v if type(v) is str and _num(v) is None else None


def _json_text(r: Raw) -> str | None:
    """Raw JSON as compact text (the form DuckDB's JSON type gives), NULL when absent."""
    if not len(r):
        return None
    return msgspec.json.encode(msgspec.json.decode(bytes(r))).decode()


def to_raw(events: list[Event]) -> pa.Table:
    """The decoded events in the *raw* layout that batch_insert's SQL turns into ``events`` rows."""
    get = attrgetter
    args = list(map(get("args"), events))
    pids = list(map(get("pid"), events))
    tids = list(map(get("tid"), events))
    ids = list(map(get("id"), events))
    cols: dict[str, list[Any]] = {
        "ph": list(map(get("ph"), events)),
        "cat": list(map(get("cat"), events)),
        "name": list(map(get("name"), events)),
        "pid_num": [_num(v) for v in pids],
        "pid_label": [_label(v) for v in pids],
        "tid_num": [_num(v) for v in tids],
        "tid_label": [_label(v) for v in tids],
        "ts": list(map(get("ts"), events)),
        "dur": list(map(get("dur"), events)),
        "flow_id": [_num(v) for v in ids],
        "input_dims": [_json_text(r) for r in map(get("input_dims"), args)],
        "input_types": [_json_text(r) for r in map(get("input_types"), args)],
        "concrete_inputs": [_json_text(r) for r in map(get("concrete_inputs"), args)],
        "meta_name": list(map(get("name"), args)),
    }
    for name in (*ARGS_INT, "grid", "block", "flops"):
        cols[name] = list(map(get(name), args))
    return pa.table([pa.array(cols[f.name], f.type) for f in RAW_SCHEMA], schema=RAW_SCHEMA)
