"""Fix unit ``dtensor_dispatch``: a tensor-parallel step bound by DTensor's Python dispatch (its
``__torch_dispatch__``, sharding propagation and redistribution run in Python for every op)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes import kernel_fusion
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words, evidence_json
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.gains import ByNode, node_mask, raw_durations
from gpuscope.analysis.phase_patterns import DTENSOR_SPANS, SUBCLASS_DISPATCH

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, DurFn, Variant

WORDS = Words(
    "Compile the tensor-parallel model: DTensor's Python dispatch holds the step",
    "Every op on a DTensor runs its sharding propagation and dispatch in Python; torch.compile "
    "traces through DTensor once, so the compiled step runs the local ops and collectives "
    "without it.",
    "model = parallelize_module(model, tp_mesh, plan)\n"
    "model = torch.compile(model)          # DTensor's dispatch is traced once, not run per op\n"
    "# and keep plain tensors between the parallel layers (fewer DTensor ops):\n"
    "# ColwiseParallel(use_local_output=True), RowwiseParallel(use_local_output=True)",
)

HOST_BOUND_PCT = 50.0
"""The dispatch is a cause only where the GPU computes less than this share of the step (%, busy
less communication-only time): on a GPU-bound step the host's Python runs ahead of the kernels
and costs nothing."""


def detect(inp: Inputs) -> Finding | None:
    """DTensor's dispatch (phase_patterns: ``PythonSubclass`` spans with DTensor's own functions)
    costs a significant share of the step while the GPU idles. Without DTensor's functions the
    trace does not say which subclass dispatches, and the unit abstains (silent; docs/metrics.md,
    "Phase patterns")."""
    sd = inp.phase.subclass if inp.phase is not None else None
    # the GPU's own work: busy less the time it only communicates (a rank whose collectives
    # wait for a host-bound peer is "busy" in them)
    busy = inp.busy_pct - fx.share(inp.comm_only_ns, inp.window_ns)
    if sd is None or not sd.dtensor or busy >= HOST_BOUND_PCT:
        return None
    raw = sd.dispatch_ms_per_step * 1e6 * max(1, inp.n_steps)
    ns, capped = fx.host_cost(raw, inp)
    if not fx.significant(ns, inp.window_ns, inp.n_steps):
        return None
    ev = evidence_json(sd, **fx.cost_evidence("dispatch", ns, inp), gpu_compute_busy_pct=busy)
    ev["summary"] = (
        f"DTensor's Python dispatch took {sig3(sd.dispatch_ms_per_step)} ms of host time per step "
        f"outside the ops it runs ({sig3(sd.calls_per_step)} subclass dispatches and "
        f"{sig3(sd.dtensor_calls_per_step)} redistributions, from_local and to_local per step), "
        f"while the GPU computed {sig3(busy)}% of the step."
    )
    fx.cap_note(ev, capped, inp)
    # no proven bound: compiling also shortens the host work around the dispatch
    return Finding(ev, fx.host_gain_pct(ns, inp))


_DISPATCH = frozenset((SUBCLASS_DISPATCH, *DTENSOR_SPANS))


def is_dispatch(n: Node) -> bool:
    """A host segment of DTensor's own dispatch (the innermost event is a dispatch span)."""
    return n.kind == "host" and n.cat == "cpu" and n.label in _DISPATCH


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """The fix is ``torch.compile(model)``: the compiled step runs neither DTensor's dispatch nor
    the eager ops' own host work. DTensor's dispatch segments × 0.5 / 0.2 / 0.05 (traced once,
    the compiled step keeps a little of it: guards, the collectives' Python wrappers); the rest
    of the step as compiling a DTensor model re-times it (:func:`kernel_fusion.retime_whole_host`:
    host × 0.6 / 0.3 / 0.1, launches and short kernels × 1 / 0.5 / 0.25)."""
    compiled = kernel_fusion.retime_whole_host(g, ctx)
    out: dict[str, Variant] = {}
    for name, f in (("low", 0.5), ("mid", 0.2), ("high", 0.05)):
        rest = compiled[name][0]
        assert rest is not None

        def dur(v: int, n: Node, f: float = f, rest: DurFn = rest) -> float:
            return n.dur * f if is_dispatch(n) else rest(v, n)

        def whole(
            g: Graph,
            durs: np.ndarray | None,
            picked: dict[Any, Any],
            f: float = f,
            rest: DurFn = rest,
        ) -> np.ndarray:
            d = raw_durations(g, None, durs, picked)
            mask = node_mask(g, "dtensor_dispatch", is_dispatch)
            return np.where(mask, d * f, raw_durations(g, rest, durs, picked))

        out[name] = (ByNode(dur, whole), None)
    return out


UNIT = FixUnit("dtensor_dispatch", WORDS, detect, retime, cause=True)
