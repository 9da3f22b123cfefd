"""The modules analysis as it was before it read the rank in batches: every activity of the
window in one frame, every host op of the rank in another (a brute-force reference for
tests/test_modules_batched.py; its results are the batched analysis's, to the last digit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from gpuscope.analysis.event_classes import KERNEL_CATS, OPTIMIZER_RE
from gpuscope.analysis.modules import (
    BACKWARD_OP_PREFIX,
    MODULE_PREFIX,
    NO_MODULE,
    WINDOW_END,
    ModuleRow,
    ModulesResult,
    Repeat,
    _common_prefix,
    _contains_run,
    innermost,
    phase_at,
    step_phase_rows,
    tandem_repeats,
)
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import execute
from gpuscope.store import Connection


def _host_spans(con: Connection, run_id: str, rank: int, where: str) -> pd.DataFrame:
    """Timed host events of the rank matching ``where`` (on ``e`` = events, ``n`` = names)."""
    return con.execute(
        f"""SELECT e.tid, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e, n.name, e.cat, e.seq_num, e.fwd_tid
            FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
            WHERE e.run_id = ? AND e.rank = ? AND e.ph = 'X' AND e.dur_ns IS NOT NULL AND ({where})
            ORDER BY e.ts_ns""",
        [
            run_id,
            int(rank),
        ],
    ).df()


def _indexed_spans(ix: RankIndex, where: str) -> pd.DataFrame:
    """Timed host spans of the rank's index (ops, annotations, Python functions) whose name or
    category satisfies ``where`` (on ``h`` = the host table, ``n`` = names): no scan of ``events``."""
    return execute(
        ix.con,
        f"""SELECT h.tid, h.ts_ns AS s, h.ts_ns + h.dur_ns AS e, n.name, h.cat
            FROM {ix.host()} h JOIN names n ON n.run_id = $run AND n.name_id = h.name_id
            WHERE h.ph = 'X' AND h.dur_ns IS NOT NULL AND ({where})
            ORDER BY h.ts_ns""",
        ix.params(),
    ).df()


def reference_phase_spans(ix: RankIndex, window: Window) -> pd.DataFrame:
    ev = _indexed_spans(
        ix,
        "h.cat IN ('cpu_op', 'user_annotation') AND (regexp_matches(n.name, "
        f"'{OPTIMIZER_RE}') OR starts_with(n.name, '{BACKWARD_OP_PREFIX}') "
        "OR regexp_matches(n.name, '(?i)^(optimizer|backward)$'))",
    )
    is_opt = ev["name"].str.match(OPTIMIZER_RE) | ev["name"].str.lower().eq("optimizer")

    # spans sorted by start: those overlapping [a, b) start in [a - the longest span, b)
    def arrays(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int]:
        s_, e_ = df["s"].to_numpy(np.int64), df["e"].to_numpy(np.int64)
        return s_, e_, int((e_ - s_).max()) if len(s_) else 0

    def overlapping(
        arr: tuple[np.ndarray, np.ndarray, int], a: int, b: int
    ) -> tuple[np.ndarray, np.ndarray]:
        s_, e_, longest = arr
        lo, hi = np.searchsorted(s_, a - longest), np.searchsorted(s_, b)
        keep = e_[lo:hi] > a
        return s_[lo:hi][keep], e_[lo:hi][keep]

    opt = arrays(ev[is_opt])
    bwd = arrays(ev[~is_opt])
    rows: list[tuple[int, int, str, int]] = []
    nums = [s.number for s in window.steps] or [0]
    for num, (a, b) in zip(nums, window.step_bounds_ns(), strict=False):
        ins_s, ins_e = overlapping(bwd, a, b)
        has_bwd = len(ins_s) > 0
        bs = max(a, int(ins_s.min())) if has_bwd else b
        be = min(b, int(ins_e.max())) if has_bwd else b
        step_phase_rows(rows, num, a, b, (bs, be) if has_bwd else None, overlapping(opt, a, b))
    return pd.DataFrame(rows, columns=["s", "e", "phase", "step"])


def _activity(ix: RankIndex, dev: int, ws: int, we: int) -> pd.DataFrame:
    """The device's activity in the window, clipped, with its launch (CPU time and thread)."""
    return execute(
        ix.con,
        f"""SELECT greatest(g.s, $ws) AS s, least(g.e, $we) AS e, g.s AS s0, g.correlation,
                   g.name_id, g.cat, r.s AS launch_ns, r.tid AS launch_tid, n.name
            FROM {ix.gpu()} g
            LEFT JOIN {ix.runtime()} r ON r.correlation = g.correlation
            JOIN names n ON n.run_id = $run AND n.name_id = g.name_id
            WHERE g.dev = $dev AND g.s < $we AND g.e > $ws
            ORDER BY g.s, g.correlation""",
        ix.params(ws=ws, we=we, dev=dev),
    ).df()


def _backward_paths(
    ops: pd.DataFrame, mods: pd.DataFrame, mod_paths: list[str | None]
) -> dict[int, str]:
    """Sequence number -> module path of the forward op with that number (its first one)."""
    # forward ops: no forward thread id (older PyTorch) or 0 (torch 2.x); backward ops name theirs
    fwd = ops[
        ops["seq_num"].notna()
        & (ops["fwd_tid"].isna() | ops["fwd_tid"].eq(0))
        & ~ops["name"].str.contains("Backward|autograd::engine", regex=True)
    ]
    if fwd.empty or mods.empty:
        return {}
    fwd = fwd.drop_duplicates("seq_num")
    paths = innermost(
        mods["tid"].to_numpy(),
        mods["s"].to_numpy(),
        mods["e"].to_numpy(),
        mod_paths,  # type: ignore[arg-type]
        fwd["tid"].to_numpy(),
        fwd["s"].to_numpy(),
        join=None,
    )
    return {int(q): p for q, p in zip(fwd["seq_num"], paths, strict=True) if p is not None}


def reference_module_analysis(
    con: Connection, run_id: str, rank: int, window: Window, device: int | None
) -> ModulesResult:
    """GPU time and idle by module and phase, and repeated kernel sequences, on ``device`` over the
    window (see the module docstring)."""
    n = window.n_steps
    res = ModulesResult(source=None, n_steps=n, busy_kernel_ns=0)
    if device is None:
        res.notes.append("no GPU activity in the window")
        return res
    ix = RankIndex.shared(con, run_id, rank)
    ws, we = window.start_ns, window.end_ns
    act = _activity(ix, device, ws, we)
    dur = (act["e"] - act["s"]).to_numpy(np.int64)
    res.busy_kernel_ns = int(dur.sum())
    spans = reference_phase_spans(ix, window)
    launch = act["launch_ns"].to_numpy(dtype=np.float64)
    has_launch = ~np.isnan(launch)
    ph = np.where(has_launch, phase_at(spans, np.nan_to_num(launch).astype(np.int64)), "outside")
    # modules
    mods = _indexed_spans(
        ix, f"h.cat = 'python_function' AND starts_with(n.name, '{MODULE_PREFIX}')"
    )
    labels = [str(x)[len(MODULE_PREFIX) :] for x in mods["name"]]
    paths: list[str | None] = [None] * len(act)
    if not mods.empty:
        res.source = "nn.Module"
        qt = np.nan_to_num(launch).astype(np.int64)
        qtid = act["launch_tid"].fillna(-1).to_numpy(np.int64)
        paths = innermost(
            mods["tid"].to_numpy(np.int64),
            mods["s"].to_numpy(np.int64),
            mods["e"].to_numpy(np.int64),
            labels,
            qtid,
            qt,
        )
        mod_paths = innermost(
            mods["tid"].to_numpy(np.int64),
            mods["s"].to_numpy(np.int64),
            mods["e"].to_numpy(np.int64),
            labels,
            mods["tid"].to_numpy(np.int64),
            mods["s"].to_numpy(np.int64),
        )
        missing = [i for i, p in enumerate(paths) if p is None and has_launch[i]]
        if missing:  # backward: through the autograd node's sequence number
            ops = _host_spans(con, run_id, rank, "e.cat = 'cpu_op' AND e.seq_num IS NOT NULL")
            seq_path = _backward_paths(ops, mods, mod_paths)
            bops = ops[ops["name"].str.startswith(BACKWARD_OP_PREFIX)]
            if seq_path and not bops.empty:
                seqs = innermost(
                    bops["tid"].to_numpy(np.int64),
                    bops["s"].to_numpy(np.int64),
                    bops["e"].to_numpy(np.int64),
                    [str(int(q)) for q in bops["seq_num"]],
                    qtid[missing],
                    qt[missing],
                    join=None,
                )
                for i, q in zip(missing, seqs, strict=True):
                    if q is not None:
                        paths[i] = seq_path.get(int(q))
    else:
        res.notes.append(
            "no nn.Module spans in the trace: record with with_modules=True and with_stack=True "
            "(Kineto writes module spans only with the Python tracer on)"
        )
    # by module (inclusive over the tree) and by phase
    rows: dict[str, ModuleRow] = {}
    # per (module, phase) first (in order of first kernel), then up the module tree
    per = (
        pd.DataFrame({"p": [p or "" for p in paths], "phase": ph, "d": dur})
        .groupby(["p", "phase"], sort=False)["d"]
        .agg(["sum", "count"])
    )
    for (p, phase), tot, cnt in zip(per.index, per["sum"], per["count"], strict=True):
        key = p or NO_MODULE
        parts = key.split("/") if p else [key]
        d, c = int(tot), int(cnt)
        for k in range(1, len(parts) + 1):
            node = "/".join(parts[:k])
            r = rows.setdefault(node, ModuleRow(node, k - 1))
            r.gpu_ns += d
            r.n_kernels += c if k == len(parts) else 0
            r.gpu_by_phase_ns[phase] = r.gpu_by_phase_ns.get(phase, 0) + d
        rows[key].self_gpu_ns += d
        b = res.by_phase.setdefault(str(phase), {"gpu_ns": 0, "idle_ns": 0, "n": 0})
        b["gpu_ns"] += d
        b["n"] += c
    # idle: each gap belongs to the activity that ends it
    gaps_t, _ = ix.gaps(ws, we)
    gaps = con.execute(
        f"SELECT gs, ge, next_corr FROM {gaps_t} WHERE dev = ? ORDER BY gs", [int(device)]
    ).df()
    corr_s = act["correlation"]
    valid = corr_s.notna().to_numpy()
    by_corr = dict(
        zip(
            corr_s[valid].astype("int64").tolist(),
            np.flatnonzero(valid).tolist(),
            strict=True,
        )
    )
    gi_s = gaps["next_corr"].map(by_corr)  # the activity that ends each gap (NaN: none)
    has = gi_s.notna().to_numpy()
    gi_a = gi_s.fillna(0).to_numpy(np.int64)
    gp = pd.DataFrame(
        {
            "p": [(paths[i] or "") if h else None for i, h in zip(gi_a, has, strict=True)],
            "phase": [str(ph[i]) if h else "other" for i, h in zip(gi_a, has, strict=True)],
            "g": (gaps["ge"] - gaps["gs"]).to_numpy(np.int64),
        }
    )
    idle_per = gp.groupby(["p", "phase"], sort=False, dropna=False)["g"].sum()
    for (p, phase), tot in zip(idle_per.index, idle_per, strict=True):
        g = int(tot)
        at_end = p is None or (isinstance(p, float) and np.isnan(p))
        key = WINDOW_END if at_end else (p or NO_MODULE)
        parts = key.split("/") if not at_end and p else [key]
        for k in range(1, len(parts) + 1):
            node = "/".join(parts[:k])
            rows.setdefault(node, ModuleRow(node, k - 1)).idle_ns += g
        b = res.by_phase.setdefault(str(phase), {"gpu_ns": 0, "idle_ns": 0, "n": 0})
        b["idle_ns"] += g
    res.modules = sorted(rows.values(), key=lambda r: (-r.gpu_ns, r.path))
    _repeats(res, act, window, paths)
    return res


# -- repeated kernel sequences ---------------------------------------------------------------------


def _repeats(
    res: ModulesResult, act: pd.DataFrame, window: Window, paths: list[str | None]
) -> None:
    kern = act["cat"].isin(KERNEL_CATS).to_numpy()
    if not kern.any() or not window.steps:
        return
    bounds = window.step_bounds_ns()
    s0 = act["s0"].to_numpy(np.int64)
    dur = (act["e"] - act["s"]).to_numpy(np.int64)
    ids = act["name_id"].to_numpy(np.int64)
    launch = act["launch_ns"].to_numpy(np.float64)
    step_seqs: list[tuple[np.ndarray, np.ndarray]] = []  # (kernel indexes, name ids) per step
    for a, b in bounds:  # a kernel belongs to the step that launched it (GPU start when unknown)
        t = np.where(np.isnan(launch), s0, launch)
        idx = np.flatnonzero(kern & (t >= a) & (t < b))
        step_seqs.append((idx, ids[idx]))
    sigs = [tuple(x[1].tolist()) for x in step_seqs]
    common = max(set(sigs), key=lambda s: (sigs.count(s), len(s)))
    res.same_sequence_steps = sigs.count(common)
    res.kernels_per_step = len(common)
    ref_idx, ref = next(x for x in step_seqs if tuple(x[1].tolist()) == common)
    names = act["name"].to_numpy(object)
    for start, p, times in tandem_repeats(ref):
        unit = ref[start : start + p]
        steps = sum(1 for _, seq in step_seqs if _contains_run(seq, unit, times))
        cover_idx = ref_idx[start : start + p * times]
        total = float(dur[cover_idx].sum())
        ref_total = float(dur[ref_idx].sum())
        mods = {paths[i].rsplit("/", 1)[0] if paths[i] else None for i in cover_idx}  # type: ignore[union-attr]
        res.repeats.append(
            Repeat(
                length=p,
                times=times,
                steps=steps,
                gpu_ns_per_step=total,
                share_pct=100.0 * total / ref_total if ref_total else 0.0,
                first_kernels=[str(names[i])[:80] for i in ref_idx[start : start + min(p, 3)]],
                module=_common_prefix([m for m in mods if m]) if mods - {None} else None,
            )
        )
