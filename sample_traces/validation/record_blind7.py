"""Record the validation set's ninth part, **blind** (v115-v129, the seventh blind part): planted-
and-fixed pairs on models, sizes and workloads unlike any earlier case (v01-v114, ../fixes,
../multi_gpu), recorded after v100-v114 had been judged and the rules changed on what that
judgement showed (seen-only until this part), and kept out of every calibration (truth.json
``group: "blind7"``). Nobody runs gpuscope's analysis on these cases before the lead judges them
once.

    python record_blind7.py drive --out DIR [--cases v115,v116] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind7.py one --case v115 --variant planted|fixed --mode time|trace --out DIR
    python record_blind7.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind6.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh process, alternately; 15 warm-up steps (30 for the
compiled cases, v115 and v128), then 40 steps in blocks of 5 synchronised at both ends;
``step_ms_median`` is the median block. v115-v128 run on one GPU; v129 on 2 GPUs (each run a
fresh ``torchrun --nproc_per_node 2`` job; ``step_ms_median`` the slower rank's).

The cases are written in three modules (blind7_a.py: v115-v119, blind7_b.py: v120-v124,
blind7_c.py: v125-v129), merged here in order. What this part asks of the rules changed after the
sixth part's judgement, each once on a model never seen:
- bf16 on an NCHW convolution net with TF32 off for matmuls and cuDNN (v118, HRNet), the
  configuration of v72's false promise; and on a matmul transformer with TF32 on (v119);
- ``host_sync`` on a detector whose GPU is busy most of the step (v122), where ``kernel_fusion``'s
  launch-bound re-timing now keeps the GPU's time;
- ``cudnn_benchmark`` on dense convolutions only (v124) and on a step whose convolutions are a
  small slice (v126, a null pair);
- an RNN step: a 4 x batch on a GRU session recommender (v125), and torch.compile on a
  DeepSpeech2-style GRU stack (v128, a null pair: Dynamo leaves nn.GRU eager);
- the pace-setter rank computing more (v129: rank 1's sequences 1.5 x as long), the straggler
  kind ``load_imbalance`` names without host work.
The cases, their sizes and the three chosen to gain nothing were fixed and committed before the
first device call.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind7_a  # noqa: E402
import blind7_b  # noqa: E402
import blind7_c  # noqa: E402
from record_common import merged_part  # noqa: E402

GROUP = "blind7"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v118c": {
        "name": "v118_compile",
        "base": "v118",
        "how": "compile",
        "planted": "v118's planted variant (fp32, TF32 off), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v119c": {
        "name": "v119_compile",
        "base": "v119",
        "how": "compile",
        "planted": "v119's planted variant (fp32 with TF32), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v122c": {
        "name": "v122_compile",
        "base": "v122",
        "how": "compile",
        "planted": "v122's planted variant (3 syncs per step), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v125c": {
        "name": "v125_cuda_graphs",
        "base": "v125",
        "how": "cuda_graphs",
        "planted": "v125's planted variant (batch 16, fp32, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
    },
}
"""The first fixes gpuscope named on this part where the planted cause was another's (the judgement
at 9037c08: ``kernel_fusion`` first on v118, v119 and v122), timed only (no trace), on each base
case's planted variant: variant ``fixed`` applies that fix. They settle whether the first fix
gains what it says; they are not cases of the part. v125's first, ``cuda_graphs``, was timed
later (2026-11-27, judgement at 5be19a7) as the code gpuscope gives,
``model.compile(mode='reduce-overhead')`` with the optimizer step eager. (v127's ``pin_memory``
and v128's ``host_sync`` name no change the recipe exposes: not timed.)"""


CASES, ORDER, BUILDERS, build, main = merged_part(
    (blind7_a, blind7_b, blind7_c), FIRST_FIXES, 24680, __file__
)
"""``CASES``: blind7_a's, blind7_b's and blind7_c's cases, merged in that order; ``ORDER``: their
names in that order; ``BUILDERS``: each case's builder, (kit, fixed, device, rank) -> (step_fn,
samples_per_step, model); ``build``: (step_fn, samples_per_step, meta, model) of one case or first
fix and variant on this rank; ``main``: record_new's driver over this part's cases and first fixes."""

if __name__ == "__main__":
    raise SystemExit(main())
