"""A rank's cross-rank part: what a run's many-rank figures need of one rank, computed from that
rank's events alone (at its ingest) and stored with it (:mod:`gpuscope.analysis.rank_summary`,
part ``cross_rank``), so that ``analyze`` and the Run page match the collectives of every rank
and split each rank's busy time without reading any rank's events but the one shown.

The part (a JSON document, :func:`compute`) holds:

- ``window``: the rank's default (ProfilerStep) window and its steps (:class:`steps.Window`),
  ``step_stats`` (:class:`steps.StepStats`);
- ``busy_pct``, ``busy_ns``, ``device``, ``comm_only_ns``, ``idle_ns``, ``idle_causes_ns``,
  ``idle_gaps``: the rank line's figures that need no other rank;
- ``frame``: the rank's collective frame (:func:`collectives.rank_collectives`), column-wise;
- ``offset_ns``: the rank's ``time_offset_ns`` (absolute time = trace time + this);
- ``split``: what :func:`busy.busy_split` needs once each collective's last arrival is known:
  ``compute_ns`` (the union of non-communication activity in the window), ``comm`` (every
  communication kernel of the device overlapping the window, ``[start, end)`` trace ns, as
  stored) and ``uncovered`` (the disjoint sub-intervals of the window where a communication
  kernel runs and no compute does). :func:`split_of` then gives exactly the split that
  :func:`busy.busy_split` computes from the events (the same precedence, integer ns).
  ``comm`` and ``uncovered`` are each two int64 arrays (starts, ends), stored packed
  (:func:`packed`): compute chops a rank's communication kernels into many pieces (the 1 GB
  benchmark rank: 185,500 uncovered intervals, 6.8 MB of JSON numbers and ~15 MB of Python
  ints before; 0.33 MB packed). Parts stored before hold lists of numbers, which read the same.
"""

from __future__ import annotations

import base64
import dataclasses
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from gpuscope.analysis.busy import (
    BusySplit,
    BusySummary,
    _covered,
    _merge,
    busy_summaries,
    busy_summary,
)
from gpuscope.analysis.collectives import (
    FRAME_COLUMNS,
    _typed,
    batch_collective_columns,
    batch_offsets,
    rank_collective_columns,
    rank_offset_ns,
)
from gpuscope.analysis.idle import IdleResult, batch_idle_totals, idle_totals
from gpuscope.analysis.rank_index import RankBatch, RankIndex, ids_param
from gpuscope.analysis.steps import (
    Step,
    StepStats,
    Window,
    find_window,
    find_windows,
    step_stats,
)
from gpuscope.analysis.store_access import execute

if TYPE_CHECKING:
    from gpuscope.store import Connection

NAME = "cross_rank"
# ``split``'s arrays are stored packed (:func:`packed`); a part stored with lists of numbers reads
# the same (:func:`unpacked`). 3: the collective frame holds the group size and the dtype and
# bytes of AllGather/SendRecv kernels (read from ``input_types``/``concrete_inputs``). 4: the
# window leaves out a last step the profiler cut as it began (steps._cut_last_steps) and the
# warm-up steps before it (steps._warmup_steps, ``window.warmup``).
VERSION = 4
#: The columns of ``events`` this part reads (the window, busy, idle, collective frames); the
#: ingest keeps only these of a rank's rows for it (~45 % of their Arrow bytes). A statement
#: that reads another fails loudly on the kept rows (tests/test_parts_while_ingesting.py).
COLUMNS = (
    "run_id", "rank", "ph", "cat", "name_id", "pid", "tid", "ts_ns", "dur_ns", "correlation",
    "external_id", "device", "stream", "grid", "block", "bytes", "input_dims", "input_types",
    "concrete_inputs",
)  # fmt: skip


def packed(a: Any) -> str:
    """An int64 array as JSON-ready text, exactly: its first value and then the differences of
    successive values (wrapping, so any int64 values round-trip), little-endian, zlib, base64.
    :func:`unpacked` reads it back."""
    v = np.ascontiguousarray(a, dtype=np.int64)
    d = np.empty_like(v)
    if v.size:
        d[0] = v[0]
        np.subtract(v[1:], v[:-1], out=d[1:])  # int64 wraps: cumsum wraps back
    return base64.b64encode(zlib.compress(d.astype("<i8", copy=False).tobytes(), 1)).decode()


def unpacked(text: str | list[int]) -> Any:
    """The int64 array of :func:`packed`'s text (or of a list of numbers: a part stored before
    the arrays were packed)."""
    if not isinstance(text, str):
        return np.asarray(text, dtype=np.int64)
    d = np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype="<i8")
    return np.cumsum(d, dtype=np.int64)


def _difference(a_s: Any, a_e: Any, b_s: Any, b_e: Any) -> tuple[Any, Any]:
    """``A \\ B`` of two sets of disjoint sorted ``[s, e)`` intervals (int64 arrays), disjoint
    sorted: the elementary pieces between all endpoints that lie in A and not in B, merged."""
    if a_s.size == 0:
        return a_s, a_e
    pts = np.sort(np.concatenate([a_s, a_e, b_s, b_e]))
    pts = pts[np.concatenate(([True], pts[1:] != pts[:-1]))]  # np.unique, without its hashing
    lo, hi = pts[:-1], pts[1:]

    def inside(s: Any, e: Any) -> Any:
        if s.size == 0:
            return np.zeros(lo.size, dtype=bool)
        k = np.searchsorted(s, lo, side="right") - 1
        return (k >= 0) & (lo < e[np.maximum(k, 0)])

    keep = inside(a_s, a_e) & ~inside(b_s, b_e)
    return _merge(lo[keep], hi[keep])


def split_inputs(
    con: Connection, run_id: str, rank: int, start_ns: int, end_ns: int, device: int | None
) -> dict[str, Any]:
    """``compute_ns``, ``comm`` and ``uncovered`` of the module doc, from one read of the device's
    activity in ``[start_ns, end_ns)``."""
    ix = RankIndex.shared(con, run_id, rank)
    return _splits(con, ix.gpu(), ix.comm_name_ids(), {int(rank): (start_ns, end_ns, device)})[
        int(rank)
    ]


def _splits(
    con: Connection, gpu: str, comm_ids: list[int], of: dict[int, tuple[int, int, int | None]]
) -> dict[int, dict[str, Any]]:
    """:func:`split_inputs` of each rank of ``of`` (rank -> window start, end, device), from one
    read of the GPU activity table ``gpu`` (one rank's, or a batch's)."""
    none = packed(np.empty(0, dtype=np.int64))
    out: dict[int, dict[str, Any]] = {}
    todo = {r: v for r, v in of.items() if v[2] is not None and v[1] > v[0]}
    for r in of:
        if r not in todo:
            out[r] = {"compute_ns": 0, "comm": [none, none], "uncovered": [none, none]}
    if not todo:
        return out
    ranks = sorted(todo)
    act = execute(
        con,
        f"""WITH w AS (SELECT unnest($wr) AS rank, unnest($wd) AS dev, unnest($wa) AS ws,
                              unnest($wb) AS we)
            SELECT g.rank, g.s, g.e, list_contains($comm, g.name_id) AS is_comm
            FROM {gpu} g JOIN w ON g.rank = w.rank AND g.dev = w.dev
            WHERE g.s < w.we AND g.e > w.ws""",
        {
            "wr": ranks,
            "wd": [int(todo[r][2]) for r in ranks],  # type: ignore[arg-type]
            "wa": [int(todo[r][0]) for r in ranks],
            "wb": [int(todo[r][1]) for r in ranks],
            "comm": ids_param(comm_ids),
        },
    ).fetchnumpy()  # arrays, not a DataFrame: ~1 ms less a rank
    rk = np.asarray(act["rank"], dtype=np.int64)
    s_all = np.asarray(act["s"], dtype=np.int64)
    e_all = np.asarray(act["e"], dtype=np.int64)
    c_all = np.asarray(act["is_comm"], dtype=bool)
    for r in ranks:
        start_ns, end_ns = int(todo[r][0]), int(todo[r][1])
        mine = rk == r
        s, e, is_comm = s_all[mine], e_all[mine], c_all[mine]
        cs, ce = np.maximum(s, start_ns), np.minimum(e, end_ns)
        c_s, c_e = _merge(cs[~is_comm], ce[~is_comm])
        m_s, m_e = _merge(cs[is_comm], ce[is_comm])
        u_s, u_e = _difference(m_s, m_e, c_s, c_e)
        order = np.lexsort((e[is_comm], s[is_comm]))
        out[r] = {
            "compute_ns": int((c_e - c_s).sum()),
            "comm": [packed(s[is_comm][order]), packed(e[is_comm][order])],
            "uncovered": [packed(u_s), packed(u_e)],
        }
    return out


def comm_only_of(busy_ns: int, split: dict[str, Any]) -> int:
    """:func:`busy.comm_only_ns` of the window from :func:`split_inputs`' read of the device's
    activity (no second read): the device's busy time minus the union of its non-communication
    activity, which is ``compute_ns`` (without communication kernels that union is the busy
    time, so 0, as there)."""
    return max(0, int(busy_ns) - int(split["compute_ns"]))


def compute(con: Connection, run_id: str, rank: int) -> dict[str, Any]:
    """The rank's cross-rank part (module doc), from its events only: :func:`compute_batch` of a
    batch of one, on the rank's own index."""
    w = find_window(con, run_id, rank)
    b = busy_summary(con, run_id, rank, w.start_ns, w.end_ns, per_stream=False)
    split = split_inputs(con, run_id, rank, w.start_ns, w.end_ns, b.device)
    idle = idle_totals(con, run_id, rank, w, device=b.device) if b.device is not None else None
    cols = rank_collective_columns(con, run_id, rank, w)
    return _document(w, b, split, idle, cols, rank_offset_ns(con, run_id, rank))


def compute_batch(batch: RankBatch) -> dict[int, dict[str, Any]]:
    """:func:`compute` of every rank of ``batch`` (rank -> part), each piece from one statement
    of each kind for the whole batch: the windows, busy summaries, split inputs, idle totals,
    collective frames and time offsets. The same statements serve one rank (a batch of one);
    none of them runs rank by rank here."""
    windows = find_windows(batch)
    spans = {r: (w.start_ns, w.end_ns) for r, w in windows.items()}
    busy = busy_summaries(batch, spans)
    splits = _splits(
        batch.con,
        batch.gpu(),
        batch.comm_name_ids(),
        {r: (*spans[r], busy[r].device) for r in batch.ranks},
    )
    idle = batch_idle_totals(
        batch, windows, {r: b.device for r, b in busy.items() if b.device is not None}
    )
    offsets = batch_offsets(batch)
    frames = batch_collective_columns(batch, windows, offsets)
    return {
        r: _document(windows[r], busy[r], splits[r], idle.get(r), frames[r], offsets[r])
        for r in batch.ranks
    }


def _document(
    w: Window,
    b: BusySummary,
    split: dict[str, Any],
    idle: IdleResult | None,
    cols: dict[str, list[Any]],
    offset_ns: int,
) -> dict[str, Any]:
    return {
        "window": {
            "start_ns": w.start_ns,
            "end_ns": w.end_ns,
            "source": w.source,
            "annotation": w.annotation,
            "steps": [[s.number, s.cpu_start_ns, s.cpu_end_ns, s.gpu_end_ns] for s in w.steps],
            "warmup": list(w.warmup),
        },
        "step_stats": dataclasses.asdict(step_stats(w)),
        "device": b.device,
        "busy_pct": b.busy_pct if b.device is not None else None,
        "busy_ns": b.busy_ns,
        "comm_only_ns": comm_only_of(b.busy_ns, split),
        "idle_ns": idle.total_ns if idle is not None else None,
        "idle_gaps": idle.n_gaps if idle is not None else None,
        "idle_causes_ns": dict(idle.causes_ns) if idle is not None else None,
        "offset_ns": offset_ns,
        "frame": cols,
        "split": split,
    }


def window_of(part: dict[str, Any]) -> Window:
    """The rank's window as :func:`steps.find_window` gave it."""
    d = part["window"]
    steps = [
        Step(int(n), int(a), int(b), None if g is None else int(g)) for n, a, b, g in d["steps"]
    ]
    warmup = tuple(int(n) for n in d.get("warmup", ()))
    return Window(int(d["start_ns"]), int(d["end_ns"]), steps, d["source"], d["annotation"], warmup)


def stats_of(part: dict[str, Any]) -> StepStats:
    """The rank's step statistics (:func:`steps.step_stats` of its window, as computed at ingest)."""
    return StepStats(**part["step_stats"])


def idle_of(part: dict[str, Any]) -> IdleResult | None:
    """The rank's idle total and causes (no gaps, no evidence), None without GPU activity."""
    if part["idle_ns"] is None:
        return None
    w = window_of(part)
    return IdleResult(
        w.duration_ns,
        w.n_steps,
        part["device"],
        int(part["idle_ns"]),
        int(part["idle_gaps"]),
        {str(k): int(v) for k, v in part["idle_causes_ns"].items()},
    )


def frame_of(part: dict[str, Any]) -> pd.DataFrame:
    """The rank's collective frame, typed as :func:`collectives.rank_collectives` returns it."""
    return _typed(pd.DataFrame({c: part["frame"][c] for c in FRAME_COLUMNS}))


def frames_of(parts: dict[int, dict[str, Any]]) -> pd.DataFrame:
    """Every rank's collective frame as one frame (ranks in ``parts``' order): what
    :func:`collectives.match_collectives` concatenates, typed once."""
    cols: dict[str, list[Any]] = {c: [] for c in FRAME_COLUMNS}
    for p in parts.values():
        for c in FRAME_COLUMNS:
            cols[c] += p["frame"][c]
    return _typed(pd.DataFrame(cols))


def _as_list(v: Any) -> list[Any]:
    return v.tolist() if hasattr(v, "tolist") else list(v)


def split_of(part: dict[str, Any], waits: Any) -> BusySplit:
    """:func:`busy.busy_split` of the rank's window from its part: ``waits`` as busy_split takes
    them (trace ns: ``start_ns``, ``end_ns``, ``wait_ns``: a DataFrame, or a dict of arrays);
    the same figures, integer ns."""
    d = part["window"]
    ws, we = int(d["start_ns"]), int(d["end_ns"])
    window = we - ws
    if part["device"] is None or window <= 0:
        return BusySplit(max(0, window), 0, 0, 0, max(0, window))
    sp = part["split"]
    kw_of: dict[tuple[int, int], list[int]] = {}
    if waits is not None:
        for ks, ke, kw in zip(
            _as_list(waits["start_ns"]),
            _as_list(waits["end_ns"]),
            _as_list(waits["wait_ns"]),
            strict=True,
        ):
            kw_of.setdefault((int(ks), int(ke)), []).append(int(kw))
    ms, me, mm = [], [], []  # the matched kernels (a kernel matched twice counts twice, as in SQL)
    n_unmatched = 0
    for cs, ce in zip(
        unpacked(sp["comm"][0]).tolist(), unpacked(sp["comm"][1]).tolist(), strict=True
    ):
        kws = kw_of.get((cs, ce))
        if kws is None:
            n_unmatched += 1
            continue
        for kw in kws:
            ms.append(cs)
            me.append(ce)
            mm.append(cs + kw)
    # transfer parts [max(m, ws), min(e, we)) and wait parts [max(s, ws), min(m, we)), measured
    # where no compute runs (exact integer ns; numpy: a run page reads every rank's part)
    s_, m_, e_ = (np.asarray(v, dtype=np.int64) for v in (ms, mm, me))
    t_s, t_e = np.maximum(m_, ws), np.minimum(e_, we)
    w_s, w_e = np.maximum(s_, ws), np.minimum(m_, we)
    u_s, u_e = (unpacked(v) for v in sp["uncovered"])

    def in_uncovered(lo: Any, hi: Any) -> int:
        """Length of the union of the non-empty ``[lo, hi)`` inside the uncovered intervals."""
        keep = hi > lo
        a_s, a_e = _merge(lo[keep], hi[keep])
        return int((_covered(u_s, u_e, a_e) - _covered(u_s, u_e, a_s)).sum())

    transfer = in_uncovered(t_s, t_e)
    tw = in_uncovered(np.concatenate([t_s, w_s]), np.concatenate([t_e, w_e]))
    uncovered = int((u_e - u_s).sum())
    compute_ns = int(sp["compute_ns"])
    return BusySplit(
        window,
        compute_ns,
        transfer,
        tw - transfer,
        window - compute_ns - uncovered,
        n_unmatched,
        uncovered - tw,
    )
