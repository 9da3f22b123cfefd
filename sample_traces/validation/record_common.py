"""Shared start of the validation recorders' builders: the seed, the backend flags every case
starts from, bf16 autocast on CUDA, the plain train step and AdamW (record_blind3.py uses it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Kit:
    """What a builder needs before its case: torch's modules, the size switch and the helpers.

    ``quick``: tiny sizes (the recipe checked on a CPU); ``cuda``: the device is a GPU; ``dt``:
    its autocast device type; ``ac``: a bf16 autocast context (a no-op on the CPU); ``meta``:
    the dict the builder fills for the run's record."""

    torch: Any
    nn: Any
    F: Any
    quick: bool
    cuda: bool
    dt: str
    ac: Any
    meta: dict = field(default_factory=dict)

    def train(self, opt: Any, loss_fn: Any) -> Any:
        """One training step: ``loss_fn()``, zero the gradients, backward, ``opt.step()``."""

        def step() -> None:
            loss = loss_fn()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step

    def adamw(self, model: Any, **kw: Any) -> Any:
        """AdamW at lr 1e-4 over ``model``'s parameters (``kw``: foreach, fused, ...)."""
        return self.torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)


def kit(device: str, seed: int, quick: bool) -> Kit:
    """Seed torch and set the flags every case starts from (TF32 off for matmuls, on for cuDNN;
    ``cudnn.benchmark`` off), on ``device`` ("cuda", "cuda:1", "cpu")."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    cuda = device.startswith("cuda")
    dt = "cuda" if cuda else "cpu"
    ac = torch.autocast(dt, dtype=torch.bfloat16, enabled=cuda)
    return Kit(torch=torch, nn=nn, F=F, quick=quick, cuda=cuda, dt=dt, ac=ac)


def built(builders: dict[str, Any], seed: int, quick: bool) -> Any:
    """A recorder's ``build(case, variant, device, rank=0, world=1)`` over its ``builders`` (case
    -> ``(kit, fixed, device, rank) -> (step_fn, samples_per_step, model)``), every case seeded
    with ``seed``; ``quick``: a callable giving the size switch at call time
    (``record_new.QUICK``, which the driver sets after import)."""

    def build(case: str, variant: str, device: str, rank: int = 0, world: int = 1) -> Any:
        """(step_fn, samples_per_step, meta, model) of one case and variant on this rank."""
        if case not in builders:
            raise SystemExit(f"unknown case {case}")
        k = kit(device, seed=seed, quick=quick())
        step, samples, model = builders[case](k, variant == "fixed", device, rank)
        return step, samples, k.meta, model

    return build
