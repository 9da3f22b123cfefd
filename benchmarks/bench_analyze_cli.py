"""`gpuscope analyze --json` of one big run in a fresh process: wall, CPU and peak RSS beside the
trace's size, and ingest-then-analyze; each revision of ``--revs`` in turn (A B A B ...), so that
the code before and after a change run under the same load.

    .venv/bin/python benchmarks/bench_analyze_cli.py [--trace BIG.json | --size-gb 1.0]
        [--revs 0e3d6d1 HEAD] [--repeat 3] [--ingest-repeat 1] [--out benchmarks/out/]

- The trace: ``--trace``, else bench_ingest's big trace of ``--size-gb`` (``make_big_trace.py``
  replaying ``sample_traces/before``'s steps; built once, reused).
- Each revision runs from a tree of its own (``git worktree add --detach`` under
  ``OUT/analyze_cli/trees/<sha>``, its compiled parser built with gcc, a package tree of links
  ``pkg/gpuscope`` on ``PYTHONPATH``): the code is frozen while it is measured (the working tree
  changes under a shared checkout, and the stored document's version is the analysis code's
  fingerprint, gpuscope.analysis.report_part). ``WORKTREE`` names the working tree as it is.
- Per round and revision: ``gpuscope ingest TRACE --store S --json`` into a fresh store (first
  ``--ingest-repeat`` rounds only), then ``gpuscope analyze RUN --json --store S`` (``--repeat``
  rounds); each a fresh process, measured by ``os.wait4`` (wall; user + sys CPU; peak RSS).
- The analyze JSON of every revision is compared with the first's: equal, equal but for float
  rounding (relative 1e-12: DuckDB's parallel sums), or the first path that differs.

Prints a table (min-max over the rounds) with RSS / file and the 1-minute load average of each
round, and writes ``OUT/analyze_cli.json``. The machine is shared: the CPU seconds are steadier
than the wall seconds; the load average says how busy it was.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = REPO / ".venv" / "bin" / "python"
#: the package's folders (pyproject's package-dir): gpuscope = app, the others by name
SUBPACKAGES = ("ingest", "analysis", "vocabulary", "store")
REL_TOL = 1e-12


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def tree_for(rev: str, root: Path) -> tuple[str, Path]:
    """(label, PYTHONPATH entry) of revision ``rev``: a worktree of it with its parser compiled and
    a package tree of links; ``WORKTREE``: the working tree as installed (no copy)."""
    if rev == "WORKTREE":
        return rev, Path()
    sha = subprocess.check_output(["git", "-C", str(REPO), "rev-parse", rev], text=True).strip()
    wt, pkg = root / sha[:12] / "src", root / sha[:12] / "pkg"
    if not (pkg / "gpuscope").exists():
        if not wt.exists():
            wt.parent.mkdir(parents=True, exist_ok=True)
            subprocess.check_call(
                ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(wt), sha],
                stdout=subprocess.DEVNULL,
            )
        inc = sysconfig.get_paths()["include"]
        so = wt / "ingest" / "_compiled_parser.abi3.so"
        subprocess.check_call(
            ["gcc", "-O2", "-shared", "-fPIC", f"-I{inc}", "-DPy_LIMITED_API=0x030B0000",
             str(wt / "ingest" / "_compiled_parser.c"), "-o", str(so)]
        )  # fmt: skip
        top = pkg / "gpuscope"
        top.mkdir(parents=True)
        for entry in (wt / "app").iterdir():
            (top / entry.name).symlink_to(entry)
        for sub in SUBPACKAGES:
            (top / sub).symlink_to(wt / sub)
    return f"{rev} ({sha[:7]})", pkg


def measured(cmd: list[str], pythonpath: Path, stdout: Path) -> dict[str, Any]:
    """Run ``cmd`` in a fresh process (stdout to a file): wall s, CPU s (user + sys), peak RSS MB,
    exit code, 1-minute load average before it."""
    env = dict(os.environ)
    if str(pythonpath) not in ("", "."):
        env["PYTHONPATH"] = str(pythonpath)
    load = os.getloadavg()[0]
    with stdout.open("wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env, cwd="/tmp")
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {code}\n{err[-2000:]}")
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
        "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),
        "load1": round(load, 2),
    }


def differs(a: Any, b: Any, path: str = "$") -> tuple[str | None, int]:
    """(the first path where ``a`` and ``b`` differ beyond float rounding, or None; the number of
    floats that differ only within :data:`REL_TOL`)."""
    if isinstance(a, float) and isinstance(b, float):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return None, 0
        ok = math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)
        return (None, 1) if ok else (f"{path}: {a!r} != {b!r}", 0)
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}", 0
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} != {list(b)}", 0
        n = 0
        for k in a:
            where, m = differs(a[k], b[k], f"{path}.{k}")
            if where:
                return where, n
            n += m
        return None, n
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}", 0
        n = 0
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            where, m = differs(x, y, f"{path}[{i}]")
            if where:
                return where, n
            n += m
        return None, n
    return (None, 0) if a == b else (f"{path}: {a!r} != {b!r}", 0)


def summed(ingest: dict[str, Any], analyze: dict[str, Any]) -> dict[str, Any]:
    """An ingest and the analyze after it: their wall and CPU summed, the larger peak."""
    return {
        "wall_s": ingest["wall_s"] + analyze["wall_s"],
        "cpu_s": ingest["cpu_s"] + analyze["cpu_s"],
        "peak_rss_mb": max(ingest["peak_rss_mb"], analyze["peak_rss_mb"]),
        "load1": ingest["load1"],
    }


def span(xs: list[float]) -> str:
    return f"{min(xs):.2f}" if min(xs) == max(xs) else f"{min(xs):.2f}-{max(xs):.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None, help="the trace (default: the big one)")
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--revs", nargs="+", default=["HEAD"], help="revisions, in turn (WORKTREE)")
    ap.add_argument("--repeat", type=int, default=3, help="analyze rounds per revision")
    ap.add_argument("--ingest-repeat", type=int, default=1, help="ingest rounds per revision")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    a = ap.parse_args(argv)

    work = a.out / "analyze_cli"
    work.mkdir(parents=True, exist_ok=True)
    if a.trace is None:
        sys.path.insert(0, str(HERE))
        from bench_analysis import trace_for

        src = next((REPO / "sample_traces" / "before").glob("*rank0*.pt.trace.json*"))
        a.trace, _ = trace_for(src, a.size_gb, a.out)
    a.trace = a.trace.resolve()
    size_mb = a.trace.stat().st_size / 1e6
    trees = [tree_for(rev, work / "trees") for rev in a.revs]
    runs: dict[str, dict[str, Any]] = {
        label: {"ingest": [], "analyze": [], "run_id": None} for label, _ in trees
    }
    docs: dict[str, Any] = {}
    for rnd in range(max(a.repeat, a.ingest_repeat)):
        for i, (label, pkg) in enumerate(trees):
            r = runs[label]
            store = work / f"store-{i}"
            if rnd < a.ingest_repeat:
                shutil.rmtree(store, ignore_errors=True)
                cmd = [str(PY), "-m", "gpuscope", "ingest", str(a.trace), "--store", str(store)]
                m = measured([*cmd, "--json"], pkg, work / f"ingest-{i}.json")
                r["run_id"] = json.loads((work / f"ingest-{i}.json").read_text())[0]["run_id"]
                r["ingest"].append(m)
                log(f"round {rnd + 1} {label}: ingest {m}")
            if rnd < a.repeat:
                out = work / f"analyze-{i}.json"
                cmd = [str(PY), "-m", "gpuscope", "analyze", r["run_id"], "--json"]
                m = measured([*cmd, "--store", str(store)], pkg, out)
                r["analyze"].append(m)
                docs[label] = json.loads(out.read_text())
                log(f"round {rnd + 1} {label}: analyze {m}")

    first = trees[0][0]
    rows = []
    for label, _ in trees:
        r = runs[label]
        where, floats = differs(docs[first], docs[label])
        r["same_json_as"] = {"rev": first, "differs_at": where, "floats_within_rounding": floats}
        for what in ("ingest", "analyze"):
            ms = r[what]
            if ms:
                rows.append((label, what, ms))
        # each ingest with the analyze right after it (the same round)
        pairs = list(zip(r["ingest"], r["analyze"], strict=False))
        if pairs:
            rows.append((label, "ingest then analyze", [summed(i, x) for i, x in pairs]))

    print(f"\ntrace {a.trace} ({size_mb:,.0f} MB); fresh processes, min-max over the rounds")
    head = f"{'revision':<22} {'what':<20} {'wall s':>12} {'CPU s':>12} {'peak MB':>14} {'RSS/file':>10}  load1"
    print(head)
    print("-" * len(head))
    for label, what, ms in rows:
        rss = [m["peak_rss_mb"] for m in ms]
        print(
            f"{label:<22} {what:<20} {span([m['wall_s'] for m in ms]):>12} "
            f"{span([m['cpu_s'] for m in ms]):>12} {span(rss):>14} "
            f"{max(rss) / size_mb:>9.2f}x  {' '.join(str(m['load1']) for m in ms)}"
        )
    print()
    for label, _ in trees:
        s = runs[label]["same_json_as"]
        verdict = (
            f"differs at {s['differs_at']}"
            if s["differs_at"]
            else f"equal ({s['floats_within_rounding']} floats within {REL_TOL:g} relative)"
        )
        print(f"analyze --json of {label} vs {first}: {verdict}")
    result = {
        "trace": str(a.trace),
        "trace_mb": round(size_mb, 1),
        "revs": [t[0] for t in trees],
        "runs": runs,
        "cores": os.cpu_count(),
    }
    (a.out / "analyze_cli.json").write_text(json.dumps(result, indent=2))
    print(f"\nwrote {a.out / 'analyze_cli.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
