"""Record the validation set's nineteenth part, **blind** (v223-v225, the seventeenth blind part):
one-GPU planted-and-fixed pairs on model families no earlier case used (v01-v222, ../fixes,
../multi_gpu), recorded after the sixteenth part had been judged and after the two rules set on
its cases (bf16 autocast on plain-fp32 matmuls memory-bound at the fp32 roof; DataLoader workers
where the loading is hidden behind the GPU's queued work), so that unseen runs judge them; kept
out of every calibration (truth.json ``group: "blind17"``). Nobody runs gpuscope's analysis on
these cases before the lead judges them once.

    python record_blind17.py drive --out DIR [--cases v223,v224] [--rounds 3] [--budget-s 470] [--tar T]
    python record_blind17.py one --case v223 --variant planted|fixed --mode time|trace --out DIR
    python record_blind17.py drive --quick --cpu --out DIR --budget-s 1500   (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind16.py's: per case one profiled trace of the planted
variant, then ``--rounds`` rounds of planted and fixed timed without the profiler, each a fresh
process, alternately; 15 warm-up steps, then 40 steps in blocks of 5 synchronised at both ends.

Three one-GPU cases, written in one module (blind17_a.py): bf16 autocast on a SAC-style agent
whose 8192-wide layers multiply batches of 16 rows (chosen to gain nothing); workers beside a
GPU-bound TResNet-style step whose batches are slices of a pre-made tensor (chosen to gain
nothing); workers for a ReXNet-style CNN whose crops are augmented in numpy (25.2 MB of float32 a
batch). The cases, their sizes and the pairs chosen to gain nothing were fixed before the first
device call. Two lanes of one GPU and 16 cores on an ``nvidia-h200-x2`` lease, ~100-150 s a case:

    bash sample_traces/validation/record_blind17_device.sh lanes TAG 400 "0/0-15/v225,v223" "1/16-31/v224"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind17_a  # noqa: E402
from record_common import first_fix_spec, merged_part  # noqa: E402

GROUP = "blind17"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v224c": first_fix_spec("v224", "cuda_graphs", "bf16 autocast, channels_last, num_workers=0"),
}
"""The first fixes gpuscope named on this part at its one judgement (0e544b9) where the planted
cause was another's, timed on the base case's planted variant after it: CUDA graphs on v224
(60.3 %). v223's (CUDA graphs, 8.1 %) is not timed: its step calls the agent's ``act`` and ``q``,
not ``forward``, so ``model.compile()`` would compile nothing there."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind17_a,), FIRST_FIXES, 17223, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
