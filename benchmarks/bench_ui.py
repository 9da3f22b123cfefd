#!/usr/bin/env python3
"""Browser benchmark of the Run page: seconds from navigation to the sawtooth plot being visible
(the chart keyed ``saw_…``, not the first chart: a many-rank run's heatmap sits above it; a trace
of it drawn, seen in the animation frame it is drawn: :func:`wait_drawn`),
measured side by side with a bare Streamlit page holding one small Plotly chart.

    python benchmarks/bench_ui.py                             # the sample runs (make bench-ui)
    python benchmarks/bench_ui.py --db STORE_DIR [--run RUN] [--repeat 5]
    python benchmarks/bench_ui.py --trace big_run/            # ingest into a temp store first

Starts ``gpuscope ui`` on a free port against the store (default: a temp store of
``sample_traces/``'s runs), and a bare ``streamlit run`` of a one-chart page on another. Opens
``/run?run=RUN`` in Debian's chromium once cold (the analysis runs and is cached), then
``--repeat`` times warm, each load of the run page followed by one of the bare page (a new page, a
new session each), so both see the same machine load. Prints absolute times, the warm ratio
run page ÷ bare page (stable on a noisy machine: what the dashboard adds to Streamlit's own cost),
beside each page's browser main-thread CPU and its server's CPU (user + system) over the load, the
load average at the start and the end, and a JSON line; ``benchmarks/profile_ui.py`` says where a
load's time goes; exits 1 when the warm median exceeds ``--budget`` seconds (default 2).
The store may be open in other processes (a dashboard, an ingest) at the same time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the browser tests' server helpers (they need no pytest)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))

from serve import CHROMIUM_ARGS, NotUp, free_port, start_ui, stop_process, wait_until_up

REPO = Path(__file__).resolve().parents[1]
# the sawtooth's chart (its key starts with "saw_"), not whichever Plotly chart comes first: a
# many-rank run's page draws its rank heatmap above it; the bare page's one chart has such a key.
# Its traces drawn, not only its SVG root (which Plotly adds before it draws them).
SAWTOOTH = '[class*="st-key-saw_"] [data-testid="stPlotlyChart"] .main-svg .trace'
#: Whether the sawtooth's first trace is drawn (in the page, as Playwright's ``visible``: a
#: non-empty box, not hidden): the page's clock then (ms since its navigation started), else
#: false. Checked on every animation frame (:func:`wait_drawn`).
DRAWN_JS = """(sel) => {
  const t = document.querySelector(sel);
  if (!t) return false;
  const r = t.getBoundingClientRect();
  if (r.width <= 0 || r.height <= 0 || getComputedStyle(t).visibility === "hidden") return false;
  return performance.now();
}"""
SAMPLES = ("before", "after", "ddp")
BARE_PAGE = """import plotly.graph_objects as go
import streamlit as st

st.title("bare")
st.plotly_chart(go.Figure(go.Scatter(x=[0, 1, 2, 3], y=[0, 100, 0, 100])), key="saw_bare")
"""


def absolute_store(spec: str) -> str:
    """``spec`` with a relative local path made absolute: the dashboard runs in a temp folder, where
    a relative path would name a new, empty store."""
    if spec.startswith("duckdb:"):
        return "duckdb:" + str(Path(spec[len("duckdb:") :]).expanduser().resolve())
    if "://" in spec:
        return spec
    return str(Path(spec).expanduser().resolve())


def pick_run(db: str | Path, ref: str | None) -> tuple[str, int]:
    """(run id, events): ``ref`` resolved, else the run with the most events."""
    from gpuscope.store import connect, resolve_run

    con = connect(db, read_only=True)
    try:
        if ref:
            from gpuscope.ingest.errors import IngestError

            try:
                rid = resolve_run(con, ref)
            except IngestError as e:  # a name several runs share: the error lists them
                raise SystemExit(f"bench_ui: {e}") from None
            if rid is None:
                raise SystemExit(f"bench_ui: no run {ref!r} in {db}")
        else:
            row = con.execute(
                "SELECT run_id FROM runs WHERE kind = 'trace' ORDER BY n_events DESC LIMIT 1"
            ).fetchone()
            if row is None:
                raise SystemExit(f"bench_ui: {db} holds no trace run")
            rid = str(row[0])
        n = con.execute("SELECT n_events FROM runs WHERE run_id = ?", [rid]).fetchone()
        return rid, int(n[0]) if n else 0
    finally:
        con.close()


def start_server(db: str | Path, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``gpuscope ui`` on the store ``db`` on a free port (log: ``workdir/server.log``); the
    process and its URL once it is up."""
    try:
        proc, url, _ = start_ui(workdir, ["--db", str(db)], dict(os.environ))
    except NotUp as e:
        raise SystemExit(f"bench_ui: {e}") from None
    return proc, url


def start_bare(script: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """A bare ``streamlit run`` of ``script`` (one small Plotly chart): the baseline."""
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(script),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=script.parent)
    health = f"http://127.0.0.1:{port}/_stcore/health"
    try:
        wait_until_up(health, proc, "the bare page", log=log, body=b"ok")
    except NotUp as e:
        raise SystemExit(f"bench_ui: {e}") from None
    return proc


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux ``/proc``; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_drawn(page, timeout_s: float) -> float:  # type: ignore[no-untyped-def]
    """Seconds from the page's navigation start to the animation frame in which the sawtooth plot
    is first drawn (:data:`DRAWN_JS`, checked every frame). A locator's ``wait_for`` polls at up to
    500 ms and runs on the page's main thread: it saw the plot 0.3-1.2 s after it was drawn, later
    on the Run page, whose main thread by then draws the sections held back until the plot had
    drawn (and its CPU time counted them)."""
    got = page.wait_for_function(DRAWN_JS, arg=SAWTOOTH, polling="raf", timeout=timeout_s * 1000)
    return float(got.json_value()) / 1000


def time_page(ctx, url: str, timeout_s: float) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(seconds from navigation start to the sawtooth plot drawn, :func:`wait_drawn`; CPU seconds
    of the page's main thread until it was seen): a new page, i.e. a new Streamlit session, in the
    browser context ``ctx``. The CPU time (Chrome's ThreadTime) does not grow when other processes
    load the machine, so it tells what the wall time would be on an idle one."""
    page = ctx.new_page()
    try:
        cdp = ctx.new_cdp_session(page)
        cdp.send("Performance.enable")

        def cpu() -> float:
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            return float(metrics.get("ThreadTime", float("nan")))

        c0 = cpu()
        page.goto(url, wait_until="commit")
        wall = wait_drawn(page, timeout_s)
        return wall, cpu() - c0
    finally:
        page.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument(
        "--db",
        type=absolute_store,
        help="an existing store: a folder, duckdb:FILE or postgres://… (default run: the one with "
        "the most events)",
    )
    src.add_argument(
        "--trace", type=Path, nargs="+", help="ingest these (each one run) into a temp store first"
    )
    ap.add_argument("--run", help="run id, unique prefix or exact name")
    ap.add_argument("--repeat", type=int, default=5, help="warm page loads (default 5)")
    ap.add_argument("--budget", type=float, default=2.0, help="warm median target, s (default 2)")
    ap.add_argument(
        "--timeout", type=float, default=900.0, help="per page load, s (cold includes the analysis)"
    )
    ap.add_argument(
        "--chromium",
        default=os.environ.get("GPUSCOPE_CHROMIUM")
        or shutil.which("chromium")
        or "/usr/bin/chromium",
    )
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="gpuscope-bench-ui-"))
    db: str | Path = args.db
    ingest_s = None
    traces = args.trace
    if not args.db and not traces:
        traces = [
            REPO / "sample_traces" / n for n in SAMPLES if (REPO / "sample_traces" / n).is_dir()
        ]
        print(f"no --db/--trace: the sample runs ({', '.join(p.name for p in traces)})")
    if traces:
        from gpuscope.ingest.loader import ingest_paths
        from gpuscope.store import connect

        db = tmp / "bench-store"
        con = connect(db)
        t0 = time.perf_counter()
        ingest_paths(con, traces)
        ingest_s = time.perf_counter() - t0
        con.close()
        print(f"ingested {', '.join(map(str, traces))} in {ingest_s:.1f} s")
    run_id, n_events = pick_run(db, args.run)
    proc, base_url = start_server(db, tmp)
    bare_port = free_port()
    bare_script = tmp / "bare_page.py"
    bare_script.write_text(BARE_PAGE)
    bare = start_bare(bare_script, bare_port, tmp / "bare.log")
    url = f"{base_url}/run?run={run_id}"
    bare_url = f"http://127.0.0.1:{bare_port}/"
    print(f"run {run_id} ({n_events:,} events): {url}; bare page: {bare_url}")
    from playwright.sync_api import sync_playwright

    load0 = os.getloadavg()[0]
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            # a returning visitor: one browser (its HTTP cache warm after the first visit), a new
            # Streamlit session per page load
            ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
            bare_ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
            cold, cold_busy = time_page(ctx, url, args.timeout)
            bare_cold, _ = time_page(bare_ctx, bare_url, args.timeout)
            print(
                f"cold: {cold:.2f} s (main-thread CPU {cold_busy:.2f} s; analysis computed and "
                f"cached); bare page first load {bare_cold:.2f} s"
            )
            warm, busy, base, base_busy, srv, bare_srv = [], [], [], [], [], []
            for i in range(args.repeat):
                c0 = proc_cpu_s(proc.pid)
                w, b = time_page(ctx, url, args.timeout)
                c1 = proc_cpu_s(proc.pid)
                b0 = proc_cpu_s(bare.pid)
                r, rb = time_page(bare_ctx, bare_url, args.timeout)
                b1 = proc_cpu_s(bare.pid)
                warm.append(w)
                busy.append(b)
                base.append(r)
                base_busy.append(rb)
                srv.append(c1 - c0)
                bare_srv.append(b1 - b0)
                print(
                    f"warm {i + 1}: run page {w:.2f} s (main-thread CPU {b:.2f} s, server CPU "
                    f"{c1 - c0:.2f} s), bare page {r:.2f} s (main-thread CPU {rb:.2f} s, server "
                    f"CPU {b1 - b0:.2f} s), "
                    f"ratio {w / r:.2f}"
                )
            ctx.close()
            bare_ctx.close()
            fresh_ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
            fresh, fresh_busy = time_page(fresh_ctx, url, args.timeout)
            fresh_ctx.close()
            print(
                f"warm server, first visit of a new browser: {fresh:.2f} s (main-thread CPU {fresh_busy:.2f} s)"
            )
            browser.close()
    finally:
        stop_process(proc)
        stop_process(bare)
    load = os.getloadavg()[0]
    med = statistics.median(warm) if warm else float("nan")
    base_med = statistics.median(base) if base else float("nan")
    ratio = statistics.median([w / r for w, r in zip(warm, base, strict=True)]) if warm else None
    cpu_med = statistics.median(busy) if busy else float("nan")
    base_cpu_med = statistics.median(base_busy) if base_busy else float("nan")
    result = {
        "run": run_id,
        "events": n_events,
        "ingest_s": ingest_s,
        "cold_s": round(cold, 3),
        "bare_cold_s": round(bare_cold, 3),
        "warm_s": [round(w, 3) for w in warm],
        "warm_median_s": round(med, 3),
        "bare_warm_s": [round(r, 3) for r in base],
        "bare_warm_median_s": round(base_med, 3),
        "warm_ratio_median": None if ratio is None else round(ratio, 3),
        "warm_browser_cpu_median_s": round(cpu_med, 3),
        "bare_browser_cpu_median_s": round(base_cpu_med, 3),
        "browser_cpu_ratio": round(cpu_med / base_cpu_med, 3) if base_busy else None,
        "warm_server_cpu_median_s": round(statistics.median(srv), 3) if srv else None,
        "bare_server_cpu_median_s": round(statistics.median(bare_srv), 3) if bare_srv else None,
        "load_avg_1m_start": round(load0, 2),
        "fresh_browser_s": round(fresh, 3),
        "load_avg_1m": round(load, 2),
        "cpus": os.cpu_count(),
        "budget_s": args.budget,
        "ok": bool(warm) and med <= args.budget,
    }
    print(
        f"warm median {med:.2f} s vs bare page {base_med:.2f} s: ratio {ratio or float('nan'):.2f}; "
        f"cold {cold:.2f} s; browser main-thread CPU {cpu_med:.2f} s against {base_cpu_med:.2f} s "
        f"({cpu_med / base_cpu_med:.2f}x); server CPU per run page "
        f"{statistics.median(srv) if srv else float('nan'):.2f} s against "
        f"{statistics.median(bare_srv) if bare_srv else float('nan'):.2f} s (budget {args.budget:.1f} s; "
        f"load average {load:.1f} on {os.cpu_count()} CPUs): {'OK' if result['ok'] else 'OVER BUDGET'}"
    )
    print(json.dumps(result))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
