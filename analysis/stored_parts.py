"""The ranks' stored summary parts read by name and version (the rows of ``rank_summaries``).

What the analysis facade (:mod:`gpuscope.analysis.report`) reads of the other ranks without the
parts' registry: :mod:`gpuscope.analysis.rank_summary` computes and stores the parts, and some of
them call the facade, so it imports the facade's module; both read and write the table through
this one."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuscope.store import Connection

TABLE = "rank_summaries"

_PLAIN = frozenset({int, str, bool, type(None)})  # values finite() returns as they are


def finite(v: Any) -> Any:
    """``v`` with NaN/inf floats made None (JSON has no NaN), recursively."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):  # long lists of ints (a rank's frame): no call per element
        return [x if type(x) in _PLAIN else finite(x) for x in v]
    return v


def read(
    con: Connection,
    run_id: str,
    name: str,
    version: int,
    compute: Callable[[Connection, str, int], Any] | None = None,
) -> dict[int, Any]:
    """Part ``name`` of every rank of ``run_id`` stored at ``version``, by rank (ascending); with
    ``compute(con, run_id, rank)``, a rank without one is computed from its events (not stored),
    else left out."""
    rows = con.execute(
        f"SELECT rank, doc FROM {TABLE} WHERE run_id = ? AND part = ? AND version = ?",
        [run_id, name, version],
    ).fetchall()
    out = {int(r): json.loads(d) for r, d in rows}
    if compute is not None:
        from gpuscope.analysis.store_access import ranks_of

        for r in ranks_of(con, run_id):
            if r not in out:
                out[r] = finite(compute(con, run_id, r))
    return dict(sorted(out.items()))


def cross_rank(con: Connection, run_id: str) -> dict[int, Any]:
    """Every rank's cross-rank part (:mod:`gpuscope.analysis.rank_frames`), by rank: the stored
    rows of its current version, a rank without one computed from its events (not stored)."""
    from gpuscope.analysis import rank_frames

    return read(con, run_id, rank_frames.NAME, rank_frames.VERSION, rank_frames.compute)
