"""CUDA graphs on eager launch-bound steps: the question behind ``cuda_graphs.EAGER_MAX_BUSY_PCT``
(once 20 %, set on v93 at 9.6 % busy alone; then 67 %, above seven steps busy 34-66 %; now 101 %,
above steps busy up to 100 %: cuda_graphs_gate.json, this folder's README).

Each case's planted variant (its own recorder's ``build``), timed without the profiler in fresh
processes, the ways in turn each round (``--ways``, the first three by default): ``eager`` as built,
``compile`` (``model.compile()``, gpuscope's ``kernel_fusion`` code) and ``cuda_graphs``
(``model.compile(mode="reduce-overhead")``, gpuscope's ``cuda_graphs`` code: forward and backward
replayed as CUDA graphs, the optimizer step eager). 40 warm-up steps (the compiled variants' graphs
recorded), 40 timed in blocks of 5; the figure is the median block (ms per step), as the
recorders' ``step_ms_median``. A recorder's ballast (``meta["_ballast"]``) is dropped first.

From the repository root on the device, gpuscope not needed:
    python3 sample_traces/validation/time_cuda_graphs_gate.py drive --cases v05,v46 --rounds 3 \
        --out OUT.json [--budget-s 540] [--ways eager,cuda_graphs]
    python3 sample_traces/validation/time_cuda_graphs_gate.py one --case v05 --how eager
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

PART_OF = {
    "v05": "record_validation",
    "v22": "record_new",
    "v35": "record_blind",
    "v46": "record_blind2",
    "v122": "record_blind7",
    "v137": "record_blind8",
    "v150": "record_blind9",
    "v13": "record_validation",
    "v34": "record_blind",
    "v77": "record_blind4",
    "v82": "record_blind4",
    "v98": "record_blind5",
    "v118": "record_blind7",
    "v145": "record_blind9",
    "v146": "record_blind9",
    "v163": "record_blind10",
    "v80": "record_blind4",
    "v94": "record_blind5",
    "v178": "record_blind11",
    "v179": "record_blind11",
    "v02": "record_validation",
    "v06": "record_validation",
    "v18": "record_new",
    "v23": "record_new",
    "v36": "record_blind",
    "v47": "record_blind2",
    "v68": "record_blind3",
    "v59": "record_blind3",
    "v75": "record_blind4",
    "v30": "record_blind",
    "v60": "record_blind3",
    "v12": "record_validation",
    "v03": "record_validation",
    "v07": "record_validation",
    "v29": "record_blind",
    "v38": "record_blind",
    "v51": "record_blind2",
    "v96": "record_blind5",
    "v08": "record_validation",
    "v20": "record_new",
    "v41": "record_blind2",
    "v55": "record_blind3",
    "v56": "record_blind3",
    "v81": "record_blind4",
    "v86": "record_blind5",
    "v10": "record_validation",
    "v58": "record_blind3",
    "v130": "record_blind8",
    "v149": "record_blind9",
    "v167": "record_blind10",
    "v92": "record_blind5",
    "v156": "record_blind9",
    "v157": "record_blind9",
    "v127": "record_blind7",
    "v24": "record_new",
    "v194": "record_blind13",
    "v133": "record_blind8",
    "v236": "record_blind20",
}
"""Each case's recorder: the module whose ``build(case, variant, device)`` makes it (v05-v46:
kernel_fusion pairs; v122, v137, v150: host_sync pairs, a ``.item()`` in the planted step; the
v02-v59: eager cases timed against reduce-overhead alone; v75-v29: short eager steps, 2-13 ms
untraced, not timed with CUDA graphs before; v38, v51, v96: untimed first fixes, bf16 and
cudnn.benchmark; v08-v86: steps checkpointed block by block, timed with reduce-overhead; v10-v167:
cases where reduce-overhead would lead at gpuscope's mid level, each against its own ``fixed``;
v92-v157: where reduce-overhead is the first fix, untimed; v127, v24: null cases, reduce-overhead
first untimed on v127, not named on v24, a channels-last conv net as v156 and v157; v194: a null case where the mid
level's fusion made reduce-overhead the first fix; v133, v236: embedding-heavy recommenders,
timed eager against torch.compile after torch.compile gained 38.4 % on v239's embeddings, above
``kernel_fusion``'s top: compile_embeddings.json)."""

HOWS = (
    "eager",
    "compile",
    "cuda_graphs",
    "cudnn_benchmark",
    "bf16",
    "batch4",
    "batch16",
    "dropped",
    "dropped_cuda_graphs",
    "fixed",
)
"""The ways: as built; torch.compile; reduce-overhead; ``torch.backends.cudnn.benchmark = True``
before the first step; each step (forward, backward, optimizer) under bf16 autocast, as the
recorders' first-fix builders apply gpuscope's ``cudnn_benchmark`` and ``mixed_precision``;
``batch<k>``: the batch × k (gpuscope's ``batch_size``, judged per sample), for the cases of
:data:`BATCH_CASES` only; ``dropped``: the builder's ``fixed`` variant (gpuscope's
``activation_checkpointing``: the checkpointing dropped), and ``dropped_cuda_graphs`` the same with
reduce-overhead (both fixes), for the cases of :data:`CHECKPOINTED_CASES` only; ``fixed``: any
case's ``fixed`` variant as its builder makes it (the planted cause's own fix)."""
BATCH_CASES = frozenset({"v18"})
"""The cases whose builder takes a batch multiple (``record_new.BATCH_MULT``)."""
CHECKPOINTED_CASES = frozenset({"v08", "v20", "v29", "v41", "v55", "v56", "v68", "v81", "v86"})
"""The cases whose planted variant checkpoints its blocks and whose ``fixed`` one does not."""
DEFAULT_WAYS = HOWS[:3]
WARM, STEPS = 40, 40


def one(case: str, how: str, quick: bool, trace: Path | None = None) -> dict:
    """One fresh process's timing of ``case``'s planted variant made ``how``; ``trace``: then
    profile 3 steps of it (after 1 + 2 skipped) into that folder, as the recorders do."""
    import torch

    part = importlib.import_module(PART_OF[case])
    part.QUICK = quick
    record_new = importlib.import_module("record_new")
    record_new.QUICK = quick  # the merged parts read it at build time
    if how.startswith("batch"):
        if case not in BATCH_CASES:
            raise SystemExit(f"{case}: no batch multiple in its builder (BATCH_CASES)")
        record_new.BATCH_MULT = int(how.removeprefix("batch"))
    dropped = how.startswith("dropped")
    if dropped and case not in CHECKPOINTED_CASES:
        raise SystemExit(f"{case}: not a checkpointed case (CHECKPOINTED_CASES)")
    from record_common import compile_in_place
    from record_fixes import timed

    device = "cuda" if torch.cuda.is_available() else "cpu"
    heard: list[str] = []
    if how in ("compile", "cuda_graphs", "dropped_cuda_graphs"):
        import logging

        class Heard(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                msg = record.getMessage()
                if "cudagraph" in msg.lower():
                    heard.append(msg[:300])

        torch._logging.set_logs(perf_hints=True)
        logging.getLogger("torch").addHandler(Heard())
    t0 = time.perf_counter()
    variant = "fixed" if dropped or how == "fixed" else "planted"
    step, samples, meta, model = part.build(case, variant, device)
    meta.pop("_ballast", None)
    compiled_as = None
    if how == "compile":
        compiled_as = compile_in_place(model)
    elif how in ("cuda_graphs", "dropped_cuda_graphs"):
        compiled_as = compile_in_place(model, mode="reduce-overhead")
    elif how == "cudnn_benchmark":
        torch.backends.cudnn.benchmark = True
    elif how == "bf16":
        eager = step

        def step() -> None:
            with torch.autocast(device, dtype=torch.bfloat16):
                eager()

    per = timed(step, device, 3 if quick else WARM, 10 if quick else STEPS)
    res = {
        "case": case,
        "how": how,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "samples_per_step": samples,
        "step_ms_median": statistics.median(per),
        "step_ms_blocks": [round(x, 4) for x in per],
        "setup_and_time_s": time.perf_counter() - t0,
        **(
            {"compiled_as": compiled_as, **compile_counts(heard)}
            if how in ("compile", "cuda_graphs", "dropped_cuda_graphs")
            else {}
        ),
    }
    if trace is not None:
        res["trace"] = profiled(step, device, case, how, statistics.median(per), samples, trace)
    return res


def profiled(step, device: str, case: str, how: str, med: float, samples: int, out: Path) -> str:
    """Three steps of ``step`` under torch.profiler (1 waited, 2 warm-up) exported to
    ``out/<case>_<how>_rank0.pt.trace.json.gz`` with the untraced step (``med``, ms) in its
    metadata, as the recorders write it; returns the file's name."""
    from record_fixes import profiled_steps

    path = out / f"{case}_{how}_rank0.pt.trace.json.gz"
    profiled_steps(
        step, device, path, {"gpuscope.untraced_step_ms": med, "samples_per_step": samples}
    )
    return path.name


def compile_counts(heard: list[str]) -> dict:
    """What the compiled way ran as: graphs Dynamo made, its graph breaks, and the steps the
    CUDA-graph trees skipped with their reasons (the perf-hint log lines)."""
    from torch._dynamo.utils import counters

    return {
        "unique_graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "graph_break_reasons": sorted(counters["graph_break"])[:5],
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
        "cudagraph_log": sorted(set(heard))[:5],
    }


def drive(
    cases: list[str],
    rounds: int,
    out: Path,
    budget_s: float,
    quick: bool,
    ways: tuple[str, ...] = DEFAULT_WAYS,
) -> None:
    """Rounds of every case's three ways, each a fresh process, the ways' order turned each round;
    every result appended to ``out`` (JSON lines) as it comes."""
    t0 = time.time()
    for r in range(rounds):
        for case in cases:
            hows = ways[r % len(ways) :] + ways[: r % len(ways)]
            for how in hows:
                if time.time() - t0 > budget_s:
                    print(f"budget: round {r} {case} {how} not started", flush=True)
                    return
                cmd = [sys.executable, __file__, "one", "--case", case, "--how", how]
                cmd += ["--quick"] if quick else []
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
                except subprocess.TimeoutExpired:
                    print(f"TIMEOUT round {r} {case} {how}", flush=True)
                    continue
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                if p.returncode or not line:
                    print(f"FAILED round {r} {case} {how} rc={p.returncode}\n{p.stderr[-2000:]}")
                    continue
                res = {"round": r, **json.loads(line[-1][7:])}
                with out.open("a") as f:
                    f.write(json.dumps(res) + "\n")
                print(
                    f"[{time.time() - t0:5.0f} s] round {r} {case} {how}: "
                    f"{res['step_ms_median']:.3f} ms ({res['setup_and_time_s']:.0f} s)",
                    flush=True,
                )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("drive", "one"))
    ap.add_argument("--case")
    ap.add_argument("--cases", default=",".join(PART_OF))
    ap.add_argument("--how", choices=HOWS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="cuda_graphs_gate.jsonl")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ways", default=",".join(DEFAULT_WAYS), help="which of the ways to time")
    ap.add_argument("--trace", type=Path, help="one: then profile 3 steps into this folder")
    a = ap.parse_args()
    if a.cmd == "one":
        print("RESULT " + json.dumps(one(a.case, a.how, a.quick, a.trace)), flush=True)
        return 0
    ways = tuple(a.ways.split(","))
    if not set(ways) <= set(HOWS):
        ap.error(f"--ways: each of {', '.join(HOWS)}")
    drive(a.cases.split(","), a.rounds, Path(a.out), a.budget_s, a.quick, ways)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
