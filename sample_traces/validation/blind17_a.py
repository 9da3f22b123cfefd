"""The seventeenth blind part's cases v223-v225 (merged by record_blind17.py): three one-GPU pairs,
each on a model family no earlier case used, chosen to judge on unseen runs the two rules set
after the sixteenth part's judgement: bf16 autocast on plain-fp32 matmuls that are memory-bound at
the fp32 roof, and DataLoader workers where the loading is hidden behind the GPU's queued work.
bf16 autocast on a Soft Actor-Critic (SAC)-style agent whose 8192-wide layers multiply batches of
16 rows (each product bound by its 268 MB weight), chosen to gain nothing (v223); workers beside a
GPU-bound TResNet-style step whose batches are slices of a pre-made tensor, chosen to gain nothing
(v224); and workers for a ReXNet-style CNN whose images are cropped, flipped, jittered and
normalised in numpy per sample, the loading longer than the GPU's step (v225).

Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model); planted and fixed
build the same model from the same seed and differ only in the planted thing. Sizes come from
FLOP, byte and launch counts over one step, worked by hand (nothing here ran on a GPU before the
part was fixed); each builder's comment gives its estimate of one step on an H200 (bf16 matmuls
at ~600 TFLOP/s, fp32 without TF32 at ~45-55, convolutions at ~100-200, memory at ~3.5 TB/s,
~10-25 us of host an eager launch).
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_blind import AugmentedImages  # noqa: E402
from record_common import (  # noqa: E402
    FP32_TF32,
    Kit,
    PremadeImages,
    basic_block,
    channels_last_loss,
    device_batches,
    uint8_batches,
    workers_loader,
)

CASES: dict[str, dict] = {
    "v223": {
        "name": "null_mixed_precision",
        "model": "Soft Actor-Critic (SAC)-style agent (64-D states, 16-D actions; a tanh-Gaussian "
        "actor 64-8192-8192-32 and twin critics 80-8192-8192-1 with ReLU; the critics' target "
        "from the next states' sampled actions without gradients, the actor's loss through the "
        "first critic, one AdamW(fused=True) over the 205 M parameters) on replay batches of 16 "
        f"transitions, {FP32_TF32}: each 8192 x 8192 product multiplies 16 rows by a 268 MB weight",
        "planted": "fp32, matmul TF32 off",
        "fix": "bf16 autocast (gains ~0: each large product is bound by reading its weight, "
        "which autocast casts to bf16 once a step and reads again in the backward; tensor cores "
        "cannot speed up a product bound by its bytes)",
        "expected_fix": "mixed_precision",
        "null": True,
    },
    "v224": {
        "name": "null_dataloader_workers",
        "model": "TResNet-style CNN (a space-to-depth stem 4x4 to 48 ch and a 3x3 conv to 64; "
        "3 basic blocks of 64 and 4 of 128 ch, 6 bottlenecks of 256 to 1024 and 3 of 512 to "
        "2048 ch with squeeze-excite in the first three stages; BatchNorm, LeakyReLU; 100 "
        "classes) on 192x192 images, batch 64, bf16 autocast, channels_last, AdamW(fused=True); "
        "samples sliced from a pre-made uint8 tensor: 7.1 MB a batch",
        "planted": "DataLoader(num_workers=0)",
        "fix": "DataLoader(num_workers=4, persistent_workers=True) (gains ~0: loading is a slice "
        "and a stack of a pre-made tensor, ~1-2 ms, while the GPU still runs the previous "
        "step's ~10-15 ms of queued work)",
        "expected_fix": "dataloader_workers",
        "null": True,
    },
    "v225": {
        "name": "dataloader_workers",
        "model": "ReXNet-style CNN (a 3x3 stem to 32 ch; 16 inverted residual blocks, expansion "
        "6, depthwise 3x3, channels growing linearly from 16 to 180, squeeze-excite from the "
        "fourth, SiLU; a 1x1 to 1280, 100 classes) on 128x128 crops of 144x144 uint8 images, "
        "batch 128, bf16 autocast, channels_last, AdamW(fused=True); each sample cropped, "
        "flipped, jittered and normalised in numpy: 25.2 MB of float32 a batch",
        "planted": "DataLoader(num_workers=0)",
        "fix": "DataLoader(num_workers=6, persistent_workers=True)",
        "expected_fix": "dataloader_workers",
    },
}


@cache
def _se_class() -> Any:
    """The class of :func:`squeeze_excite`'s modules, made once (torch imported here)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class SE(nn.Module):
        def __init__(self, c: int, r: int) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, max(8, c // r), 1), nn.Conv2d(max(8, c // r), c, 1)

        def forward(self, x):
            return x * torch.sigmoid(self.fc2(F.relu(self.fc1(x.mean((2, 3), keepdim=True)))))

    return SE


def squeeze_excite(c: int, r: int) -> Any:
    """Squeeze-excite over ``c`` channels, reduced ``r`` times (at least 8): the spatial mean, a
    1x1 conv down (``fc1``), ReLU, a 1x1 conv up (``fc2``), a sigmoid gate on the input; its
    modules made in that order (v224 with r 4, v225 with r 12)."""
    return _se_class()(c, r)


# ---------------------------------------------------------------- v223: SAC, bf16 (null)


def _sac(k: Kit, fixed: bool, device: str, rank: int):
    # H200, fp32 without TF32: 16 rows by an 8192 x 8192 weight is 2.1 GFLOP against 268 MB
    # (8 FLOP a byte, under the fp32 roof's ~14): memory-bound, ~80 us each at ~3.3 TB/s. A step
    # reads each of the 3 large weights forward (the critics twice: the target and the losses),
    # and again for the data gradients and writes their weight gradients: ~25 such products,
    # ~2-2.5 ms; the fused AdamW over 205 M parameters (~3.3 GB) ~1 ms; ~150 small kernels:
    # GPU-bound, ~3.5-4.5 ms against ~1.5-2.5 ms of host. bf16 autocast casts each weight once
    # (6 bytes an element), then its products read 2 bytes an element where fp32 read 4, and the
    # weight gradients are cast back: ~0 or a loss
    torch, nn, F = k.torch, k.nn, k.F
    sd, ad, width, batch, gamma = (8, 2, 32, 4, 0.99) if k.quick else (64, 16, 8192, 16, 0.99)

    def mlp(i: int, o: int):
        return nn.Sequential(
            nn.Linear(i, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, o)
        )

    class Agent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.actor, self.q1, self.q2 = mlp(sd, 2 * ad), mlp(sd + ad, 1), mlp(sd + ad, 1)

        def act(self, s, noise):
            mu, log_std = self.actor(s).chunk(2, -1)
            u = mu + log_std.clamp(-5, 2).exp() * noise
            logp = (-0.5 * noise.pow(2) - log_std.clamp(-5, 2)).sum(-1)
            a = torch.tanh(u)
            return a, logp - torch.log1p(-a.pow(2) + 1e-6).sum(-1)

        def q(self, s, a):
            sa = torch.cat([s, a], -1)
            return self.q1(sa).squeeze(-1), self.q2(sa).squeeze(-1)

    model = Agent().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(223)
    s, s2 = torch.randn(batch, sd, generator=gen), torch.randn(batch, sd, generator=gen)
    a = torch.tanh(torch.randn(batch, ad, generator=gen))
    r = torch.randn(batch, generator=gen)
    noise = torch.randn(2, batch, ad, generator=gen)
    s, s2, a, r, noise = (t.to(device) for t in (s, s2, a, r, noise))

    def losses():
        with torch.no_grad():
            a2, logp2 = model.act(s2, noise[0])
            t1, t2 = model.q(s2, a2)
            target = r + gamma * (torch.minimum(t1, t2) - 0.2 * logp2)
        q1, q2 = model.q(s, a)
        critic = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        pa, logp = model.act(s, noise[1])
        actor = (0.2 * logp - model.q(s, pa)[0]).mean()
        return critic + actor

    def loss_fn():
        if fixed:
            with k.ac:
                return losses().float()
        return losses()

    k.meta["precision"] = f"bf16 autocast, {FP32_TF32}" if fixed else FP32_TF32
    k.meta["params"] = sum(q.numel() for q in model.parameters())
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v224: TResNet, workers (null)


def _tresnet(k: Kit, fixed: bool, device: str, rank: int):

    # H200, bf16, channels_last, 64 images of 192x192 (48x48 after the space-to-depth stem):
    # ~3 GMAC an image forward (ResNet-50's layout at 48 x 48 after the stem, ~0.5 the stem and
    # the basic blocks), x 64 x 3 x 2 = ~1.2 TFLOP a step at ~120-180 TFLOP/s, ~7-10 ms;
    # BatchNorm, LeakyReLU, squeeze-excite and the adds ~3 GB forward and back in bf16, ~2 ms;
    # ~500 kernels (~5-7 ms of host): GPU-bound, ~9-13 ms. Loading: 64 slices of a pre-made
    # uint8 tensor stacked into 7.1 MB, ~1-2 ms on one core, while the GPU runs the previous
    # step's queued work; workers gain ~0
    torch, nn, F = k.torch, k.nn, k.F
    side, batch, n, workers, classes = (32, 4, 32, 2, 10) if k.quick else (192, 64, 1024, 4, 100)
    w = (48, 8, 16, 32, 64) if k.quick else (48, 64, 128, 256, 512)
    nblocks = (1, 1, 1, 1) if k.quick else (3, 4, 6, 3)

    def cbl(ci: int, co: int, ks: int = 3, s: int = 1):
        return nn.Sequential(
            nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co), nn.LeakyReLU(0.01)
        )

    class Bottleneck(nn.Module):
        def __init__(self, ci: int, c: int, s: int, se: bool) -> None:
            super().__init__()
            co = 4 * c
            self.body = nn.Sequential(
                cbl(ci, c, 1), cbl(c, c, 3, s), *([squeeze_excite(c, 4)] if se else []),
                nn.Conv2d(c, co, 1, bias=False), nn.BatchNorm2d(co),
            )  # fmt: skip
            self.short = (
                nn.Sequential(nn.Conv2d(ci, co, 1, s, bias=False), nn.BatchNorm2d(co))
                if s > 1 or ci != co
                else nn.Identity()
            )

        def forward(self, x):
            return F.leaky_relu(self.body(x) + self.short(x), 0.01)

    class BasicSE(nn.Module):
        def __init__(self, ci: int, co: int, s: int) -> None:
            super().__init__()
            self.block, self.se = basic_block(ci, co, s), squeeze_excite(co, 4)

        def forward(self, x):
            return self.se(self.block(x))

    layers: list = [nn.PixelUnshuffle(4), cbl(w[0], w[1])]
    c = w[1]
    for _ in range(nblocks[0]):
        layers.append(BasicSE(c, w[1], 1))
    for i in range(nblocks[1]):
        layers.append(BasicSE(c, w[2], 2 if i == 0 else 1))
        c = w[2]
    for i in range(nblocks[2]):
        layers.append(Bottleneck(c, w[3], 2 if i == 0 else 1, se=True))
        c = 4 * w[3]
    for i in range(nblocks[3]):
        layers.append(Bottleneck(c, w[4], 2 if i == 0 else 1, se=False))
        c = 4 * w[4]
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)).to(
        device, memory_format=torch.channels_last
    )
    opt = k.adamw(model, fused=k.cuda)
    loader = workers_loader(k, PremadeImages(n, side, classes, 224), batch, fixed, workers)
    loss_fn = channels_last_loss(k, model, uint8_batches(loader, device))
    k.meta["batch_mb"] = round(batch * 3 * side * side / 1e6, 2)
    k.meta["memory_format"] = "channels_last"
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v225: ReXNet, workers


def _rexnet(k: Kit, fixed: bool, device: str, rank: int):

    # H200, bf16, channels_last, 128 crops of 128x128: ReXNet-1.0 is ~0.4 GMAC at 224, ~0.13 at
    # 128: x 128 x 3 x 2 = ~0.1 TFLOP of mostly depthwise and narrow 1x1 convolutions, ~2-3 ms;
    # BatchNorm, SiLU, squeeze-excite over ~4 GB forward and back in bf16, ~2 ms; ~700 kernels
    # (~7-10 ms of host): the host binds, ~8-11 ms. Loading in the main process: 128 crops
    # flipped, jittered and normalised in numpy (~0.15-0.3 ms each) and stacked into 25.2 MB
    # of float32: ~20-40 ms a step, longer than the step's own host and GPU work. Fixed, 6
    # persistent workers make the batches: ~50-70 % off, less what receiving 25.2 MB a step from
    # shared memory costs
    torch, nn = k.torch, k.nn
    hw, crop, stored, batch, workers, classes = (
        (40, 32, 16, 4, 2, 10) if k.quick else (144, 128, 512, 128, 6, 100)
    )
    nb, c0, c1 = (4, 8, 24) if k.quick else (16, 16, 180)
    chans = [round(c0 + (c1 - c0) * i / (nb - 1)) for i in range(nb)]
    strides = [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1] if not k.quick else [1, 2, 1, 2]

    def cbs(ci: int, co: int, ks: int = 1, s: int = 1, groups: int = 1, act: bool = True):
        mods = [nn.Conv2d(ci, co, ks, s, ks // 2, groups=groups, bias=False), nn.BatchNorm2d(co)]
        return nn.Sequential(*mods, nn.SiLU()) if act else nn.Sequential(*mods)

    class LinearBottleneck(nn.Module):  # ReXNet's: expand, depthwise, SE, project, partial add
        def __init__(self, ci: int, co: int, s: int, se: bool) -> None:
            super().__init__()
            h = 6 * ci
            self.body = nn.Sequential(
                cbs(ci, h), cbs(h, h, 3, s, groups=h), *([squeeze_excite(h, 12)] if se else []),
                cbs(h, co, act=False),
            )  # fmt: skip
            self.res, self.ci = s == 1 and co >= ci, ci

        def forward(self, x):
            out = self.body(x)
            if self.res:  # ReXNet adds the input to the first ci channels of the output
                out = torch.cat([out[:, : self.ci] + x, out[:, self.ci :]], 1)
            return out

    blocks = []
    ci = 32
    for i, (co, s) in enumerate(zip(chans, strides, strict=True)):
        blocks.append(LinearBottleneck(ci, co, s, se=i >= 3))
        ci = co
    model = nn.Sequential(
        cbs(3, 32, 3, 2), *blocks, cbs(ci, 1280), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(1280, classes),
    ).to(device, memory_format=torch.channels_last)  # fmt: skip
    opt = k.adamw(model, fused=k.cuda)
    data = AugmentedImages(hw, crop, stored=stored, classes=classes, seed=225)  # record_blind's
    loader = workers_loader(k, data, batch, fixed, workers)
    loss_fn = channels_last_loss(k, model, device_batches(loader, device))
    k.meta["batch_mb"] = round(batch * 3 * crop * crop * 4 / 1e6, 2)
    k.meta["memory_format"] = "channels_last"
    return k.train(opt, loss_fn), batch, model


BUILDERS = {"v223": _sac, "v224": _tresnet, "v225": _rexnet}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
