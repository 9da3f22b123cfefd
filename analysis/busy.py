"""GPU busy time: the union of GPU activity intervals, per device and per stream, and a
time-bucketed busy fraction series. All in DuckDB, times in integer ns.

GPU activity (defined once in :mod:`gpuscope.analysis.event_classes`): complete events
(``ph = 'X'``) with ``cat`` in ``GPU_CATS`` (kernels, memcpys, memsets) and a positive duration,
clipped to the window, per device (``device``, falling back to ``pid``). Sync events
(``cuda_sync``), GPU-side annotations and zero-length kernels are not busy. The rows come from the
rank's :class:`~gpuscope.analysis.rank_index.RankIndex`.

One sorted pass gives everything: with activities ordered by start, ``pm`` = the largest end
among the earlier ones (a running max). An activity starting after ``pm`` opens a new busy
interval and ends the gap ``[pm, s)``; the union length is ``sum(max(0, e - max(s, pm)))``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import pandas as pd
from gpuscope.analysis.rank_index import NO_DEVICE, RankBatch, RankIndex, ids_param
from gpuscope.analysis.store_access import (
    bucket_width,
    by_bucket,
    execute,
    pct,
    us,
)

if TYPE_CHECKING:
    from gpuscope.store import Connection


def activity_sql(ix: RankIndex, device_filter: str = "") -> str:
    """GPU activity of ``ix`` overlapping ``[$ws, $we)``, clipped to it: ``dev``, ``stream``,
    ``s``, ``e``, ``correlation``, ``name_id``, ``cat``."""
    return ix.activity_sql(device_filter)


def device_activity(
    ix: RankIndex, start_ns: int, end_ns: int, device: int | None
) -> tuple[str, dict[str, Any]]:
    """The GPU activity of ``device`` (None: every device of the rank) overlapping
    ``[start_ns, end_ns)`` (ns), clipped to it (columns as :func:`activity_sql`), and the named
    parameters it needs (``$run``, ``$rank``, ``$ws``, ``$we``, ``$dev`` with a device)."""
    p = ix.params(ws=int(start_ns), we=int(end_ns))
    if device is None:
        return ix.activity_sql(), p
    return ix.activity_sql("AND dev = $dev"), {**p, "dev": int(device)}


def union_sql(source: str, keys: tuple[str, ...] = ("dev",)) -> str:
    """Merge the intervals ``(s, e)`` of ``source`` (a relation or subquery) within each group of
    ``keys``: maximal disjoint intervals, touching ones joined. Columns: keys, ``s``, ``e``.
    For small relations (evidence spans); the big GPU pass uses :meth:`RankIndex.gaps`."""
    part = f"PARTITION BY {', '.join(keys)}" if keys else ""
    k = ", ".join(keys) + ", " if keys else ""
    # Both window passes must see the rows in one order: equal (s, e) rows are numbered once
    # (rn), else the row that opens a group in the first pass may come after its equals in the
    # second, and the intervals before it join the next group (found by the hypothesis oracle).
    return f"""
        SELECT {k}min(s) AS s, max(e) AS e FROM (
            SELECT {k}s, e, sum(CASE WHEN pm IS NULL OR s > pm THEN 1 ELSE 0 END)
                   OVER ({part} ORDER BY s, e, rn ROWS UNBOUNDED PRECEDING) AS grp
            FROM (
                SELECT {k}s, e, rn, max(e) OVER ({part} ORDER BY s, e, rn
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm
                FROM (
                    SELECT {k}s, e, row_number() OVER ({part} ORDER BY s, e) AS rn
                    FROM ({source}) WHERE e > s
                )
            )
        ) GROUP BY {k}grp
    """


def _params(run_id: str, rank: int, start_ns: int, end_ns: int, **kw: Any) -> dict[str, Any]:
    return {"run": run_id, "rank": int(rank), "ws": int(start_ns), "we": int(end_ns), **kw}


def primary_device(
    con: Connection, run_id: str, rank: int, start_ns: int, end_ns: int
) -> int | None:
    """The device with the most GPU activity time in ``[start_ns, end_ns)`` (ties: lowest id);
    None when no device ran anything."""
    return RankIndex.shared(con, run_id, rank).primary_device(start_ns, end_ns)


@dataclass
class BusySummary:
    """Busy time of one rank over a window of ``window_ns``.

    ``devices``: one row per device with activity (``device``, ``busy_ns``, ``busy_pct``,
    ``active_ns`` = sum of activity durations before the union, ``n_events``). ``streams``: per
    (``device``, ``stream``) the union of that stream's activity (``busy_ns``, ``busy_pct``,
    ``n_events``; no rows when the summary was asked for with ``per_stream=False``). ``device``
    is the primary device (most activity time) and ``busy_ns`` /
    ``busy_pct`` its busy time and share of the window (%).
    """

    window_ns: int
    device: int | None
    busy_ns: int
    busy_pct: float
    devices: pd.DataFrame = field(repr=False)
    streams: pd.DataFrame = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "busy_us": us(self.busy_ns),
            "busy_pct": self.busy_pct,
            "devices": [
                {"device": int(r.device), "busy_us": us(r.busy_ns), "busy_pct": float(r.busy_pct)}
                for r in self.devices.itertuples()
            ],
            "streams": [
                {
                    "device": int(r.device),
                    "stream": int(r.stream),
                    "busy_us": us(r.busy_ns),
                    "busy_pct": float(r.busy_pct),
                    "n_events": int(r.n_events),
                }
                for r in self.streams.itertuples()
            ],
        }


#: The busy summaries, and the busy splits, a rank index keeps (the last asked for; each range
#: and device is one).
MEMO_KEEP = 8


def busy_summary(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    *,
    per_stream: bool = True,
) -> BusySummary:
    """Busy time per device (union across streams) and per stream in ``[start_ns, end_ns)``.
    Computed once per rank index, range and ``per_stream`` (a 1 GB rank's ingest asks four
    times: its parts, then its ``analyze`` document); each call gets copies of the frames."""
    ix = RankIndex.shared(con, run_id, rank)
    ws, we = int(start_ns), int(end_ns)

    def compute() -> BusySummary:
        gaps, dev_table = ix.gaps(ws, we)
        devices = _devices(con, gaps, dev_table, {int(rank): (ws, we)})[int(rank)]
        streams = _stream_busy(con, ix, devices, ws, we) if per_stream else _NO_STREAMS.copy()
        return _summary(we - ws, devices, streams)

    got = ix.memo(("busy_summary", ws, we, bool(per_stream)), compute, keep=MEMO_KEEP)
    return replace(got, devices=got.devices.copy(), streams=got.streams.copy())


def busy_summaries(batch: RankBatch, windows: dict[int, tuple[int, int]]) -> dict[int, BusySummary]:
    """:func:`busy_summary` without the streams (``per_stream=False``) of each rank of ``batch``
    in its own ``[start_ns, end_ns)`` (``windows``: rank -> range), from the batch's tables:
    the same statement for the batch as for one rank."""
    gaps, dev_table = batch.gaps(windows)
    devices = _devices(batch.con, gaps, dev_table, windows)
    return {r: _summary(we - ws, devices[r], _NO_STREAMS.copy()) for r, (ws, we) in windows.items()}


def _summary(window_ns: int, devices: pd.DataFrame, streams: pd.DataFrame) -> BusySummary:
    if devices.empty:
        return BusySummary(window_ns, None, 0, 0.0, devices, streams)
    top = devices.iloc[0]
    busy = int(top["busy_ns"])
    return BusySummary(window_ns, int(top["device"]), busy, pct(busy, window_ns), devices, streams)


def _devices(
    con: Connection, gaps: str, dev_table: str, windows: dict[int, tuple[int, int]]
) -> dict[int, pd.DataFrame]:
    """Per rank of ``windows`` (rank -> range): its devices' busy time in its range (the
    ``devices`` frame of :class:`BusySummary`, most active first), from the gaps tables of
    :meth:`RankIndex.gaps` / :meth:`RankBatch.gaps`."""
    ranks = sorted(windows)
    df = con.execute(
        f"""
        WITH w AS (SELECT unnest($wr) AS rank, unnest($wa) AS ws, unnest($wb) AS we)
        SELECT d.rank, d.dev AS device, (w.we - w.ws - coalesce(g.idle, 0))::BIGINT AS busy_ns,
               d.active_ns, d.n_events, d.n_streams
        FROM (SELECT rank, dev, sum(active_ns)::BIGINT AS active_ns,
                     sum(n_events)::BIGINT AS n_events, count(*) AS n_streams
              FROM {dev_table} GROUP BY rank, dev) d
        JOIN w ON d.rank = w.rank
        LEFT JOIN (SELECT rank, dev, sum(ge - gs) AS idle FROM {gaps} GROUP BY rank, dev) g
          ON g.rank = d.rank AND g.dev = d.dev
        ORDER BY d.rank, d.active_ns DESC, device
        """,
        {
            "wr": ranks,
            "wa": [windows[r][0] for r in ranks],
            "wb": [windows[r][1] for r in ranks],
        },
    ).df()
    rank_col = df.pop("rank").to_numpy()
    out = {}
    for r in ranks:
        one = df[rank_col == r].reset_index(drop=True) if len(ranks) > 1 else df
        one["busy_pct"] = [pct(b, windows[r][1] - windows[r][0]) for b in one["busy_ns"]]
        out[r] = one
    return out


#: ``BusySummary.streams`` of a summary asked for without them (``per_stream=False``).
_NO_STREAMS = pd.DataFrame({
    "device": pd.Series(dtype="int32"),
    "stream": pd.Series(dtype="int64"),
    "n_events": pd.Series(dtype="int64"),
    "busy_ns": pd.Series(dtype="int64"),
    "busy_pct": pd.Series(dtype="float64"),
})  # fmt: skip


def _stream_busy(
    con: Connection, ix: RankIndex, devices: pd.DataFrame, start_ns: int, end_ns: int
) -> pd.DataFrame:
    """Busy time per device and stream in ``[start_ns, end_ns)`` (``BusySummary.streams``)."""
    window_ns = int(end_ns) - int(start_ns)
    gaps, dev_table = ix.gaps(start_ns, end_ns)
    run_id, rank = ix.run_id, ix.rank
    # a device with one stream needs no second pass (its stream is the device)
    multi = [int(d) for d, n in zip(devices["device"], devices["n_streams"], strict=True) if n > 1]
    single = execute(
        con,
        f"""
        SELECT d.dev AS device, d.stream, d.n_events, ($we - $ws - coalesce(g.idle, 0))::BIGINT AS busy_ns
        FROM {dev_table} d
        LEFT JOIN (SELECT dev, sum(ge - gs) AS idle FROM {gaps} GROUP BY dev) g USING (dev)
        WHERE d.dev NOT IN (SELECT unnest($multi))
        """,
        {"ws": int(start_ns), "we": int(end_ns), "multi": multi or [NO_DEVICE]},
    ).df()
    parts = [single]
    if multi:
        parts.append(
            execute(
                con,
                f"""
                SELECT dev AS device, stream, count(*) AS n_events,
                       sum(greatest(0, e - greatest(s, coalesce(pm, s))))::BIGINT AS busy_ns
                FROM (
                    SELECT dev, stream, s, e,
                           max(e) OVER (PARTITION BY dev, stream ORDER BY s, e
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm
                    FROM ({ix.activity_sql("AND dev IN (SELECT unnest($multi))")})
                ) GROUP BY dev, stream
                """,
                _params(run_id, rank, start_ns, end_ns, multi=multi),
            ).df()
        )
    streams = pd.concat([x for x in parts if not x.empty] or [single], ignore_index=True)
    streams = streams.sort_values(["device", "busy_ns", "stream"], ascending=[True, False, True])
    streams = streams.reset_index(drop=True)
    streams["busy_pct"] = [pct(b, window_ns) for b in streams["busy_ns"]]
    return streams


def merged_intervals(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    *,
    device: int | None = None,
    per_stream: bool = False,
) -> pd.DataFrame:
    """Maximal busy intervals ``[s, e)`` (ns) within ``[start_ns, end_ns)``: per device
    (columns ``dev, s, e``), or per device and stream with ``per_stream`` (``dev, stream, s, e``)."""
    activity, p = device_activity(RankIndex.shared(con, run_id, rank), start_ns, end_ns, device)
    keys = ("dev", "stream") if per_stream else ("dev",)
    sql = union_sql(activity, keys) + f" ORDER BY {', '.join(keys)}, s"
    return execute(con, sql, p).df()


def _resolve_device(
    ix: RankIndex, start_ns: int, end_ns: int, device: int | None
) -> tuple[int, bool]:
    """(device id, whether it ran anything in the range)."""
    if device is None:
        prim = ix.primary_device(start_ns, end_ns)
        return (NO_DEVICE, False) if prim is None else (prim, True)
    _, dev_table = ix.gaps(start_ns, end_ns)
    row = ix.con.execute(
        f"SELECT count(*) FROM {dev_table} WHERE dev = ?", [int(device)]
    ).fetchone()
    return int(device), bool(row and row[0])


def busy_series(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    n_buckets: int,
    *,
    device: int | None = None,
) -> pd.DataFrame:
    """Busy fraction per time bucket, for the sawtooth plot.

    ``[start_ns, end_ns)`` is cut into ``n_buckets`` buckets with integer bounds
    ``start + (end - start) * i // n``. Columns: ``bucket`` (0..n-1), ``start_ns``, ``end_ns``,
    ``busy_ns`` (union of GPU activity of ``device``, default the primary device of the range,
    inside the bucket) and ``busy_frac`` = busy_ns / bucket length (0..1; 0 for empty buckets).
    One sorted pass over the range's GPU activity; gaps are spread over buckets by a hash join.
    """
    n = int(n_buckets)
    start_ns, end_ns = int(start_ns), int(end_ns)
    cols = ["bucket", "start_ns", "end_ns", "busy_ns", "busy_frac"]
    if n <= 0 or end_ns <= start_ns:
        return pd.DataFrame(
            {c: pd.array([], dtype="float64" if c == "busy_frac" else "int64") for c in cols}
        )
    ix = RankIndex.shared(con, run_id, rank)
    gaps, _ = ix.gaps(start_ns, end_ns)
    dev, active = _resolve_device(ix, start_ns, end_ns, device)
    d = end_ns - start_ns
    p = {"ws": start_ns, "we": end_ns, "n": n, "d": d, "dev": dev}
    big = "HUGEINT" if (d + 1) * n >= 2**62 else "BIGINT"
    # bucket of time t: the largest k with start + d*k//n <= t, i.e. ((t - start + 1)*n - 1) // d
    k1 = f"CAST((CAST(gs - $ws + 1 AS {big}) * $n - 1) // $d AS BIGINT)"
    k2 = f"CAST((CAST(ge - $ws AS {big}) * $n - 1) // $d AS BIGINT)"
    idle = (
        """
        SELECT b, sum(idle) AS idle FROM (
            SELECT k1 AS b, ge - gs AS idle FROM kg WHERE k1 = k2
            UNION ALL
            SELECT x.b, least(x.ge, bounds.be) - greatest(x.gs, bounds.bs)
            FROM (SELECT gs, ge, unnest(range(k1, k2 + 1)) AS b FROM kg WHERE k2 > k1) x
            JOIN bounds USING (b)
        ) GROUP BY b
        """
        if active
        else "SELECT b, be - bs AS idle FROM bounds"
    )
    sql = f"""
        WITH bounds AS (
            SELECT i AS b, CAST($ws + (CAST($d AS {big}) * i) // $n AS BIGINT) AS bs,
                   CAST($ws + (CAST($d AS {big}) * (i + 1)) // $n AS BIGINT) AS be
            FROM range(0, $n) r(i)
        ),
        kg AS (SELECT gs, ge, {k1} AS k1, {k2} AS k2 FROM {gaps} WHERE dev = $dev),
        idle AS ({idle})
        SELECT bounds.b AS bucket, bs AS start_ns, be AS end_ns,
               CAST(be - bs - coalesce(idle.idle, 0) AS BIGINT) AS busy_ns,
               CASE WHEN be > bs THEN (be - bs - coalesce(idle.idle, 0)) / (be - bs) ELSE 0.0 END
                   AS busy_frac
        FROM bounds LEFT JOIN idle USING (b) ORDER BY bounds.b
    """
    out = execute(con, sql, p).df()
    return out.astype(
        {"bucket": "int64", "start_ns": "int64", "end_ns": "int64", "busy_ns": "int64"}
    )


def busy_in_ranges(
    con: Connection,
    run_id: str,
    rank: int,
    ranges: list[tuple[int, int]],
    *,
    device: int | None = None,
    window: tuple[int, int] | None = None,
) -> list[int]:
    """Busy ns of ``device`` (default: the primary device) inside each ``[start, end)`` range.

    ``window`` (start, end) names the range whose gaps to use (default: the ranges' hull); pass
    the analysis window to reuse the gap table that :func:`busy_summary` built for it."""
    if not ranges:
        return []
    lo, hi = (
        window if window is not None else (min(r[0] for r in ranges), max(r[1] for r in ranges))
    )
    if hi <= lo:
        return [0] * len(ranges)
    ix = RankIndex.shared(con, run_id, rank)
    gaps, _ = ix.gaps(lo, hi)
    dev, active = _resolve_device(ix, lo, hi, device)
    clipped = [(max(int(s), lo), min(int(e), hi)) for s, e in ranges]
    if not active:
        return [0] * len(ranges)
    idle = overlap_by_range(
        con, f"SELECT gs AS s, ge AS e FROM {gaps} WHERE dev = $dev", clipped, lo, hi, {"dev": dev}
    )
    return [max(0, e - s) - idle[k] for k, (s, e) in enumerate(clipped)]


def overlap_by_range(
    con: Connection,
    intervals_sql: str,
    ranges: list[tuple[int, int]],
    lo: int,
    hi: int,
    params: dict[str, Any] | None = None,
) -> list[int]:
    """Total overlap (ns) of each ``[start, end)`` range with the *disjoint* intervals ``s, e``
    of ``intervals_sql`` (all inside ``[lo, hi)``). A hash join on time buckets: no sort of the
    intervals; overlaps are clipped to each shared bucket, so nothing counts twice."""
    bw = bucket_width(lo, hi)
    rows = execute(
        con,
        f"""
        WITH r AS (SELECT unnest($i) AS i, unnest($rs) AS rs, unnest($re) AS re),
        rb AS ({by_bucket("i, rs, re", "rs", "re", "r", "$lo", "$bw")}),
        iv AS (SELECT s, e, (s - $lo) // $bw AS k1, (e - 1 - $lo) // $bw AS k2 FROM ({intervals_sql})),
        ib AS (
            SELECT s, e, k1 AS k FROM iv WHERE k1 = k2
            UNION ALL SELECT s, e, unnest(range(k1, k2 + 1)) FROM iv WHERE k2 > k1
        )
        SELECT rb.i, sum(least(ib.e, rb.re, $lo + (rb.k + 1) * $bw)
                         - greatest(ib.s, rb.rs, $lo + rb.k * $bw))::BIGINT
        FROM ib JOIN rb USING (k)
        WHERE ib.s < rb.re AND ib.e > rb.rs
        GROUP BY rb.i
        """,
        {
            **(params or {}),
            "i": list(range(len(ranges))),
            "rs": [int(r[0]) for r in ranges],
            "re": [int(r[1]) for r in ranges],
            "lo": int(lo),
            "bw": bw,
        },
    ).fetchall()
    out = [0] * len(ranges)
    for i, v in rows:
        out[int(i)] = int(v)
    return out


def comm_only_ns(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    device: int | None,
    busy_ns: int,
) -> int:
    """Time (ns) in ``[start_ns, end_ns)`` when ``device`` ran only communication kernels
    (``ncclDevKernel*``, ``ncclKernel*``, ...): its busy time minus the union of everything else.
    0 without communication kernels (no second pass then)."""
    if device is None:
        return 0
    ix = RankIndex.shared(con, run_id, rank)
    comm = ix.comm_name_ids()
    if not comm:
        return 0
    p = _params(run_id, rank, start_ns, end_ns, dev=int(device), comm=comm)
    row = execute(
        con,
        f"""
        SELECT coalesce(sum(greatest(0, e - greatest(s, coalesce(pm, s)))), 0)::BIGINT FROM (
            SELECT s, e, max(e) OVER (ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                       AS pm
            FROM ({ix.activity_sql("AND dev = $dev AND NOT list_contains($comm, name_id)")})
        )
        """,
        p,
    ).fetchone()
    other = int(row[0]) if row else 0
    return max(0, int(busy_ns) - other)


@dataclass
class BusySplit:
    """The window of one rank's device split four ways (ns), summing exactly to ``window_ns``.

    Precedence where classes overlap (docs/metrics.md "Busy, split"): **compute** (any
    non-communication GPU activity) > communication **transfer** (a matched communication kernel
    after its collective's last rank arrived) > communication **wait** (a matched communication
    kernel before the last rank arrived) > **unmatched** communication (a communication kernel not
    matched across ranks: a run of one rank, a kernel queued before the trace began; wait and
    transfer cannot be told apart) > **idle** (no GPU activity)."""

    window_ns: int
    compute_ns: int
    transfer_ns: int
    wait_ns: int
    idle_ns: int
    unmatched_comm_kernels: int = 0
    unmatched_ns: int = 0

    @property
    def busy_ns(self) -> int:
        return self.compute_ns + self.transfer_ns + self.wait_ns + self.unmatched_ns

    def pct(self, part: int) -> float:
        return pct(part, self.window_ns)

    def to_json(self, n_steps: int = 1) -> dict[str, Any]:
        n = max(1, int(n_steps))
        out: dict[str, Any] = {}
        for k in ("compute", "transfer", "wait", "unmatched", "idle"):
            v = int(getattr(self, f"{k}_ns"))
            out[f"{k}_us"] = us(v)
            out[f"{k}_pct"] = self.pct(v)
            out[f"{k}_ms_per_step"] = v / n / 1e6
        out["unmatched_comm_kernels"] = self.unmatched_comm_kernels
        return out


def busy_split(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    device: int | None,
    waits: pd.DataFrame | None = None,
) -> BusySplit:
    """Compute / transfer / wait / idle of ``device`` in ``[start_ns, end_ns)`` (trace ns).

    ``waits``: this rank's matched communication kernels in trace time: ``start_ns``, ``end_ns``
    (the kernel exactly as stored) and ``wait_ns`` (its wait for the last arriver, from
    :func:`gpuscope.analysis.collectives.match_collectives`); a communication kernel not in it is
    unmatched. Four union lengths in SQL: |C|, |C + T|, |C + T + W| and |all|. Computed once per
    rank index, range, device and ``waits`` (the ingest's ``rank_row`` part, then its ``analyze``
    document: ~0.2 CPU s at 1 GB); each call gets a copy of its own."""
    window = int(end_ns) - int(start_ns)
    if device is None or window <= 0:
        return BusySplit(max(0, window), 0, 0, 0, max(0, window))
    ix = RankIndex.shared(con, run_id, rank)
    w = waits if waits is not None else pd.DataFrame({"start_ns": [], "end_ns": [], "wait_ns": []})
    ks = [int(x) for x in w["start_ns"]] or [NO_DEVICE]
    ke = [int(x) for x in w["end_ns"]] or [NO_DEVICE]
    kw = [int(x) for x in w["wait_ns"]] or [0]
    key = ("busy_split", int(start_ns), int(end_ns), int(device), tuple(ks), tuple(ke), tuple(kw))
    compute = partial(_busy_split, ix, int(start_ns), int(end_ns), int(device), ks, ke, kw)
    got = ix.memo(key, compute, keep=MEMO_KEEP)
    return replace(got)


def _busy_split(
    ix: RankIndex,
    start_ns: int,
    end_ns: int,
    device: int,
    ks: list[int],
    ke: list[int],
    kw: list[int],
) -> BusySplit:
    """:func:`busy_split` computed (``ks``/``ke``/``kw``: the waits' columns, never empty)."""
    con, run_id, rank = ix.con, ix.run_id, ix.rank
    window = end_ns - start_ns
    comm = ids_param(ix.comm_name_ids())
    p = {
        "run": run_id,
        "rank": int(rank),
        "ws": int(start_ns),
        "we": int(end_ns),
        "dev": int(device),
        "comm": comm,
        "ks": ks,
        "ke": ke,
        "kw": kw,
    }

    def union_len(source: str) -> int:
        row = execute(
            con,
            f"""
            SELECT coalesce(sum(greatest(0, e - greatest(s, coalesce(pm, s)))), 0)::BIGINT FROM (
                SELECT s, e, max(e) OVER (ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING
                                          AND 1 PRECEDING) AS pm
                FROM ({source}) WHERE e > s
            )""",
            p,
        ).fetchone()
        return int(row[0]) if row else 0

    act = f"SELECT s, e, name_id FROM {ix.gpu()} WHERE dev = $dev AND s < $we AND e > $ws"
    clip = "greatest(s, $ws) AS s, least(e, $we) AS e"
    compute_src = f"SELECT {clip} FROM ({act}) WHERE NOT list_contains($comm, name_id)"
    matched = f"""
        SELECT a.s, a.e, a.s + k.kw AS m
        FROM ({act}) a
        JOIN (SELECT unnest($ks) AS ks, unnest($ke) AS ke, unnest($kw) AS kw) k
          ON k.ks = a.s AND k.ke = a.e
        WHERE list_contains($comm, a.name_id)
    """
    transfer_src = f"SELECT greatest(m, $ws) AS s, least(e, $we) AS e FROM ({matched})"
    wait_src = f"SELECT greatest(s, $ws) AS s, least(m, $we) AS e FROM ({matched})"
    n_unmatched = execute(
        con,
        f"""SELECT count(*) FROM ({act}) a
            WHERE list_contains($comm, a.name_id) AND NOT EXISTS (
                SELECT 1 FROM (SELECT unnest($ks) AS ks, unnest($ke) AS ke) k
                WHERE k.ks = a.s AND k.ke = a.e)""",
        p,
    ).fetchone()
    c = union_len(compute_src)
    ct = union_len(f"{compute_src} UNION ALL {transfer_src}")
    ctw = union_len(f"{compute_src} UNION ALL {transfer_src} UNION ALL {wait_src}")
    allb = union_len(f"SELECT {clip} FROM ({act})")
    return BusySplit(
        window,
        c,
        ct - c,
        ctw - ct,
        window - allb,
        int(n_unmatched[0]) if n_unmatched else 0,
        allb - ctw,
    )


def _merge(s: Any, e: Any) -> tuple[Any, Any]:
    """Disjoint sorted intervals covering the union of ``[s, e)`` (numpy int64 arrays)."""
    import numpy as np

    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    run_max = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    ends = np.append(idx[1:], s.size) - 1
    return s[idx], run_max[ends]


def _covered(ms: Any, me: Any, t: Any) -> Any:
    """Covered length of the disjoint sorted intervals ``[ms, me)`` below each time in ``t``."""
    import numpy as np

    if ms.size == 0:
        return np.zeros(len(t), dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(me - ms)])
    k = np.searchsorted(ms, t, side="right")  # intervals starting at or before t
    partial = np.where(k > 0, np.minimum(t, me[np.maximum(k - 1, 0)]) - ms[np.maximum(k - 1, 0)], 0)
    return before[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(partial, 0)


def wait_series(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    n_buckets: int,
    device: int | None,
    waits: pd.DataFrame | None,
) -> pd.DataFrame:
    """Communication wait per time bucket, for the sawtooth (the buckets of :func:`busy_series`).

    ``wait_ns``: the part of the bucket in which ``device`` waited in a collective for the last
    rank and did nothing else (the precedence of :class:`BusySplit`: compute and transfer win);
    ``wait_frac`` = wait_ns / bucket length. ``waits`` as in :func:`busy_split`; zeros without."""
    import numpy as np

    n = int(n_buckets)
    start_ns, end_ns = int(start_ns), int(end_ns)
    if n <= 0 or end_ns <= start_ns:
        return pd.DataFrame(
            {"bucket": [], "start_ns": [], "end_ns": [], "wait_ns": [], "wait_frac": []}
        )
    d = end_ns - start_ns
    edges = np.array([start_ns + (d * i) // n for i in range(n + 1)], dtype=np.int64)
    out = pd.DataFrame(
        {
            "bucket": np.arange(n, dtype=np.int64),
            "start_ns": edges[:-1],
            "end_ns": edges[1:],
            "wait_ns": np.zeros(n, dtype=np.int64),
        }
    )
    if device is None or waits is None or waits.empty or not (waits["wait_ns"] > 0).any():
        return out.assign(wait_frac=0.0)
    ix = RankIndex.shared(con, run_id, rank)
    comm = set(ix.comm_name_ids())
    act = execute(
        con,
        f"SELECT s, e, name_id FROM {ix.gpu()} WHERE dev = $dev AND s < $we AND e > $ws",
        {"dev": int(device), "ws": start_ns, "we": end_ns},
    ).df()
    is_comm = act["name_id"].isin(list(comm)).to_numpy()
    a = act.assign(is_comm=is_comm).merge(
        waits.rename(columns={"start_ns": "s", "end_ns": "e", "wait_ns": "kw"})[["s", "e", "kw"]],
        on=["s", "e"],
        how="left",
    )
    s = a["s"].to_numpy(np.int64)
    e = a["e"].to_numpy(np.int64)
    kw = a["kw"].fillna(-1).to_numpy(np.int64)
    matched = a["is_comm"].to_numpy(bool) & (kw >= 0)
    noncomm = ~a["is_comm"].to_numpy(bool)
    ct_s = np.concatenate([s[noncomm], s[matched] + kw[matched]])
    ct_e = np.concatenate([e[noncomm], e[matched]])
    w_s, w_e = s[matched], s[matched] + kw[matched]
    m1 = _merge(ct_s, ct_e)
    m2 = _merge(np.concatenate([ct_s, w_s]), np.concatenate([ct_e, w_e]))
    c1 = _covered(*m1, edges)
    c2 = _covered(*m2, edges)
    wait = np.diff(c2) - np.diff(c1)
    length = np.diff(edges)
    out["wait_ns"] = wait.astype(np.int64)
    out["wait_frac"] = np.where(length > 0, wait / np.maximum(length, 1), 0.0)
    return out
