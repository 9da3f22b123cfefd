"""Kineto (PyTorch profiler) events: typed decoding of a batch (the fallback path) into Arrow columns.

Argument shapes seen from torch 1.13 to 2.11 and in other exporters, all read (tests/test_wild_ingest.py):
kernels carry ``grid``/``block`` as ``[x, y, z]`` int arrays, ``device``/``stream``/``correlation``/
``registers per thread``/``shared memory`` as ints, ``blocks per SM``/``warps per SM`` as floats (not
kept); CPU ops carry ``External id``, ``Sequence number``, ``Fwd thread id`` (ints), ``Input Dims``,
``Input type``, ``Concrete Inputs`` (nested JSON, kept as text) and ``Input Strides`` (not kept); collectives add
``Process Group Ranks``/``In split size`` as strings (not kept). Inductor's launch ops
(``_RecordFunctionFast`` with kwargs) carry ``kernel_file``, ``kernel_hash``, ``kernel_backend``,
``num_warps``, ``kernel_kwargs`` and ``stream`` (a raw stream handle), and in older PyTorch
``"grid": "grid(100,)"`` (a string). Other exporters write ids as strings or integral floats and
``args`` as null or an array. A value of an unexpected type never refuses a trace: see
:func:`loose_events`.
"""

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


class OddEvent(Event, frozen=True):
    """An event read by the lenient decoder: ``odd`` holds, as JSON text, the kept ``args`` (and
    fields) whose type was not the expected one (``{"grid": "grid(100,)"}``), NULL when none."""

    odd: str | None = None


class _LooseEvent(msgspec.Struct, frozen=True):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: Any = None


_DECODER = msgspec.json.Decoder(list[Event])
_LOOSE = msgspec.json.Decoder(list[_LooseEvent])
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
    """Typed decoding. A value of an unexpected type never refuses the trace: the batch is then read
    by the lenient decoder (:func:`loose_events`), which keeps what it can type and the rest as JSON
    text (``OddEvent.odd``). Raises IngestError, naming the byte offset, only for malformed JSON."""
    try:
        return _DECODER.decode(batch.data)
    except msgspec.ValidationError:
        return loose_events(path, batch, batch.data)
    except msgspec.DecodeError as e:
        if "invalid character" in str(e):
            fixed = escape_controls(batch.data)
            if fixed is not batch.data:
                try:
                    return _DECODER.decode(fixed)
                except msgspec.ValidationError:
                    return loose_events(path, batch, fixed)
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
        idx = batch.first_event() + int(m.group(1))
        fld = m.group(2).lstrip(".") or "event"
        head = msg.split(" - at ")[0]
        return IngestError(path, f"traceEvents[{idx}].{fld}: {head.lower()}")
    return IngestError(path, f"wrong types in traceEvents: {msg}")


# -- lenient reading: keep what can be typed, the rest as JSON text ---------------------------------

_I64 = 2**63
_I32 = 2**31
_INT_ARGS: dict[str, tuple[str, int]] = {  # Args attribute -> (trace key, bound)
    "correlation": ("correlation", _I64),
    "external_id": ("External id", _I64),
    "device": ("device", _I32),
    "stream": ("stream", _I64),
    "registers": ("registers per thread", _I32),
    "shared_mem": ("shared memory", _I64),
    "bytes": ("bytes", _I64),
    "seq_num": ("Sequence number", _I64),
    "fwd_tid": ("Fwd thread id", _I64),
    "python_id": ("Python id", _I64),
    "python_parent_id": ("Python parent id", _I64),
}
_JSON_ARGS = {
    "input_dims": "Input Dims",
    "input_types": "Input type",
    "concrete_inputs": "Concrete Inputs",
}
_MISSING = object()


def as_int(v: Any, bound: int = _I64) -> int | None:
    """An integer argument as typed: an int (not a bool), an integral float or an integer string
    (as DuckDB's cast reads it) within ``[-bound, bound)``; None when it is none of these."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    elif isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            return None
    return v if isinstance(v, int) and -bound <= v < bound else None


def as_float(v: Any) -> float | None:
    """A number (not a bool) or a numeric string as float; None otherwise."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def _as_dims(v: Any) -> list[int] | None:
    if not isinstance(v, list) or not v:
        return None
    dims: list[int] = []
    for y in v:
        x = None if isinstance(y, str) else as_int(y, _I32)  # a dimension is never a string
        if x is None:
            return None
        dims.append(x)
    return dims


def _as_id(v: Any) -> int | str | None:
    if v is None or isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)):
        return v
    n = as_int(v)
    return n if n is not None else msgspec.json.encode(v).decode()


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None else msgspec.json.encode(v).decode())


def loose_events(path: object, batch: Batch, data: bytes) -> list[Event]:
    """Read a batch whose values do not all have the expected types. Each kept argument is typed
    when it can be (ints, integer strings, integral floats; [x, y, z] lists of ints), otherwise its
    value is kept as JSON text in ``OddEvent.odd`` under its trace key. Raises IngestError for an
    event that is not an object or whose ``ts``/``dur`` is not a number (its time is not an argument)."""
    try:
        loose = _LOOSE.decode(data)
    except msgspec.ValidationError as e:  # an event that is not an object
        raise _validation_error(path, batch, e) from None
    except msgspec.DecodeError as e:
        raise IngestError(path, f"malformed JSON in traceEvents: {_short(e)}") from None
    out = []
    for i, ev in enumerate(loose):
        for key, v in (("ts", ev.ts), ("dur", ev.dur)):
            if v is not None and as_float(v) is None:  # an event's time is not an argument
                raise IngestError(
                    path,
                    f"traceEvents[{batch.first_event() + i}].{key}: expected a number, "
                    f"got {type(v).__name__} {msgspec.json.encode(v).decode()[:40]}",
                )
        out.append(_typed(ev))
    return out


def _typed(ev: _LooseEvent) -> Event:
    odd: dict[str, Any] = {}
    ts, dur = (
        as_float(ev.ts),
        as_float(ev.dur),
    )  # numbers or numeric strings (checked by the caller)
    a = ev.args
    kw: dict[str, Any] = {}
    if isinstance(a, dict):
        for attr, (key, bound) in _INT_ARGS.items():
            v = a.get(key, _MISSING)
            if v is _MISSING or v is None:
                continue
            n = as_int(v, bound)
            if n is None:
                odd[key] = v
            else:
                kw[attr] = n
        for attr in ("grid", "block"):
            v = a.get(attr)
            if v is not None:
                dims = _as_dims(v)
                if dims is None:
                    odd[attr] = v
                else:
                    kw[attr] = dims
        v = a.get("flops")
        if v is not None:
            f = as_float(v)
            if f is None:
                odd["flops"] = v
            else:
                kw["flops"] = f
        v = a.get("name")
        if v is not None:
            if isinstance(v, str):
                kw["name"] = v
            else:
                odd["name"] = v
        for attr, key in _JSON_ARGS.items():
            if key in a:
                kw[attr] = Raw(msgspec.json.encode(a[key]))
    elif a is not None:
        odd["args"] = a
    return OddEvent(
        ph=_text(ev.ph),
        cat=_text(ev.cat),
        name=_text(ev.name),
        pid=_as_id(ev.pid),
        tid=_as_id(ev.tid),
        ts=ts,
        dur=dur,
        id=_as_id(ev.id),
        args=Args(**kw) if kw else _NO_ARGS,
        odd=msgspec.json.encode(odd).decode() if odd else None,
    )


def odd_notes(path: object, events: list[Event], first_index: int, limit: int = 3) -> list[str]:
    """Up to ``limit`` notes on the odd values of a batch: ``traceEvents[3].args.grid = "grid(100,)"``."""
    out = []
    for i, ev in enumerate(events):
        odd = getattr(ev, "odd", None)
        if odd:
            for k, v in msgspec.json.decode(odd).items():
                where = "args" if k == "args" else f"args.{k}"
                text = msgspec.json.encode(v).decode()
                text = text if len(text) <= 60 else text[:59] + "…"
                out.append(f"traceEvents[{first_index + i}].{where} = {text}")
                if len(out) >= limit:
                    return out
    return out


RAW_SCHEMA = pa.schema([
    ("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()),
    ("pid_num", pa.int64()), ("pid_label", pa.string()), ("tid_num", pa.int64()), ("tid_label", pa.string()),
    ("ts", pa.float64()), ("dur", pa.float64()), ("flow_id", pa.int64()),
    ("correlation", pa.int64()), ("external_id", pa.int64()), ("device", pa.int32()), ("stream", pa.int64()),
    ("grid", pa.list_(pa.int32())), ("block", pa.list_(pa.int32())), ("registers", pa.int32()),
    ("shared_mem", pa.int64()), ("bytes", pa.int64()),
    ("input_dims", pa.string()), ("input_types", pa.string()), ("concrete_inputs", pa.string()),
    ("flops", pa.float64()), ("seq_num", pa.int64()), ("fwd_tid", pa.int64()), ("python_id", pa.int64()),
    ("python_parent_id", pa.int64()), ("meta_name", pa.string()), ("odd_args", pa.string()),
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
        "odd_args": [getattr(e, "odd", None) for e in events],
    }
    for name in (*ARGS_INT, "grid", "block", "flops"):
        cols[name] = list(map(get(name), args))
    return pa.table([pa.array(cols[f.name], f.type) for f in RAW_SCHEMA], schema=RAW_SCHEMA)
