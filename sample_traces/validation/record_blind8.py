"""Record the validation set's tenth part, **blind** (v130-v144, the eighth blind part): planted-
and-fixed pairs on models, sizes and workloads unlike any earlier case (v01-v129, ../fixes,
../multi_gpu), recorded after v115-v129 had been judged and the rules changed on what that
judgement showed (seen-only until this part), and kept out of every calibration (truth.json
``group: "blind8"``). Nobody runs gpuscope's analysis on these cases before the lead judges them
once.

    python record_blind8.py drive --out DIR [--cases v130,v131] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind8.py one --case v130 --variant planted|fixed --mode time|trace --out DIR
    python record_blind8.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind7.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh process, alternately; 15 warm-up steps (30 for the
compiled cases), then 40 steps in blocks of 5 synchronised at both ends; ``step_ms_median`` is the
median block. v130-v143 run on one GPU; v144 on 2 GPUs (each run a fresh ``torchrun
--nproc_per_node 2`` job; ``step_ms_median`` the slower rank's).

The cases are written in three modules (blind8_a.py: v130-v134, blind8_b.py: v135-v139,
blind8_c.py: v140-v144), merged here in order. What this part asks of the rules changed after the
seventh part's judgement, each once on a model never seen:
- ``kernel_fusion`` on a convolution net whose elementwise work is training BatchNorm and ReLU
  (v131), which the compiler does not fuse away, beside one whose time is in LayerNorm and
  StarReLU chains (v130);
- ``cudnn_benchmark`` on 3-D convolutions (v136);
- ``cuda_graphs`` on a launch-bound step (v141), whose replayed re-timing changed;
- two pairs chosen to gain nothing: a fused optimizer over a handful of large tensors (v142) and a
  2 x batch on a step that already fills the GPU (v143);
- a 2-GPU pair whose pace-setter, rank 1, gets a larger share of each batch (v144).
The cases, their sizes and the pairs chosen to gain nothing were fixed and committed before the
first device call.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind8_a  # noqa: E402
import blind8_b  # noqa: E402
import blind8_c  # noqa: E402
from record_common import merged_part  # noqa: E402

GROUP = "blind8"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v135c": {
        "name": "v135_cudnn_benchmark",
        "base": "v135",
        "how": "cudnn_benchmark",
        "planted": "v135's planted variant (fp32 with TF32, cudnn.benchmark off)",
        "fix": "the same, torch.backends.cudnn.benchmark = True before the first step",
        "expected_fix": "cudnn_benchmark",
    },
    "v136c": {
        "name": "v136_bf16",
        "base": "v136",
        "how": "bf16",
        "planted": "v136's planted variant (fp32 with cuDNN TF32, cudnn.benchmark off)",
        "fix": "the same, each step under torch.autocast(cuda, bfloat16)",
        "expected_fix": "mixed_precision",
    },
    "v137c": {
        "name": "v137_compile",
        "base": "v137",
        "how": "compile",
        "planted": "v137's planted variant (3 syncs per step), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v142c": {
        "name": "v142_cudnn_benchmark",
        "base": "v142",
        "how": "cudnn_benchmark",
        "planted": "v142's planted variant (Adam(foreach=False), cudnn.benchmark off)",
        "fix": "the same, torch.backends.cudnn.benchmark = True before the first step",
        "expected_fix": "cudnn_benchmark",
    },
    "v140c": {
        "name": "v140_cuda_graphs",
        "base": "v140",
        "how": "cuda_graphs",
        "planted": "v140's planted variant (batch 32, fp32, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
    },
    "v132c": {
        "name": "v132_cuda_graphs",
        "base": "v132",
        "how": "cuda_graphs",
        "planted": "v132's planted variant (every block checkpointed, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the checkpointing kept, the optimizer "
        "step eager)",
        "expected_fix": "cuda_graphs",
    },
    "v131b": {
        "name": "v131_batch_size",
        "base": "v131",
        "how": "batch_size",
        "planted": "v131's planted variant (batch 192, bf16 autocast, eager)",
        "fix": "the same at four times the batch (768: gpuscope's code, batch_size=4 * B), per "
        "sample",
        "expected_fix": "batch_size",
    },
}
"""The first fixes gpuscope named on this part where the planted cause was another's (the judgement
at 3ebdcbd: ``cudnn_benchmark`` first on v135 and v142, ``mixed_precision`` on v136,
``kernel_fusion`` on v137), timed only (no trace), on each base case's planted variant: variant
``fixed`` applies that fix. They settle whether the first fix gains what it says; they are not
cases of the part. v140's first, ``cuda_graphs``, was timed later (2026-11-27, judgement at
5be19a7) as the code gpuscope gives, ``model.compile(mode='reduce-overhead')`` with the optimizer
step eager. v131's first, ``batch_size`` (58.3 % per sample at 87a823a), changes the training:
it was timed on 2026-11-30 at four times the batch, as gpuscope's code says (``v131b``, judged
per sample as v203b). v132's first since
b262708, ``cuda_graphs`` with the checkpointing kept, was timed on 2026-11-29 (one H200, 3
rounds, logs/ff_blind8_ffg.log): 73.0 %."""


CASES, ORDER, BUILDERS, build, main = merged_part(
    (blind8_a, blind8_b, blind8_c), FIRST_FIXES, 13579, __file__
)
"""``CASES``: blind8_a's, blind8_b's and blind8_c's cases, merged in that order; ``ORDER``: their
names in that order; ``BUILDERS``: each case's builder, (kit, fixed, device, rank) -> (step_fn,
samples_per_step, model); ``build``: (step_fn, samples_per_step, meta, model) of one case or first
fix and variant on this rank; ``main``: record_new's driver over this part's cases and first fixes."""

if __name__ == "__main__":
    raise SystemExit(main())
