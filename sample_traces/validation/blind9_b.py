"""The ninth blind part's cases v150-v154 (record_blind9.py merges them): a PVT-style segmenter
with a Semantic FPN whose OHEM loss, gradient-norm log and per-step mIoU read the GPU six times a
step on a step where host and GPU are about even, its forward host-heavy and its backward
GPU-heavy (host syncs, v150); a TempCNN-style pixel-wise crop classifier fed 153 MB of satellite
time series a step from pageable memory (pinning, v151); Barlow Twins-style self-supervised
pretraining whose two augmented views of each image are made per sample in numpy (random resized
crop, colour jitter, grayscale, Gaussian blur, solarisation; no BLAS in the workers) (DataLoader
workers, v152); an unfused Adam over the 366 parameter tensors (a weight per relation and layer)
of an R-GCN-style entity classifier (fused optimizer, v153); and a launch-bound Neural Cellular
Automata-style growing model unrolled 64 update steps in Python, its whole step captured in a
CUDA graph (v154). Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step,
model); planted and fixed build the same model from the same seed and differ only in the planted
thing. Sizes come from FLOP, byte and launch counts, not timings (nothing here ran on a GPU
before the part was fixed); each builder's comment gives its estimate of one step on an H100."""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, basic_block, cycled, whole_step_graph  # noqa: E402

CASES: dict[str, dict] = {
    "v150": {
        "name": "host_sync",
        "model": "PVT-style semantic segmenter (Pyramid Vision Transformer, Tiny widths: "
        "non-overlapping patch embeddings 4/2/2/2 with LayerNorm and learned positions, 4 "
        "stages of 64/128/320/512 ch, 2 pre-LayerNorm blocks each, spatial-reduction attention "
        "(keys and values from a strided sr x sr conv and LayerNorm, sr 8/4/2/1), 1/2/5/8 "
        "heads, MLP 8/8/4/4x with GELU, a LayerNorm after each stage; a Semantic FPN decoder: "
        "1x1 laterals to 256 ch, top-down nearest 2x sums, 3x3 smoothing convs, per level 1/1/2/3 "
        "3x3 convs 128 ch with GroupNorm, ReLU and bilinear 2x upsampling to 1/4, summed, 1x1 "
        "conv to 19 classes; logits bilinear to full size; OHEM cross-entropy (pixels over -log "
        "0.7, 255 ignored), gradients clipped at norm 1; a per-step confusion matrix for mIoU) "
        "on 512x512 images, batch 4, bf16 autocast, AdamW(fused=True): host and GPU about even, "
        "the forward host-heavy",
        "planted": "6 syncs per step: the OHEM hard pixels picked by a boolean mask (nonzero), "
        "the gradient norm read by .item() for the log, the confusion matrix made by a boolean "
        "mask and torch.bincount and copied to the host by .cpu() for the mIoU, and loss.item() "
        "for the log",
        "fix": "the same loss with the hard pixels as a 0/1 weight and their count kept on the "
        "GPU, the confusion matrix accumulated on the GPU by index_add_, the gradient norm and "
        "the loss summed on the GPU, none read in the step",
        "expected_fix": "host_sync",
    },
    "v151": {
        "name": "pin_memory",
        "model": "TempCNN-style pixel-wise crop-type classifier for satellite image time series "
        "(per pixel 45 acquisition dates x 13 spectral bands; 3 blocks of a width-5 Conv1d over "
        "time, 64 ch, BatchNorm, ReLU and dropout 0.2; flattened 64 x 45, Linear 2880-256, "
        "BatchNorm, ReLU, dropout, Linear to 20 crop types, cross-entropy) on 65536 pixels a "
        "step, bf16 autocast, AdamW(fused=True)",
        "planted": "153 MB per step (fp32 reflectance time series, int64 labels) in pageable "
        "host memory, copied with non_blocking=True (a synchronous staged copy)",
        "fix": "the same batches pinned once (page-locked), copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v152": {
        "name": "dataloader_workers",
        "model": "Barlow Twins-style self-supervised pretraining (ResNet-18-style backbone: a "
        "7x7 stride-2 stem 64 ch, max pool, basic blocks 64/128/256/512 ch, 2 per stage, "
        "BatchNorm; mean pool; projector 512-2048-2048-2048 with BatchNorm and ReLU; the "
        "cross-correlation of the two views' batch-normalised embeddings, its diagonal pulled "
        "to 1 and its off-diagonal to 0, weight 0.0051) on two 96x96 views of each image, batch "
        "128 images, bf16 autocast; each view made per sample in numpy in the Dataset from a "
        "stored 128x128 uint8 image: random resized crop (scale 0.2-1, bilinear), horizontal "
        "flip, colour jitter (brightness, contrast 0.4, saturation 0.2, random order, no hue, "
        "p 0.8), grayscale (p 0.2), 9-tap separable Gaussian blur (p 1.0 and 0.1), "
        "solarisation (p 0 and 0.2); elementwise numpy only, no BLAS",
        "planted": "DataLoader(num_workers=0): the augmentation runs in the training process",
        "fix": "DataLoader(num_workers=6, persistent_workers=True)",
        "expected_fix": "dataloader_workers",
    },
    "v153": {
        "name": "optimizer_fused",
        "model": "R-GCN-style relational graph network for entity classification (a synthetic "
        "knowledge graph of 16384 entities, 60 relations and their 60 inverses, 24 edges per "
        "relation and direction per 100 entities; 3 layers, each a self-loop weight plus one "
        "weight per relation, messages normalised by each entity's in-degree under the relation "
        "and summed by index_add_, a Python loop over the 120 relations as PyG's RGCNConv "
        "writes it; a featureless first layer of entity-by-32 weights, then 32-32 and 32-8 "
        "classes, ReLU; cross-entropy on 4096 labelled entities; 366 parameter tensors, 64 M "
        "parameters), the full graph each step, fp32",
        "planted": "Adam(foreach=False): a Python loop of small kernels per parameter",
        "fix": "Adam(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v154": {
        "name": "cuda_graphs",
        "model": "Neural Cellular Automata-style growing model (a 16-channel cell state, RGBA "
        "plus 12 hidden, on a 32x32 grid; each update step a fixed depthwise perception of "
        "identity and Sobel x/y filters to 48 ch, 1x1 convs 48-128, ReLU, 128-16 zero-initialised, "
        "a stochastic per-cell update mask (rate 0.5) and alive masking by a 3x3 max pool of "
        "alpha over 0.1 before and after; 64 update steps from a single seed cell unrolled in "
        "Python; MSE of RGBA to a 24x24 target padded to 32x32; static shapes), batch 4 "
        "grids, fp32, Adam(lr 2e-3, capturable=True) in both variants: the step is bound by "
        "launches, its GPU idle most of it",
        "planted": "eager: each of the step's small kernels launched from Python",
        "fix": "the whole step captured once with torch.cuda.graph and replayed (warm-up on a "
        "side stream first)",
        "expected_fix": "cuda_graphs",
    },
}


def _pvt(k: Kit, fixed: bool, device: str, rank: int):
    # H100: PVT-Tiny with the Semantic FPN ~33 GMAC an image at 512x512 (the FPN's 3x3 convs at
    # 1/4 most of the decoder's), x 4 x 2 x 3 = 0.8 TFLOP a step of bf16 matmuls and convs at
    # ~150-200 TFLOP/s: ~4-5 ms; ~6 GB of LayerNorm, GELU, GroupNorm (fp32 under autocast), FPN
    # and transpose traffic and the fp32 logits at 512x512 (4 x 19 x 262 K: 80 MB) through the
    # cross-entropy and argmax: ~3 ms; GPU ~8 ms (forward ~2.7, backward ~5.3). Host: ~270 ops
    # forward with the casts (~5 ms), ~350 autograd nodes backward (~2.5 ms), loss, clip and
    # metric ~1 ms, the fused AdamW: ~9 ms. Fixed, the next step's host forward runs under this
    # step's backward: ~9-10 ms. Planted, every step starts from an empty queue behind the
    # syncs: ~5 ms of host forward, then ~5.3 ms of backward, the clip, optimizer and metric
    # round trips: ~12 ms, ~15-25 % more.
    torch, nn, F = k.torch, k.nn, k.F
    img, batch, div, classes, fpn, head = (
        (64, 2, 8, 19, 16, 8) if k.quick else (512, 4, 1, 19, 256, 128)
    )
    dims = [max(8, c // div) for c in (64, 128, 320, 512)]
    heads, srs, ratios, depth = (1, 2, 5, 8), (8, 4, 2, 1), (8, 8, 4, 4), 2
    patches = (4, 2, 2, 2)
    if k.quick:
        heads = (1, 2, 1, 2)

    class Attention(nn.Module):  # spatial-reduction attention: keys and values from a strided conv
        def __init__(self, c: int, h: int, sr: int) -> None:
            super().__init__()
            self.h, self.sr = h, sr
            self.q, self.kv, self.proj = nn.Linear(c, c), nn.Linear(c, 2 * c), nn.Linear(c, c)
            if sr > 1:
                self.reduce, self.norm = nn.Conv2d(c, c, sr, sr), nn.LayerNorm(c)

        def forward(self, x, hh: int, ww: int):
            b, n, c = x.shape
            q = self.q(x).view(b, n, self.h, -1).transpose(1, 2)
            if self.sr > 1:
                r = self.reduce(x.transpose(1, 2).reshape(b, c, hh, ww))
                x = self.norm(r.flatten(2).transpose(1, 2))
            kk, v = self.kv(x).view(b, -1, 2, self.h, c // self.h).permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(q, kk, v)
            return self.proj(o.transpose(1, 2).reshape(b, n, c))

    class Block(nn.Module):
        def __init__(self, c: int, h: int, sr: int, ratio: int) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.attn = Attention(c, h, sr)
            self.mlp = nn.Sequential(nn.Linear(c, ratio * c), nn.GELU(), nn.Linear(ratio * c, c))

        def forward(self, x, hh: int, ww: int):
            x = x + self.attn(self.n1(x), hh, ww)
            return x + self.mlp(self.n2(x))

    class Stage(nn.Module):  # non-overlapping patch embedding, learned positions, blocks
        def __init__(self, ci: int, co: int, i: int, side: int) -> None:
            super().__init__()
            self.embed, self.en = nn.Conv2d(ci, co, patches[i], patches[i]), nn.LayerNorm(co)
            self.pos = nn.Parameter(torch.randn(1, side * side, co) * 0.02)
            self.blocks = nn.ModuleList(
                [Block(co, heads[i], srs[i], ratios[i]) for _ in range(depth)]
            )
            self.norm = nn.LayerNorm(co)

        def forward(self, x):  # (b, ci, H, W) -> (b, co, H / p, W / p)
            e = self.embed(x)
            b, c, hh, ww = e.shape
            t = self.en(e.flatten(2).transpose(1, 2)) + self.pos
            for blk in self.blocks:
                t = blk(t, hh, ww)
            return self.norm(t).transpose(1, 2).reshape(b, c, hh, ww)

    def cgr(ci: int, up: bool):  # the semantic head's 3x3 conv, GroupNorm, ReLU (and 2x up)
        mods = [nn.Conv2d(ci, head, 3, 1, 1, bias=False), nn.GroupNorm(min(32, head), head)]
        mods.append(nn.ReLU())
        if up:
            mods.append(nn.Upsample(scale_factor=2.0, mode="bilinear", align_corners=False))
        return mods

    class PVTSemanticFPN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            ins, sides = [3, *dims[:-1]], [img // 4, img // 8, img // 16, img // 32]
            self.stages = nn.ModuleList([Stage(ins[i], dims[i], i, sides[i]) for i in range(4)])
            self.lateral = nn.ModuleList([nn.Conv2d(c, fpn, 1) for c in dims])
            self.smooth = nn.ModuleList([nn.Conv2d(fpn, fpn, 3, 1, 1) for _ in dims])
            self.heads = nn.ModuleList()
            for i in range(4):  # level i: max(1, i) conv steps, each but 1/4's upsampling 2x
                mods = []
                for j in range(max(1, i)):
                    mods += cgr(fpn if j == 0 else head, i > 0)
                self.heads.append(nn.Sequential(*mods))
            self.cls = nn.Conv2d(head, classes, 1)

        def forward(self, x):
            feats, f = [], x
            for st in self.stages:
                f = st(f)
                feats.append(f)
            lat = [conv(f) for conv, f in zip(self.lateral, feats, strict=True)]
            for i in (2, 1, 0):  # top-down
                lat[i] = lat[i] + F.interpolate(lat[i + 1], scale_factor=2.0, mode="nearest")
            outs = [h(s(p)) for h, s, p in zip(self.heads, self.smooth, lat, strict=True)]
            return self.cls(outs[0] + outs[1] + outs[2] + outs[3])

    model = PVTSemanticFPN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    params = list(model.parameters())

    # targets made once: per image a label map of random classes on 32x32-pixel cells with a
    # band of ignored (255) pixels where two cells meet, as annotation borders are
    gen = torch.Generator().manual_seed(150)
    x = torch.randn(batch, 3, img, img, generator=gen)
    cells = torch.randint(0, classes, (batch, 1, img // 32 + 1, img // 32 + 1), generator=gen)
    y = F.interpolate(cells.float(), scale_factor=32, mode="nearest")[:, 0, :img, :img].long()
    y[:, :, 30::32] = 255
    x, y = x.to(device), y.to(device)
    thresh = -math.log(0.7)
    valid = y != 255
    ones = torch.ones(valid.numel(), dtype=torch.long, device=device)
    conf_gpu = torch.zeros(classes * classes + 1, dtype=torch.long, device=device)
    tot = torch.zeros(2, device=device)  # the fixed variant's running loss and gradient norm
    conf_host = [0]
    logged: list[tuple[float, float, float]] = []

    def step():
        with k.ac:
            out = model(x)
        logits = F.interpolate(out.float(), size=(img, img), mode="bilinear", align_corners=False)
        pix = F.cross_entropy(logits, y, ignore_index=255, reduction="none").flatten()
        if fixed:  # OHEM with the hard pixels as a 0/1 weight, their count on the GPU
            hard = (pix > thresh).float()
            n = hard.sum()
            loss = torch.where(n > 0, (pix * hard).sum() / n.clamp(min=1), pix.mean())
        else:  # planted: the hard pixels picked by a boolean mask (a nonzero, a sync)
            sel = pix[pix > thresh]
            loss = sel.mean() if sel.numel() else pix.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if not fixed:
            gnorm = norm.item()  # sync: the gradient norm for the log
        opt.step()
        pred = logits.detach().argmax(1)
        if fixed:  # the confusion matrix accumulated on the GPU (ignored pixels in a last bin)
            idx = torch.where(valid, y * classes + pred, classes * classes)
            conf_gpu.index_add_(0, idx.flatten(), ones)
            tot.add_(torch.stack([loss.detach(), norm.detach()]))
        else:  # planted: a boolean mask (sync), torch.bincount (sync), .cpu() (sync)
            idx = (y * classes + pred)[valid]
            conf = torch.bincount(idx, minlength=classes * classes).cpu().numpy()
            conf_host[0] = conf_host[0] + conf.reshape(classes, classes)
            m = conf_host[0]
            inter, union = m.diagonal(), m.sum(0) + m.sum(1) - m.diagonal()
            miou = float((inter[union > 0] / union[union > 0]).mean())
            logged.append((loss.item(), gnorm, miou))  # sync: the loss for the log

    k.meta["syncs_per_step"] = 0 if fixed else 6
    k.meta["ignored_pixels"] = int((~valid).sum())
    return step, batch, model


def _tempcnn(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per pixel 2.0 M MACs of convs (13-64 and twice 64-64, width 5, over 45 dates) and
    # 0.74 M of the Linear 2880-256: 2.8 M MACs, x 65536 pixels x 2 x 3 = 1.1 TFLOP a step of
    # bf16 Conv1d and matmul, ~6-9 ms; each conv's output 65536 x 64 x 45 = 189 M values (377
    # MB in bf16) through BatchNorm, ReLU and dropout, ~6.5 GB a block forward and backward:
    # ~20 GB, ~8 ms: ~15-18 ms on the GPU; ~60 kernels (~1 ms of host). The 153 MB copied from
    # pageable memory: ~15-19 ms (v106: 65.5 MB ~8 ms), the host blocked and the GPU idle
    # meanwhile; pinned, ~4-6 ms on the copy engine, the host free: ~33 ms planted, ~21 fixed.
    torch, nn, F = k.torch, k.nn, k.F
    pixels, dates, bands, width, crops = (64, 12, 4, 8, 5) if k.quick else (65536, 45, 13, 64, 20)

    def block(ci: int):
        return [
            nn.Conv1d(ci, width, 5, padding=2),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.Dropout(0.2),
        ]

    class TempCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.Sequential(*block(bands), *block(width), *block(width))
            self.dense = nn.Sequential(
                nn.Linear(width * dates, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.2)
            )
            self.out = nn.Linear(256, crops)

        def forward(self, x):  # (pixels, dates, bands) -> (pixels, crops) logits
            return self.out(self.dense(self.convs(x.transpose(1, 2)).flatten(1)))

    model = TempCNN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(151)
    pool = []
    for _ in range(2):  # 2 host batches, each used in turn: smooth seasonal reflectance curves
        t = torch.linspace(0, 1, dates)
        phase = torch.rand(pixels, 1, bands, generator=gen)
        curve = 0.3 + 0.2 * torch.sin(2 * math.pi * (t[None, :, None] + phase))
        series = curve + 0.02 * torch.randn(pixels, dates, bands, generator=gen)
        pool.append((series.contiguous(), torch.randint(0, crops, (pixels,), generator=gen)))
    next_batch = cycled(pool, device, pinned=fixed and k.cuda)

    def loss_fn():
        series, y = next_batch()
        with k.ac:
            return F.cross_entropy(model(series).float(), y)

    k.meta["bytes_per_step"] = pixels * (dates * bands * 4 + 8)
    k.meta["pinned"] = fixed
    return k.train(opt, loss_fn), pixels, model


class TwoViews:
    """v152's dataset: ``pool`` stored ``side`` x ``side`` uint8 RGB images (smooth colour fields
    with a few discs and bars, made once); ``1_000_000`` virtual samples cycling over them. Per
    sample (numpy, seeded by the index; elementwise work, slicing and gathers, no BLAS) two
    views of ``out`` x ``out``, Barlow Twins' pair of augmentations: a random resized crop
    (scale 0.2-1, aspect 3/4-4/3, bilinear), a horizontal flip (p 0.5), colour jitter (p 0.8:
    brightness 0.4, contrast 0.4, saturation 0.2 in a random order), grayscale (p 0.2), a 9-tap
    separable Gaussian blur of sigma 0.1-2 (p 1.0 for the first view, 0.1 for the second) and
    solarisation (p 0 and 0.2). Returns a (2, 3, out, out) uint8 tensor."""

    def __init__(self, pool: int, side: int, out: int) -> None:
        import numpy as np

        rng = np.random.default_rng(152)
        self.out = out
        yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
        images = []
        for _ in range(pool):
            img = np.zeros((side, side, 3), np.float32)
            for c in range(3):  # a smooth colour field
                a, b, p = rng.uniform(0.5, 3, 2), rng.uniform(0, 1), rng.uniform(0, 6.3)
                img[..., c] = 0.5 + 0.3 * np.sin(a[0] * 6.3 * xx + a[1] * 6.3 * yy + p) * b
            for _ in range(4):  # discs and bars of flat colour
                cy, cx, r = [*rng.uniform(0.1, 0.9, 2).tolist(), rng.uniform(0.05, 0.25)]
                shape = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
                if rng.uniform() < 0.5:
                    shape = (np.abs(yy - cy) < r / 3) & (np.abs(xx - cx) < r * 1.5)
                img[shape] = rng.uniform(0, 1, 3)
            images.append((np.clip(img, 0, 1) * 255).astype(np.uint8))
        self.images = np.stack(images)

    def __len__(self) -> int:
        return 1_000_000

    def _view(self, img, rng, blur_p: float, solar_p: float):
        import numpy as np

        side, out = img.shape[0], self.out
        for _ in range(10):  # random resized crop
            area = side * side * rng.uniform(0.2, 1.0)
            ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
            if 0 < w <= side and 0 < h <= side:
                break
        else:
            w = h = side
        y0, x0 = int(rng.integers(0, side - h + 1)), int(rng.integers(0, side - w + 1))
        ys = np.clip(y0 + (np.arange(out) + 0.5) * h / out - 0.5, 0, side - 1)
        xs = np.clip(x0 + (np.arange(out) + 0.5) * w / out - 0.5, 0, side - 1)
        if rng.uniform() < 0.5:  # horizontal flip
            xs = xs[::-1]
        yi, xi = ys.astype(np.int64), xs.astype(np.int64)
        yj, xj = np.minimum(yi + 1, side - 1), np.minimum(xi + 1, side - 1)
        wy, wx = (ys - yi).astype(np.float32)[:, None, None], (xs - xi).astype(np.float32)[:, None]
        src = img.astype(np.float32) / 255
        top = src[yi][:, xi] * (1 - wx) + src[yi][:, xj] * wx
        bottom = src[yj][:, xi] * (1 - wx) + src[yj][:, xj] * wx
        v = top * (1 - wy) + bottom * wy  # out x out x 3

        def gray(a):
            return a[..., 0] * 0.299 + a[..., 1] * 0.587 + a[..., 2] * 0.114

        if rng.uniform() < 0.8:  # colour jitter, in a random order
            for op in rng.permutation(3):
                if op == 0:
                    v = v * rng.uniform(0.6, 1.4)
                elif op == 1:
                    m = gray(v).mean()
                    v = (v - m) * rng.uniform(0.6, 1.4) + m
                else:
                    g = gray(v)[..., None]
                    v = (v - g) * rng.uniform(0.8, 1.2) + g
                v = np.clip(v, 0, 1)
        if rng.uniform() < 0.2:  # grayscale
            v = np.repeat(gray(v)[..., None], 3, axis=2)
        if rng.uniform() < blur_p:  # separable 9-tap Gaussian blur, as shifted weighted sums
            sigma = rng.uniform(0.1, 2.0)
            taps = np.exp(-(np.arange(-4, 5) ** 2) / (2 * sigma * sigma))
            taps = (taps / taps.sum()).astype(np.float32)
            p = np.pad(v, ((4, 4), (0, 0), (0, 0)), mode="reflect")
            v = sum(taps[i] * p[i : i + out] for i in range(9))
            p = np.pad(v, ((0, 0), (4, 4), (0, 0)), mode="reflect")
            v = sum(taps[i] * p[:, i : i + out] for i in range(9))
        if rng.uniform() < solar_p:  # solarisation
            v = np.where(v >= 0.5, 1 - v, v)
        return (np.clip(v, 0, 1) * 255).astype(np.uint8).transpose(2, 0, 1)

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        img = self.images[i % len(self.images)]
        views = np.stack([self._view(img, rng, 1.0, 0.0), self._view(img, rng, 0.1, 0.2)])
        return torch.from_numpy(views)


def _barlow_twins(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    torch, nn = k.torch, k.nn
    # 96x96: ResNet-18 0.33 GMAC an image, 256 views x 2 x 3 = 0.51 TFLOP a step, the projector
    # ~0.01, ~3-4 ms of bf16 NCHW convs; ~3 GB of BatchNorm/ReLU traffic (the stem's 256 x 64 x
    # 48 x 48 maps: 75 MB each), ~1.5 ms; ~250 kernels (~3.5 ms of host): ~6 ms on the GPU.
    # Loading: ~2.5 ms an image (two views) on the 2-core CPU this was written on, so ~1.5-2 ms
    # on the device: ~200-250 ms a batch with 0 workers; ~35-45 ms spread over 6, still the
    # bound over ~6 ms of GPU: ~80 % off the step.
    side, out, batch, workers, pool, div, proj = (
        (40, 32, 4, 2, 8, 16, 64) if k.quick else (128, 96, 128, 6, 256, 1, 2048)
    )
    w = [max(4, c // div) for c in (64, 128, 256, 512)]

    def cbn(ci: int, co: int, s: int = 1, ks: int = 3):
        return [nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co)]

    class BarlowTwins(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list = [*cbn(3, w[0], 2, 7), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
            ci = w[0]
            for i, co in enumerate(w):
                layers += [basic_block(ci, co, 1 if i == 0 else 2), basic_block(co, co, 1)]
                ci = co
            self.backbone = nn.Sequential(*layers)
            self.projector = nn.Sequential(
                nn.Linear(ci, proj, bias=False), nn.BatchNorm1d(proj), nn.ReLU(),
                nn.Linear(proj, proj, bias=False), nn.BatchNorm1d(proj), nn.ReLU(),
                nn.Linear(proj, proj, bias=False),
            )  # fmt: skip

        def forward(self, x):
            return self.projector(self.backbone(x).mean((2, 3)))

    model = BarlowTwins().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True}
    loader = DataLoader(
        TwoViews(pool, side, out), batch_size=batch, shuffle=True, drop_last=True,
        **(kw if fixed else {}),
    )  # fmt: skip
    it = iter(loader)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device)[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225], device=device)[:, None, None]

    def loss_fn():
        views = next(it).to(device)  # (batch, 2, 3, out, out) uint8
        x = (views.transpose(0, 1).flatten(0, 1).float() / 255 - mean) / std
        with k.ac:
            z = model(x).float()
        z1, z2 = z[:batch], z[batch:]
        z1 = (z1 - z1.mean(0)) / z1.std(0)
        z2 = (z2 - z2.mean(0)) / z2.std(0)
        c = z1.T @ z2 / batch  # the views' cross-correlation
        on = (torch.diagonal(c) - 1).pow(2).sum()
        off = c.pow(2).sum() - torch.diagonal(c).pow(2).sum()
        return on + 0.0051 * off

    k.meta["num_workers"] = workers if fixed else 0
    k.meta["views_per_sample"] = 2
    return k.train(opt, loss_fn), batch, model


def _rgcn(k: Kit, fixed: bool, device: str, rank: int):
    # H100: the GPU idles: per relation and layer a row gather (an index_select and a small
    # matmul after the first layer), a scale and an index_add_ over ~3,900 edges, each kernel a
    # few microseconds; 3 layers x 121 weights x ~4-5 ops: ~1,600 launches forward at ~8 us
    # (~13 ms of host) and ~2,000 backward (~9 ms). The planted loop: ~7 kernels and ~65-85 us
    # of host per tensor over 366 tensors, ~25-30 ms: ~50 ms planted, ~23 ms with the fused
    # Adam's ~10 multi-tensor launches (its ~64 M parameters, the first layer's 120 entity-by-32
    # tables most of them: ~1 GB of traffic, ~0.5 ms).
    torch, nn, F = k.torch, k.nn, k.F
    entities, relations, per100, hidden, classes, labelled = (
        (64, 4, 8, 8, 3, 32) if k.quick else (16384, 60, 24, 32, 8, 4096)
    )
    gen = torch.Generator().manual_seed(153)
    per_rel = entities * per100 // 100
    src, dst = [], []
    for _ in range(relations):  # each relation's edges, then their inverses as relations too
        s = torch.randint(0, entities, (per_rel,), generator=gen)
        d = torch.randint(0, entities, (per_rel,), generator=gen)
        src.append(s)
        dst.append(d)
    src, dst = src + dst, dst + src  # 2 x relations edge lists
    norms = []
    for d in dst:  # 1 / (the entity's in-degree under the relation), per edge
        deg = torch.zeros(entities).index_add_(0, d, torch.ones(len(d)))
        norms.append((1 / deg[d])[:, None])
    src = [s.to(device) for s in src]
    dst = [d.to(device) for d in dst]
    norms = [n.to(device) for n in norms]
    n_rel = len(src)

    class RGCNLayer(nn.Module):
        def __init__(self, ci: int, co: int, featureless: bool) -> None:
            super().__init__()
            self.featureless = featureless
            scale = 1 / math.sqrt(ci if not featureless else co)
            self.self_w = nn.Parameter(torch.randn(ci, co) * scale)
            self.rel_w = nn.ParameterList(
                [nn.Parameter(torch.randn(ci, co) * scale) for _ in range(n_rel)]
            )
            self.bias = nn.Parameter(torch.zeros(co))

        def forward(self, h):  # h: (entities, ci), or None for the featureless layer
            out = (self.self_w if self.featureless else h @ self.self_w) + self.bias
            for r, w in enumerate(self.rel_w):  # one message pass per relation
                msg = (
                    w.index_select(0, src[r]) if self.featureless else h.index_select(0, src[r]) @ w
                )
                out = out.index_add_(0, dst[r], msg * norms[r])
            return out

    class RGCN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = RGCNLayer(entities, hidden, True)
            self.l2 = RGCNLayer(hidden, hidden, False)
            self.l3 = RGCNLayer(hidden, classes, False)

        def forward(self):
            return self.l3(F.relu(self.l2(F.relu(self.l1(None)))))

    model = RGCN().to(device)
    kw = {"fused": True} if fixed and k.cuda else {"foreach": fixed}
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, **kw)
    train_idx = torch.randperm(entities, generator=gen)[:labelled].to(device)
    labels = torch.randint(0, classes, (labelled,), generator=gen).to(device)

    def loss_fn():
        return F.cross_entropy(model()[train_idx], labels)

    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "Adam(fused=True)" if fixed else "Adam(foreach=False)"
    return k.train(opt, loss_fn), labelled, model


def _nca(k: Kit, fixed: bool, device: str, rank: int):
    # 64 update steps of ~14 small ops forward (max pool, compare, depthwise perception conv,
    # two 1x1 convs with bias, ReLU, rand, compare, casts, multiplies, add, the second max pool
    # and the alive product) and ~12 kernels backward: ~1,700 kernels a step, ~14-17 ms of host
    # launches (~8-10 us forward, ~5 backward); each kernel ~2-4 us of GPU (4 x 32 x 32 cells,
    # 128 hidden: 0.5 M values), so a replayed graph ~4-5 ms: ~65-75 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    grid, pad, channels, hidden, steps, batch = (
        (12, 2, 16, 32, 6, 2) if k.quick else (32, 4, 16, 128, 64, 4)
    )

    class NCA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            ident = torch.tensor([[0.0, 0, 0], [0, 1, 0], [0, 0, 0]])
            sobel = torch.tensor([[-1.0, 0, 1], [-2, 0, 2], [-1, 0, 1]]) / 8
            kernels = torch.stack([ident, sobel, sobel.T])  # (3, 3, 3)
            self.register_buffer("perceive_w", kernels.repeat(channels, 1, 1)[:, None])
            self.fc1 = nn.Conv2d(3 * channels, hidden, 1)
            self.fc2 = nn.Conv2d(hidden, channels, 1, bias=False)
            nn.init.zeros_(self.fc2.weight)  # "do nothing" at first, as the original

        def alive(self, x):
            return F.max_pool2d(x[:, 3:4], 3, 1, 1) > 0.1

        def forward(self, x):  # (b, channels, grid, grid) -> the state after `steps` updates
            for _ in range(steps):
                pre = self.alive(x)
                p = F.conv2d(x, self.perceive_w, padding=1, groups=channels)
                dx = self.fc2(F.relu(self.fc1(p)))
                fire = (torch.rand(x.shape[0], 1, grid, grid, device=x.device) <= 0.5).float()
                x = x + dx * fire
                x = x * (pre & self.alive(x)).float()
            return x

    model = NCA().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, capturable=k.cuda)
    gen = torch.Generator().manual_seed(154)
    inner = grid - 2 * pad  # a target: a soft disc of colour with an alpha channel
    yy, xx = torch.meshgrid(
        torch.linspace(-1, 1, inner), torch.linspace(-1, 1, inner), indexing="ij"
    )
    alpha = (1 - (yy**2 + xx**2)).clamp(0, 1) ** 0.5
    rgb = torch.rand(3, 1, 1, generator=gen) * (0.6 + 0.4 * torch.cos(3 * (xx + yy)))
    target = F.pad(torch.cat([rgb * alpha, alpha[None]]), (pad,) * 4)  # premultiplied RGBA
    target = target[None].expand(batch, -1, -1, -1).contiguous().to(device)
    seed = torch.zeros(batch, channels, grid, grid)
    seed[:, 3:, grid // 2, grid // 2] = 1.0  # one live cell in the middle
    seed = seed.to(device)

    def loss_fn():
        return F.mse_loss(model(seed)[:, :4], target)

    step = whole_step_graph(k, opt, loss_fn, k.train(opt, loss_fn), fixed)
    k.meta["optimizer"] = "Adam(capturable=True)"
    k.meta["update_steps"] = steps
    return step, batch, model


BUILDERS = {
    "v150": _pvt,
    "v151": _tempcnn,
    "v152": _barlow_twins,
    "v153": _rgcn,
    "v154": _nca,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
