"""Record the validation set's fourteenth part, **blind** (v185-v192, the twelfth blind part):
2-GPU planted-and-fixed pairs on model families no earlier case used (v01-v184, ../fixes,
../multi_gpu), recorded after v175-v184 had been judged, and kept out of every calibration
(truth.json ``group: "blind12"``). Nobody runs gpuscope's analysis on these cases before the lead
judges them once.

    python record_blind12.py drive --out DIR [--cases v185,v186] [--rounds 3] [--budget-s 520] [--tar T]
    torchrun --standalone --nproc_per_node 2 record_blind12.py one --case v185 --variant planted|fixed --mode time|trace --out DIR
    python record_blind12.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes, gloo)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
part's cases and builders), as record_blind10.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps``, then ``--rounds`` rounds of planted and fixed
timed without the profiler, each a fresh ``torchrun --nproc_per_node 2`` job, alternately; 15
warm-up steps (30 for the compiled case), then 40 steps in blocks of 5 synchronised at both ends;
``step_ms_median`` is the median block of the slower rank.

Eight 2-GPU cases, written in one module (blind12_a.py): ``fsdp_prefetch`` pairs on a BEiT-style
vision transformer and a BART-style encoder-decoder (planted: every all-gather waits for the
compute before it; fixed: FSDP2's defaults); ``overlap_communication`` on an OverFeat-style CNN
(planted one 4 GB bucket; fixed DDP's defaults); ``load_imbalance`` from host work of rank 0 alone
(per-head attention statistics logged head by head, a Synthesizer-style encoder);
``dataloader_workers`` on rank 1 alone (its log-mel features made in the training process, a
Jasper-style recogniser); ``dtensor_dispatch`` (a GPT-J-style decoder in tensor parallel, eager
against torch.compile); and two pairs chosen to gain nothing: gpuscope's explicit FSDP2 prefetch
on a Qwen-style decoder of long sequences, and gpuscope's DDP buckets on an RCAN-style net of
1.5 M parameters. The cases, their sizes and the pairs chosen to gain nothing were fixed before
the first device call.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import blind12_a  # noqa: E402
from record_common import merged_part  # noqa: E402

GROUP = "blind12"
"""truth.json's group of every case here: kept out of every calibration, judged once."""


def _compiled(base: str, planted: str) -> dict:
    return {
        "name": f"{base}_compile",
        "base": base,
        "how": "compile",
        "planted": f"{base}'s planted variant ({planted}), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
        "gpus": 2,
    }


FIRST_FIXES: dict[str, dict] = {
    "v191c": _compiled("v191", "FSDP2's default prefetching"),
    "v192c": _compiled("v192", "DDP's defaults"),
    "v192b": {
        "name": "v192_batch_size",
        "base": "v192",
        "how": "batch_size",
        "planted": "v192's planted variant (batch 24 a rank, DDP's defaults)",
        "fix": "the same at four times the batch (96 a rank: gpuscope's code, batch_size=4 * B), "
        "per sample",
        "expected_fix": "batch_size",
        "gpus": 2,
        "timing": "batch_size_timing.json",
    },
}
"""The first fixes gpuscope names on this part where the planted cause is another's, timed on
the base case's planted variant after the part was judged (4 x H200, two lanes of 2 GPUs, 5
rounds each, no trace; logs/ff_blind12_ff5a.log, ff_blind12_ff5b.log): at 5433cc1
torch.compile (``kernel_fusion``) led on v191 (11.3 %) and v192 (28.6 %). It led on v185
(30.2 %) and v186 (15.5 %) too, but ``model.compile()`` of their planted variants fails: Dynamo
stops at the plant's own hooks, which gate each all-gather with ``Stream.wait_stream``
(logs/ff_blind12_ffa_compile_fails.log), so those two are not timed. ``v192b``: the first fix
at 87a823a on v192, ``batch_size`` (33.0 % per sample), timed on 2026-11-30 at four times the
batch a rank, as gpuscope's code says, judged per sample."""


CASES, ORDER, BUILDERS, build, main = merged_part((blind12_a,), FIRST_FIXES, 12185, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over this part's cases."""

if __name__ == "__main__":
    raise SystemExit(main())
