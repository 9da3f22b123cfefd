"""The sixteenth blind part's cases v215-v222 (merged by record_blind16.py): eight one-GPU pairs,
each on a model family no earlier case used, chosen to judge on unseen runs what the fifteenth
part's judgement changed (the replay's and the compiled calls' own host time, what receiving a
batch from workers costs) and the fixes they touch. CUDA graphs (``reduce-overhead``) on an eager,
launch-bound DeepSets-style point-set classifier (v215); ``model.compile()`` of a SIREN-style
implicit network whose sine activations are elementwise chains between its matmuls (v216);
DataLoader workers for a Wav2Letter-style speech model whose log-mel features are masked,
warped in gain and normalised in numpy per sample, 14 MB a batch (v217); ``.item()`` reads and
boolean-mask indexing in an APPNP-style graph network's step (v219); cuDNN's benchmark on a
C3D-style network of 3-D convolutions (v220); activation checkpointing dropped from a CodeGen-
style decoder of parallel attention and MLP blocks that leaves most of the GPU's memory free
(v221); and two pairs chosen to gain nothing: workers for a GPU-bound CSPNet-style CNN whose
batches are slices of a pre-made tensor (v218), and a fused AdamW over the 23 small parameter
tensors of an FSRCNN-style super-resolution network whose step is bound by its activations
(v222).

Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model); planted and fixed
build the same model from the same seed and differ only in the planted thing. Sizes come from
FLOP, byte and launch counts over one step, worked by hand (not timed: nothing here ran on a GPU
before the part was fixed). Each builder's comment gives its estimate of one step on an H200
(bf16 matmuls at ~600 TFLOP/s, fp32 without TF32 at ~45-55, TF32 convolutions at ~100-200,
memory at ~3.5 TB/s, ~10-25 us of host an eager launch); the one-GPU cases recorded before ran
up to ~1.5-2 x their estimates, so each is aimed at 3-30 ms.
"""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import (  # noqa: E402
    FP32_TF32,
    Kit,
    PremadeImages,
    channels_last_loss,
    compile_in_place,
    device_batches,
    uint8_batches,
    workers_loader,
)

CASES: dict[str, dict] = {
    "v215": {
        "name": "cuda_graphs",
        "model": "DeepSets-style permutation-equivariant point-set classifier (ModelNet-like "
        "clouds of 256 points in 3-D; 3 equivariant layers d 256, each Lambda(x) - Gamma(mean "
        "of x over the set) and ELU, a mean pool, a rho MLP 256-256-40 with ELU) on 64 clouds, "
        f"{FP32_TF32}, AdamW(fused=True) eager, no torch.compile planted: ~100 kernels a step of a "
        "few microseconds, the step bound by their launches",
        "planted": "eager: each of the step's ~100 small kernels launched from Python",
        "fix": "torch.compile(model, mode='reduce-overhead') (as model.compile(mode="
        "'reduce-overhead'), gpuscope's cuda_graphs code: forward and backward replayed as "
        "CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
        "compiled": True,
    },
    "v216": {
        "name": "kernel_fusion",
        "model": "SIREN-style implicit image network (2-D coordinates to RGB; 5 sine layers "
        "of width 256, each sin(30 (W x + b)) with SIREN's uniform initialisation, a linear "
        f"head) fitted on 131,072 pixel coordinates a step, {FP32_TF32}, AdamW(fused=True): each "
        "layer's matmul followed by a scale and a sine over 33.6 M values, forward and back",
        "planted": "eager",
        "fix": "model.compile(): torch.compile(model) in place; the loss and the optimizer stay "
        "eager",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v217": {
        "name": "dataloader_workers",
        "model": "Wav2Letter-style 1-D convolutional speech recogniser (80 log-mel channels; "
        "a conv 250 k48 stride 2, 7 convs 250 k7, a conv 1000 k32, a conv 1000 k1, a conv to 29 "
        "characters, ReLU; CTC loss) on batches of 32 utterances of 1,400 frames, "
        f"{FP32_TF32}, AdamW(fused=True); features float32 from 256 stored utterances of 1,600 "
        "frames, each sample cropped, masked (2 frequency bands of up to 27 channels, 2 time "
        "spans of up to 100 frames), scaled and normalised per channel in numpy: 14.3 MB a batch",
        "planted": "DataLoader(num_workers=0)",
        "fix": "DataLoader(num_workers=6, persistent_workers=True)",
        "expected_fix": "dataloader_workers",
    },
    "v218": {
        "name": "null_dataloader_workers",
        "model": "CSPNet-style CNN (a 3x3 stem 64-128 ch; 4 cross-stage partial stages of 128-"
        "1024 ch, each a strided 3x3 conv, half its channels through 1/2/4/2 ResNet basic blocks "
        "and the other half around them, concatenated and mixed by a 1x1 conv; BatchNorm, "
        "LeakyReLU; 100 classes) on 128x128 images, batch 128, bf16 autocast, channels_last, "
        "AdamW(fused=True); samples sliced from a pre-made uint8 tensor: 6.3 MB a batch",
        "planted": "DataLoader(num_workers=0)",
        "fix": "DataLoader(num_workers=4, persistent_workers=True) (gains ~0: loading is a slice "
        "and a stack of a pre-made tensor, ~1-2 ms, while the GPU still runs the previous "
        "step's ~15-25 ms of queued work)",
        "expected_fix": "dataloader_workers",
        "null": True,
    },
    "v219": {
        "name": "host_sync",
        "model": "APPNP-style graph network (a 2-layer MLP 512-256-16 on node features, then 10 "
        "steps of personalised-PageRank propagation, alpha 0.1, over a dense normalised "
        "adjacency of 8,192 nodes) for node classification with train and validation masks, "
        f"{FP32_TF32}, AdamW(fused=True)",
        "planted": "loss and accuracy over boolean-mask indexing (out[train_mask], "
        "out[val_mask]: 4 syncs) and 3 .item() reads a step (loss, validation loss, "
        "validation accuracy): 7 syncs",
        "fix": "the masks as float weights (the loss a weighted mean), the statistics summed "
        "on the GPU: no sync",
        "expected_fix": "host_sync",
    },
    "v220": {
        "name": "cudnn_benchmark",
        "model": "C3D-style video classifier (8 3x3x3 convs 64-128-256-256-512-512-512-512 ch "
        "with ReLU and 5 max pools, fc 8192-4096-4096-101) on clips of 16 frames of 112x112, "
        f"batch 8, {FP32_TF32}, AdamW(fused=True); the input size never changes",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v221": {
        "name": "activation_checkpointing",
        "model": "CodeGen-style decoder LM (vocab 50400; 12 layers d 1024, each one LayerNorm "
        "feeding attention and MLP in parallel, 16 heads of 64 with rotary embeddings on the "
        "first 32 dims of each, causal scaled_dot_product_attention, MLP 4096 with tanh-GELU; "
        "the head tied to the embedding) on 8 sequences of 1024 tokens, bf16 autocast, "
        "AdamW(fused=True); ~3-6 GB of the GPU's memory in use: most of its memory free",
        "planted": "torch.utils.checkpoint (use_reentrant=False) on every layer (12 nn.Modules, "
        "the forward run again inside the backward)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v222": {
        "name": "null_optimizer_fused",
        "model": "FSRCNN-style super-resolution network (x3: a 5x5 conv 1-56, a 1x1 shrink to "
        "12, 4 3x3 convs 12 ch, a 1x1 expand to 56, PReLU after each, a 9x9 transposed conv "
        "stride 3 to 1 ch; 23 parameter tensors, 12.5 k parameters) on 512 grey patches of "
        f"128x128 to 384x384, {FP32_TF32}, MSE; every activation 512 x 56 x 128 x 128",
        "planted": "AdamW(foreach=False)",
        "fix": "AdamW(fused=True) (gains ~0: the loop's ~180 launches over 23 small tensors run "
        "while the GPU works through ~20 ms of convolutions)",
        "expected_fix": "optimizer_fused",
        "null": True,
    },
}


# ---------------------------------------------------------------- v215: DeepSets, CUDA graphs


def _deepsets(k: Kit, fixed: bool, device: str, rank: int):
    # H200, fp32 without TF32: 64 x 256 = 16,384 points; each equivariant layer one 256 x 256
    # matmul over the points (2.1 GFLOP) and one over the 64 set means; 3 layers forward and
    # back ~20 GFLOP, ~0.4-0.5 ms; the elementwise ops over 4.2 M values (16.8 MB each) ~0.3 ms:
    # ~0.7-0.9 ms of GPU in ~100 kernels (~13 forward a layer with the mean, the subtraction and
    # ELU, ~25 back; the head, the loss, 3 launches of the fused AdamW) against ~1.5-2.5 ms of
    # host: launch-bound. reduce-overhead replays the forward and the backward as two graphs:
    # ~1 ms, ~40-60 % off
    torch, nn, F = k.torch, k.nn, k.F
    points, d, layers, classes, batch = (16, 16, 2, 5, 4) if k.quick else (256, 256, 3, 40, 64)

    class Equivariant(nn.Module):  # Zaheer et al.'s PermEqui2_mean: Lambda(x) - Gamma(mean x)
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.lam = nn.Linear(ci, co)
            self.gam = nn.Linear(ci, co, bias=False)

        def forward(self, x):
            return self.lam(x) - self.gam(x.mean(1, keepdim=True))

    class DeepSets(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [3] + [d] * layers
            self.phi = nn.ModuleList(Equivariant(a, b) for a, b in pairwise(dims))
            self.rho = nn.Sequential(nn.Linear(d, d), nn.ELU(), nn.Linear(d, classes))

        def forward(self, x):
            for layer in self.phi:
                x = F.elu(layer(x))
            return self.rho(x.mean(1))

    model = DeepSets().to(device)
    opt = k.adamw(model, fused=k.cuda)
    mode = "reduce-overhead"
    if fixed:
        k.meta["compile_how"] = compile_in_place(model, mode=mode)
    gen = torch.Generator().manual_seed(215)
    # clouds: points on a random ellipsoid's surface per class, jittered, centred
    y = torch.randint(0, classes, (batch,), generator=gen)
    axes = 0.5 + torch.rand(classes, 3, generator=gen)
    u = F.normalize(torch.randn(batch, points, 3, generator=gen), dim=-1)
    x = u * axes[y][:, None] + 0.02 * torch.randn(batch, points, 3, generator=gen)
    x, y = (x - x.mean(1, keepdim=True)).to(device), y.to(device)

    def loss_fn():
        return F.cross_entropy(model(x), y)

    k.meta["compiled"] = fixed
    k.meta["compile_mode"] = mode if fixed else "eager"
    k.meta["precision"] = FP32_TF32
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v216: SIREN, torch.compile


def _siren(k: Kit, fixed: bool, device: str, rank: int):
    # H200, fp32 without TF32: 131,072 coordinates x 4 hidden 256 x 256 matmuls (8.6 GFLOP each
    # forward) and the first and last: ~36 GFLOP forward, ~105 a step, ~2-2.5 ms; each sine
    # layer's scale and sine over 33.6 M values (134 MB each read and written) forward, and
    # back the cosine, two products and the scale: ~0.8 GB a layer, ~4 GB a step, ~1.2-1.5 ms;
    # ~45 kernels (~1 ms of host): GPU-bound, ~3.5-4 ms. Compiled, each layer's scale and sine
    # are one kernel forward, and the cosine, the products and the scale one backward (the
    # matmuls stay cuBLAS's): ~0.6-0.8 ms less traffic, ~15-20 % off
    torch, nn = k.torch, k.nn
    width, depth, omega, side = (16, 2, 30.0, 16) if k.quick else (256, 5, 30.0, 363)
    n = side * side if k.quick else 131072

    class Sine(nn.Module):  # SIREN's layer: sin(omega (W x + b)), its uniform initialisation
        def __init__(self, ci: int, co: int, first: bool) -> None:
            super().__init__()
            self.lin = nn.Linear(ci, co)
            bound = 1 / ci if first else (6 / ci) ** 0.5 / omega
            with torch.no_grad():
                self.lin.weight.uniform_(-bound, bound)

        def forward(self, x):
            return torch.sin(omega * self.lin(x))

    class Siren(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [2] + [width] * depth
            self.body = nn.Sequential(
                *(Sine(a, b, i == 0) for i, (a, b) in enumerate(pairwise(dims)))
            )
            self.head = nn.Linear(width, 3)

        def forward(self, x):
            return self.head(self.body(x))

    model = Siren().to(device)
    opt = k.adamw(model, fused=k.cuda)
    if fixed:
        k.meta["compile_how"] = compile_in_place(model)
    gen = torch.Generator().manual_seed(216)
    # a fixed random subset of a side x side image's pixels: coordinates in [-1, 1], and a
    # smooth colour field of them (sums of a few sinusoids) as the target
    idx = torch.randperm(side * side, generator=gen)[:n]
    grid = torch.stack(
        torch.meshgrid(torch.linspace(-1, 1, side), torch.linspace(-1, 1, side), indexing="ij"), -1
    ).reshape(-1, 2)[idx]
    freq = torch.randn(2, 3, generator=gen) * 4
    target = torch.sin(grid @ freq) * 0.5 + torch.cos(3 * grid[:, :1]) * 0.3
    coords, target = grid.to(device), target.to(device)

    def loss_fn():
        return (model(coords) - target).pow(2).mean()

    k.meta["compiled"] = fixed
    k.meta["sine_layers"] = depth
    k.meta["coordinates"] = n
    k.meta["precision"] = FP32_TF32
    return k.train(opt, loss_fn), n, model


# ---------------------------------------------------------------- v217: Wav2Letter, workers


class MaskedLogMels:
    """v217's dataset: float32 log-mel features of ``stored`` utterances (``mels`` x ``frames``,
    drawn once), each sample a random crop of ``crop`` frames, 2 frequency bands of up to
    ``fmask`` channels and 2 time spans of up to ``tmask`` frames set to the mean, a random gain,
    then normalised per channel, all in numpy; its label a random character sequence of
    ``label_len`` (1-28)."""

    def __init__(
        self,
        stored: int,
        mels: int,
        frames: int,
        crop: int,
        label_len: int,
        fmask: int = 27,
        tmask: int = 100,
        length: int = 1_000_000,
    ) -> None:
        import numpy as np

        rng = np.random.default_rng(217)
        base = rng.standard_normal((stored, mels, frames), dtype=np.float32)
        self.feats = np.cumsum(base, axis=2) * 0.05  # smooth in time, as log-mels are
        self.labels = rng.integers(1, 29, (stored, label_len))
        self.crop, self.fmask, self.tmask, self.length = crop, fmask, tmask, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        k = i % len(self.feats)
        mels, frames = self.feats.shape[1:]
        start = int(rng.integers(0, frames - self.crop + 1))
        x = self.feats[k, :, start : start + self.crop].copy()
        fill = x.mean()
        for _ in range(2):  # SpecAugment-style masks
            w = int(rng.integers(0, self.fmask + 1))
            f0 = int(rng.integers(0, mels - w + 1))
            x[f0 : f0 + w] = fill
            w = int(rng.integers(0, self.tmask + 1))
            t0 = int(rng.integers(0, self.crop - w + 1))
            x[:, t0 : t0 + w] = fill
        x = x * np.float32(rng.uniform(0.8, 1.2))
        x = (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-5)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.from_numpy(
            self.labels[k]
        )


def _wav2letter(k: Kit, fixed: bool, device: str, rank: int):

    # H200, cuDNN TF32: per utterance 700 frames after the stride-2 first conv; the 7 convs 250
    # k7 0.6 GFLOP each, the conv 1000 k32 11.2, the conv 1000 k1 1.4, the first 1.3: ~18.5
    # GFLOP forward, x 32 x 3 = 1.8 TFLOP a step at ~150-250 TFLOP/s, ~8-12 ms; ReLUs, the log-
    # softmax and CTC ~0.5 ms; ~60 kernels: GPU ~9-13 ms. Loading in the main process: 32
    # samples of 80 x 1400 float32 cropped, masked, scaled and normalised (~10 numpy passes over
    # 448 KB, ~0.3-0.6 ms a sample) and stacked: ~10-20 ms a step, the GPU idle meanwhile once
    # the previous step's work is done. Fixed, 6 persistent workers make the batches: ~30-50 %
    # off, less what receiving 14.3 MB a step from shared memory costs
    torch, nn, F = k.torch, k.nn, k.F
    mels, frames, crop, stored, batch, width, wide, label_len, workers, fmask, tmask = (
        (16, 120, 100, 16, 4, 16, 32, 10, 2, 4, 10)
        if k.quick
        else (80, 1600, 1400, 256, 32, 250, 1000, 100, 6, 27, 100)
    )
    layers = [nn.Conv1d(mels, width, 48, 2, 23), nn.ReLU()]
    for _ in range(7):
        layers += [nn.Conv1d(width, width, 7, 1, 3), nn.ReLU()]
    layers += [nn.Conv1d(width, wide, 32, 1, 16), nn.ReLU(), nn.Conv1d(wide, wide, 1), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Conv1d(wide, 29, 1)).to(device)
    opt = k.adamw(model, fused=k.cuda)
    data = MaskedLogMels(stored, mels, frames, crop, label_len, fmask, tmask)
    loader = workers_loader(k, data, batch, fixed, workers)
    next_batch = device_batches(loader, device)

    def loss_fn():
        x, y = next_batch()
        logp = F.log_softmax(model(x), dim=1).permute(2, 0, 1)  # (T, N, C)
        t_in = torch.full((x.shape[0],), logp.shape[0], dtype=torch.long)
        t_out = torch.full((x.shape[0],), y.shape[1], dtype=torch.long)
        return F.ctc_loss(logp, y, t_in, t_out, blank=0)

    k.meta["batch_mb"] = round(batch * mels * crop * 4 / 1e6, 2)
    k.meta["precision"] = FP32_TF32
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v218: CSPNet, workers (null)


def _cspnet(k: Kit, fixed: bool, device: str, rank: int):

    # H200, bf16, channels_last, 128 images of 128x128: the stem at 128 and 64 (64, 128 ch),
    # stages at 32/16/8/4 of 128-256-512-1024 ch with 1/2/4/2 basic blocks on half the
    # channels: ~1.5 GMAC an image forward (0.33 the stem, ~0.26 / 0.25 / 0.40 / 0.25 the
    # stages), x 128 x 3 x 2 = ~1.2 TFLOP a step at ~100-150 TFLOP/s, ~8-12 ms; BatchNorm,
    # LeakyReLU, the concatenations and adds over ~2 GB forward, ~5 back in bf16, ~2 ms; ~400
    # kernels (~4-6 ms of host): GPU-bound, ~10-14 ms, the host ahead.
    # Loading: 128 slices of a pre-made uint8 tensor stacked into 6.3 MB, ~1-2 ms on one core,
    # while the GPU still runs the previous step's queued work; workers gain ~0
    torch, nn = k.torch, k.nn
    from record_common import basic_block

    side, batch, n, workers, classes = (32, 4, 32, 2, 10) if k.quick else (128, 128, 2048, 4, 100)
    widths, blocks = (
        ((8, 16, 16, 32), (1, 1, 1, 1)) if k.quick else ((128, 256, 512, 1024), (1, 2, 4, 2))
    )

    def cbl(ci: int, co: int, ks: int = 3, s: int = 1):
        return nn.Sequential(
            nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co), nn.LeakyReLU(0.1)
        )

    class CSPStage(nn.Module):  # down, split in two halves, blocks on one, concat, 1x1 mix
        def __init__(self, ci: int, co: int, nb: int) -> None:
            super().__init__()
            self.down = cbl(ci, co, 3, 2)
            self.split_a, self.split_b = cbl(co, co // 2, 1), cbl(co, co // 2, 1)
            self.blocks = nn.Sequential(*[basic_block(co // 2, co // 2, 1) for _ in range(nb)])
            self.mix = cbl(co, co, 1)

        def forward(self, x):
            x = self.down(x)
            return self.mix(torch.cat([self.blocks(self.split_a(x)), self.split_b(x)], 1))

    stem = widths[0] // 2
    chans = [stem * 2, *widths]
    model = nn.Sequential(
        cbl(3, stem),
        cbl(stem, stem * 2, 3, 2),
        *(CSPStage(a, b, nb) for a, b, nb in zip(chans, chans[1:], blocks, strict=False)),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(widths[-1], classes),
    ).to(device, memory_format=torch.channels_last)
    opt = k.adamw(model, fused=k.cuda)
    loader = workers_loader(k, PremadeImages(n, side, classes, 218), batch, fixed, workers)
    loss_fn = channels_last_loss(k, model, uint8_batches(loader, device))
    k.meta["batch_mb"] = round(batch * 3 * side * side / 1e6, 2)
    k.meta["memory_format"] = "channels_last"
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v219: APPNP, host syncs


def _appnp(k: Kit, fixed: bool, device: str, rank: int):
    # H200, fp32 without TF32: the MLP on 8,192 nodes (512-256-16: 2.2 GFLOP forward, ~7 a
    # step, ~0.15 ms); 10 propagation steps, each the 8,192 x 8,192 adjacency (268 MB) times
    # 16 columns: memory-bound, ~80 us each, forward and back ~1.6 ms; ~120 kernels (~1.5-3 ms
    # of host): ~2-3 ms, GPU and host about even. Planted, the 4 boolean-mask indexings (a
    # nonzero each) and 3 .item() reads drain the queue 7 times; the kernels after each start
    # only as the host launches them, and the host can no longer run ahead: ~7 x 50-100 us and
    # the lost overlap, ~15-30 % off
    torch, nn, F = k.torch, k.nn, k.F
    nodes, feats, hidden, classes, steps, alpha = (
        (64, 16, 16, 4, 3, 0.1) if k.quick else (8192, 512, 256, 16, 10, 0.1)
    )

    class APPNP(nn.Module):  # predict, then propagate: H <- (1 - a) A H + a H0, K times
        def __init__(self) -> None:
            super().__init__()
            self.mlp = nn.Sequential(
                nn.Linear(feats, hidden), nn.ReLU(), nn.Linear(hidden, classes)
            )

        def forward(self, x, adj):
            h0 = self.mlp(x)
            h = h0
            for _ in range(steps):
                h = (1 - alpha) * (adj @ h) + alpha * h0
            return h

    gen = torch.Generator().manual_seed(219)
    y = torch.randint(0, classes, (nodes,), generator=gen)
    # a community graph: edges likelier within a class, self-loops, symmetric normalisation
    same = (y[:, None] == y[None, :]).float()
    adj = (torch.rand(nodes, nodes, generator=gen) < (0.004 + 0.006 * same)).float()
    adj = ((adj + adj.T) > 0).float() + torch.eye(nodes)
    dinv = adj.sum(1).rsqrt()
    adj = dinv[:, None] * adj * dinv[None, :]
    x = torch.randn(nodes, feats, generator=gen) + F.one_hot(y, feats).float() * 0.5
    split = torch.rand(nodes, generator=gen)
    train_mask, val_mask = split < 0.3, (split >= 0.3) & (split < 0.5)
    model = APPNP().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x, adj, y, train_mask, val_mask = (t.to(device) for t in (x, adj, y, train_mask, val_mask))
    w_train, w_val = train_mask.float(), val_mask.float()
    n_train, n_val = float(train_mask.sum()), float(val_mask.sum())  # once, on the host
    seen: list[float] = []
    stats = torch.zeros(3, device=device)

    def step() -> None:
        out = model(x, adj)
        if fixed:  # the masks as weights, the statistics kept on the GPU
            each = F.cross_entropy(out, y, reduction="none")
            loss = (each * w_train).sum() / n_train
            with torch.no_grad():
                val_loss = (each * w_val).sum() / n_val
                acc = ((out.argmax(1) == y).float() * w_val).sum() / n_val
                stats.add_(torch.stack([loss.detach(), val_loss, acc]))
        else:  # boolean-mask indexing (a nonzero each) and the log read each step
            loss = F.cross_entropy(out[train_mask], y[train_mask])
            with torch.no_grad():
                ov, yv = out[val_mask], y[val_mask]
                val_loss = F.cross_entropy(ov, yv)
                acc = (ov.argmax(1) == yv).float().mean()
            seen.extend([loss.item(), val_loss.item(), acc.item()])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    k.meta["syncs_per_step"] = 0 if fixed else 7
    k.meta["precision"] = FP32_TF32
    return step, nodes, model


# ---------------------------------------------------------------- v220: C3D, cuDNN benchmark


def _c3d(k: Kit, fixed: bool, device: str, rank: int):
    # H200, cuDNN TF32: C3D's ~38.5 GFLOP a clip forward (at 16 x 112 x 112), x 8 x 3 = 0.92
    # TFLOP a step of 3x3x3 convolutions, ~5-9 ms under the heuristics' picks at ~100-200
    # TFLOP/s; the fc layers (78 M parameters, 8 rows) ~0.3 ms; the pools and ReLUs over ~3 GB
    # forward and back, ~1 ms; the fused AdamW over 78 M parameters (~1.3 GB read and written)
    # ~0.5 ms; ~70 kernels: GPU-bound, ~7-11 ms. cudnn.benchmark times the algorithms of each of
    # the 8 conv shapes (forward, data and weight gradients) at the first step, then uses the
    # fastest: 3-D convolutions are where the heuristics miss most, ~10-30 % off
    torch, nn, F = k.torch, k.nn, k.F
    k.torch.backends.cudnn.benchmark = fixed
    frames, side, batch, chans, fc, classes = (
        (16, 16, 2, (4, 8, 8, 8, 8, 8, 8, 8), 32, 5)
        if k.quick
        else (16, 112, 8, (64, 128, 256, 256, 512, 512, 512, 512), 4096, 101)
    )
    pools = {0: (1, 2, 2), 1: (2, 2, 2), 3: (2, 2, 2), 5: (2, 2, 2), 7: (2, 2, 2)}
    layers: list = []
    ci = 3
    for i, co in enumerate(chans):
        layers += [nn.Conv3d(ci, co, 3, 1, 1), nn.ReLU()]
        if i in pools:
            pad = (0, 1, 1) if i == 7 else 0
            layers.append(nn.MaxPool3d(pools[i], pools[i], padding=pad))
        ci = co
    feat = nn.Sequential(*layers)
    depth, hw = frames, side  # through the pools (the convs keep the size): pool5 pads h and w
    for i, (kd, kh, _) in sorted(pools.items()):
        pad = 1 if i == 7 else 0
        depth, hw = (depth - kd) // kd + 1, (hw + 2 * pad - kh) // kh + 1
    flat = chans[-1] * depth * hw * hw
    model = nn.Sequential(
        feat,
        nn.Flatten(),
        nn.Linear(flat, fc),
        nn.ReLU(),
        nn.Linear(fc, fc),
        nn.ReLU(),
        nn.Linear(fc, classes),
    ).to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(220)
    x = torch.randn(batch, 3, frames, side, side, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        return F.cross_entropy(model(x), y)

    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["precision"] = FP32_TF32
    k.meta["conv3d_layers"] = len(chans)
    k.meta["fc_in"] = flat
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v221: CodeGen, checkpointed


def _codegen(k: Kit, fixed: bool, device: str, rank: int):
    # H200, bf16: 12 layers x 12.6 M weights and the tied 50400 x 1024 head (51.6 M) over
    # 8,192 tokens: 6 x 202 M x 8,192 = 9.9 TFLOP, the causal attention ~0.4: ~10.3 TFLOP of
    # bf16 matmuls at ~550-650 TFLOP/s, ~16-19 ms; LayerNorms, rotary, GELU, the residual adds,
    # the casts and the fp32 logits' cross-entropy (8,192 x 50,400) ~25 GB, ~7 ms; fused AdamW
    # over 202 M parameters ~1.5 ms: ~25-28 ms uncheckpointed. Checkpointed, each layer's forward
    # (~1/3 of its matmuls and its elementwise work, ~6-7 ms in all) runs again inside the
    # backward: ~32-35 ms planted, ~20-25 % off. Memory: ~0.4 GB of saved activations a layer
    # uncheckpointed, ~5 GB with the weights, the AdamW state and the logits: most of it free
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    vocab, d, layers, heads, seq, batch, rot = (
        (128, 32, 2, 2, 16, 2, 8) if k.quick else (50400, 1024, 12, 16, 1024, 8, 32)
    )
    hd = d // heads
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
    ang = torch.outer(torch.arange(seq).float(), inv)
    cos, sin = ang.cos().to(device), ang.sin().to(device)

    def rotary(t):  # GPT-J / CodeGen style on the first ``rot`` dims, interleaved pairs
        r, rest = t[..., :rot], t[..., rot:]
        x1, x2 = r[..., 0::2], r[..., 1::2]
        c, s = cos.to(t.dtype), sin.to(t.dtype)
        r = torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)
        return torch.cat([r, rest], -1)

    class Block(nn.Module):  # one LayerNorm; attention and MLP in parallel on it
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.ln(x)
            q, kk, v = self.qkv(h).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(rotary(q), rotary(kk), v, is_causal=True)
            a = self.o(a.transpose(1, 2).reshape(b, t, d))
            return x + a + self.out(F.gelu(self.fc(h), approximate="tanh"))

    class CodeGen(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)

        def forward(self, ids):
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x) if fixed else checkpoint(layer, x, use_reentrant=False)
            return self.ln_f(x) @ self.embed.weight.T

    model = CodeGen().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(221)
    ids = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            logits = model(ids[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), ids[:, 1:].reshape(-1))

    k.meta["checkpointed_modules"] = 0 if fixed else layers
    k.meta["params"] = sum(q.numel() for q in model.parameters())
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v222: FSRCNN, fused AdamW (null)


def _fsrcnn(k: Kit, fixed: bool, device: str, rank: int):
    # H200, cuDNN TF32, 512 patches of 128 x 128: every 56-ch activation 512 x 56 x 16,384 fp32
    # (1.9 GB), the 12-ch ones 0.4 GB; the convolutions are narrow (1-56 ch) and memory-bound:
    # ~12 GB forward, ~30 GB back with PReLU's and the transposed conv's gradients, ~12-16 ms,
    # ~20 ms with the MSE at 384 x 384; ~60 kernels. AdamW(foreach=False) over 23 tensors is ~8
    # kernels each, ~180 launches (~2-4 ms of host, ~0.4 ms of GPU at ~2 us each), issued while
    # the GPU works through the step's queue; fused, ~3 launches: ~0-2 % off
    torch, nn = k.torch, k.nn
    side, batch, d, s, m = (16, 2, 8, 4, 4) if k.quick else (128, 512, 56, 12, 4)

    def conv(ci: int, co: int, ks: int):
        return [nn.Conv2d(ci, co, ks, 1, ks // 2), nn.PReLU(co)]

    layers = conv(1, d, 5) + conv(d, s, 1)
    for _ in range(m):
        layers += conv(s, s, 3)
    layers += conv(s, d, 1)
    model = nn.Sequential(*layers, nn.ConvTranspose2d(d, 1, 9, 3, 4, output_padding=2)).to(device)
    kw = {"fused": True} if fixed else {"foreach": False}
    opt = k.adamw(model, **kw)
    gen = torch.Generator().manual_seed(222)
    hr = torch.rand(batch, 1, 3 * side, 3 * side, generator=gen)
    lr = torch.nn.functional.avg_pool2d(hr, 3)  # the x3 downsampled input
    hr, lr = hr.to(device), lr.to(device)

    def loss_fn():
        return (model(lr) - hr).pow(2).mean()

    k.meta["optimizer"] = "AdamW(fused=True)" if fixed else "AdamW(foreach=False)"
    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["params"] = sum(q.numel() for q in model.parameters())
    k.meta["precision"] = FP32_TF32
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v215": _deepsets,
    "v216": _siren,
    "v217": _wav2letter,
    "v218": _cspnet,
    "v219": _appnp,
    "v220": _c3d,
    "v221": _codegen,
    "v222": _fsrcnn,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
