"""Record the validation set's twenty-first part, **blind** (v230-v235, the nineteenth blind part):
one-GPU planted-and-fixed pairs on model families no earlier case used (v01-v229, ../fixes,
../multi_gpu), recorded after three estimates were changed on seen pairs (``mixed_precision``'s
top where the code names channels_last, ``pin_memory``'s top, ``cuda_graphs``' top on a step not
compiled yet), so that unseen runs judge them; kept out of every calibration (truth.json ``group:
"blind19"``). Nobody runs gpuscope's analysis on these cases before the lead judges them once.

    python record_blind19.py drive --out DIR [--cases v230,v231] [--rounds 3] [--budget-s 470] [--tar T]
    python record_blind19.py one --case v230 --variant planted|fixed --mode time|trace --out DIR
    python record_blind19.py drive --quick --cpu --out DIR --budget-s 1500   (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind18.py's: per case one profiled trace of the planted
variant, then ``--rounds`` rounds of planted and fixed timed without the profiler, each a fresh
process, alternately; 15 warm-up steps (30 for the compiled cases), then 40 steps in blocks of 5
synchronised at both ends.

Six one-GPU cases, written in one module (blind19_a.py): CUDA graphs on an eager GraphSAGE-style
node classifier and on an eager NCF-style recommender; bf16 with the model in channels_last on a
SqueezeNet-style classifier in fp32 with cuDNN's TF32; ``DataLoader(pin_memory=True)`` for a
QuartzNet-style acoustic model; and two chosen to gain nothing: ``pin_memory=True`` for a GPU-bound
Transformer-XL-style language model, bf16 in channels_last on a host-bound FractalNet-style
network. The cases, their sizes and the pairs chosen to gain nothing were fixed before the first
device call. Two lanes of one GPU and 16 cores on an ``nvidia-h200-x2`` lease:

    bash sample_traces/validation/record_blind19_device.sh lanes TAG 440 "0/0-15/v230,v232,v234" "1/16-31/v231,v233,v235"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind19_a  # noqa: E402
from record_common import first_fix_spec, merged_part  # noqa: E402

GROUP = "blind19"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v232b": first_fix_spec("v232", "cudnn_benchmark", "fp32, cuDNN TF32 on, NCHW"),
    "v235c": first_fix_spec("v235", "cuda_graphs", "fp32, cuDNN TF32 on, NCHW"),
}
"""The first fixes gpuscope named on this part at its one judgement (a5e32cb) where the planted
cause was another's, timed on the base case's planted variant after it: cuDNN's benchmark on v232
(6.0 %) and CUDA graphs on v235 (36.8 %)."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind19_a,), FIRST_FIXES, 19230, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
