"""`gpuscope analyze RUN|PATH`: why the GPU sat idle, with the evidence and what to change."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fmt import sig3

if TYPE_CHECKING:
    from gpuscope.analysis.verdict import JobDiagnosis

from gpuscope.cli._common import fail, notice, open_db, print_json, run_id_or_exit
from gpuscope.cli.analyze_sections import render_memory, render_modules, render_roofline
from gpuscope.store import Connection, resolve_run
from gpuscope.vocabulary.errors import GpuscopeError
from gpuscope.vocabulary.nvml_fields import MEM_TOTAL_BYTES


def add_analysis_options(p: argparse.ArgumentParser, *, runs: int = 1) -> None:
    """Options shared by analyze, compare and check (``runs=2``: compare, one untraced step
    time per run)."""
    from gpuscope.cli.main import common_db_option

    p.add_argument("--rank", type=int, default=None, help="rank to analyse (default: the lowest)")
    p.add_argument(
        "--step-annotation",
        metavar="NAME",
        default=None,
        help="annotation that marks a step (default: ProfilerStep#N, else the whole trace)",
    )
    p.add_argument(
        "--peak-tflops", type=float, default=None, metavar="TF", help="peak TFLOP/s for MFU"
    )
    p.add_argument(
        "--model-flops-per-step",
        type=float,
        default=None,
        metavar="FLOPS",
        help="model FLOPs per step of this rank (e.g. 6*N*tokens) instead of counting from shapes",
    )
    p.add_argument(
        "--untraced-step-ms",
        type=float,
        default=None,
        nargs=runs if runs > 1 else None,
        metavar=("A_MS", "B_MS") if runs > 1 else "MS",
        help="step time measured without the profiler, ms (gpuscope.capture records it): caps "
        "host-side findings at what can exist without the profiler"
        + (" (one value per run)" if runs > 1 else ""),
    )
    common_db_option(p)


def analysis_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "rank": args.rank,
        "step_annotation": args.step_annotation,
        "peak_tflops": args.peak_tflops,
        "model_flops_per_step": args.model_flops_per_step,
        "untraced_step_ms": args.untraced_step_ms,
    }


def _written_as_path(target: str) -> bool:
    """Whether the user wrote ``target`` as a path: a folder separator, ``.``/``~`` in front, or a
    trace's suffix. A bare word (``big``) may name a run as well as a folder that happens to be in
    the working directory."""
    return (
        "/" in target
        or "\\" in target
        or target.startswith((".", "~"))
        or target.endswith((".json", ".json.gz", ".jsonl", ".pickle", ".pkl"))
    )


def resolve_target(con: Connection, target: str) -> str:
    """A run id/prefix/name, or a trace file or folder (ingested first; a duplicate is fine).

    A bare word that names a stored run is that run even where a file or folder of that name
    exists; the CLI says so on stderr and how to ask for the path instead (``./big``)."""
    if Path(target).exists() and not _written_as_path(target):
        try:
            rid = resolve_run(con, target)
        except GpuscopeError:
            rid = None
        if rid is not None:
            notice(
                f"'{target}' is the stored run {rid}; a file or folder of that name is here too:"
                f" write ./{target} to read it instead"
            )
            return rid
    if Path(target).exists():
        from gpuscope.analysis.rank_summary import store_after_ingest
        from gpuscope.ingest.errors import IngestError
        from gpuscope.ingest.loader import ingest_paths

        try:
            results = ingest_paths(con, [target], after_trace=store_after_ingest)
        except IngestError as e:
            raise SystemExit(fail(str(e))) from None
        return results[0].run_id
    return run_id_or_exit(con, target)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "analyze",
        help="analyse a run: busy %%, idle gaps by cause, kernels, MFU, recommendations",
        description="RUN is a run id, unique id prefix or name; PATH a trace file or folder "
        "(ingested first). --json prints the documented JSON (docs/cli-json.md).",
    )
    p.add_argument("target", metavar="RUN|PATH")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--all-ranks",
        action="store_true",
        help=f"list every rank (default: the {TOP_RANKS} that make the others wait longest)",
    )
    add_analysis_options(p)


def run(args: argparse.Namespace) -> int:
    from gpuscope.analysis import report_part

    kwargs = analysis_kwargs(args)
    con = open_db(args)
    try:
        run_id = resolve_target(con, args.target)
        if kwargs["rank"] is not None and kwargs["rank"] == report_part.lowest_rank(con, run_id):
            kwargs["rank"] = None  # the lowest rank is the default view
        if not any(v is not None for k, v in kwargs.items() if k != "rank"):
            # the run's default view, or a rank's its verdict analysed, stored at its ingest:
            # one row, no event read
            text = report_part.stored_text(con, run_id, kwargs["rank"])
            if text is not None:
                if args.json:
                    print(report_part.print_text(text))
                    return 0
                print(_render_stored(text, run_id, bool(getattr(args, "all_ranks", False))))
                return 0
        from gpuscope.analysis.nvml_run import analyze_nvml_run, is_nvml_run
        from gpuscope.analysis.rank_index import within_working_memory

        try:
            if is_nvml_run(con, run_id):
                nvml = analyze_nvml_run(con, run_id)
                if args.json:
                    print_json(nvml.to_json())
                else:
                    print(render_nvml(nvml.to_json()))
                return 0
            # the job's verdict: built once, from every rank (the pace-setter's analysis too);
            # the ranks' working tables spill beyond DuckDB's working limit
            report, job = within_working_memory(
                con, lambda: report_part.analyze(con, run_id, **kwargs), run_ids=[run_id]
            )
        except ValueError as e:
            return fail(str(e))
    finally:
        con.close()
    doc = report_part.analyze_json(report, job)
    if args.json:
        print_json(doc)
    else:
        print(render(doc, job, all_ranks=bool(getattr(args, "all_ranks", False))))
    return 0


def _render_stored(text: str, run_id: str, all_ranks: bool) -> str:
    """The text report of a stored ``analyze`` document: the same as rendered from the analyses
    (the job's verdict rebuilt from its JSON)."""
    import json

    from gpuscope.analysis.verdict import JobDiagnosis

    doc = json.loads(text)
    job = JobDiagnosis.from_json(doc["job"], run_id) if doc.get("job") else None
    return render(doc, job, all_ranks=all_ranks)


def render_nvml(doc: dict[str, Any]) -> str:
    """An NVML-only run's diagnosis as readable text (one block per GPU)."""
    r = doc["run"]
    out = [f"run {r['id']}  {r['name']}  NVML series only (no trace)  GPU {r['gpu'] or '-'}"]
    for g in doc["nvml"]:
        mem = (
            f"{sig3(g['mem_used_max_bytes'] / 1e9)} of {sig3(g[MEM_TOTAL_BYTES] / 1e9)} GB"
            if g["mem_used_max_bytes"] is not None and g[MEM_TOTAL_BYTES]
            else "-"
        )
        out += [
            "",
            f"GPU {g['gpu']} {g['name'] or ''}: {g['n_samples']} samples over "
            f"{sig3(g['duration_s'])} s",
            f"  idle {_pc(g['idle_share_pct'])}   mean utilization {_pc(g['mean_util_pct'])}   "
            f"period {sig3(g['period_s'])} s   duty cycle {_pc(g['duty_cycle_pct'])}",
            f"  power mean {sig3(g['power_mean_w'])} W (max {sig3(g['power_max_w'])} W)   "
            f"SM clock mean {sig3(g['sm_clock_mean_mhz'])} MHz   memory max {mem}",
            f"  {g['summary']}",
        ]
    return "\n".join(out)


def _f(v: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def _pc(v: float | None) -> str:
    """A percentage with three significant figures."""
    return "-" if v is None else f"{sig3(v)}%"


def render(doc: dict[str, Any], job: JobDiagnosis | None = None, *, all_ranks: bool = False) -> str:
    """The report as readable text: the job's verdict first (``job``: its step time, pace-setter
    and wait, where the time goes, the first fix; then the ranks), then the viewed rank's detail;
    per-step units, ms with three significant figures."""
    r, w, st = doc["run"], doc["window"], doc["step_time_ms"]
    warnings = list(doc.get("warnings") or [])
    # no GPU activity: that warning leads the report (no busy %, MFU or fix below rests on anything)
    top = [f"WARNING: {warnings.pop(0)}"] if doc.get("gpu_busy_pct") is None and warnings else []
    n = max(1, w["steps"])
    out = [*top]
    if job is not None:
        out += render_job(job)
    ranks = doc.get("ranks") or []
    if len(ranks) > 1:
        out += render_ranks(doc, None if job is None or all_ranks else job)
    if job is not None:
        out.append(f"rank {doc['rank']} in detail:")
    out += [
        f"run {r['id']}  {r['name']}  rank {doc['rank']} of {r['ranks']}  GPU {r['gpu'] or '-'}"
        + (  # issue 20: nodes still to report
            f"  ({r['ranks_of_world']} ranks reported)"
            if " of " in r.get("ranks_of_world", "")
            else ""
        ),
        f"window {sig3(w['duration_us'] / 1e3)} ms, {w['steps']} steps ({w['source']})"
        + (
            f"; warm-up steps left out: {', '.join(str(n) for n in w['warmup_steps'])} "
            "(torch.compile compiling or CUDA graphs captured in them)"
            if w.get("warmup_steps")
            else ""
        ),
        f"step time (profiled)  median {sig3(st['p50'])} ms  p90 {sig3(st.get('p90'))} ms  "
        f"max {sig3(st['max'])} ms  (mean {sig3(st['mean'])} ms)",
    ]
    prof = doc.get("profiler") or {}
    if prof.get("untraced_step_ms") is not None:
        out.append(
            f"unprofiled step {sig3(prof['untraced_step_ms'])} ms ({prof['untraced_source']}): the "
            f"profiler adds {sig3(prof['inflation_pct'])}%; "
            + (
                f"host-side figures capped at {sig3(prof['host_cap_ms_per_step'])} ms per step "
                "(untraced step − this rank's own GPU work)"
                if prof.get("host_cap_ms_per_step")
                else "this rank's own GPU work per traced step is no shorter than the untraced "
                "step, so no host-side figure can be told apart from the profiler's cost"
            )
        )
    tp = doc.get("throughput")
    if tp:
        inferred = (
            " (batch inferred from the model input)" if tp.get("source") == "model_input" else ""
        )
        for unit in ("samples", "tokens"):
            v = tp.get(f"{unit}_per_s")
            if v:
                u = tp.get(f"{unit}_per_s_untraced")
                extra = f", {sig3(u)} unprofiled" if u else ""
                out.append(f"throughput {sig3(v)} {unit}/s profiled{extra}{inferred}")
    comp = doc.get("compiled") or {}
    if comp.get("compiled") or comp.get("cuda_graphs"):
        what = [
            x
            for x, on in (
                ("torch.compile", comp.get("compiled")),
                ("CUDA graphs", comp.get("cuda_graphs")),
            )
            if on
        ]
        captures = comp.get("graph_captures") or 0
        capture_steps = comp.get("graph_capture_steps") or 0
        n_steps = (doc.get("window") or {}).get("steps") or 1
        if captures and capture_steps > 1 and comp.get("graph_launches_per_step"):
            said = (
                f"; {captures} CUDA graph captures in {capture_steps} of its {n_steps} steps, "
                "beside the replays: the graphs are recorded again step after step (CUDA-graph "
                "trees record anew when a graph's inputs change), each recording host time"
            )
        elif captures:
            said = (
                f"; {captures} CUDA graph captures in the window: it records their capture, a "
                "warm-up, not the replayed steps"
            )
        else:
            said = ""
        out.append(
            f"compiled: {' + '.join(what)}  ({sig3(comp['compiled_regions_per_step'])} compiled "
            f"regions, {sig3(comp['graph_launches_per_step'])} graph launches per step{said})"
        )
    idle = doc["idle"]
    wait = doc.get("gpu_wait_pct")
    out.append(
        f"GPU busy {_pc(doc['gpu_busy_pct'])}"
        + (f" (of it waiting for other ranks {_pc(wait)})" if wait is not None else "")
        + f"   idle {_pc(idle['pct'])}"
        + (
            f"  ({sig3(idle['per_step_us'] / 1e3)} ms per step)"
            if idle.get("per_step_us") is not None
            else ""
        )
    )
    split = doc.get("busy_split")
    if split and (split.get("wait_us") or split.get("transfer_us") or split.get("unmatched_us")):
        parts = [
            f"{label} {sig3(split[f'{k}_ms_per_step'])} ms"
            for k, label in (
                ("compute", "compute"),
                ("transfer", "comm transfer"),
                ("wait", "comm wait"),
                ("unmatched", "comm unmatched"),
                ("idle", "idle"),
            )
            if split.get(f"{k}_us") or k in ("compute", "idle")
        ]
        out.append("  per step: " + ", ".join(parts))
    capped = prof.get("capped_causes_ms_per_step") or {}
    for cause, v in sorted(idle["causes"].items(), key=lambda kv: -kv[1]):
        if v and idle["pct"] is not None:
            line = f"  {cause:16} {sig3(v / n / 1e3):>8} ms per step  {_pc(idle['causes_pct'][cause]):>6}"
            c = capped.get(cause)
            if c is not None and c < v / n / 1e3:
                line += f"  (at most {sig3(c)} ms unprofiled)"
            out.append(line)
    if prof.get("suspect") and prof.get("note"):
        out.append(f"  note: {prof['note']}")
    out.append(
        f"tensor cores {_pc(doc['tensor_core_pct'])}   dtype {doc['dtype'] or '-'}   "
        f"achieved {sig3(doc['achieved_tflops'])} TFLOP/s"
    )
    vs_dtype = (
        f"   MFU vs the {doc['dtype']} peak {_pc(doc.get('mfu_dtype_pct'))}"
        if doc["dtype"] and doc["dtype"] != doc.get("peak_dtype")
        else ""
    )
    out.append(
        f"MFU {_pc(doc['mfu_pct'])} of the dense {doc.get('peak_dtype') or 'bf16'} peak "
        f"({sig3(doc['peak_tflops'])} TFLOP/s){vs_dtype}   MFU while busy {_pc(doc['mfu_busy_pct'])}"
        + ("   (FLOPs estimated as 6·N·T)" if doc.get("flops_source") == "estimate_6NT" else "")
    )
    if doc.get("mfu_untraced_pct") is not None:
        out.append(
            f"unprofiled: achieved {sig3(doc['achieved_tflops_untraced'])} TFLOP/s, "
            f"MFU {_pc(doc['mfu_untraced_pct'])}"
        )
    out += render_kernels(doc)
    out += render_critical_path(doc)
    out += render_memory(doc) + render_roofline(doc) + render_modules(doc)
    recs = doc["recommendations"]
    out.append("")
    if recs:
        from gpuscope.analysis.recommendation import ORDER_NOTE

        out.append(f"recommendations: {ORDER_NOTE}")
    elif doc.get("gpu_busy_pct") is None:
        out.append("recommendations: none (no GPU activity to base them on)")
    else:
        out.append("recommendations: none (no cost above noise)")
    for rec in recs:
        out += render_fix(rec)
    for wmsg in warnings:
        print(f"gpuscope: warning: {wmsg}", file=sys.stderr)
    return "\n".join(out)


def render_fix(rec: dict[str, Any]) -> list[str]:
    """One fix of ``analyze --json``'s ``recommendations`` as text lines: id and title, its gain
    (the estimate and range, "at most" only after a proven bound), why it helps, the evidence, the
    code."""
    est = rec.get("estimate") or {}
    how = (
        (" — re-timed on the critical path" if est.get("method") == "critical_path" else "")
        + (f", step ~{sig3(est['step_ms'])} ms" if est.get("step_ms") else "")
        + (", clipped at the proven bound" if est.get("clipped") else "")
        + (", low end raised to the recorded pairs' lowest" if est.get("banded") else "")
    )
    out = [f"* [{rec['id']}] {rec['title']}"]
    if rec.get("gain"):
        out.append(f"    {rec['gain']}{how}")
    if rec.get("why"):
        out.append(f"    {rec['why']}")
    out.append(f"    {rec['evidence'].get('summary', '')}")
    return out + ["    | " + line for line in rec["fix"].splitlines()]


TOP_KERNELS = 10
KERNEL_NAME_CHARS = 60


def render_kernels(doc: dict[str, Any]) -> list[str]:
    """Kernel time per step by category and the top kernels (per step, names cut in the middle
    and never two alike), as text lines; none without kernels."""
    from gpuscope.analysis.kernel_names import kernel_labels

    k = doc.get("kernels") or {}
    cats = {c: v for c, v in (k.get("by_category") or {}).items() if v}
    total = sum(cats.values())
    if not cats or not total:
        return []
    n = max(1, doc["window"]["steps"])
    out = ["", "kernel time per step, by category"]
    for c, v in sorted(cats.items(), key=lambda kv: -kv[1]):
        out.append(f"  {c:24} {sig3(v / n / 1e3):>8} ms per step  {_pc(100 * v / total):>6}")
    top = [t for t in k.get("top") or [] if not str(t.get("name", "")).startswith("others (")]
    top = top[:TOP_KERNELS]
    if top:
        names = kernel_labels([str(t["name"]) for t in top], KERNEL_NAME_CHARS)
        out += [
            "",
            f"top kernels (per step){'':{KERNEL_NAME_CHARS - 14}} time/step  share  calls  dtype",
        ]
        for t, name in zip(top, names, strict=True):
            out.append(
                f"  {name:{KERNEL_NAME_CHARS}} {sig3(t['total_us'] / n / 1e3):>7} ms "
                f"{_pc(t.get('share_pct')):>6} {t['count'] / n:>6.3g}  {t.get('precision') or '-'}"
            )
    return out


def render_critical_path(doc: dict[str, Any]) -> list[str]:
    """The critical path: what bounds the steps (ms per step by category) and each step's split."""
    cp = doc.get("critical_path")
    if not cp or not cp.get("steps"):
        return []
    per = cp["bound_by_ms_per_step"]
    parts = [f"{k} {sig3(v)}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v > 0]
    out = ["", f"critical path: bound by {cp['dominant']}  (ms per step: {', '.join(parts)})"]
    for s in cp["steps"]:
        top = max(s["bound_by_ms"].items(), key=lambda kv: kv[1])
        out.append(
            f"  step {s['number']:>4}  {sig3(s['duration_ms']):>8} ms  "
            f"{top[0]} {s['bound_by_pct'][top[0]]:.0f}%"
            + (
                f"  top: {s['top'][0]['what'][:60]} ({sig3(s['top'][0]['ms'])} ms)"
                if s["top"]
                else ""
            )
        )
    return out


#: The ranks ``analyze`` lists without ``--all-ranks``: those that make the others wait longest.
TOP_RANKS = 8


def render_job(job: JobDiagnosis) -> list[str]:
    """The job's verdict as text lines (:func:`gpuscope.analysis.verdict.headline_rows`)."""
    from gpuscope.analysis.verdict import headline_rows

    out = []
    for row in headline_rows(job):
        out.append(f"{row.label}: {row.value}" + (f"  ({row.note})" if row.note else ""))
    return [*out, ""]


def render_ranks(doc: dict[str, Any], job: JobDiagnosis | None = None) -> list[str]:
    """The rank table (per step) and the straggler, for a run of several ranks; with ``job``,
    only the :data:`TOP_RANKS` ranks that make the others wait longest (the viewed one too)."""
    from gpuscope.analysis.verdict import rank_rows

    lines = doc["ranks"]
    left_out = 0
    if job is not None and len(lines) > TOP_RANKS:
        keep = {s.rank for s in rank_rows(job, TOP_RANKS)} | {doc["rank"]}
        left_out = len(lines) - len(keep)
        lines = [r for r in lines if r["rank"] in keep]
    causes = [
        c
        for c in doc["idle"]["causes"]
        if any(((r.get("idle_by_cause_us_per_step") or {}).get(c) or 0) > 0 for r in lines)
    ]
    head = (
        f"{'rank':>4} {'step ms':>9} {'p90 ms':>8} {'max ms':>8} {'busy %':>7} {'wait %':>7} "
        f"{'comm-only ms':>12} {'idle ms':>8}"
    )
    head += "".join(f" {c[:14]:>14}" for c in causes)
    out = ["ranks (median step; wait: inside busy, for other ranks; ms per step)", head]
    for r in lines:
        by = r.get("idle_by_cause_us_per_step") or {}
        idle = r.get("idle_us_per_step")
        line = (
            f"{r['rank']:>4} {sig3(r.get('step_p50_ms', r['step_time_ms'])):>9} "
            f"{sig3(r.get('step_p90_ms')):>8} {sig3(r.get('step_max_ms')):>8} "
            f"{sig3(r['gpu_busy_pct']):>7} {sig3(r.get('comm_wait_pct')):>7} "
            f"{sig3(r['comm_only_us_per_step'] / 1e3):>12} "
            f"{sig3(idle / 1e3 if idle is not None else None):>8}"
        )
        line += "".join(f" {sig3((by.get(c) or 0) / 1e3):>14}" for c in causes)
        out.append(line)
    if left_out:
        out.append(f"({left_out} more ranks that cause less wait: --all-ranks lists them)")
    sg = doc.get("straggler")
    if sg:
        out.append(f"straggler: rank {sg['rank']}: {sg['evidence']}")
    coll = doc.get("collectives") or {}
    for line in coll.get("missing") or []:
        out.append(f"collectives: {line}")
    for b in coll.get("by_collective") or []:
        bw = b.get("busbw_gbs_p50")
        link = b.get("link_pct_p50")
        out.append(
            f"collectives: {b['coll']} on {b['pg']}: {b['instances']} matched, median "
            f"{sig3((b.get('msg_bytes_p50') or 0) / 1e6) if b.get('msg_bytes_p50') else '-'} MB, "
            f"transfer {sig3(b['transfer_us_p50'] / 1e3)} ms, skew {sig3(b['skew_us_p50'] / 1e3)} ms, "
            f"bus bandwidth {sig3(bw) if bw is not None else '-'} GB/s"
            + (f" ({sig3(link)}% of the link's peak)" if link is not None else "")
        )
    out.append("")
    return out
