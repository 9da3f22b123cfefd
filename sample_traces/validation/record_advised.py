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
- ``vNNmc`` (v37, v51, v109, v142, v147, v176, v180, v226, v237): a first fix, not the recipe's: the base
  case's planted variant against the same with every step under bf16 autocast and the model in
  channels_last (``channels_last_3d`` for a 3-D convolution net), the code gpuscope's
  ``mixed_precision`` fix gives a convolution net; :data:`FIRST_FIXES` are their specs, which
  ``make_truth.py`` reads (``bf16_channels_last_first_fix_timing.json`` in the base case's
  folder).

- ``vNNnc`` (v232): the base case's planted variant against the same with every step under bf16
  autocast, the model left in NCHW: what bf16 alone gains where the recipe's fix (bf16 with the
  model in channels_last) gained 34.1 % and gpuscope's point, an NCHW model's, said 2.1
  (``CASE/bf16_nchw_timing.json``).

Nothing else here is a case of the truth: ``make_truth.py`` reads none of it. Run with
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
import record_blind19  # noqa: E402
import record_blind20  # noqa: E402
import record_common  # noqa: E402
from record_common import Kit, first_fix_spec, recorder  # noqa: E402

PARTS: dict[str, Any] = {
    "v37": record_blind,
    "v51": record_blind2,
    "v109": record_blind6,
    "v142": record_blind8,
    "v147": record_blind9,
    "v176": record_blind11,
    "v180": record_blind11,
    "v226": record_blind18,
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
    "v232": record_blind19,
    "v237": record_blind20,
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
BF16_CHANNELS_LAST_FIRST = ("v37", "v109", "v147", "v176", "v180", "v226", "v51", "v142", "v237")
"""Planted variants on which bf16 in channels_last was timed as a first fix (one H200): six
``cudnn_benchmark`` pairs and two ``optimizer_fused`` nulls on which a point re-timing the model in
channels_last at the mid level (tried, not adopted: sample_traces/validation/README.md, "bf16 in
channels_last as a first fix") named ``mixed_precision`` first (2026-11-30); v237, the twentieth
blind part's CvT, on which gpuscope named ``mixed_precision`` first at its judgement, its code
telling the model (convolutions 5.2 % of its kernel time) to run in channels_last (2026-12-01)."""

BF16_NCHW = ("v232",)
"""Planted variants timed under bf16 autocast with the model left in NCHW (``vNNnc``)."""

FIRST_FIX_TIMING = "bf16_channels_last_first_fix_timing.json"
"""The file of a ``vNNmc`` timing in its base case's folder (make_truth reads it)."""


def base_builder(case: str) -> Any:
    """``case``'s builder over its part's ``build`` (its seed, its sizes), (kit, fixed, device,
    rank) -> (step_fn, samples_per_step, model), the part's meta copied into the kit's."""
    part = PARTS[case]

    def builder(k: Kit, fixed: bool, device: str, rank: int) -> Any:
        variant = "fixed" if fixed else "planted"
        step, samples, meta, model = part.build(case, variant, device, rank)
        k.meta.update(meta)
        return step, samples, model

    return builder


def bf16_channels_last_first(base: Any) -> Any:
    """``base``'s planted variant, and as fixed the same with the model in channels_last
    (``channels_last_3d`` where it holds a 5-D weight: a 3-D convolution net) before the first step
    and each step under the kit's bf16 autocast (as ``record_common``'s ``bf16`` first fix)."""

    def builder(k: Kit, fixed: bool, device: str, rank: int) -> Any:
        step, samples, model = base(k, False, device, rank)
        if fixed:
            torch = k.torch
            three_d = any(p.dim() == 5 for p in model.parameters())
            model.to(memory_format=torch.channels_last_3d if three_d else torch.channels_last)
            eager = step

            def step() -> None:
                with k.ac:
                    eager()

            k.meta["memory_format"] = "channels_last_3d" if three_d else "channels_last"
        k.meta.update(first_fix="bf16_channels_last", applied=fixed)
        return step, samples, model

    return builder


def bf16_nchw(base: Any) -> Any:
    """``base``'s planted variant, and as fixed the same with each step under the kit's bf16
    autocast, the model's layout as built (NCHW)."""

    def builder(k: Kit, fixed: bool, device: str, rank: int) -> Any:
        step, samples, model = base(k, False, device, rank)
        if fixed:
            eager = step

            def step() -> None:
                with k.ac:
                    eager()

        k.meta.update(bf16_nchw=fixed)
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

FIRST_FIXES: dict[str, dict] = {
    f"{c}mc": {
        **first_fix_spec(c, "bf16", "as recorded"),
        "name": f"{c}_bf16_channels_last",
        "fix": "the same, each step under bf16 autocast with the model in channels_last "
        "(model.to(memory_format=torch.channels_last); channels_last_3d for a 3-D net)",
        "timing": FIRST_FIX_TIMING,
    }
    for c in BF16_CHANNELS_LAST_FIRST
}
"""The ``vNNmc`` first fixes' specs (make_truth's ``FIRST_FIXES``): bf16 in channels_last on each
base's planted variant, read from :data:`FIRST_FIX_TIMING` in the base case's folder."""

CASES.update({k: {**PARTS[v["base"]].CASES[v["base"]], **v} for k, v in FIRST_FIXES.items()})
CASES.update(
    {f"{c}nc": _spec(c, "each step under bf16 autocast, the model in NCHW") for c in BF16_NCHW}
)

BUILDERS = {
    **{f"{c}cl": channels_last(base_builder(c)) for c in CHANNELS_LAST},
    **{f"{c}pm": pinned_per_batch(base_builder(c)) for c in PIN_PER_BATCH},
    **{f"{c}mc": bf16_channels_last_first(base_builder(c)) for c in BF16_CHANNELS_LAST_FIRST},
    **{f"{c}nc": bf16_nchw(base_builder(c)) for c in BF16_NCHW},
}

build, main = recorder(CASES, BUILDERS, 97531, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case and variant on this rank;
``main``: record_new's driver over these cases."""

if __name__ == "__main__":
    raise SystemExit(main())
