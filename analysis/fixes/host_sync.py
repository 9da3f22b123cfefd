"""Fix unit ``host_sync``: the host waits for the GPU every step (``.item()``, ``.cpu()``, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3
from gpuscope.vocabulary.causes import HOST_SYNC

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Edge, Graph, Node
    from gpuscope.analysis.gains import Context, Variant

WORDS = Words(
    "Stop synchronising with the GPU every step",
    "Each sync drains the GPU's queue: the host stops launching until the GPU is done, and the GPU "
    "then waits for the host.",
    "total = torch.zeros((), device=device)\n"
    "for step, (x, y) in enumerate(loader):\n"
    "    loss = step_fn(x, y)\n"
    "    total += loss.detach()          # no .item() / .cpu() / print(tensor) per step\n"
    "    if step % 100 == 99:\n"
    "        print(total.item() / 100); total.zero_()\n"
    "# copies: pinned memory and x.to(device, non_blocking=True) do not wait for the GPU\n"
    "# and no boolean-mask indexing (x[mask]) in the step: use torch.where(mask, x, 0)",
)


def _times(n: float) -> str:
    """A count per step in words: ``once``, ``twice``, ``3 times``, ``0.5 times``."""
    if abs(n - 1.0) < 0.05:
        return "once"
    if abs(n - 2.0) < 0.05:
        return "twice"
    return f"{sig3(n)} times"


def detect(inp: Inputs) -> Finding | None:
    ns, capped = fx.host_cost(inp.idle.causes_ns.get(HOST_SYNC, 0), inp)
    if not fx.significant(ns, inp.window_ns, inp.n_steps):
        return None
    calls = fx.frame_rows(inp, HOST_SYNC, 5)
    ev = {**fx.cost_evidence("idle", ns, inp), "calls": calls}
    what = (
        ", ".join(f"{c['op'] or c['name']} ({_times(c['per_step'])} per step)" for c in calls[:3])
        or "synchronizing calls"
    )
    ev["summary"] = (
        f"The host waited for the GPU in {what}; the drained queue left the GPU idle "
        f"{sig3(ev['idle_us_per_step'] / 1e3)} ms per step ({sig3(ev['share_pct'])}%)."
    )
    fx.cap_note(ev, capped, inp)
    # no proven bound: without the sync the host's launches overlap the GPU's work, which can
    # save more than the idle after each sync (sample_traces/fixes/host_sync: up to 12% gained
    # against a 5.5% cost)
    return Finding(ev, fx.host_gain_pct(ns, inp))


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Synchronizing calls no longer wait for the GPU (their tails 1 / 0 / 0)."""
    nodes = g.nodes

    def sync_tail(n: Node) -> bool:
        return "sync_tail" in n.tags and not (
            "copy_call" in n.tags and n.event is not None and "HtoD" in n.label
        )

    def keep(v: int, ed: Edge) -> bool:
        return not (ed.kind == "wait" and sync_tail(nodes[v]))

    return {
        "low": (None, keep),
        "mid": (fx.scaled(sync_tail, 0.0), keep),
        "high": (fx.scaled(sync_tail, 0.0), keep),
    }


UNIT = FixUnit(HOST_SYNC, WORDS, detect, retime)  # the fix is named like the idle cause
