"""Fix unit ``dataloader_workers``: the GPU idles while the training loop makes the next batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fmt import sig3
from gpuscope.vocabulary.causes import DATA_LOADING

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph
    from gpuscope.analysis.gains import Context, Variant

WORDS = Words(
    "Load batches in background workers",
    "The GPU waits while the training loop makes each batch; workers make the next batches while "
    "the GPU computes.",
    "loader = DataLoader(dataset, batch_size=B, shuffle=True,\n"
    "                    num_workers=8, persistent_workers=True, prefetch_factor=4,\n"
    "                    pin_memory=True)",
)
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
    return Finding(
        ev,
        fx.host_gain_pct(ns, inp),
        bound_pct=fx.host_bound_pct(max(ns, in_loader), inp),
        title=MORE_WORKERS_TITLE if multi else None,
    )


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """DataLoader segments × 0.2 / 0.05 / 0."""
    return fx.scaled_variants(lambda n: "dataloader" in n.tags, 0.2, 0.05, 0.0)


UNIT = FixUnit(
    "dataloader_workers",
    WORDS,
    detect,
    retime,
    proof="The fix shortens only the loop's time inside the DataLoader's __next__, so the step "
    "loses at most that time: its share of the untraced step, capped by the untraced step − GPU "
    "busy per step; where the traced step is no longer than the untraced one, its share of the "
    "traced step too, the larger.",
)
