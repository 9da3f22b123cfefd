"""Record the validation set's twentieth part, **blind** (v226-v229, the eighteenth blind part):
one-GPU planted-and-fixed pairs on model families no earlier case used (v01-v225, ../fixes,
../multi_gpu) but v228's (v75's capsule network, a new recipe of it), recorded after the seventeenth part had been judged and after the two rules set
since (cuDNN's fallback convolution kernels, which ``cudnn.benchmark`` and bf16 replace; kernel
launches read as waits on the GPU only behind a queue of GPU work), so that unseen runs judge
them; kept out of every calibration (truth.json ``group: "blind18"``). Nobody runs gpuscope's
analysis on these cases before the lead judges them once.

    python record_blind18.py drive --out DIR [--cases v226,v227] [--rounds 3] [--budget-s 470] [--tar T]
    python record_blind18.py one --case v226 --variant planted|fixed --mode time|trace --out DIR
    python record_blind18.py drive --quick --cpu --out DIR --budget-s 1500   (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind17.py's: per case one profiled trace of the planted
variant, then ``--rounds`` rounds of planted and fixed timed without the profiler, each a fresh
process, alternately; 15 warm-up steps (30 for the compiled case), then 40 steps in blocks of 5
synchronised at both ends.

Four one-GPU cases, written in one module (blind18_a.py): ``cudnn.benchmark`` on a SlowFast-style
video network in fp32 with cuDNN's TF32; bf16 autocast on a ConvLSTM-style nowcasting network;
CUDA graphs on an eager capsule network with dynamic routing; and ``cudnn.benchmark`` on a
Stacked-Hourglass-style pose network already in bf16 and channels_last (chosen to gain nothing).
The cases, their sizes and the pair chosen to gain nothing were fixed before the first device
call. Two lanes of one GPU and 16 cores on an ``nvidia-h200-x2`` lease, ~100-150 s a case:

    bash sample_traces/validation/record_blind18_device.sh lanes TAG 400 "0/0-15/v228,v226" "1/16-31/v227,v229"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind18_a  # noqa: E402
from record_common import first_fix_spec, merged_part  # noqa: E402

GROUP = "blind18"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v227k": first_fix_spec("v227", "compile", "fp32, cuDNN TF32 on"),
    "v229c": first_fix_spec("v229", "cuda_graphs", "bf16 autocast, channels_last, benchmark off"),
}
"""The first fixes gpuscope named on this part at its one judgement (5f2e271) where the planted
cause was another's, timed on the base case's planted variant after it: torch.compile on v227
(32.3 %) and CUDA graphs on v229 (71.0 %)."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind18_a,), FIRST_FIXES, 18226, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
