"""Record the validation set's thirteenth part, **blind** (v175-v184, the eleventh blind part):
planted-and-fixed pairs on conv nets of model families no earlier case used (v01-v174, ../fixes,
../multi_gpu), recorded after v160-v174 had been judged, and kept out of every calibration
(truth.json ``group: "blind11"``). Nobody runs gpuscope's analysis on these cases before the lead
judges them once.

    python record_blind11.py drive --out DIR [--cases v175,v176] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind11.py one --case v175 --variant planted|fixed --mode time|trace --out DIR
    python record_blind11.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind10.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh process, alternately; 15 warm-up steps, then 40 steps in
blocks of 5 synchronised at both ends; ``step_ms_median`` is the median block. Every case runs on
one GPU.

Ten one-GPU cases on conv nets, written in two modules (blind11_a.py: v175-v179, blind11_b.py:
v180-v184), merged here in order: six ``cudnn_benchmark`` pairs (planted
``torch.backends.cudnn.benchmark = False``, fixed ``True``, fixed input shapes) over what cuDNN's
heuristics meet differently (a 2-D segmenter's transposed convs, dilated causal Conv1d, Conv3d,
grouped 3x3 convs, bf16 channels_last, dense 9x9/7x7/5x5 kernels at low channel counts); two
``mixed_precision`` pairs on fp32 conv nets with cuDNN TF32 off in both variants (planted fp32,
fixed bf16 autocast, NCHW); and two ``cudnn_benchmark`` pairs chosen to gain nothing (a vision
transformer whose only convolution is its patch embedding; a point-cloud net of only kernel-1
convolutions). The cases, their sizes and the pairs chosen to gain nothing were fixed and
committed before the first device call.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind11_a  # noqa: E402
import blind11_b  # noqa: E402
from record_common import merged_part  # noqa: E402

GROUP = "blind11"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

FIRST_FIXES: dict[str, dict] = {
    "v175c": {
        "name": "v175_bf16",
        "base": "v175",
        "how": "bf16",
        "planted": "v175's planted variant (fp32, cuDNN TF32 on, cudnn.benchmark off)",
        "fix": "the same, each step under bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v176c": {
        "name": "v176_compile",
        "base": "v176",
        "how": "compile",
        "planted": "v176's planted variant (fp32, cudnn.benchmark off), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v177c": {
        "name": "v177_bf16",
        "base": "v177",
        "how": "bf16",
        "planted": "v177's planted variant (fp32, cuDNN TF32 on, cudnn.benchmark off)",
        "fix": "the same, each step under bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v178c": {
        "name": "v178_bf16",
        "base": "v178",
        "how": "bf16",
        "planted": "v178's planted variant (fp32, cuDNN TF32 on, cudnn.benchmark off)",
        "fix": "the same, each step under bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v179c": {
        "name": "v179_compile",
        "base": "v179",
        "how": "compile",
        "planted": "v179's planted variant (bf16 autocast, channels_last, cudnn.benchmark off), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v184c": {
        "name": "v184_bf16",
        "base": "v184",
        "how": "bf16",
        "planted": "v184's planted variant (fp32, cudnn.benchmark off)",
        "fix": "the same, each step under bf16 autocast",
        "expected_fix": "mixed_precision",
    },
}
"""The first fixes gpuscope named on this part where the planted cause was another's (the
judgement at 2e02d2d: ``mixed_precision`` first on v175 at 21.3 %, v177 30.5, v178 8.6, v184
19.5; ``kernel_fusion`` on v176 at 34.1, v179 4.7), timed only (no trace), on the base case's
planted variant: variant ``fixed`` applies that fix. They settle whether the first fix gains what
it says; they are not cases of the part."""


CASES, ORDER, BUILDERS, build, main = merged_part(
    (blind11_a, blind11_b), FIRST_FIXES, 11175, __file__
)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
