"""The critical path and the gains, captured whole on the sample traces, compared bit for bit, and
timed in CPU seconds: the check and the measure behind a speed change to
analysis/critical_path.py or analysis/gains.py (their outputs must not move).

    .venv/bin/python benchmarks/cp_equality.py ingest STORE [--all]      # the samples, once
    .venv/bin/python benchmarks/cp_equality.py capture STORE OUT.pkl     # every (run, rank)
    .venv/bin/python benchmarks/cp_equality.py compare A.pkl B.pkl       # exit 1 on a difference
    .venv/bin/python benchmarks/cp_equality.py time STORE [--repeat 3]   # CPU s per phase

``STORE``: a DuckDB file path (the samples of ``sample_traces``: before, after, ddp, fixes/*, and a
share of validation/, every one with ``--all``). ``capture`` records per (run, rank): the graph
(every node's fields, every edge, the order), its replay (starts, ends, binding edges), the
calibrated host scale, a batch of makespans at the host scales, and the report's whole JSON
(``analyze_run(...).to_json()``: the critical path and every fix's estimate), each float by its
``repr`` (bit for bit). ``time`` prints the process's CPU seconds (user + sys,
``resource.getrusage``) of each phase over every (run, rank): load the events, ``build_graph``,
``replay``, ``calibrate`` (on the graph just built), and the whole report (a new one: the fixes'
estimates included), the median of ``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import json
import pickle
import resource
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"


def _samples(every: bool) -> list[Path]:
    out = [SAMPLES / "before", SAMPLES / "after", SAMPLES / "ddp"]
    out += sorted(
        p for p in (SAMPLES / "fixes").iterdir() if p.is_dir() and any(p.glob("*.pt.trace.json*"))
    )
    val = sorted(
        p for p in (SAMPLES / "validation").iterdir() if p.is_dir() and p.name[1:].isdigit()
    )
    out += val if every else val[::6]
    return out


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ingest(store: str, every: bool) -> None:
    from gpuscope.analysis.rank_summary import store_after_ingest
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    with connect(f"duckdb:{store}") as con:
        for p in _samples(every):
            # a fix's folder holds its planted and fixed traces (one rank each): one run per file
            traces = sorted(p.glob("*.pt.trace.json*"))
            ranks = [t.name.rsplit("_rank", 1)[-1] for t in traces]
            parts = [p] if len(set(ranks)) == len(ranks) else traces
            for part in parts:
                rid = ingest_paths(con, [part], after_trace=store_after_ingest)[0].run_id
                print(part.relative_to(SAMPLES), rid, file=sys.stderr)


def _pairs(con: Any) -> list[tuple[str, int]]:
    rows = con.execute("SELECT DISTINCT run_id, rank FROM events ORDER BY run_id, rank").fetchall()
    return [(str(r), int(k)) for r, k in rows]


def _graph_of(g: Any) -> tuple[Any, ...]:
    nodes = [
        (n.kind, n.cat, n.s, n.e, n.label, tuple(sorted(n.tags)), repr(n.event)) for n in g.nodes
    ]
    preds = [[tuple(e) for e in es] for es in g.preds]
    return (nodes, preds, list(g.order))


def _floats(xs: Any) -> list[str]:
    return [repr(float(x)) for x in xs]


def capture(store: str, out: str) -> None:
    from gpuscope.analysis import gains as GN
    from gpuscope.analysis.critical_path import replay
    from gpuscope.analysis.report import analyze_run
    from gpuscope.store import connect

    got: dict[str, Any] = {}
    with connect(f"duckdb:{store}") as con:
        for run_id, rank in _pairs(con):
            r = analyze_run(con, run_id, rank=rank)
            doc = json.dumps(r.to_json(), sort_keys=True, default=repr)
            cp = r.critical_path
            rec: dict[str, Any] = {"json": doc}
            if cp is not None:
                g = cp.graph
                S, E, bind = replay(g)
                base = [float(n.dur) for n in g.nodes]
                prof = [GN.profiled(n) for n in g.nodes]
                scales = (0.02, 0.3, 0.4, 0.5, 1.0, 1.48)
                rec.update(
                    graph=_graph_of(g),
                    replay=(_floats(S), _floats(E), list(bind)),
                    makespans=_floats(
                        GN.makespans(
                            g,
                            cp.window[0],
                            [GN._scaled(base, prof, s) for s in scales],
                            [None] * len(scales),
                        )
                    ),
                    makespan=[
                        repr(GN.makespan(g, cp.window[0], GN._scaled(base, prof, s)))
                        for s in scales
                    ],
                    cal=repr(r.gain_context.host_scale_cal if r.gain_context else None),
                )
            got[f"{run_id}/{rank}"] = rec
            print(run_id, rank, "nodes", len(cp.graph.nodes) if cp else None, file=sys.stderr)
    Path(out).write_bytes(pickle.dumps(got))


def compare(a: str, b: str) -> int:
    x, y = pickle.loads(Path(a).read_bytes()), pickle.loads(Path(b).read_bytes())
    bad = 0
    if x.keys() != y.keys():
        print("different (run, rank) sets")
        return 1
    for key in x:
        for part in sorted(set(x[key]) | set(y[key])):
            if x[key].get(part) != y[key].get(part):
                print(f"{key}: {part} differs")
                bad += 1
    print(f"{len(x)} (run, rank) pairs, {bad} differences")
    return 1 if bad else 0


def time_phases(store: str, repeat: int) -> None:
    from gpuscope.analysis import critical_path as CP
    from gpuscope.analysis import gains as GN
    from gpuscope.analysis.report import AnalysisOptions, RunAnalysis, analyze_run
    from gpuscope.store import connect

    rounds: dict[str, list[float]] = {}
    with connect(f"duckdb:{store}") as con:
        pairs = _pairs(con)
        # warm (SQL, indexes); the window and device of each rank
        reports = {p: analyze_run(con, p[0], rank=p[1]) for p in pairs}
        facades = {p: RunAnalysis(con, p[0], p[1], AnalysisOptions()) for p in pairs}
        for _ in range(repeat):
            t = dict.fromkeys(("load", "build", "replay", "calibrate", "report"), 0.0)
            for (run_id, rank), r in reports.items():
                ctx = r.gain_context
                if r.critical_path is None or ctx is None:
                    continue
                c0 = _cpu()
                a = facades[(run_id, rank)]
                host, gpu, main = CP.load_events(con, run_id, rank, a.window, a.device)
                c1 = _cpu()
                bounds = a.window.step_bounds_ns()
                g = CP.build_graph(host, gpu, main, bounds[0][0], bounds[-1][1])
                c2 = _cpu()
                CP.replay(g)
                c3 = _cpu()
                if ctx.untraced_step_ms:  # calibrated_scale, on the graph just built
                    GN.calibrate(g, bounds[0][0], ctx.untraced_step_ms * 1e6 * ctx.n_steps)
                c4 = _cpu()
                analyze_run(con, run_id, rank=rank).to_json()
                c5 = _cpu()
                for k, d in zip(t, (c1 - c0, c2 - c1, c3 - c2, c4 - c3, c5 - c4), strict=True):
                    t[k] += d
            for k, v in t.items():
                rounds.setdefault(k, []).append(v)
    print(json.dumps({k: round(statistics.median(v), 3) for k, v in rounds.items()}))
    print(json.dumps({k: [round(x, 3) for x in v] for k, v in rounds.items()}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ingest")
    p.add_argument("store")
    p.add_argument("--all", action="store_true")
    p = sub.add_parser("capture")
    p.add_argument("store")
    p.add_argument("out")
    p = sub.add_parser("compare")
    p.add_argument("a")
    p.add_argument("b")
    p = sub.add_parser("time")
    p.add_argument("store")
    p.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    if a.cmd == "ingest":
        ingest(a.store, a.all)
    elif a.cmd == "capture":
        capture(a.store, a.out)
    elif a.cmd == "compare":
        return compare(a.a, a.b)
    else:
        time_phases(a.store, a.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
