"""The phase patterns as they were before they read the rank in batches: every span of the
classes read and every launch of the window in memory at once (a brute-force reference for
tests/test_phase_patterns_batched.py; its results are the batched analysis's)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from gpuscope.analysis.event_classes import KERNEL_CATS
from gpuscope.analysis.phase_patterns import (
    _ATEN_NAMES,
    _BACKWARD,
    _BATCHED_OP,
    _CHECKPOINT,
    _LAUNCH_NAMES,
    _OPT_STEP,
    _SPAN_NAMES,
    ALLGATHER_K,
    BATCHED_K,
    COMM_K,
    COMPUTE_K,
    FORWARD_OPS,
    BlockingCopy,
    ExposedAllGather,
    FusableChains,
    OptimizerLoop,
    PhasePatterns,
    Recompute,
    _difference_ns,
    _inside,
    _kernel_kind,
    _outermost,
    _subclass,
    _union_ns,
    blocking_copy_of,
    copies_and_syncs,
    fusable_kernel,
    kernel_op,
    math_kernel,
    rerun_mask,
    sequence_backward,
)
from gpuscope.analysis.rank_index import RankIndex, ids_param, in_ids
from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import RUNTIME_CATS_SQL, execute, sql_list
from gpuscope.store import Connection


def _host_spans(
    con: Connection, ix: RankIndex, params: dict[str, Any], ids: list[int]
) -> list[tuple[Any, ...]]:
    """The window's host spans of the name ids ``ids``: (thread, start, end, name), by thread and
    start."""
    ids = ids_param(ids)
    return execute(
        con,
        f"""
        SELECT h.tid, h.ts_ns AS s, h.ts_ns + h.dur_ns AS e, n.name
        FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
        WHERE h.ph = 'X' AND h.dur_ns IS NOT NULL AND h.cat NOT IN {RUNTIME_CATS_SQL}
          AND h.ts_ns < $hi AND h.ts_ns + h.dur_ns > $lo AND {in_ids("h.name_id", "ids", ids)}
        ORDER BY h.tid, h.ts_ns
        """,
        {**params, "ids": ids},
    ).fetchall()


def reference_phase_patterns(
    con: Connection, run_id: str, rank: int, window: Window | None = None
) -> PhasePatterns:
    """The rank's optimizer loop and recompute in its window (module doc)."""
    from gpuscope.analysis.steps import find_window

    w = window if window is not None else find_window(con, run_id, rank)
    n_steps = max(1, w.n_steps)
    params = {"run": run_id, "rk": int(rank), "lo": int(w.start_ns), "hi": int(w.end_ns)}
    ix = RankIndex.shared(con, run_id, rank)
    spans = _host_spans(con, ix, params, ix.name_ids(_SPAN_NAMES))
    tid = np.array([r[0] for r in spans], dtype=np.int64)
    s = np.array([r[1] for r in spans], dtype=np.int64)
    e = np.array([r[2] for r in spans], dtype=np.int64)
    names = [str(r[3]) for r in spans]
    launch_ids = ids_param(ix.name_ids(_LAUNCH_NAMES))
    got = execute(
        con,
        f"""
        SELECT r.tid, r.s AS t, r.correlation AS corr, k.s AS ks, k.e AS ke, k.name_id
        FROM {ix.runtime()} r JOIN {ix.gpu()} k ON k.correlation = r.correlation
        WHERE k.cat IN {sql_list(KERNEL_CATS)} AND {in_ids("r.name_id", "lids", launch_ids)}
          AND r.s >= $lo AND r.s < $hi
        """,
        {**params, "lids": launch_ids},
    ).fetchnumpy()
    col = {c: np.asarray(got[c], dtype=np.int64) for c in ("tid", "t", "corr", "ks", "ke")}
    l_tid, l_t, l_corr, k_s, k_e = (col[c] for c in ("tid", "t", "corr", "ks", "ke"))
    name_id = np.asarray(got["name_id"], dtype=np.int64)
    # each kernel's kind from its name, read once per distinct name
    ids = [int(i) for i in np.unique(name_id)]
    kinds: dict[int, int] = {}
    k_names: dict[int, str] = {}
    for i, nm in execute(
        con,
        "SELECT name_id, name FROM names WHERE run_id = $run AND list_contains($ids, name_id)",
        {"run": run_id, "ids": ids},
    ).fetchall():
        kinds[int(i)] = _kernel_kind(str(nm))
        k_names[int(i)] = str(nm)
    k_kind = np.array([kinds.get(int(i), COMPUTE_K) for i in name_id], dtype=np.int8)
    annotated = any(_CHECKPOINT.search(n) for n in names)
    # every aten op of the window (the re-runs found by their sequence), then the backward
    # functions, in memory
    aten = _host_spans(con, ix, params, ix.name_ids(_ATEN_NAMES))
    a_tid, a_s, a_e = (np.array([r[c] for r in aten], dtype=np.int64) for c in range(3))
    a_names = [str(r[3]) for r in aten]
    bi = [i for i, n in enumerate(names) if n.startswith(_BACKWARD) and sequence_backward(n)]
    rr = rerun_mask(a_tid, a_s, a_e, a_names, tid[bi], s[bi], e[bi])
    ri = np.flatnonzero(rr)
    # the re-run ops first, then the spans read (the batched analysis's order of its spans)
    f_tid, f_s, f_e = (np.concatenate([x[ri], y]) for x, y in ((a_tid, tid), (a_s, s), (a_e, e)))
    f_names = [a_names[i] for i in ri] + names
    f_extra = np.concatenate([np.ones(ri.size, dtype=bool), np.zeros(len(names), dtype=bool)])
    return PhasePatterns(
        n_steps,
        w.duration_ns,
        _optimizer(tid, s, e, names, l_tid, l_t, l_corr, k_s, k_e, k_kind),
        _recompute(
            f_tid, f_s, f_e, f_names, l_tid, l_t, l_corr, k_s, k_e, n_steps, annotated, f_extra
        ),
        _allgather(tid, s, e, names, l_tid, l_t, k_s, k_e, k_kind, n_steps, w),
        _subclass(con, ix, params, n_steps),
        reference_blocking_copy(con, ix, params, n_steps),
        _chains(tid, s, e, names, l_tid, l_t, l_corr, k_s, k_e, name_id, k_names, n_steps),
    )


def _chains(*args: Any) -> FusableChains | None:
    """Every fusable kernel's chains, with the elementwise-math chains' saving beside them."""
    got = _chains_of(fusable_kernel, *args)
    math = _chains_of(math_kernel, *args)
    if got is None:
        return None
    return replace(got, math_saved_ms_per_step=math.saved_ms_per_step if math else 0.0)


def _chains_of(
    pred: Any,
    tid: Any, s: Any, e: Any, names: list[str], l_tid: Any, l_t: Any, l_corr: Any, k_s: Any,
    k_e: Any, name_id: Any, k_names: dict[int, str], n_steps: int,
) -> FusableChains | None:  # fmt: skip
    """Every launch of the window in (thread, time, correlation) order: runs of fusable kernels
    launched outside the optimizer's steps, two or more."""
    opt = np.flatnonzero(np.array([bool(_OPT_STEP.match(n)) for n in names], dtype=bool))
    in_opt = (
        _inside(tid[opt], s[opt], e[opt], l_tid, l_t) >= 0
        if opt.size
        else np.zeros(l_t.size, dtype=bool)
    )
    chains: list[list[int]] = []
    cur: list[int] = []
    prev = None
    for i in np.lexsort((l_corr, l_t, l_tid)).tolist():
        if l_tid[i] != prev:
            chains.append(cur)
            cur, prev = [], l_tid[i]
        if pred(k_names[int(name_id[i])]) and not in_opt[i]:
            cur.append(i)
        else:
            chains.append(cur)
            cur = []
    chains.append(cur)
    chains = [c for c in chains if len(c) >= 2]
    if not chains:
        return None
    n = max(1, n_steps)
    d = k_e - k_s
    by: dict[tuple[str, ...], list[int]] = {}
    for c in chains:
        key = tuple(kernel_op(k_names[int(name_id[i])]) for i in c)
        got = by.setdefault(key, [0, 0])
        got[0] += int(d[c].sum())
        got[1] += 1
    typical, (_, reps) = max(by.items(), key=lambda kv: (kv[1][0], kv[0]))
    return FusableChains(
        chains_per_step=len(chains) / n,
        kernels_per_step=sum(len(c) for c in chains) / n,
        kernel_ms_per_step=sum(int(d[c].sum()) for c in chains) / n / 1e6,
        fused_ms_per_step=sum(int(d[c].max()) for c in chains) / n / 1e6,
        longest=max(len(c) for c in chains),
        typical=typical,
        typical_per_step=reps / n,
    )


def reference_blocking_copy(
    con: Connection, ix: RankIndex, params: dict[str, Any], n_steps: int
) -> BlockingCopy | None:
    """The pageable H2D copies of the window and the host calls that waited for them
    (:class:`BlockingCopy`), each copy's waiting call found by a scan of every sync of its
    thread from the copy call on."""
    found = copies_and_syncs(con, ix, params)
    if found is None:
        return None
    copies, by_tid = found

    def waiting(ks: Any, ke: Any, t: Any, cs: Any, ce: Any) -> tuple[int, int] | None:
        # the copy call itself when it lasts past the copy, else the first synchronizing call
        # after it that does
        cand = [(int(cs), int(ce))] + [(a, b) for a, b in by_tid.get(int(t), []) if a >= cs]
        return next(((a, b) for a, b in cand if b >= ke), None)

    return blocking_copy_of(copies, [waiting(*c) for c in copies], n_steps)


def _allgather(
    tid: Any, s: Any, e: Any, names: list[str], l_tid: Any, l_t: Any, k_s: Any, k_e: Any,
    k_kind: Any, n_steps: int, w: Window,
) -> ExposedAllGather | None:  # fmt: skip
    comm = (k_kind == COMM_K) | (k_kind == ALLGATHER_K)
    ag = k_kind == ALLGATHER_K
    if not ag.any():
        return None
    lo, hi = int(w.start_ns), int(w.end_ns)
    ks, ke = np.clip(k_s, lo, hi), np.clip(k_e, lo, hi)
    cs, ce = ks[~comm], ke[~comm]
    is_bwd = np.array([n.startswith(_BACKWARD) for n in names], dtype=bool)
    b = np.flatnonzero(is_bwd)
    in_bwd = (
        _inside(tid[b], s[b], e[b], l_tid, l_t) >= 0 if b.size else np.zeros(len(l_t), dtype=bool)
    )
    fwd_ag, bwd_ag = ag & ~in_bwd, ag & in_bwd
    n = max(1, n_steps)
    # an all-gather exposed in both phases at once cannot be: the phases' kernels are apart, so
    # the split sums to the whole (up to overlapping gathers of the two phases, counted once)
    f_ns = _difference_ns(ks[fwd_ag], ke[fwd_ag], cs, ce)
    b_ns = _difference_ns(ks[bwd_ag], ke[bwd_ag], cs, ce)
    return ExposedAllGather(
        forward_ms=f_ns / n / 1e6,
        backward_ms=b_ns / n / 1e6,
        comm_exposed_ms=_difference_ns(ks[comm], ke[comm], cs, ce) / n / 1e6,
        n_per_step=float(ag.sum()) / n,
        kernel_ms_per_step=float((ke - ks)[ag].sum()) / n / 1e6,
    )


def _optimizer(
    tid: Any, s: Any, e: Any, names: list[str], l_tid: Any, l_t: Any, l_corr: Any, k_s: Any,
    k_e: Any, k_kind: Any,
) -> OptimizerLoop | None:  # fmt: skip
    is_opt = np.array([bool(_OPT_STEP.match(n)) for n in names], dtype=bool)
    idx = np.flatnonzero(is_opt)
    if idx.size == 0:
        return None
    o_tid, o_s, o_e = tid[idx], s[idx], e[idx]
    held = _inside(o_tid, o_s, o_e, l_tid, l_t)
    inside = held >= 0
    walls, idles = [], []
    for j in range(idx.size):
        mine = held == j
        ke = k_e[mine]
        end = max(int(o_e[j]), int(ke.max()) if ke.size else 0)
        wall = end - int(o_s[j])
        walls.append(wall)
        # the GPU idle in the wall: no kernel at all runs (another rank's wait or the backward's
        # tail on the GPU is not the optimizer's idle)
        near = (k_e > o_s[j]) & (k_s < end)
        busy = _union_ns(np.clip(k_s[near], o_s[j], end), np.clip(k_e[near], o_s[j], end))
        idles.append(max(0, wall - busy))
    n = int(idx.size)
    durs = (k_e - k_s)[inside]
    batched_op = any(
        _BATCHED_OP.match(names[i])
        for i in range(len(names))
        if not is_opt[i] and _within_any(tid[i], s[i], o_tid, o_s, o_e)
    )
    batched_kernel = bool((k_kind[inside] == BATCHED_K).any())
    return OptimizerLoop(
        name=names[int(idx[0])],
        n=n,
        launches_per_step=float(inside.sum()) / n,
        kernel_ms_per_step=float(durs.sum()) / n / 1e6,
        wall_ms_per_step=float(sum(walls)) / n / 1e6,
        idle_ms_per_step=float(sum(idles)) / n / 1e6,
        median_kernel_us=float(np.median(durs)) / 1e3 if durs.size else None,
        foreach=batched_op or batched_kernel,
        spans=tuple((int(a), int(b), int(c)) for a, b, c in zip(o_tid, o_s, o_e, strict=True)),
        correlations=frozenset(int(c) for c in l_corr[inside]),
    )


def _within_any(t: int, at: int, sp_tid: Any, sp_s: Any, sp_e: Any) -> bool:
    return bool(((sp_tid == t) & (sp_s <= at) & (sp_e >= at)).any())


def _recompute(
    tid: Any, s: Any, e: Any, names: list[str], l_tid: Any, l_t: Any, l_corr: Any, k_s: Any,
    k_e: Any, n_steps: int, annotated: bool, rerun: Any,
) -> Recompute | None:  # fmt: skip
    fwd_set = set(FORWARD_OPS)
    is_bwd = np.array([n.startswith(_BACKWARD) for n in names], dtype=bool) & ~rerun
    is_fwd = np.array([n in fwd_set for n in names], dtype=bool) | rerun
    if not is_bwd.any() or not is_fwd.any():
        return None
    b = np.flatnonzero(is_bwd)
    f = np.flatnonzero(is_fwd)
    holder = _inside(tid[b], s[b], e[b], tid[f], s[f])
    f = f[holder >= 0]
    if f.size == 0:
        return None
    # the holding backward functions (whose saved tensors set the re-run off): the region, and
    # the GPU's idle in it (no kernel at all runs)
    hb = b[np.unique(holder[holder >= 0])]
    region = _union_ns(s[hb], e[hb])
    busy_in = _union_ns(np.concatenate([s[hb], k_s]), np.concatenate([e[hb], k_e]))
    covered = region + _union_ns(k_s, k_e) - busy_in  # region ∩ kernels
    region_idle = max(0, region - covered)
    # the outermost forward ops only (aten::linear holds aten::addmm)
    f = f[_outermost(tid[f], s[f], e[f])]
    held = _inside(tid[f], s[f], e[f], l_tid, l_t)
    got = held >= 0
    by: dict[str, int] = {}
    for i in f:
        by[names[i]] = by.get(names[i], 0) + 1
    n = max(1, n_steps)
    return Recompute(
        ops_per_step=float(f.size) / n,
        host_ms_per_step=float(_union_ns(s[f], e[f])) / n / 1e6,
        region_ms_per_step=region / n / 1e6,
        region_idle_ms_per_step=region_idle / n / 1e6,
        kernel_ms_per_step=float((k_e - k_s)[got].sum()) / n / 1e6,
        by_op=tuple(sorted(((k, v / n) for k, v in by.items()), key=lambda kv: -kv[1])),
        annotated=annotated,
        spans=tuple((int(tid[i]), int(s[i]), int(e[i])) for i in f),
        correlations=frozenset(int(c) for c in l_corr[got]),
    )
