#!/usr/bin/env python3
"""Server-side time of the Run page under N concurrent dashboard sessions (no browsers).

    python benchmarks/bench_concurrency.py --sessions 8 32 [--rounds 2] [--trace DIR ...]

Ingests the sample runs (``sample_traces/before``, ``after``, ``ddp``; or ``--trace`` paths) into
a temp store, starts ``gpuscope ui --headless`` on a free port, then per round opens N WebSocket
sessions at once (``/_stcore/stream``, Streamlit's own protocol: one ``rerun_script`` BackMsg
naming the ``run`` page and ``run=<id>``) and times, per session, from the request to the
``script_finished`` ForwardMsg: the script's run on the server plus loopback transfer; no
rendering, no browser CPU. Sessions are spread over the runs round-robin. A session whose page
shows an exception element or no chart (not the run page), or that ends other than ``FINISHED_SUCCESSFULLY``, counts as failed.
Round 1 is cold (the analyses run and fill the cache), later rounds warm; every round uses new
sessions (as new visitors). Prints a table and one JSON line; exits 1 when a session failed or
the warm p95 at 8 sessions is 1 s or more (``--budget``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACES = [REPO / "sample_traces" / d for d in ("before", "after", "ddp")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ingest(db: Path, traces: list[Path]) -> list[str]:
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    con = connect(db)
    try:
        return [r.run_id for r in ingest_paths(con, traces)]
    finally:
        con.close()


def start_ui(db: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "gpuscope", "ui", "--db", str(db), "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--headless"], stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=log.parent
    )
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"the dashboard did not start:\n{log.read_text()[-2000:]}")


async def one_session(url: str, run_id: str, timeout: float) -> dict[str, object]:
    """Open a session, ask for ``/run?run=<run_id>``, wait for the script to finish."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = BackMsg()
    msg.rerun_script.query_string = f"run={run_id}"
    msg.rerun_script.page_name = "run"
    t_connect = time.perf_counter()
    n_msgs = n_bytes = 0
    exceptions: list[str] = []
    charts = 0
    status = "no answer"
    async with websockets.connect(
        f"ws://{url}/_stcore/stream",
        subprotocols=["streamlit"],  # type: ignore[list-item]
        max_size=None,
        open_timeout=timeout,
    ) as ws:
        t0 = time.perf_counter()
        await ws.send(msg.SerializeToString())
        deadline = t0 + timeout
        while time.perf_counter() < deadline:
            raw = await asyncio.wait_for(ws.recv(), deadline - time.perf_counter())
            n_msgs += 1
            n_bytes += len(raw)
            fwd = ForwardMsg()
            fwd.ParseFromString(raw if isinstance(raw, bytes) else raw.encode())
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                what = el.WhichOneof("type")
                if what == "exception":
                    exceptions.append(f"{el.exception.type}: {el.exception.message}"[:200])
                elif what == "plotly_chart":
                    charts += 1
            elif kind == "script_finished":
                status = ForwardMsg.ScriptFinishedStatus.Name(fwd.script_finished)
                if status != "FINISHED_FRAGMENT_RUN_SUCCESSFULLY":
                    break
    t1 = time.perf_counter()
    return {
        "run_id": run_id,
        "connect_s": t0 - t_connect,
        "page_s": t1 - t0,
        "status": status,
        "exceptions": exceptions,
        "charts": charts,
        "messages": n_msgs,
        "bytes": n_bytes,
    }


async def round_of(url: str, runs: list[str], n: int, timeout: float) -> list[dict[str, object]]:
    jobs = [one_session(url, runs[i % len(runs)], timeout) for i in range(n)]
    out = await asyncio.gather(*jobs, return_exceptions=True)
    return [
        r if isinstance(r, dict) else {"status": f"error: {r!r}"[:200], "page_s": float("nan")}
        for r in out
    ]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def server_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the server process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--rounds", type=int, default=2, help="rounds per N (the first is cold)")
    ap.add_argument("--trace", type=Path, nargs="*", default=DEFAULT_TRACES)
    ap.add_argument("--timeout", type=float, default=300.0, help="per session, seconds")
    ap.add_argument("--budget", type=float, default=1.0, help="warm p95 at 8 sessions, seconds")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-conc-") as tmp:
        db = Path(tmp) / "store"
        runs = ingest(db, list(args.trace))
        proc, url = start_ui(db, Path(tmp) / "server.log")
        results: list[dict[str, object]] = []
        try:
            for n in args.sessions:
                for rnd in range(args.rounds):
                    cpu0, w0 = server_cpu_s(proc.pid), time.perf_counter()
                    got = asyncio.run(round_of(url, runs, n, args.timeout))
                    wall = time.perf_counter() - w0
                    cpu = server_cpu_s(proc.pid) - cpu0
                    times = [float(r["page_s"]) for r in got]  # type: ignore[arg-type]
                    bad = [
                        r
                        for r in got
                        if r["status"] != "FINISHED_SUCCESSFULLY"
                        or r.get("exceptions")
                        or not r.get("charts")  # not the run page (a not-found page has none)
                    ]
                    row = {
                        "sessions": n,
                        "round": "cold" if rnd == 0 else f"warm {rnd}",
                        "p50_s": round(statistics.median(times), 3),
                        "p95_s": round(pct(times, 0.95), 3),
                        "max_s": round(max(times), 3),
                        "wall_s": round(wall, 3),
                        "server_cpu_s": round(cpu, 2),
                        "failed": len(bad),
                        "first_failure": (bad[0].get("exceptions") or bad[0]["status"])
                        if bad
                        else None,
                    }
                    results.append(row)
                    print(
                        f"{n:>3} sessions {row['round']:>7}: p50 {row['p50_s']:.3f} s  p95 "
                        f"{row['p95_s']:.3f} s  max {row['max_s']:.3f} s  (round {row['wall_s']:.2f} s"
                        f" wall, {row['server_cpu_s']:.2f} s server CPU)  failed {row['failed']}",
                        flush=True,
                    )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    load = os.getloadavg()[0]
    print(
        json.dumps(
            {"cores": os.cpu_count(), "load1": round(load, 2), "runs": runs, "results": results}
        )
    )
    warm8 = [r for r in results if r["sessions"] == 8 and r["round"] != "cold"]
    failed = any(r["failed"] for r in results)
    slow = any(float(r["p95_s"]) >= args.budget for r in warm8)  # type: ignore[arg-type]
    return 1 if failed or slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
