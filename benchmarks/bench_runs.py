"""Many runs: ``gpuscope runs`` and the Runs page with N stored runs, per store, side by side.

    .venv/bin/python benchmarks/bench_runs.py [--runs 100] [--store lake|duckdb|both] [--repeat 5]
                                              [--per-process 10] [--out benchmarks/out/]

1. N distinct small traces: the browser tests' hand-built training trace (tests/e2e/synth.py,
   6 steps), each with its own ``hostname`` in the trace metadata, so each has bytes (and so a
   content-addressed run id) of its own. Written once under ``OUT/runs/traces/``.
2. Per store of ``--store`` (stores.py), fresh: the traces are ingested by ``gpuscope ingest
   T1 .. Tk --store SPEC`` processes of ``--per-process`` traces each, one after the other (one
   commit each, as separate ingests make; timed, not part of the target).
3. ``gpuscope runs --store SPEC`` (the text table) and ``gpuscope runs --json``, each in a fresh
   process, ``--repeat`` times: median (and min) wall seconds, child CPU seconds.
4. The Runs page: a fresh process (this file, ``--page-worker``) runs the dashboard's script with
   Streamlit's AppTest on ``$GPUSCOPE_STORE=SPEC``: the server's first page load (imports, store
   open; no run analysed), then the first paint of the running server that has analysed no run
   (every run listed, figures for the time data.SUMMARY_BUDGET_S allows),
   then the reruns the page asks for until every run has its step time, GPU busy and MFU (each run
   analysed once), then ``--repeat`` reruns (warm: what a refresh costs, the store's generation
   read included); median. The table must list N runs.
5. Prints one table, the lake / DuckDB-file ratios and the verdict against the target (under 1 s
   with 100 runs: `gpuscope runs`, the first paint and a warm rerun), and writes
   ``OUT/runs.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from stores import add_store_option, chosen, ratio, remove, spec  # noqa: E402

MAIN = REPO / "app" / "web" / "main.py"
TARGET_S = 1.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def gpuscope() -> list[str]:
    exe = REPO / ".venv" / "bin" / "gpuscope"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gpuscope"]


def make_traces(folder: Path, n: int) -> list[Path]:
    """N small traces whose bytes differ (their ``hostname``); reused when already there."""
    sys.path.insert(0, str(REPO / "tests" / "e2e"))
    from synth import training_trace

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        path = folder / f"bench{i:04d}.pt.trace.json"
        if not path.exists():
            t = training_trace("after" if i % 2 else "before", seed=i)
            t.extra_meta.update({"hostname": f"bench-node-{i:04d}"})
            t.write(path, gz=False)
        out.append(path)
    return out


def timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a command; wall seconds, its CPU seconds (user + sys), exit status, stdout."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed: {done.stderr.strip()[-800:]}")
    return {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "stdout": done.stdout}


def median_of(samples: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [s["wall_s"] for s in samples]
    return {
        "median_s": round(statistics.median(walls), 4),
        "min_s": round(min(walls), 4),
        "cpu_median_s": round(statistics.median(s["cpu_s"] for s in samples), 4),
        "n": len(samples),
    }


def page_worker(store: str, repeat: int) -> None:
    """The Runs page by AppTest on ``store``: cold first run, then warm reruns (one JSON line)."""
    os.environ["GPUSCOPE_STORE"] = store
    import streamlit as st
    from gpuscope.web import data
    from streamlit.testing.v1 import AppTest

    rerun = st.rerun
    st.rerun = lambda *a, **k: None  # type: ignore[assignment]  # one script run per at.run()

    # Server start: the first page load of a fresh process (imports, store open), with no run
    # analysed: every run listed, "Analysing N more run(s)", none kept.
    summary = data.summary
    data.summary = lambda run_id: dict(data.FAILED)  # type: ignore[assignment,misc]
    t0 = time.perf_counter()
    AppTest.from_file(str(MAIN), default_timeout=1800).run()
    start = time.perf_counter() - t0
    data.summary = summary  # type: ignore[assignment]

    # First paint: a running server that has analysed none of the runs (e.g. just after they
    # were ingested): the list, and figures for the time data.SUMMARY_BUDGET_S allows.
    at = AppTest.from_file(str(MAIN), default_timeout=1800)
    t0 = time.perf_counter()
    at.run()
    first = time.perf_counter() - t0
    st.rerun = rerun
    if at.exception or not at.dataframe:
        raise SystemExit(f"the Runs page failed: {at.exception or [e.value for e in at.error]}")
    # Then the reruns the page asks for until every run has its figures.
    t0 = time.perf_counter()
    at.run()
    cold = first + time.perf_counter() - t0
    n_rows = len(at.dataframe[0].value)
    warm = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        at.run()
        warm.append(time.perf_counter() - t0)
        if at.exception:
            raise SystemExit(f"the Runs page failed on a rerun: {at.exception}")
    print(
        json.dumps(
            {
                "start_s": round(start, 4),
                "first_s": round(first, 4),
                "cold_s": round(cold, 4),
                "warm_s": [round(w, 4) for w in warm],
                "rows": n_rows,
            }
        )
    )


def bench_store(kind: str, traces: list[Path], a: argparse.Namespace, work: Path) -> dict[str, Any]:
    remove(kind, work, "runs")
    store = spec(kind, work, "runs")
    log(f"[{kind}] {store}: ingesting {len(traces)} runs, {a.per_process} per process")
    t0 = time.perf_counter()
    for i in range(0, len(traces), a.per_process):
        chunk = traces[i : i + a.per_process]
        timed([*gpuscope(), "ingest", *map(str, chunk), "--store", store])
    ingest_s = time.perf_counter() - t0

    listed = json.loads(timed([*gpuscope(), "runs", "--json", "--store", store])["stdout"])
    if len(listed) != len(traces):
        raise SystemExit(f"[{kind}] {len(listed)} runs stored, {len(traces)} expected")

    log(f"[{kind}] gpuscope runs x {a.repeat}")
    text = [timed([*gpuscope(), "runs", "--store", store]) for _ in range(a.repeat)]
    js = [timed([*gpuscope(), "runs", "--json", "--store", store]) for _ in range(a.repeat)]

    log(f"[{kind}] the Runs page (AppTest): 1 cold run + {a.repeat} reruns")
    page = timed(
        [sys.executable, str(Path(__file__).resolve()), "--page-worker", store, str(a.repeat)]
    )
    p = json.loads(page["stdout"].strip().splitlines()[-1])
    if p["rows"] != len(traces):
        raise SystemExit(f"[{kind}] the Runs page lists {p['rows']} runs, {len(traces)} expected")
    if not a.keep:
        remove(kind, work, "runs")
    return {
        "store": store,
        "ingest_s": round(ingest_s, 3),
        "runs_cli": median_of(text),
        "runs_cli_json": median_of(js),
        "page_start_s": p["start_s"],
        "page_first_s": p["first_s"],
        "page_cold_s": p["cold_s"],
        "page_warm": {
            "median_s": round(statistics.median(p["warm_s"]), 4),
            "min_s": min(p["warm_s"]),
            "n": len(p["warm_s"]),
        },
        "page_rows": p["rows"],
        "page_process": {"wall_s": page["wall_s"], "cpu_s": page["cpu_s"]},
    }


def fmt_table(results: dict[str, dict[str, Any]], n: int) -> str:
    lake, file = results.get("lake"), results.get("duckdb")
    target = f"< {TARGET_S:g} s"
    rows: list[tuple[str, str, str]] = [
        (f"ingest {n} runs (all processes)", "ingest_s", ""),
        ("gpuscope runs, median", "runs_cli.median_s", target),
        ("gpuscope runs, min", "runs_cli.min_s", ""),
        ("gpuscope runs --json, median", "runs_cli_json.median_s", target),
        ("Runs page, server start (imports, store open)", "page_start_s", ""),
        ("Runs page, first paint (no run analysed yet)", "page_first_s", target),
        ("Runs page, until every run has its figures", "page_cold_s", ""),
        ("Runs page, warm rerun, median", "page_warm.median_s", target),
        ("Runs page, warm rerun, min", "page_warm.min_s", ""),
    ]

    def get(r: dict[str, Any] | None, path: str) -> float | None:
        cur: Any = r
        for k in path.split("."):
            cur = cur.get(k) if isinstance(cur, dict) else None
        return None if cur is None else float(cur)

    head = (
        f"{'seconds (' + str(n) + ' runs stored)':<36}{'lake':>9}{'duckdb file':>13}"
        f"{'lake/file':>11}{'target':>9}"
    )
    out = [head, "-" * len(head)]
    for label, path, goal in rows:
        x, y = get(lake, path), get(file, path)
        fx = "" if x is None else f"{x:.3f}"
        fy = "" if y is None else f"{y:.3f}"
        out.append(f"{label:<36}{fx:>9}{fy:>13}{ratio(x, y):>11}{goal:>9}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--page-worker"]:
        page_worker(argv[1], int(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100, help="runs stored (default 100)")
    add_store_option(ap)
    ap.add_argument("--repeat", type=int, default=5, help="timed repeats of each (default 5)")
    ap.add_argument(
        "--per-process", type=int, default=10, help="traces per `gpuscope ingest` (default 10)"
    )
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--keep", action="store_true", help="keep the stores (deleted after each)")
    a = ap.parse_args(argv)
    work = a.out.resolve() / "runs"
    work.mkdir(parents=True, exist_ok=True)
    from bench_ingest import machine

    load_start = [round(x, 2) for x in os.getloadavg()]
    traces = make_traces(work / "traces", a.runs)
    results = {kind: bench_store(kind, traces, a, work) for kind in chosen(a.store)}
    load_end = [round(x, 2) for x in os.getloadavg()]
    table = fmt_table(results, a.runs)
    mach = machine()
    print(
        f"\n{a.runs} runs (hand-built 6-step traces, {sum(p.stat().st_size for p in traces) / 1e6:.1f}"
        f" MB of JSON); machine: {mach['cpu']}, {mach['cores']} cores; duckdb {mach['duckdb']}; "
        f"load average (1/5/15 min) at start {load_start}, end {load_end}\n"
    )
    print(table)
    verdict = {}
    for kind, r in results.items():
        cli, page = r["runs_cli"]["median_s"], r["page_warm"]["median_s"]
        verdict[kind] = {
            "runs_cli_pass": cli < TARGET_S,
            "page_first_pass": r["page_first_s"] < TARGET_S,
            "page_warm_pass": page < TARGET_S,
        }
        print(
            f"{kind}: gpuscope runs {cli:.2f} s, Runs page first paint {r['page_first_s']:.2f} s, "
            f"warm {page:.2f} s (target < {TARGET_S:g} s each): "
            f"{'PASS' if all(verdict[kind].values()) else 'FAIL'}"
        )
    if max(load_start[0], load_end[0]) > (os.cpu_count() or 1):
        print(
            f"WARNING: the machine was busy (1-min load average up to "
            f"{max(load_start[0], load_end[0]):.1f} on {os.cpu_count()} cores): wall times are "
            "pessimistic."
        )
    doc = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": mach,
        "runs": a.runs,
        "repeat": a.repeat,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "results": results,
        "verdict": verdict,
        "table": table,
    }
    (a.out.resolve() / "runs.json").write_text(json.dumps(doc, indent=1) + "\n")
    log(f"results: {a.out.resolve() / 'runs.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
