"""Estimated gains (critical-path re-timing) against the gains measured on real GPU runs.

For each experiment of sample_traces/fixes (one bottleneck planted per fix rule, see
record_fixes.py there): ingest the planted trace, estimate its fix's gain from the trace alone,
and compare with the gain measured without the profiler (fresh processes, interleaved; every
timing*.json of the folder; gain of each planted/fixed pair of a round). Prints a markdown table.

    python benchmarks/validate_gains.py [EXPERIMENT ...]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent / "sample_traces" / "fixes"
EXPERIMENTS = (
    "dataloader_workers",
    "pin_memory",
    "host_sync",
    "mixed_precision",
    "kernel_fusion",
    "batch_size",
    "cudnn_benchmark",
    "pin_memory_alt",
    "batch_size_alt",
)
"""One folder each; ``*_alt``: the same rule recorded again at other model sizes
(``record_fixes.py --alt``), to check the gain model on a recording it was not made on."""


def rule_of(exp: str) -> str:
    """The fix rule of an experiment folder (``pin_memory_alt`` -> ``pin_memory``)."""
    return exp.removesuffix("_alt")


def measured_gains(folder: Path) -> list[float]:
    """Gain (%) of each round's planted/fixed pair, per sample, over every timing*.json."""
    out: list[float] = []
    for f in sorted(folder.glob("timing*.json")):
        runs = [r for r in json.loads(f.read_text())["runs"] if r["mode"] == "time"]
        for rnd in sorted({r["round"] for r in runs}):
            p = [
                r["per_sample_us"] for r in runs if r["round"] == rnd and r["variant"] == "planted"
            ]
            x = [r["per_sample_us"] for r in runs if r["round"] == rnd and r["variant"] == "fixed"]
            if p and x:
                out.append(100.0 * (1.0 - x[0] / p[0]))
    return out


def estimate_for(con: Any, exp: str) -> dict[str, Any]:
    """Ingest the planted trace of ``exp`` and estimate its fix (the unit named like it), as the
    report gives it (clipped at its proven bound) when its rule fired."""
    from gpuscope.analysis.fixes import BY_ID, Recommendation
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    rule = rule_of(exp)
    trace = ROOT / exp / f"{rule}_rank0.pt.trace.json.gz"
    rid = ingest_paths(con, [trace])[0].run_id
    rep = analyze_run(con, rid, all_ranks=False)
    assert rep.critical_path is not None and rep.gain_context is not None, exp
    fired = {r.id: r for r in rep.recommendations}
    rec = fired.get(rule) or Recommendation(rule, "", "", {}, "", 0.0)
    est = rec.estimate or BY_ID[rule].estimate(rec, rep.critical_path, rep.gain_context)
    return {
        "estimate": est.to_json(),
        "fired": list(fired),
        "bound_pct": {r.id: r.bound_pct for r in rep.recommendations},
        "cost_pct": {r.id: r.cost_pct for r in rep.recommendations},
    }


def main(argv: list[str]) -> int:
    from gpuscope.store import connect

    exps = argv or list(EXPERIMENTS)
    con = connect(Path(tempfile.mkdtemp()) / "store")
    print(
        "| rule | estimate % (range) | measured gain % median [min, max] | n | in range | proven bound % | cost % |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    bad = 0
    for exp in exps:
        r = estimate_for(con, exp)
        g = measured_gains(ROOT / exp)
        e = r["estimate"]
        med = statistics.median(g)
        ok = e is not None and e["low_pct"] <= med <= e["high_pct"]
        bad += not ok
        est = f"{e['gain_pct']:.1f} ({e['low_pct']:.1f} – {e['high_pct']:.1f})" if e else "none"
        bound = r["bound_pct"].get(rule_of(exp))
        cost = r["cost_pct"].get(rule_of(exp))
        print(
            f"| {exp} | {est} | {med:.1f} [{min(g):.1f}, {max(g):.1f}] | {len(g)} | "
            f"{'yes' if ok else 'NO'} | {f'{bound:.1f}' if bound is not None else 'none'} | "
            f"{f'{cost:.1f}' if cost is not None else 'rule silent'} |"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
