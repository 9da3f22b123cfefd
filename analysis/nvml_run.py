"""A run's NVML series: the diagnosis of an NVML-only run (a sampler file or an nvidia-smi log, no
trace), the series thinned for a plot, and the utilization overlaid on a trace run's busy plot.

Per GPU, over the whole series: the Live page's sawtooth diagnosis
(:func:`gpuscope.analysis.live.sawtooth_diagnosis`: idle share, period, duty cycle) plus power,
SM clock and memory. docs/metrics.md, "NVML-only runs". Units: W, MHz, bytes, %, s; sample times
``t_ns`` are absolute (Unix ns) except in :func:`nvml_overlay`, which speaks the rank's trace clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
from gpuscope.analysis.live import sawtooth_diagnosis
from gpuscope.vocabulary.nvml_fields import (
    GPU_UTIL_PCT,
    MEM_TOTAL_BYTES,
    MEM_USED_BYTES,
    POWER_W,
    SM_CLOCK_MHZ,
)

if TYPE_CHECKING:
    from gpuscope.store import Connection

SCHEMA = "gpuscope.analyze-nvml/1"


@dataclass
class NvmlGpu:
    """One GPU of an NVML run. ``idle_share_pct``: the share of the series in which no kernel
    ran, 100 − ``mean_util_pct`` (the time-weighted mean utilization; docs/metrics.md, "Live
    diagnosis"); ``period_s`` / ``duty_cycle_pct``: of a regular busy/idle sawtooth (None without
    one); power (W), SM clock (MHz) and memory (bytes) are mean/max over the samples that report
    them."""

    gpu: int
    name: str | None
    n_samples: int
    duration_s: float
    idle_share_pct: float | None
    period_s: float | None
    duty_cycle_pct: float | None
    n_cycles: int
    mean_util_pct: float | None
    power_mean_w: float | None
    power_max_w: float | None
    sm_clock_mean_mhz: float | None
    sm_clock_max_mhz: float | None
    mem_used_max_bytes: float | None
    mem_total_bytes: float | None
    summary: str

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class NvmlReport:
    """The diagnosis of every GPU of an NVML-only run."""

    run: dict[str, Any]
    gpus: list[NvmlGpu] = field(default_factory=list)

    @property
    def idle_pct(self) -> float | None:
        """The largest idle share among the GPUs (%): what ``check --max-idle-pct`` tests."""
        vals = [g.idle_share_pct for g in self.gpus if g.idle_share_pct is not None]
        return max(vals) if vals else None

    @property
    def busy_pct(self) -> float | None:
        """100 − :attr:`idle_pct`: the least busy GPU's busy share (%)."""
        v = self.idle_pct
        return None if v is None else 100.0 - v

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "run": dict(self.run),
            "nvml": [g.to_json() for g in self.gpus],
        }


def is_nvml_run(con: Connection, run_id: str) -> bool:
    row = con.execute("SELECT kind FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return row is not None and row[0] == "nvml"


def analyze_nvml_run(
    con: Connection, run_id: str, *, busy_threshold_pct: float = 50.0
) -> NvmlReport:
    """Diagnose every GPU of an NVML-only run. Raises ValueError for an unknown run or one
    without utilization samples."""
    row = con.execute("SELECT name, gpu_name, kind FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise ValueError(f"{run_id}: no such run")
    run = {"id": run_id, "name": row[0], "gpu": row[1], "kind": row[2]}
    frame = con.execute(
        """SELECT gpu, gpu_name AS name, t_ns, gpu_util_pct, power_w, sm_clock_mhz,
                  mem_used_bytes, mem_total_bytes
           FROM nvml_samples WHERE run_id = ? ORDER BY gpu, t_ns""",
        [run_id],
    ).df()
    if frame.empty or frame[GPU_UTIL_PCT].isna().all():
        raise ValueError(f"{run_id}: the NVML series has no utilization samples")
    gpus = []
    for gpu, g in frame.groupby("gpu", sort=True):
        name = g["name"].dropna().iloc[0] if g["name"].notna().any() else None
        d = sawtooth_diagnosis(
            g["t_ns"].to_numpy(),
            g[GPU_UTIL_PCT].to_numpy(dtype="float64"),
            busy_threshold_pct=busy_threshold_pct,
            label=f"GPU {gpu}",
        )
        summary = d.summary.replace(f"of the last {_secs(d.window_s)}", "of the series")

        gpus.append(
            NvmlGpu(
                gpu=int(gpu),  # type: ignore[call-overload]
                name=name,
                n_samples=len(g),
                duration_s=d.window_s,
                idle_share_pct=d.idle_share_pct,
                period_s=d.period_s,
                duty_cycle_pct=d.duty_cycle_pct,
                n_cycles=d.n_cycles,
                mean_util_pct=(None if d.idle_share_pct is None else 100.0 - d.idle_share_pct),
                power_mean_w=_stat(g, POWER_W, "mean"),
                power_max_w=_stat(g, POWER_W, "max"),
                sm_clock_mean_mhz=_stat(g, SM_CLOCK_MHZ, "mean"),
                sm_clock_max_mhz=_stat(g, SM_CLOCK_MHZ, "max"),
                mem_used_max_bytes=_stat(g, MEM_USED_BYTES, "max"),
                mem_total_bytes=_stat(g, MEM_TOTAL_BYTES, "max"),
                summary=summary,
            )
        )
    return NvmlReport(run, gpus)


def _stat(g: Any, col: str, fn: str) -> float | None:
    v = g[col].dropna()
    return float(getattr(v, fn)()) if len(v) else None


def _secs(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


def compare_nvml_reports(a: NvmlReport, b: NvmlReport) -> Any:
    """B against A for two NVML-only runs, GPU by GPU (the GPU indices both have): idle share,
    mean utilization, power and SM clock. Returns a :class:`~gpuscope.analysis.compare.Comparison`
    with ``metrics`` only (``gpu<N>.<metric>`` rows)."""
    from gpuscope.analysis.compare import ComparedRun, Comparison, Delta

    gb = {g.gpu: g for g in b.gpus}
    rows = []
    for ga in a.gpus:
        other = gb.get(ga.gpu)
        if other is None:
            continue
        for metric, unit, better in (
            ("idle_share_pct", "%", "lower"),
            ("mean_util_pct", "%", "higher"),
            ("duty_cycle_pct", "%", "higher"),
            ("period_s", "s", None),
            ("power_mean_w", "W", None),
            ("sm_clock_mean_mhz", "MHz", None),
        ):
            va, vb = getattr(ga, metric), getattr(other, metric)
            if va is not None or vb is not None:
                rows.append(Delta(f"gpu{ga.gpu}.{metric}", unit, va, vb, better, None))
    notes = ["NVML-only runs: no trace, so no step time, idle causes, kernels or MFU"]
    if not rows:
        notes.append("the two runs share no GPU index")
    summary = {
        side: ComparedRun(r.run["id"], r.run["name"], r.run.get("gpu"), rank=None, steps=0)
        for side, r in (("a", a), ("b", b))
    }
    return Comparison(
        a=summary["a"],
        b=summary["b"],
        metrics=rows,
        idle_by_cause=[],
        kernel_categories=[],
        top_kernels=[],
        recommendations={"resolved": [], "remaining": [], "new": []},
        notes=notes,
    )


def nvml_series(con: Connection, run_id: str, max_points: int = 4000) -> pd.DataFrame:
    """Every NVML sample of a run, every column of ``nvml_samples``, ordered by ``t_ns`` and
    ``gpu``; a GPU with more than ``max_points`` samples keeps every ``ceil(k / max_points)``-th
    one (evenly thinned, at most ``max_points``)."""
    return con.execute(
        """SELECT * EXCLUDE (rn, k) FROM (
             SELECT *, row_number() OVER (PARTITION BY gpu ORDER BY t_ns) AS rn,
                    count(*) OVER (PARTITION BY gpu) AS k
             FROM nvml_samples WHERE run_id = $run)
           WHERE k <= $m OR rn % CAST(ceil(k / $m) AS BIGINT) = 0 ORDER BY t_ns, gpu""",
        {"run": run_id, "m": max(1, int(max_points))},
    ).df()


def time_offset_ns(con: Connection, run_id: str, rank: int) -> int:
    """The rank's trace clock -> Unix ns: absolute time = trace ns + this (0 when unknown)."""
    row = con.execute(
        "SELECT time_offset_ns FROM ranks WHERE run_id = ? AND rank = ?", [run_id, int(rank)]
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def nvml_overlay(
    con: Connection,
    run_id: str,
    rank: int,
    gpu: int | None,
    start_ns: int,
    end_ns: int,
    n_buckets: int,
) -> pd.DataFrame:
    """NVML ``gpu_util_pct`` of GPU ``gpu`` (not sampled, or None: the run's lowest sampled GPU)
    during ``[start_ns, end_ns]`` of the rank's trace clock, plus the last sample before it (it
    holds until the next one, so a zoom between two samples still has its value). More samples
    than ``n_buckets``: averaged per bucket (``t_ns`` = the bucket's first sample). Columns
    ``t_ns`` (trace ns of the rank), ``gpu_util_pct``; empty without samples."""
    gpus = [
        int(r[0])
        for r in con.execute(
            "SELECT DISTINCT gpu FROM nvml_samples WHERE run_id = ? ORDER BY gpu", [run_id]
        ).fetchall()
    ]
    if not gpus:
        return pd.DataFrame(
            {"t_ns": pd.array([], dtype="int64"), GPU_UTIL_PCT: pd.array([], dtype="float64")}
        )
    offset = time_offset_ns(con, run_id, rank)
    p = {
        "run": run_id,
        "gpu": gpu if gpu in gpus else gpus[0],
        "lo": int(start_ns) + offset,
        "hi": int(end_ns) + offset,
        "n": max(1, int(n_buckets)),
        "off": offset,
    }
    return con.execute(
        """
        WITH prev AS (SELECT max(t_ns) AS t FROM nvml_samples
                      WHERE run_id = $run AND gpu = $gpu AND t_ns < $lo
                        AND gpu_util_pct IS NOT NULL),
             s AS (SELECT t_ns, gpu_util_pct FROM nvml_samples, prev
                   WHERE run_id = $run AND gpu = $gpu AND t_ns >= coalesce(prev.t, $lo)
                     AND t_ns <= $hi AND gpu_util_pct IS NOT NULL),
             c AS (SELECT count(*) AS k FROM s),
             o AS (
                SELECT t_ns, gpu_util_pct FROM s, c WHERE c.k <= $n
                UNION ALL
                SELECT CAST(min(t_ns) AS BIGINT) AS t_ns, avg(gpu_util_pct) AS gpu_util_pct
                FROM s, c WHERE c.k > $n
                -- floor, not //: on a DOUBLE DuckDB's // does not floor, and the sample before
                -- the range (a negative index) must stay a bucket of its own
                GROUP BY CAST(floor(CAST(t_ns - $lo AS DOUBLE) * $n / ($hi - $lo + 1)) AS BIGINT)
             )
        SELECT t_ns - $off AS t_ns, gpu_util_pct FROM o ORDER BY t_ns
        """,
        p,
    ).df()
