"""Record the validation set's fifteenth part, **blind** (v193-v200, the thirteenth blind part):
one-GPU planted-and-fixed pairs on model families no earlier case used (v01-v192, ../fixes,
../multi_gpu), recorded after v185-v192 had been judged, and kept out of every calibration
(truth.json ``group: "blind13"``). Nobody runs gpuscope's analysis on these cases before the lead
judges them once.

    python record_blind13.py drive --out DIR [--cases v193,v194] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind13.py one --case v193 --variant planted|fixed --mode time|trace --out DIR
    python record_blind13.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind11.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh process, alternately; 15 warm-up steps (30 for the
compiled v197 and v198), then 40 steps in blocks of 5 synchronised at both ends;
``step_ms_median`` is the median block. Every case runs on one GPU.

Eight one-GPU cases, written in one module (blind13_a.py), the one-GPU fixes the set holds the
fewest pairs of, on new families: ``dataloader_workers`` on an EVA-02-style ViT-L/14 whose images
get DeiT III's 3-Augment in numpy (planted ``num_workers=0``, fixed 4 workers, pinned in both);
``pin_memory`` on a Demucs-style source separator fed 65.5 MB of waveforms a step by 6 workers
(planted ``pin_memory=False``, fixed ``True``: the loader's pin-memory thread); ``batch_size`` on a
TabNet-style classifier (batch 256 against 1024, per sample); ``kernel_fusion`` on a Gemma
2-style decoder of hand-written norms and soft-caps (eager against ``model.compile()``);
``cuda_graphs`` on a DreamerV3-style RSSM world model compiled in both variants (the default mode
against ``reduce-overhead``); ``mixed_precision`` on a MADE-style density estimator of fp32 matmuls
with TF32 off (bf16 autocast, TF32 still off); and two pairs chosen to gain nothing: DataLoader
workers for a GPT-2-style LM whose samples are slices of a pre-made token array (v194), and one
``loss.item()`` a step of a Whisper-style recogniser whose kernels each outlast their launch
(v200). The cases, their sizes and the two pairs chosen to gain nothing were fixed before the
first device call.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind13_a  # noqa: E402
from record_common import merged_part  # noqa: E402

GROUP = "blind13"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v196c": {
        "name": "v196_cuda_graphs",
        "base": "v196",
        "how": "cuda_graphs",
        "planted": "v196's planted variant (batch 256, fp32, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
    },
    "v200c": {
        "name": "v200_cuda_graphs",
        "base": "v200",
        "how": "cuda_graphs",
        "planted": "v200's planted variant (bf16 autocast, loss.item() once a step, eager)",
        "fix": "the same, model.compile(mode='reduce-overhead') (gpuscope's cuda_graphs code: "
        "forward and backward replayed as CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
    },
    "v200k": {
        "name": "v200_compile",
        "base": "v200",
        "how": "compile",
        "planted": "v200's planted variant (bf16 autocast, loss.item() once a step, eager)",
        "fix": "the same, model.compile() (torch.compile of the model in place, default mode)",
        "expected_fix": "kernel_fusion",
        "timing": "compile_timing.json",
    },
}
"""The first fixes gpuscope named on this part where the planted cause was another's (the
judgement at 93e4eac: ``cuda_graphs`` first on v196 at 77.2 % beside the planted batch's 75.0, and
on v200 at 15.2 % where the planted sync gained 7.8), timed only (no trace) on the base case's
planted variant, variant ``fixed`` applying that fix (2026-11-29, one H200, 3 rounds each,
logs/ff_blind13_ffa.log): v196 86.5 %, v200 44.6 %. v200k is ``model.compile()`` alone on v200
(``kernel_fusion``, second there at 12.9 %; ``compile_timing.json``: 5 rounds,
logs/ff_blind13_ffc.log, after 3 rounds of logs/ff_blind13_ffb.log had scattered over 13.8
points): 16.7 %, so most of what reduce-overhead gains on v200 is the replay, not the fusion. v197's first
at the judgement, ``cuda_graphs`` at 12.5 %, is no longer named first (``kernel_fusion`` leads
there since, timed as the planted fix itself)."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind13_a,), FIRST_FIXES, 13193, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
