"""Fix unit ``optimizer_fused``: the optimizer step loops over the parameters in Python
(``foreach=False``): many tiny kernels per parameter, the GPU idle between their launches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Host work inside the optimizer step × 0.2 / 0.1 / 0.03 (a few launches instead of a loop);
    its kernels × 1 / 0.5 / 0.35 (one pass over the parameters and states instead of ~3 times as
    many passes of the per-parameter chain)."""
    hosts, gpus = optimizer_nodes(g)

    def dur(h: float, k: float) -> Any:
        def f(v: int, n: Node) -> float:
            if v in hosts:
                return n.dur * h
            if v in gpus:
                return n.dur * k
            return float(n.dur)

        return f

    return {
        name: (dur(h, k), None)
        for name, h, k in (("low", 0.2, 1.0), ("mid", 0.1, 0.5), ("high", 0.03, 0.35))
    }


UNIT = FixUnit("optimizer_fused", WORDS, detect, retime, cause=True)
