"""Write truth.json from what record_validation.py and record_new.py measured (``*/timing.json``
beside this file) and from the FSDP2 prefetch pair of ../multi_gpu (its ``timing.json``).

    python make_truth.py

A case's measured gain is the median over rounds of ``1 - fixed / planted`` (%), pairing the
planted and fixed runs of the same round (per-sample time for ``batch_size`` cases, step time
otherwise). ``held_out`` is fixed by position before any estimate is looked at: every third case
of record_validation.ORDER (``group: "held_out_third"``) and every even position of
record_new.ORDER (``group: "held_out_new"``); the others are ``"calibration"`` (v01-v15) and
``"new"`` (the rest of v16-v28, recorded after the calibration was tuned).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record_new  # noqa: E402
from record_validation import CASES, HELD_OUT, ORDER  # noqa: E402

GROUPS = ("calibration", "held_out_third", "new", "held_out_new")
"""The set's parts, in the order the benchmark prints them."""


def group(case: str) -> str:
    """The part of the set a case belongs to (:data:`GROUPS`)."""
    if case in record_new.CASES:
        return "held_out_new" if case in record_new.HELD_OUT else "new"
    return "held_out_third" if case in HELD_OUT else "calibration"


NULL_PCT = 3.0
"""``null``: the measured median gain is below this (%, absolute): the fix gains nothing."""


def gains(planted: list[float], fixed: list[float]) -> list[float]:
    return [100.0 * (1.0 - f / p) for p, f in zip(planted, fixed, strict=False)]


def single(case: str) -> dict | None:
    files = sorted((HERE / case).glob("timing*.json"))  # timing.json, then timing_run2.json
    if not files:
        return None
    meta = {**CASES, **record_new.CASES}[case]
    per_sample = meta.get("bound") == "per_sample_time"
    key = "per_sample_us" if per_sample else "step_ms_median"
    p, f, runs, traced = [], [], [], []
    for tj in files:  # rounds pair within one recording
        doc = json.loads(tj.read_text())
        these = [r for r in doc["runs"] if r["mode"] == "time"]
        for r in these:
            r["recording"] = tj.name
        runs += these
        traced += [r for r in doc["runs"] if r["mode"] == "trace"]
        for rnd in sorted({r["round"] for r in these}):
            a = [r for r in these if r["round"] == rnd and r["variant"] == "planted"]
            b = [r for r in these if r["round"] == rnd and r["variant"] == "fixed"]
            if a and b:
                p.append(a[0][key])
                f.append(b[0][key])
    if not p:
        return None
    g = gains(p, f)
    trace = sorted(x.name for x in (HERE / case).glob("*_rank*.pt.trace.json.gz"))
    return {
        "case": case,
        **{k: meta[k] for k in ("name", "model", "planted", "fix", "expected_fix")},
        "bound": meta.get("bound", "step_time"),
        "intended_null": bool(meta.get("null")),
        "null": abs(statistics.median(g)) < NULL_PCT,
        "held_out": group(case).startswith("held_out"),
        "group": group(case),
        "gpus": meta.get("gpus", 1),
        "device": runs[0]["device"],
        "torch": runs[0]["torch"],
        "traces": [f"{case}/{t}" for t in trace],
        "timings": {
            "unit": "us per sample"
            if per_sample
            else "ms per step (median of 5-step blocks"
            + (", the slower rank)" if meta.get("gpus", 1) > 1 else ")"),
            "planted": p,
            "fixed": f,
            "planted_step_ms": [r["step_ms_median"] for r in runs if r["variant"] == "planted"],
            "fixed_step_ms": [r["step_ms_median"] for r in runs if r["variant"] == "fixed"],
            "traced_run_step_ms": [r["step_ms_median"] for r in traced],
            "traced_run_untraced_step_ms": [r.get("trace_untraced_step_ms") for r in traced],
        },
        "gain_pct_by_round": g,
        "gain_pct": statistics.median(g),
        "extra": {
            k: v
            for k, v in runs[0].items()
            if k
            not in (
                "case",
                "variant",
                "mode",
                "device",
                "torch",
                "step_ms_median",
                "step_ms_blocks",
                "per_sample_us",
                "setup_and_time_s",
                "round",
                "recording",
                "gpus",
                "ranks",
                "step_ms_median_this_rank",
            )
        },
    }


def fsdp() -> dict | None:
    """The FSDP2 pair of ../multi_gpu: planted = prefetch defeated, fixed = default prefetching."""
    mg = HERE.parent / "multi_gpu"
    tj = mg / "timing.json"
    if not tj.exists():
        return None
    runs = json.loads(tj.read_text())["runs"]

    def by_round(case: str) -> dict[int, float]:
        return {
            r["round"]: r["step_ms_median_max_rank"]
            for r in runs
            if r["case"] == case and r.get("call", 1) == 1
        }

    p, f = by_round("fsdp_noprefetch"), by_round("fsdp_prefetch")
    rounds = sorted(set(p) & set(f))
    if not rounds:
        return None
    pl, fx = [p[r] for r in rounds], [f[r] for r in rounds]
    g = gains(pl, fx)
    first = next(r for r in runs if r["case"] == "fsdp_noprefetch")
    return {
        "case": "v14",
        "name": "fsdp_prefetch",
        "model": f"GPT-style LM under FSDP2 on 2 GPUs ({first['sizes']})",
        "planted": "FSDP2 prefetch defeated: " + first["how"],
        "fix": "FSDP2's default prefetching",
        "expected_fix": "fsdp_prefetch",
        "bound": "step_time",
        "intended_null": False,
        "null": abs(statistics.median(g)) < NULL_PCT,
        "held_out": False,
        "group": "calibration",
        "gpus": 2,
        "device": first["device"],
        "torch": first["torch"],
        "traces": [
            f"../multi_gpu/fsdp_noprefetch/fsdp_noprefetch_rank{r}.pt.trace.json.gz" for r in (0, 1)
        ],
        "timings": {
            "unit": "ms per step (median of per-step CUDA-event times, slower rank)",
            "planted": pl,
            "fixed": fx,
        },
        "gain_pct_by_round": g,
        "gain_pct": statistics.median(g),
        "extra": {"note": "recorded by ../multi_gpu/record_multi_gpu.py (rounds 0-2)"},
    }


def main() -> int:
    cases = [c for c in (single(k) for k in ORDER) if c is not None]
    f = fsdp()
    if f is not None:
        cases.append(f)
    cases += [c for c in (single(k) for k in record_new.ORDER) if c is not None]
    doc = {
        "about": "issue 43's validation set: planted cause, fix, expected gpuscope fix id, "
        "unprofiled timings (fresh processes, interleaved), measured gain. held_out: every "
        "third case in record_validation.ORDER (group held_out_third) and every even position "
        "of record_new.ORDER (group held_out_new), fixed before any estimate was seen.",
        "cases": cases,
    }
    (HERE / "truth.json").write_text(json.dumps(doc, indent=1) + "\n")
    for c in cases:
        print(
            f"{c['case']} {c['name']:26s} gain {c['gain_pct']:6.1f}% "
            f"{[round(x, 1) for x in c['gain_pct_by_round']]} {c['group']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
