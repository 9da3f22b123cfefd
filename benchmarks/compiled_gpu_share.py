"""What compiling a step left of its GPU work: for each pair of traces of one model, eager and
compiled, the kernels per step split into matrix work (GEMMs, convolutions, attention) and the rest
(elementwise, norms, reductions, copies; the optimizer's and the collectives' left out), and the
rest's compiled share of the eager one, beside what ``kernel_fusion``'s re-timing of the eager
graph leaves of it at its top level (the kernels it removes at 0) and its mid (at half).

    .venv/bin/python benchmarks/compiled_gpu_share.py EAGER COMPILED [EAGER COMPILED ...]

EAGER / COMPILED: a trace file or a folder of one rank. sample_traces/validation/README.md ("What
compiling leaves of the GPU's work") has the table for the seven compiled traces of
sample_traces/validation/compiled_steps/.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

USAGE = "usage: compiled_gpu_share.py EAGER COMPILED [EAGER COMPILED ...]"
MATRIX = frozenset({"gemm", "convolution", "attention"})
LEFT_OUT = frozenset({"optimizer", "communication"})


@dataclass(frozen=True)
class Split:
    """Kernel time per step (ms): matrix work, the rest, and the rest's kernels that
    ``kernel_fusion.removable_kernels`` removes."""

    matrix_ms: float
    other_ms: float
    removable_ms: float


def split(path: Path) -> Split:
    """The trace's :class:`Split`, from its critical-path graph (ingested into a memory store)."""
    from gpuscope.analysis.fixes.kernel_fusion import removable_kernels
    from gpuscope.analysis.kernel_names import classify_kernel
    from stores import analysed

    with analysed(path) as (a, cp):
        g = cp.graph
        removed, _ = removable_kernels(g)
        mat = other = rem = 0
        for i, n in enumerate(g.nodes):
            if n.kind != "gpu" or n.cat != "kernels" or n.event is None:
                continue
            c = classify_kernel(n.event.name, "kernel")
            if c in MATRIX:
                mat += n.dur
            elif c not in LEFT_OUT:
                other += n.dur
                rem += n.dur if i in removed else 0
        steps = max(1, a.window.n_steps)
        return Split(mat / 1e6 / steps, other / 1e6 / steps, rem / 1e6 / steps)


def row(eager: Path, compiled: Path) -> dict[str, float]:
    """One pair: the eager and compiled splits, the rest's compiled share of eager, and the
    share ``kernel_fusion`` leaves at its top (removed × 0) and mid (removed × 0.5)."""
    e, c = split(eager), split(compiled)
    if e.other_ms <= 0:
        raise SystemExit(f"{eager}: no kernels but matrix ones")
    return {
        "eager_matrix_ms": e.matrix_ms,
        "compiled_matrix_ms": c.matrix_ms,
        "eager_other_ms": e.other_ms,
        "compiled_other_ms": c.other_ms,
        "measured_share": c.other_ms / e.other_ms,
        "fusion_top_share": 1.0 - e.removable_ms / e.other_ms,
        "fusion_mid_share": 1.0 - 0.5 * e.removable_ms / e.other_ms,
    }


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print(USAGE, file=sys.stderr)
        return 2
    print("eager | matrix ms eager, compiled | other ms eager, compiled | share | top | mid")
    for e, c in zip(argv[::2], argv[1::2], strict=True):
        r = row(Path(e), Path(c))
        print(
            f"{Path(e).name} | {r['eager_matrix_ms']:.2f}, {r['compiled_matrix_ms']:.2f} | "
            f"{r['eager_other_ms']:.2f}, {r['compiled_other_ms']:.2f} | "
            f"{r['measured_share']:.2f} | {r['fusion_top_share']:.2f} | {r['fusion_mid_share']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
