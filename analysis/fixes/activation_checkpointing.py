"""Fix unit ``activation_checkpointing``: the backward re-runs forward ops (activation
checkpointing's recompute) while the trace shows GPU memory to spare: checkpoint less."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fixes.base import (
    Finding,
    FixUnit,
    Inputs,
    Recommendation,
    Words,
    evidence_json,
    significant,
)
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.phase_patterns import recompute_nodes

if TYPE_CHECKING:
    from gpuscope.analysis.critical_path import Graph, Node
    from gpuscope.analysis.gains import Context, Variant

WORDS = Words(
    "Checkpoint fewer activations: the recompute costs time the memory does not need",
    "Activation checkpointing re-runs forward ops in backward to save memory; with memory to "
    "spare, keeping those activations removes the recompute.",
    "# drop checkpointing where memory allows, e.g. keep it on every other block only:\n"
    "for i, block in enumerate(model.blocks):\n"
    "    block.checkpoint = i % 2 == 0          # was: every block\n"
    "# or selective: recompute only the cheap ops\n"
    "# torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False,\n"
    "#     context_fn=functools.partial(create_selective_checkpoint_contexts, policy))",
)
DROP_TITLE = "Drop activation checkpointing: the recompute costs time the memory does not need"
DROP_CODE = (
    "out = block(x)          # was: torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)\n"
    "# with the memory left over, a larger batch per step may also fit"
)

DROP_BELOW = 0.5
"""With the memory peak under this share of the GPU, drop checkpointing (activations fit) ..."""
SELECTIVE_BELOW = 0.85
"""... under this share, checkpoint fewer blocks; at or above it the memory is needed: silent.
Unknown: checkpoint fewer blocks, checking the memory first."""


def detect(inp: Inputs) -> Finding | None:
    """Forward ops re-run inside backward (phase_patterns) whose kernels are a significant cost,
    unless the memory peak is known and at least :data:`SELECTIVE_BELOW` of the GPU (unknown: the
    words ask to check it first)."""
    pp = inp.phase
    rc = pp.recompute if pp is not None else None
    if rc is None or rc.kernel_ms_per_step <= 0:
        return None
    ns = max(rc.kernel_ms_per_step, rc.host_ms_per_step) * 1e6 * max(1, inp.n_steps)
    if not significant(ns, inp.window_ns, inp.n_steps):
        return None
    used = inp.mem_used_frac
    if used is not None and used >= SELECTIVE_BELOW:
        return None  # the memory it saves is needed: no advice to spend it
    ops = ", ".join(f"{k} ×{sig3(v)}" for k, v in rc.by_op[:4])
    ev = evidence_json(
        rc,
        memory_used_pct=100.0 * used if used is not None else None,
        share_pct=100.0 * ns / inp.window_ns if inp.window_ns else 0.0,
    )
    drop = used is not None and used < DROP_BELOW
    if used is None:
        room = (
            "; the trace does not show the memory peak (profile_memory=True would): check "
            "torch.cuda.max_memory_reserved() against the GPU's memory before dropping it."
        )
    elif drop:
        room = f", while the memory peak is {sig3(100.0 * used)}% of the GPU (room for them)."
    else:
        room = f", while the memory peak is {sig3(100.0 * used)}% of the GPU (room for some)."
    ev["summary"] = (
        f"The backward re-runs {sig3(rc.ops_per_step)} forward ops per step ({ops}): "
        f"{sig3(rc.kernel_ms_per_step)} ms of GPU time and {sig3(rc.host_ms_per_step)} ms of host "
        f"time per step{room}"
    )
    # cost: the recompute's host spans or its kernels, the longer; no proven bound (the
    # estimate is the graph's re-timing)
    return Finding(
        ev,
        ev["share_pct"],
        title=DROP_TITLE if drop else None,
        code=DROP_CODE if drop else None,
    )


def _removed(g: Graph, shares: tuple[float, float, float]) -> dict[str, Variant]:
    """The recompute's host work and kernels removed × the ``low`` / ``mid`` / ``high`` shares."""
    hosts, gpus = recompute_nodes(g)
    gone = hosts | gpus

    def dur(f: float) -> Any:
        def d(v: int, n: Node) -> float:
            return n.dur * (1.0 - f) if v in gone else float(n.dur)

        return d

    return {name: (dur(f), None) for name, f in zip(("low", "mid", "high"), shares, strict=True)}


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """The recompute's host work and kernels removed × 0.5 / 0.8 / 1.0 (how much of it the fix
    drops: selective checkpointing keeps some)."""
    return _removed(g, (0.5, 0.8, 1.0))


def drops(rec: Recommendation) -> bool:
    """Whether the finding advises dropping checkpointing (the memory peak known and under
    :data:`DROP_BELOW` of the GPU): its words then say "Drop", not "Checkpoint fewer"."""
    used = rec.evidence.get("memory_used_pct")
    return used is not None and used < 100.0 * DROP_BELOW


def advised(rec: Recommendation, g: Graph, ctx: Context) -> dict[str, Variant]:
    """The fix the words advise: dropping checkpointing removes the whole recompute (× 1 in
    every variant; the range is then the host's variation alone); checking fewer blocks, as
    :func:`retime`."""
    return _removed(g, (1.0, 1.0, 1.0)) if drops(rec) else retime(g, ctx)


# ``staging``: the checkpointed process's untraced host time holds the checkpoint machinery (its
# Python hooks per saved tensor, the RNG state forked per re-run), which the profiler inflates
# less than the ops: the calibrated host scale of a checkpointed trace (0.60-0.71 on the
# validation set's four) is not the host's speed once checkpointing is dropped (docs/metrics.md,
# "Causes found by phase and pattern", Recompute)
UNIT = FixUnit(
    "activation_checkpointing", WORDS, detect, retime, cause=True, advised=advised, staging=True
)
