"""GPU time and idle by ``nn.Module`` and by phase (forward, backward, optimizer); kernel sequences
that repeat inside every step. Definitions: docs/metrics.md, "Modules and phases".

Times are integer ns of trace time. A kernel belongs to the module whose ``nn.Module: X`` span (the
``python_function`` events Kineto writes with ``with_modules`` and the Python tracer on) holds the
CPU call that launched it, innermost first, as a path ``GPT_0/Block_1/MLP_1/Linear_6``. A backward
kernel is launched from the autograd thread, outside any module: it belongs to the module of the
forward op with the same ``Sequence number`` as the backward op that launched it. An idle gap of the
GPU belongs to the module (and phase) of the activity that ends it: the GPU waited for that work.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from gpuscope.analysis.event_classes import KERNEL_CATS, OPTIMIZER_RE
from gpuscope.analysis.rank_index import RankIndex
from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import execute

if TYPE_CHECKING:
    from gpuscope.store import Connection

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "other")
MODULE_PREFIX = "nn.Module: "
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function"
_PHASE_ANNOTATION = re.compile(r"(?i)^(forward|backward|optimizer)$")
NO_MODULE = "(no module)"
WINDOW_END = "(end of window)"
MIN_REPEAT_KERNELS = 2  # a repeated unit has at least this many kernels
MAX_REPEATS = 3


# -- intervals ------------------------------------------------------------------------------------


def innermost(
    tids: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    labels: list[str],
    qtid: np.ndarray,
    qt: np.ndarray,
    *,
    join: str | None = "/",
) -> list[str | None]:
    """For each query (thread ``qtid``, time ``qt``), the label of the innermost span of that thread
    holding ``qt`` (``[start, end)``), or None. ``join``: labels of nested spans are joined into a
    path (``outer/inner``); None keeps the innermost label alone. Spans are taken as nested: each
    span's parent is the nearest earlier span of its thread that still holds its start.

    Vectorised: spans sorted by (thread, start, longest first), parents found with one stack pass,
    then every query starts at the last span that began at or before it and climbs to the first
    ancestor still open (as many numpy rounds as the nesting is deep)."""
    out: list[str | None] = [None] * len(qt)
    n = len(starts)
    if n == 0 or len(qt) == 0:
        return out
    tids = np.asarray(tids, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    order = np.lexsort((-(ends - starts), starts, tids))
    t_s, s_s, e_s = tids[order], starts[order], ends[order]
    parent = np.full(n, -1, dtype=np.int64)
    stack: list[int] = []
    prev_tid = None
    for i in range(n):  # one pass: the open spans of the thread
        if t_s[i] != prev_tid:
            stack, prev_tid = [], t_s[i]
        while stack and e_s[stack[-1]] <= s_s[i]:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    lab = [labels[int(k)] for k in order]
    if join is not None:
        path: list[str] = []
        for i in range(n):
            p = int(parent[i])
            path.append(lab[i] if p < 0 else path[p] + join + lab[i])
        lab = path
    qtid = np.asarray(qtid, dtype=np.int64)
    qt = np.asarray(qt, dtype=np.int64)
    # the last span of the query's thread that started at or before it
    j = np.full(len(qt), -1, dtype=np.int64)
    for tid in np.unique(qtid):
        lo, hi = np.searchsorted(t_s, tid, "left"), np.searchsorted(t_s, tid, "right")
        if hi == lo:
            continue
        m = qtid == tid
        k = np.searchsorted(s_s[lo:hi], qt[m], side="right") - 1
        j[m] = np.where(k >= 0, k + lo, -1)
    live = j >= 0
    while True:  # climb while the span has ended
        jj = np.where(live, j, 0)
        closed = live & (e_s[jj] <= qt)
        if not closed.any():
            break
        j = np.where(closed, parent[jj], j)
        live = j >= 0
    for q in np.flatnonzero(live):
        out[int(q)] = lab[int(j[q])]
    return out


# -- phases ---------------------------------------------------------------------------------------


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


def phase_spans(con: Connection, run_id: str, rank: int, window: Window) -> pd.DataFrame:
    """The phases of each step as CPU-time spans ``s``, ``e`` (ns), ``phase``, ``step``; they tile
    the steps. In a step: ``optimizer`` inside an ``Optimizer.step#``/``Optimizer.zero_grad#``
    annotation (or one named ``optimizer``); ``backward`` from the first to the last end of the
    autograd engine's ops (``autograd::engine::evaluate_function: *``, or an annotation named
    ``backward``); ``forward`` before that; ``other`` after it. A step without backward ops (inference)
    is ``forward`` but for its optimizer spans."""
    ix = RankIndex.shared(con, run_id, rank)
    return ix.memo(
        ("phase_spans", window.start_ns, window.end_ns),
        lambda: _phase_spans(ix, window),
    )


def _phase_spans(ix: RankIndex, window: Window) -> pd.DataFrame:
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
        o_s, o_e = overlapping(opt, a, b)
        ospans = [(max(a, int(s)), min(b, int(e))) for s, e in zip(o_s, o_e, strict=True)]
        cuts = sorted({a, b, *(x for sp in ospans for x in sp), bs, be})
        for x, y in itertools.pairwise(cuts):
            if y <= x:
                continue
            mid = (x + y) / 2
            if any(s <= mid < e for s, e in ospans):
                ph = "optimizer"
            elif not has_bwd or mid < bs:
                ph = "forward"
            elif mid < be:
                ph = "backward"
            else:
                ph = "other"
            if rows and rows[-1][2] == ph and rows[-1][1] == x and rows[-1][3] == num:
                rows[-1] = (rows[-1][0], y, ph, num)
            else:
                rows.append((x, y, ph, num))
    return pd.DataFrame(rows, columns=["s", "e", "phase", "step"])


def phase_at(spans: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """The phase of each CPU time in ``t`` (ns); ``outside`` out of every step."""
    if spans.empty:
        return np.full(len(t), "outside", dtype=object)
    s = spans["s"].to_numpy(np.int64)
    e = spans["e"].to_numpy(np.int64)
    idx = np.searchsorted(s, np.asarray(t, dtype=np.int64), side="right") - 1
    ok = (idx >= 0) & (np.asarray(t) < e[np.clip(idx, 0, None)])
    ph = spans["phase"].to_numpy(object)[np.clip(idx, 0, None)]
    return np.where(ok, ph, "outside")


# -- the result -----------------------------------------------------------------------------------


@dataclass
class ModuleRow:
    """One module (a path of the module tree): GPU time of the activity it launched, inclusive of
    its children (``gpu_ns``, by phase in ``gpu_by_phase_ns``) and of its own (``self_gpu_ns``);
    GPU idle that ended with its work (``idle_ns``, inclusive); activities launched; depth (0 =
    top)."""

    path: str
    depth: int
    gpu_ns: int = 0
    self_gpu_ns: int = 0
    idle_ns: int = 0
    n_kernels: int = 0
    gpu_by_phase_ns: dict[str, int] = field(default_factory=dict)

    def per_step(self, n_steps: int, busy_ns: int) -> ModuleLine:
        """The module over ``n_steps`` steps, with its share of ``busy_ns`` (the window's kernel
        time, ns): what the Run page shows and ``analyze --json`` writes."""
        per = max(1, n_steps) * 1e3
        return ModuleLine(
            module=self.path,
            depth=self.depth,
            gpu_us_per_step=self.gpu_ns / per,
            self_gpu_us_per_step=self.self_gpu_ns / per,
            gpu_pct=100.0 * self.gpu_ns / busy_ns if busy_ns else None,
            idle_us_per_step=self.idle_ns / per,
            kernels_per_step=self.n_kernels / max(1, n_steps),
            gpu_us_per_step_by_phase={
                p: self.gpu_by_phase_ns.get(p, 0) / per
                for p in (*PHASES, "outside")
                if self.gpu_by_phase_ns.get(p)
            },
        )

    def to_json(self, n_steps: int, busy_ns: int) -> dict[str, Any]:
        return dataclasses.asdict(self.per_step(n_steps, busy_ns))


@dataclass(frozen=True)
class ModuleLine:
    """One module per step (``analyze --json``'s ``modules.modules[]``): its path and depth, GPU
    time inclusive of its children and of its own, GPU idle that ended with its work (µs per
    step), its share of the window's kernel time (%; None without kernels), activities launched
    per step, and its GPU time by phase (µs per step; the phases it has time in)."""

    module: str
    depth: int
    gpu_us_per_step: float
    self_gpu_us_per_step: float
    gpu_pct: float | None
    idle_us_per_step: float
    kernels_per_step: float
    gpu_us_per_step_by_phase: dict[str, float]


@dataclass(frozen=True)
class PhaseLine:
    """One phase per step (``modules.by_phase``): GPU time of the work launched in it (µs per
    step; % of the window's kernel time, None without kernels), idle that ended with it (µs per
    step), activities per step."""

    gpu_us_per_step: float
    gpu_pct: float | None
    idle_us_per_step: float
    kernels_per_step: float


@dataclass
class Repeat:
    """A kernel sequence of ``length`` kernels that runs ``times`` times back to back in a step, in
    ``steps`` of the window's steps; ``gpu_ns`` per step (mean) and its share of the step's kernel time."""

    length: int
    times: int
    steps: int
    gpu_ns_per_step: float
    share_pct: float
    first_kernels: list[str]
    module: str | None = None

    @property
    def gpu_us_per_step(self) -> float:
        """GPU time of the sequence per step (µs, mean)."""
        return self.gpu_ns_per_step / 1e3

    def to_json(self) -> dict[str, Any]:
        return {
            "kernels": self.length,
            "times_per_step": self.times,
            "steps": self.steps,
            "gpu_us_per_step": self.gpu_us_per_step,
            "share_pct": self.share_pct,
            "first_kernels": self.first_kernels,
            "module": self.module,
        }


@dataclass
class ModulesResult:
    """GPU time and idle by module and by phase over the window; repeated kernel sequences."""

    source: str | None  # "nn.Module" or None: no module spans in the trace
    n_steps: int
    busy_kernel_ns: int  # sum of the activities' durations on the device in the window
    modules: list[ModuleRow] = field(default_factory=list)
    by_phase: dict[str, dict[str, int]] = field(default_factory=dict)
    same_sequence_steps: int = 0
    kernels_per_step: int | None = None
    repeats: list[Repeat] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def view(self) -> ModulesView:
        """The modules per step, as the Run page shows them (and ``to_json`` writes them)."""
        per = max(1, self.n_steps) * 1e3
        busy = self.busy_kernel_ns
        return ModulesView(
            source=self.source,
            gpu_us_per_step=busy / per,
            modules=tuple(m.per_step(self.n_steps, busy) for m in self.modules),
            by_phase={
                p: PhaseLine(
                    gpu_us_per_step=v.get("gpu_ns", 0) / per,
                    gpu_pct=100.0 * v.get("gpu_ns", 0) / busy if busy else None,
                    idle_us_per_step=v.get("idle_ns", 0) / per,
                    kernels_per_step=v.get("n", 0) / max(1, self.n_steps),
                )
                for p, v in self.by_phase.items()
            },
            same_sequence_steps=self.same_sequence_steps,
            kernels_per_step=self.kernels_per_step,
            repeats=tuple(self.repeats),
            notes=tuple(self.notes),
        )

    def to_json(self) -> dict[str, Any]:
        v = self.view()
        return {
            "source": v.source,
            "gpu_us_per_step": v.gpu_us_per_step,
            "modules": [dataclasses.asdict(m) for m in v.modules],
            "by_phase": {p: dataclasses.asdict(x) for p, x in v.by_phase.items()},
            "same_sequence_steps": v.same_sequence_steps,
            "kernels_per_step": v.kernels_per_step,
            "repeats": [r.to_json() for r in v.repeats],
            "notes": list(v.notes),
        }


@dataclass(frozen=True)
class ModulesView:
    """The Run page's modules section (``analyze --json``'s ``modules``): where module spans
    come from (None: none in the trace), the window's kernel time (µs per step), every module
    (:class:`ModuleLine`, inclusive, tree order) and phase (:class:`PhaseLine`), how many steps
    launch the same kernel sequence and how many kernels that is, the repeated sequences
    (:class:`Repeat`), and the notes."""

    source: str | None
    gpu_us_per_step: float
    modules: tuple[ModuleLine, ...]
    by_phase: dict[str, PhaseLine]
    same_sequence_steps: int
    kernels_per_step: int | None
    repeats: tuple[Repeat, ...]
    notes: tuple[str, ...]


# -- the analysis ---------------------------------------------------------------------------------


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


def module_analysis(
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
    spans = phase_spans(con, run_id, rank, window)
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


def tandem_repeats(
    seq: np.ndarray, min_len: int = MIN_REPEAT_KERNELS
) -> list[tuple[int, int, int]]:
    """Back-to-back repeats in ``seq`` (ints): (start, unit length, times), largest cover first, up
    to :data:`MAX_REPEATS` that do not overlap. Of equal covers the shorter unit wins: four
    transformer layers are one layer × 4, not two layers × 2 (a unit made of a shorter repeated
    unit always has the shorter one's cover too)."""
    n = len(seq)
    found: list[tuple[int, int, int]] = []  # (cover, -p, start) candidates
    for p in range(min_len, n // 2 + 1):
        eq = seq[p:] == seq[:-p]  # eq[i]: seq[i] == seq[i + p]
        if not eq.any():
            continue
        # runs of True of length >= p: a unit of length p repeated (run // p) + 1 times
        padded = np.concatenate(([False], eq, [False]))
        d = np.diff(padded.astype(np.int8))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        for st, en in zip(starts.tolist(), ends.tolist(), strict=True):
            run = en - st
            if run >= p:
                times = run // p + 1
                found.append((times * p, -p, st))
    found.sort(key=lambda f: (-f[0], -f[1], f[2]))
    out: list[tuple[int, int, int]] = []
    taken = np.zeros(n, dtype=bool)
    for cover, negp, s0 in found:
        s = int(s0)
        if taken[s : s + cover].any():
            continue
        p = -negp
        out.append((s, p, cover // p))
        taken[s : s + cover] = True
        if len(out) >= MAX_REPEATS:
            break
    return out


def _contains_run(seq: np.ndarray, unit: np.ndarray, times: int) -> bool:
    """Whether ``seq`` holds ``unit`` ``times`` times back to back."""
    pat = np.tile(unit, times)
    m = len(pat)
    if m > len(seq):
        return False
    w = np.lib.stride_tricks.sliding_window_view(seq, m)
    return bool((w == pat).all(axis=1).any())


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


def _common_prefix(paths: list[str]) -> str | None:
    parts = [p.split("/") for p in paths]
    out = []
    for xs in zip(*parts, strict=False):
        if len(set(xs)) != 1:
            break
        out.append(xs[0])
    return "/".join(out) or None
