"""Record the validation set's sixteenth part, **blind** (v201-v208, the fourteenth blind part):
one-GPU planted-and-fixed pairs on model families no earlier case used (v01-v200, ../fixes,
../multi_gpu), recorded after v193-v200 had been judged, and kept out of every calibration
(truth.json ``group: "blind14"``). Nobody runs gpuscope's analysis on these cases before the lead
judges them once.

    python record_blind14.py drive --out DIR [--cases v201,v202] [--rounds 3] [--budget-s 500] [--tar T]
    python record_blind14.py one --case v201 --variant planted|fixed --mode time|trace --out DIR
    python record_blind14.py drive --quick --cpu --out DIR --budget-s 900   (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind13.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh process, alternately; 15 warm-up steps (30 for the
compiled v206 and v207, in both variants), then 40 steps in blocks of 5 synchronised at both
ends; ``step_ms_median`` is the median block (per sample for v208). Every case runs on one GPU.

Eight one-GPU cases, written in one module (blind14_a.py), on new families: six one-GPU fixes
meant to gain and two pairs chosen to gain nothing (``dataloader_workers`` and ``pin_memory``,
the thirteenth part's, are not here):
``activation_checkpointing`` on an ESM-2-style protein LM that leaves most of the GPU's memory
free (every layer checkpointed against none); ``optimizer_fused`` on a SAINT-style tabular
transformer of 311 parameter tensors, 240 of them its per-feature MLPs' (``AdamW(foreach=False)``
against ``AdamW(fused=True)``); ``cudnn_benchmark`` on an ENet-style segmenter of dilated,
asymmetric, 2x2-strided and transposed convolutions; ``host_sync`` on an EGNN-style equivariant
graph network whose log reads 21 values a step with ``.item()`` (against the same values kept on
the GPU); ``mixed_precision`` on a DPN-style dual path network in NCHW whose convolutions already
run TF32 (bf16 autocast on top); ``cuda_graphs`` on an eager Decision Transformer-style policy of
~350 small kernels (eager against ``model.compile(mode="reduce-overhead")``); and two pairs chosen
to gain nothing: ``model.compile()`` of an OPT-style decoder whose step is large bf16 matmuls
(v207), and 2 x the batch of a DnCNN-style denoiser whose kernels already fill the GPU (v208).
The cases, their sizes and the two pairs chosen to gain nothing were fixed before the first
device call.

How long (estimated; a case is 7 fresh processes: the trace and 3 rounds of two, ~6-9 s each
eager): v206 ~120 s (its first compiled process compiles cold, ~20-40 s, Inductor's cache after,
~15 s), v207 ~105 s (the same; its 617 M parameters made on the GPU), v201 ~65 s, v203 ~65 s
(benchmark's first step times each shape's algorithms), v202 ~60 s, v205 ~55 s, v204 ~50 s, v208
~50 s: ~570 s, two lanes of one GPU and 16 cores each on an ``nvidia-h200-x2`` lease, the
compiled cases first, ~300 and ~270 s (under the 470 s budget with room for 1.5 x the
estimates):

    bash sample_traces/validation/record_blind14_device.sh lanes TAG 470 \\
        "0/0-15/v206,v201,v203,v208" "1/16-31/v207,v202,v205,v204"

or one lane after the other on one GPU (``record_blind14_device.sh TAG CASES``, the same two
case lists).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind14_a  # noqa: E402
from record_common import merged_part  # noqa: E402

GROUP = "blind14"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v203b": {
        "name": "v203_batch_size",
        "base": "v203",
        "how": "batch_size",
        "planted": "v203's planted variant (batch 12, fp32, cudnn.benchmark off)",
        "fix": "the same at four times the batch (48: gpuscope's code, batch_size=4 * B), per sample",
        "expected_fix": "batch_size",
    },
    "v204c": {
        "name": "v204_cuda_graphs",
        "base": "v204",
        "how": "cuda_graphs",
        "planted": "v204's planted variant (21 .item() reads a step, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
    },
    "v208c": {
        "name": "v208_cuda_graphs",
        "base": "v208",
        "how": "cuda_graphs",
        "planted": "v208's planted variant (batch 64, bf16, channels_last, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
    },
}
"""The first fixes gpuscope named on this part where the planted cause was another's (the
judgement at 523a79f's package: ``batch_size`` first on v203 at 27.4 %, where the planted
cuDNN benchmark gained 3.6; ``cuda_graphs`` first on v204 at 25.8 %, where removing the planted
syncs gained 18.6), timed only (no trace) on the base case's planted variant, variant ``fixed``
applying that fix. v208c: ``cuda_graphs``, first on v208 at 26.9 % once a GPU-bound step of
channels-last BatchNorms was told it (``cuda_graphs.norms_bound``, set on v24, v146, v156, v157
and v179), timed before that rule landed, to judge it on a case it was not set on."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind14_a,), FIRST_FIXES, 14201, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
