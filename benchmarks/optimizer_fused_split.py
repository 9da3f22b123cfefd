#!/usr/bin/env python3
"""What ``fused=True`` did to the optimizer step, read off planted and fused traces of the same
case on one GPU kind: per training step, the step's host time in ops and launch calls, its own
Python (the step span in no op) and the GPU time of the kernels it launched (the node sets
``optimizer_fused.step_nodes`` gives the unit's re-timing), and each fused ÷ planted ratio beside
the unit's low / mid / high factors (``OPS_KEPT``, ``BOOKKEEPING_KEPT``, ``KERNELS_KEPT``: the
greatest, the median and the least ratio over the pairs).

    python benchmarks/optimizer_fused_split.py [--dir sample_traces/validation/optimizer_fused] [--json OUT]

``--dir`` holds a folder per case ``vNN/`` (the fused variant's trace, recorded by
``sample_traces/validation/fixed_traces_device.sh``) and, where the case's planted trace in
``sample_traces/validation/vNN/`` came from another GPU kind, ``vNN_planted/`` (its planted
variant traced beside the fused one). Each trace is ingested into a memory store; the graph is the
analysis' own (``RunAnalysis``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VALIDATION = ROOT / "sample_traces" / "validation"
DIR = VALIDATION / "optimizer_fused"
PARTS = ("ops", "own", "kernels")


def pairs(folder: Path = DIR) -> list[tuple[str, Path, Path]]:
    """(case, planted trace, fused trace) for every case folder of ``folder``."""
    out = []
    for d in sorted(p for p in folder.iterdir() if p.is_dir() and "_" not in p.name):
        [fused] = sorted(d.glob("*.pt.trace.json.gz"))
        again = folder / f"{d.name}_planted"
        src = again if again.is_dir() else VALIDATION / d.name
        planted = sorted(src.glob("*rank0*.pt.trace.json.gz"))[0]
        out.append((d.name, planted, fused))
    return out


def split(path: Path) -> dict[str, float]:
    """ms per training step: ``ops`` (host, in ops and launch calls), ``own`` (host, the step's
    Python) and ``kernels`` (GPU) of ``Optimizer.step`` (:func:`optimizer_fused.step_nodes`),
    and ``n_kernels`` per step."""
    from gpuscope.analysis.fixes.optimizer_fused import step_nodes
    from stores import analysed

    with analysed(path) as (a, cp):
        g = cp.graph
        ops, own, gpus = step_nodes(g)
        steps = max(1, a.window.n_steps)

        def ms(nodes: set[int]) -> float:
            return sum(g.nodes[v].dur for v in nodes) / 1e6 / steps

        return {"ops": ms(ops), "own": ms(own), "kernels": ms(gpus), "n_kernels": len(gpus) / steps}


def row(case: str, planted: Path, fused: Path) -> dict:
    """One pair's splits and its fused ÷ planted ratio per part (None where the planted part is 0)."""
    a, b = split(planted), split(fused)
    return {
        "case": case,
        "planted_ms": a,
        "fused_ms": b,
        "ratio": {k: (b[k] / a[k] if a[k] else None) for k in PARTS},
    }


def factors(rows: list[dict]) -> dict[str, tuple[float, float, float]]:
    """Per part: (greatest, median, least) ratio over ``rows``, rounded to 2 decimals: the unit's
    low / mid / high."""
    out = {}
    for k in PARTS:
        v = [r["ratio"][k] for r in rows if r["ratio"][k] is not None]
        out[k] = (round(max(v), 2), round(statistics.median(v), 2), round(min(v), 2))
    return out


def main(argv: list[str] | None = None) -> int:
    from gpuscope.analysis.fixes import optimizer_fused as OF

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DIR)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = [row(*p) for p in pairs(args.dir)]
    print(
        "| case | ops ms (loop → fused) | own ms | kernels ms (count) | ops × | own × | kernels × |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        a, b, q = r["planted_ms"], r["fused_ms"], r["ratio"]
        f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(
            f"| {r['case']} | {a['ops']:.2f} → {b['ops']:.2f} | {a['own']:.2f} → {b['own']:.2f} "
            f"| {a['kernels']:.2f} ({a['n_kernels']:.0f}) → {b['kernels']:.2f} "
            f"({b['n_kernels']:.0f}) | {f(q['ops'])} | {f(q['own'])} | {f(q['kernels'])} |"
        )
    fit = factors(rows)
    print(f"fitted (greatest / median / least): {fit}")
    print(f"the unit: ops {OF.OPS_KEPT}, own {OF.BOOKKEEPING_KEPT}, kernels {OF.KERNELS_KEPT}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "factors": fit}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
