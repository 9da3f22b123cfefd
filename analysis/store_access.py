"""Common SQL pieces over the gpuscope DuckDB store: event classes, name patterns, small helpers.

Every time here is an integer in nanoseconds of trace time (``events.ts_ns``); the functions of
``gpuscope.analysis`` convert to µs/ms only when they build JSON.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import duckdb

# -- event classes -----------------------------------------------------------------------------
# Defined once in gpuscope.analysis.event_classes; re-exported for the SQL helpers below.
from gpuscope.analysis.event_classes import (  # noqa: F401 (re-exported for the analysis SQL)
    COMM_KERNEL_SQL_RE,
    COMM_RE,
    DATALOADER_RE,
    GPU_ACTIVITY_PHASE,
    GPU_CATS,
    HOST_CATS,
    LAUNCH_APIS,
    MEMCPY_API_RE,
    OP_CATS,
    OPTIMIZER_RE,
    PAGEABLE_D2H_RE,
    PAGEABLE_H2D_RE,
    PROFILER_STEP_RE,
    RUNTIME_CATS,
    SYNC_APIS,
    SYNC_OPS,
)

if TYPE_CHECKING:
    import pandas as pd  # only as a type: a stored view's path never loads pandas (~0.3 s)
    from gpuscope.store import Connection

COMM_KERNEL_RE = COMM_KERNEL_SQL_RE  # communication kernels: event_classes.COMM_KERNEL_PATTERN

SYNC_SLACK_NS = 5_000
"""A gap counts as drained by a synchronizing call when such a call started before the gap and
ended no earlier than this long before it (CPU and GPU clocks in a trace can be off by a few µs)."""


def sql_list(values: tuple[str, ...] | list[str]) -> str:
    """A SQL list literal of quoted strings (for the constant tuples above; never user text)."""
    return "(" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


GPU_CATS_SQL = sql_list(GPU_CATS)
#: GPU activity (event_classes.GPU_ACTIVITY) as a SQL condition on ``events``.
GPU_ACTIVITY_SQL = f"ph = '{GPU_ACTIVITY_PHASE}' AND cat IN {GPU_CATS_SQL} AND dur_ns > 0"
#: The device of an event: ``device``, falling back to ``pid`` (event_classes.GPU_ACTIVITY).
DEVICE_SQL = "coalesce(device, CAST(pid AS INTEGER))"
RUNTIME_CATS_SQL = sql_list(RUNTIME_CATS)
HOST_CATS_SQL = sql_list(HOST_CATS)
OP_CATS_SQL = sql_list(OP_CATS)


def names_matching(pattern_sql: str) -> str:
    """A subquery of the run's name ids whose name satisfies ``pattern_sql`` (a SQL condition
    on the column ``name``); needs the ``$run`` parameter."""
    return f"(SELECT name_id FROM names WHERE run_id = $run AND ({pattern_sql}))"


def regex(pattern: str) -> str:
    """``regexp_matches(name, '<pattern>')`` for a constant pattern."""
    return "regexp_matches(name, '" + pattern.replace("'", "''") + "')"


# -- running queries ---------------------------------------------------------------------------


_PARAM = re.compile(r"\$([A-Za-z_]\w*)")


def execute(
    con: Connection, sql: str, params: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """``con.execute`` with only the named parameters that ``sql`` uses (DuckDB refuses extras)."""
    used = set(_PARAM.findall(sql))
    return con.execute(sql, {k: v for k, v in (params or {}).items() if k in used})


def df(con: Connection, sql: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
    """Run ``sql`` and return a DataFrame (numpy-backed, integer columns stay integers)."""
    return execute(con, sql, params).df()


def ranks_of(con: Connection, run_id: str) -> list[int]:
    """The ranks of a run, ascending."""
    rows = con.execute("SELECT rank FROM ranks WHERE run_id = ? ORDER BY rank", [run_id]).fetchall()
    return [int(r[0]) for r in rows]


def rank_meta(con: Connection, run_id: str, rank: int) -> dict[str, Any]:
    """``device_properties`` (list), ``distributed_info`` (dict) and ``metadata`` (dict) of a rank."""
    row = con.execute(
        "SELECT device_properties, distributed_info, metadata, world_size FROM ranks "
        "WHERE run_id = ? AND rank = ?",
        [run_id, rank],
    ).fetchone()
    if row is None:
        return {"device_properties": [], "distributed_info": {}, "metadata": {}, "world_size": None}

    def load(v: Any, default: Any) -> Any:
        if v is None:
            return default
        try:
            return json.loads(v) if isinstance(v, str) else v
        except ValueError:
            return default

    return {
        "device_properties": load(row[0], []) or [],
        "distributed_info": load(row[1], {}) or {},
        "metadata": load(row[2], {}) or {},
        "world_size": row[3],
    }


def device_props(meta: dict[str, Any], device: int | None) -> dict[str, Any]:
    """The ``deviceProperties`` entry of ``device`` (by its ``id``, else its position), or {}."""
    props = meta.get("device_properties") or []
    if not isinstance(props, list) or not props:
        return {}
    for p in props:
        if isinstance(p, dict) and p.get("id") == device:
            return p
    if device is not None and 0 <= device < len(props) and isinstance(props[device], dict):
        return props[device]
    return props[0] if isinstance(props[0], dict) else {}


def us(ns: float | int | None) -> float | None:
    """ns -> µs (float, not rounded to whole µs)."""
    return None if ns is None else float(ns) / 1e3


def ms(ns: float | int | None) -> float | None:
    """ns -> ms."""
    return None if ns is None else float(ns) / 1e6


def pct(part: float | int, whole: float | int) -> float:
    """100 × part / whole, 0 when whole is 0."""
    return 100.0 * float(part) / float(whole) if whole else 0.0


# -- hash joins on time buckets ----------------------------------------------------------------------
# Overlap of many ranges with many intervals, without sorting either: cut the time axis into buckets
# of equal width, list each range once per bucket it touches, and join on the bucket.


def bucket_width(lo: int, hi: int, n: int = 4096) -> int:
    """Width (ns, at least 1) of the time buckets that cut ``[lo, hi)`` into about ``n``."""
    return max(1, (int(hi) - int(lo)) // n)


def by_bucket(columns: str, start: str, end: str, source: str, lo: str, width: str) -> str:
    """A SELECT of ``columns`` of ``source``'s non-empty ranges ``[start, end)``, one row per time
    bucket that the range touches, the bucket in column ``k``: bucket ``k`` is
    ``[lo + k × width, lo + (k + 1) × width)``. ``lo`` and ``width`` are SQL (a ``$param`` or a
    number)."""
    return (
        f"SELECT {columns}, unnest(range(({start} - {lo}) // {width}, "
        f"({end} - 1 - {lo}) // {width} + 1)) AS k FROM {source} WHERE {end} > {start}"
    )
