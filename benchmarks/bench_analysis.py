"""Analysis benchmark: gpuscope's whole ``analyze_run`` (on the DuckLake store and on the legacy
DuckDB file, side by side) vs HTA's temporal + idle + kernel breakdowns.

    .venv/bin/python benchmarks/bench_analysis.py [--size-gb 1.0] [--store lake|duckdb|both]
                                   [--hta-size-gb S] [--skip-hta]
                                   [--repeat 3] [--cold-runs 3] [--no-profile] [--reuse-db]
                                   [--hta-timeout 1500] [--out benchmarks/out/]

1. Big trace: the one ``bench_ingest.py`` makes (``make_big_trace.py`` replaying the steps of
   ``sample_traces/before/*rank0*``): reused from ``OUT/big/`` (bench_ingest's cache, read only here),
   else built under ``OUT/analysis/<size>gb/big/`` (never touching bench_ingest's cache).
2. gpuscope, once per store of ``--store`` (stores.py: ``lake`` = the DuckLake folder
   ``OUT/analysis/gpuscope-<size>gb-lake/``, ``duckdb`` = the legacy file
   ``OUT/analysis/gpuscope-<size>gb.duckdb``): ``gpuscope ingest BIG --store SPEC`` into a fresh store
   (recorded, not part of the target: that is the ingest benchmark). Then a fresh process (this
   file, ``--gpuscope-worker``) times, with wall and CPU seconds (CPU = all threads, DuckDB's too)
   and peak RSS: the imports; ``connect``; ``analyze_run(con, run_id)`` + ``to_json()`` + json dumps
   (everything ``gpuscope analyze --json`` prints), cold = first call of the process; then
   ``busy_series(window, 1200 buckets)`` (the sawtooth); warm = ``--repeat`` more calls on the same
   connection (its temp-table working set is reused); one call on a new connection (warm process
   and page cache, working set rebuilt); the sawtooth alone on another new connection.
   ``--cold-runs`` such processes run one after the other; the table shows the one with the median
   cold figure (and the best and worst). **Target figure: cold analyze_run + busy_series, <= 3 s
   (aim 2 s).**
3. HTA (``OUT/hta-venv``, made by bench_ingest's ``hta_python``), same file, this file with
   ``--hta-worker``: ``TraceAnalysis(trace_dir=DIR)`` (timed apart: the load), then
   ``get_temporal_breakdown(visualize=False)``, ``get_idle_time_breakdown(visualize=False)``,
   ``get_gpu_kernel_breakdown(visualize=False)``. A timeout (``--hta-timeout``) leaves lower bounds.
   ``--hta-size-gb`` (default ``--size-gb``) runs HTA on a smaller trace when its 1 GB load would take
   too long; gpuscope then runs at that size too (for the ratio) and at ``--size-gb`` (for the target).
4. Profile (``--no-profile`` skips): a separate fresh process runs ``analyze_run`` once cold with
   every sub-analysis that report.py calls wrapped in a timer (inclusive and exclusive seconds, in
   call order), every SQL statement timed, then a cProfile of a second cold call (new connection).
5. Prints the table, the two stores side by side (lake / file ratios), the ratio to HTA, the
   verdict (on the first store: the lake unless ``--store duckdb``) and the load average; writes
   ``OUT/analysis.json``.

The machine is shared: figures taken under load (1-min load average above the core count) are
pessimistic; the CPU seconds are steadier than the wall seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from stores import add_store_option, chosen, ratio, remove, size_bytes  # noqa: E402
from stores import spec as store_spec  # noqa: E402

N_BUCKETS = 1200
# Issue 11: every analysis of a 1 GB run within 2 s cold (fresh process, fresh store open); the
# earlier issue's 3 s stays as the aim's upper bound.
TARGET_S, AIM_S = 2.0, 2.0
HTA_STEPS = ("temporal", "idle", "kernels")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Clock:
    """Wall, CPU (all threads of this process) and peak-RSS-so-far of named phases."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, float]] = {}
        self.t0 = time.perf_counter()

    def time(self, name: str, fn: Any) -> Any:
        w0, c0 = time.perf_counter(), time.process_time()
        self.t0 = w0
        out = fn()
        self.phases[name] = {
            "wall_s": round(time.perf_counter() - w0, 4),
            "cpu_s": round(time.process_time() - c0, 4),
            "peak_rss_mb": round(_rss_mb(), 1),
        }
        return out

    def emit(self, **extra: Any) -> None:
        """One JSON line with every phase so far (the last line wins; a timeout keeps the others)."""
        print(json.dumps({"phases": self.phases, **extra}), flush=True)


# -- workers (run in their own process) ---------------------------------------------------------


def gpuscope_worker(db: str, run_id: str, repeat: int) -> None:
    clock = Clock()

    def imports() -> Any:
        import duckdb  # noqa: F401
        from gpuscope.analysis import busy, flops, kernels, peaks, report, tensor_cores  # noqa: F401
        from gpuscope.ingest.store import connect

        return connect, report, busy

    connect, report, busy = clock.time("import", imports)

    def analyze(con: Any) -> Any:
        rep = report.analyze_run(con, run_id)
        text = json.dumps(rep.to_json(), default=str)
        return rep, len(text)

    def sawtooth(con: Any, rep: Any) -> int:
        w = rep.window
        s = busy.busy_series(con, run_id, rep.rank, w.start_ns, w.end_ns, N_BUCKETS)
        return len(s)

    con = clock.time("connect", lambda: connect(db))
    rep, n_json = clock.time("analyze_cold", lambda: analyze(con))
    doc = rep.to_json()
    summary = {
        "json_chars": n_json,
        "steps": doc["window"]["steps"],
        "window_ms": doc["window"]["duration_us"] / 1e3,
        "gpu_busy_pct": doc["gpu_busy_pct"],
        "idle_pct": doc["idle"]["pct"],
        "idle_causes_us": doc["idle"]["causes"],
        "n_kernels": (doc["kernels"] or {}).get("n_kernels"),
        "mfu_pct": doc["mfu_pct"],
        "n_recommendations": len(doc["recommendations"]),
        "warnings": doc["warnings"],
    }
    clock.emit(summary=summary)
    n = clock.time("busy_series", lambda: sawtooth(con, rep))
    summary["busy_series_rows"] = n
    for i in range(repeat):
        clock.time(f"analyze_warm_{i + 1}", lambda: analyze(con))
    con.close()
    clock.emit(summary=summary)
    con2 = connect(db)
    clock.time("analyze_new_connection", lambda: analyze(con2))
    con2.close()
    con3 = connect(db)
    clock.time("busy_series_alone", lambda: sawtooth(con3, rep))
    con3.close()
    clock.emit(summary=summary)


def hta_worker(trace_dir: str) -> None:
    """HTA's load, then its three breakdowns. A breakdown that raises is recorded (``<step>_failed``:
    seconds until it raised, and the error); when one fails on a negative ``dur`` (HTA gives
    zero-length GPU events ``dur = -1``, and the temporal breakdown then trips its own
    ``assert non_compute_time >= 0``, even on the source trace), every rank's GPU rows' ``dur < 0`` are set to 0
    once (``clip_negative_dur``, timed) and the breakdown runs again: that run is its figure."""
    import logging

    clock = Clock()
    TraceAnalysis = clock.time(
        "import", lambda: __import__("hta.trace_analysis", fromlist=["TraceAnalysis"]).TraceAnalysis
    )
    logging.disable(logging.WARNING)  # HTA logs a warning per phase
    ta = clock.time("load", lambda: TraceAnalysis(trace_dir=trace_dir))
    summary: dict[str, Any] = {}
    errors: dict[str, str] = {}
    clock.emit(summary=summary, errors=errors)
    clipped = False

    def clip() -> int:
        n = 0
        for df in ta.t.traces.values():
            neg = (df["dur"] < 0) & df["stream"].ne(-1)  # GPU rows only
            n += int(neg.sum())
            df.loc[neg, "dur"] = 0
        return n

    calls = {
        "temporal": lambda: ta.get_temporal_breakdown(visualize=False),
        "idle": lambda: ta.get_idle_time_breakdown(visualize=False),
        "kernels": lambda: ta.get_gpu_kernel_breakdown(visualize=False),
    }
    for step in HTA_STEPS:
        try:
            out = clock.time(step, calls[step])
        except Exception as e:
            failed = {"wall_s": round(time.perf_counter() - clock.t0, 4), "error": repr(e)[:300]}
            clock.phases[f"{step}_failed"] = failed
            errors[step] = failed["error"]
            if clipped:
                clock.emit(summary=summary, errors=errors)
                continue
            summary["negative_dur_rows_clipped"] = clock.time("clip_negative_dur", clip)
            clipped = True
            try:
                out = clock.time(step, calls[step])
            except Exception as e2:
                errors[step] += f"; after clipping: {e2!r}"[:300]
                clock.emit(summary=summary, errors=errors)
                continue
        try:
            frame = out[0] if isinstance(out, tuple) else out
            summary[step] = json.loads(frame.to_json(orient="records"))
        except Exception:
            pass
        clock.emit(summary=summary, errors=errors)


# -- profile worker --------------------------------------------------------------------------------

# what report.analyze_run calls (module, function); nested calls are timed too (exclusive = own time)
PROFILE_TARGETS = (
    ("report", "_run_info"),
    ("store_access", "rank_meta"),
    ("steps", "find_window"),
    ("steps", "step_stats"),
    ("busy", "busy_summary"),
    ("busy", "working_set"),
    ("busy", "ensure_gaps"),
    ("idle", "idle_analysis"),
    ("busy", "busy_in_ranges"),
    ("busy", "comm_only_ns"),
    ("kernels", "kernel_breakdown"),
    ("kernels", "launched"),
    ("kernels", "attribute"),
    ("tensor_cores", "tensor_core_summary"),
    ("flops", "flops_per_step"),
    ("flops", "load_ops"),
    ("flops", "metadata_model_flops"),
    ("peaks", "peak_for"),
    ("report", "_kernel_stats"),
    ("report", "_rank_summary"),
    ("report", "_recommendations"),
    ("recommendations", "recommend"),
    ("memory", "memory_analysis"),
    ("roofline", "roofline"),
    ("modules", "module_analysis"),
    ("modules", "phase_spans"),
    ("critical_path", "critical_path"),
    ("critical_path", "count_events"),
    ("gains", "estimate"),
)


class _TimedCon:
    """A DuckDB connection whose ``execute`` / ``sql`` calls are timed (the query runs there)."""

    def __init__(self, con: Any, log_: list[dict[str, Any]], stack: list[str]) -> None:
        self._con, self._log, self._stack = con, log_, stack

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def _timed(self, meth: str, sql: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        out = getattr(self._con, meth)(sql, *a, **k)
        self._log.append(
            {
                "s": time.perf_counter() - t0,
                "in": self._stack[-1] if self._stack else "analyze_run",
                "sql": " ".join(str(sql).split())[:160],
            }
        )
        return self._con if out is self._con else out

    def execute(self, sql: Any, *a: Any, **k: Any) -> Any:
        return self._timed("execute", sql, *a, **k)

    def sql(self, sql: Any, *a: Any, **k: Any) -> Any:
        return self._timed("sql", sql, *a, **k)

    def cursor(self) -> Any:
        return _TimedCon(self._con.cursor(), self._log, self._stack)


def profile_worker(db: str, run_id: str, prof_path: str) -> None:
    import cProfile
    import importlib
    import pstats

    from gpuscope.analysis import report
    from gpuscope.ingest.store import Store, connect

    stack: list[str] = []
    records: list[dict[str, Any]] = []  # call order
    sql_log: list[dict[str, Any]] = []

    def wrap(label: str, fn: Any) -> Any:
        def timed(*a: Any, **k: Any) -> Any:
            rec = {"fn": label, "depth": len(stack), "in": stack[-1] if stack else None}
            records.append(rec)
            stack.append(label)
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                stack.pop()
                rec["wall_s"] = time.perf_counter() - t0
                rec["cpu_s"] = time.process_time() - c0

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    mods = {}
    for m, _ in PROFILE_TARGETS:
        with contextlib.suppress(ImportError):
            mods[m] = importlib.import_module(f"gpuscope.analysis.{m}")
    originals: list[tuple[Any, str, Any]] = []
    for m, name in PROFILE_TARGETS:
        fn = getattr(mods.get(m), name, None)
        if fn is None:
            continue
        w = wrap(f"{m}.{name}", fn)
        # replace every reference to this function in the analysis modules (imports by name)
        for mod in list(sys.modules.values()):
            if not getattr(mod, "__name__", "").startswith("gpuscope.analysis"):
                continue
            for attr, val in list(vars(mod).items()):
                if val is fn:
                    originals.append((mod, attr, val))
                    setattr(mod, attr, w)

    con = connect(db)
    # The store with its DuckDB connection timed: still a Store, so analyze_run reads a lake in one
    # snapshot as it does unprofiled.
    timed_con = Store(con.spec, _TimedCon(con.con, sql_log, stack), con.lock, owner=False)
    t0, c0 = time.perf_counter(), time.process_time()
    rep = report.analyze_run(timed_con, run_id)
    total = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    cold_records = list(records)
    # warm: the same call again on the same connection (the rank's working tables are kept)
    records.clear()
    n_sql_cold = len(sql_log)
    t0, c0 = time.perf_counter(), time.process_time()
    report.analyze_run(timed_con, run_id)
    total_warm = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    warm_records = list(records)
    del sql_log[n_sql_cold:]
    records[:] = cold_records
    con.close()
    for mod, attr, val in originals:
        setattr(mod, attr, val)
    # exclusive time = inclusive less the direct children
    for i, r in enumerate(records):
        child = sum(
            c["wall_s"]
            for c in records[i + 1 :]
            if c["depth"] == r["depth"] + 1 and c["in"] == r["fn"]
        )
        r["self_s"] = r["wall_s"] - child
    # (the "in" link is by name: with recursion or repeats of a name it over-counts, so clamp)
    for r in records:
        r["self_s"] = max(0.0, r["self_s"])
    top_sql = sorted(sql_log, key=lambda q: -q["s"])[:15]
    by_fn: dict[str, float] = {}
    for q in sql_log:
        by_fn[q["in"]] = by_fn.get(q["in"], 0.0) + q["s"]

    con = connect(db)
    pr = cProfile.Profile()
    t1 = time.perf_counter()
    pr.enable()
    report.analyze_run(con, run_id)
    pr.disable()
    cprof_wall = time.perf_counter() - t1
    con.close()
    pr.dump_stats(prof_path)
    st = pstats.Stats(pr)
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {"func": f"{Path(file).name}:{line}:{func}", "calls": nc, "tottime": tt, "cumtime": ct}
        )
    cum = sorted(
        (r for r in rows if "/gpuscope/" in r["func"] or r["func"].split(":")[0].endswith(".py")),
        key=lambda r: -r["cumtime"],
    )
    print(
        json.dumps(
            {
                "total": total,
                "total_warm": total_warm,
                "warm_calls": [
                    {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                    for r in warm_records
                ],
                "warnings": list(rep.warnings),
                "calls": [
                    {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                    for r in records
                ],
                "sql_total_s": round(sum(q["s"] for q in sql_log), 4),
                "n_sql": len(sql_log),
                "sql_by_function": {
                    k: round(v, 4) for k, v in sorted(by_fn.items(), key=lambda kv: -kv[1])
                },
                "top_sql": [{**q, "s": round(q["s"], 4)} for q in top_sql],
                "cprofile_wall_s": round(cprof_wall, 4),
                "cprofile_top_cumtime": [
                    {**r, "tottime": round(r["tottime"], 4), "cumtime": round(r["cumtime"], 4)}
                    for r in cum[:40]
                ],
                "cprofile_top_tottime": [
                    {**r, "tottime": round(r["tottime"], 4), "cumtime": round(r["cumtime"], 4)}
                    for r in sorted(rows, key=lambda r: -r["tottime"])[:20]
                ],
                "cprofile_path": prof_path,
            }
        ),
        flush=True,
    )


# -- driver ------------------------------------------------------------------------------------------


def trace_for(source: Path, size_gb: float, out: Path) -> tuple[Path, dict[str, Any]]:
    """bench_ingest's big trace of this size: its cache when there (read only), else our own."""
    from bench_ingest import BIG_NAME, big_trace, sha256_file

    key = f"{sha256_file(source)[:12]}-{size_gb:g}gb"
    shared, meta_path = out / "big" / key / BIG_NAME, out / "big" / f"{key}.meta.json"
    if shared.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("json_bytes") == shared.stat().st_size:
            log(f"reusing {shared} ({meta['json_bytes'] / 1e9:.2f} GB, {meta['n_events']} events)")
            return shared, meta
    # big_trace keeps one trace per root: a root per size, away from bench_ingest's
    root = out / "analysis" / f"{size_gb:g}gb"
    root.mkdir(parents=True, exist_ok=True)
    return big_trace(source, size_gb, root)


def measured(
    name: str, cmd: list[str], work: Path, timeout: float, cap_mb: float
) -> dict[str, Any]:
    """bench_ingest.run_measured, plus the worker's last JSON line even when it timed out."""
    from bench_ingest import run_measured

    la0 = os.getloadavg()
    m = run_measured(name, cmd, work, timeout, cap_mb)
    m["loadavg_start"] = [round(x, 2) for x in la0]
    m["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    last = None
    for line in (work / f"{name}.stdout").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                last = json.loads(line)
    m["worker"] = last
    return m


def ingest(
    big: Path,
    size_gb: float,
    work: Path,
    timeout: float,
    cap: float,
    reuse: bool = False,
    kind: str = "lake",
) -> dict[str, Any]:
    """``gpuscope ingest`` into a fresh store of this kind (``reuse``: keep the store of an earlier
    run of this benchmark made from the same trace file, recorded in ``<stem>-<kind>.json``)."""
    stem = f"gpuscope-{size_gb:g}gb"
    db = store_spec(kind, work, stem)
    side = work / f"{stem}-{kind}.json"
    if reuse and size_bytes(kind, work, stem) and side.exists():
        prev = json.loads(side.read_text())
        st = big.stat()
        if prev.get("trace") == [str(big), st.st_size, st.st_mtime_ns]:
            log(f"reusing {db} (run {prev['ingest']['run_id']}; ingested before, not timed now)")
            return {**prev["ingest"], "reused": True}
    remove(kind, work, stem)
    side.unlink(missing_ok=True)
    gs = REPO / ".venv" / "bin" / "gpuscope"
    cmd = [str(gs if gs.exists() else "gpuscope"), "ingest", str(big), "--store", db, "--json"]
    m = measured(f"ingest-{size_gb:g}gb-{kind}", cmd, work, timeout, cap)
    if not m["ok"] or not m.get("report"):
        raise SystemExit(f"ingest failed: {m.get('stdout_tail')}")
    rep = m["report"]
    m["run_id"] = (rep[0] if isinstance(rep, list) else rep)["run_id"]
    m["db"] = db
    m["db_bytes"] = size_bytes(kind, work, stem)
    st = big.stat()
    side.write_text(json.dumps({"trace": [str(big), st.st_size, st.st_mtime_ns], "ingest": m}))
    return m


def run_gpuscope(
    db: str,
    run_id: str,
    size_gb: float,
    a: argparse.Namespace,
    work: Path,
    cap: float,
    kind: str = "lake",
) -> dict[str, Any]:
    """``--cold-runs`` fresh worker processes, one after the other; returns the one whose cold
    analyses (analyze_run + busy_series) took the median wall time, with every run's cold figures
    in ``cold_samples`` (the load of a shared machine moves single samples a lot)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--gpuscope-worker", db, run_id]
    cmd += ["--repeat", str(a.repeat)]
    runs = []
    for i in range(max(1, a.cold_runs)):
        m = measured(f"analyze-{size_gb:g}gb-{kind}-{i + 1}", cmd, work, a.gpuscope_timeout, cap)
        ph = (m.get("worker") or {}).get("phases", {})
        if "analyze_cold" in ph and "busy_series" in ph:
            c, b = ph["analyze_cold"], ph["busy_series"]
            m["cold"] = {
                "wall_s": round(c["wall_s"] + b["wall_s"], 4),
                "cpu_s": round(c["cpu_s"] + b["cpu_s"], 4),
                "loadavg_1m": m["loadavg_start"][0],
            }
        runs.append(m)
    ok = sorted((m for m in runs if "cold" in m), key=lambda m: m["cold"]["wall_s"])
    pick = ok[(len(ok) - 1) // 2] if ok else runs[-1]
    pick["cold_samples"] = [m.get("cold") for m in runs]
    return pick


def run_profile(db: str, run_id: str, size_gb: float, work: Path, cap: float) -> dict[str, Any]:
    prof = work / f"analyze-{size_gb:g}gb.prof"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--profile-worker", db, run_id, str(prof)]
    return measured(f"profile-{size_gb:g}gb", cmd, work, 1200, cap)


def run_hta(
    big: Path, size_gb: float, a: argparse.Namespace, work: Path, cap: float
) -> dict[str, Any]:
    """HTA's worker in its venv. Its result is kept in ``OUT/analysis/hta-<size>gb.json`` with the
    trace file's identity; ``--reuse-hta`` takes it from there instead (HTA's 1 GB load takes ~20 min)."""
    from bench_ingest import hta_python

    side = work / f"hta-{size_gb:g}gb.json"
    st = big.stat()
    ident = [str(big), st.st_size, st.st_mtime_ns]
    if a.reuse_hta and side.exists():
        prev = json.loads(side.read_text())
        if prev.get("trace") == ident:
            log(f"reusing HTA's result of {prev['when']} from {side}")
            return {**prev["result"], "reused_from": prev["when"]}
    py = hta_python(a.out)
    cmd = [str(py), str(Path(__file__).resolve()), "--hta-worker", str(big.parent)]
    m = measured(f"hta-{size_gb:g}gb", cmd, work, a.hta_timeout, cap)
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    side.write_text(json.dumps({"trace": ident, "when": when, "result": m}))
    return m


def gs_rows(
    m: dict[str, Any], size: float, repeat: int, who: str = "gpuscope-lake"
) -> list[dict[str, Any]]:
    ph = (m.get("worker") or {}).get("phases", {})
    rows: list[dict[str, Any]] = []

    def add(step: str, wall: float | None, cpu: float | None, rss: float | None, lb: bool = False):
        rows.append(
            {
                "contender": who,
                "size_gb": size,
                "step": step,
                "wall_s": wall,
                "cpu_s": cpu,
                "peak_rss_mb": rss,
                "lower_bound": lb,
            }
        )

    for key, label in (("import", "import"), ("connect", "connect")):
        if key in ph:
            add(label, ph[key]["wall_s"], ph[key]["cpu_s"], ph[key]["peak_rss_mb"])
    if "analyze_cold" in ph:
        c = ph["analyze_cold"]
        add("analyze_run cold (1st call)", c["wall_s"], c["cpu_s"], c["peak_rss_mb"])
    if "busy_series" in ph:
        b = ph["busy_series"]
        add(f"busy_series {N_BUCKETS} buckets (after)", b["wall_s"], b["cpu_s"], b["peak_rss_mb"])
        c = ph["analyze_cold"]
        samples = [x for x in m.get("cold_samples") or [] if x]
        n = len(samples)
        add(
            f"= analyses cold [target <= {TARGET_S:g} s at 1 GB]"
            + (f" (median of {n})" if n > 1 else ""),
            round(c["wall_s"] + b["wall_s"], 4),
            round(c["cpu_s"] + b["cpu_s"], 4),
            b["peak_rss_mb"],
        )
        if n > 1:
            best = min(samples, key=lambda x: x["wall_s"])
            worst = max(samples, key=lambda x: x["wall_s"])
            add(f"  analyses cold, best of {n}", best["wall_s"], best["cpu_s"], None)
            add(f"  analyses cold, worst of {n}", worst["wall_s"], worst["cpu_s"], None)
    warm = [ph[k] for k in (f"analyze_warm_{i + 1}" for i in range(repeat)) if k in ph]
    if warm:
        add(
            f"analyze_run warm (median of {len(warm)})",
            statistics.median(w["wall_s"] for w in warm),
            statistics.median(w["cpu_s"] for w in warm),
            warm[-1]["peak_rss_mb"],
        )
    if "analyze_new_connection" in ph:
        p = ph["analyze_new_connection"]
        add("analyze_run new connection", p["wall_s"], p["cpu_s"], p["peak_rss_mb"])
    if "busy_series_alone" in ph:
        p = ph["busy_series_alone"]
        add("busy_series alone (new conn.)", p["wall_s"], p["cpu_s"], p["peak_rss_mb"])
    add(
        "process total",
        m["wall_s"],
        round(m["user_s"] + m["sys_s"], 2),
        m["peak_rss_mb"],
        not m["ok"],
    )
    return rows


def hta_rows(m: dict[str, Any], size: float) -> list[dict[str, Any]]:
    ph = (m.get("worker") or {}).get("phases", {})
    rows: list[dict[str, Any]] = []
    done = [s for s in HTA_STEPS if s in ph]
    lb = not m["ok"]

    def add(step: str, wall: float | None, cpu: float | None, rss: float | None, low: bool = False):
        rows.append(
            {
                "contender": "HTA",
                "size_gb": size,
                "step": step,
                "wall_s": wall,
                "cpu_s": cpu,
                "peak_rss_mb": rss,
                "lower_bound": low,
            }
        )

    for key, label in (("import", "import"), ("load", "TraceAnalysis load")):
        if key in ph:
            add(label, ph[key]["wall_s"], ph[key]["cpu_s"], ph[key]["peak_rss_mb"])
    if "load" not in ph:
        add(
            "TraceAnalysis load",
            m["wall_s"],
            round(m["user_s"] + m["sys_s"], 2),
            m["peak_rss_mb"],
            True,
        )
    names = {
        "temporal": "get_temporal_breakdown",
        "idle": "get_idle_time_breakdown",
        "kernels": "get_gpu_kernel_breakdown",
    }
    for s in done:
        add(names[s], ph[s]["wall_s"], ph[s]["cpu_s"], ph[s]["peak_rss_mb"])
    if "load" in ph:
        wall = sum(ph[s]["wall_s"] for s in done)
        cpu = sum(ph[s]["cpu_s"] for s in done)
        if lb and len(done) < len(HTA_STEPS):  # the one cut off ran at least until the timeout
            t_in = sum(ph[k]["wall_s"] for k in ("import", "load") if k in ph)
            wall = max(wall, m["wall_s"] - t_in)
        add(
            "= 3 breakdowns",
            round(wall, 4),
            round(cpu, 4),
            max((ph[s]["peak_rss_mb"] for s in done), default=None),
            lb and len(done) < len(HTA_STEPS),
        )
    add("process total", m["wall_s"], round(m["user_s"] + m["sys_s"], 2), m["peak_rss_mb"], lb)
    return rows


def fmt_table(rows: list[dict[str, Any]]) -> str:
    head = ["contender", "size GB", "step", "seconds", "CPU s", "peak RSS MB"]
    lines = [head]
    for r in rows:
        p = ">=" if r["lower_bound"] else ""

        def f(v: Any, spec: str, p: str = p) -> str:
            return "" if v is None else f"{p}{v:{spec}}"

        lines.append(
            [
                r["contender"],
                f"{r['size_gb']:g}",
                r["step"],
                f(r["wall_s"], ".3f"),
                f(r["cpu_s"], ".3f"),
                f(r["peak_rss_mb"], ".0f"),
            ]
        )
    w = [max(len(x[i]) for x in lines) for i in range(len(head))]
    out = [
        "  ".join(c.ljust(w[i]) if i in (0, 2) else c.rjust(w[i]) for i, c in enumerate(x))
        for x in lines
    ]
    out.insert(1, "  ".join("-" * x for x in w))
    return "\n".join(out)


def _row(rows: list[dict[str, Any]], who: str, size: float, prefix: str) -> dict[str, Any] | None:
    return next(
        (
            r
            for r in rows
            if r["contender"] == who and r["size_gb"] == size and r["step"].startswith(prefix)
        ),
        None,
    )


STORE_STEPS = (
    ("connect", "connect"),
    ("= analyses cold", "analyses cold (analyze_run + busy_series)"),
    ("analyze_run warm", "analyze_run warm (median)"),
    ("analyze_run new connection", "analyze_run, new connection"),
    ("busy_series alone", "busy_series alone, new connection"),
    ("(ingest", "ingest (gpuscope ingest, whole process)"),
)


def fmt_stores(rows: list[dict[str, Any]], size: float) -> str:
    """The lake and the DuckDB file side by side at one size: seconds of each step, and lake/file."""
    out = [f"{'step':<44}{'lake s':>9}{'file s':>9}{'lake/file':>11}"]
    for prefix, label in STORE_STEPS:
        lake = _row(rows, "gpuscope-lake", size, prefix)
        file = _row(rows, "gpuscope-duckdb", size, prefix)
        if lake is None or file is None or lake["wall_s"] is None or file["wall_s"] is None:
            continue
        x, y = lake["wall_s"], file["wall_s"]
        out.append(f"{label:<44}{x:>9.3f}{y:>9.3f}{ratio(x, y):>11}")
    return "\n".join(out) if len(out) > 1 else ""


def fmt_profile(p: dict[str, Any]) -> str:
    out = [
        f"analyze_run (timers on, cold, new process): {p['total']['wall_s']:.3f} s wall, "
        f"{p['total']['cpu_s']:.3f} s CPU; {p['n_sql']} SQL statements, {p['sql_total_s']:.3f} s"
    ]
    warm = p.get("warm_calls") or []
    if p.get("total_warm"):
        out.append(
            f"the same call again, warm (same connection): {p['total_warm']['wall_s']:.3f} s wall, "
            f"{p['total_warm']['cpu_s']:.3f} s CPU"
        )
    out.append(
        f"  {'call (in order, indented = nested)':<48} {'incl s':>8} {'self s':>8} {'CPU s':>8}"
        f" {'warm s':>8}"
    )
    for i, r in enumerate(p["calls"]):
        w = warm[i] if i < len(warm) and warm[i]["fn"] == r["fn"] else None
        ws = f"{w['wall_s']:8.3f}" if w else f"{'':>8}"
        out.append(
            f"  {'  ' * r['depth'] + r['fn']:<48} {r['wall_s']:8.3f} {r['self_s']:8.3f} "
            f"{r['cpu_s']:8.3f} {ws}"
        )
    out.append("  slowest SQL statements:")
    for q in p["top_sql"][:8]:
        out.append(f"    {q['s']:7.3f} s  [{q['in']}]  {q['sql'][:110]}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # workers first: the HTA venv has neither gpuscope nor msgspec
    if argv[:1] == ["--hta-worker"]:
        hta_worker(argv[1])
        return 0
    if argv[:1] == ["--gpuscope-worker"]:
        rep = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
        gpuscope_worker(argv[1], argv[2], rep)
        return 0
    if argv[:1] == ["--profile-worker"]:
        profile_worker(argv[1], argv[2], argv[3])
        return 0

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--size-gb", type=float, default=1.0, help="trace size for the target (10**9 B)"
    )
    ap.add_argument(
        "--hta-size-gb",
        type=float,
        default=None,
        help="trace size for the HTA comparison (default: --size-gb); gpuscope runs at both sizes",
    )
    add_store_option(ap)
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="warm analyze_run calls (default 3)")
    ap.add_argument(
        "--cold-runs",
        type=int,
        default=3,
        help="fresh processes timing the cold analyses; the median one is reported (default 3)",
    )
    ap.add_argument("--no-profile", action="store_true", help="skip the profile of analyze_run")
    ap.add_argument(
        "--reuse-db",
        action="store_true",
        help="reuse the gpuscope stores of an earlier run of this benchmark (same trace file)",
    )
    ap.add_argument(
        "--reuse-hta",
        action="store_true",
        help="reuse HTA's result of an earlier run of this benchmark (same trace file)",
    )
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument(
        "--hta-timeout",
        type=float,
        default=1500.0,
        help="seconds for HTA's load + breakdowns (default 1500)",
    )
    ap.add_argument("--gpuscope-timeout", type=float, default=900.0)
    a = ap.parse_args(argv)
    a.out = a.out.resolve()
    work = a.out / "analysis"
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    from bench_ingest import machine, mem_available_mb, pick_source

    load_start = [round(x, 2) for x in os.getloadavg()]
    source, kind = pick_source(None, a.out)
    log(f"source ({kind}): {source}; load average {load_start}")
    kinds = chosen(a.store)
    me = f"gpuscope-{kinds[0]}"  # the store the verdict and the profile are about
    cap = 0.9 * mem_available_mb()
    size, hsize = a.size_gb, (a.hta_size_gb if a.hta_size_gb is not None else a.size_gb)
    sizes = [size] + ([hsize] if not a.skip_hta and hsize != size else [])
    traces: dict[float, dict[str, Any]] = {}
    ingests: dict[float, dict[str, Any]] = {}
    gs: dict[float, dict[str, Any]] = {}
    every: dict[str, dict[str, Any]] = {}  # "<size>/<kind>" -> {"ingest": ..., "analysis": ...}
    rows: list[dict[str, Any]] = []
    for s in sizes:
        big, meta = trace_for(source, s, a.out)
        traces[s] = {"path": str(big), **meta}
        for k in kinds:
            ing = ingest(big, s, work, a.gpuscope_timeout, cap, a.reuse_db, k)
            m = run_gpuscope(ing["db"], ing["run_id"], s, a, work, cap, k)
            every[f"{s:g}/{k}"] = {"ingest": ing, "analysis": m}
            if k == kinds[0]:
                ingests[s], gs[s] = ing, m
            rows += gs_rows(m, s, a.repeat, f"gpuscope-{k}")
            log(fmt_table(rows))
    prof = None
    if not a.no_profile:
        pm = run_profile(ingests[size]["db"], ingests[size]["run_id"], size, work, cap)
        prof = pm.get("worker")
        if prof:
            prof["process"] = {
                k: pm[k]
                for k in (
                    "wall_s",
                    "user_s",
                    "sys_s",
                    "peak_rss_mb",
                    "loadavg_start",
                    "loadavg_end",
                )
            }
    hta = None
    if not a.skip_hta:
        hta = run_hta(Path(traces[hsize]["path"]), hsize, a, work, cap)
        rows += hta_rows(hta, hsize)
    for key, both in every.items():  # the stores stay in OUT/analysis/ for reruns by hand
        s, ing = float(key.split("/")[0]), both["ingest"]
        what = "(ingest, earlier run: reused)" if ing.get("reused") else "(ingest, not in target)"
        rows.append(
            {
                "contender": f"gpuscope-{key.split('/')[1]}",
                "size_gb": s,
                "step": what,
                "wall_s": ing["wall_s"],
                "cpu_s": round(ing["user_s"] + ing["sys_s"], 2),
                "peak_rss_mb": ing["peak_rss_mb"],
                "lower_bound": False,
            }
        )
    load_end = [round(x, 2) for x in os.getloadavg()]

    table = fmt_table(rows)
    mach = machine()
    verdict: dict[str, Any] = {}
    t = _row(rows, me, size, "= analyses cold")
    if t is not None:
        verdict.update(
            size_gb=size,
            analyses_cold_s=t["wall_s"],
            analyses_cold_cpu_s=t["cpu_s"],
            target_s=TARGET_S,
            aim_s=AIM_S,
            target_pass=t["wall_s"] <= TARGET_S,
            aim_pass=t["wall_s"] <= AIM_S,
            target_pass_cpu=t["cpu_s"] <= TARGET_S,
            cold_samples=gs[size].get("cold_samples"),
        )
        best = _row(rows, me, size, "  analyses cold, best")
        if best is not None:
            verdict["analyses_cold_best_s"] = best["wall_s"]
            verdict["target_pass_best"] = best["wall_s"] <= TARGET_S
    h = _row(rows, "HTA", hsize, "= 3 breakdowns")
    g = _row(rows, me, hsize, "analyze_run cold")
    gt = _row(rows, me, hsize, "= analyses cold")
    if h is not None and g is not None:
        verdict.update(
            hta_size_gb=hsize,
            hta_breakdowns_s=h["wall_s"],
            hta_breakdowns_cpu_s=h["cpu_s"],
            hta_is_lower_bound=h["lower_bound"],
            ratio_vs_analyze_cold=round(h["wall_s"] / g["wall_s"], 1),
            ratio_vs_analyses_cold=round(h["wall_s"] / gt["wall_s"], 1) if gt else None,
            cpu_ratio_vs_analyze_cold=round(h["cpu_s"] / g["cpu_s"], 1) if g["cpu_s"] else None,
        )
        hl = _row(rows, "HTA", hsize, "TraceAnalysis load")
        if hl is not None:
            verdict["hta_load_s"] = hl["wall_s"]
            verdict["hta_load_is_lower_bound"] = hl["lower_bound"]
            # file -> answers: HTA load + 3 breakdowns vs gpuscope ingest + cold analyses
            if gt is not None and hsize in ingests:
                e2e_hta = hl["wall_s"] + h["wall_s"]
                e2e_gs = ingests[hsize]["wall_s"] + gt["wall_s"]
                verdict["end_to_end_hta_s"] = round(e2e_hta, 3)
                verdict["end_to_end_gpuscope_s"] = round(e2e_gs, 3)
                verdict["end_to_end_ratio"] = round(e2e_hta / e2e_gs, 1)

    print(f"\nsource: {source} ({kind})")
    for s, tr in traces.items():
        print(
            f"trace {s:g} GB: {tr['path']} ({tr['json_bytes'] / 1e9:.3f} GB JSON, "
            f"{tr['n_events']:,} events)"
        )
    print(
        f"machine: {mach['cpu']}, {mach['cores']} cores, {mach['mem_gb']} GiB; duckdb "
        f"{mach['duckdb']}; load average (1/5/15 min) at start {load_start}, end {load_end}\n"
    )
    print(table)
    print()
    side_by_side = fmt_stores(rows, size)
    if side_by_side:
        print(
            f"the two stores at {size:g} GB (lake/file below 1: the lake is faster)\n{side_by_side}\n"
        )
    if "ratio_vs_analyze_cold" in verdict:
        lb = ">=" if verdict["hta_is_lower_bound"] else ""
        print(
            f"HTA's 3 breakdowns / gpuscope analyze_run cold ({hsize:g} GB): "
            f"{lb}{verdict['ratio_vs_analyze_cold']:.1f}x wall"
            + (
                f", {lb}{verdict['cpu_ratio_vs_analyze_cold']:.1f}x CPU"
                if verdict.get("cpu_ratio_vs_analyze_cold")
                else ""
            )
            + f" (HTA load alone {'>=' if verdict.get('hta_load_is_lower_bound') else ''}"
            f"{verdict.get('hta_load_s', 0):.1f} s, not counted)"
        )
        if "end_to_end_ratio" in verdict:
            lb2 = (
                ">=" if verdict["hta_is_lower_bound"] or verdict["hta_load_is_lower_bound"] else ""
            )
            print(
                f"file -> answers ({hsize:g} GB): HTA load + 3 breakdowns {lb2}"
                f"{verdict['end_to_end_hta_s']:.1f} s vs gpuscope ingest + analyses "
                f"{verdict['end_to_end_gpuscope_s']:.1f} s: {lb2}{verdict['end_to_end_ratio']:.1f}x"
            )
        if (hta or {}).get("reused_from"):
            print(
                f"NOTE: HTA's figures are from an earlier run ({hta['reused_from']}, --reuse-hta)."
            )
        if hsize != size:
            print(
                f"NOTE: HTA ran on the {hsize:g} GB trace (its {size:g} GB load takes too long); "
                f"the ratio compares both contenders at {hsize:g} GB."
            )
    gsum = ((gs.get(hsize) or {}).get("worker") or {}).get("summary") or {}
    hsum = ((hta or {}).get("worker") or {}).get("summary") or {}
    if gsum and hsum.get("temporal"):
        ht = hsum["temporal"][0]
        print(
            f"cross-check ({hsize:g} GB): gpuscope GPU busy {gsum['gpu_busy_pct']:.1f}% of the step "
            f"window; HTA compute + non-compute {100 - ht['idle_time_pctg']:.1f}% of the first-to-"
            f"last-kernel span"
        )
        if (hta or {}).get("worker", {}).get("errors"):
            print(
                f"HTA errors (then retried with GPU dur < 0 clipped to 0): {hta['worker']['errors']}"
            )
    if t is not None:
        print(
            f"{me} analyses cold at {size:g} GB (analyze_run + busy_series): "
            f"{t['wall_s']:.2f} s wall, {t['cpu_s']:.2f} s CPU; target <= {TARGET_S:g} s: "
            f"{'PASS' if verdict['target_pass'] else 'FAIL'}"
            + ("" if size >= 1.0 else f" (the target is for the 1 GB trace; this is {size:g} GB)")
            + (
                f"; best of {len(verdict['cold_samples'])} processes "
                f"{verdict['analyses_cold_best_s']:.2f} s"
                if "analyses_cold_best_s" in verdict
                else ""
            )
        )
    busy = max(
        load_start[0],
        load_end[0],
        *(m["loadavg_end"][0] for m in gs.values()),
        *(m["loadavg_start"][0] for m in gs.values()),
    )
    if busy > (os.cpu_count() or 1):
        print(
            f"WARNING: the machine was busy (1-min load average up to {busy:.1f} on "
            f"{os.cpu_count()} cores): wall times are pessimistic; CPU seconds are steadier."
        )
    if prof:
        print(f"\nprofile of analyze_run at {size:g} GB:\n{fmt_profile(prof)}")
    doc = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": mach,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "source": {"path": str(source), "kind": kind},
        "traces": {f"{s:g}": tr for s, tr in traces.items()},
        "n_buckets": N_BUCKETS,
        "repeat": a.repeat,
        "rows": rows,
        "verdict": verdict,
        "gpuscope": {f"{s:g}": m for s, m in gs.items()},
        "stores": every,
        "stores_table": side_by_side,
        "ingest": {f"{s:g}": m for s, m in ingests.items()},
        "hta": hta,
        "profile": prof,
        "table": table,
    }
    (a.out / "analysis.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    log(f"results: {a.out / 'analysis.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
