"""Record the validation set's twenty-second part, **blind** (v236-v239, the twentieth blind part):
one-GPU planted-and-fixed pairs on model families no earlier case used (v01-v235, ../fixes,
../multi_gpu), recorded after ``optimizer_fused``'s re-timing factors were read off the fused
steps of the looping pairs recorded before (sample_traces/validation/optimizer_fused), so that
unseen runs judge them; kept out of every calibration (truth.json ``group: "blind20"``). Nobody
runs gpuscope's analysis on these cases before the lead judges them once.

    python record_blind20.py drive --out DIR [--cases v236,v237] [--rounds 3] [--budget-s 470] [--tar T]
    python record_blind20.py one --case v236 --variant planted|fixed --mode time|trace --out DIR
    python record_blind20.py drive --quick --cpu --out DIR --budget-s 1500   (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind19.py's: per case one profiled trace of the planted
variant, then ``--rounds`` rounds of planted and fixed timed without the profiler, each a fresh
process, alternately; 15 warm-up steps, then 40 steps in blocks of 5 synchronised at both ends.

Four one-GPU cases, written in one module (blind20_a.py), each the optimizer's per-parameter loop
(``foreach=False``) against ``fused=True``: on a host-bound xDeepFM-style click-through model, a
GPU-bound CvT-style vision transformer in fp32, an NFNet-style network under bf16 autocast (Adam),
and one chosen to gain nothing, a GPU-bound Word2Vec-style skip-gram model of two tensors. The
cases, their sizes and the pair chosen to gain nothing were fixed before the first device call.
One lane of one GPU on an ``nvidia-h200`` lease:

    bash sample_traces/validation/record_blind20_device.sh TAG v236,v237,v238,v239 3 430
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind20_a  # noqa: E402
from record_common import first_fix_spec, merged_part  # noqa: E402

GROUP = "blind20"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v239k": first_fix_spec("v239", "compile", "fp32, AdamW(foreach=False)"),
}
"""The first fixes gpuscope named on this part at its one judgement (a32e846) where the planted
cause was another's, timed on the base case's planted variant after it: torch.compile on v239
(``kernel_fusion``, 15.8 %). Its ``mixed_precision`` on v237 (40.9 %), whose code runs the model
in channels_last, is record_advised.py's ``v237mc``."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind20_a,), FIRST_FIXES, 20236, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
