"""Fixes timed as gpuscope's code gives them where a recipe's fixed variant differs from it: each
case here is a recorded case's planted variant against its fixed variant with what the code adds.

- ``v72cl``, ``v88cl``: bf16 autocast (the recipe's fix, :mod:`record_blind4`'s v72,
  :mod:`record_blind5`'s v88) with the model's parameters in ``channels_last`` before the first
  step (``model.to(memory_format=torch.channels_last)``): under autocast cuDNN's bf16 convolutions
  want NHWC, and an NCHW net pays a layout transpose around each of them (v88's fixed trace:
  2.6 ms of transposes and casts a step; v72's bf16 convolutions only 1.4x faster than fp32).

Nothing here is a case of the truth: ``make_truth.py`` reads none of it. Run with
``device_env.sh``'s ``drive_part advised TAG CASES``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import record_blind4  # noqa: E402
import record_blind5  # noqa: E402
from record_common import Kit, recorder  # noqa: E402


def channels_last(base: Any) -> Any:
    """``base``'s builder, its fixed variant's model in ``channels_last`` before the first step
    (planted: as recorded)."""

    def builder(k: Kit, fixed: bool, device: str, rank: int) -> Any:
        step, samples, model = base(k, fixed, device, rank)
        if fixed:
            model.to(memory_format=k.torch.channels_last)
        k.meta["channels_last"] = fixed
        return step, samples, model

    return builder


CASES: dict[str, dict] = {
    "v72cl": {
        **record_blind4.CASES["v72"],
        "base": "v72",
        "fix": "bf16 autocast (TF32 still off), the model in channels_last",
    },
    "v88cl": {
        **record_blind5.CASES["v88"],
        "base": "v88",
        "fix": "bf16 autocast (TF32 still off), the model in channels_last",
    },
}

BUILDERS = {
    "v72cl": channels_last(record_blind4.BUILDERS["v72"]),
    "v88cl": channels_last(record_blind5.BUILDERS["v88"]),
}

build, main = recorder(CASES, BUILDERS, 97531, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over these cases."""

if __name__ == "__main__":
    raise SystemExit(main())
