"""Fixes timed as gpuscope's code gives them where a recipe's fixed variant differs from it: each
case here is a recorded case's planted variant against its fixed variant with what the code adds.

- ``vNNcl`` (v45, v57, v72, v73, v88, v104, v118, v135, v181, v182, v205, v227): bf16 autocast (the
  recipe's fix) with the model's parameters in ``channels_last`` before the first step
  (``model.to(memory_format=torch.channels_last)``, the hint gpuscope's ``mixed_precision`` code
  gives where 2-D convolutions take 5 % of the kernel time): under autocast cuDNN's bf16
  convolutions want NHWC, and an NCHW net pays a layout transpose around each of them (v88's fixed
  trace: 2.6 ms of transposes and casts a step; v72's bf16 convolutions only 1.4x faster than fp32).
- ``vNNpm`` (v33, v44, v59, v74, v91, v106, v112, v138, v151, v165): the batches through ``DataLoader(..., pin_memory=True)`` (no
  workers: each batch pinned in the main thread when taken), as gpuscope's ``pin_memory`` code
  says, where the recipe pinned its pool of batches once before the first step
  (:data:`record_common.PIN_PER_BATCH`).

Nothing here is a case of the truth: ``make_truth.py`` reads none of it. Run with
``device_env.sh``'s ``drive_part advised TAG CASES``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import record_blind  # noqa: E402
import record_blind2  # noqa: E402
import record_blind3  # noqa: E402
import record_blind4  # noqa: E402
import record_blind5  # noqa: E402
import record_blind6  # noqa: E402
import record_blind7  # noqa: E402
import record_blind8  # noqa: E402
import record_blind9  # noqa: E402
import record_blind10  # noqa: E402
import record_blind11  # noqa: E402
import record_blind14  # noqa: E402
import record_blind18  # noqa: E402
import record_common  # noqa: E402
from record_common import Kit, recorder  # noqa: E402

PARTS: dict[str, Any] = {
    "v33": record_blind,
    "v44": record_blind2,
    "v45": record_blind2,
    "v57": record_blind3,
    "v59": record_blind3,
    "v72": record_blind4,
    "v74": record_blind4,
    "v73": record_blind4,
    "v88": record_blind5,
    "v91": record_blind5,
    "v104": record_blind6,
    "v106": record_blind6,
    "v112": record_blind6,
    "v118": record_blind7,
    "v135": record_blind8,
    "v138": record_blind8,
    "v151": record_blind9,
    "v165": record_blind10,
    "v181": record_blind11,
    "v182": record_blind11,
    "v205": record_blind14,
    "v227": record_blind18,
}
"""Each base case's recorder module."""

CHANNELS_LAST = (
    "v45",
    "v57",
    "v72",
    "v73",
    "v88",
    "v104",
    "v118",
    "v135",
    "v181",
    "v182",
    "v205",
    "v227",
)
PIN_PER_BATCH = ("v33", "v44", "v59", "v74", "v91", "v106", "v112", "v138", "v151", "v165")


def base_builder(case: str) -> Any:
    """``case``'s builder over its part's ``build`` (its seed, its sizes), (kit, fixed, device,
    rank) -> (step_fn, samples_per_step, model), the part's meta copied into the kit's."""
    part = PARTS[case]

    def builder(k: Kit, fixed: bool, device: str, rank: int) -> Any:
        step, samples, meta, model = part.build(case, "fixed" if fixed else "planted", device, rank)
        k.meta.update(meta)
        return step, samples, model

    return builder


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


def pinned_per_batch(base: Any) -> Any:
    """``base``'s builder, its fixed variant's batches through ``DataLoader(pin_memory=True)``
    (planted: as recorded)."""

    def builder(k: Kit, fixed: bool, device: str, rank: int) -> Any:
        record_common.PIN_PER_BATCH = fixed
        try:
            step, samples, model = base(k, fixed, device, rank)
        finally:
            record_common.PIN_PER_BATCH = False
        k.meta["pinned_per_batch"] = fixed
        return step, samples, model

    return builder


def _spec(case: str, fix: str) -> dict:
    return {**PARTS[case].CASES[case], "base": case, "fix": fix}


CASES: dict[str, dict] = {
    **{
        f"{c}cl": _spec(c, f"{PARTS[c].CASES[c]['fix']}, the model in channels_last")
        for c in CHANNELS_LAST
    },
    **{
        f"{c}pm": _spec(
            c, "the batches through DataLoader(pin_memory=True), copied with non_blocking=True"
        )
        for c in PIN_PER_BATCH
    },
}

BUILDERS = {
    **{f"{c}cl": channels_last(base_builder(c)) for c in CHANNELS_LAST},
    **{f"{c}pm": pinned_per_batch(base_builder(c)) for c in PIN_PER_BATCH},
}

build, main = recorder(CASES, BUILDERS, 97531, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over these cases."""

if __name__ == "__main__":
    raise SystemExit(main())
