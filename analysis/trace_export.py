"""A trimmed Kineto (Chrome trace JSON) file rebuilt from the store: one rank's events in a time
window, for Perfetto's UI (``gpuscope.perfetto``) or any Chrome-trace viewer.

Every event that overlaps the window is written whole (not clipped), with the fields the store keeps
(``ph``, ``cat``, ``name``, ``pid``, ``tid``, ``ts``/``dur`` in µs, ``args`` rebuilt from the typed
columns, flow ids); process and thread names come from the ``threads`` table; the rank's top-level
keys (``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, the user's metadata) are
kept, so ``gpuscope ingest`` reads the file back to the same figures for the window
(tests/test_perfetto.py).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.store_access import rank_meta

if TYPE_CHECKING:
    from gpuscope.store import Connection

# typed column -> the Kineto args key it came from
_ARGS = (
    ("external_id", "External id"),
    ("correlation", "correlation"),
    ("device", "device"),
    ("stream", "stream"),
    ("grid", "grid"),
    ("block", "block"),
    ("registers", "registers per thread"),
    ("shared_mem", "shared memory"),
    ("bytes", "bytes"),
    ("input_dims", "Input Dims"),
    ("input_types", "Input type"),
    ("concrete_inputs", "Concrete Inputs"),
    ("flops", "flops"),
    ("seq_num", "Sequence number"),
    ("fwd_tid", "Fwd thread id"),
    ("python_id", "Python id"),
    ("python_parent_id", "Python parent id"),
)
_JSON_COLS = {"input_dims", "input_types", "concrete_inputs", "odd_args"}
MAX_EVENTS = 2_000_000


def _value(col: str, v: Any) -> Any:
    if v is None:
        return None
    if col in _JSON_COLS:
        return json.loads(v) if isinstance(v, str) else v
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list | tuple):
        return [int(x) for x in v]
    return v


def _us(ns: int) -> float | int:
    """ns -> µs as Kineto writes them (integers stay integers, else 3 decimals, exact)."""
    return ns // 1000 if ns % 1000 == 0 else round(ns / 1000, 3)


def trimmed_trace(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int | None = None,
    end_ns: int | None = None,
    *,
    max_events: int = MAX_EVENTS,
) -> dict[str, Any]:
    """The Kineto JSON document of ``rank``'s events overlapping ``[start_ns, end_ns)`` (trace ns;
    None: the whole rank). Raises ValueError for an unknown run or rank, an empty range, or more
    than ``max_events`` events (zoom in)."""
    row = con.execute(
        "SELECT ts_min_ns, ts_max_ns FROM ranks WHERE run_id = ? AND rank = ?", [run_id, rank]
    ).fetchone()
    if row is None:
        raise ValueError(f"{run_id}: no rank {rank}")
    s = int(row[0] if start_ns is None else start_ns) if row[0] is not None else 0
    e = int(row[1] if end_ns is None else end_ns) if row[1] is not None else 0
    if e <= s and not (start_ns is None and end_ns is None):
        raise ValueError(f"{run_id} rank {rank}: empty time range {s}..{e} ns")
    cols = ["ph", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "flow_id", "odd_args"]
    cols += [c for c, _ in _ARGS]
    sel = ", ".join("n.name AS name" if c == "name" else f"e.{c}" for c in cols)
    where = (
        "e.run_id = ? AND e.rank = ? AND (e.ph = 'M' OR e.ts_ns IS NULL OR "
        "(e.ts_ns < ? AND (e.ts_ns >= ? OR e.ts_ns + coalesce(e.dur_ns, 0) > ?)))"
    )
    params = [run_id, rank, e + 1 if e == s else e, s, s]
    n = con.execute(f"SELECT count(*) FROM events e WHERE {where}", params).fetchone()
    if n is not None and int(n[0]) > max_events:
        raise ValueError(
            f"{run_id} rank {rank}: {int(n[0]):,} events in the range (at most {max_events:,}): "
            "zoom in"
        )
    rows = con.execute(
        f"SELECT {sel} FROM events e JOIN names n ON n.run_id = e.run_id "
        f"AND n.name_id = e.name_id WHERE {where} ORDER BY e.ts_ns NULLS FIRST",
        params,
    ).fetchall()
    events: list[dict[str, Any]] = []
    for r in rows:
        d = dict(zip(cols, r, strict=True))
        ev: dict[str, Any] = {"ph": d["ph"], "name": d["name"]}
        if d["cat"]:
            ev["cat"] = d["cat"]
        for k in ("pid", "tid"):
            if d[k] is not None:
                ev[k] = int(d[k])
        if d["ts_ns"] is not None:
            ev["ts"] = _us(int(d["ts_ns"]))
        if d["dur_ns"] is not None:
            ev["dur"] = _us(int(d["dur_ns"]))
        if d["flow_id"] is not None:
            ev["id"] = int(d["flow_id"])
            if d["ph"] == "f":
                ev["bp"] = "e"
        args = {key: v for col, key in _ARGS if (v := _value(col, d[col])) is not None}
        odd = _value("odd_args", d["odd_args"])
        if isinstance(odd, dict):
            args.update(odd)
        if args:
            ev["args"] = args
        events.append(ev)
    labels = con.execute(
        "SELECT kind, id, label FROM threads WHERE run_id = ? AND rank = ? ORDER BY kind, id",
        [run_id, rank],
    ).fetchall()
    named = {(ev.get("pid"), ev.get("tid"), ev["name"]) for ev in events if ev["ph"] == "M"}
    meta_events = []
    for kind, ident, label in labels:
        if kind == "pid" and (int(ident), None, "process_name") not in named:
            meta_events.append(
                {"ph": "M", "name": "process_name", "pid": int(ident), "args": {"name": label}}
            )
    meta = rank_meta(con, run_id, rank)
    doc: dict[str, Any] = {
        k: v for k, v in (meta.get("metadata") or {}).items() if k != "traceEvents"
    }
    doc["deviceProperties"] = meta.get("device_properties") or []
    if meta.get("distributed_info"):
        doc["distributedInfo"] = meta["distributed_info"]
    doc["traceEvents"] = meta_events + events
    return doc


def trimmed_trace_bytes(
    con: Connection, run_id: str, rank: int, start_ns: int | None = None, end_ns: int | None = None
) -> bytes:
    """:func:`trimmed_trace` as compact UTF-8 JSON."""
    doc = trimmed_trace(con, run_id, rank, start_ns, end_ns)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
