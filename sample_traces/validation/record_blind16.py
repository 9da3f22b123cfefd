"""Record the validation set's eighteenth part, **blind** (v215-v222, the sixteenth blind part):
one-GPU planted-and-fixed pairs on model families no earlier case used (v01-v214, ../fixes,
../multi_gpu), recorded after v209-v214 had been judged and after the three re-timings fitted on
seen timings (the replay's and the compiled calls' own host time, what receiving a batch from
workers costs), so that unseen runs judge them; kept out of every calibration (truth.json
``group: "blind16"``). Nobody runs gpuscope's analysis on these cases before the lead judges them
once.

    python record_blind16.py drive --out DIR [--cases v215,v216] [--rounds 3] [--budget-s 470] [--tar T]
    python record_blind16.py one --case v215 --variant planted|fixed --mode time|trace --out DIR
    python record_blind16.py drive --quick --cpu --out DIR --budget-s 1500   (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders): per case one profiled trace of the planted variant through
``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed timed without
the profiler, each a fresh process, alternately; 15 warm-up steps (30 for the compiled cases),
then 40 steps in blocks of 5 synchronised at both ends; ``step_ms_median`` is the median block.

Eight one-GPU cases, written in one module (blind16_a.py): ``cuda_graphs`` on an eager launch-bound
DeepSets-style classifier; ``kernel_fusion`` on a SIREN-style network of sine layers;
``dataloader_workers`` on a Wav2Letter-style speech model whose features are augmented in numpy
(14.3 MB a batch); ``host_sync`` on an APPNP-style graph network (boolean-mask indexing and
``.item()``: 7 syncs a step); ``cudnn_benchmark`` on a C3D-style 3-D CNN;
``activation_checkpointing`` on a CodeGen-style decoder; and two pairs chosen to gain nothing:
workers beside a GPU-bound CSPNet-style CNN whose batches are slices of a pre-made tensor, and a
fused AdamW over an FSRCNN-style network's 23 small tensors beside ~20 ms of convolutions. The
cases, their sizes and the pairs chosen to gain nothing were fixed before the first device call.

How long (estimated): a one-GPU case is 7 fresh processes (the trace and 3 rounds of two), each
~10-20 s (Python and torch, the build, 55 steps, the trace's writing; a compiled one's first
process compiles cold, ~30-60 s), ~90-150 s a case (v201-v208: ~300 s for the four of a lane).
Two lanes of one GPU and 16 cores on an ``nvidia-h200-x2`` lease, the compiled v215 and v216
first, ~400 s each:

    bash sample_traces/validation/record_blind16_device.sh lanes TAG 470 "0/0-15/v215,v217,v219,v221" "1/16-31/v216,v218,v220,v222"

v217 starts 6 DataLoader workers and v218 4: one in each lane, 16 cores a lane hold them.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind16_a  # noqa: E402
from record_common import first_fix_spec, merged_part  # noqa: E402

GROUP = "blind16"
"""truth.json's group of every case here: kept out of every calibration, judged once."""


FIRST_FIXES: dict[str, dict] = {
    "v216m": first_fix_spec("v216", "bf16", "fp32, matmul TF32 off"),
    "v218c": first_fix_spec("v218", "cuda_graphs", "bf16 autocast, channels_last, num_workers=0"),
    "v219m": first_fix_spec("v219", "bf16", "fp32, matmul TF32 off, 7 syncs a step"),
    "v220m": first_fix_spec("v220", "bf16", "fp32, cuDNN TF32 on, cudnn.benchmark off"),
    "v221c": first_fix_spec("v221", "cuda_graphs", "bf16 autocast, every layer checkpointed"),
    "v222b": first_fix_spec("v222", "cudnn_benchmark", "fp32, cuDNN TF32 on, AdamW(foreach=False)"),
}
"""The first fixes gpuscope named on this part where the planted cause is another's (judged at
442e349, `validate_gains_set.py --blind` over v215-v222, the first analysis any of them had):
``mixed_precision`` on v216 (58.8 %), v219 (30.4) and v220 (34.0), ``cuda_graphs`` on v218 (46.4)
and v221 (42.0), ``cudnn_benchmark`` on v222 (16.2); timed on the base case's planted variant
after the judgement."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind16_a,), FIRST_FIXES, 16215, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
