"""Kineto (PyTorch profiler) events: typed decoding of a batch and conversion to Arrow columns."""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.json_stream import Batch, escape_controls
from gpuscope.ingest.schema import EVENTS

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
ARGS_RAW = ("input_dims", "input_types", "concrete_inputs")


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


class IdMap:
    """Stable integer ids for strings: event names (stored once) and non-numeric pids/tids."""

    def __init__(self, start: int = 0, step: int = 1) -> None:
        self.ids: dict[str, int] = {}
        self.start, self.step = start, step

    def get(self, key: str) -> int:
        v = self.ids.get(key)
        if v is None:
            v = self.ids[key] = self.start + self.step * len(self.ids)
        return v

    def lookup_array(self, strings: pa.Array) -> pa.Array:
        """Map a string array to int32 ids, touching Python only once per distinct value."""
        enc = pc.dictionary_encode(strings)
        table = np.fromiter(
            (self.get(s) for s in enc.dictionary.to_pylist()), np.int64, len(enc.dictionary)
        )
        idx = enc.indices.to_numpy(zero_copy_only=False)
        return pa.array(table[idx].astype(np.int32) if table.size else np.zeros(0, np.int32))


def _ids(
    values: list[Any], labels: IdMap, kind: str, seen: dict[tuple[str, int], str]
) -> list[Any]:
    out = []
    for v in values:
        if v is None or type(v) is int:
            out.append(v)
        else:
            try:
                out.append(int(v))
            except (TypeError, ValueError):
                i = labels.get(str(v))
                seen[(kind, i)] = str(v)
                out.append(i)
    return out


def _ns(values: list[float | None]) -> pa.Array:
    """µs floats -> int64 ns, rounded to the nearest ns (the trace has 3 decimals: exact)."""
    arr = pa.array(values, pa.float64())
    return pc.cast(pc.round(pc.multiply(arr, 1000.0)), pa.int64())


def _raw(values: list[Raw], *, numeric: bool = False) -> pa.Array:
    """Raw JSON values as text (NULL when absent); ``numeric`` ones (shapes) are made compact."""
    arr = pa.array(list(map(bytes, values)), pa.binary())
    if numeric:
        arr = pc.replace_substring_regex(arr, r"\s+", "")
    text = pc.cast(arr, pa.string())  # the decoder already checked UTF-8
    return pc.if_else(pc.equal(pc.binary_length(arr), 0), pa.scalar(None, pa.string()), text)


def to_arrow(
    events: list[Event],
    run_id: str,
    rank: int,
    names: IdMap,
    labels: IdMap,
    label_rows: dict[tuple[str, int], str],
) -> pa.Table:
    """Columns in the order of the ``events`` table."""
    n = len(events)
    get = attrgetter
    args = list(map(get("args"), events))
    pids = list(map(get("pid"), events))
    tids = list(map(get("tid"), events))
    if str in set(map(type, pids)):
        pids = _ids(pids, labels, "pid", label_rows)
    if str in set(map(type, tids)):
        tids = _ids(tids, labels, "tid", label_rows)
    ids = list(map(get("id"), events))
    if str in set(map(type, ids)):
        ids = [_flow_id(i) for i in ids]
    cols: dict[str, pa.Array] = {
        "run_id": pa.repeat(pa.scalar(run_id), n) if n else pa.array([], pa.string()),
        "rank": pa.array(np.full(n, rank, np.int32)),
        "ph": pa.array(list(map(get("ph"), events)), pa.string()),
        "cat": pa.array(list(map(get("cat"), events)), pa.string()),
        "name_id": names.lookup_array(pa.array(list(map(get("name"), events)), pa.string())),
        "pid": pa.array(pids, pa.int64()),
        "tid": pa.array(tids, pa.int64()),
        "ts_ns": _ns(list(map(get("ts"), events))),
        "dur_ns": _ns(list(map(get("dur"), events))),
        "flow_id": pa.array(ids, pa.int64()),
        "grid": pa.array(list(map(get("grid"), args)), pa.list_(pa.int32())),
        "block": pa.array(list(map(get("block"), args)), pa.list_(pa.int32())),
        "flops": pa.array(list(map(get("flops"), args)), pa.float64()),
    }
    for name in ARGS_INT:
        typ = pa.int32() if name in ("device", "registers") else pa.int64()
        cols[name] = pa.array(list(map(get(name), args)), typ)
    for name in ARGS_RAW:
        cols[name] = _raw(list(map(get(name), args)), numeric=name == "input_dims")
    return pa.table([cols[c] for c in EVENTS.column_names], names=EVENTS.column_names)


def _flow_id(v: int | str | None) -> int | None:
    if v is None or type(v) is int:
        return v
    try:
        return int(v, 0)
    except ValueError:
        return int.from_bytes(str(v).encode()[:7].ljust(7, b"\0"), "big")


def metadata_labels(events: list[Event]) -> list[tuple[str, int | str | None, str]]:
    """(kind, id, label) from process_name / thread_name metadata events."""
    out = []
    for e in events:
        if e.ph == "M" and e.args.name is not None:
            if e.name == "process_name":
                out.append(("pid", e.pid, e.args.name))
            elif e.name == "thread_name":
                out.append(("tid", e.tid, e.args.name))
    return out
