"""Many ranks: gpuscope's ingest + the run's summary vs HTA's load + temporal + idle breakdown of the
same N rank files, side by side, interleaved and repeated; and how the run summary grows with ranks.

    .venv/bin/python benchmarks/bench_ranks.py --ranks 16 [--repeat 2] [--skip-hta]
    .venv/bin/python benchmarks/bench_ranks.py --ranks 128 --repeat 1          # the issue's comparison
    .venv/bin/python benchmarks/bench_ranks.py --summary-ranks 1024 --ranks 0  # summary scaling only
    .venv/bin/python benchmarks/bench_ranks.py --ranks 0 --part-cost 16       # per-rank part, A/B

1. The N rank files: copies of the real 2×H200 DDP pair (``sample_traces/ddp``; rank i is a copy of
   rank ``i % 2``) with ``distributedInfo.rank``/``world_size`` (and the capture helper's rank and
   world size keys) rewritten in place, Kineto's layout kept, as plain JSON in ``OUT/ranks-N/``
   (kept for reuse).
2. Per repeat, in alternating order (gpuscope first, then HTA first), each through
   ``benchmarks/measure.py`` (wall, peak RSS of the process tree):
   * gpuscope: ``gpuscope ingest DIR --db STORE`` (a new local store; each rank's summary is
     computed in the ingest) then ``gpuscope analyze RUN --json`` (the run's summary: rank 0 in
     detail, every other rank's line from its stored summary);
   * HTA 0.5.0 (``OUT/hta-venv``, made as bench_ingest does): ``TraceAnalysis(trace_dir=DIR)``,
     ``get_temporal_breakdown`` and ``get_idle_time_breakdown`` (``benchmarks/hta_ranks.py``).
3. ``--summary-ranks K``: a run of K small ranks and a run of 1 (the same small rank file), then
   ``analyze_run`` of each timed in this process on a new connection (the median of 3): the run's
   summary cost as ranks grow.

Prints one JSON line per measurement, then a table with the ratios and the machine's load.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DDP = REPO / "sample_traces" / "ddp"
PY = sys.executable
#: issue 45's targets for 128 ranks: HTA's wall time over gpuscope's, gpuscope's peak over HTA's
SPEED_TARGET, MEMORY_TARGET = 10.0, 0.3


def log(msg: str) -> None:
    print(f"[bench_ranks {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rewrite_rank(text: str, rank: int, world: int) -> str:
    """One rank's trace text as rank ``rank`` of ``world``: only ``distributedInfo`` (rank, world
    size, process groups) and the capture helper's rank/world-size keys change; the rest, Kineto's
    layout included, stays byte for byte."""
    key = '"distributedInfo": '
    at = text.index(key) + len(key)
    info, end = json.JSONDecoder().raw_decode(text, at)
    info["rank"], info["world_size"] = rank, world
    if isinstance(info.get("pg_config"), list):
        info["pg_config"] = [
            {**pg, "pg_size": world, "ranks": list(range(world))} for pg in info["pg_config"]
        ]
    text = text[:at] + json.dumps(info) + text[end:]
    events = text.index('"traceEvents"')
    head = text[:events]
    for k, v in (("world_size", world), ("gpuscope.world_size", world), ("gpuscope.rank", rank)):
        head = re.sub(rf'(\n\s*"{re.escape(k)}": )\d+', rf"\g<1>{v}", head)
    return head + text[events:]


def make_ranks(n: int, out: Path) -> tuple[Path, int]:
    """``OUT/ranks-N/rank<i>.pt.trace.json`` from the DDP pair; (folder, total bytes)."""
    folder = out / f"ranks-{n}"
    stamp = folder / ".complete-kineto-layout"
    if not stamp.exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        pair = [
            gzip.decompress((DDP / f"ddp_rank{r}.pt.trace.json.gz").read_bytes()).decode()
            for r in (0, 1)
        ]
        for i in range(n):
            (folder / f"rank{i}.pt.trace.json").write_text(rewrite_rank(pair[i % 2], i, n))
        stamp.write_text("ok")
    size = sum(p.stat().st_size for p in folder.glob("rank*.pt.trace.json"))
    return folder, size


def byte_compiled() -> None:
    """Byte-compile the gpuscope under test, as ``pip install`` leaves a package (HTA's venv is
    compiled so): an editable install under ``PYTHONDONTWRITEBYTECODE=1`` (this project's VM sets
    it) compiles every module it imports from source in every command, ~0.3 s each."""
    code = (
        "import compileall, pathlib, gpuscope; "
        "compileall.compile_dir(pathlib.Path(gpuscope.__file__).parent, quiet=1)"
    )
    subprocess.run([PY, "-c", code], check=True)
    log("gpuscope byte-compiled (as installed)")


def measure(cmd: list[str], stdout: Path | None = None, timeout: float = 3600) -> dict[str, Any]:
    args = [PY, str(HERE / "measure.py"), "--timeout", str(timeout)]
    if stdout is not None:
        args += ["--stdout", str(stdout)]
    done = subprocess.run([*args, "--", *cmd], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def gpuscope_once(folder: Path, work: Path) -> dict[str, Any]:
    store = Path(tempfile.mkdtemp(prefix="store-", dir=work))
    ids = work / "ids.txt"
    ing = measure([PY, "-m", "gpuscope", "ingest", str(folder), "--db", str(store)], ids)
    if ing["rc"] != 0:
        raise SystemExit(f"gpuscope ingest failed: {ing}")
    run_id = ids.read_text().split()[0]
    doc_path = work / "analyze.json"
    ana = measure([PY, "-m", "gpuscope", "analyze", run_id, "--json", "--db", str(store)], doc_path)
    if ana["rc"] != 0:
        raise SystemExit(f"gpuscope analyze failed: {ana}")
    doc = json.loads(doc_path.read_text())
    shutil.rmtree(store, ignore_errors=True)
    return {
        "contender": "gpuscope",
        "ingest_s": ing["wall_s"],
        "summary_s": ana["wall_s"],
        "wall_s": round(ing["wall_s"] + ana["wall_s"], 3),
        "peak_rss_mb": max(ing["peak_rss_mb"], ana["peak_rss_mb"]),
        "cpu_s": round(ing["user_s"] + ing["sys_s"] + ana["user_s"] + ana["sys_s"], 2),
        "ranks_in_summary": len(doc.get("ranks") or []),
        "load_1m": [ing["loadavg_1m_start"], ana["loadavg_1m_end"]],
    }


def hta_once(folder: Path, hta_py: Path, work: Path) -> dict[str, Any]:
    out = work / "hta.json"
    m = measure([str(hta_py), str(HERE / "hta_ranks.py"), str(folder)], out)
    lines = out.read_text().strip().splitlines() if out.exists() else []
    phases = json.loads(lines[-1]) if lines else {}
    return {
        "contender": "hta",
        "wall_s": m["wall_s"],
        "peak_rss_mb": m["peak_rss_mb"],
        "cpu_s": round(m["user_s"] + m["sys_s"], 2),
        "phases": phases,
        "ok": m["rc"] == 0 and bool(phases.get("ok")),
        "load_1m": [m["loadavg_1m_start"], m["loadavg_1m_end"]],
    }


def compare(n: int, repeat: int, out: Path, skip_hta: bool, hta_py: Path | None = None) -> None:
    folder, size = make_ranks(n, out)
    log(f"{n} ranks, {size / 1e9:.3f} GB of JSON in {folder}")
    if not skip_hta and hta_py is None:
        sys.path.insert(0, str(HERE))
        from bench_ingest import hta_python

        hta_py = hta_python(out)
    work = Path(tempfile.mkdtemp(prefix="bench-ranks-", dir=out))
    rows: list[dict[str, Any]] = []
    for i in range(repeat):
        order = ["gpuscope", "hta"] if i % 2 == 0 else ["hta", "gpuscope"]
        for who in order:
            if who == "hta" and hta_py is None:
                continue
            r = gpuscope_once(folder, work) if who == "gpuscope" else hta_once(folder, hta_py, work)  # type: ignore[arg-type]
            r.update({"ranks": n, "json_gb": round(size / 1e9, 3), "repeat": i + 1})
            print(json.dumps(r), flush=True)
            rows.append(r)
    shutil.rmtree(work, ignore_errors=True)
    gs = [r for r in rows if r["contender"] == "gpuscope"]
    ht = [r for r in rows if r["contender"] == "hta"]
    print(f"\n{n} ranks, {size / 1e9:.3f} GB JSON (the DDP pair copied), {repeat} repeat(s)")
    print("contender  wall s (each)                peak RSS MB   CPU s   load 1m (start, end)")
    for r in gs + ht:
        extra = f"ingest {r['ingest_s']} + summary {r['summary_s']}" if "ingest_s" in r else ""
        print(
            f"{r['contender']:9}  {r['wall_s']:>8.1f} {extra:30} {r['peak_rss_mb']:>8.0f}  "
            f"{r['cpu_s']:>7.1f}   {r['load_1m']}"
        )
    if gs and ht:
        g_wall = statistics.median(r["wall_s"] for r in gs)
        h_wall = statistics.median(r["wall_s"] for r in ht)
        g_rss = max(r["peak_rss_mb"] for r in gs)
        h_rss = max(r["peak_rss_mb"] for r in ht)
        speed = h_wall / g_wall
        mem = g_rss / h_rss
        print(
            f"gpuscope speed vs HTA: {speed:.2f}x (issue 45's target >= {SPEED_TARGET:g}x: "
            f"{'PASS' if speed >= SPEED_TARGET else 'FAIL'}); peak memory {mem:.2f}x HTA's "
            f"(target <= {MEMORY_TARGET:g}x: {'PASS' if mem <= MEMORY_TARGET else 'FAIL'})"
        )
        pairs = [h["wall_s"] / g["wall_s"] for g, h in zip(gs, ht, strict=False) if g["wall_s"] > 0]
        print(f"per-repeat speed ratios (HTA / gpuscope): {[round(p, 2) for p in pairs]}")
        # CPU s (user + sys of each process tree): what a loaded machine disturbs least
        g_cpu = statistics.median(r["cpu_s"] for r in gs)
        h_cpu = statistics.median(r["cpu_s"] for r in ht)
        print(
            f"CPU s (median): gpuscope {g_cpu:.1f}, HTA {h_cpu:.1f}: {h_cpu / g_cpu:.2f}x "
            f"(gpuscope at {SPEED_TARGET:g}x HTA's CPU would take <= {h_cpu / SPEED_TARGET:.1f} s)"
        )


def small_rank(rank: int, world: int) -> dict[str, Any]:
    """A small rank: 6 steps of 1 ms, each a launch + 600 µs kernel + a 200 µs NCCL all-reduce."""
    ev: list[dict[str, Any]] = []
    corr = 1
    for n in range(6):
        t0 = 1000.0 + 1000.0 * n
        ev.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
             "ts": t0, "dur": 1000.0, "args": {}}
        )  # fmt: skip
        for name, start, dur in (
            ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn", 50.0, 600.0),
            ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 700.0, 200.0),
        ):  # fmt: skip
            ev.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": t0 + start - 20.0, "dur": 5.0, "args": {"correlation": corr}}
            )  # fmt: skip
            ev.append(
                {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t0 + start,
                 "dur": dur, "args": {"device": 0, "stream": 7, "correlation": corr,
                                      "grid": [132, 1, 1], "block": [256, 1, 1]}}
            )  # fmt: skip
            corr += 1
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": ev,
    }


def summary_scaling(k: int, out: Path, repeat: int) -> None:
    """analyze_run of a K-rank run vs a 1-rank run (same small rank), in this process."""
    from gpuscope.analysis.rank_summary import store_after_ingest
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    work = Path(tempfile.mkdtemp(prefix="bench-summary-", dir=out))
    times: dict[int, list[float]] = {}
    for n in (1, k):
        folder = work / f"small-{n}"
        folder.mkdir()
        for r in range(n):
            (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(small_rank(r, n)))
        db = work / f"store-{n}"
        t0 = time.perf_counter()
        with connect(db) as con:
            run_id = ingest_paths(con, [folder], after_trace=store_after_ingest)[0].run_id
        ingest_s = time.perf_counter() - t0
        times[n] = []
        for _ in range(max(3, repeat)):
            with connect(db) as con:
                t0 = time.perf_counter()
                doc = analyze_run(con, run_id).to_json()
                times[n].append(time.perf_counter() - t0)
            assert len(doc["ranks"]) == n
        print(
            json.dumps(
                {
                    "summary_ranks": n,
                    "ingest_s": round(ingest_s, 2),
                    "analyze_s": [round(t, 3) for t in times[n]],
                    "load_1m": round(os.getloadavg()[0], 2),
                }
            ),
            flush=True,
        )
    one, many = statistics.median(times[1]), statistics.median(times[k])
    ratio = many / one
    print(
        f"run summary (analyze_run, new connection, median of {len(times[k])}): 1 rank "
        f"{one:.3f} s, {k} ranks {many:.3f} s: {ratio:.2f}x "
        f"(target <= 3x: {'PASS' if ratio <= 3 else 'FAIL'}); load {os.getloadavg()[0]:.1f}"
    )
    shutil.rmtree(work, ignore_errors=True)


def fixed_cost(n: int, out: Path, repeat: int) -> None:
    """What a rank costs beside its bytes: ``gpuscope ingest`` of 1 and of N small ranks
    (:func:`small_rank`, 25 events each), each in a fresh process, alternated ``repeat`` times.
    (CPU(N) - CPU(1)) / (N - 1) is the CPU a rank adds with almost no bytes: its file's open and
    hash, its rows and summary parts, its share of the commit and of the run's document."""
    work = Path(tempfile.mkdtemp(prefix="bench-fixed-", dir=out))
    cpu: dict[int, list[float]] = {1: [], n: []}
    for k in (1, n):
        folder = work / f"small-{k}"
        folder.mkdir()
        for r in range(k):
            (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(small_rank(r, k)))
    for i in range(max(1, repeat)):
        for k in (1, n) if i % 2 == 0 else (n, 1):
            store = Path(tempfile.mkdtemp(prefix="store-", dir=work))
            m = measure(
                [PY, "-m", "gpuscope", "ingest", str(work / f"small-{k}"), "--db", str(store)]
            )
            if m["rc"] != 0:
                raise SystemExit(f"gpuscope ingest of {k} small ranks failed: {m}")
            cpu[k].append(m["user_s"] + m["sys_s"])
            print(json.dumps({"fixed_cost_ranks": k, **m}), flush=True)
            shutil.rmtree(store, ignore_errors=True)
    one, many = statistics.median(cpu[1]), statistics.median(cpu[n])
    print(
        f"ingest of small ranks (median CPU s of {len(cpu[n])}): 1 rank {one:.2f}, {n} ranks "
        f"{many:.2f}: {(many - one) / (n - 1) * 1e3:.1f} ms of CPU per extra rank; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    shutil.rmtree(work, ignore_errors=True)


def part_cost(n: int, out: Path, repeat: int) -> None:
    """N DDP rank copies ingested without summaries; then, per repeat: every rank's cross-rank
    part computed and stored (CPU s per rank, in this process), and ``analyze_run`` of rank 0 from
    the parts vs from every rank's events (CPU s, interleaved, new connection each)."""
    from gpuscope.analysis import rank_summary as RS
    from gpuscope.analysis import report
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect, transaction

    folder, _ = make_ranks(n, out)
    work = Path(tempfile.mkdtemp(prefix="bench-parts-", dir=out))
    db = work / "store"
    with connect(db) as con:
        run_id = ingest_paths(con, [folder])[0].run_id
    for i in range(max(1, repeat)):
        with connect(db) as con:
            con.execute("DELETE FROM rank_summaries")
            c0 = time.process_time()
            with transaction(con):
                rows = RS.write_rank_summaries(con, run_id, RS.EVERY_RANK)
            per_rank = (time.process_time() - c0) / max(1, rows)
        cpu: dict[str, float] = {}
        for mode in ("parts", "events") if i % 2 == 0 else ("events", "parts"):
            with connect(db) as con:
                c0 = time.process_time()
                report.analyze_run(
                    con, run_id, with_path=False, stored_parts=mode == "parts"
                ).to_json()
                cpu[mode] = time.process_time() - c0
        print(
            json.dumps(
                {
                    "ddp_ranks": n,
                    "part_cpu_s_per_rank": round(per_rank, 3),
                    "analyze_cpu_s": {k: round(v, 2) for k, v in cpu.items()},
                    "events_over_parts": round(cpu["events"] / cpu["parts"], 2),
                    "load_1m": round(os.getloadavg()[0], 2),
                }
            ),
            flush=True,
        )
    shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=16, help="ranks of the comparison (0: none)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--summary-ranks", type=int, default=0, help="K of the summary scaling run")
    ap.add_argument("--part-cost", type=int, default=0, help="N DDP ranks: part cost, analyze A/B")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument(
        "--hta-python",
        type=Path,
        default=None,
        help="a Python with HTA 0.5.0 (default: OUT/hta-venv, made on demand)",
    )
    ap.add_argument(
        "--fixed-cost",
        type=int,
        default=0,
        help="N: `gpuscope ingest` of 1 and of N small ranks, alternated: CPU s per extra rank",
    )
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    log(f"{os.cpu_count()} CPUs, load {os.getloadavg()}")
    byte_compiled()
    if a.ranks:
        compare(a.ranks, a.repeat, a.out, a.skip_hta, a.hta_python)
    if a.summary_ranks:
        summary_scaling(a.summary_ranks, a.out, a.repeat)
    if a.part_cost:
        part_cost(a.part_cost, a.out, a.repeat)
    if a.fixed_cost:
        fixed_cost(a.fixed_cost, a.out, a.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
