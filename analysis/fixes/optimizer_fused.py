"""Fix unit ``optimizer_fused``: the optimizer step loops over the parameters in Python
(``foreach=False``): many tiny kernels per parameter, the GPU idle between their launches."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.event_classes import OPTIMIZER_STEP_RE
from gpuscope.analysis.fixes.base import (
    Finding,
    FixUnit,
    Inputs,
    Words,
    evidence_json,
    significant,
)
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.phase_patterns import optimizer_nodes

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, Variant

WORDS = Words(
    "Use the fused optimizer step (fused=True)",
    "The optimizer updates each parameter with its own chain of tiny kernels, launched one by one "
    "from Python; the fused (or foreach) step updates them all in a few kernels. torch.compile of "
    "the model does not compile optimizer.step().",
    "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n"
    "# or foreach=True (the default when every parameter is on the GPU; foreach=False loops)",
)

IDLE_SHARE_MIN = 0.3
"""The loop is launch-bound when the GPU idles at least this share of the optimizer step's own
time (its kernels and the idle in its wall)."""


def detect(inp: Inputs) -> Finding | None:
    """An optimizer step that is a per-parameter loop and launch-bound (phase_patterns)."""
    pp = inp.phase
    opt = pp.optimizer if pp is not None else None
    if opt is None or not opt.looped or opt.wall_ms_per_step <= 0:
        return None
    # the cost: the optimizer step's own time on the GPU's timeline (its kernels and the idle
    # between them; not the other work that runs in its wall), per training step
    own = opt.idle_ms_per_step + opt.kernel_ms_per_step
    if opt.idle_ms_per_step < IDLE_SHARE_MIN * own:
        return None
    per_train_step = own * opt.n / max(1, inp.n_steps)
    ns = per_train_step * 1e6 * max(1, inp.n_steps)
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev = evidence_json(
        opt,
        optimizer_ms_per_step=per_train_step,
        share_pct=100.0 * ns / inp.window_ns if inp.window_ns else 0.0,
    )
    ev["summary"] = (
        f"{opt.name} launches {sig3(opt.launches_per_step)} kernels per step one by one "
        f"(median {sig3(opt.median_kernel_us or 0.0)} µs, no foreach or fused kernel): it takes "
        f"{sig3(opt.wall_ms_per_step)} ms per step, the GPU idle {sig3(opt.idle_ms_per_step)} ms "
        "of it."
    )
    # no proven bound: the estimate is the graph's re-timing
    return Finding(ev, ev["share_pct"])


_STEP = re.compile(OPTIMIZER_STEP_RE)

OPS_KEPT = (0.10, 0.01, 0.01)
"""The share (low / mid / high) of the host time in ops and launch calls inside the optimizer step
that the fused step keeps: a few launches instead of a Python loop of them. Read off planted and
fused traces of the 16 looping pairs of ``sample_traces/validation`` on one H200
(``benchmarks/optimizer_fused_split.py``; the fused traces by ``fixed_traces_device.sh``, the
planted variant traced again on the H200 where it was recorded on an H100): fused ÷ loop 0.01 on
14 of them, 0.02 and 0.05 on two, 0.10 on v142 (42 launches a step): the greatest, the median and
the least."""

BOOKKEEPING_KEPT = (0.55, 0.15, 0.08)
"""The share (low / mid / high) of the optimizer step's own Python time (the step's time in no op)
that the fused step keeps: it still walks every parameter in Python to gather its gradient and
state (``_init_group``) before its one fused call, while the loop also runs each parameter's
update in Python around its ops. The same 16 pairs: 0.08-0.22 where the loop launched 700 or more
kernels a step, 0.45 (v30, 114) and 0.55 (v142, 42), where the walk is most of a short step; the
greatest, the median (0.15) and the least."""

KERNELS_KEPT = (0.63, 0.11, 0.02)
"""The share (low / mid / high) of the GPU time of the kernels the optimizer step launches that
the fused step keeps: one pass over the parameters and states where the loop's per-parameter chain
makes several, and one launch where it makes hundreds of tiny kernels. The same 16 pairs: 0.02-0.24
(the large parameters, read and written at the memory's speed, keep the most: v202 0.24, v87
0.23), 0.40 on v30 (26 embedding tables of 20,000 × 32), 0.63 on v142 (42 kernels of a few µs);
the greatest, the median and the least."""


def step_nodes(g: Graph) -> tuple[set[int], set[int], set[int]]:
    """(host nodes inside an ``Optimizer.step`` span that are in an op or a launch call, host
    nodes that are the step's own time in no op (its Python), GPU nodes they launched): what
    ``fused=True`` changes. ``Optimizer.zero_grad``'s nodes are not among them: the fix leaves
    it as it is."""
    hosts, _ = optimizer_nodes(g)
    spans = {
        (getattr(ev, "tid", None), ev.s, ev.e)
        for v in hosts
        if (ev := g.nodes[v].event) is not None and _STEP.match(ev.name)
    }
    ops: set[int] = set()
    own: set[int] = set()
    for v in hosts:
        n = g.nodes[v]
        ev = n.event
        tid = getattr(ev, "tid", None)
        if not any(t == tid and a <= n.s and n.e <= b for t, a, b in spans):
            continue  # zero_grad's, or outside every step span
        (own if ev is not None and _STEP.match(ev.name) else ops).add(v)
    mine = ops | own
    gpus = {
        v
        for v, n in enumerate(g.nodes)
        if n.kind == "gpu" and any(ed.kind == "launch" and ed.src in mine for ed in g.preds[v])
    }
    return ops, own, gpus


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Inside the optimizer step: host work in ops and launch calls × :data:`OPS_KEPT` (a few
    launches instead of a loop), the step's own Python × :data:`BOOKKEEPING_KEPT` (the walk over
    the parameters stays), its kernels × :data:`KERNELS_KEPT` (one pass over the parameters and
    states), low / mid / high. ``zero_grad`` unchanged."""
    ops, own, gpus = step_nodes(g)

    def dur(h: float, p: float, k: float) -> Any:
        def f(v: int, n: Node) -> float:
            if v in ops:
                return n.dur * h
            if v in own:
                return n.dur * p
            if v in gpus:
                return n.dur * k
            return float(n.dur)

        return f

    return {
        name: (dur(h, p, k), None)
        for name, h, p, k in zip(
            ("low", "mid", "high"), OPS_KEPT, BOOKKEEPING_KEPT, KERNELS_KEPT, strict=True
        )
    }


UNIT = FixUnit("optimizer_fused", WORDS, detect, retime, cause=True)
