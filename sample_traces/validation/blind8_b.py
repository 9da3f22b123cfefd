"""The eighth blind part's cases v135-v139 (record_blind8.py merges them): bf16 autocast on an
NCHW ESRGAN-style RRDB super-resolution net with TF32 on for matmuls and cuDNN in both variants
(v135), cudnn.benchmark on the factorised 3-D convolutions of an R(2+1)D video classifier (v136),
a CenterNet-style detector whose loss reads the GPU three times a step on a step where host and
GPU are about even (host syncs, v137), a SampleCNN-style raw-waveform tagger fed 60 MB a step
from pageable memory (pinning, v138) and a PANNs-style audio tagger fed log-mel spectrograms made
per sample in numpy, with SpecAugment (DataLoader workers, v139). Each builder: (kit, fixed,
device, rank) -> (step_fn, samples_per_step, model); planted and fixed build the same model from
the same seed and differ only in the planted thing. Sizes come from FLOP, byte and launch counts,
not timings (nothing here ran on a GPU before the part was fixed); each builder's comment gives
its estimate of one step on an H100."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, basic_block, cycled, precision_loss  # noqa: E402

CASES: dict[str, dict] = {
    "v135": {
        "name": "mixed_precision",
        "model": "ESRGAN-style super-resolution generator, PSNR-oriented stage (a 3x3 conv 3-64; "
        "6 RRDBs, each 3 residual dense blocks of 5 3x3 convs, growth 32, every conv on the "
        "channel concatenation of the block input and all earlier outputs, LeakyReLU 0.2, "
        "residuals scaled by 0.2, no BatchNorm; a trunk conv; 4x upsampling by two nearest 2x "
        "interpolations each followed by a 3x3 conv 64 ch and LeakyReLU; a 3x3 HR conv and a "
        "conv to 3 ch; NCHW; L1 loss) on 48x48 low-resolution patches to 192x192, batch 32, "
        "fp32 with TF32 on (matmuls and cuDNN) in both variants",
        "planted": "fp32 with TF32",
        "fix": "bf16 autocast (TF32 still on)",
        "expected_fix": "mixed_precision",
    },
    "v136": {
        "name": "cudnn_benchmark",
        "model": "R(2+1)D-18-style video classifier (every 3x3x3 convolution factorised into a "
        "1x3x3 spatial Conv3d, BatchNorm and ReLU, then a 3x1x1 temporal Conv3d, the middle "
        "width chosen to keep the 3x3x3 parameter count; a 1x7x7 / 3x1x1 stem 3-45-64 ch "
        "strided 2 in space; 4 stages of 2 residual basic blocks, 64/128/256/512 ch, stages 2-4 "
        "strided 2 in time and space, 1x1x1 conv-BN shortcuts; BatchNorm, ReLU; global average "
        "pool, 400 classes) on clips of 16 RGB frames of 112x112, batch 8, fp32 (cuDNN TF32)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v137": {
        "name": "host_sync",
        "model": "CenterNet-style keypoint detector (ResNet-18-style backbone: a strided 7x7 "
        "stem 64 ch, max pool, basic blocks 64/128/256/512 ch, 2 per stage, BatchNorm; 3 "
        "transposed 4x4 convs 256/128/64 ch with BatchNorm and ReLU back to stride 4; heads "
        "of a 3x3 conv 64 ch, ReLU and a 1x1 conv: an 80-class centre heatmap, box sizes and "
        "centre offsets at 64x64; CenterNet's penalty-reduced focal loss on the heatmap, L1 on "
        "the sizes (weight 0.1) and offsets at the object centres, each normalised by the "
        "number of centres; targets pre-made on the GPU, 4-24 objects an image) on 256x256 "
        "images, batch 24, bf16 autocast: host and GPU about even, the GPU not saturated",
        "planted": "3 syncs per step: the number of heatmap peaks read by .item() to normalise "
        "the loss, the object centres found by torch.nonzero to pick the size and offset "
        "predictions there, and loss.item() for the log",
        "fix": "the same loss with the peak count clamped on the GPU, the centres applied as a "
        "0/1 weight map, the log summed on the GPU, never read in the step",
        "expected_fix": "host_sync",
    },
    "v138": {
        "name": "pin_memory",
        "model": "SampleCNN-style raw-waveform music tagger (a strided Conv1d of width 3, stride "
        "3, 1-64 ch, BatchNorm, ReLU; 9 blocks of a width-3 Conv1d, BatchNorm, ReLU and max "
        "pool 3, 64/64/128/128/128/128/128/128/256 ch, 19683 frames down to 1; a 1x1 Conv1d "
        "256 ch, BatchNorm, ReLU; mean over time, a Linear 256-50 tags, binary cross-entropy) "
        "on clips of 59049 fp32 samples (3.7 s at 16 kHz), batch 256, bf16 autocast",
        "planted": "60.5 MB per step (fp32 waveforms, fp32 tag vectors) in pageable host memory, "
        "copied with non_blocking=True (a synchronous staged copy)",
        "fix": "the same batches pinned once (page-locked), copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v139": {
        "name": "dataloader_workers",
        "model": "PANNs-style CNN10 audio tagger (BatchNorm over the 64 mel bins; 4 conv blocks "
        "of two 3x3 convs 64/128/256/512 ch with BatchNorm and ReLU, 2x2 average pools; mean "
        "over the mel axis, max plus mean over time; Linear 512-512, ReLU, 527 tags, binary "
        "cross-entropy) on 4 s clips at 32 kHz, batch 32, bf16 autocast; each clip made per "
        "sample in numpy in the Dataset: a random 4 s crop of a stored 6 s int16 clip, random "
        "gain, a second clip mixed in at a random SNR (their tags merged), framed in 1024-point "
        "Hann windows every 320 samples, FFT power, 64 mel filters, log, SpecAugment (2 time "
        "masks of up to 64 frames, 2 frequency masks of up to 8 bins)",
        "planted": "DataLoader(num_workers=0): the feature extraction runs in the training process",
        "fix": "DataLoader(num_workers=6, persistent_workers=True)",
        "expected_fix": "dataloader_workers",
    },
}


def _esrgan(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per low-resolution pixel 6 RRDBs x 3 RDBs x 240 K MACs (the 5 dense convs) = 4.3 M
    # MACs, plus the trunk, the two upsampling convs at 96x96 and 192x192, the HR conv and the
    # output conv; 32 patches of 48x48: 0.42 TMAC fwd, 2.5 TFLOP a step (FlopCounter). TF32 at
    # ~150 TFLOP/s: ~17 ms, plus ~25 GB of fp32 concatenation, LeakyReLU and residual traffic
    # (~10 ms): ~27-30 ms; bf16 at ~300: ~9 ms of convs and ~5 ms of traffic if cuDNN's NCHW bf16
    # kernels keep pace (~15 ms). ~1,000 kernels fwd+bwd (~10-12 ms of host): GPU-bound both.
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    lr, nf, gc, blocks, batch = (8, 8, 4, 1, 2) if k.quick else (48, 64, 32, 6, 32)

    def lrelu(x):
        return F.leaky_relu(x, 0.2)

    class RDB(nn.Module):  # residual dense block: each conv sees every earlier output
        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.ModuleList(
                [nn.Conv2d(nf + i * gc, gc if i < 4 else nf, 3, 1, 1) for i in range(5)]
            )

        def forward(self, x):
            feats = [x]
            for conv in self.convs[:4]:
                feats.append(lrelu(conv(torch.cat(feats, 1))))
            return x + 0.2 * self.convs[4](torch.cat(feats, 1))

    class RRDB(nn.Module):  # residual in residual: 3 dense blocks, scaled residual
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(RDB(), RDB(), RDB())

        def forward(self, x):
            return x + 0.2 * self.body(x)

    class ESRGAN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = nn.Conv2d(3, nf, 3, 1, 1)
            self.body = nn.Sequential(*[RRDB() for _ in range(blocks)])
            self.trunk = nn.Conv2d(nf, nf, 3, 1, 1)
            self.up1, self.up2 = nn.Conv2d(nf, nf, 3, 1, 1), nn.Conv2d(nf, nf, 3, 1, 1)
            self.hr, self.last = nn.Conv2d(nf, nf, 3, 1, 1), nn.Conv2d(nf, 3, 3, 1, 1)

        def forward(self, x):
            f = self.first(x)
            f = f + self.trunk(self.body(f))
            f = lrelu(self.up1(F.interpolate(f, scale_factor=2.0, mode="nearest")))
            f = lrelu(self.up2(F.interpolate(f, scale_factor=2.0, mode="nearest")))
            return self.last(lrelu(self.hr(f)))

    model = ESRGAN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(135)
    hr = torch.rand(batch, 3, lr // 4, lr // 4, generator=gen)  # smooth high-resolution targets
    hr = F.interpolate(hr, size=(4 * lr, 4 * lr), mode="bicubic", align_corners=False)
    hr = (hr + 0.05 * torch.randn(hr.shape, generator=gen)).clamp(0, 1)
    low = F.interpolate(hr, size=(lr, lr), mode="bicubic", align_corners=False, antialias=True)
    x, target = low.contiguous().to(device), hr.contiguous().to(device)

    loss_fn = precision_loss(k, fixed, model, F.l1_loss, x, target)

    k.meta["precision"] = "bf16 autocast, TF32 on" if fixed else "fp32, TF32 on"
    k.meta["rrdb_blocks"] = blocks
    return k.train(opt, loss_fn), batch, model


def _r2plus1d(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 40.6 GMAC fwd a clip (FlopCounter; the stage-1 and stage-2 factorised convs most of
    # it), x 8 clips x 2 x 3 = 1.95 TFLOP a step; fp32 3-D convs with TF32 at ~60-100 TFLOP/s:
    # ~20-30 ms, plus ~12 GB of BatchNorm/ReLU traffic (the 144-ch middle maps of stage 1 at
    # 16x56x56: 115 MB each, ~5 ms): ~25-35 ms. ~290 kernels fwd+bwd (~4 ms of host): GPU-bound.
    # 37 Conv3d layers of 25 distinct shapes (fwd, and each its two backward convolutions): 3-D
    # convolutions are where cuDNN's heuristic choice and its benchmarked one can differ most.
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cudnn.benchmark = fixed
    frames, side, batch, div, classes = (4, 16, 2, 8, 10) if k.quick else (16, 112, 8, 1, 400)
    widths = [max(4, c // div) for c in (64, 128, 256, 512)]
    stem_mid = max(4, 45 // div)

    def mid(ci: int, co: int) -> int:  # the (2+1)D middle width: as many weights as 3x3x3
        return (ci * co * 27) // (ci * 9 + 3 * co)

    def conv2plus1d(ci: int, co: int, m: int, s: int = 1):
        return [
            nn.Conv3d(ci, m, (1, 3, 3), (1, s, s), (0, 1, 1), bias=False), nn.BatchNorm3d(m),
            nn.ReLU(), nn.Conv3d(m, co, (3, 1, 1), (s, 1, 1), (1, 0, 0), bias=False),
        ]  # fmt: skip

    class Block(nn.Module):
        def __init__(self, ci: int, co: int, s: int) -> None:
            super().__init__()
            m = mid(ci, co)
            self.body = nn.Sequential(
                *conv2plus1d(ci, co, m, s), nn.BatchNorm3d(co), nn.ReLU(),
                *conv2plus1d(co, co, m), nn.BatchNorm3d(co),
            )  # fmt: skip
            self.short = (
                nn.Sequential(nn.Conv3d(ci, co, 1, s, bias=False), nn.BatchNorm3d(co))
                if (s > 1 or ci != co)
                else nn.Identity()
            )

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    class R2Plus1D(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv3d(3, stem_mid, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False),
                nn.BatchNorm3d(stem_mid), nn.ReLU(),
                nn.Conv3d(stem_mid, widths[0], (3, 1, 1), 1, (1, 0, 0), bias=False),
                nn.BatchNorm3d(widths[0]), nn.ReLU(),
            )  # fmt: skip
            layers, ci = [], widths[0]
            for i, co in enumerate(widths):
                s = 1 if i == 0 else 2
                layers += [Block(ci, co, s), Block(co, co, 1)]
                ci = co
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(ci, classes)

        def forward(self, x):  # (b, 3, frames, side, side)
            return self.fc(self.layers(self.stem(x)).mean((2, 3, 4)))

    model = R2Plus1D().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, frames, side, side, device=device)
    y = torch.randint(0, classes, (batch,), device=device)
    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["conv3d_layers"] = sum(isinstance(m, nn.Conv3d) for m in model.modules())
    return k.train(opt, lambda: F.cross_entropy(model(x), y)), batch, model


def _centernet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: ResNet-18 at 256x256 2.4 GMAC an image, the transposed convs 0.4, the heads at
    # 64x64 0.5: 3.25 GMAC (FlopCounter), x 24 x 2 x 3 = 0.47 TFLOP a step, ~2.5 ms of bf16 NCHW
    # convs, ~1 ms of BatchNorm/ReLU traffic, ~1.5 ms of focal loss over 7.9 M fp32 heatmap
    # values (~45 kernels fwd+bwd), the fused AdamW over 14 M parameters: ~5-6 ms on the GPU;
    # ~170 ops forward with the casts (~3.5 ms of host) and ~200 autograd nodes backward (~3
    # ms): host and GPU about even. Planted, each sync waits out the GPU's backlog (largest
    # after the heads and at the optimizer, behind the focal loss's backward) and restarts from
    # an empty queue: ~1-1.5 ms a step, ~15-20 %.
    torch, nn = k.torch, k.nn
    img, batch, div, classes, objs = (
        (64, 2, 16, 4, (2, 4)) if k.quick else (256, 24, 1, 80, (4, 24))
    )
    out = img // 4
    w = [max(4, c // div) for c in (64, 128, 256, 512)]
    up = [max(4, c // div) for c in (256, 128, 64)]
    head = max(4, 64 // div)

    def make_head(n: int, bias: float = 0.0):
        last = nn.Conv2d(head, n, 1)
        nn.init.constant_(last.bias, bias)
        return nn.Sequential(nn.Conv2d(up[-1], head, 3, 1, 1), nn.ReLU(), last)

    class CenterNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, w[0], 7, 2, 3, bias=False), nn.BatchNorm2d(w[0]), nn.ReLU(),
                nn.MaxPool2d(3, 2, 1),
            )  # fmt: skip
            stages, ci = [], w[0]
            for i, co in enumerate(w):  # strides 4, 8, 16, 32
                s = 1 if i == 0 else 2
                stages += [basic_block(ci, co, s), basic_block(co, co, 1)]
                ci = co
            ups: list = []
            for co in up:  # back to stride 4
                ups += [nn.ConvTranspose2d(ci, co, 4, 2, 1, bias=False), nn.BatchNorm2d(co)]
                ups += [nn.ReLU()]
                ci = co
            self.body = nn.Sequential(*stages, *ups)
            self.heat = make_head(classes, -2.19)  # prior 0.1
            self.size, self.offset = make_head(2), make_head(2)

        def forward(self, x):
            f = self.body(self.stem(x))
            return self.heat(f), self.size(f), self.offset(f)

    model = CenterNet().to(device)
    opt = k.adamw(model, fused=k.cuda)

    # targets, made once: per image 4-24 objects at distinct centres of the 64x64 map, each a
    # Gaussian peak of exactly 1 in its class's heatmap (the max where peaks overlap), its size
    # and sub-pixel offset written at its centre
    gen = torch.Generator().manual_seed(137)
    x = torch.randn(batch, 3, img, img, generator=gen)
    gt = torch.zeros(batch, classes, out, out)
    size_t, off_t = torch.zeros(batch, 2, out, out), torch.zeros(batch, 2, out, out)
    centres = torch.zeros(batch, out, out, dtype=torch.bool)
    grid = torch.arange(out, dtype=torch.float32)
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    for b in range(batch):
        n = int(torch.randint(objs[0], objs[1] + 1, (1,), generator=gen))
        cells = torch.randperm(out * out, generator=gen)[:n]
        for cell in cells.tolist():
            cy, cx = divmod(cell, out)
            c = int(torch.randint(0, classes, (1,), generator=gen))
            wh = torch.rand(2, generator=gen) * (out / 2 - 2) + 2
            sigma = float(wh.min()) / 6 + 0.5
            r = int(3 * sigma) + 1  # the peak drawn within 3 sigma, as CenterNet does
            win = (slice(max(0, cy - r), cy + r + 1), slice(max(0, cx - r), cx + r + 1))
            g = torch.exp(-((yy[win] - cy) ** 2 + (xx[win] - cx) ** 2) / (2 * sigma * sigma))
            gt[b, c][win] = torch.maximum(gt[b, c][win], g)
            size_t[b, :, cy, cx] = wh
            off_t[b, :, cy, cx] = torch.rand(2, generator=gen)
            centres[b, cy, cx] = True
    x, gt, size_t, off_t, centres = (t.to(device) for t in (x, gt, size_t, off_t, centres))
    weight = centres.float()[:, None]  # the fixed variant's 0/1 centre map
    tot = torch.zeros((), device=device)
    seen: list[float] = []

    def step():
        with k.ac:
            heat, size, offset = model(x)
        heat, size, offset = heat.float(), size.float(), offset.float()
        pos = gt.eq(1).float()  # CenterNet's penalty-reduced focal loss, written out
        count = pos.sum()  # planted: read by .item(); fixed: clamped on the GPU
        norm = count.clamp(min=1) if fixed else max(1, int(count.item()))
        p = torch.sigmoid(heat).clamp(1e-4, 1 - 1e-4)
        pos_loss = (torch.log(p) * (1 - p).pow(2) * pos).sum()
        neg_loss = (torch.log(1 - p) * p.pow(2) * (1 - gt).pow(4) * (1 - pos)).sum()
        focal = -(pos_loss + neg_loss)
        if fixed:  # the centres as a 0/1 weight map
            size_l1 = ((size - size_t).abs() * weight).sum()
            off_l1 = ((offset - off_t).abs() * weight).sum()
        else:  # planted: the centres found by torch.nonzero, the predictions picked there
            bi, yi, xi = torch.nonzero(centres, as_tuple=True)
            size_l1 = (size[bi, :, yi, xi] - size_t[bi, :, yi, xi]).abs().sum()
            off_l1 = (offset[bi, :, yi, xi] - off_t[bi, :, yi, xi]).abs().sum()
        loss = (focal + 0.1 * size_l1 + off_l1) / norm
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if fixed:  # the log summed on the GPU
            tot.add_(loss.detach())
        else:
            seen.append(loss.item())

    k.meta["objects"] = int(centres.sum())
    k.meta["syncs_per_step"] = 0 if fixed else 3
    return step, batch, model


def _samplecnn(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per clip 0.43 GMAC (the first blocks at 19683 and 6561 frames most of it), x 256 x 2
    # x 3 = 0.66 TFLOP a step, ~4-5 ms of bf16 convs; ~18 GB of BatchNorm/ReLU/pool traffic
    # (the stem's and block 1's 64 x 19683 maps: 0.65 GB each in bf16), ~7 ms: ~11-12 ms on the
    # GPU; ~130 kernels a step (~2 ms of host). The 60.5 MB copied from pageable memory: ~7-8 ms
    # (v106: 65.5 MB cost ~8 ms), the host blocked and the GPU idle meanwhile; pinned, ~2 ms on
    # the copy engine: ~19 ms planted, ~13 ms fixed.
    torch, nn, F = k.torch, k.nn, k.F
    length, batch, div, tags = (729, 4, 8, 10) if k.quick else (59049, 256, 1, 50)
    chans = [max(4, c // div) for c in (64, 64, 64, 128, 128, 128, 128, 128, 128, 256)]
    blocks = 5 if k.quick else 9  # each a max pool of 3: 3^10 samples down to 1 frame

    def cbr(ci: int, co: int, ks: int = 3, s: int = 1):
        return [nn.Conv1d(ci, co, ks, s, ks // 2 if s == 1 else 0), nn.BatchNorm1d(co), nn.ReLU()]

    class SampleCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            mods: list = cbr(1, chans[0], 3, 3)  # 3 samples a frame
            for i in range(blocks):
                mods += [*cbr(chans[i], chans[i + 1]), nn.MaxPool1d(3)]
            mods += cbr(chans[blocks], chans[-1], 1)
            self.body = nn.Sequential(*mods)
            self.head = nn.Linear(chans[-1], tags)

        def forward(self, x):  # (b, 1, length) -> (b, tags) logits
            return self.head(self.body(x).mean(2))

    model = SampleCNN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(138)
    pool = []
    for _ in range(3):  # 3 host batches, each used in turn
        wave = torch.randn(batch, 1, length, generator=gen) * 0.1
        pool.append((wave, (torch.rand(batch, tags, generator=gen) < 0.1).float()))
    next_batch = cycled(pool, device, pinned=fixed and k.cuda)

    def loss_fn():
        wave, y = next_batch()
        with k.ac:
            return F.binary_cross_entropy_with_logits(model(wave).float(), y)

    k.meta["bytes_per_step"] = batch * (length + tags) * 4
    k.meta["pinned"] = fixed
    return k.train(opt, loss_fn), batch, model


class TaggedClips:
    """v139's dataset: ``pool`` stored clips of 1.5 x ``length`` int16 samples at 32 kHz (a few
    harmonic tones with vibrato, chirps and noise bursts, made once) with 1-3 of 527 tags each;
    ``1_000_000`` virtual samples cycling over them. Per sample (in numpy, seeded by the index):
    a random ``length`` crop of its clip at a random gain (-6 to +6 dB), a crop of another clip
    mixed in at a random SNR (0-20 dB), the tags merged; framed in ``n_fft``-point Hann windows
    every ``hop`` samples (the signal reflect-padded by n_fft / 2 each side), FFT power, ``mels``
    triangular mel filters (50 Hz-14 kHz), log10 (floored at 1e-10); SpecAugment: 2 time masks of
    0-64 frames, 2 frequency masks of 0-8 bins, set to the mean. Returns (1 x frames x mels
    float32 log-mel, 527 float32 tags)."""

    def __init__(self, length: int, pool: int, n_fft: int, hop: int, mels: int) -> None:
        import numpy as np

        rng = np.random.default_rng(139)
        self.length, self.n_fft, self.hop, self.tags = length, n_fft, hop, 527
        sr, n = 32000, length * 3 // 2
        t = np.arange(n, dtype=np.float32) / sr
        clips, labels = [], []
        for _ in range(pool):
            clip = np.zeros(n, np.float32)
            for _ in range(3):  # harmonic tones with vibrato
                f0 = rng.uniform(80, 1000)
                ph = 2 * np.pi * f0 * t + 3 * np.sin(2 * np.pi * rng.uniform(2, 7) * t)
                for h in range(1, 5):
                    clip += np.sin(h * ph).astype(np.float32) * rng.uniform(0.02, 0.1) / h
            f1, f2 = rng.uniform(200, 8000, 2)  # a chirp
            clip += 0.05 * np.sin(2 * np.pi * (f1 + (f2 - f1) * t / t[-1] / 2) * t)
            for _ in range(4):  # noise bursts
                a = int(rng.integers(0, n - sr // 4))
                clip[a : a + sr // 4] += rng.normal(0, 0.05, sr // 4).astype(np.float32)
            clips.append((np.clip(clip, -1, 1) * 32767).astype(np.int16))
            labels.append(rng.choice(527, int(rng.integers(1, 4)), replace=False))
        self.clips, self.labels = np.stack(clips), labels
        self.win = np.hanning(n_fft).astype(np.float32)
        hz = 700.0 * (10 ** (np.linspace(*np.log10(1 + np.array([50, 14000]) / 700), mels + 2)) - 1)
        bins = np.fft.rfftfreq(n_fft, 1 / sr)
        fb = np.zeros((n_fft // 2 + 1, mels), np.float32)
        for m in range(mels):
            lo, mid, hi = hz[m], hz[m + 1], hz[m + 2]
            fb[:, m] = np.maximum(0, np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)))
        self.fb = fb

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        n, length = self.clips.shape[1], self.length
        a, b = i % len(self.clips), int(rng.integers(0, len(self.clips)))
        s0, s1 = rng.integers(0, n - length + 1, 2)
        wave = self.clips[a, s0 : s0 + length].astype(np.float32) / 32768
        wave *= np.float32(10 ** (rng.uniform(-6, 6) / 20))
        other = self.clips[b, s1 : s1 + length].astype(np.float32) / 32768
        snr = rng.uniform(0, 20)  # the second clip's level below the first's
        scale = np.sqrt((wave @ wave + 1e-8) / (other @ other + 1e-8) / 10 ** (snr / 10))
        wave += np.float32(scale) * other
        pad = np.pad(wave, self.n_fft // 2, mode="reflect")
        frames = np.lib.stride_tricks.sliding_window_view(pad, self.n_fft)[:: self.hop]
        spec = np.fft.rfft(frames * self.win, axis=1)
        power = (spec.real**2 + spec.imag**2).astype(np.float32)
        mel = np.log10(np.maximum(power @ self.fb, 1e-10))  # frames x mels
        fill = mel.mean()
        for _ in range(2):  # SpecAugment
            t0, dt = int(rng.integers(0, mel.shape[0])), int(rng.integers(0, 65))
            mel[t0 : t0 + dt] = fill
            f0, df = int(rng.integers(0, mel.shape[1])), int(rng.integers(0, 9))
            mel[:, f0 : f0 + df] = fill
        tags = np.zeros(self.tags, np.float32)
        tags[self.labels[a]] = 1
        tags[self.labels[b]] = 1
        return torch.from_numpy(mel[None].astype(np.float32)), torch.from_numpy(tags)


def _panns(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    nn, F = k.nn, k.F
    length, mels, batch, workers, pool, div = (
        (8000, 16, 4, 2, 4, 16) if k.quick else (128000, 64, 32, 6, 64, 1)
    )
    n_fft, hop = (256, 80) if k.quick else (1024, 320)
    # 401 frames x 64 mels: CNN10 5.2 GMAC a clip (FlopCounter), x 32 x 2 x 3 = 1.0 TFLOP a
    # step, ~5 ms of bf16 NCHW convs, ~2 ms of BatchNorm/ReLU/pool traffic (block 1's maps
    # 105 MB each); ~120 kernels (~2 ms of host): ~8 ms on the GPU. Loading: ~13 ms a clip on
    # the 2-core CPU this was written on (the FFT of 401 x 1024 points ~4 ms of it), ~7 x v48's
    # clips there (v48's cost ~0.9 ms a clip on the device), so ~6-7 ms a clip on the device:
    # ~200 ms a batch with 0 workers, ~35 ms spread over 6 (still the bound, over ~8 ms of GPU).
    c = [max(4, ch // div) for ch in (64, 128, 256, 512)]

    class ConvBlock(nn.Module):
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(ci, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(),
                nn.Conv2d(co, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(),
                nn.AvgPool2d(2),
            )  # fmt: skip

        def forward(self, x):
            return self.body(x)

    class CNN10(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn0 = nn.BatchNorm2d(mels)  # over the mel bins
            blocks, ci = [], 1
            for co in c:
                blocks.append(ConvBlock(ci, co))
                ci = co
            self.blocks = nn.Sequential(*blocks)
            self.fc1, self.out = nn.Linear(ci, ci), nn.Linear(ci, 527)

        def forward(self, x):  # (b, 1, frames, mels)
            x = self.bn0(x.transpose(1, 3)).transpose(1, 3)
            h = self.blocks(x).mean(3)  # over the mel axis: (b, ch, frames / 16)
            h = h.amax(2) + h.mean(2)
            return self.out(F.relu(self.fc1(h)))

    model = CNN10().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True}
    loader = DataLoader(
        TaggedClips(length, pool, n_fft, hop, mels), batch_size=batch, shuffle=True,
        drop_last=True, **(kw if fixed else {}),
    )  # fmt: skip
    it = iter(loader)

    def loss_fn():
        x, y = next(it)
        x, y = x.to(device), y.to(device)
        with k.ac:
            return F.binary_cross_entropy_with_logits(model(x).float(), y)

    k.meta["num_workers"] = workers if fixed else 0
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v135": _esrgan,
    "v136": _r2plus1d,
    "v137": _centernet,
    "v138": _samplecnn,
    "v139": _panns,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
