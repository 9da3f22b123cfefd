"""CUDA graphs around FSDP2's and DTensor's collectives: the question behind
``cuda_graphs.SHARDED_MAX_BUSY_PCT`` (the eager branch's line for a rank whose step all-gathers
parameters; on one GPU and under DDP it was timed up to 100 % busy, ``cuda_graphs_gate.json``).

    python record_sharded_graphs.py drive --out DIR [--cases v191g,v185g] [--rounds 3] [--no-trace] [--tar T]
    torchrun --standalone --nproc_per_node 2 record_sharded_graphs.py one --case v185g --variant planted|fixed --mode time|trace --out DIR
    python record_sharded_graphs.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes, gloo)

Each case ``<base>g`` is a 2-GPU step of an earlier part (``base``, its ``base_variant``: the
planted one where it compiles, else the fixed one, FSDP2's defaults), built by that part's own
``build`` (its seed, its sizes): variant ``planted`` runs it eager as built, ``fixed`` the same
after ``model.compile(mode="reduce-overhead")`` (``record_common.compile_in_place``: gpuscope's
``cuda_graphs`` code, forward and backward replayed as CUDA graphs, the optimizer step eager).
The driver, the timing and the profiled run are record_new.py's: per case one profiled trace of
the eager step (unless ``--no-trace``: the base case's planted trace is that step already), then
``--rounds`` rounds of eager and reduce-overhead timed without the profiler, each a fresh
``torchrun --nproc_per_node 2`` job, alternately; 30 warm-up steps (the CUDA graphs recorded),
40 steps in blocks of 5; ``step_ms_median`` is the median block of the slower rank. The fixed
runs record what the compiled step ran as: Inductor's counters (``cudagraph_skips``: steps the
CUDA-graph trees ran without graphs), Dynamo's graph breaks and the perf-hint lines that name
CUDA graphs.

The cases were chosen (2026-11-29, before the first device call) as every FSDP2 and
tensor-parallel step of v170-v191 that torch.compile can trace: v191 (FSDP2 defaults, planted),
v185, v186 and v170 (their planted variants gate each all-gather with ``wait_stream``, which
Dynamo stops at: their fixed variants, FSDP2's defaults), v171 and v190 (eager DTensor).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import record_blind10  # noqa: E402
import record_blind12  # noqa: E402
import record_new  # noqa: E402
from record_common import compile_in_place  # noqa: E402

PARTS = {
    "v170": record_blind10,
    "v171": record_blind10,
    "v185": record_blind12,
    "v186": record_blind12,
    "v190": record_blind12,
    "v191": record_blind12,
}
"""Each base case's part (its ``build``, its seed)."""

FIX = (
    "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: forward and "
    "backward replayed as CUDA graphs, the optimizer step eager)"
)


def _case(base: str, variant: str, step: str) -> dict:
    return {
        "name": f"{base}_cuda_graphs",
        "base": base,
        "base_variant": variant,
        "planted": f"{base}'s {variant} variant, eager: {step}",
        "fix": FIX,
        "expected_fix": "cuda_graphs",
        "gpus": 2,
        "compiled": True,  # 30 warm-up steps for both: the CUDA graphs recorded before timing
    }


CASES: dict[str, dict] = {
    "v191g": _case("v191", "planted", "Qwen-style decoder under FSDP2, its default prefetching"),
    "v185g": _case("v185", "fixed", "BEiT-style ViT under FSDP2, its default prefetching"),
    "v186g": _case("v186", "fixed", "BART-style encoder-decoder under FSDP2, default prefetching"),
    "v171g": _case("v171", "planted", "DeBERTa-style encoder in tensor parallel, eager DTensor"),
    "v170g": _case("v170", "fixed", "Falcon-style decoder under FSDP2, its default prefetching"),
    "v190g": _case("v190", "planted", "GPT-J-style decoder in tensor parallel, eager DTensor"),
}
"""The cases in the order they are recorded; ``base_variant``: which of the base case's variants
is the eager step (both variants of a case build it)."""
ORDER = list(CASES)


def build(case: str, variant: str, device: str, rank: int = 0, world: int = 1):
    """(step_fn, samples_per_step, meta, model) of ``case``'s eager step on this rank, compiled
    in place with ``mode="reduce-overhead"`` when ``variant`` is ``fixed``."""
    spec = CASES.get(case)
    if spec is None:
        raise SystemExit(f"unknown case {case}")
    base = spec["base"]
    step, samples, meta, model = PARTS[base].build(base, spec["base_variant"], device, rank, world)
    applied = variant == "fixed"
    if applied:
        import logging

        import torch
        from torch._dynamo.utils import counters

        heard: list[str] = []

        class Heard(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                msg = record.getMessage()
                if "cudagraph" in msg.lower() and len(heard) < 20:
                    heard.append(msg[:300])

        torch._logging.set_logs(perf_hints=True)
        logging.getLogger("torch").addHandler(Heard())
        meta["compiled_as"] = compile_in_place(model, mode="reduce-overhead")
        # the same objects, filled while the step runs: the record is written after the timing
        meta["inductor_counters"] = counters["inductor"]
        meta["graph_breaks"] = counters["graph_break"]
        meta["cudagraph_log"] = heard
    meta.update(
        base_case=base, base_variant=spec["base_variant"], first_fix="cuda_graphs", applied=applied
    )
    return step, samples, meta, model


def main() -> int:
    return int(record_new.main(cases=CASES, build_fn=build, script=__file__))


if __name__ == "__main__":
    raise SystemExit(main())
