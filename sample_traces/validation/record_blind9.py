"""Record the validation set's eleventh part, **blind** (v145-v159, the ninth blind part): planted-
and-fixed pairs on models, sizes and workloads unlike any earlier case (v01-v144, ../fixes,
../multi_gpu), recorded after v130-v144 had been judged and the rules changed on what that
judgement showed (seen-only until this part), and kept out of every calibration (truth.json
``group: "blind9"``). Nobody runs gpuscope's analysis on these cases before the lead judges them
once.

    python record_blind9.py drive --out DIR [--cases v145,v146] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind9.py one --case v145 --variant planted|fixed --mode time|trace --out DIR
    python record_blind9.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind8.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh process, alternately; 15 warm-up steps (30 for the
compiled cases), then 40 steps in blocks of 5 synchronised at both ends; ``step_ms_median`` is the
median block. 2-GPU cases run each as a fresh ``torchrun --nproc_per_node 2`` job;
``step_ms_median`` the slower rank's.

The cases are written in three modules (blind9_a.py: v145-v149, blind9_b.py: v150-v154,
blind9_c.py: v155-v159), merged here in order. What this part asks of the rules changed after the
eighth part's judgement, each once on a model never seen:
- ``kernel_fusion`` by torch.compile of the model alone on a host-bound step whose multi-term loss
  and optimizer stay eager (v145), and on a channels-last convolution net of training BatchNorms
  (v146);
- ``cuda_graphs`` on a launch-bound step captured whole (v154), whose range's top changed;
- two pairs chosen to gain nothing: cuDNN's benchmark on plain 3x3 and 1x1 convolutions (v156) and
  one sync at the end of a GPU-bound step (v157);
- two 2-GPU pairs: a pace-setter, rank 1, whose own DataLoader has no workers (v158), and DDP's
  all-reduce taken out of the backward into one after it (v159).
The cases, their sizes and the pairs chosen to gain nothing were fixed and committed before the
first device call.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind9_a  # noqa: E402
import blind9_b  # noqa: E402
import blind9_c  # noqa: E402
from record_common import merged_part  # noqa: E402

GROUP = "blind9"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v146c": {
        "name": "v146_cudnn_benchmark",
        "base": "v146",
        "how": "cudnn_benchmark",
        "planted": "v146's planted variant (bf16 channels-last, cudnn.benchmark off), eager",
        "fix": "the same, torch.backends.cudnn.benchmark = True before the first step",
        "expected_fix": "cudnn_benchmark",
    },
    "v150c": {
        "name": "v150_compile",
        "base": "v150",
        "how": "compile",
        "planted": "v150's planted variant (6 syncs per step), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v155c": {
        "name": "v155_cuda_graphs",
        "base": "v155",
        "how": "cuda_graphs",
        "planted": "v155's planted variant (batch 8, fp32, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
    },
    "v156c": {
        "name": "v156_compile",
        "base": "v156",
        "how": "compile",
        "planted": "v156's planted variant (bf16 channels-last, cudnn.benchmark off), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
}
"""The first fixes gpuscope named on this part where the planted cause was another's (the judgement
at 9d920f2: ``cudnn_benchmark`` first on v146, ``kernel_fusion`` on v150), timed only (no trace),
on each base case's planted variant: variant ``fixed`` applies that fix. They settle whether the
first fix gains what it says; they are not cases of the part. v155's first, ``cuda_graphs``, was
timed later (2026-11-27, judgement at 5be19a7) as the code gpuscope gives, and so was v156's,
``kernel_fusion`` at 9.5 % on a pair chosen to gain nothing. (v157's,
``batch_size``, is not a fix the recorders apply to another case's builder.)"""


CASES, ORDER, BUILDERS, build, main = merged_part(
    (blind9_a, blind9_b, blind9_c), FIRST_FIXES, 97531, __file__
)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
