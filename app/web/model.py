"""Pure shaping of analysis reports for display (no Streamlit): compare rows, fix status.

Reports are ``analyze_run(...).to_json()`` dicts (times in µs, shares in %); a comparison from
``compare_runs`` is used where it has the answer and these functions fill in the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    """One compared metric: values of A and B in display units, and whether lower is better."""

    metric: str
    unit: str
    a: float | None
    b: float | None
    lower_is_better: bool | None
    section: str = "Headline"

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def delta_pct(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return 100.0 * (self.b - self.a) / abs(self.a)

    @property
    def better(self) -> bool | None:
        """True when B improves on A (None when equal or unknown)."""
        d = self.delta
        if d is None or abs(d) < 1e-12 or self.lower_is_better is None:
            return None
        return d < 0 if self.lower_is_better else d > 0


def num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def steps_of(report: dict[str, Any]) -> int:
    return max(1, int(num(get(report, "window", "steps")) or 1))


def per_step_ms(report: dict[str, Any], us: Any) -> float | None:
    v = num(us)
    return None if v is None else v / 1e3 / steps_of(report)


def compare_rows(a: dict[str, Any], b: dict[str, Any]) -> list[Row]:
    """Every compared metric of two reports, in display units (ms, %, TFLOP/s, GFLOP)."""

    def value(report: dict[str, Any], path: tuple[str, ...]) -> float | None:
        return num(get(report, *path))

    def per_step(report: dict[str, Any], path: tuple[str, ...]) -> float | None:
        return per_step_ms(report, get(report, *path))

    # (label, unit, where in the report, how to read it, lower is better)
    specs: list[tuple[str, str, tuple[str, ...], Any, bool]] = [
        ("Step time (mean)", "ms", ("step_time_ms", "mean"), value, True),
        ("Step time (median)", "ms", ("step_time_ms", "p50"), value, True),
        ("Step time (slowest)", "ms", ("step_time_ms", "max"), value, True),
        ("GPU busy", "%", ("gpu_busy_pct",), value, False),
        ("MFU", "%", ("mfu_pct",), value, False),
        ("MFU while busy", "%", ("mfu_busy_pct",), value, False),
        ("Tensor-core share", "%", ("tensor_core_pct",), value, False),
        (
            "Eligible, not on tensor cores (per step)",
            "ms",
            ("tc_eligible_not_tc_us",),
            per_step,
            True,
        ),
        ("Kernel time (per step)", "ms", ("kernels", "total_us"), per_step, True),
        ("Idle time (per step)", "ms", ("idle", "total_us"), per_step, True),
    ]
    rows = [
        Row(label, unit, read(a, path), read(b, path), lower)
        for label, unit, path, read, lower in specs
    ]
    causes_a = get(a, "idle", "causes") or {}
    causes_b = get(b, "idle", "causes") or {}
    for cause in list(dict.fromkeys([*causes_a, *causes_b])):
        ra, rb = per_step_ms(a, causes_a.get(cause)), per_step_ms(b, causes_b.get(cause))
        if (ra or 0) == 0 and (rb or 0) == 0:
            continue
        rows.append(Row(f"Idle: {cause.replace('_', ' ')} (per step)", "ms", ra, rb, True))
    fa, fb = num(a.get("flops_per_step")), num(b.get("flops_per_step"))
    rows.append(
        Row(
            "Model FLOPs per step",
            "GFLOP",
            None if fa is None else fa / 1e9,
            None if fb is None else fb / 1e9,
            False,
        )
    )
    rows.append(
        Row(
            "Peak (dense bf16: the MFU basis)",
            "TFLOP/s",
            num(a.get("peak_tflops")),
            num(b.get("peak_tflops")),
            False,
        )
    )
    return rows


@dataclass(frozen=True)
class FixStatus:
    resolved: list[dict[str, Any]]
    remaining: list[tuple[dict[str, Any], dict[str, Any]]]  # (in A, in B)
    new: list[dict[str, Any]]


def fix_status(
    a: dict[str, Any], b: dict[str, Any], comparison: dict[str, Any] | None = None
) -> FixStatus:
    """Which of A's recommendations B resolved (by id), which remain, which are new in B.

    When ``comparison`` (``compare_runs``) lists ``resolved``/``fixes_resolved`` ids, those win.
    """
    ra = {str(r.get("id")): r for r in a.get("recommendations") or []}
    rb = {str(r.get("id")): r for r in b.get("recommendations") or []}
    resolved_ids = [i for i in ra if i not in rb]
    if comparison:
        listed = (
            get(comparison, "recommendations", "resolved")
            or comparison.get("resolved")
            or comparison.get("fixes_resolved")
        )
        if isinstance(listed, list) and listed:
            ids = [str(x.get("id")) if isinstance(x, dict) else str(x) for x in listed]
            resolved_ids = [i for i in ids if i in ra] + [i for i in ids if i not in ra]
    resolved = [ra.get(i) or {"id": i, "title": i} for i in resolved_ids]
    remaining = [(ra[i], rb[i]) for i in ra if i in rb and i not in resolved_ids]
    new = [rb[i] for i in rb if i not in ra]
    return FixStatus(resolved, remaining, new)


def peak_difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """A sentence when A's and B's MFU are measured against different peaks (different GPUs, or a
    ``--peak-tflops`` override), else ``None``. A different dtype does not make them differ: MFU is
    against the GPU's dense bf16 peak for every dtype (metrics.md, "MFU"); ``mfu_dtype_pct`` is
    the per-dtype figure."""
    pa, pb = num(a.get("peak_tflops")), num(b.get("peak_tflops"))
    if pa == pb:
        return None

    def peak(p: float | None, r: dict[str, Any]) -> str:
        kind = r.get("peak_dtype") or "dense"
        return f"{p:,.1f} TFLOP/s ({kind})" if p is not None else "no peak"

    return (
        f"A and B's MFU use different peaks (A {peak(pa, a)} vs B {peak(pb, b)}): compare "
        "achieved TFLOP/s rather than MFU."
    )


def throughput_kind(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, str, str]:
    """Which throughput both runs report: (key in ``throughput``, card label, unit)."""
    for key, label, unit in (
        ("tokens_per_s", "Throughput", "tokens/s"),
        ("samples_per_s", "Throughput", "samples/s"),
    ):
        if num(get(a, "throughput", key)) is not None or num(get(b, "throughput", key)) is not None:
            return key, label, unit
    return "samples_per_s", "Throughput", "samples/s"


def speedup(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """A's mean step time ÷ B's (>1: B is faster)."""
    sa, sb = num(get(a, "step_time_ms", "mean")), num(get(b, "step_time_ms", "mean"))
    if not sa or not sb:
        return None
    return sa / sb


# -- compare_reports JSON -> rows in display units ----------------------------------------------------

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
    "mfu_untraced_pct": "MFU without the profiler",
    "mfu_busy_pct": "MFU while busy",
    "untraced_step_ms": "Step time without the profiler",
    "achieved_tflops": "Achieved TFLOP/s",
    "flops_per_step": "Model FLOPs per step",
}
SECTIONS = (
    ("metrics", "Headline"),
    ("idle_by_cause", "Idle per step, by cause"),
    ("kernel_categories", "Kernel time per step, by category"),
    ("top_kernels", "Kernels that changed most (per step)"),
)


def _display(unit: str, a: float | None, b: float | None) -> tuple[str, float | None, float | None]:
    """µs -> ms, µs/step -> ms/step, FLOP -> TFLOP: the app's units."""
    scale, out = 1.0, unit
    if unit in ("µs", "us"):
        scale, out = 1e-3, "ms"
    elif unit in ("µs/step", "us/step"):
        scale, out = 1e-3, "ms/step"
    elif unit == "FLOP":
        scale, out = 1e-12, "TFLOP"
    return out, None if a is None else a * scale, None if b is None else b * scale


def comparison_rows(comparison: dict[str, Any]) -> list[Row]:
    """Every delta of ``compare_reports(...).to_json()``, sectioned, in display units."""
    rows: list[Row] = []
    for key, section in SECTIONS:
        for d in comparison.get(key) or []:
            unit, a, b = _display(str(d.get("unit") or ""), num(d.get("a")), num(d.get("b")))
            if unit == "1/s":  # a rate: say of what
                unit = f"{str(d.get('metric')).split('_per_s')[0]}/s"
            better = d.get("better")
            lower = None if better is None else better == "lower"
            metric = str(d.get("metric"))
            if key == "metrics":
                metric = METRIC_LABELS.get(metric, metric.replace("_", " "))
            elif key == "idle_by_cause":
                metric = metric.replace("_", " ").capitalize()
            rows.append(Row(metric, unit, a, b, lower, section))
    return rows
