"""gpuscope over traces it was never tuned on: every trace file under the folders given, each
ingested into a new store and analysed (``gpuscope ingest``, then ``gpuscope analyze RUN --json``),
one line per file: whether it ingested (or the one-line error), the job step, GPU busy, the first
fix and its estimate, or the exception.

    .venv/bin/python benchmarks/public_traces.py FOLDER [FOLDER ...] [--json OUT]

The folders are trace sets from other projects' test data (e.g. HTA's ``tests/data`` and
TraceLens's ``tests/traces``, fetched by hand; nothing here downloads). A crash (a traceback, an
exit status other than 0 or 2) or an analysis that fails is what this is for; a clear refusal
(exit 2, one line naming the file: not a trace, an empty file) is a pass. The verdicts are read
by a person: no truth exists for them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SUFFIXES = (".json", ".json.gz")


def traces(folders: list[Path]) -> list[Path]:
    return sorted(
        p for f in folders for p in f.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES)
    )


def one(path: Path, gpuscope: list[str]) -> dict:
    """Ingest and analyse ``path`` in a store of its own: a row of the table."""
    store = Path(tempfile.mkdtemp(prefix="gpuscope-public-"))
    row: dict = {"file": str(path)}
    try:
        ing = subprocess.run(
            [*gpuscope, "ingest", str(path), "--db", str(store / "db"), "--json"],
            capture_output=True,
            text=True,
        )
        row["ingest_exit"] = ing.returncode
        if ing.returncode != 0:
            lines = ing.stderr.strip().splitlines()
            row["error"] = lines[-1] if lines else ""
            row["one_line"] = len(lines) == 1 and "Traceback" not in ing.stderr
            return row
        run_id = json.loads(ing.stdout)[0]["run_id"]
        ana = subprocess.run(
            [*gpuscope, "analyze", run_id, "--db", str(store / "db"), "--json"],
            capture_output=True,
            text=True,
        )
        row["analyze_exit"] = ana.returncode
        if ana.returncode != 0:
            row["error"] = (ana.stderr.strip().splitlines() or [""])[-1]
            return row
        job = json.loads(ana.stdout).get("job") or {}
        first = next(
            (f for f in job.get("findings", []) if f.get("id") == job.get("first_fix")), None
        )
        row.update(
            step_ms=(job.get("step_time_ms") or {}).get("p50"),
            busy_pct=((job.get("split") or {}).get("busy_pct")),
            first_fix=job.get("first_fix"),
            first_gain_pct=first.get("gain_pct") if first else None,
        )
        return row
    finally:
        shutil.rmtree(store, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, help="write the rows here too")
    args = ap.parse_args()
    gpuscope = [sys.executable, "-m", "gpuscope"]
    rows = [one(p, gpuscope) for p in traces(args.folders)]
    bad = 0
    for r in rows:
        ok = r.get("analyze_exit") == 0 or (r.get("ingest_exit") == 2 and r.get("one_line"))
        bad += not ok
        what = (
            f"step {r.get('step_ms')} ms, first fix {r.get('first_fix')} ({r.get('first_gain_pct')})"
            if r.get("analyze_exit") == 0
            else r.get("error", "")
        )
        print(f"{'ok ' if ok else 'BAD'} {Path(r['file']).name[:70]:70s} {what}")
    print(f"{len(rows)} traces, {bad} crashed or failed")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
