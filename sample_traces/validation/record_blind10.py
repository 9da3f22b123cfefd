"""Record the validation set's twelfth part, **blind** (v160-v174, the tenth blind part): planted-
and-fixed pairs on models, sizes and workloads unlike any earlier case (v01-v159, ../fixes,
../multi_gpu), recorded after v145-v159 had been judged and the rules changed on what that
judgement showed (seen-only until this part), and kept out of every calibration (truth.json
``group: "blind10"``). Nobody runs gpuscope's analysis on these cases before the lead judges them
once.

    python record_blind10.py drive --out DIR [--cases v160,v161] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind10.py one --case v160 --variant planted|fixed --mode time|trace --out DIR
    python record_blind10.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind9.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh process, alternately; 15 warm-up steps (30 for the
compiled cases), then 40 steps in blocks of 5 synchronised at both ends; ``step_ms_median`` is the
median block. 2-GPU cases run each as a fresh ``torchrun --nproc_per_node 2`` job;
``step_ms_median`` the slower rank's.

The cases are written in three modules (blind10_a.py: v160-v164, blind10_b.py: v165-v169,
blind10_c.py: v170-v174), merged here in order. The cases, their sizes and the pairs chosen to
gain nothing were fixed and committed before the first device call.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind10_a  # noqa: E402
import blind10_b  # noqa: E402
import blind10_c  # noqa: E402
from record_common import merged_part  # noqa: E402

GROUP = "blind10"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v168c": {
        "name": "v168_bf16",
        "base": "v168",
        "how": "bf16",
        "planted": "v168's planted variant (fp32, cuDNN TF32 on, matmul TF32 off), eager",
        "fix": "the same, each step under bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v169c": {
        "name": "v169_cuda_graphs",
        "base": "v169",
        "how": "cuda_graphs",
        "planted": "v169's planted variant (batch 2, bf16 autocast, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
    },
}
"""The first fixes gpuscope named on this part where the planted cause was another's (the
judgement at ef9789a: ``mixed_precision`` first on v168 at 26.3 %), timed only (no trace), on
the base case's planted variant: variant ``fixed`` applies that fix. It settles whether the first
fix gains what it says; it is not a case of the part. v170's first, ``kernel_fusion`` at 32.6 %,
was tried as ``model.compile()`` of the FSDP2 root: torch.compile could not trace the planted
variant's prefetch gate (a ``wait_stream`` inside the forward), both fixed runs failed, so it is
not timed here. v169's first, ``cuda_graphs``, was timed later (2026-11-27, judgement at 5be19a7)
as the code gpuscope gives; v171's (a 2-GPU DTensor step) was not. v172's,
``overlap_communication`` at 0.6 %, says nothing to time."""


CASES, ORDER, BUILDERS, build, main = merged_part(
    (blind10_a, blind10_b, blind10_c), FIRST_FIXES, 86420, __file__
)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
