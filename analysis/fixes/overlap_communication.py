"""Fix unit ``overlap_communication``: communication every rank pays, exposed on the step's path;
:func:`comm_floor_ns` is the part of it the load-imbalance unit leaves out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes.base import Finding, FixUnit, Inputs, Words
from gpuscope.analysis.fixes.fsdp_prefetch import exposed_ns as fsdp_exposed_ns
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.rank_row import RankRow

if TYPE_CHECKING:
    from gpuscope.analysis.collectives import CollectiveMatch
    from gpuscope.analysis.critical_path import Graph
    from gpuscope.analysis.gains import Context, Variant

WORDS = Words(
    "Overlap gradient communication with compute",
    "Gradients can be sent while backward still computes; exposed communication is time the GPU "
    "does nothing else.",
    "model = DDP(model, device_ids=[local_rank], bucket_cap_mb=50,\n"
    "            gradient_as_bucket_view=True, static_graph=True)\n"
    "# with gradient accumulation, skip the all-reduce on inner micro-steps:\n"
    "with model.no_sync():\n    loss.backward()",
)


def comm_floor_ns(inp: Inputs) -> tuple[float, RankRow | None]:
    """Communication-only ns per step that every rank pays (the smallest across ranks: the rank
    that arrives last at a collective waits for no one), and that rank (None: this one)."""
    own = inp.comm_only_ns / max(1, inp.n_steps)
    slowest = None
    floor = own
    for p in inp.peers:
        v = p.comm_only_us_per_step
        if v is not None and v * 1e3 < floor:
            floor, slowest = v * 1e3, p
    return floor, slowest


BUCKET_CAP_BYTES = 50 * 2**20
"""The bucket the fix's code asks for (``bucket_cap_mb=50``: DDP reads MiB)."""


def allreduce_per_step(
    match: CollectiveMatch | None, rank: int, n_steps: int
) -> tuple[float | None, float | None]:
    """This rank's all-reduces matched across ranks (``match``'s rows), per step: (bytes, transfer
    ns); (None, None) without one whose size is known."""
    if match is None or match.rows.empty:
        return None, None
    r = match.rows
    mine = r[(r["rank"] == rank) & (r["coll"] == "allreduce") & r["msg_bytes"].notna()]
    if mine.empty:
        return None, None
    n = max(1, n_steps)
    return float(mine["msg_bytes"].sum()) / n, float(mine["transfer_ns"].sum()) / n


def last_bucket_ns(inp: Inputs) -> float | None:
    """The all-reduce time per step (ns) of the last bucket with the fix's buckets: it waits for
    the backward's last gradients, so it stays exposed; the others overlap the backward. Its share
    of the transfer is its share of the bytes, ``min(cap, bytes) / bytes`` (None: no matched
    all-reduce)."""
    b, t = inp.allreduce_bytes_per_step, inp.allreduce_ns_per_step
    if not b or t is None:
        return None
    return t * min(BUCKET_CAP_BYTES, b) / b


def fsdp_gradients(inp: Inputs) -> bool:
    """The step gathers parameters (FSDP's all-gathers, :mod:`fsdp_prefetch`) and all-reduces
    none: its gradients are reduce-scattered, and DDP's buckets (this unit's code) do not apply."""
    ag = inp.phase.allgather if inp.phase is not None else None
    return ag is not None and ag.n_per_step > 0 and not inp.allreduce_bytes_per_step


def detect(inp: Inputs) -> Finding | None:
    if fsdp_gradients(inp):
        # FSDP2 overlaps each reduce-scatter with the backward already; what stays exposed (the
        # last layers' reduce-scatters, the waits for a later rank) has no bucket to tune. v191
        # (FSDP2 with its defaults): DDP's overlap code was the first fix at 21.9 %.
        return None
    if fx.sharded_by(inp) in ("DTensor", "compiled collectives"):
        # tensor parallelism's all-reduces carry the layers' activations and their gradients
        # inside forward and backward, where no DDP bucket is: v171's and v190's compiled steps
        # (2 H200s) had this as their first fix at 11.7 and 11.3 %. A job that also runs DDP
        # across another mesh dimension loses this fix with them.
        return None
    floor, _ = comm_floor_ns(inp)
    comm_only = floor * inp.n_steps
    # the all-gathers exposed in FSDP's pattern are fsdp_prefetch's (prefetch, not DDP's buckets)
    comm_only = max(0.0, comm_only - fsdp_exposed_ns(inp, transfer_only=False))
    ns = inp.idle.causes_ns.get("communication", 0) + comm_only
    last = last_bucket_ns(inp)
    # overlapping hides the exposed communication but the last bucket's all-reduce
    hidden = max(0.0, ns - last * inp.n_steps) if last is not None else ns
    if not fx.significant(hidden, inp.window_ns, inp.n_steps):
        return None
    ev: dict[str, Any] = {
        **fx.cost_evidence("exposed_comm", ns, inp),
        "idle_waiting_us_per_step": fx.per_step_us(
            inp.idle.causes_ns.get("communication", 0), inp.n_steps
        ),
        "comm_only_us_per_step": floor / 1e3,
        "allreduce_mb_per_step": (inp.allreduce_bytes_per_step or 0) / 1e6 if last else None,
        "last_bucket_us_per_step": last / 1e3 if last is not None else None,
    }
    ev["summary"] = (
        f"Communication was exposed {sig3(ev['exposed_comm_us_per_step'] / 1e3)} ms per step "
        f"({sig3(ev['share_pct'])}%): the host waited in collectives, or the GPU ran only "
        "communication kernels (the part every rank pays)."
    )
    if last is not None:
        ev["summary"] += (
            f" Its all-reduces move {sig3(ev['allreduce_mb_per_step'])} MB per step; in "
            f"{BUCKET_CAP_BYTES >> 20} MiB buckets all but the last overlap the backward, which "
            f"leaves the last's {sig3(last / 1e6)} ms exposed."
        )
    cost = fx.host_gain_pct(ns, inp)  # per step over the untraced step when one is known
    return Finding(ev, cost, bound_pct=fx.host_gain_pct(hidden, inp))


OVERLAP_LEFT = (1.0, 0.5, 0.0)
"""How much of the exposed communication's time the step still pays once it overlaps the backward,
``low`` / ``mid`` / ``high``. At the low end all of it: NCCL's kernels run on the SMs and the
memory bandwidth the backward's kernels would use, so an overlapped all-reduce can slow the
backward by as much as it hides. At the point half: of the four timed pairs, two gained about half
their exposed communication (v25 14.2 % and v28 6.6 % measured, against 19.9 and 9.4 % with a
quarter left), two under 3 % where it was 15-17 % of the step (v69, ResMLP, 0.5 % against 2.9 %;
v159, BLOOM with one 1.74 GB all-reduce after the backward, 2.3 % against 16.7 %)."""


def retime(g: Graph, ctx: Context) -> dict[str, Variant]:
    """Communication × :data:`OVERLAP_LEFT` (1 / 0.5 / 0). A rank's communication kernels also
    hold its wait for a slower rank, which overlapping does not remove: the estimate is clipped at
    the bound."""
    return fx.scaled_variants(lambda n: n.cat == "communication", *OVERLAP_LEFT)


UNIT = FixUnit(
    "overlap_communication",
    WORDS,
    detect,
    retime,
    proof="Overlapping can hide at most the communication that is exposed: the idle in "
    "collectives and the communication-only time every rank pays (the wait for a slower rank is "
    "load imbalance's), less the last bucket's all-reduce, which waits for the backward's last "
    "gradients whatever the buckets.",
)
