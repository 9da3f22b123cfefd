#!/usr/bin/env python3
"""Where a warm Run page load goes, beside the bare Streamlit page bench_ui.py compares it with:
chromium's main thread by kind of work (script by file, style/layout, paint), the websocket bytes
Streamlit sent, and when each Plotly chart first drew.

    python benchmarks/profile_ui.py --db STORE [--run RUN] [--repeat 3] [--out DIR]

Starts ``gpuscope ui`` and the bare page as bench_ui.py does, loads the run page once cold (the
analysis computed and cached), then ``--repeat`` times warm, each with chromium's performance
trace (``devtools.timeline`` + V8's sampling profiler) from navigation to the sawtooth plot
drawn (``bench_ui.wait_drawn``), then the same for the bare page. Prints, per page, the medians of: main-thread busy
seconds by category, script seconds by source file (self time of V8's samples), websocket
messages and bytes received before the sawtooth drew, and the seconds at which each Plotly chart's
SVG appeared. ``--out`` keeps the last trace of each page (JSON, for chrome://tracing or Perfetto).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))

from bench_ui import (
    BARE_PAGE,
    SAWTOOTH,
    absolute_store,
    pick_run,
    start_bare,
    start_server,
    wait_drawn,
)
from serve import CHROMIUM_ARGS, free_port, stop_process

CATEGORIES = [
    "devtools.timeline",
    "v8.execute",
    "disabled-by-default-devtools.timeline",
    "disabled-by-default-v8.cpu_profiler",
    "blink.user_timing",
]
# the main thread's work by trace event name: what each top-level slice's time is charged to
KINDS = {
    "EvaluateScript": "script",
    "v8.compile": "script",
    "v8.compileModule": "script",
    "v8.evaluateModule": "script",
    "FunctionCall": "script",
    "TimerFire": "script",
    "FireAnimationFrame": "script",
    "EventDispatch": "script",
    "v8.run": "script",
    "V8.GCScavenger": "gc",
    "MajorGC": "gc",
    "MinorGC": "gc",
    "BlinkGC.AtomicPhase": "gc",
    "ParseHTML": "parse html",
    "ParseAuthorStyleSheet": "style",
    "UpdateLayoutTree": "style",
    "RecalculateStyles": "style",
    "Layout": "layout",
    "UpdateLayerTree": "layout",
    "PrePaint": "paint",
    "Paint": "paint",
    "Layerize": "paint",
    "Commit": "paint",
    "CompositeLayers": "paint",
    "DecodeImage": "paint",
}


def main_thread(events: list[dict[str, Any]]) -> tuple[int, int] | None:
    """(pid, tid) of the page's renderer main thread: the CrRendererMain with the most work."""
    names = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("ph") == "M"
        and e.get("name") == "thread_name"
        and e.get("args", {}).get("name") == "CrRendererMain"
    }
    work: collections.Counter[tuple[int, int]] = collections.Counter()
    for e in events:
        if (e.get("pid"), e.get("tid")) in names and e.get("ph") == "X":
            work[(e["pid"], e["tid"])] += int(e.get("dur", 0))
    return work.most_common(1)[0][0] if work else None


def breakdown(events: list[dict[str, Any]], t_end_us: float) -> dict[str, float]:
    """Main-thread seconds by kind of work up to ``t_end_us`` (trace clock): each complete slice
    is charged its self time (its duration less its children's) to its kind; time in slices of
    no known kind goes to "other". ``busy`` is the top-level slices' total."""
    mt = main_thread(events)
    if mt is None:
        return {}
    xs = sorted(
        (e for e in events if (e.get("pid"), e.get("tid")) == mt and e.get("ph") == "X"),
        key=lambda e: (e["ts"], -int(e.get("dur", 0))),
    )
    out: dict[str, float] = collections.defaultdict(float)
    stack: list[tuple[float, str, list[float]]] = []  # (end, kind, [child time])
    busy = 0.0
    for e in xs:
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        if ts >= t_end_us:
            break
        while stack and stack[-1][0] <= ts:
            stack.pop()
        kind = KINDS.get(e["name"])
        if kind is None:
            kind = stack[-1][1] if stack else "other"
        if stack:
            stack[-1][2][0] += dur
            parent_kind = stack[-1][1]
            out[parent_kind] -= dur / 1e6
        else:
            busy += dur
        out[kind] += dur / 1e6
        stack.append((ts + dur, kind, [0.0]))
    out["busy"] = busy / 1e6
    return dict(out)


def script_by_file(events: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds of V8 samples (self time) per script file of the page's main thread, from the
    trace's ProfileChunk events (other renderers, e.g. chromium's own pages, left out)."""
    mt = main_thread(events)
    pid = mt[0] if mt else None
    nodes: dict[tuple[str, int], str] = {}
    per: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("name") != "ProfileChunk" or e.get("pid") != pid:
            continue
        data = e.get("args", {}).get("data", {})
        prof = data.get("cpuProfile", {})
        pid_ = e.get("id", "")
        for n in prof.get("nodes", []):
            url = n.get("callFrame", {}).get("url", "") or n.get("callFrame", {}).get(
                "functionName", "(native)"
            )
            nodes[(pid_, n["id"])] = url.rsplit("/", 1)[-1] or "(native)"
        for nid, dt in zip(prof.get("samples", []), data.get("timeDeltas", []), strict=False):
            per[nodes.get((pid_, nid), "?")] += max(0, dt) / 1e6
    return dict(per)


def profile_page(browser: Any, ctx: Any, url: str, timeout_s: float, out: Path | None) -> dict:
    """One traced load of ``url`` in a new page of ``ctx``."""
    page = ctx.new_page()
    cdp = ctx.new_cdp_session(page)
    cdp.send("Network.enable")
    frames: list[tuple[float, int]] = []
    cdp.on(
        "Network.webSocketFrameReceived",
        lambda p: frames.append((time.perf_counter(), len(p["response"]["payloadData"]))),
    )
    tmp = Path(tempfile.mkdtemp(prefix="gpuscope-profile-ui-"))
    trace_file = tmp / "trace.json"
    browser.start_tracing(page=page, path=str(trace_file), categories=CATEGORIES)
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit")
    wait_drawn(page, timeout_s)  # the frame the plot drew (bench_ui's clock)
    wall = time.perf_counter() - t0
    got = [(t - t0, b) for t, b in frames if t <= t0 + wall]
    n_frames = len(got)
    big = max(got, key=lambda f: f[1]) if got else (float("nan"), 0)
    ws_bytes = sum(b for t, b in frames if t <= t0 + wall)
    charts = page.evaluate(
        "() => document.querySelectorAll('[data-testid=\"stPlotlyChart\"]').length"
    )
    page.evaluate("() => performance.mark('gpuscope-sawtooth-seen')")
    browser.stop_tracing()
    page.close()
    doc = json.loads(trace_file.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    marks = [e["ts"] for e in events if e.get("name") == "gpuscope-sawtooth-seen"]
    nav = [e["ts"] for e in events if e.get("name") in ("navigationStart", "NavigationTiming")]
    t_end = marks[0] if marks else float("inf")
    t_nav = min(nav) if nav else min(e["ts"] for e in events if e.get("ts"))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(trace_file, out / f"trace_{'run' if '/run' in url else 'bare'}.json")
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "wall": wall,
        "trace_span": (t_end - t_nav) / 1e6,
        "main": breakdown(events, t_end),
        "files": script_by_file([e for e in events if e.get("ts", 0) < t_end]),
        "ws_frames": n_frames,
        "ws_first_s": got[0][0] if got else float("nan"),
        "ws_last_s": got[-1][0] if got else float("nan"),
        "ws_biggest": big,
        "ws_bytes": ws_bytes,
        "charts_at_sawtooth": charts,
    }


def summary(name: str, runs: list[dict]) -> dict[str, Any]:
    med = statistics.median
    keys = sorted({k for r in runs for k in r["main"]})
    files = collections.Counter[str]()
    for r in runs:
        files.update(r["files"])
    top = files.most_common(12)
    s = {
        "page": name,
        "wall_s": [round(r["wall"], 3) for r in runs],
        "main_s": {k: round(med([r["main"].get(k, 0.0) for r in runs]), 3) for k in keys},
        "script_by_file_s": {f: round(v / len(runs), 3) for f, v in top},
        "ws_frames": med([r["ws_frames"] for r in runs]),
        "ws_bytes": med([r["ws_bytes"] for r in runs]),
        "charts_at_sawtooth": med([r["charts_at_sawtooth"] for r in runs]),
        "ws_first_s": round(med([r["ws_first_s"] for r in runs]), 3),
        "ws_last_s": round(med([r["ws_last_s"] for r in runs]), 3),
        "ws_biggest": [(round(r["ws_biggest"][0], 3), r["ws_biggest"][1]) for r in runs],
    }
    print(f"== {name}: wall {', '.join(f'{w:.2f}' for w in s['wall_s'])} s")
    print("  main thread (median s): " + ", ".join(f"{k} {v:.3f}" for k, v in s["main_s"].items()))
    print("  script self time by file (mean s):")
    for f, v in s["script_by_file_s"].items():
        print(f"    {v:7.3f}  {f}")
    print(
        f"  websocket before the sawtooth: {s['ws_frames']} messages, {s['ws_bytes']:,} bytes "
        f"(base64 of binary frames); Plotly charts in the page then: {s['charts_at_sawtooth']}"
    )
    print(
        f"  first message at {s['ws_first_s']:.2f} s, last before the sawtooth at "
        f"{s['ws_last_s']:.2f} s; the biggest (s, bytes): {s['ws_biggest']}"
    )
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=absolute_store, required=True)
    ap.add_argument("--run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gpuscope-profile-ui-"))
    run_id, n_events = pick_run(args.db, args.run)
    proc, base_url = start_server(args.db, tmp)
    bare_script = tmp / "bare_page.py"
    bare_script.write_text(BARE_PAGE)
    bare_port = free_port()
    bare = start_bare(bare_script, bare_port, tmp / "bare.log")
    url, bare_url = f"{base_url}/run?run={run_id}", f"http://127.0.0.1:{bare_port}/"
    print(f"run {run_id} ({n_events:,} events)")
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
            bctx = browser.new_context(viewport={"width": 1440, "height": 1000})
            for c, u in ((ctx, url), (bctx, bare_url)):  # cold: analysis cached, HTTP cache warm
                pg = c.new_page()
                pg.goto(u)
                pg.locator(SAWTOOTH).first.wait_for(state="visible", timeout=args.timeout * 1000)
                pg.wait_for_timeout(3000)
                pg.close()
            runs, bares = [], []
            for _ in range(args.repeat):
                runs.append(profile_page(browser, ctx, url, args.timeout, args.out))
                bares.append(profile_page(browser, bctx, bare_url, args.timeout, args.out))
            browser.close()
    finally:
        stop_process(proc)
        stop_process(bare)
    res = [summary("run page", runs), summary("bare page", bares)]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(json.dumps(res))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
