"""gpuscope's estimates against the gains measured on issue 43's validation set.

For every case of ``sample_traces/validation/truth.json`` (one bottleneck planted on a model and
size that sample_traces/fixes does not have, the fix timed against it without the profiler in
fresh processes, interleaved): ingest the planted trace into a throw-away store (``gpuscope
ingest``), run ``gpuscope analyze RUN --json``, find the recommendation whose id is the case's
expected fix, and compare its estimate (``estimate.gain_pct``, ``low_pct``..``high_pct``) with the
measured median gain (per sample for ``batch_size``); "holds" when the range holds it, or when
both say "nothing" (measured within +-NULL_PCT and the whole range too). Prints a markdown table
per part of the set (the case's ``group``: the calibration cases, the held-out third of v01-v15,
the new cases v16-v28 and their held-out half, each chosen by position before any estimate was
seen), each with its summary against issue 43's targets: every range holds its measured gain, the
median range width at most :data:`WIDTH_TARGET` points, no fix estimated above 5 % where the
measured gain is ~0 (below :data:`NULL_PCT`), and the first fix the expected one.

    python benchmarks/validate_gains_set.py [--truth PATH] [--json OUT] [--blind]
        [--groups G1,G2 | --seen] [CASE ...]

The blind parts (every ``group`` whose name starts with ``blind``: v29-v40, v41-v54, v55-v69, v70-v84,
v85+) are judged
only with ``--blind``: they stay unseen while estimates are tuned. ``--groups`` judges the named
groups only (exact names, blind ones included when named), ``--seen`` the parts already judged
once (:data:`SEEN_GROUPS`: v01-v99), so that calibration runs never touch a later blind part.

The expected fix is looked for in the ``job`` object's ``recommendations`` when the report carries
one (the verdict's fixes: the fix for the pace-setter's own cause first, with its estimate), then
in the report's ``recommendations``. A missing recommendation reads as an
estimate of 0 % (range 0-0). A case of several rank traces is ingested as one run (their folder);
its first fix is the job verdict's (``job.findings``), as every face names it, and the expected
fix's estimate is read from the report of the rank the verdict's fixes are for (``job.fix_rank``)
before the default (lowest) rank's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TRUTH = ROOT / "sample_traces" / "validation" / "truth.json"
NULL_PCT = 3.0
"""A measured gain below this (%, absolute) is "~0": the fix does nothing measurable."""
OVER_PCT = 5.0
"""An estimate above this (%) where the measured gain is ~0 is a false promise."""
WIDTH_TARGET = 30.0
"""Issue 43's target for the median range width (percentage points)."""
GROUPS = (
    ("calibration", "Calibration cases (v01-v15 less the third held out)"),
    ("held_out_third", "Held-out third of v01-v15 (kept out of every calibration)"),
    ("new", "New cases v16-v28, the part not held out (recorded after the calibration)"),
    ("held_out_new", "New held-out cases (every even position of record_new.ORDER)"),
    ("blind", "Blind cases v29-v40 (never analysed before recording; only with --blind)"),
    ("blind2", "Second blind part v41-v54 (never analysed before recording; only with --blind)"),
    ("blind3", "Third blind part v55-v69 (never analysed before recording; only with --blind)"),
    ("blind4", "Fourth blind part v70-v84 (never analysed before recording; only with --blind)"),
    ("blind5", "Fifth blind part v85-v99 (never analysed before recording; only with --blind)"),
    ("blind6", "Sixth blind part v100-v114 (never analysed before recording; only with --blind)"),
    ("blind7", "Seventh blind part v115-v129 (never analysed before recording; only with --blind)"),
    ("blind8", "Eighth blind part v130-v144 (never analysed before recording; only with --blind)"),
    ("blind9", "Ninth blind part v145-v159 (never analysed before recording; only with --blind)"),
    ("blind10", "Tenth blind part v160-v174 (never analysed before recording; only with --blind)"),
    (
        "blind11",
        "Eleventh blind part v175-v184 (never analysed before recording; only with --blind)",
    ),
    (
        "blind12",
        "Twelfth blind part v185-v192 (never analysed before recording; only with --blind)",
    ),
    (
        "blind13",
        "Thirteenth blind part v193-v200 (never analysed before recording; only with --blind)",
    ),
    (
        "blind14",
        "Fourteenth blind part v201-v208 (never analysed before recording; only with --blind)",
    ),
    (
        "blind15",
        "Fifteenth blind part v209-v214 (never analysed before recording; only with --blind)",
    ),
    (
        "blind16",
        "Sixteenth blind part v215-v222 (never analysed before recording; only with --blind)",
    ),
    (
        "blind17",
        "Seventeenth blind part v223-v225 (never analysed before recording; only with --blind)",
    ),
    (
        "blind18",
        "Eighteenth blind part v226-v229 (never analysed before recording; only with --blind)",
    ),
    (
        "blind19",
        "Nineteenth blind part v230-v235 (never analysed before recording; only with --blind)",
    ),
    (
        "blind20",
        "Twentieth blind part v236+ (never analysed before recording; only with --blind)",
    ),
)
"""The set's parts (truth.json's ``group``), in the order they are printed."""
SEEN_GROUPS = tuple(g for g, _ in GROUPS)[:-1]
"""The parts already judged once (v01-v235): every part but the newest blind one, which is judged
once when it lands and joins these with the next; ``--seen`` judges these and nothing else."""


def gpuscope(*args: str, store: str) -> str:
    """Run the gpuscope CLI of this interpreter's environment; its stdout (raises on failure)."""
    exe = Path(sys.executable).with_name("gpuscope")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "gpuscope"]
    env = {**os.environ, "GPUSCOPE_STORE": store}
    p = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, check=False)
    if p.returncode:
        raise RuntimeError(f"gpuscope {' '.join(args)} failed: {p.stderr.strip()[-2000:]}")
    return p.stdout


def holds(low: float, high: float, measured: float) -> bool:
    """The range ``low``..``high`` (%) holds the measured gain, or both say "nothing": the measured
    gain is ~0 (below :data:`NULL_PCT`) and the whole range lies inside +-NULL_PCT too."""
    if low <= measured <= high:
        return True
    return abs(measured) < NULL_PCT and low >= -NULL_PCT and high <= NULL_PCT


def recommendations(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's recommendations (if the report has a ``job`` object: the fix for the
    pace-setter's own cause, then the pace-setting rank's, as the verdict lists them), then the
    report's own."""
    job = doc.get("job")
    recs = []
    if isinstance(job, dict):
        recs += [r for r in job.get("recommendations") or [] if isinstance(r, dict)]
    return recs + list(doc.get("recommendations") or [])


def first_job_fix(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The job verdict's first fix (``job.findings``' first of kind ``fix``), None without a job
    of several ranks: what every face names as the job's first fix, whichever rank it is for."""
    job = doc.get("job")
    if not isinstance(job, dict):
        return None
    return next(
        (f for f in job.get("findings") or [] if isinstance(f, dict) and f.get("kind") == "fix"),
        None,
    )


def analyse(case: dict[str, Any], root: Path, store: str) -> dict[str, Any]:
    """Ingest the case's trace(s), analyse, and pick out the expected fix's estimate."""
    paths = [str(root / t) for t in case["traces"]]
    if len(paths) > 1:  # one run of several ranks: its folder (each PATH given is its own run)
        folders = {str(Path(p).parent) for p in paths}
        if len(folders) != 1:
            raise SystemExit(f"{case['case']}: its rank traces are not in one folder: {folders}")
        paths = list(folders)
    run_id = gpuscope("ingest", *paths, store=store).split()[-1]
    doc = json.loads(gpuscope("analyze", run_id, "--json", store=store))
    recs = recommendations(doc)
    job = doc.get("job") if isinstance(doc.get("job"), dict) else {}
    fix_rank = job.get("fix_rank")
    if fix_rank is not None and fix_rank != doc.get("rank"):
        # the job's fixes are for the rank the verdict names: the job's list (the cause's fix
        # with its estimate, then that rank's), then its report's, then the default report's (a
        # fix seen from the waiting rank, e.g. load_imbalance's wait)
        fixed = json.loads(
            gpuscope("analyze", run_id, "--rank", str(fix_rank), "--json", store=store)
        )
        recs = recommendations(fixed) + recs
    first = recs[0]["id"] if recs else None
    first_gain = ((recs[0].get("estimate") or {}).get("gain_pct") if recs else None) or (
        recs[0].get("max_gain_pct") if recs else None
    )
    job_fix = first_job_fix(doc)
    if job_fix is not None:  # a job of several ranks: its verdict's first fix is the first fix
        first, first_gain = job_fix.get("id"), job_fix.get("gain_pct")
    rec = next((r for r in recs if r.get("id") == case["expected_fix"]), None)
    est = (rec or {}).get("estimate") or {}
    gain = est.get("gain_pct", (rec or {}).get("max_gain_pct", 0.0) if rec else 0.0)
    low = est.get("low_pct", 0.0 if rec is None else gain)
    high = est.get("high_pct", 0.0 if rec is None else gain)
    measured = case["gain_pct"]
    null = abs(measured) < NULL_PCT
    estimates: dict[str, list[float]] = {}
    for r in recs:  # every fix's estimate (the first of an id), for the timed first fixes
        e = r.get("estimate") or {}
        if r.get("id") not in estimates and "gain_pct" in e:
            estimates[str(r["id"])] = [e["gain_pct"], e.get("low_pct"), e.get("high_pct")]
    return {
        "case": case["case"],
        "name": case["name"],
        "expected": case["expected_fix"],
        "first": first,
        "first_gain": first_gain,
        "found": rec is not None,
        "estimate": gain,
        "low": low,
        "high": high,
        "method": est.get("method"),
        "measured": measured,
        "measured_runs": case["gain_pct_by_round"],
        "holds": holds(low, high, measured),
        "null": null,
        "held_out": bool(case.get("held_out")),
        "group": group_of(case),
        "estimates": estimates,
    }


AS_GOOD = 0.9
"""A first fix named in place of the planted cause's, timed, is as good as it where it gains at
least this share of the planted fix's measured gain on the same base case."""


def first_fix_table(rows: list[dict[str, Any]], timed: list[dict[str, Any]]) -> str:
    """The first fixes gpuscope named that were not the planted cause's, timed on their base
    case's planted variant (truth.json's ``first_fixes``): the timed fix's estimate now, whether
    it is still the first fix, the measured gain, whether the range holds it, and a false
    promise (> :data:`OVER_PCT` where the measured gain is ~0); then how many of those still
    first gain at least :data:`AS_GOOD` of the planted fix's measured gain (where that is at least
    :data:`NULL_PCT`). A timing marked ``void`` (the fix not applied) is left out. Empty without
    such rows."""
    by_case = {r["case"]: r for r in rows}
    lines = [
        "| base case | timed fix | first fix now (estimate %) | timed fix's estimate % (range) "
        "| measured % (rounds) | holds | false promise |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    n_over = 0
    n_first = n_good = 0
    for t in timed:
        r = by_case.get(t["base"])
        if r is None or t.get("void"):  # a timing that did not apply the fix counts nowhere
            continue
        planted = r.get("measured")
        if r["first"] == t["gpuscope_fix_id"] and planted is not None and planted >= NULL_PCT:
            n_first += 1  # still the first fix, where the planted fix gains something
            n_good += t["gain_pct"] >= AS_GOOD * planted
        est = (r.get("estimates") or {}).get(t["gpuscope_fix_id"])
        m = t["gain_pct"]
        if est is None:
            said, ok, over = "none (not named)", m < NULL_PCT, False
        else:
            gain, low, high = est
            low = gain if low is None else low
            high = gain if high is None else high
            said = f"{gain:.1f} ({low:.1f}-{high:.1f})"
            ok, over = holds(low, high, m), abs(m) < NULL_PCT and gain > OVER_PCT
        n_over += over
        first = r["first"] or "-"
        if r["first"] and r["first_gain"] is not None:
            first += f" ({r['first_gain']:.1f})"
        runs = ", ".join(f"{g:.1f}" for g in t["gain_pct_by_round"])
        lines.append(
            f"| {t['base']} | {t['gpuscope_fix_id']} | {first} | {said} | {m:.1f} ({runs}) | "
            f"{'yes' if ok else 'NO'} | {'YES' if over else 'no'} |"
        )
    if len(lines) == 2:
        return ""
    return "\n".join(lines) + (
        f"\n\nfirst fixes timed: false promises {n_over}; still first and gaining at least "
        f"{AS_GOOD:.0%} of the planted fix's measured gain: {n_good} of {n_first}"
    )


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| case | expected fix | gpuscope's first fix (estimate %) | expected fix's estimate % | range % | measured % "
        "(rounds) | holds |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [head]
    for r in rows:
        est = f"{r['estimate']:.1f}" if r["found"] else "- (no such fix)"
        rng = f"{r['low']:.1f}-{r['high']:.1f}" if r["found"] else "0-0"
        runs = ", ".join(f"{g:.1f}" for g in r["measured_runs"])
        first = r["first"] or "-"
        if r["first"] and r["first_gain"] is not None:
            first += f" ({r['first_gain']:.1f})"
        lines.append(
            f"| {r['case']} {r['name']} | {r['expected']} | {first} | {est} | {rng} | "
            f"{r['measured']:.1f} ({runs}) | {'yes' if r['holds'] else 'NO'} |"
        )
    return "\n".join(lines)


def first_fix_right(row: dict[str, Any], timed: Sequence[dict[str, Any]]) -> bool:
    """Whether ``row``'s first fix gains, measured, at least :data:`AS_GOOD` of the best fix
    measured on its base case: the planted cause's own fix (the case's gain) or one timed on the
    case's planted variant (truth.json's ``first_fixes``, not ``void``). A first fix never timed
    on the case is not right: nobody knows what it gains."""
    alt = {
        t["gpuscope_fix_id"]: t["gain_pct"]
        for t in timed
        if t["base"] == row["case"] and not t.get("void")
    }
    measured = {**alt, row["expected"]: row["measured"]}
    got = measured.get(row["first"])
    return got is not None and got >= AS_GOOD * max(measured.values())


def summary(rows: list[dict[str, Any]], timed: Sequence[dict[str, Any]] = ()) -> str:
    """The part's figures against issue 43's targets; ``timed``: truth.json's ``first_fixes``,
    for the count of first fixes gaining about the best measured on the case (:func:`first_fix_right`)."""
    widths = [r["high"] - r["low"] for r in rows if r["found"]]
    over = [r["case"] for r in rows if r["null"] and r["estimate"] > OVER_PCT]
    held = sum(r["holds"] for r in rows)
    real = [r for r in rows if r["measured"] >= NULL_PCT]  # the fix gained something
    first_right = sum(r["first"] == r["expected"] for r in real)
    first_good = sum(first_fix_right(r, timed) for r in real)
    n_real = len(real)
    width = statistics.median(widths) if widths else float("nan")

    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    return (
        f"ranges holding the measured gain: {held}/{len(rows)} [{mark(held == len(rows))}]; "
        f"first fix = expected (cases with a real gain): {first_right}/{n_real} "
        f"[{mark(first_right == n_real)}]; "
        f"first fix gaining at least {AS_GOOD:.0%} of the best measured on the case: "
        f"{first_good}/{n_real} [{mark(first_good == n_real)}]; "
        f"median range width: {width:.1f} points ({len(widths)} ranges) "
        f"[target <= {WIDTH_TARGET:.0f}: {mark(bool(widths) and width <= WIDTH_TARGET)}]; "
        f"estimated > {OVER_PCT:.0f} % where measured ~0 "
        f"(|gain| < {NULL_PCT:.0f} %): {len(over)}{' (' + ', '.join(over) + ')' if over else ''} "
        f"[{mark(not over)}]"
    )


ADVISED = (
    ("blas_one_thread_timing.json", "workers, one BLAS thread each"),
    ("bf16_channels_last_timing.json", "bf16, the model in channels_last"),
    ("pin_per_batch_timing.json", "DataLoader(pin_memory=True), each batch pinned"),
)
"""Recordings of a case's planted variant against its fix as gpuscope's code gives it, where the
recipe's fixed variant lacks part of that code (files beside the case's truth, which
make_truth.py does not read; sample_traces/validation/README.md, "One BLAS thread a worker",
"bf16 in channels_last" and "The fix as advised on more cases"): the file, and the fix as timed
there."""


def advised(rows: list[dict[str, Any]], root: Path) -> list[dict[str, Any]]:
    """Per judged case with an :data:`ADVISED` recording in ``root``/CASE: the fix as timed, its
    median gain by round (%), the case's truth and range, and whether the range holds it."""
    sys.path.insert(0, str(root))
    from make_truth import gains, round_pairs

    out = []
    for r in rows:
        for name, what in ADVISED:
            path = root / r["case"] / name
            if not path.exists():
                continue
            runs = [x for x in json.loads(path.read_text())["runs"] if x["mode"] == "time"]
            got = statistics.median(gains(*round_pairs(runs, "step_ms_median")))
            out.append(
                {
                    "case": r["case"],
                    "fix": r["expected"],
                    "as_timed": what,
                    "estimate": r["estimate"],
                    "low": r["low"],
                    "high": r["high"],
                    "truth": r["measured"],
                    "measured": got,
                    "holds": holds(r["low"], r["high"], got),
                }
            )
    return out


def advised_table(rows: list[dict[str, Any]]) -> str:
    """:func:`advised`'s rows as a markdown table and a count of the ranges holding them."""
    lines = [
        "| case | fix | as gpuscope's code gives it | estimate % (range) | truth % | measured % | holds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a in rows:
        lines.append(
            f"| {a['case']} | `{a['fix']}` | {a['as_timed']} | {a['estimate']:.1f} "
            f"({a['low']:.1f}-{a['high']:.1f}) | {a['truth']:.1f} | {a['measured']:.1f} | "
            f"{'yes' if a['holds'] else 'no'} |"
        )
    held = sum(a["holds"] for a in rows)
    return "\n".join(lines) + f"\n\nranges holding the fix as advised: {held}/{len(rows)}"


def group_of(case: dict[str, Any]) -> str:
    """The case's part of the set (truth.json's ``group``; without one, by ``held_out``)."""
    return str(case.get("group") or ("held_out_third" if case.get("held_out") else "calibration"))


def select(
    cases: list[dict[str, Any]],
    names: list[str],
    *,
    blind: bool,
    groups: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """The cases to judge: those named (all when none is); with ``groups``, only those whose
    part is one of them (exact names: a blind part only when named); otherwise less every blind
    part (a ``group`` whose name starts with ``blind``: ``blind``, ``blind2``, ...) unless
    ``blind``: they stay unseen while estimates are tuned."""
    if groups is not None:
        return [c for c in cases if (not names or c["case"] in names) and group_of(c) in groups]
    return [
        c
        for c in cases
        if (not names or c["case"] in names)
        and (blind or not str(c.get("group") or "").startswith("blind"))
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--truth", default=str(TRUTH))
    ap.add_argument("--json", default="", help="also write the rows here")
    ap.add_argument(
        "--blind", action="store_true", help="also judge every blind part (groups blind*)"
    )
    pick = ap.add_mutually_exclusive_group()
    pick.add_argument(
        "--groups", default="", help="judge only these groups (comma-separated, exact names)"
    )
    pick.add_argument(
        "--seen",
        action="store_true",
        help="judge only the parts already judged once: " + ",".join(SEEN_GROUPS),
    )
    args = ap.parse_args(argv)
    groups: tuple[str, ...] | None = None
    if args.seen:
        groups = SEEN_GROUPS
    elif args.groups:
        groups = tuple(g.strip() for g in args.groups.split(",") if g.strip())
    truth_path = Path(args.truth)
    truth = json.loads(truth_path.read_text())
    cases = select(truth["cases"], args.cases, blind=args.blind, groups=groups)
    timed: list[dict[str, Any]] = truth.get("first_fixes") or []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in cases:
            try:
                rows.append(analyse(c, truth_path.parent, str(Path(tmp) / "store")))
            except RuntimeError as e:
                print(f"{c['case']}: {e}", file=sys.stderr)
    for key, title in GROUPS:
        part = [r for r in rows if r["group"] == key]
        if not part:
            continue
        print(f"## {title}\n")
        print(table(part))
        print("\n" + summary(part, timed) + "\n")
    print("## All\n\n" + summary(rows, timed))
    ff = first_fix_table(rows, timed)
    if ff:
        print("\n## First fixes named where the planted cause was another, timed\n\n" + ff)
    as_advised = advised(rows, truth_path.parent)
    if as_advised:
        print(
            "\n## The fix as gpuscope's code gives it, where the recipe's lacked part of it, "
            "timed\n\n" + advised_table(as_advised)
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if len(rows) == len(cases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
