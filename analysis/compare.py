"""Compare two analysed runs: per-metric deltas and which recommendations B resolved.

A run is compared as its job (metrics.md, "The job"): the job's step time, GPU busy over every
rank and MFU head the comparison, the fixes compared are the job's, and every per-rank figure is
the pace-setter's (the rank the job's fixes are for), so that the Compare page, ``gpuscope
compare``, its JSON and the report say of a run what the Runs list and the Run page say.
Per-step quantities (idle by cause, kernel categories, top kernels) are compared per step, so runs
of different lengths compare fairly; with a unit count in the trace metadata, throughput too.
:func:`compare_reports` is the comparison (``gpuscope compare``); :func:`compare_view` is everything
the dashboard's Compare page shows of it, in display units (ms, %, TFLOP/s), as typed records.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.idle import CAUSES
from gpuscope.analysis.json_row import JsonRow
from gpuscope.analysis.kernel_names import distinct_clips, short_name
from gpuscope.analysis.report import RunReport, analyze_run

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpuscope.analysis.job import JobDiagnosis
    from gpuscope.store import Connection


NOISE_REL_PCT = 2.0
"""A change smaller than this share of the larger of A and B (%) is "unchanged": step-to-step noise, not a
difference (``optimizer 569 → 568 µs`` is unchanged, not better)."""
NOISE_PP = 0.5
"""A change of a percentage smaller than this many percentage points, and than
:data:`NOISE_REL_PCT` of its value, is "unchanged"."""

PROFILED = "profiled"
UNPROFILED = "unprofiled"
"""The two bases of a figure: measured from the trace, with the profiler on (``profiled``), or
from the step time measured with the profiler off (``unprofiled``). Every compared figure carries
one (``basis``); figures that are neither (FLOPs per step, a model count) carry None."""


@dataclass
class Delta:
    """One metric of A and B. ``better``: which direction is an improvement (``lower``/``higher``),
    or None when neither is. ``basis``: ``profiled``, ``unprofiled`` or None (neither)."""

    metric: str
    unit: str
    a: float | None
    b: float | None
    better: str | None = "lower"
    basis: str | None = PROFILED

    @property
    def delta(self) -> float | None:
        """B − A, in the metric's unit (percentage points for a percentage)."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def is_percentage(self) -> bool:
        return self.unit == "%"

    @property
    def delta_pct(self) -> float | None:
        """100 × (B − A) / |A|; None for a percentage (its change is :attr:`delta`, in points:
        never a percentage of a percentage)."""
        d = self.delta
        if d is None or not self.a or self.is_percentage:
            return None
        return 100.0 * d / abs(self.a)

    @property
    def unchanged(self) -> bool | None:
        """Whether the change is within noise (under :data:`NOISE_REL_PCT` % of the larger value;
        a percentage also under :data:`NOISE_PP` points); None when either value is missing."""
        d = self.delta
        if d is None or self.a is None:
            return None
        ref = max(abs(self.a), abs(self.b or 0.0))
        small = ref == 0 or abs(d) < NOISE_REL_PCT / 100.0 * ref
        if self.is_percentage:  # small in points and relatively (0.013% -> 0.049% MFU is 4x)
            return abs(d) < NOISE_PP and small
        return small

    @property
    def improved(self) -> bool | None:
        """Whether B is better; None when the change is within noise, or neither is better."""
        d = self.delta
        if d is None or self.better is None or self.unchanged:
            return None
        return (d < 0) == (self.better == "lower")

    @property
    def verdict(self) -> str | None:
        """``better``, ``worse``, ``unchanged`` (within noise), or None (no direction or value)."""
        if self.unchanged:
            return "unchanged"
        imp = self.improved
        return None if imp is None else ("better" if imp else "worse")

    @property
    def change(self) -> str:
        """The change in words: ``+310.7 %``, ``-8.5 pp`` (a percentage), ``unchanged``, ``new``
        (A is 0) or ``-`` (a value missing)."""
        d = self.delta
        if d is None:
            return "-"
        if self.unchanged:
            return "unchanged"
        if self.is_percentage:
            return f"{d:+.1f} pp"
        if self.a == 0:
            return "new"
        pct = self.delta_pct
        return "-" if pct is None else f"{pct:+.1f} %"

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "unit": self.unit,
            "basis": self.basis,
            "a": self.a,
            "b": self.b,
            "delta": self.delta,
            "delta_pct": self.delta_pct,
            "change": self.change,
            "better": self.better,
            "improved": self.improved,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class ComparedRun(JsonRow):
    """Which run and rank one side of a comparison is: the run's id, name and GPU, the rank whose
    figures are compared and its steps in the window; ``ranks``: the job's ranks, ``pace_setter``:
    its pace-setting rank (None: compared without the job, or an NVML-only run)."""

    id: str
    name: str | None
    gpu: str | None
    rank: int | None  # None: an NVML-only run (no ranks)
    steps: int
    ranks: int = 1
    pace_setter: int | None = None

    def label(self) -> str:
        """``name (id, rank 1: the pace-setter of 2 ranks)``: which run and rank, in words."""
        who = f"rank {self.rank}"
        if self.ranks > 1 and self.pace_setter is not None:
            who += (
                f": the pace-setter of {self.ranks} ranks"
                if self.rank == self.pace_setter
                else f" of {self.ranks} (the pace-setter is rank {self.pace_setter})"
            )
        return f"{self.name} ({self.id}, {who})"


@dataclass
class Comparison:
    """A vs B. ``job``: the jobs' figures (step time, GPU busy over every rank, wait, MFU; empty
    when compared without the jobs); ``metrics``: headline metrics of the compared ranks;
    ``idle_by_cause``: µs per step per cause;
    ``kernel_categories``: kernel µs per step per category; ``top_kernels``: the kernels whose
    time per step changed most; ``recommendations``: ids ``resolved`` (in A, not in B),
    ``remaining`` (in both) and ``new`` (only in B)."""

    a: ComparedRun
    b: ComparedRun
    metrics: list[Delta]
    idle_by_cause: list[Delta]
    kernel_categories: list[Delta]
    top_kernels: list[Delta]
    recommendations: dict[str, list[str]]
    speedup: float | None = None
    notes: list[str] = field(default_factory=list)
    speedup_basis: str | None = None
    speedup_text: str | None = None
    profiler_overhead_pct: dict[str, float | None] = field(default_factory=dict)
    overhead_text: str | None = None
    job: list[Delta] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "gpuscope.compare/1",
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "speedup": self.speedup,
            "speedup_basis": self.speedup_basis,
            "speedup_text": self.speedup_text,
            "profiler_overhead_pct": dict(self.profiler_overhead_pct),
            "profiler_overhead_text": self.overhead_text,
            "job": [d.to_json() for d in self.job],
            "metrics": [d.to_json() for d in self.metrics],
            "idle_by_cause": [d.to_json() for d in self.idle_by_cause],
            "kernel_categories": [d.to_json() for d in self.kernel_categories],
            "top_kernels": [d.to_json() for d in self.top_kernels],
            "recommendations": self.recommendations,
            "notes": list(self.notes),
        }

    def table(self) -> str:
        """A readable text table (what ``gpuscope compare`` prints without ``--json``): each row
        says once whether it is profiled or unprofiled; percentages change in points (pp); a
        change within noise reads ``unchanged``."""
        lines = [f"A: {self.a.label()}", f"B: {self.b.label()}"]
        if self.speedup_text:
            lines.append(self.speedup_text)
        if self.overhead_text:
            lines.append(self.overhead_text)
        for title, rows in (
            ("the job", self.job),
            (f"metric (rank {self.a.rank} of A, rank {self.b.rank} of B)", self.metrics),
            ("idle per step by cause", self.idle_by_cause),
            ("kernel time per step by category", self.kernel_categories),
            ("kernels that changed most (per step)", self.top_kernels),
        ):
            if not rows:
                continue
            lines += [
                "",
                f"{title:44} {'basis':10} {'A':>12} {'B':>12} {'change':>10}  unit",
            ]
            names = [d.metric for d in rows]
            if rows is self.top_kernels:  # kernel names: cut so that two never read alike
                names = distinct_clips([short_name(n, 10**4) for n in names], 44)
            for d, name in zip(rows, names, strict=True):
                lines.append(
                    f"{_clip(name, 44):44} {d.basis or '-':10} {_fmt(d.a):>12} "
                    f"{_fmt(d.b):>12} {d.change:>10}  {d.unit}{_mark(d)}"
                )
        rec = self.recommendations
        lines += [
            "",
            *(["the jobs' fixes (each job's, on its pace-setter):"] if self.job else []),
            "recommendations resolved by B: " + (", ".join(rec["resolved"]) or "-"),
            "still open in B:               " + (", ".join(rec["remaining"]) or "-"),
            "new in B:                      " + (", ".join(rec["new"]) or "-"),
        ]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1e9:
        return f"{v:.3g}"
    return sig3(v)


def _mark(d: Delta) -> str:
    v = d.verdict
    return "" if v in (None, "unchanged") else f"  {v}"


def _summary(r: RunReport, job: JobDiagnosis | None = None) -> ComparedRun:
    return ComparedRun(
        r.run["id"],
        r.run["name"],
        r.run.get("gpu"),
        r.rank,
        len(r.window.steps),
        len(job.ranks) if job is not None else 1,
        job.pace_setter if job is not None else None,
    )


def job_deltas(ja: JobDiagnosis, jb: JobDiagnosis) -> list[Delta]:
    """The jobs' figures, B against A (metrics.md, "The job"): the job step time (median and
    p90 of the periods between step completions, ms), GPU busy over every rank's window, the
    share of it waiting for other ranks (when either job has several ranks) and the job's MFU
    (%). Rows where both are None are left out."""
    rows = [
        Delta("job_step_time_ms", "ms", ja.step.p50_ms, jb.step.p50_ms, "lower"),
        Delta("job_step_time_p90_ms", "ms", ja.step.p90_ms, jb.step.p90_ms, "lower"),
        Delta("job_gpu_busy_pct", "%", ja.split.busy_pct, jb.split.busy_pct, "higher"),
    ]
    if ja.distributed or jb.distributed:
        rows.append(Delta("job_wait_pct", "%", ja.split.wait_pct, jb.split.wait_pct, "lower"))
    rows.append(Delta("job_mfu_pct", "%", ja.mfu_pct, jb.mfu_pct, "higher"))
    return [d for d in rows if d.a is not None or d.b is not None]


def _idle_us(r: RunReport, ns: int) -> float | None:
    """Idle µs per step; None without GPU activity (no evidence, no figure)."""
    return ns / r.window.n_steps / 1e3 if r.has_gpu_activity else None


def _per_step(v: float | None, r: RunReport) -> float | None:
    return None if v is None else v / r.window.n_steps


def compare_reports(
    a: RunReport,
    b: RunReport,
    *,
    top_n: int = 10,
    jobs: tuple[JobDiagnosis, JobDiagnosis] | None = None,
) -> Comparison:
    """Deltas of B against A. ``jobs``: A's and B's job verdicts (``job.diagnose``): their figures
    head the comparison (:func:`job_deltas`) and the fixes compared are theirs (each job's
    ``fixes``, in its order), not the viewed ranks' recommendations."""

    def tp(r: RunReport, key: str) -> float | None:
        return r.throughput.rate(key) if r.throughput is not None else None

    U = UNPROFILED
    metrics = [
        Delta("step_time_ms", "ms", a.step_stats.mean_ms, b.step_stats.mean_ms, "lower"),
        Delta("step_time_p50_ms", "ms", a.step_stats.p50_ms, b.step_stats.p50_ms, "lower"),
        Delta("untraced_step_ms", "ms", _untraced(a), _untraced(b), "lower", U),
        Delta("samples_per_s", "1/s", tp(a, "samples_per_s"), tp(b, "samples_per_s"), "higher"),
        Delta(
            "samples_per_s_untraced",
            "1/s",
            tp(a, "samples_per_s_untraced"),
            tp(b, "samples_per_s_untraced"),
            "higher",
            U,
        ),
        Delta("tokens_per_s", "1/s", tp(a, "tokens_per_s"), tp(b, "tokens_per_s"), "higher"),
        Delta(
            "tokens_per_s_untraced",
            "1/s",
            tp(a, "tokens_per_s_untraced"),
            tp(b, "tokens_per_s_untraced"),
            "higher",
            U,
        ),
        Delta("gpu_busy_pct", "%", a.gpu_busy_pct, b.gpu_busy_pct, "higher"),
        Delta("idle_pct", "%", a.idle_pct, b.idle_pct, "lower"),
        Delta(
            "idle_per_step_us",
            "µs",
            _idle_us(a, a.idle.total_ns),
            _idle_us(b, b.idle.total_ns),
            "lower",
        ),
        Delta(
            "tensor_core_pct",
            "%",
            getattr(a.tensor_cores, "tensor_core_pct", None),
            getattr(b.tensor_cores, "tensor_core_pct", None),
            "higher",
        ),
        Delta("achieved_tflops", "TFLOP/s", a.achieved_tflops, b.achieved_tflops, "higher"),
        Delta(
            "achieved_tflops_untraced",
            "TFLOP/s",
            a.achieved_tflops_untraced,
            b.achieved_tflops_untraced,
            "higher",
            U,
        ),
        Delta("mfu_pct", "%", a.mfu_pct, b.mfu_pct, "higher"),
        Delta("mfu_dtype_pct", "%", a.mfu_dtype_pct, b.mfu_dtype_pct, None),
        Delta("mfu_untraced_pct", "%", a.mfu_untraced_pct, b.mfu_untraced_pct, "higher", U),
        Delta("mfu_busy_pct", "%", a.mfu_busy_pct, b.mfu_busy_pct, "higher"),
        Delta("flops_per_step", "FLOP", a.flops_per_step, b.flops_per_step, None, None),
    ]
    metrics = [m for m in metrics if m.a is not None or m.b is not None]
    idle = [
        Delta(
            c,
            "µs/step",
            _idle_us(a, a.idle.causes_ns[c]),
            _idle_us(b, b.idle.causes_ns[c]),
            "lower",
        )
        for c in CAUSES
        if _idle_us(a, a.idle.causes_ns[c]) or _idle_us(b, b.idle.causes_ns[c])
    ]
    ca = dict(getattr(a.kernels, "by_category", None) or {})
    cb = dict(getattr(b.kernels, "by_category", None) or {})
    cats = [
        Delta(c, "µs/step", _per_step(ca.get(c, 0.0), a), _per_step(cb.get(c, 0.0), b), "lower")
        for c in dict.fromkeys([*ca, *cb])
        if ca.get(c) or cb.get(c)
    ]
    ka = {
        k.name: k.total_us
        for k in getattr(a.kernels, "top", None) or []
        if not k.name.startswith("others (")
    }
    kb = {
        k.name: k.total_us
        for k in getattr(b.kernels, "top", None) or []
        if not k.name.startswith("others (")
    }
    tops = [
        Delta(
            name,
            "µs/step",
            _per_step(ka.get(name, 0.0), a),
            _per_step(kb.get(name, 0.0), b),
            "lower",
        )
        for name in dict.fromkeys([*ka, *kb])
    ]
    tops.sort(key=lambda d: (-abs(d.delta or 0.0), d.metric))
    fixes = fix_status(a, b, jobs)
    recs = {
        "resolved": [f.id for f in fixes.resolved],
        "remaining": [fa.id for fa, _ in fixes.remaining],
        "new": [f.id for f in fixes.new],
    }
    notes = []
    if a.run.get("gpu") != b.run.get("gpu"):
        notes.append(f"different GPUs: {a.run.get('gpu')} vs {b.run.get('gpu')}")
    if (a.peak_tflops or b.peak_tflops) and a.dtype != b.dtype:
        notes.append(
            f"dtypes differ ({a.dtype} vs {b.dtype}): mfu_pct of both is against the GPU's dense "
            "bf16/fp16 peak, so they compare; mfu_dtype_pct is each against its own dtype's peak"
        )
    fa, fb = getattr(a.flops, "source", None), getattr(b.flops, "source", None)
    if a.flops_per_step and b.flops_per_step and fa != fb:
        notes.append(
            f"FLOPs per step come from different sources ({fa} vs {fb}): achieved TFLOP/s and "
            "MFU compare only approximately"
        )
    speedup, basis, text, note = fair_speedup(a, b)
    if note:
        notes.append(note)
    overhead = {"a": profiler_overhead_pct(a), "b": profiler_overhead_pct(b)}
    return Comparison(
        a=_summary(a, jobs[0] if jobs else None),
        b=_summary(b, jobs[1] if jobs else None),
        metrics=metrics,
        idle_by_cause=idle,
        kernel_categories=cats,
        top_kernels=tops[:top_n],
        recommendations=recs,
        speedup=speedup,
        notes=notes,
        speedup_basis=basis,
        speedup_text=text,
        profiler_overhead_pct=overhead,
        overhead_text=overhead_text(a, b),
        job=job_deltas(*jobs) if jobs else [],
    )


def profiler_overhead_pct(r: RunReport) -> float | None:
    """The share of the run's profiled step that is the profiler's own cost (%): 100 × (profiled
    median step − unprofiled step) / profiled median step, at least 0; None without an
    unprofiled step time."""
    pc = r.profiler
    u = getattr(pc, "untraced_step_ms", None)
    t = getattr(pc, "traced_step_ms", None)
    if u is None or not t:
        return None
    return max(0.0, 100.0 * (t - u) / t)


def overhead_text(a: RunReport, b: RunReport) -> str | None:
    """How much of each run's trace is profiler overhead, in words; None when neither knows its
    unprofiled step time."""
    parts = []
    for tag, r in (("A", a), ("B", b)):
        pct = profiler_overhead_pct(r)
        pc = r.profiler
        if pct is None or pc is None:
            continue
        parts.append(
            f"{pct:.0f}% of {tag}'s trace is profiler overhead (profiled step "
            f"{sig3(pc.traced_step_ms)} ms, unprofiled {sig3(pc.untraced_step_ms)} ms: the "
            f"profiler makes the step {pc.inflation_pct or 0:.0f}% longer)"
        )
    return "; ".join(parts) if parts else None


def _untraced(r: RunReport) -> float | None:
    return getattr(r.profiler, "untraced_step_ms", None)


def step_ratio_words(a_ms: float, b_ms: float) -> str:
    """B's step against A's, read the right way round: "1.39× shorter", "1.39× longer" (the
    ratio is always ≥ 1), "as long" when they are equal to 3 significant figures."""
    if a_ms <= 0 or b_ms <= 0:
        raise ValueError("step times must be positive")
    ratio = a_ms / b_ms if a_ms >= b_ms else b_ms / a_ms
    if f"{ratio:.3g}" == "1":
        return "as long"
    return f"{ratio:.3g}× {'shorter' if b_ms < a_ms else 'longer'}"


def fair_speedup(
    a: RunReport, b: RunReport
) -> tuple[float | None, str | None, str | None, str | None]:
    """(speed-up of B over A, its basis, a sentence, a note). By throughput when both runs know
    their tokens or samples per step (``tokens_per_s`` / ``samples_per_s``; untraced step times
    when both have them: basis ``..._untraced``); otherwise by step time (``step_time``, or
    ``untraced_step_time``), with a note that step times compare unequal work unless the batches
    are equal."""
    ta, tb = a.throughput, b.throughput
    inferred = "model_input" in (ta.source if ta else None, tb.source if tb else None)
    both_untraced = _untraced(a) is not None and _untraced(b) is not None
    for unit in ("tokens", "samples"):
        keys = [f"{unit}_per_s_untraced", f"{unit}_per_s"] if both_untraced else [f"{unit}_per_s"]
        for key in keys:
            va, vb = (t.rate(key) if t is not None else None for t in (ta, tb))
            if va and vb:
                sp = vb / va
                how = " (batch inferred from the model's input)" if inferred else ""
                when = f", {UNPROFILED}" if key.endswith("_untraced") else f", {PROFILED}"
                text = (
                    f"B processes {sp:.3g}× the {unit} per second of A{when}{how} "
                    f"({sig3(va)} → {sig3(vb)} {unit}/s)"
                )
                return sp, key, text, None
    sa, sb = a.step_stats.mean_ms, b.step_stats.mean_ms
    basis = "step_time"
    if both_untraced:
        sa, sb, basis = _untraced(a) or sa, _untraced(b) or sb, "untraced_step_time"
    if sb <= 0:
        return None, None, None, None
    sp = sa / sb
    text = (
        f"B's step takes {sig3(sb)} ms against A's {sig3(sa)} ms ({step_ratio_words(sa, sb)}"
        + (f", {UNPROFILED}" if both_untraced else f", {PROFILED}")
        + "): the work per step may differ"
    )
    note = (
        "no samples or tokens per step in one run (metadata samples_per_step/tokens_per_step, or "
        "gpuscope.capture with model=): step times compare unequal work unless the batches are equal"
    )
    return sp, basis, text, note


def job_and_rank(con: Connection, run_id: str, **kw: Any) -> tuple[RunReport, JobDiagnosis]:
    """The run's job verdict and the report of the rank it is compared by: ``kw["rank"]`` when
    given, else the job's pace-setter (``fix_rank``: the rank its fixes are for), each rank
    analysed once (``report_part.analyze``; keyword arguments as :func:`analyze_run`'s)."""
    from gpuscope.analysis.report_part import analyze

    seen: dict[int, RunReport] = {}
    # the job's split and straggler are over every rank: the viewed rank's report summarises them
    report, job = analyze(con, run_id, seen=seen, **{**kw, "all_ranks": True})
    if kw.get("rank") is None and job.fix_rank != report.rank:
        report = seen.get(job.fix_rank) or analyze_run(con, run_id, **{**kw, "rank": job.fix_rank})
    return report, job


def compare_runs(con: Connection, a: str, b: str, *, top_n: int = 10, **kw: Any) -> Comparison:
    """Compare runs ``a`` and ``b`` as jobs (:func:`job_and_rank`: each job's verdict and its
    pace-setter's report, or the ``rank`` named; other keyword arguments as :func:`analyze_run`'s,
    e.g. ``step_annotation``, ``peak_tflops``). ``untraced_step_ms``: a pair (A's, B's; None for
    either to use its trace metadata), since each run has its own."""
    kw.setdefault("all_ranks", False)
    untraced = kw.pop("untraced_step_ms", None)
    if untraced is not None and not isinstance(untraced, tuple | list):
        raise ValueError("untraced_step_ms: give one value per run (A's, B's)")
    ua, ub = untraced if untraced is not None else (None, None)
    ra, ja = job_and_rank(con, a, untraced_step_ms=ua, **kw)
    rb, jb = job_and_rank(con, b, untraced_step_ms=ub, **kw)
    return compare_reports(ra, rb, top_n=top_n, jobs=(ja, jb))


# -- what the Compare page shows ---------------------------------------------------------------------


@dataclass(frozen=True)
class Fix:
    """One recommendation as the Compare page lists it. ``bound_pct``: its proven bound (%, None
    where none is proven); ``footing``: what its gain is a share of (``step_time``,
    ``per_sample_time``, ``memory``); ``gain``: the analysis's own sentence for it
    (``Recommendation.gain_phrase``; "" without an estimate or a proven bound)."""

    id: str
    title: str
    bound_pct: float | None
    footing: str = "step_time"
    gain: str | None = None


@dataclass(frozen=True)
class FixStatus:
    """A's recommendations that B ``resolved`` (in A, not in B), those ``remaining`` (as (in A, in
    B)) and the ``new`` ones (only in B), matched by id, in each report's order."""

    resolved: list[Fix]
    remaining: list[tuple[Fix, Fix]]
    new: list[Fix]


def _fix(r: Any) -> Fix:
    return Fix(
        str(r.id),
        str(getattr(r, "title", None) or r.id),
        getattr(r, "bound_pct", None),
        str(getattr(r, "footing", None) or "step_time"),
        getattr(r, "gain_phrase", None),
    )


def fix_status(
    a: RunReport, b: RunReport, jobs: tuple[JobDiagnosis, JobDiagnosis] | None = None
) -> FixStatus:
    """Which of A's recommendations B resolved, which remain, which are new in B (by id): the
    jobs' fixes when ``jobs`` are given (each job's ``fixes``, in its order), else the reports'
    recommendations."""
    recs_a: Sequence[Any] = jobs[0].fixes if jobs else a.recommendations
    recs_b: Sequence[Any] = jobs[1].fixes if jobs else b.recommendations
    fa = {str(r.id): _fix(r) for r in recs_a}
    fb = {str(r.id): _fix(r) for r in recs_b}
    return FixStatus(
        resolved=[f for i, f in fa.items() if i not in fb],
        remaining=[(f, fb[i]) for i, f in fa.items() if i in fb],
        new=[f for i, f in fb.items() if i not in fa],
    )


@dataclass(frozen=True)
class Card:
    """One headline card: A's and B's value in ``unit`` (``ms``, ``tokens/s``, ``samples/s``,
    ``TFLOP/s``, ``%``) and whether lower is better. ``key`` names the figure (``throughput``,
    ``step_time``, ``achieved_tflops``, ``mfu``, ``gpu_busy``, ``idle_per_step``); ``basis``:
    ``profiled`` or ``unprofiled``; ``delta``: the change as shown (``+455.9 %``, ``-8.5 pp``,
    ``unchanged``); ``tone``: whether the change is ``good``, ``bad`` or ``neutral`` for the user
    (a diagnostic figure that got worse while B does the work faster is neutral, and ``why``
    says so)."""

    key: str
    label: str
    a: float | None
    b: float | None
    unit: str
    lower_is_better: bool
    basis: str | None = PROFILED
    delta: str | None = None
    tone: str = "neutral"
    why: str | None = None


@dataclass(frozen=True)
class Section:
    """A titled group of compared metrics in display units (ms, %, TFLOP/s, TFLOP)."""

    title: str
    rows: list[Delta]


@dataclass(frozen=True)
class CompareView:
    """Everything the Compare page shows of A vs B: the ``comparison`` itself, the six headline
    ``cards``, every delta in ``sections`` (display units), a ``peak_note`` when the MFUs are
    measured against different peaks, idle ms per step by cause of A and B (every cause, in
    precedence order) and the ``fixes``."""

    comparison: Comparison
    cards: list[Card]
    sections: list[Section]
    peak_note: str | None
    idle_ms_per_step: tuple[dict[str, float], dict[str, float]]
    fixes: FixStatus

    @property
    def speedup_text(self) -> str | None:
        return self.comparison.speedup_text

    @property
    def notes(self) -> list[str]:
        return list(self.comparison.notes)

    @property
    def overhead_text(self) -> str | None:
        """How much of each trace is profiler overhead (see :func:`overhead_text`)."""
        return self.comparison.overhead_text


#: Display labels of :func:`compare_reports`' headline metrics.
METRIC_LABELS = {
    "step_time_ms": "Step time (mean)",
    "step_time_p50_ms": "Step time (median)",
    "samples_per_s": "Throughput (samples)",
    "tokens_per_s": "Throughput (tokens)",
    "gpu_busy_pct": "GPU busy",
    "idle_pct": "GPU idle",
    "idle_per_step_us": "Idle time (per step)",
    "tensor_core_pct": "Tensor-core share",
    "mfu_pct": "MFU",
    "mfu_dtype_pct": "MFU against the dtype's peak",
    "mfu_untraced_pct": "MFU",
    "mfu_busy_pct": "MFU while busy",
    "untraced_step_ms": "Step time (median)",
    "samples_per_s_untraced": "Throughput (samples)",
    "tokens_per_s_untraced": "Throughput (tokens)",
    "achieved_tflops_untraced": "Achieved TFLOP/s",
    "achieved_tflops": "Achieved TFLOP/s",
    "flops_per_step": "Model FLOPs per step",
    "job_step_time_ms": "Job step time (median)",
    "job_step_time_p90_ms": "Job step time (p90)",
    "job_gpu_busy_pct": "GPU busy, every rank",
    "job_wait_pct": "Waiting for other ranks",
    "job_mfu_pct": "Job MFU",
}
KERNEL_WIDTH = 64
"""Characters of a kernel name the Compare page shows (the rest on hover in the Run page)."""
SECTION_TITLES = (
    ("job", "The job"),
    ("metrics", "The compared ranks"),
    ("idle_by_cause", "Idle per step, by cause"),
    ("kernel_categories", "Kernel time per step, by category"),
    ("top_kernels", "Kernels that changed most (per step)"),
)


def display_delta(d: Delta, section: str = "metrics") -> Delta:
    """``d`` in the dashboard's units and words: µs -> ms, µs/step -> ms/step, FLOP -> TFLOP, a rate
    named by what it counts (``tokens/s``, never ``1/s``); headline metrics by their label, causes
    in words. ``section``: the :class:`Comparison` list it comes from."""
    scale, unit = 1.0, d.unit
    if unit in ("µs", "us"):
        scale, unit = 1e-3, "ms"
    elif unit in ("µs/step", "us/step"):
        scale, unit = 1e-3, "ms/step"
    elif unit == "FLOP":
        scale, unit = 1e-12, "TFLOP"
    elif unit == "1/s":
        unit = f"{d.metric.split('_per_s')[0]}/s"
    metric = d.metric
    if section in ("metrics", "job"):
        metric = METRIC_LABELS.get(metric, metric.replace("_", " "))
    elif section == "idle_by_cause":
        metric = metric.replace("_", " ").capitalize()
    return Delta(
        metric,
        unit,
        None if d.a is None else d.a * scale,
        None if d.b is None else d.b * scale,
        d.better,
        d.basis,
    )


def peak_difference(a: RunReport, b: RunReport) -> str | None:
    """A sentence when A's and B's MFU are measured against different peaks (different GPUs, or a
    ``--peak-tflops`` override), else ``None``. A different dtype does not make them differ: MFU is
    against the GPU's dense bf16 peak for every dtype (metrics.md, "MFU")."""
    pa, pb = a.peak_tflops, b.peak_tflops
    if pa == pb:
        return None

    def peak(p: float | None, r: RunReport) -> str:
        kind = getattr(r.peak, "dtype", None) or "dense"
        return f"{p:,.1f} TFLOP/s ({kind})" if p is not None else "no peak"

    return (
        f"A and B's MFU use different peaks (A {peak(pa, a)} vs B {peak(pb, b)}): compare "
        "achieved TFLOP/s rather than MFU."
    )


def throughput_key(a: RunReport, b: RunReport) -> str:
    """The throughput both runs are shown by: ``tokens_per_s`` when either knows its tokens per
    step, else ``samples_per_s``."""
    if any(r.throughput is not None and r.throughput.tokens_per_s is not None for r in (a, b)):
        return "tokens_per_s"
    return "samples_per_s"


OUTCOME_KEYS = ("throughput", "step_time")
"""The cards that say how fast the job is; the others explain it."""


def outcome(cmp: Comparison) -> str | None:
    """Whether B does the work ``faster``, ``slower`` or about the same (``unchanged``) as A, by
    the fair speed-up (:func:`fair_speedup`) and the noise threshold; None when unknown."""
    sp = cmp.speedup
    if sp is None:
        return None
    if abs(sp - 1.0) < NOISE_REL_PCT / 100.0:
        return "unchanged"
    return "faster" if sp > 1.0 else "slower"


def _cards(cmp: Comparison, a: RunReport, b: RunReport, peak_note: str | None) -> list[Card]:
    # the jobs' figures where compared with the jobs: step time, MFU and GPU busy say what the
    # Runs list and the Run page say of each run
    m = {d.metric: d for d in cmp.metrics}
    m.update({d.metric.removeprefix("job_"): d for d in cmp.job})
    unprofiled = _untraced(a) is not None and _untraced(b) is not None
    result = outcome(cmp)

    def card(key: str, label: str, metric: str, unit: str, lower: bool, scale: float = 1.0) -> Card:
        d = m.get(metric)
        va = None if d is None or d.a is None else d.a * scale
        vb = None if d is None or d.b is None else d.b * scale
        basis = (
            d.basis if d is not None else (UNPROFILED if metric.endswith("_untraced") else PROFILED)
        )
        verdict = d.verdict if d is not None else None
        tone, why = "neutral", None
        if verdict == "better":
            tone = "good"
        elif verdict == "worse":
            tone = "bad"
            if key not in OUTCOME_KEYS and result == "faster":
                tone = "neutral"
                why = (
                    "B does the work faster (the speed-up above), so this change is not a loss: "
                    "it describes how B spends its shorter time."
                )
            elif key == "step_time" and result == "faster":
                tone = "neutral"
                why = "B's step holds more work: its throughput is higher, so a longer step is not a loss."
        return Card(
            key,
            label,
            va,
            vb,
            unit,
            lower,
            basis,
            None if d is None or d.delta is None else d.change,
            tone,
            why,
        )

    def pick(metric: str) -> str:
        return f"{metric}_untraced" if unprofiled and f"{metric}_untraced" in m else metric

    tp = throughput_key(a, b)
    step = "untraced_step_ms" if unprofiled and "untraced_step_ms" in m else "step_time_ms"
    return [
        card("throughput", "Throughput", pick(tp), tp.replace("_per_s", "/s"), False),
        card("step_time", "Step time", step, "ms", True),
        card("achieved_tflops", "Achieved TFLOP/s", pick("achieved_tflops"), "TFLOP/s", False),
        card(
            "mfu",
            "MFU (different peaks)" if peak_note else "MFU",
            "mfu_untraced_pct" if unprofiled and "mfu_untraced_pct" in m else "mfu_pct",
            "%",
            False,
        ),
        card("gpu_busy", "GPU busy", "gpu_busy_pct", "%", False),
        card("idle_per_step", "Idle per step", "idle_per_step_us", "ms", True, 1e-3),
    ]


def _idle_ms_per_step(r: RunReport) -> dict[str, float]:
    return {c: r.idle.causes_ns.get(c, 0) / r.window.n_steps / 1e6 for c in CAUSES}


def compare_view(
    a: RunReport,
    b: RunReport,
    *,
    top_n: int = 10,
    jobs: tuple[JobDiagnosis, JobDiagnosis] | None = None,
) -> CompareView:
    """What the Compare page shows of B against A (see :class:`CompareView`); ``jobs`` as
    :func:`compare_reports`' (the cards' step time, MFU and GPU busy are then the jobs')."""
    cmp = compare_reports(a, b, top_n=top_n, jobs=jobs)
    note = peak_difference(a, b)
    sections = [
        Section(title, [display_delta(d, key) for d in getattr(cmp, key)])
        for key, title in SECTION_TITLES
    ]
    for sec in sections:  # kernel names: short, and never two that read alike
        if sec.title == dict(SECTION_TITLES)["top_kernels"]:
            names = distinct_clips([short_name(d.metric, 10**4) for d in sec.rows], KERNEL_WIDTH)
            sec.rows[:] = [replace(d, metric=n) for d, n in zip(sec.rows, names, strict=True)]
    return CompareView(
        comparison=cmp,
        cards=_cards(cmp, a, b, note),
        sections=[s for s in sections if s.rows],
        peak_note=note,
        idle_ms_per_step=(_idle_ms_per_step(a), _idle_ms_per_step(b)),
        fixes=fix_status(a, b, jobs),
    )
