"""Record the validation set's seventeenth part, **blind** (v209-v214, the fifteenth blind part):
2-GPU planted-and-fixed pairs on model families no earlier case used (v01-v208, ../fixes,
../multi_gpu), recorded after v201-v208 had been judged, and kept out of every calibration
(truth.json ``group: "blind15"``). Nobody runs gpuscope's analysis on these cases before the lead
judges them once.

    python record_blind15.py drive --out DIR [--cases v209,v210] [--rounds 3] [--budget-s 470] [--tar T]
    torchrun --standalone --nproc_per_node 2 record_blind15.py one --case v209 --variant planted|fixed --mode time|trace --out DIR
    python record_blind15.py drive --quick --cpu --out DIR --budget-s 1500   (the recipe on a CPU, tiny sizes, gloo)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind12.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh ``torchrun --nproc_per_node 2`` job (NCCL on the GPUs,
gloo with ``--cpu``), alternately; 15 warm-up steps, then 40 steps in blocks of 5 synchronised at
both ends; ``step_ms_median`` is the median block of the slower rank (the job's step).

Six 2-GPU cases, written in one module (blind15_a.py), on new families: ``load_imbalance`` twice,
from an uneven batch split (rank 1 given 24 images of a ResNeSt-style CNN to rank 0's 16, against
20 and 20) and from host work of rank 0 alone (its training metric, token accuracy and
seqeval-style entity F1, computed in Python after each step for a LayoutLM-style form labeller,
against the same counts kept on the GPU); ``activation_checkpointing`` under FSDP2 on an MPT-style
decoder that leaves most of the GPU's memory free (every block checkpointed against none);
``overlap_communication`` on a Marian-style translation transformer of 209 M parameters (one 4 GB
DDP bucket against DDP's defaults); ``fsdp_prefetch`` on a StableLM-style decoder of 617 M
parameters whose FSDP2 unshards with ``async_op=True`` (every forward all-gather serialized behind
the compute before it) against the same with gpuscope's explicit prefetch code; and a pair chosen
to gain nothing, ``dataloader_workers`` on a GPU-bound MobileViT-style step whose batches are
slices of a pre-made tensor (``num_workers=0`` against 4 persistent workers a rank). No compiled
case. The cases, their sizes and the pair chosen to gain nothing were fixed before the first
device call.

How long (estimated): a 2-GPU case is 7 fresh torchrun jobs (the trace and 3 rounds of two), each
~15-25 s (Python and torch, NCCL's start, the build, 55 steps; the trace's writing), ~150 s a case
(v185-v192: 594 s for the four of a lane, v191 cut short): v209 ~130 s, v210 ~140 s (its pages
made on the host, ~0.3 s a rank), v211 ~150 s (405 M parameters made on the GPUs), v212 ~140 s,
v213 ~160 s (617 M), v214 ~150 s (4 workers a rank started in each job). One lane of both GPUs
and 32 cores on an ``nvidia-h200-x2`` lease, two calls of three cases, ~420 and ~450 s (under
the 470 s budget, within each call's 600 s with room for 1.3 x the estimates):

    bash sample_traces/validation/record_blind15_device.sh lanes TAG 470 "0,1/0-31/v209,v210,v211"
    bash sample_traces/validation/record_blind15_device.sh lanes TAG2 470 "0,1/0-31/v212,v213,v214"

or the same without lanes (``record_blind15_device.sh TAG v209,v210,v211``: all of the lease's
GPUs visible, torchrun taking the first two).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind15_a  # noqa: E402
from record_common import first_fix_spec, merged_part  # noqa: E402

GROUP = "blind15"
"""truth.json's group of every case here: kept out of every calibration, judged once."""


FIRST_FIXES: dict[str, dict] = {
    "v209c": first_fix_spec(
        "v209", "cuda_graphs", "rank 1 given 24 images to rank 0's 16, DDP", gpus=2
    ),
    "v212k": first_fix_spec("v212", "compile", "DDP in one 4 GB bucket", gpus=2),
    "v213k": first_fix_spec("v213", "compile", "FSDP2 unsharding with async_op=True", gpus=2),
    "v214k": first_fix_spec(
        "v214", "compile", "DataLoader(num_workers=0), each batch sliced and stacked", gpus=2
    ),
}
"""The first fixes gpuscope names on this part where the planted cause is another's, timed on the
base case's planted variant after the part was judged (at cd3a0e9, where the planted fix gained
nothing): ``cuda_graphs`` on v209 (54.7 %), ``kernel_fusion`` on v212 (12.7 %) and v213
(26.9 %). Timed on 2026-11-30 (2 x H200, timings only, logs/ff_blind15_ff16a-d.log; v212k and
v213k 5 rounds over two calls, their rounds numbered on in ``first_fix_timing.json``): v209
53.2 %, v212 25.0 %, v213 5.3 %. ``v214k``: ``kernel_fusion``, first on v214 at 10.7 % once the
workers' receiving was counted (314d36f), timed after."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind15_a,), FIRST_FIXES, 15209, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
