"""Fix unit ``dataloader_workers``: the GPU idles while the training loop makes the next batch."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.gains import ByNode, node_mask, raw_durations
from gpuscope.vocabulary.causes import DATA_LOADING

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant
    from gpuscope.analysis.recommendation import Recommendation

WORDS = Words(
    "Load batches in background workers",
    "The GPU waits while the training loop makes each batch; workers make the next batches while "
    "the GPU computes, each with one BLAS thread (numpy's default is one per core: workers doing "
    "numpy math would fight over the cores).",
    "import os  # the script's first lines, before torch (which loads numpy) is imported,\n"
    'os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # or in the shell; MKL: MKL_NUM_THREADS\n'
    "loader = DataLoader(dataset, batch_size=B, shuffle=True,\n"
    "                    num_workers=8, persistent_workers=True, prefetch_factor=4,\n"
    "                    pin_memory=True)",
)
"""The code's first lines are measured: v139 (PANNs features made per sample in numpy, six workers
on 16 cores of an H200 host) ran 5.3x and 6.7x slower a step with workers than without them (two
recordings), and 81.6 % faster with workers and ``OPENBLAS_NUM_THREADS=1``; v48 (keyword spotting)
3.6x slower and 85.2 % faster; v61, v105, v217 moved 3-6 points (sample_traces/validation/README.md,
"One BLAS thread a worker"). PyTorch limits each worker's own torch threads to one; numpy's
OpenBLAS it does not, and it reads the variable once, when numpy loads (``import torch`` loads it):
a worker forked after that keeps the parent's thread count."""
MORE_WORKERS_TITLE = "Give the DataLoader more workers"
"""The title when the loader has workers already (the same code)."""


def detect(inp: Inputs) -> Finding | None:
    ns, capped = fx.host_cost(inp.idle.causes_ns.get(DATA_LOADING, 0), inp)
    if not fx.significant(ns, inp.window_ns, inp.n_steps):
        return None
    spans = fx.frame_rows(inp, DATA_LOADING, 3)
    multi = inp.dataloader_kind == "multiprocess"
    ev: dict[str, Any] = {
        **fx.cost_evidence("idle", ns, inp),
        "loader": inp.dataloader_kind,
        "spans": spans,
    }
    per = ev["idle_us_per_step"]
    ev["summary"] = (
        f"The GPU waited {sig3(per / 1e3)} ms per step ({sig3(ev['share_pct'])}% of the run) while the "
        f"training loop was inside the DataLoader's __next__"
        + (" (workers could not keep up)." if multi else " (batches are made in the main process).")
    )
    fx.cap_note(ev, capped, inp)
    # the bound: all the time the loop spends in __next__ (the fix shortens nothing else)
    frame = inp.idle.evidence.get(DATA_LOADING)
    in_loader = float(frame["host_ns"].sum()) if frame is not None and not frame.empty else 0.0
    ev["in_loader_us_per_step"] = in_loader / max(1, inp.n_steps) / 1e3
    ev["batch_mb_per_step"] = inp.h2d_bytes_per_step / 1e6
    return Finding(
        ev,
        fx.host_gain_pct(ns, inp),
        bound_pct=fx.host_bound_pct(max(ns, in_loader), inp),
        title=MORE_WORKERS_TITLE if multi else None,
    )


def in_loader(n: Node) -> bool:
    """A host segment inside the DataLoader's ``__next__``."""
    return "dataloader" in n.tags


LEFT = (0.2, 0.05, 0.0)
"""The share of the DataLoader's time the fix leaves in the training loop at the low / mid /
high levels, where the loads kept the GPU waiting (:func:`retime`)."""

HIDDEN_SHARE = 0.1
"""A load during which the GPU was idle for less than this share of its time (the gaps between
its kernels) was hidden: the GPU worked through the loop's queued work all along it
(:func:`retime`). On the validation pairs, the least exposed load of a step that loads a slice
and a stack of a pre-made tensor beside a GPU-bound step: 0.3-4.3 % (v83, v98, v127, v214);
of a loop whose loading is real work (Python, numpy): 62-100 % (v120 62 %, v166 85 %, the rest
95 % or more)."""


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """DataLoader segments × 0.2 / 0.05 / 0 (:data:`LEFT`); where a load of the window was
    hidden (:data:`HIDDEN_SHARE`), × (1 − (1 − :data:`LEFT`) × its exposed share): the fix
    takes off each load no more than the share of it that kept the GPU waiting in the load that
    hid best (:func:`exposed_share`)."""
    m = exposed_share(g)
    if m >= HIDDEN_SHARE:
        m = 1.0
    low, mid, high = (1.0 - (1.0 - left) * m for left in LEFT)
    return fx.scaled_variants(in_loader, low, mid, high)


def exposed_share(g: Graph) -> float:
    """The least share, over the window's loads, of a load's time during which the GPU had no
    work (0..1; 1 without a load). A load: the DataLoader segments between two launches of GPU
    work (one step's ``__next__`` calls; the end of an epoch's and the next one's first,
    together). Read off the trace as recorded, where the profiler slows the host: a load the GPU
    worked through (work the loop queued before it) shows that the loop runs its host ahead of
    its GPU by more than a load, and without the profiler the host is only faster, so every
    step's loading hides as that one did; what the other steps showed exposed was the host the
    profiler held back, or the window's first step, whose GPU work queued before the window is
    not in the graph (the replay starts it on an idle GPU). v83 (a slice and a stack of a
    pre-made tensor before a GPU-bound Wide ResNet step): its three loads 100 %, 93 % and 3.5 %
    exposed (2.51, 3.06 and 1.98 ms); the first on an idle GPU at the window's start, the
    second after a 55 µs launch during which the kernel it launched ran, which the graph reads
    as a wait on the GPU, so that the replay held the host there at every host speed (6.7 %
    told); timed 0.6 % slower with workers."""
    memo = g.memo.get("dataloader_exposed_share")
    if memo is not None:
        return float(memo)
    iv = sorted((n.s, n.e) for n in g.nodes if n.kind == "gpu" and n.e > n.s)
    starts: list[int] = []
    ends: list[int] = []
    before: list[int] = []  # busy time of the merged intervals before each
    total = 0
    for s, e in iv:
        if ends and s <= ends[-1]:
            if e > ends[-1]:
                total += e - ends[-1]
                ends[-1] = e
            continue
        before.append(total)
        starts.append(s)
        ends.append(e)
        total += e - s

    def busy_to(t: int) -> int:
        j = bisect.bisect_right(starts, t) - 1
        return 0 if j < 0 else before[j] + min(t, ends[j]) - starts[j]

    shares: list[float] = []
    dur = idle = 0
    for n in sorted(
        (n for n in g.nodes if n.kind == "host" and (in_loader(n) or "launch_call" in n.tags)),
        key=lambda n: n.s,
    ):
        if in_loader(n):
            dur += n.dur
            idle += n.dur - (busy_to(n.e) - busy_to(n.s))
        elif dur > 0:
            shares.append(idle / dur)
            dur = idle = 0
    if dur > 0:
        shares.append(idle / dur)
    out = min(shares) if shares else 1.0
    g.memo["dataloader_exposed_share"] = out
    return out


RECEIVE_MS_PER_MB = (0.35, 0.25, 0.15)
"""What the training process pays per MB of batch its workers send, at the low / mid / high
levels (ms): a worker collates the batch into shared memory, and the training process maps
those pages anew for every batch, faulting each in as it reads the batch for the copy to the GPU
(about 256 pages a MB). Timed on the pairs whose loading was a slice and a stack of a pre-made
tensor, where workers took no work off the step worth having: v111 -7.8 % of a 27.5 ms step
(8.4 MB a step: 0.26 ms a MB), v127 -15.4 % of 31.1 ms (16.8 MB: 0.28), v214 -8.2 % of 62.9 ms
(18.9 MB: 0.27), v15 -1.8 % of 34.0 ms (3.1 MB: 0.20). The batch's size is every host-to-device
byte of the step (:attr:`~gpuscope.analysis.fixes.base.Inputs.h2d_bytes_per_step`)."""


def advised(rec: Recommendation, g: Graph, ctx: Context) -> dict[str, Variant]:
    """:func:`retime` with the receiving cost (:data:`RECEIVE_MS_PER_MB` × the finding's
    ``batch_mb_per_step``) added to the DataLoader's segments in proportion to their durations,
    so it sits where the batch arrives. A loader with workers already (its trace holds their
    receiving) or a step with no DataLoader segment: :func:`retime`."""
    out = retime(g, ctx)
    ev = rec.evidence or {}
    if ev.get("loader") == "multiprocess":  # its trace holds the receiving already
        return out
    mb = float(ev.get("batch_mb_per_step") or 0.0)
    total = sum(n.dur for n in g.nodes if in_loader(n))
    if mb <= 0 or total <= 0:
        return out
    for level, ms_per_mb in zip(("low", "mid", "high"), RECEIVE_MS_PER_MB, strict=True):
        per = ms_per_mb * mb * 1e6 * ctx.n_steps / total
        base, keep = out[level]
        out[level] = (_plus_loader(base, per), keep)
    return out


def _plus_loader(base: DurFn | None, per: float) -> DurFn:
    """``base`` (None: as recorded) with ``per`` × each DataLoader segment's recorded duration
    added."""

    def dur(v: int, n: Node) -> float:
        d = float(n.dur) if base is None else base(v, n)
        return d + n.dur * per if in_loader(n) else d

    def whole(g: Graph, durs: np.ndarray | None, picked: dict[Any, Any]) -> np.ndarray:
        d = raw_durations(g, base, durs, picked)
        now = raw_durations(g, None, durs, picked)
        return np.where(node_mask(g, "tag:dataloader", in_loader), d + now * per, d)

    return ByNode(dur, whole)


UNIT = FixUnit(
    "dataloader_workers",
    WORDS,
    detect,
    retime,
    advised=advised,
    proof="The fix shortens only the loop's time inside the DataLoader's __next__, so the step "
    "loses at most that time: its share of the untraced step, capped by the untraced step − GPU "
    "busy per step; where the traced step is no longer than the untraced one, its share of the "
    "traced step too, the larger.",
)
