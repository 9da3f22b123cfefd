"""Write sample_traces/validation/band_fit.json, the recorded pairs :mod:`gpuscope.analysis.fixes.band`
fits its bands on, from a judgement of the validation set, and print the fitted ``BAND``.

    python benchmarks/fit_band.py JUDGEMENT.json [JUDGEMENT.json ...] [--out sample_traces/validation/band_fit.json]

JUDGEMENT.json: ``validate_gains_set.py --blind --json`` of every recorded case (each row's
``estimates`` holds every fix's point, low and high; ``measured`` the timed gain). A row per case
whose fix gpuscope estimated: ``case``, ``group``, ``rule`` (the case's fix), ``point_pct`` (its
estimate's point), ``measured_pct``; a row per timed first fix (truth.json's ``first_fixes``,
its base case's estimate of that fix); then a row per pair of sample_traces/fixes
(``validate_gains.py``'s experiments, estimated here: ``case`` ``fixes/<folder>``, ``group``
``fixes``, the median of its rounds measured). The points do not depend on the band (it cuts ranges, never a
point), so a judgement made with or without it gives the same rows."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "sample_traces" / "validation" / "band_fit.json"


def rows_of(judgement: list[dict], first_fixes: list[dict] = ()) -> list[dict]:
    """band_fit.json's rows from a judgement's rows (cases without the fix's estimate left out),
    then a row per timed first fix (truth.json's ``first_fixes``) whose base case's judgement
    estimated that fix: ``case`` the first fix's, ``group`` ``first_fixes``."""
    rows = []
    by_case = {r["case"]: r for r in judgement}
    for r in judgement:
        est = (r.get("estimates") or {}).get(r["expected"])
        if not est:
            continue
        rows.append(
            {
                "case": r["case"],
                "group": r["group"],
                "rule": r["expected"],
                "point_pct": round(float(est[0]), 3),
                "measured_pct": round(float(r["measured"]), 3),
            }
        )
    for f in first_fixes:
        base = by_case.get(f["base"])
        est = ((base or {}).get("estimates") or {}).get(f["gpuscope_fix_id"])
        if not est:
            continue
        rows.append(
            {
                "case": f["case"],
                "group": "first_fixes",
                "rule": f["gpuscope_fix_id"],
                "point_pct": round(float(est[0]), 3),
                "measured_pct": round(float(f["gain_pct"]), 3),
            }
        )
    return rows


def fixes_rows() -> list[dict]:
    """A row per pair of sample_traces/fixes: its fix's estimate on its planted trace now (an
    in-memory store), the median of its measured rounds."""
    import statistics

    from gpuscope.store import connect

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from validate_gains import EXPERIMENTS, ROOT, estimate_for, measured_gains, rule_of

    rows = []
    for exp in EXPERIMENTS:
        con = connect(":memory:")
        try:
            est = estimate_for(con, exp)["estimate"]
        finally:
            con.close()
        rows.append(
            {
                "case": f"fixes/{exp}",
                "group": "fixes",
                "rule": rule_of(exp),
                "point_pct": round(float(est["gain_pct"]), 3),
                "measured_pct": round(statistics.median(measured_gains(ROOT / exp)), 3),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    from gpuscope.analysis.fixes import band

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("judgement", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    truth = json.loads((OUT.parent / "truth.json").read_text())
    judged = [r for j in a.judgement for r in json.loads(j.read_text())]
    rows = rows_of(judged, truth["first_fixes"]) + fixes_rows()
    a.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"{a.out}: {len(rows)} rows")
    for rule, b in band.fit(rows).items():
        print(f'    "{rule}": {b},')
    return 0


if __name__ == "__main__":
    sys.exit(main())
