"""Idle gaps of a device and their causes, from evidence in the trace.

A **gap** is a maximal interval of the window in which the device runs no GPU activity (kernel,
memcpy, memset on any stream). Every ns of every gap is attributed to exactly one cause, so the
causes sum exactly to the idle time (integer ns). Precedence (docs/metrics.md):

1. ``launch_overhead`` – the activity that ends the gap had been launched (its runtime call had
   returned) before the gap began, and the gap is at most :data:`LAUNCH_GAP_MAX_NS`: the GPU had
   work queued and still idled. A longer gap with queued work is ``other``.
2. Otherwise the host was late, and each instant of the gap goes to the first of these host
   states that holds at that instant (on any host thread of the rank):
   ``data_loading`` (inside a DataLoader ``__next__``), ``pageable_copy`` (inside a memcpy call
   whose copy is host-to-device from pageable memory), ``communication`` (inside a collective),
   ``host_sync`` (inside a synchronizing runtime call), ``cpu_overhead`` (inside any other traced
   host span, or the steps' CPU extent), else ``other``.
3. A gap that began while the host was blocked in a synchronizing call (the queue was drained by
   it) gives its ``cpu_overhead`` and ``other`` time to ``host_sync``.

Everything is computed in DuckDB with set-based SQL: interval unions by a sorted running max, and
the overlap of each gap with each nested union of host evidence by one sorted sweep (the covered
length up to ``t`` is ``sum(±boundary) + t * open``, exact and independent of tie order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
from gpuscope.analysis.busy import NO_DEVICE
from gpuscope.analysis.event_classes import CAUSES, EVIDENCE_CLASSES
from gpuscope.analysis.rank_index import (
    RankBatch,
    RankIndex,
    close_shared,
    ids_param,
    in_ids,
    name_class,
)
from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import (
    COMM_RE,
    DATALOADER_RE,
    HOST_CATS_SQL,
    MEMCPY_API_RE,
    OP_CATS_SQL,
    PAGEABLE_D2H_RE,
    PAGEABLE_H2D_RE,
    PROFILER_STEP_RE,
    RUNTIME_CATS_SQL,
    SYNC_APIS,
    SYNC_SLACK_NS,
    execute,
    names_matching,
    pct,
    regex,
    sql_list,
    us,
)
from gpuscope.vocabulary.causes import (
    COMMUNICATION,
    CPU_OVERHEAD,
    DATA_LOADING,
    HOST_SYNC,
    LAUNCH_OVERHEAD,
    OTHER,
    PAGEABLE_COPY,
)

if TYPE_CHECKING:
    from gpuscope.store import Connection

LAUNCH_GAP_MAX_NS = 100_000
"""Longest gap (ns) with the next activity already queued that still counts as launch overhead."""


#: The classes of names that can make a host span evidence: a SQL condition on ``name`` each.
NAME_CLASSES: dict[str, str] = {
    "dl": name_class(regex(DATALOADER_RE)),
    "comm": name_class(regex(COMM_RE)),
    "sync_api": name_class(f"name IN {sql_list(SYNC_APIS)}"),
    "memcpy": name_class(regex(MEMCPY_API_RE)),
}
#: The names of pageable copies' GPU activity (host-to-device, device-to-host).
COPY_CLASSES: dict[str, str] = {
    "h2d": name_class(regex(PAGEABLE_H2D_RE)),
    "d2h": name_class(regex(PAGEABLE_D2H_RE)),
}


def _name_params(ix: RankIndex) -> dict[str, list[int]]:
    """The name ids of :data:`NAME_CLASSES` and :data:`COPY_CLASSES` (``$dl``, ``$comm``, ...,
    and ``$evidence``: the names of any of the four evidence classes), as list parameters."""
    sets = {k: ix.name_ids(cond) for k, cond in (NAME_CLASSES | COPY_CLASSES).items()}
    sets["evidence"] = sorted({i for k in NAME_CLASSES for i in sets[k]})
    return {k: ids_param(v) for k, v in sets.items()}


def _evidence_sql(gpu: str, host: str, names: dict[str, list[int]]) -> str:
    """Host evidence spans of each rank's window (the relation ``w`` of :data:`_WINDOWS`),
    classes 1..4 of :data:`EVIDENCE_CLASSES`: ``rank``, ``cls``, ``cat``, ``name_id``, ``tid``,
    ``s``/``e`` (clipped to the window), ``span_s``/``span_dur`` (unclipped), ``correlation``,
    ``external_id``, ``bytes`` (of the copy, for memcpy calls). One statement: the candidate
    spans (``cand``, materialized once: both of its readers scan it), then their classes. The
    names of each class come as parameters (``names``: :func:`_name_params`)."""

    def has(k: str, col: str = "e.name_id") -> str:
        return in_ids(col, k, names[k])

    flags = ", ".join(f"{has(k)} AS {k}" for k in NAME_CLASSES)
    cand = f"""
        SELECT e.rank, e.cat, e.name_id, e.tid, greatest(e.ts_ns, w.ws) AS s,
               least(e.ts_ns + e.dur_ns, w.we) AS e, e.ts_ns AS span_s, e.dur_ns AS span_dur,
               e.correlation, e.external_id, {flags},
               e.cat IN {RUNTIME_CATS_SQL} AS rt
        FROM {host} e JOIN w ON e.rank = w.rank
        WHERE {has("evidence")} AND e.ph = 'X' AND e.cat IN {HOST_CATS_SQL}
          AND e.dur_ns > 0 AND e.ts_ns < w.we AND e.ts_ns + e.dur_ns > w.ws
    """
    return f"""
        WITH w AS ({_WINDOWS}),
        cand AS MATERIALIZED ({cand}),
        mc AS (SELECT DISTINCT rank, correlation FROM cand WHERE rt AND memcpy),
        gmem AS (
            SELECT g.rank, g.correlation,
                   bool_or({has("h2d", "g.name_id")}) AS h2d,
                   bool_or({has("d2h", "g.name_id")}) AS d2h,
                   sum(g.bytes)::BIGINT AS bytes
            FROM mc JOIN {gpu} g ON g.rank = mc.rank AND g.correlation = mc.correlation
            GROUP BY g.rank, g.correlation
        )
        SELECT c.rank,
               CASE
                 WHEN dl THEN 1
                 WHEN rt AND memcpy AND coalesce(gmem.h2d, false) THEN 2
                 WHEN comm THEN 3
                 WHEN rt AND (sync_api OR (memcpy AND coalesce(gmem.d2h, false))) THEN 4
               END AS cls,
               cat, name_id, tid, s, e, span_s, span_dur, correlation, external_id, gmem.bytes
        FROM cand c LEFT JOIN gmem USING (rank, correlation)
        WHERE cls IS NOT NULL
    """


#: Each rank's idle attribution: ``rank``, its window ``[ws, we)``, its device ``dev``, the steps'
#: CPU extent ``[hs, he)`` (NULL without steps), from list parameters (:func:`_window_params`):
#: one row for one rank, one per rank of a batch.
_WINDOWS = """
    SELECT unnest($wr) AS rank, unnest($wa) AS ws, unnest($wb) AS we, unnest($wd) AS dev,
           unnest($wh)::BIGINT AS hs, unnest($wk)::BIGINT AS he
"""


def _window_params(
    specs: dict[int, tuple[int, int, int, int | None, int | None]],
) -> dict[str, Any]:
    """:data:`_WINDOWS`' parameters of ``specs`` (rank -> ws, we, dev, hs, he)."""
    ranks = sorted(specs)
    return {
        "wr": ranks,
        "wa": [int(specs[r][0]) for r in ranks],
        "wb": [int(specs[r][1]) for r in ranks],
        "wd": [int(specs[r][2]) for r in ranks],
        "wh": [specs[r][3] for r in ranks],
        "wk": [specs[r][4] for r in ranks],
    }


#: The tables of one idle attribution (one device, window and steps' extent), built together:
#: ``ev`` the classified evidence spans, ``g`` the device's gaps with their
#: launch, ``sh`` the shares of its host-late gaps (:func:`host_late_shares`), ``idle`` (a view,
#: made on first use by :func:`_gap_view`) ns per cause per gap.
IDLE_TABLES: tuple[str, ...] = ("ev", "g", "sh", "idle")


def _build(ix: RankIndex, p: dict[str, Any], key: tuple[Any, ...]) -> dict[str, str]:
    """The idle tables (:data:`IDLE_TABLES`) of ``key`` on the rank's index, built once: the
    statements of a batch (:func:`batch_idle_totals`) over a batch of one."""

    def build(t: dict[str, str]) -> None:
        gaps, dev_table = ix.gaps(p["ws"], p["we"])
        _fill(ix, gaps, dev_table, {ix.rank: _spec_of(p)}, t)

    return ix.tables(key, IDLE_TABLES, build)


def _spec_of(p: dict[str, Any]) -> tuple[int, int, int, int | None, int | None]:
    return (p["ws"], p["we"], p["dev"], p.get("hs"), p.get("he"))


def _fill(
    src: Any,
    gaps: str,
    dev_table: str,
    specs: dict[int, tuple[int, int, int, int | None, int | None]],
    t: dict[str, str],
) -> None:
    """Create the idle tables ``t`` (``ev``, ``g``, ``sh``, each with ``rank``) of every rank of
    ``specs`` (rank -> window start, end, device, steps' CPU start, end), from ``src``'s working
    tables (a rank's index, or a batch's) and the gaps tables of the ranks' windows."""
    con = src.con
    names = _name_params(src)
    wp = _window_params(specs)
    evidence = _evidence_sql(src.gpu(), src.host(), names)
    execute(con, f"CREATE TEMP TABLE {t['ev']} AS {evidence}", {**wp, **names})
    # each gap of the rank's device (the whole window where the device ran nothing in it) with
    # the launch call of the activity that ends it: the first such call (by start, then end)
    # where one correlation id is on several, none where the launch is not in the trace (queued
    # before the profiler started) or the gap has no next activity. One statement: an inner
    # join plus an anti join (no outer join: slow in parallel)
    execute(
        con,
        f"""
        CREATE TEMP TABLE {t["g"]} AS
        WITH w AS ({_WINDOWS}),
        act AS (SELECT DISTINCT rank, dev FROM {dev_table}),
        gg AS (
            SELECT x.rank, x.gs, x.ge, x.next_corr, x.next_name
            FROM {gaps} x JOIN w ON x.rank = w.rank AND x.dev = w.dev
            UNION ALL
            SELECT w.rank, w.ws, w.we, NULL::BIGINT, NULL::INTEGER
            FROM w ANTI JOIN act ON act.rank = w.rank AND act.dev = w.dev
        ),
        nc AS (SELECT DISTINCT rank, next_corr FROM gg WHERE next_corr IS NOT NULL),
        rt AS (
            SELECT r.rank, r.correlation, r.s AS ts_ns, r.e AS te, r.name_id
            FROM {src.runtime()} r JOIN w ON r.rank = w.rank
            JOIN nc ON nc.rank = r.rank AND nc.next_corr = r.correlation
            WHERE r.s < w.we
            QUALIFY row_number() OVER (PARTITION BY r.rank, r.correlation ORDER BY r.s, r.e) = 1
        )
        SELECT gg.rank, gg.gs, gg.ge, gg.next_corr, gg.next_name, rt.ts_ns AS launch_s,
               rt.te AS launch_e, rt.name_id AS launch_name,
               coalesce(rt.te <= gg.gs, false) AS queued
        FROM gg JOIN rt ON rt.rank = gg.rank AND rt.correlation = gg.next_corr
        UNION ALL
        SELECT gg.rank, gs, ge, next_corr, next_name, NULL, NULL, NULL, false
        FROM gg ANTI JOIN rt ON rt.rank = gg.rank AND rt.correlation = gg.next_corr
        """,
        wp,
    )
    # nested unions of host evidence: level k = classes 1..k (k <= 4); level 5 adds every other
    # host span, the steps' CPU extent [hs, he) counting as one span (the training loop);
    # level 6 = synchronizing calls widened by the slack, to tell gaps drained by a sync
    host = execute(
        con,
        f"""WITH w AS ({_WINDOWS})
            SELECT h.rank, greatest(h.ts_ns, w.ws) AS s, least(h.ts_ns + h.dur_ns, w.we) AS e
            FROM {src.host()} h JOIN w ON h.rank = w.rank
            WHERE h.ph = 'X' AND h.cat IN {HOST_CATS_SQL} AND h.dur_ns > 0
              AND h.ts_ns < w.we AND h.ts_ns + h.dur_ns > w.ws
              AND (w.hs IS NULL OR h.ts_ns < w.hs OR h.ts_ns + h.dur_ns > w.he)""",
        wp,
    ).fetchnumpy()
    evs = con.execute(
        f"SELECT rank, s, e, cls FROM {t['ev']} WHERE s IS NOT NULL AND e IS NOT NULL"
    ).fetchnumpy()
    late = con.execute(f"SELECT rank, gs, ge FROM {t['g']} WHERE NOT queued").fetchnumpy()
    h_rank, e_rank, l_rank = (_ints64(x["rank"]) for x in (host, evs, late))
    parts = []
    for r, (ws, we, _dev, hs, he) in specs.items():
        h, v, g = h_rank == r, e_rank == r, l_rank == r
        one = host_late_shares(
            _ints64(late["gs"])[g],
            _ints64(late["ge"])[g],
            _ints64(evs["s"])[v],
            _ints64(evs["e"])[v],
            _ints64(evs["cls"])[v],
            _ints64(host["s"])[h],
            _ints64(host["e"])[h],
            None if hs is None else (max(int(hs), ws), min(int(he), we)),  # type: ignore[arg-type]
        )
        parts.append(pa.table({"rank": np.full(len(one["gs"]), r, dtype=np.int64), **one}))
    src_name = f"{t['sh']}_src"  # the index's own name: no other table's
    # as Arrow, not a DataFrame: DuckDB reads a registered DataFrame through its pandas scan,
    # ~3 ms more a rank (benchmarks/part_cost.py)
    con.register(src_name, pa.concat_tables(parts))
    try:
        con.execute(
            f"CREATE TEMP TABLE {t['sh']} AS SELECT *, {_DOMINANT} AS cause FROM {src_name}"
        )
    finally:
        con.unregister(src_name)


def _gap_view(ix: RankIndex, t: dict[str, str]) -> dict[str, str]:
    """``t`` with its ``idle`` view made (once per build of the family: the view's name is
    unique to it). Made on first use, not with the tables: a rank's part needs only the totals
    (~1 ms a small rank)."""

    def make() -> bool:
        # every gap: queued ones are launch overhead (or other when long), swept ones have their
        # shares, every other host-late gap is wholly cpu_overhead
        lo = LAUNCH_GAP_MAX_NS
        ix.con.execute(
            f"""
            CREATE TEMP VIEW {t["idle"]} AS
            WITH c AS (
                SELECT g.gs AS start_ns, g.ge AS end_ns, g.ge - g.gs AS dur_ns, g.queued,
                       coalesce(sh.drained, false) AS drained, g.next_corr, g.next_name, g.launch_name,
                       g.launch_s, g.launch_e, CASE WHEN g.queued THEN g.gs - g.launch_e END AS queued_for_ns,
                       CASE WHEN g.queued AND g.ge - g.gs <= {lo} THEN g.ge - g.gs ELSE 0 END
                           AS launch_overhead_ns,
                       coalesce(sh.data_loading_ns, 0) AS data_loading_ns,
                       coalesce(sh.pageable_copy_ns, 0) AS pageable_copy_ns,
                       coalesce(sh.communication_ns, 0) AS communication_ns,
                       coalesce(sh.host_sync_ns, 0) AS host_sync_ns,
                       CASE WHEN g.queued THEN 0 WHEN sh.gs IS NULL THEN g.ge - g.gs
                            ELSE sh.cpu_overhead_ns END AS cpu_overhead_ns,
                       CASE WHEN g.queued AND g.ge - g.gs > {lo} THEN g.ge - g.gs
                            ELSE coalesce(sh.other_ns, 0) END AS other_ns
                FROM {t["g"]} g LEFT JOIN {t["sh"]} sh ON sh.rank = g.rank AND sh.gs = g.gs
            )
            SELECT *, {_DOMINANT} AS cause FROM c
            """
        )
        return True

    ix.memo(("idle_view", t["idle"]), make)
    return t


def _ints64(a: Any) -> np.ndarray:
    """A fetched column (no NULLs: the queries leave them out) as int64."""
    return np.asarray(a, dtype=np.int64)


def host_late_shares(
    gs: np.ndarray,
    ge: np.ndarray,
    ev_s: np.ndarray,
    ev_e: np.ndarray,
    ev_cls: np.ndarray,
    host_s: np.ndarray,
    host_e: np.ndarray,
    hull: tuple[int, int] | None,
) -> dict[str, np.ndarray]:
    """How each host-late gap ``[gs, ge)`` (ns) splits by cause, from the host's evidence: the
    covered length of each nested level inside the gap, level k (1..4) the union of the evidence
    spans of classes 1..k, level 5 that plus every other host span (``host_s``/``host_e``, already
    clipped to the window) and the steps' CPU extent ``hull``; a gap whose start lies in a sync
    call widened by :data:`SYNC_SLACK_NS` (``s < gs <= e + slack``) was drained by it.

    Columns (a dict of arrays, in this order): ``gs``, ``dur``, ``drained``, then ns per cause in
    :data:`CAUSES` order (launch overhead 0: a host-late gap is not queued). Exact integer ns; the
    causes sum to ``dur``.
    (An interval sweep in SQL before; the same numbers, property-tested against a brute force.)"""
    from gpuscope.analysis.busy import _covered, _merge

    def inside(ms: np.ndarray, me: np.ndarray) -> np.ndarray:
        return np.asarray(_covered(ms, me, ge) - _covered(ms, me, gs), dtype=np.int64)

    lens = [inside(*_merge(ev_s[ev_cls <= k], ev_e[ev_cls <= k])) for k in range(1, 5)]
    extra_s = [host_s, ev_s] + ([np.array([hull[0]], np.int64)] if hull is not None else [])
    extra_e = [host_e, ev_e] + ([np.array([hull[1]], np.int64)] if hull is not None else [])
    lens.append(inside(*_merge(np.concatenate(extra_s), np.concatenate(extra_e))))
    l1, l2, l3, l4, l5 = lens
    sync = ev_cls == 4
    s6, e6 = _merge(ev_s[sync], ev_e[sync] + SYNC_SLACK_NS)
    k = np.searchsorted(s6, gs, side="left") - 1  # the last widened sync starting before gs
    drained = (k >= 0) & (e6[np.maximum(k, 0)] >= gs) if s6.size else np.zeros(gs.size, bool)
    dur = ge - gs
    ns = {
        LAUNCH_OVERHEAD: np.zeros(gs.size, dtype=np.int64),
        DATA_LOADING: l1,
        PAGEABLE_COPY: l2 - l1,
        COMMUNICATION: l3 - l2,
        HOST_SYNC: np.where(drained, dur - l3, l4 - l3),
        CPU_OVERHEAD: np.where(drained, 0, l5 - l4),
        OTHER: np.where(drained, 0, dur - l5),
    }
    by_cause = {f"{c}_ns": np.asarray(ns[c], dtype=np.int64) for c in CAUSES}  # precedence order
    return {"gs": gs, "dur": dur, "drained": np.asarray(drained, dtype=bool), **by_cause}


# the cause with the most ns in a gap; CASE takes the first match, so ties go by precedence
_DOMINANT = (
    "CASE greatest("
    + ", ".join(f"{c}_ns" for c in CAUSES)
    + ") "
    + " ".join(f"WHEN {c}_ns THEN '{c}'" for c in CAUSES)
    + " END"
)


@dataclass
class IdleResult:
    """Idle time of one device over a window (ns), split by cause.

    ``causes_ns`` sums exactly to ``total_ns``. ``gaps_by_cause``: number of gaps whose dominant
    cause (most ns; ties by precedence) is each cause. ``top``: the longest gaps with evidence
    (columns as :func:`idle_gaps`). ``evidence``: per host evidence class, the spans seen in the
    window (``name``, ``op``, ``count``, ``host_ns``, ``bytes``), for recommendations.
    """

    window_ns: int
    n_steps: int
    device: int | None
    total_ns: int
    n_gaps: int
    causes_ns: dict[str, int]
    gaps_by_cause: dict[str, int] = field(default_factory=dict)
    evidence: dict[str, pd.DataFrame] = field(repr=False, default_factory=dict)
    top: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)

    def cause_pct(self, cause: str) -> float:
        """A cause's idle time as % of the window."""
        return pct(self.causes_ns.get(cause, 0), self.window_ns)

    def cause_per_step_ns(self, cause: str) -> float:
        """A cause's idle time per step, ns."""
        return self.causes_ns.get(cause, 0) / max(1, self.n_steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "total_us": us(self.total_ns),
            "pct": pct(self.total_ns, self.window_ns),
            "per_step_us": us(self.total_ns / max(1, self.n_steps)),
            "n_gaps": self.n_gaps,
            "causes": {c: us(self.causes_ns[c]) for c in CAUSES},
            "causes_pct": {c: self.cause_pct(c) for c in CAUSES},
            "gaps_by_cause": {c: self.gaps_by_cause.get(c, 0) for c in CAUSES},
            "top_gaps": gaps_to_json(self.top),
        }


def gaps_to_json(gaps: pd.DataFrame) -> list[dict[str, Any]]:
    """Gap rows (with evidence columns when present) as JSON objects, times in µs."""
    out = []
    for r in gaps.to_dict("records"):
        d: dict[str, Any] = {
            "start_us": us(r["start_ns"]),
            "end_us": us(r["end_ns"]),
            "duration_us": us(r["dur_ns"]),
            "step": _int(r.get("step")),
            "cause": r["cause"],
            "causes": {c: us(r[f"{c}_ns"]) for c in CAUSES if r[f"{c}_ns"]},
            "next": _str(r.get("next")),
            "prev": _str(r.get("prev")),
            "evidence": None,
        }
        if _str(r.get("evidence_name")) is not None:
            d["evidence"] = {
                "name": r["evidence_name"],
                "cat": _str(r.get("evidence_cat")),
                "op": _str(r.get("evidence_op")),
                "start_us": us(r["evidence_start_ns"]),
                "duration_us": us(r["evidence_dur_ns"]),
                "overlap_us": us(r.get("evidence_overlap_ns")),
                "queued_for_us": us(_int(r.get("queued_for_ns"))),
            }
        out.append(d)
    return out


def _int(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def _str(v: Any) -> str | None:
    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def _evidence_summary(
    con: Connection, p: dict[str, Any], t: dict[str, str]
) -> dict[str, pd.DataFrame]:
    """Per evidence class: span names (runtime calls named with their enclosing op), count, host
    time and bytes copied, from the evidence table ``t["ev"]``."""
    host = RankIndex.shared(con, p["run"], p["rank"]).host()
    frame = execute(
        con,
        f"""
        WITH ops AS (
            SELECT external_id, arg_min(name_id, dur_ns) AS op_name FROM {host}
            WHERE cat IN {OP_CATS_SQL}
              AND external_id IN (SELECT external_id FROM {t["ev"]} WHERE external_id IS NOT NULL)
            GROUP BY external_id
        )
        SELECT ev.cls, n.name, on_.name AS op, count(*) AS count,
               sum(ev.span_dur)::BIGINT AS host_ns, sum(ev.bytes)::BIGINT AS bytes
        FROM {t["ev"]} ev
        JOIN names n ON n.run_id = $run AND n.name_id = ev.name_id
        -- the runtime call's op: an equality on one key (NULL for other spans: no match), so a
        -- hash join; "ops.external_id = ev.external_id AND ev.cat IN (...)" made a nested loop
        -- join (1.8 s on a 1 GB rank)
        LEFT JOIN ops
          ON ops.external_id = CASE WHEN ev.cat IN {RUNTIME_CATS_SQL} THEN ev.external_id END
        LEFT JOIN names on_ ON on_.run_id = $run AND on_.name_id = ops.op_name
        GROUP BY ALL ORDER BY ev.cls, host_ns DESC, n.name
        """,
        p,
    ).df()
    out = {}
    for k, cls in enumerate(EVIDENCE_CLASSES, start=1):
        sub = frame.loc[frame["cls"] == k, ["name", "op", "count", "host_ns", "bytes"]]
        out[cls] = sub.reset_index(drop=True)
    return out


def _attach_evidence(
    ix: RankIndex, p: dict[str, Any], t: dict[str, str], gaps: pd.DataFrame
) -> pd.DataFrame:
    """For the given gap rows: the host span that best explains the dominant cause, and the GPU
    activity that ended where the gap starts (``prev``)."""
    cols = {
        "prev": "str",
        "evidence_name": "str",
        "evidence_cat": "str",
        "evidence_op": "str",
        "evidence_start_ns": "Int64",
        "evidence_dur_ns": "Int64",
        "evidence_overlap_ns": "Int64",
    }
    if gaps.empty:
        return gaps.assign(**{c: pd.Series([], dtype=t) for c, t in cols.items()})
    cls_of = {c: k for k, c in enumerate(EVIDENCE_CLASSES, start=1)}
    q = {
        **p,
        "gs": [int(v) for v in gaps["start_ns"]],
        "ge": [int(v) for v in gaps["end_ns"]],
        "cls": [cls_of.get(c, 0) for c in gaps["cause"]],
        "drn": [bool(v) for v in gaps["drained"]],
        "any": [c == CPU_OVERHEAD for c in gaps["cause"]],
    }
    steps = names_matching(regex(PROFILER_STEP_RE))
    ev = execute(
        ix.con,
        f"""
        WITH q AS (
            SELECT unnest($gs) AS gs, unnest($ge) AS ge, unnest($cls) AS cls,
                   unnest($drn) AS drn, unnest($any) AS want_any
        ),
        -- evidence classes: the span of the gap's class overlapping it most; for a gap drained
        -- by a sync, the (innermost) synchronizing call it began in
        spec AS (
            SELECT q.gs, ev.name_id, ev.cat, ev.external_id, ev.span_s, ev.span_dur,
                   least(ev.e, q.ge) - greatest(ev.s, q.gs) AS ov,
                   CASE WHEN q.drn AND q.cls = 4 AND ev.s < q.gs THEN 1 ELSE 0 END AS pri
            FROM q JOIN {t["ev"]} ev ON ev.cls = q.cls AND ev.s < q.ge
                 AND (ev.e > q.gs OR (q.drn AND q.cls = 4 AND ev.e + {SYNC_SLACK_NS} >= q.gs))
        ),
        -- cpu overhead: the host span overlapping the gap most (ties: the innermost); a step
        -- annotation only when nothing else is there
        anyh AS (
            SELECT q.gs, e.name_id, e.cat, e.external_id, e.ts_ns AS span_s, e.dur_ns AS span_dur,
                   least(e.ts_ns + e.dur_ns, q.ge) - greatest(e.ts_ns, q.gs) AS ov,
                   CASE WHEN e.name_id IN {steps} THEN -1 ELSE 0 END AS pri
            FROM (SELECT * FROM q WHERE want_any) q
            JOIN {ix.host()} e ON e.ts_ns < q.ge AND e.ts_ns + e.dur_ns > q.gs
            WHERE e.ph = 'X' AND e.cat IN {HOST_CATS_SQL}
              AND e.dur_ns > 0
        ),
        best AS (
            SELECT gs, arg_min({{'n': name_id, 'c': cat, 'x': external_id, 's': span_s,
                                 'd': span_dur, 'ov': ov}},
                               (-pri, CASE WHEN pri = 1 THEN 0 ELSE -ov END, span_dur, -span_s))
                       AS b
            FROM (SELECT * FROM spec UNION ALL SELECT * FROM anyh) GROUP BY gs
        ),
        ops AS (
            SELECT external_id, arg_min(name_id, dur_ns) AS op FROM {ix.host()}
            WHERE cat IN {OP_CATS_SQL}
              AND external_id IN (SELECT b.x FROM best WHERE b.x IS NOT NULL)
            GROUP BY external_id
        ),
        prev AS (
            SELECT e AS gs, arg_min(name_id, s) AS name_id FROM {ix.gpu()}
            WHERE dev = $dev AND e IN (SELECT gs FROM q)
            GROUP BY ALL
        )
        SELECT q.gs AS start_ns, pn.name AS prev, n.name AS evidence_name, b.c AS evidence_cat,
               CASE WHEN b.c IN {RUNTIME_CATS_SQL} THEN opn.name END AS evidence_op,
               b.s AS evidence_start_ns, b.d AS evidence_dur_ns, b.ov AS evidence_overlap_ns
        FROM q
        LEFT JOIN best USING (gs)
        LEFT JOIN names n ON n.run_id = $run AND n.name_id = b.n
        LEFT JOIN ops ON ops.external_id = b.x
        LEFT JOIN names opn ON opn.run_id = $run AND opn.name_id = ops.op
        LEFT JOIN prev USING (gs)
        LEFT JOIN names pn ON pn.run_id = $run AND pn.name_id = prev.name_id
        """,
        q,
    ).df()
    out = gaps.merge(ev, on="start_ns", how="left")
    # launch overhead (or a long wait with work queued): the launch call of the queued activity
    lo = out["queued"].to_numpy(dtype=bool)
    if lo.any():
        out.loc[lo, "evidence_name"] = out.loc[lo, "launch"]
        out.loc[lo, "evidence_cat"] = "runtime"
        out.loc[lo, "evidence_op"] = None
        out.loc[lo, "evidence_start_ns"] = out.loc[lo, "launch_s"]
        out.loc[lo, "evidence_dur_ns"] = out.loc[lo, "launch_e"] - out.loc[lo, "launch_s"]
        out.loc[lo, "evidence_overlap_ns"] = 0
    return out.astype(cols)


def _prepare(
    con: Connection, run_id: str, rank: int, window: Window, device: int | None
) -> tuple[RankIndex, dict[str, Any], int | None, tuple[Any, ...]]:
    ix = RankIndex.shared(con, run_id, rank)
    if device is None:
        device = ix.primary_device(window.start_ns, window.end_ns)
    p = ix.params(**_params_of(window, NO_DEVICE if device is None else int(device)))
    key = ("idle", window.start_ns, window.end_ns, p["dev"], p.get("hs"), p.get("he"))
    return ix, p, device, key


_GAP_COLS = """
    i.start_ns, i.end_ns, i.dur_ns, i.cause, {causes}, i.queued, i.drained, i.queued_for_ns,
    i.launch_s, i.launch_e, nn.name AS next, ln.name AS launch
"""


def _select_gaps(
    con: Connection, p: dict[str, Any], t: dict[str, str], where: str, order: str
) -> pd.DataFrame:
    cols = _GAP_COLS.format(causes=", ".join(f"i.{c}_ns" for c in CAUSES))
    gaps = execute(
        con,
        f"""
        SELECT {cols}
        FROM {t["idle"]} i
        LEFT JOIN names nn ON nn.run_id = $run AND nn.name_id = i.next_name
        LEFT JOIN names ln ON ln.run_id = $run AND ln.name_id = i.launch_name
        {where} {order}
        """,
        p,
    ).df()
    return gaps


def _with_steps(gaps: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Add ``step``: the number of the step the gap starts in (by CPU start)."""
    starts = np.array([s.cpu_start_ns for s in window.steps], dtype=np.int64)
    nums = np.array([s.number for s in window.steps], dtype=np.int64)
    idx = np.searchsorted(starts, gaps["start_ns"].to_numpy(dtype=np.int64), side="right") - 1
    step = pd.array(nums[np.clip(idx, 0, None)] if len(nums) else np.zeros(len(idx)), dtype="Int64")
    step[idx < 0] = pd.NA
    return gaps.assign(step=step)


def clear_cache(con: Connection) -> None:
    """Drop the working tables the analysis keeps on ``con`` (they are rebuilt when needed)."""
    close_shared(con)


Totals = tuple[dict[str, int], int, int, dict[str, int]]


def _totals(con: Connection, t: dict[str, str], ranks: list[int]) -> dict[int, Totals]:
    """Per rank: (ns per cause, idle ns, number of gaps, gaps per dominant cause), without
    touching every gap twice: only the swept gaps carry shares, the rest are sums over the gaps
    table. Three statements for every rank of the tables."""
    lo = LAUNCH_GAP_MAX_NS
    base = {
        int(r[0]): r[1:]
        for r in con.execute(
            f"""
            SELECT rank, count(*), coalesce(sum(ge - gs), 0)::BIGINT,
                   coalesce(sum(ge - gs) FILTER (WHERE queued AND ge - gs <= {lo}), 0)::BIGINT,
                   coalesce(sum(ge - gs) FILTER (WHERE queued AND ge - gs > {lo}), 0)::BIGINT,
                   coalesce(sum(ge - gs) FILTER (WHERE NOT queued), 0)::BIGINT,
                   count(*) FILTER (WHERE queued AND ge - gs <= {lo}),
                   count(*) FILTER (WHERE queued AND ge - gs > {lo}),
                   count(*) FILTER (WHERE NOT queued)
            FROM {t["g"]} GROUP BY rank
            """
        ).fetchall()
    }
    sums = ", ".join(f"coalesce(sum({c}_ns), 0)::BIGINT" for c in CAUSES)
    shs = {
        int(r[0]): r[1:]
        for r in con.execute(
            f"SELECT rank, count(*), coalesce(sum(dur), 0)::BIGINT, {sums} FROM {t['sh']} "
            "GROUP BY rank"
        ).fetchall()
    }
    by_cause: dict[int, list[tuple[str, int]]] = {}
    for r, cause, k in con.execute(
        f"SELECT rank, cause, count(*) FROM {t['sh']} GROUP BY rank, cause"
    ).fetchall():
        by_cause.setdefault(int(r), []).append((str(cause), int(k)))
    out = {}
    for r in ranks:
        n, total, lo_ns, other_q, late, n_lo, n_oq, n_late = (int(v) for v in base.get(r, (0,) * 8))
        sh = shs.get(r, (0,) * (2 + len(CAUSES)))
        n_sh, sh_dur = int(sh[0]), int(sh[1])
        swept = dict(zip(CAUSES, (int(v) for v in sh[2:]), strict=True))
        causes = {c: swept[c] for c in CAUSES}
        causes[LAUNCH_OVERHEAD] = lo_ns
        causes["other"] = other_q + swept["other"]
        causes[CPU_OVERHEAD] = late - sh_dur + swept[CPU_OVERHEAD]
        counts = dict.fromkeys(CAUSES, 0)
        for cause, k in by_cause.get(r, []):
            counts[cause] += k
        counts[LAUNCH_OVERHEAD] += n_lo
        counts["other"] += n_oq
        counts[CPU_OVERHEAD] += n_late - n_sh
        out[r] = (causes, total, n, counts)
    return out


def idle_analysis(
    con: Connection,
    run_id: str,
    rank: int,
    window: Window,
    *,
    device: int | None = None,
    top_n: int = 20,
) -> IdleResult:
    """The gaps of ``device`` (default: the primary device) in ``window``: idle time per cause
    (ns, exact: the causes sum to the idle time) and evidence for the ``top_n`` longest gaps."""
    ix, p, device, key = _prepare(con, run_id, rank, window, device)
    t = _build(ix, p, key)
    top = _select_gaps(
        con,
        {**p, "n": int(top_n)},
        _gap_view(ix, t),
        "",
        "ORDER BY i.dur_ns DESC, i.start_ns LIMIT $n",
    )
    top = _attach_evidence(ix, p, t, _with_steps(top, window))
    # the same window's evidence is asked for by a rank's line and by its report: read once per
    # index (~2.4 s on a 1 GB rank), handed out as copies (callers may change their frames)
    evidence = ix.memo(("idle_evidence", *key[1:]), lambda: _evidence_summary(con, p, t), keep=2)
    evidence = {cls: frame.copy() for cls, frame in evidence.items()}
    return _result(con, t, window, device, rank=int(rank), evidence=evidence, top=top)


def idle_totals(
    con: Connection, run_id: str, rank: int, window: Window, *, device: int | None = None
) -> IdleResult:
    """:func:`idle_analysis` without the top gaps and the evidence: the idle time per cause, its
    total and the number of gaps (what a rank's line of ``ranks`` needs; fewer statements)."""
    ix, p, device, key = _prepare(con, run_id, rank, window, device)
    return _result(con, _build(ix, p, key), window, device, rank=int(rank))


def batch_idle_totals(
    batch: RankBatch, windows: dict[int, Window], devices: dict[int, int]
) -> dict[int, IdleResult]:
    """:func:`idle_totals` of the ranks of ``batch`` that ``devices`` names (rank -> device),
    each in its window, from one statement of each kind for the batch: the statements that
    serve one rank (rank -> result)."""
    if not devices:
        return {}
    specs = {r: _spec_of(_params_of(windows[r], int(dev))) for r, dev in devices.items()}
    # the gaps of every rank's window, as the busy summaries read them (one table for both)
    gaps, dev_table = batch.gaps({r: (w.start_ns, w.end_ns) for r, w in windows.items()})
    key = ("idle", tuple(sorted(specs.items())))  # what the tables hold, as RankIndex's keys
    t = batch.tables(key, IDLE_TABLES[:-1], lambda t: _fill(batch, gaps, dev_table, specs, t))
    totals = _totals(batch.con, t, sorted(specs))
    return {r: _result_of(totals[r], windows[r], devices[r]) for r in specs}


def _params_of(window: Window, dev: int) -> dict[str, Any]:
    """The window's ``ws``/``we``, ``dev``, and the steps' CPU extent ``hs``/``he`` (steps only)."""
    p: dict[str, Any] = {"ws": window.start_ns, "we": window.end_ns, "dev": dev}
    if window.source != "trace" and window.steps:
        p["hs"] = min(s.cpu_start_ns for s in window.steps)
        p["he"] = max(s.cpu_end_ns for s in window.steps)
    return p


def _result(
    con: Connection,
    t: dict[str, str],
    window: Window,
    device: int | None,
    *,
    rank: int,
    **more: Any,
) -> IdleResult:
    """The :class:`IdleResult` of the rank's gap table ``t``: its totals per cause, plus
    ``more`` (``evidence``, ``top``) when given."""
    return _result_of(_totals(con, t, [rank])[rank], window, device, **more)


def _result_of(totals: Totals, window: Window, device: int | None, **more: Any) -> IdleResult:
    causes, total, n_gaps, by_cause = totals
    return IdleResult(
        window_ns=window.duration_ns,
        n_steps=window.n_steps,
        device=device,
        total_ns=total,
        n_gaps=n_gaps,
        causes_ns=causes,
        gaps_by_cause=by_cause,
        **more,
    )


def idle_gaps(
    con: Connection,
    run_id: str,
    rank: int,
    window: Window,
    *,
    device: int | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    min_dur_ns: int = 0,
    limit: int | None = None,
    evidence: bool = True,
) -> pd.DataFrame:
    """Gap rows of ``device`` in ``window`` (optionally only those overlapping
    ``[start_ns, end_ns)`` and at least ``min_dur_ns`` long; the ``limit`` longest when set,
    else all, by start). Columns: ``start_ns``, ``end_ns``, ``dur_ns``, ``cause`` (the cause
    with the most ns; ties by precedence), one ``<cause>_ns`` per cause (summing to
    ``dur_ns``), ``queued`` (the next activity was launched before the gap began), ``drained``
    (the gap began inside a synchronizing call), ``queued_for_ns``, ``launch_s``/``launch_e``
    (that launch call), ``next`` (the activity ending the gap), ``launch`` (its API), ``step``.
    With ``evidence``: ``prev`` (the activity that ended where the gap starts),
    ``evidence_name``, ``evidence_cat``, ``evidence_op`` (the operator enclosing a runtime
    call), ``evidence_start_ns``, ``evidence_dur_ns``, ``evidence_overlap_ns``."""
    ix, p, device, key = _prepare(con, run_id, rank, window, device)
    t = _gap_view(ix, _build(ix, p, key))
    q = {
        **p,
        "lo": window.start_ns if start_ns is None else int(start_ns),
        "hi": window.end_ns if end_ns is None else int(end_ns),
        "min": int(min_dur_ns),
    }
    where = "WHERE i.end_ns > $lo AND i.start_ns < $hi AND i.dur_ns >= $min"
    if limit is not None:
        gaps = _select_gaps(
            con, {**q, "n": int(limit)}, t, where, "ORDER BY i.dur_ns DESC, i.start_ns LIMIT $n"
        )
    else:
        gaps = _select_gaps(con, q, t, where, "ORDER BY i.start_ns")
    gaps = _with_steps(gaps, window)
    if evidence:
        gaps = _attach_evidence(ix, p, t, gaps)
    return gaps.reset_index(drop=True)
