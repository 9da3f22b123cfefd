"""The thirteenth blind part's cases v193-v200 (merged by record_blind13.py): eight one-GPU pairs,
each on a model family no earlier case used. DataLoader workers for an EVA-02-style ViT-L/14
whose images get DeiT III's 3-Augment in numpy per sample (v193); pinned memory through the
DataLoader's pin-memory thread for a Demucs-style music source separator fed 65.5 MB of stereo
waveforms a step (v195); a 4 x batch on a TabNet-style tabular classifier whose ~650 small
kernels leave the GPU idle at batch 256 (v196); torch.compile of a Gemma 2-style decoder whose
hand-written norms, soft-caps, rotary and GELU are most of the step (v197); CUDA graphs
(torch.compile's ``reduce-overhead``) on a DreamerV3-style world model compiled in the default
mode, whose RSSM loop of 24 steps leaves ~800 compiled kernels of a few microseconds each (v198);
bf16 autocast on a MADE-style density estimator of fp32 matmuls with TF32 off (v199); and two
pairs chosen to gain nothing: DataLoader workers for a GPT-2-style language model whose samples
are slices of a pre-made token array (v194), and the one ``loss.item()`` a step of a
Whisper-style speech recogniser whose kernels each outlast their launch (v200).

Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model); planted and fixed
build the same model from the same seed and differ only in the planted thing. Sizes come from
FLOP, byte and launch counts (FLOPs from torch's FlopCounterMode over one step on the meta
device; not timed: nothing here ran on a GPU before the part was fixed; the host costs of the
numpy datasets were timed on the 2-core CPU this was written on). Each builder's comment gives
its estimate of one step on an H100, with the host time at ~10 and ~25 us an eager launch; the
one-GPU cases recorded before ran up to ~1.5-2 x their estimates (v165 26-30 ms estimated, 36-43
timed; v166 fixed 25-35, 67-74), so each estimate is aimed at the lower half of 5-40 ms.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, compile_in_place, next_batches, precision_loss  # noqa: E402

_WORKERS = 4
"""The fixed variants' DataLoader workers (v193, v194), persistent."""

CASES: dict[str, dict] = {
    "v193": {
        "name": "dataloader_workers",
        "model": "EVA-02-style vision transformer (ViT-L/14 at 224x224: a 14x14 patch "
        "embedding, a class token, learned absolute positions and 2-D rotary position "
        "embeddings on the patches' queries and keys, 24 pre-LayerNorm blocks d 1024, 16 "
        "heads, scaled_dot_product_attention, SwiGLU MLP 2730 with a LayerNorm before its "
        "output projection (sub-LN); the class token to 1000 classes, cross-entropy with label "
        "smoothing 0.1; 304 M parameters), batch 16, bf16 autocast, AdamW(fused=True); each "
        "image made per sample in numpy in the Dataset from a stored 256x256 uint8 image by "
        "DeiT III's 3-Augment: a random resized crop (scale 0.08-1) by bilinear interpolation, "
        "a horizontal flip, one of grayscale, solarisation or a Gaussian blur, then colour "
        "jitter 0.3 (brightness, contrast, saturation in random order); elementwise numpy and "
        "gathers only, no BLAS; DataLoader(pin_memory=True) in both variants",
        "planted": "DataLoader(num_workers=0): the 3-Augment of each image runs in the training "
        "process",
        "fix": "DataLoader(num_workers=4, persistent_workers=True)",
        "expected_fix": "dataloader_workers",
    },
    "v194": {
        "name": "null_dataloader_workers",
        "model": "GPT-2-style decoder LM (GPT-2 small: vocab 50257 padded to 50304, learned "
        "positions, 12 pre-LayerNorm blocks d 768, 12 heads, causal "
        "scaled_dot_product_attention, MLP 3072 with tanh-GELU, the LM head tied to the token "
        "embedding; 124 M parameters) on 8 windows of 1024 tokens, bf16 autocast, "
        "AdamW(fused=True); each sample a 1025-token window sliced from a pre-made corpus of 4 "
        "M uint16 token ids, DataLoader(shuffle=True, pin_memory=True) in both variants: the "
        "step is GPU-bound",
        "planted": "DataLoader(num_workers=0)",
        "fix": "DataLoader(num_workers=4, persistent_workers=True) (gains ~0: loading is 8 "
        "slices of a pre-made array and a stack of 66 KB, done while the GPU computes)",
        "expected_fix": "dataloader_workers",
        "null": True,
    },
    "v195": {
        "name": "pin_memory",
        "model": "Demucs-style music source separator on stereo 44.1 kHz waveforms (Demucs v2 "
        "layout: the mixture normalised by its mean and std; 6 encoder layers of a width-8 "
        "stride-4 Conv1d, ReLU, a 1x1 Conv1d to 2 x the channels and GLU, 64-2048 ch; a 2-layer "
        "bidirectional LSTM of 2048 over the 32 bottleneck steps, in fp32, and a Linear back to "
        "2048; 6 decoder layers of a width-3 Conv1d and GLU, then a width-8 stride-4 "
        "ConvTranspose1d, ReLU but in the last, each fed its encoder layer's output added; 4 "
        "stems x 2 channels out, L1 loss on the stems; 266 M parameters) on 3.1 s clips "
        "(136,532 samples), batch 12, bf16 autocast, AdamW(fused=True); each sample remixed in "
        "the Dataset from 4 stems of 4 stored tracks (random offsets, gains, sign and channel "
        "flips), loaded by DataLoader(num_workers=6, persistent_workers=True) in both variants",
        "planted": "65.5 MB per step (fp32 mixtures and stems) in pageable host memory "
        "(DataLoader(pin_memory=False)), copied with non_blocking=True (a synchronous staged "
        "copy)",
        "fix": "DataLoader(pin_memory=True): each batch pinned (page-locked) by the loader's "
        "pin-memory thread, copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v196": {
        "name": "batch_size",
        "model": "TabNet-style tabular classifier (54 Forest-Covertype-like features, 10 "
        "numeric and 44 binary, 7 classes; an input BatchNorm; 5 decision steps, n_d = n_a = "
        "64, relaxation 1.5; each step a feature transformer of 2 shared and 2 step-specific "
        "GLU layers (a Linear without bias, BatchNorm over the whole batch in place of ghost "
        "batches, GLU; residuals scaled by sqrt 0.5) and an attentive transformer (a Linear, "
        "BatchNorm, the prior's scales, sparsemax written out: sort, cumsum, threshold); the "
        "steps' ReLU outputs summed to a Linear to 7 classes; cross-entropy plus 1e-3 x the "
        "masks' entropy), fp32 (TF32 off for matmuls), AdamW(fused=True): ~650 small kernels a "
        "step, the GPU idle between launches",
        "planted": "batch 256",
        "fix": "batch 1024 (4 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 4,
    },
    "v197": {
        "name": "kernel_fusion",
        "model": "Gemma 2-style decoder LM (vocab 8192, embeddings tied to the head and scaled "
        "by sqrt(d); 4 blocks d 512, sliding-window (256 tokens) and global causal attention "
        "alternating, 8 query heads and 4 key/value heads of 64, rotary positions written out, "
        "attention logits soft-capped as 50 tanh(x / 50) and masked by hand before a softmax, "
        "GeGLU MLP 2048 with the tanh-GELU written out, Gemma's RMSNorm (scaled by 1 + w, in "
        "fp32) written by hand before and after each attention and MLP; final logits "
        "soft-capped as 30 tanh(x / 30)) on 16 sequences of 512 tokens, bf16 autocast, "
        "AdamW(fused=True): memory-bound elementwise chains most of the step, ~900 kernels",
        "planted": "eager (each op of the hand-written norms, soft-caps, masks, rotary and GELU "
        "its own kernel)",
        "fix": "model.compile(): torch.compile(model) in place; the loss and the optimizer stay "
        "eager",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v198": {
        "name": "cuda_graphs",
        "model": "DreamerV3-style world model (an RSSM over 24 steps of 64-D vector "
        "observations and 6-D actions: a symlog encoder MLP 64-256-256; per step, in a Python "
        "loop, a Linear of the last stochastic state and action, a LayerNorm GRU of 256 (one "
        "Linear to 3 x 256, LayerNorm, reset and update gates), a prior and a posterior MLP of "
        "256 to 16 categoricals of 16 classes with a 1 % uniform mix, straight-through samples "
        "by Gumbel-argmax on noise drawn each step; on all steps a decoder MLP 512-256-256-64 "
        "and reward and continue heads; symlog MSE, binary cross-entropy and the KL balance "
        "0.5 dyn + 0.1 rep with free bits of 1 nat; each hidden Linear without bias, followed "
        "by LayerNorm and SiLU) on 16 sequences, fp32 (TF32 off for matmuls), AdamW(fused=True) "
        "eager, the model under torch.compile in both variants: ~800 compiled kernels a step of "
        "a few microseconds each, the step bound by their launches",
        "planted": "compiled without CUDA graphs: model.compile() in torch.compile's default "
        "mode, each compiled kernel launched from Python",
        "fix": "torch.compile(model, mode='reduce-overhead') (as model.compile(mode="
        "'reduce-overhead'), gpuscope's cuda_graphs code: forward and backward replayed as "
        "CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
        "compiled": True,
    },
    "v199": {
        "name": "mixed_precision",
        "model": "MADE-style autoregressive density estimator on binarised 28x28 images (784 "
        "inputs in the natural order; 3 masked hidden layers of 4096 with ReLU, each hidden "
        "unit's degree cycling over 1-783; every weight multiplied by its 0/1 mask each forward "
        "and then a plain matmul; Bernoulli logits for the 784 pixels, binary cross-entropy; 40 "
        "M parameters), batch 4096, fp32, TF32 off for matmuls, no convolutions, "
        "AdamW(fused=True)",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast (TF32 still off)",
        "expected_fix": "mixed_precision",
    },
    "v200": {
        "name": "null_host_sync",
        "model": "Whisper-style speech recogniser (Whisper base: 80 log-mel bins over 30 s, "
        "3,000 frames, pre-made on the device; 2 width-3 Conv1d 512 with GELU, the second "
        "strided 2; sinusoidal positions; 6 pre-LayerNorm encoder blocks d 512, 8 heads, "
        "scaled_dot_product_attention, MLP 2048 with GELU over 1,500 frames; 6 decoder blocks "
        "with causal self-attention and cross-attention, learned positions, vocab 51865 tied "
        "to the output; 224 target tokens, cross-entropy) on batch 16, bf16 autocast, "
        "AdamW(fused=True): a long GPU-bound step whose encoder kernels (24,000 frames of 512) "
        "each outlast their launch",
        "planted": "loss.item() once per step, after the optimizer step, for the log",
        "fix": "the log summed on the GPU (gains ~0: one sync at the end of a GPU-bound step "
        "whose first kernels, the convolutions and encoder blocks over 24,000 frames, outlast "
        "their launches)",
        "expected_fix": "host_sync",
        "null": True,
    },
}


# ---------------------------------------------------------------- v193: 3-Augment in numpy

_LUMA = (0.299, 0.587, 0.114)


def _gray(x: Any) -> Any:
    """The luma of ``x`` (h, w, 3) float32 in [0, 1]: (h, w)."""
    return x[..., 0] * _LUMA[0] + x[..., 1] * _LUMA[1] + x[..., 2] * _LUMA[2]


def _resized_crop(img: Any, rng: Any, scale: tuple[float, float], out: int) -> Any:
    """torchvision's RandomResizedCrop of ``img`` (h, w, 3) float32 to ``out`` x ``out``: a box
    of ``scale`` of the area and aspect 3/4-4/3 (10 tries, else the whole image), resized by
    bilinear interpolation (half-pixel centres) as two gathers and blends a side."""
    import numpy as np

    hh, ww, _ = img.shape
    top, left, h, w = 0, 0, hh, ww
    for _ in range(10):
        area = hh * ww * rng.uniform(*scale)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if 0 < cw <= ww and 0 < ch <= hh:
            top, left = int(rng.integers(0, hh - ch + 1)), int(rng.integers(0, ww - cw + 1))
            h, w = ch, cw
            break
    ys = (np.arange(out) + 0.5) * (h / out) - 0.5 + top
    xs = (np.arange(out) + 0.5) * (w / out) - 0.5 + left
    y0 = np.clip(np.floor(ys), 0, hh - 1).astype(np.intp)
    x0 = np.clip(np.floor(xs), 0, ww - 1).astype(np.intp)
    y1, x1 = np.minimum(y0 + 1, hh - 1), np.minimum(x0 + 1, ww - 1)
    wy = np.clip(ys - y0, 0, 1).astype(np.float32)[:, None, None]
    wx = np.clip(xs - x0, 0, 1).astype(np.float32)[None, :, None]
    rows = img[y0] * (1 - wy) + img[y1] * wy
    return rows[:, x0] * (1 - wx) + rows[:, x1] * wx


def _blur(x: Any, rng: Any, radius: int) -> Any:
    """A Gaussian blur of ``x`` (h, w, 3), sigma 0.1-2 (the taps within 3 sigma, at most
    ``radius`` a side), separable, reflect-padded: one shifted multiply-add a tap."""
    import numpy as np

    sigma = rng.uniform(0.1, 2.0)
    r = min(radius, math.ceil(3 * sigma))
    taps = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2).astype(np.float32)
    taps /= taps.sum()
    n, m = x.shape[:2]
    p = np.pad(x, ((r, r), (0, 0), (0, 0)), mode="reflect")
    y = sum(taps[j] * p[j : j + n] for j in range(2 * r + 1))
    p = np.pad(y, ((0, 0), (r, r), (0, 0)), mode="reflect")
    return sum(taps[j] * p[:, j : j + m] for j in range(2 * r + 1))


class ThreeAugmentImages:
    """v193's dataset: ``pool`` stored ``size`` x ``size`` uint8 RGB images (smooth colour blobs
    over low-frequency waves, made once) with a label each of ``classes``; ``1_000_000`` virtual
    samples cycling over them. Per sample (numpy, seeded by the index; elementwise work and
    gathers, no BLAS), DeiT III's 3-Augment: the image as float32 in [0, 1], a random resized
    crop (scale 0.08-1) to ``out`` x ``out`` by bilinear interpolation, a horizontal flip (p 0.5),
    one of grayscale, solarisation (at 0.5) or a Gaussian blur (sigma 0.1-2, at most 6 taps a
    side), then colour jitter 0.3 (brightness, contrast, saturation, in random order, each
    clipped to [0, 1]), back to uint8. Returns (the image (3, out, out) uint8, its label)."""

    def __init__(self, pool: int, size: int, out: int, classes: int) -> None:
        import numpy as np

        rng = np.random.default_rng(193)
        self.out = out
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
        self.images = []
        for _ in range(pool):
            img = np.zeros((size, size, 3), np.float32)
            for _ in range(6):
                cy, cx, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.3)
                blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
                img += blob[..., None] * rng.uniform(0, 1, 3).astype(np.float32)
            fy, fx, phase = rng.uniform(1, 8), rng.uniform(1, 8), rng.uniform(0, 2 * math.pi)
            img += 0.2 * np.sin(2 * math.pi * (fy * yy + fx * xx) + phase)[..., None]
            img = np.clip(img / max(float(img.max()), 1e-3), 0, 1)
            self.images.append((img * 255).astype(np.uint8))
        self.labels = rng.integers(0, classes, pool)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        n = len(self.images)
        x = _resized_crop(self.images[i % n].astype(np.float32) / 255, rng, (0.08, 1.0), self.out)
        if rng.uniform() < 0.5:
            x = x[:, ::-1]
        which = int(rng.integers(3))  # 3-Augment: one of the three
        if which == 0:
            x = np.repeat(_gray(x)[..., None], 3, -1)
        elif which == 1:
            x = np.where(x >= 0.5, 1 - x, x)
        else:
            x = _blur(x, rng, 6)
        for op in rng.permutation(3):  # colour jitter 0.3, in random order
            f = rng.uniform(0.7, 1.3)
            if op == 0:
                x = x * f
            elif op == 1:
                m = float(_gray(x).mean())
                x = (x - m) * f + m
            else:
                g = _gray(x)[..., None]
                x = (x - g) * f + g
            x = np.clip(x, 0, 1)
        img = np.ascontiguousarray((x * 255 + 0.5).astype(np.uint8).transpose(2, 0, 1))
        return torch.from_numpy(img), int(self.labels[i % n])


def _rotate_half(torch, x, cos, sin):
    """Rotary embedding in the rotate-half form: ``x`` (..., t, hd) by ``cos`` and ``sin`` (t,
    hd), in their float32, cast back to ``x``'s dtype."""
    x1, x2 = x.chunk(2, -1)
    return (x * cos + torch.cat([-x2, x1], -1) * sin).type_as(x)


def _eva02(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    # H100: 257 tokens an image x 24 blocks x 12.6 M weights (qkv 3.1, proj 1.0, SwiGLU 5.6 +
    # 2.8) = 77.7 GMAC an image forward, attention 3.2, the patch embedding 0.15: 81 GMAC, x 16
    # x 2 x 3 = 7.8 TFLOP a step (FlopCounter) of bf16 matmuls at ~500-600 TFLOP/s: ~13-16 ms;
    # LayerNorms (3 a block, the sub-LN on 2730 wide rows), the rotary on queries and keys,
    # SiLU x gate, residuals and the weight casts over 4,112 tokens: ~0.75 GB a block forward,
    # ~2.3 GB with the backward, ~63 GB in all with the fused AdamW over 304 M parameters (8.5
    # GB): ~20-23 ms. ~1,700 kernels (1,750 aten ops forward and backward on the meta device,
    # less the attention's math, plus autocast's casts; ~17-43 ms of host): ~35-45 ms a step,
    # whichever sets the pace. Loading: the 3-Augment of one image 2.8-3.2 ms of CPU on the
    # machine this was written on (the float conversion and the resized crop ~1.2, one of the
    # three ~0.3-1, the jitter ~1), 16 images a step ~45-50 ms, plus the collation and pinning
    # of 2.4 MB: planted ~80-95 ms a step, the GPU idle while the training process augments; 4
    # workers make a batch each ~12 ms of wall time, well inside the step: ~35-45 ms fixed,
    # ~50-55 % off
    torch, nn, F = k.torch, k.nn, k.F
    size, out, patch, d, layers, heads, hid, batch, pool, classes, workers = (
        (40, 28, 14, 32, 2, 4, 64, 2, 4, 10, 2)
        if k.quick
        else (256, 224, 14, 1024, 24, 16, 2730, 16, 64, 1000, _WORKERS)
    )
    side, hd = out // patch, d // heads

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.w12, self.sub, self.w3 = (
                nn.Linear(d, 2 * hid),
                nn.LayerNorm(hid),
                nn.Linear(hid, d),
            )

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q, kk, v = self.qkv(self.n1(x)).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            q, kk = _rotate_half(torch, q, cos, sin), _rotate_half(torch, kk, cos, sin)
            a = F.scaled_dot_product_attention(q, kk, v)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            g, u = self.w12(self.n2(x)).chunk(2, -1)
            return x + self.w3(self.sub(F.silu(g) * u))

    class EVA02(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, d, patch, patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.pos = nn.Parameter(torch.randn(1, side * side + 1, d) * 0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)
            # 2-D rotary: half the pairs turn with the patch's row, half with its column; the
            # class token is not turned (cos 1, sin 0)
            quarter = hd // 4
            inv = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float32) / quarter)
            rows = torch.arange(side).repeat_interleave(side)[:, None] * inv
            cols = torch.arange(side).repeat(side)[:, None] * inv
            ang = torch.cat([rows, cols], -1)  # (side^2, hd / 2)
            ang = torch.cat([torch.zeros(1, hd // 2), ang]).repeat(1, 2)  # (t, hd)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, img):
            x = self.patch(img).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            for blk in self.blocks:
                x = blk(x, self.cos, self.sin)
            return self.head(self.norm(x[:, 0]))

    model = EVA02().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True}
    loader = DataLoader(
        ThreeAugmentImages(pool, size, out, classes), batch_size=batch, drop_last=True,
        pin_memory=True, **(kw if fixed else {}),
    )  # fmt: skip
    next_batch = next_batches(loader)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device)[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225], device=device)[:, None, None]

    def loss_fn():
        xb, yb = next_batch()
        x = (xb.to(device, non_blocking=True).float() / 255 - mean) / std
        y = yb.to(device, non_blocking=True)
        with k.ac:
            return F.cross_entropy(model(x).float(), y, label_smoothing=0.1)

    k.meta["num_workers"] = workers if fixed else 0
    k.meta["pin_memory"] = True
    k.meta["loaded_bytes_per_step"] = batch * 3 * out * out  # uint8 images
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v194: token windows


class TokenWindows:
    """v194's dataset: windows of ``seq + 1`` token ids sliced from ``tokens`` (a uint16 numpy
    corpus, as nanoGPT's memory-mapped shards), window ``i`` at ``i * seq``, as int64."""

    def __init__(self, tokens: Any, seq: int) -> None:
        self.tokens, self.seq = tokens, seq

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        s = i * self.seq
        return torch.from_numpy(self.tokens[s : s + self.seq + 1].astype(np.int64))


def _gpt2(k: Kit, fixed: bool, device: str, rank: int):
    import numpy as np
    from torch.utils.data import DataLoader

    # H100: 85 M block weights x 6 x 8192 tokens = 4.2 TFLOP, the tied head (768 x 50304) 1.9,
    # causal flash attention over 1024 tokens ~0.5: ~6.6 TFLOP a step (FlopCounter: 7.0, the
    # attention counted as if not causal) of bf16 matmuls, ~13-15 ms; LayerNorms, the GELU on
    # 25 M elements a block, residuals and weight casts ~16 GB, the fp32 logits and
    # cross-entropy over 8192 x 50304 ~8 GB, the fused AdamW over 124 M parameters ~3.5 GB:
    # ~10 ms. ~600 kernels (~6-15 ms of host): GPU-bound, ~23-27 ms a step. Loading: 8 slices
    # of a numpy array cast to int64, a stack of 66 KB and its pinning: ~0.1-0.2 ms of host in
    # the training process planted, a queue read fixed, while the GPU still runs the previous
    # step's backward: < 1 % either way
    torch, nn, F = k.torch, k.nn, k.F
    vocab, d, layers, heads, seq, batch, corpus, workers = (
        (256, 32, 2, 4, 32, 2, 8192, 2)
        if k.quick
        else (50304, 768, 12, 12, 1024, 8, 4_000_000, _WORKERS)
    )

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return F.linear(self.ln_f(x), self.wte.weight)

    model = GPT2().to(device)
    opt = k.adamw(model, fused=k.cuda)
    # a corpus of Zipf-like ids (the few frequent, many rare), as a tokenised text would be
    rng = np.random.default_rng(194)
    tokens = np.minimum(rng.zipf(1.2, corpus) - 1, 50256 if not k.quick else vocab - 1)
    tokens = tokens.astype(np.uint16)
    kw = {"num_workers": workers, "persistent_workers": True}
    loader = DataLoader(
        TokenWindows(tokens, seq), batch_size=batch, shuffle=True, drop_last=True,
        pin_memory=True, **(kw if fixed else {}),
    )  # fmt: skip
    next_batch = next_batches(loader)

    def loss_fn():
        w = next_batch().to(device, non_blocking=True)
        with k.ac:
            logits = model(w[:, :-1])
        return F.cross_entropy(logits.float().view(-1, vocab), w[:, 1:].reshape(-1))

    k.meta["num_workers"] = workers if fixed else 0
    k.meta["pin_memory"] = True
    k.meta["loaded_bytes_per_step"] = batch * (seq + 1) * 8
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v195: remixed stems


class RemixedStems:
    """v195's dataset: ``tracks`` stored stereo tracks of 4 stems (drums, bass, other, vocals:
    decaying noise bursts, a low gliding tone, chords, a vibrato voice; float32, made once),
    each ``length + shift`` samples long; ``1_000_000`` virtual samples. Per sample (numpy,
    seeded by the index), Demucs's augmentations: each stem from a random track (remixing) at a
    random offset below ``shift`` (time shift), scaled by a random gain (0.25-1.25) and sign,
    the channels swapped (p 0.5); the mixture their sum. Returns (mixture (2, length), stems
    (4, 2, length)), float32."""

    def __init__(self, tracks: int, length: int, shift: int) -> None:
        import numpy as np

        rng = np.random.default_rng(195)
        self.length, self.shift = length, shift
        n = length + shift
        t = np.arange(n, dtype=np.float32) / 44100
        self.stems = np.zeros((tracks, 4, 2, n), np.float32)
        for tr in range(tracks):
            beat = rng.uniform(1.5, 3.0)  # drum hits a second
            hits = np.exp(-30 * ((t * beat) % 1.0)).astype(np.float32)
            f0 = rng.uniform(40, 80)
            chord = rng.uniform(200, 400) * np.array([1.0, 1.26, 1.5], np.float32)
            voice = rng.uniform(200, 500)
            mono = np.stack(
                [
                    hits * rng.standard_normal(n).astype(np.float32),
                    np.sin(2 * np.pi * f0 * t * (1 + 0.01 * np.sin(0.5 * t))),
                    sum(np.sin(2 * np.pi * f * t) for f in chord) / 3,
                    np.sin(2 * np.pi * voice * t + 3 * np.sin(2 * np.pi * 5 * t))
                    * (0.5 + 0.5 * np.sin(2 * np.pi * 0.4 * t)),
                ]
            ).astype(np.float32)
            pan = rng.uniform(0.3, 0.7, (4, 1)).astype(np.float32)
            self.stems[tr, :, 0] = mono * pan
            self.stems[tr, :, 1] = mono * (1 - pan)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        tracks = rng.integers(0, len(self.stems), 4)
        offsets = rng.integers(0, self.shift, 4)
        picks = enumerate(zip(tracks, offsets, strict=True))
        stems = np.stack([self.stems[tr, s, :, o : o + self.length] for s, (tr, o) in picks])
        gains = rng.uniform(0.25, 1.25, (4, 1, 1)) * rng.choice([-1.0, 1.0], (4, 1, 1))
        if rng.uniform() < 0.5:
            stems = stems[:, ::-1]
        stems = stems * gains.astype(np.float32)
        return torch.from_numpy(stems.sum(0)), torch.from_numpy(stems)


def _demucs_valid_length(depth: int, bottom: int) -> int:
    """The input length whose ``depth`` width-8 stride-4 convolutions end at ``bottom`` steps
    exactly, and whose transposed convolutions give it back."""
    n = bottom
    for _ in range(depth):
        n = (n - 1) * 4 + 8
    return n


def _demucs(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    # H100: 18 GMAC a clip forward (FlopCounter: the convolutions 12.4, each of the 6 encoder
    # and 6 decoder layers ~0.8-1.7 at 34,132 down to 32 steps and 64-2048 ch; the LSTM and its
    # Linear 5.6), x 12 x 2 x 3 = 1.3 TFLOP a step: the convolutions' 0.9 in bf16 (cuDNN, widths
    # 8 and 3: ~100-150 TFLOP/s), ~6-9 ms; the LSTM's 0.4 in fp32 (cuDNN TF32) over 32 steps at
    # batch 12, the recurrence latency-bound, ~4-6 ms; ReLU, GLU, the skips and the L1 ~3 GB,
    # ~1-1.5 ms; the fused AdamW over 266 M parameters ~7.4 GB, ~2.5-3 ms: ~15-20 ms of GPU
    # against ~400 kernels (~4-10 ms of host; the LSTM's own per-step kernels queued by cuDNN).
    # The 65.5 MB a step from pageable memory (the workers' shared memory): ~8-10 ms (v165's 128
    # MB ~16, v151's 153 MB ~19 more than pinned), the host blocked and the GPU idle until the
    # copy is done; pinned by the loader's thread beside the step (a 65.5 MB host copy, ~7-10 ms
    # at 7-10 GB/s, under the GPU's 15-20) and copied in stream order on the copy engine (~2-3
    # ms): ~24-30 ms planted, ~17-23 fixed, ~25-30 % off. Loading, the same in both: the remix
    # 2.6 ms a clip on the machine this was written on and the collation of 65.5 MB into shared
    # memory ~10-40 ms (its page faults), ~45-70 ms a batch in each of the 6 workers: a batch
    # every ~8-12 ms
    torch, nn, F = k.torch, k.nn, k.F
    depth, ch, bottom, batch, tracks, workers = (
        (3, 4, 6, 2, 3, 2) if k.quick else (6, 64, 32, 12, 16, 6)
    )
    length = _demucs_valid_length(depth, bottom)  # 136,532 samples (3.1 s) at full size
    shift = length // 3

    class Demucs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc, self.dec = nn.ModuleList(), nn.ModuleList()
            ci = 2
            for i in range(depth):
                c = ch * 2**i
                self.enc.append(
                    nn.Sequential(
                        nn.Conv1d(ci, c, 8, 4), nn.ReLU(), nn.Conv1d(c, 2 * c, 1), nn.GLU(1)
                    )
                )
                layers: list = [
                    nn.Conv1d(c, 2 * c, 3, padding=1), nn.GLU(1),
                    nn.ConvTranspose1d(c, 8 if i == 0 else ci, 8, 4),
                ]  # fmt: skip
                self.dec.insert(0, nn.Sequential(*layers, *([nn.ReLU()] if i else [])))
                ci = c
            self.lstm = nn.LSTM(ci, ci, 2, bidirectional=True)
            self.lstm_out = nn.Linear(2 * ci, ci)

        def forward(self, mix):
            mono = mix.mean(1, keepdim=True)
            mean, std = mono.mean(-1, keepdim=True), mono.std(-1, keepdim=True)
            x = (mix - mean) / (1e-5 + std)
            skips = []
            for enc in self.enc:
                x = enc(x)
                skips.append(x)
            with torch.autocast(k.dt, enabled=False):  # Demucs's BiLSTM in fp32
                h, _ = self.lstm(x.float().permute(2, 0, 1))
                x = self.lstm_out(h).permute(1, 2, 0)
            for dec in self.dec:
                x = dec(x + skips.pop())
            x = x.float() * std + mean
            return x.view(x.shape[0], 4, 2, -1)

    model = Demucs().to(device)
    opt = k.adamw(model, fused=k.cuda)
    loader = DataLoader(
        RemixedStems(tracks, length, shift), batch_size=batch, drop_last=True,
        num_workers=workers, persistent_workers=True, pin_memory=fixed,
    )  # fmt: skip
    next_batch = next_batches(loader)

    def loss_fn():
        mix, stems = (t.to(device, non_blocking=True) for t in next_batch())
        with k.ac:
            return F.l1_loss(model(mix), stems)

    k.meta["num_workers"] = workers
    k.meta["pinned"] = fixed
    k.meta["bytes_per_step"] = batch * 5 * 2 * length * 4  # the mixture and 4 stems, fp32
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v196: TabNet


def _sparsemax(torch, z):
    """Sparsemax over the last dim, written out: sorted descending, the cumulative sums, the
    support k(z) = max{k : 1 + k z_(k) > sum_(j<=k) z_(j)}, tau, and max(z - tau, 0)."""
    zs, _ = torch.sort(z, -1, descending=True)
    cs = zs.cumsum(-1) - 1
    r = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    kz = (zs * r > cs).sum(-1, keepdim=True)
    tau = cs.gather(-1, kz - 1) / kz.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def _tabnet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: at batch 256 every kernel works on 256 x 54-256 values: ~2-4 us of GPU each.
    # Forward: the input BatchNorm, a feature transformer of 4 GLU layers (a matmul,
    # BatchNorm, GLU; the residual add and scale), then per decision step an attentive
    # transformer (matmul, BatchNorm, the prior, sparsemax: sort, cumsum, compare, sum,
    # gather, divide, clamp), the mask's entropy, the prior's update, the masked input, another
    # feature transformer and the ReLU sum: 642 aten ops forward and backward (counted on the
    # meta device), the loss and the fused AdamW over 61 tensors: ~650 kernels, ~7-16 ms of
    # host against ~2 ms of GPU. At 4 x B every kernel still takes ~2-5 us (1024 rows): the
    # same launch-bound step for 4 x the samples, ~70-75 % off per sample
    torch, nn, F = k.torch, k.nn, k.F
    features, numeric, classes, nd, steps, gamma = 54, 10, 7, 64, 5, 1.5
    batch = (8 if k.quick else 256) * (4 if fixed else 1)
    nd = 8 if k.quick else nd
    steps = 2 if k.quick else steps

    class GLULayer(nn.Module):  # a Linear without bias, BatchNorm (whole batch), GLU
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.fc = nn.Linear(ci, 2 * co, bias=False)
            self.bn = nn.BatchNorm1d(2 * co, momentum=0.02)

        def forward(self, x):
            return F.glu(self.bn(self.fc(x)), -1)

    class FeatureTransformer(nn.Module):
        def __init__(self, shared: Any) -> None:
            super().__init__()
            self.shared = shared  # 2 GLU layers, the same modules in every step
            self.own = nn.ModuleList(GLULayer(2 * nd, 2 * nd) for _ in range(2))

        def forward(self, x):
            x = self.shared[0](x)
            for layer in [self.shared[1], *self.own]:
                x = (x + layer(x)) * math.sqrt(0.5)
            return x

    class AttentiveTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(nd, features, bias=False)
            self.bn = nn.BatchNorm1d(features, momentum=0.02)

        def forward(self, a, prior):
            return _sparsemax(torch, self.bn(self.fc(a)) * prior)

    class TabNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn0 = nn.BatchNorm1d(features, momentum=0.01)
            shared = nn.ModuleList([GLULayer(features, 2 * nd), GLULayer(2 * nd, 2 * nd)])
            self.initial = FeatureTransformer(shared)
            self.transformers = nn.ModuleList(FeatureTransformer(shared) for _ in range(steps))
            self.attentive = nn.ModuleList(AttentiveTransformer() for _ in range(steps))
            self.head = nn.Linear(nd, classes)

        def forward(self, x):
            x = self.bn0(x)
            prior = torch.ones_like(x)
            a = self.initial(x)[:, nd:]
            out, entropy = 0, 0
            for ft, att in zip(self.transformers, self.attentive, strict=True):
                m = att(a, prior)
                entropy = entropy + (-m * torch.log(m + 1e-15)).sum(1).mean()
                prior = prior * (gamma - m)
                h = ft(m * x)
                out = out + F.relu(h[:, :nd])
                a = h[:, nd:]
            return self.head(out), entropy / steps

    model = TabNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(196)
    pool = 4 * (8 if k.quick else 256)  # both variants' rows drawn alike, the first `batch` used
    num = torch.randn(pool, numeric, generator=gen)
    soil = torch.randint(0, 40, (pool,), generator=gen)
    wild = torch.randint(0, 4, (pool,), generator=gen)
    x = torch.cat([num, F.one_hot(wild, 4).float(), F.one_hot(soil, 40).float()], 1)[:batch]
    y = torch.randint(0, classes, (pool,), generator=gen)[:batch]
    x, y = x.to(device), y.to(device)

    def loss_fn():
        logits, entropy = model(x)
        return F.cross_entropy(logits, y) + 1e-3 * entropy

    k.meta["batch_multiple"] = 4
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v197: Gemma 2, eager


def _gemma2(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 4 blocks x (attention 0.8 M + GeGLU 3.1 M weights) x 8192 tokens and the tied head
    # (512 x 8192): 1.08 TFLOP a step of bf16 matmuls (FlopCounter, the attention's 0.1
    # included), ~2.5-3 ms. The elementwise chains, eager: the attention scores (16 x 8 x 512 x
    # 512 = 33.5 M a block) through the soft-cap's divide, tanh and multiply, the mask, the
    # fp32 softmax and its casts, ~1.3 GB forward and ~1.4 backward a block; Gemma's
    # hand-written fp32 RMSNorm (9 kernels, ~0.4 GB with its backward; 4 a block and the last:
    # ~6.8 GB), the written-out tanh-GELU on 16.8 M values a block (9 kernels, ~2.2 GB with the
    # backward), the rotary and the GQA repeats ~0.5 GB a block; the final soft-cap over 8192 x
    # 8192 fp32 logits and the loss ~4.6 GB: ~34 GB, ~11-14 ms. ~900 kernels (772 aten ops on
    # the meta device plus autocast's casts; ~9-22 ms of host): ~15-22 ms planted. Compiled,
    # each chain is one or two kernels: ~6-7 GB, ~2.5 ms beside the matmuls, the eager loss and
    # the fused AdamW (~0.5 ms), ~180 launches: ~6-8 ms fixed, ~55-65 % off
    torch, nn, F = k.torch, k.nn, k.F
    vocab, d, layers, hq, hkv, hd, ff, seq, batch, window = (
        (256, 32, 2, 4, 2, 8, 64, 32, 2, 16)
        if k.quick
        else (8192, 512, 4, 8, 4, 64, 2048, 512, 16, 256)
    )
    scale, attn_cap, final_cap = hd**-0.5, 50.0, 30.0

    class RMSNorm(nn.Module):  # Gemma's: normalised in fp32, scaled by (1 + w), cast back
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(d))

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (h * (1.0 + self.weight.float())).type_as(x)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wq = nn.Linear(d, hq * hd, bias=False)
            self.wk = nn.Linear(d, hkv * hd, bias=False)
            self.wv = nn.Linear(d, hkv * hd, bias=False)
            self.wo = nn.Linear(hq * hd, d, bias=False)

        def forward(self, x, cos, sin, mask):
            b, t, _ = x.shape
            q = self.wq(x).view(b, t, hq, hd).transpose(1, 2)
            kk = self.wk(x).view(b, t, hkv, hd).transpose(1, 2)
            v = self.wv(x).view(b, t, hkv, hd).transpose(1, 2)
            q, kk = _rotate_half(torch, q, cos, sin), _rotate_half(torch, kk, cos, sin)
            kk = kk.repeat_interleave(hq // hkv, 1)
            v = v.repeat_interleave(hq // hkv, 1)
            s = (q * scale) @ kk.transpose(-2, -1)
            s = torch.tanh(s / attn_cap) * attn_cap
            s = s.masked_fill(mask, float("-inf"))
            p = torch.softmax(s.float(), -1).type_as(v)
            return self.wo((p @ v).transpose(1, 2).reshape(b, t, hq * hd))

    class GeGLU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate, self.up = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
            self.down = nn.Linear(ff, d, bias=False)

        def forward(self, x):
            g = self.gate(x)
            g = 0.5 * g * (1.0 + torch.tanh(0.7978845608 * (g + 0.044715 * g.pow(3))))
            return self.down(g * self.up(x))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn, self.mlp = Attention(), GeGLU()
            self.pre_attn, self.post_attn = RMSNorm(), RMSNorm()
            self.pre_mlp, self.post_mlp = RMSNorm(), RMSNorm()

        def forward(self, x, cos, sin, mask):
            x = x + self.post_attn(self.attn(self.pre_attn(x), cos, sin, mask))
            return x + self.post_mlp(self.mlp(self.pre_mlp(x)))

    class Gemma2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = RMSNorm()
            inv = 1.0 / 10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
            ang = (torch.arange(seq, dtype=torch.float32)[:, None] * inv).repeat(1, 2)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)
            i = torch.arange(seq)
            causal = i[None, :] > i[:, None]
            self.register_buffer("global_mask", causal, persistent=False)
            local = causal | (i[:, None] - i[None, :] >= window)
            self.register_buffer("local_mask", local, persistent=False)

        def forward(self, ids):
            x = self.emb(ids) * math.sqrt(d)
            for j, blk in enumerate(self.blocks):  # local, global, local, ...
                mask = self.local_mask if j % 2 == 0 else self.global_mask
                x = blk(x, self.cos, self.sin, mask)
            logits = F.linear(self.norm(x), self.emb.weight).float()
            return torch.tanh(logits / final_cap) * final_cap

    model = Gemma2().to(device)
    opt = k.adamw(model, fused=k.cuda)
    if fixed:
        k.meta["compile_how"] = compile_in_place(model)
    gen = torch.Generator().manual_seed(197)
    data = torch.multinomial(
        torch.arange(1, vocab + 1, dtype=torch.float32) ** -1.1, batch * (seq + 1), True,
        generator=gen,
    ).view(batch, seq + 1)  # fmt: skip
    ids, nxt = data[:, :-1].to(device), data[:, 1:].to(device)

    def loss_fn():
        with k.ac:
            logits = model(ids)
        return F.cross_entropy(logits.view(-1, vocab), nxt.reshape(-1))

    k.meta["compiled"] = fixed
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v198: DreamerV3's RSSM


def _dreamer(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per RSSM step forward 6 matmuls at batch 16 (the image input, the GRU's 512 -> 768,
    # the prior's and the posterior's two layers) and ~5-7 fused Triton kernels (LayerNorm
    # and SiLU, the GRU's gates, the unimix softmax, the Gumbel-argmax and one-hot): ~12 a
    # step, ~290 over 24 steps; backward ~2 matmuls each and the fused gradients, ~20 a step,
    # ~480; the encoder, decoder, heads and losses over all 384 step rows ~50; the eager fused
    # AdamW over 40 tensors a few: ~800 kernels of ~2-5 us of GPU each (~2.5-3 ms). Compiled in
    # the default mode each is launched from Inductor's Python wrapper, ~6-8 us with its buffers:
    # ~5-7 ms a step, the GPU idle between launches. reduce-overhead replays the forward and
    # the backward as two CUDA graphs (their inputs copied in): ~3 ms, ~40-55 % off. 24 steps,
    # not DreamerV3's 64: Inductor compiles the unrolled loop (~2,600 aten ops forward and
    # backward) in ~30-45 s cold, once a mode, cached after
    torch, nn, F = k.torch, k.nn, k.F
    obs_dim, act_dim, seq, batch, deter, hid, groups, classes = (
        (8, 2, 4, 2, 16, 16, 4, 4) if k.quick else (64, 6, 24, 16, 256, 256, 16, 16)
    )
    stoch = groups * classes

    def symlog(x):
        return torch.sign(x) * torch.log1p(x.abs())

    class Dense(nn.Module):  # DreamerV3's: Linear without bias, LayerNorm, SiLU
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.fc, self.norm = nn.Linear(ci, co, bias=False), nn.LayerNorm(co)

        def forward(self, x):
            return F.silu(self.norm(self.fc(x)))

    class GRU(nn.Module):  # DreamerV3's LayerNorm GRU
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(hid + deter, 3 * deter, bias=False)
            self.norm = nn.LayerNorm(3 * deter)

        def forward(self, x, h):
            reset, cand, update = self.norm(self.fc(torch.cat([x, h], -1))).chunk(3, -1)
            cand = torch.tanh(torch.sigmoid(reset) * cand)
            update = torch.sigmoid(update - 1)
            return update * cand + (1 - update) * h

    class WorldModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.Sequential(Dense(obs_dim, hid), Dense(hid, hid))
            self.img_in, self.gru = Dense(stoch + act_dim, hid), GRU()
            self.prior = nn.Sequential(Dense(deter, hid), nn.Linear(hid, stoch))
            self.post = nn.Sequential(Dense(deter + hid, hid), nn.Linear(hid, stoch))
            feat = deter + stoch
            self.dec = nn.Sequential(Dense(feat, hid), Dense(hid, hid), nn.Linear(hid, obs_dim))
            self.rew = nn.Sequential(Dense(feat, hid), nn.Linear(hid, 1))
            self.cont = nn.Sequential(Dense(feat, hid), nn.Linear(hid, 1))
            self.register_buffer("classes", torch.arange(classes), persistent=False)

        def unimix(self, logits):  # log-probabilities with 1 % of a uniform mixed in
            probs = 0.99 * torch.softmax(logits.view(-1, groups, classes), -1) + 0.01 / classes
            return probs.log()

        def forward(self, obs, act, rew, cont, noise):
            b = obs.shape[0]
            e = self.enc(symlog(obs))
            h = obs.new_zeros(b, deter)
            z = obs.new_zeros(b, stoch)
            hs, zs, priors, posts = [], [], [], []
            for t in range(seq):
                h = self.gru(self.img_in(torch.cat([z, act[:, t]], -1)), h)
                prior = self.unimix(self.prior(h))
                post = self.unimix(self.post(torch.cat([h, e[:, t]], -1)))
                idx = (post - torch.log(-torch.log(noise[t]))).argmax(-1)  # Gumbel-argmax
                onehot = (idx[..., None] == self.classes).to(post.dtype)
                probs = post.exp()
                z = (onehot + probs - probs.detach()).flatten(1)  # straight-through
                hs.append(h)
                zs.append(z)
                priors.append(prior)
                posts.append(post)
            feat = torch.cat([torch.stack(hs, 1), torch.stack(zs, 1)], -1)
            recon = (self.dec(feat) - symlog(obs)).pow(2).sum(-1).mean()
            rloss = (self.rew(feat).squeeze(-1) - symlog(rew)).pow(2).mean()
            closs = F.binary_cross_entropy_with_logits(self.cont(feat).squeeze(-1), cont)
            q, p = torch.stack(posts, 1), torch.stack(priors, 1)  # (b, seq, groups, classes)

            def kl(a, c):
                return (a.exp() * (a - c)).sum((-2, -1))

            dyn = kl(q.detach(), p).clamp(min=1.0).mean()
            rep = kl(q, p.detach()).clamp(min=1.0).mean()
            return recon + rloss + closs + 0.5 * dyn + 0.1 * rep

    model = WorldModel().to(device)
    opt = k.adamw(model, fused=k.cuda)
    mode = "reduce-overhead" if fixed else None
    k.meta["compile_how"] = compile_in_place(model, **({"mode": mode} if mode else {}))
    gen = torch.Generator().manual_seed(198)
    obs = (torch.randn(batch, seq, obs_dim, generator=gen).cumsum(1) * 0.3).to(device)
    act = torch.rand(batch, seq, act_dim, generator=gen).mul(2).sub(1).to(device)
    rew = torch.randn(batch, seq, generator=gen).to(device)
    cont = (torch.rand(batch, seq, generator=gen) > 0.02).float().to(device)

    def loss_fn():
        noise = torch.rand(seq, batch, groups, classes, device=device).clamp(1e-6, 1 - 1e-6)
        return model(obs, act, rew, cont, noise)

    k.meta["compiled"] = True
    k.meta["compile_mode"] = mode or "default"
    k.meta["rssm_steps"] = seq
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v199: MADE, fp32


def _made(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 784 x 4096 + 2 x 4096^2 + 4096 x 784 = 40 M masked weights, 40 M MAC a sample
    # forward, x 4096 x 2 x 3 = 0.96 TFLOP a step (FlopCounter). fp32 with TF32 off: cuBLAS's
    # SGEMM at ~45-55 TFLOP/s (the H100's FP32 peak 67), ~18-22 ms, plus the masks' products
    # with the weights (~0.5 GB forward and backward), the ReLUs over 3 x 16.8 M values, the
    # loss and the fused AdamW over 40 M parameters (~1.1 GB): ~1 ms: ~19-23 ms. bf16 autocast:
    # the matmuls at ~500-650 TFLOP/s (4096 x 4096 x 4096 the largest), ~1.5-2 ms, the masked
    # weights' casts, the activations and AdamW ~2 GB, ~1 ms: ~3-4 ms against ~50 kernels,
    # ~80-85 % off
    torch, nn, F = k.torch, k.nn, k.F
    side, hidden, layers, batch = (8, 64, 3, 16) if k.quick else (28, 4096, 3, 4096)
    n = side * side

    class MaskedLinear(nn.Linear):  # the weight times a fixed 0/1 mask, each forward
        def __init__(self, ci: int, co: int, mask) -> None:
            super().__init__(ci, co)
            self.register_buffer("mask", mask.float(), persistent=False)

        def forward(self, x):
            return F.linear(x, self.weight * self.mask, self.bias)

    # MADE's degrees: the inputs 1..n in the natural order, each hidden unit's cycling over
    # 1..n-1; a hidden unit sees the inputs and units of degree <= its own, an output d only
    # the units of degree < d
    ins = torch.arange(1, n + 1)
    hid = torch.arange(hidden) % (n - 1) + 1
    masks = [hid[:, None] >= ins[None, :]]
    masks += [hid[:, None] >= hid[None, :] for _ in range(layers - 1)]
    masks.append(ins[:, None] > hid[None, :])

    class MADE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            sizes = [n, *[hidden] * layers, n]
            self.layers = nn.ModuleList(
                MaskedLinear(a, b, m) for a, b, m in zip(sizes[:-1], sizes[1:], masks, strict=True)
            )

        def forward(self, x):
            for layer in self.layers[:-1]:
                x = F.relu(layer(x))
            return self.layers[-1](x)

    model = MADE().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(199)
    # binarised images: thresholded smooth fields (blobs of ink on a blank page)
    field = torch.randn(batch, 1, side // 4, side // 4, generator=gen)
    field = F.interpolate(field, size=(side, side), mode="bilinear", align_corners=False)
    x = (field > 0.8).float().flatten(1).to(device)
    k.meta["precision"] = "bf16 autocast, TF32 off" if fixed else "fp32, TF32 off"
    k.meta["torch_flags"] = {"matmul_allow_tf32": False}
    loss = F.binary_cross_entropy_with_logits
    return k.train(opt, precision_loss(k, fixed, model, loss, x, x)), batch, model


# ---------------------------------------------------------------- v200: Whisper, one sync


def _whisper(k: Kit, fixed: bool, device: str, rank: int):
    # H100: the convolutions 1.55 GMAC a clip; 6 encoder blocks over 1,500 frames, 3.1 M
    # weights a frame each, 28 GMAC, and their attention (1,500 x 1,500) 14 GMAC; the decoder's
    # 224 tokens through 6 blocks of 3.7 M weights, the cross-attention's keys and values over
    # the 1,500 frames (4.7 GMAC) and the tied head (512 x 51865, 6 GMAC): ~62 GMAC a clip
    # forward, x 16 x 2 x 3 = 5.9 TFLOP a step (FlopCounter) of bf16 matmuls and flash
    # attention, ~12-15 ms; LayerNorms, GELUs and residuals over 24,000 frames of 512 (12.3 M
    # values; 49 M in the MLP) ~7 GB, the fp32 logits and cross-entropy over 3,584 x 51865 ~3
    # GB, the fused AdamW over 72 M parameters ~2 GB: ~5 ms. ~850 kernels (974 aten ops on the
    # meta device less the attention's math, plus autocast's casts; ~9-21 ms of host) against
    # ~18-22 ms of GPU. Planted, the sync after the optimizer lets the host start the
    # next step only when the GPU is idle: the first kernel, the first convolution over 16 x
    # 3,000 frames, starts ~20-50 us later and every encoder kernel (~20-500 us) outlasts its
    # launch, so the queue refills at once: ~0.2 % of the step
    torch, nn, F = k.torch, k.nn, k.F
    mels, frames, d, layers, heads, vocab, ctx, tokens, batch = (
        (8, 32, 32, 2, 4, 256, 32, 8, 2) if k.quick else (80, 3000, 512, 6, 8, 51865, 448, 224, 16)
    )

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.k = nn.Linear(d, d, bias=False)  # Whisper's keys have no bias

        def forward(self, x, src=None, causal=False):
            b, t, _ = x.shape
            src = x if src is None else src

            def split(y):
                return y.view(b, y.shape[1], heads, -1).transpose(1, 2)

            a = F.scaled_dot_product_attention(
                split(self.q(x)), split(self.k(src)), split(self.v(src)), is_causal=causal
            )
            return self.o(a.transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        def __init__(self, cross: bool) -> None:
            super().__init__()
            self.attn_ln, self.attn = nn.LayerNorm(d), Attention()
            self.cross_ln = nn.LayerNorm(d) if cross else None
            self.cross = Attention() if cross else None
            self.mlp_ln = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, audio=None):
            x = x + self.attn(self.attn_ln(x), causal=audio is not None)
            if self.cross is not None:
                x = x + self.cross(self.cross_ln(x), audio)
            return x + self.mlp(self.mlp_ln(x))

    class Whisper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv1d(mels, d, 3, padding=1)
            self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
            half = d // 2
            inv = torch.exp(-math.log(10000) / (half - 1) * torch.arange(half))
            t = torch.arange(frames // 2)[:, None] * inv[None, :]
            self.register_buffer("audio_pos", torch.cat([t.sin(), t.cos()], 1), persistent=False)
            self.encoder = nn.ModuleList(Block(False) for _ in range(layers))
            self.ln_post = nn.LayerNorm(d)
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(ctx, d))
            self.decoder = nn.ModuleList(Block(True) for _ in range(layers))
            self.ln = nn.LayerNorm(d)

        def forward(self, mel, ids):
            x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2) + self.audio_pos
            for blk in self.encoder:
                x = blk(x)
            audio = self.ln_post(x)
            y = self.tok(ids) + self.pos[: ids.shape[1]]
            for blk in self.decoder:
                y = blk(y, audio)
            return F.linear(self.ln(y), self.tok.weight)

    model = Whisper().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(200)
    # log-mel-like features: smooth in time and frequency, normalised as Whisper's (-1 to 1)
    mel = torch.randn(batch, mels, frames // 8, generator=gen)
    mel = F.interpolate(mel, size=frames, mode="linear").clamp(-1, 1).to(device)
    ids = torch.multinomial(
        torch.arange(1, vocab + 1, dtype=torch.float32) ** -1.1, batch * (tokens + 1), True,
        generator=gen,
    ).view(batch, tokens + 1).to(device)  # fmt: skip
    tot = torch.zeros((), device=device)
    seen: list[float] = []

    def step():
        with k.ac:
            logits = model(mel, ids[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if fixed:  # the log summed on the GPU
            tot.add_(loss.detach())
        else:  # one sync at the end of the step
            seen.append(loss.item())

    k.meta["syncs_per_step"] = 0 if fixed else 1
    return step, batch, model


BUILDERS = {
    "v193": _eva02,
    "v194": _gpt2,
    "v195": _demucs,
    "v196": _tabnet,
    "v197": _gemma2,
    "v198": _dreamer,
    "v199": _made,
    "v200": _whisper,
}
