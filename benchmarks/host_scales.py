"""The host scale the profiler leaves on the validation set's one-GPU pairs: where
``gains.HOST_SCALE_PRIOR`` comes from.

    python benchmarks/host_scales.py [--groups calibration,blind ...] [--json OUT] [cases...]

For each one-GPU case of sample_traces/validation/truth.json (seen parts only by default: every
group but the newest blind one), its planted trace is ingested into a throwaway store and its
critical path replayed at host scales 0.05, 0.10, ..., 1.00 (``gains._spans_at``: host ops ×
scale, the GPU as recorded). Where the host binds (the window moves by ``gains.IDENTIFIABLE`` or
more between 0.3 and 0.5) the scale whose replayed step equals the median planted step timed
without the profiler in fresh processes (linear between grid points) is that pair's host scale;
the trace's own fit to its untraced step (``calibrated_scale``) is printed beside it. Prints one
line per case, then the 10th/25th/50th/75th/90th percentiles, min and max of both.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAL = ROOT / "sample_traces" / "validation"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GRID = tuple(round(0.05 * i, 2) for i in range(1, 21))


def host_scale(spans: dict[float, float], timed_ms: float, identifiable: float) -> float | None:
    """The scale at which the replayed step (ms, by grid scale) equals ``timed_ms``, linear
    between grid points; None where the host does not bind between 0.3 and 0.5, or the timed step
    is outside the grid's steps."""
    if spans[0.5] - spans[0.3] < identifiable * spans[0.3]:
        return None
    grid = sorted(spans)
    for a, b in itertools.pairwise(grid):
        if spans[a] <= timed_ms <= spans[b] and spans[b] > spans[a]:
            return a + (b - a) * (timed_ms - spans[a]) / (spans[b] - spans[a])
    return None


def quantiles(xs: list[float]) -> str:
    if len(xs) < 2:
        return "n/a"
    q = statistics.quantiles(xs, n=20, method="inclusive")  # 5 % steps
    return (
        f"n {len(xs)}: q10 {q[1]:.2f}, q25 {statistics.quantiles(xs, n=4, method='inclusive')[0]:.2f}, "
        f"median {statistics.median(xs):.2f}, "
        f"q75 {statistics.quantiles(xs, n=4, method='inclusive')[2]:.2f}, q90 {q[17]:.2f}, "
        f"min {min(xs):.2f}, max {max(xs):.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    from gpuscope.analysis import gains as GN
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect
    from validate_gains_set import SEEN_GROUPS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--groups", default=",".join(SEEN_GROUPS))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    groups = set(a.groups.split(","))
    cases = json.loads((VAL / "truth.json").read_text())["cases"]
    rows = []
    for c in cases:
        if (a.cases and c["case"] not in a.cases) or (not a.cases and c["group"] not in groups):
            continue
        if len(c["traces"]) != 1:
            continue
        tmp = Path(tempfile.mkdtemp(prefix="host_scales."))
        try:
            con = connect(tmp / "store")
            run = ingest_paths(con, [VAL / t for t in c["traces"]])[0].run_id
            ra = analyze_run(con, run)
            cp, ctx = ra.critical_path, ra.gain_context
            if cp is None or ctx is None:
                continue
            base, prof = GN._recorded(cp.graph)
            sp = GN._spans_at(cp.graph, cp.window[0], base, prof, GRID)
            spans = {s: v / 1e6 / ctx.n_steps for s, v in zip(GRID, sp, strict=True)}
            con.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        t = c["timings"]  # per step (``planted`` is per sample on the batch-size pairs)
        timed = statistics.median(t.get("planted_step_ms") or t["planted"])
        fit = host_scale(spans, timed, GN.IDENTIFIABLE)
        rows.append(
            {
                "case": c["case"],
                "fix": c["expected_fix"],
                "timed_fit": fit,
                "untraced_fit": ctx.host_scale_cal,
                "timed_ms": timed,
                "spans_ms": spans,
            }
        )
        print(
            f"{c['case']:5} {c['expected_fix']:26} timed fit "
            f"{'-' if fit is None else f'{fit:.2f}':>5}  untraced fit "
            f"{'-' if ctx.host_scale_cal is None else f'{ctx.host_scale_cal:.2f}':>5}",
            flush=True,
        )
    print("to the timed planted step:", quantiles([r["timed_fit"] for r in rows if r["timed_fit"]]))
    print(
        "to the trace's untraced step:",
        quantiles([r["untraced_fit"] for r in rows if r["untraced_fit"]]),
    )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
