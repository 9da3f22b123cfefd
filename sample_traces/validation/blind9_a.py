"""The ninth blind part's first five cases (v145-v149; record_blind9.py merges them): torch.compile
of the model alone on a TSMixer-style multivariate forecaster whose eager step is bound by the
launches of its hand-written normalisations and mixing MLPs, its hand-written multi-term loss and
its optimizer left eager (v145), and on a channels-last HarDNet-style CNN whose elementwise work is
training-mode BatchNorm, ReLU and the concatenations of its harmonic dense links (v146),
cudnn.benchmark on the dilated and oddly split convolutions of an ESPNet-style segmenter in fp32
with cuDNN TF32 (v147), bf16 autocast on a PaLM-style decoder with TF32 off for matmuls (v148), and
activation checkpointing on every block of a SegFormer-style segmenter with most of the GPU's
memory free (v149). Each family is one no earlier case used. Sizes come from FLOP, byte and launch
counts (FLOPs checked with torch's FlopCounterMode on the meta device; not timed: nothing ran on a
GPU before the part was fixed); each builder's comment gives its estimate of one step on an H100.
The eighth part's recordings ran 1.2-6 x slower than such estimates, most where the host's
launches set the pace (an eager launch nearer 25 us than 10 on the device's host), so each comment
gives the host time at both."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, precision_loss  # noqa: E402

CASES: dict[str, dict] = {
    "v145": {
        "name": "kernel_fusion",
        "model": "TSMixer-style multivariate time-series forecaster (RevIN instance normalisation "
        "of 21 channels over a 512-step lookback, written by hand; 8 mixer blocks, each a "
        "hand-written normalisation over time and features, a time-mixing Linear 512-512 with "
        "ReLU and a feature-mixing MLP 21-256-21 with GELU, both with learned layer scales and "
        "residuals; a temporal projection Linear 512-96, RevIN undone; a hand-written loss of "
        "MSE, 0.5 x L1 and 0.1 x a first-difference smoothness term; AdamW(fused=True)) on "
        "windows of 21 series, batch 32, fp32 (TF32 off for matmuls): about 750 small "
        "kernels a step, each a few microseconds of GPU, the step bound by their launches",
        "planted": "eager (each elementwise and normalisation op its own small kernel launch)",
        "fix": "torch.compile(model) of the model only; the loss and the optimizer stay eager",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v146": {
        "name": "kernel_fusion",
        "model": "HarDNet-style harmonic densely connected CNN (channels-last throughout; a stem "
        "of a strided 3x3 conv 3-24, a 3x3 conv 24-48 and a 3x3/2 max pool to 56x56; 4 "
        "harmonic dense blocks of 8/16/16/4 3x3 conv layers, growth 16/24/32/64 and multiplier "
        "1.7, layer k reading the concatenation of layers k - 2^i for every 2^i dividing k, "
        "widths rounded to multiples of 8 (16-264 ch), the block's odd layers and its last "
        "concatenated as its output; 1x1 transition convs to 128/256/384/768 ch, 2x2 average "
        "pools after blocks 1-3; 50 convs, each followed by training-mode BatchNorm and ReLU; "
        "mean pool, Linear to 1000 classes, cross-entropy) on 224x224 images, batch 128, bf16 "
        "autocast",
        "planted": "eager (each elementwise op its own memory-bound kernel)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v147": {
        "name": "cudnn_benchmark",
        "model": "ESPNet-C-style semantic segmenter (efficient spatial pyramid modules: a 1x1 "
        "reduction to n/5 channels, then five parallel 3x3 convs dilated 1/2/4/8/16, the first "
        "taking the remainder of the channels (16+4x12 of 64, 28+4x25 of 128), hierarchical "
        "sums, concatenation, residual, BatchNorm and PReLU; a strided 3x3 conv 3-16 at 1/2, a "
        "strided ESP to 64 ch at 1/4 and 2 ESP modules, a strided ESP to 128 ch at 1/8 and 8 "
        "ESP modules, the image re-injected by average pooling at 1/2 and 1/4; a 1x1 conv to "
        "20 classes, cross-entropy at 1/8) on 512x1024 street scenes, batch 12, fp32 with "
        "cuDNN TF32 (TF32 off for matmuls): 74 convolutions of 16 shapes, 48 of them "
        "dilated, with channel counts of 12, 16, 25 and 28",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v148": {
        "name": "mixed_precision",
        "model": "PaLM-style decoder-only language model (4 parallel blocks d 1024: one "
        "LayerNorm without bias feeding both a causal multi-query attention, 8 query heads of "
        "128 and one shared key and value head, rotary positions, explicit matmuls, and a "
        "SwiGLU MLP 1024-4096-1024; no biases; input and output embeddings shared, vocab 8192; "
        "68 M parameters; cross-entropy) on 256 tokens, batch 16, fp32, TF32 off for matmuls "
        "in both variants",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast (TF32 still off)",
        "expected_fix": "mixed_precision",
    },
    "v149": {
        "name": "activation_checkpointing",
        "model": "SegFormer-style semantic segmenter (Mix Transformer encoder, B1 widths: "
        "overlapping patch embeddings 7x7/4 then 3x3/2 with LayerNorm, stages of 64/128/320/512 "
        "ch, 2 blocks each, 1/2/5/8 heads, efficient self-attention with keys and values from a "
        "strided sr x sr conv, sr 8/4/2/1, and LayerNorm; Mix-FFN 4x with a 3x3 depthwise conv "
        "and GELU; an all-MLP decoder: each stage Linear to 256, bilinear upsampling to 1/4, "
        "concatenation, 1x1 conv with BatchNorm and ReLU, 1x1 conv to 19 classes, "
        "cross-entropy at 1/4) on 512x512 images, batch 16, bf16 autocast; most of the GPU's "
        "memory free",
        "planted": "torch.utils.checkpoint on every Mix Transformer block (8 nn.Modules)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
}


def _tsmixer(k: Kit, fixed: bool, device: str, rank: int):
    # H100 eager: a window batch is 32 x 512 x 21 = 344 K values (1.4 MB fp32), so each
    # elementwise kernel is ~2-3 us of GPU and the matmuls (time mixing 672 x 512 x 512, feature
    # mixing 16384 x 21 x 256 and back; fp32 without TF32) ~5-15 us each. Per block forward: two
    # hand-written norms of 9 ops, the time mix (a transpose copy, addmm, ReLU, layer scale,
    # residual) and the feature MLP (2 addmm, GELU, layer scale, residual): ~29 kernels, ~55
    # backward; 8 blocks + RevIN in and out (~25 fwd+bwd) + the head: ~720 launches in the model.
    # The eager loss: ~12 ops forward (sub, pow, mean, abs, mean, two slices' subs, sub, pow,
    # mean, 2 muls, 2 adds) and ~20 backward: ~30 launches; AdamW(fused=True) over 100 tensors:
    # ~3 multi-tensor launches. Host: ~750 launches at 10-25 us = ~8-19 ms; GPU ~2.5-3 ms: the
    # step is the host's, ~8-19 ms. Of the planted host work ~96 % lies inside the model (forward
    # and its autograd backward), ~4 % in the loss and <1 % in the optimizer. Compiled: ~4-6
    # fused kernels and 3 matmuls a block forward, ~10 fused kernels and 6 matmuls backward:
    # ~170 launches from Inductor's wrapper at ~5-8 us (~1-1.4 ms) beside the ~30 eager loss
    # launches (~0.3-0.75 ms) and the optimizer (~0.1 ms), so the eager remainder is ~25-35 %
    # of the compiled step's host time; GPU ~1 ms: ~2-2.5 ms, ~70-85 % off the step.
    torch, nn, F = k.torch, k.nn, k.F
    lookback, horizon, chans, hidden, blocks, batch = (
        (16, 8, 3, 8, 2, 4) if k.quick else (512, 96, 21, 256, 8, 32)
    )

    class TimeFeatureNorm(nn.Module):  # over (time, features) of each window, affine per feature
        def __init__(self) -> None:
            super().__init__()
            self.w, self.b = nn.Parameter(torch.ones(chans)), nn.Parameter(torch.zeros(chans))

        def forward(self, x):  # (b, time, chans)
            xc = x - x.mean((1, 2), keepdim=True)
            var = (xc * xc).mean((1, 2), keepdim=True)
            return xc * torch.rsqrt(var + 1e-5) * self.w + self.b

    class MixerBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = TimeFeatureNorm(), TimeFeatureNorm()
            self.time = nn.Linear(lookback, lookback)
            self.fc1, self.fc2 = nn.Linear(chans, hidden), nn.Linear(hidden, chans)
            self.g1 = nn.Parameter(torch.full((chans,), 0.1))  # layer scales
            self.g2 = nn.Parameter(torch.full((chans,), 0.1))

        def forward(self, x):
            h = F.relu(self.time(self.n1(x).transpose(1, 2))).transpose(1, 2)
            x = x + self.g1 * h
            return x + self.g2 * self.fc2(F.gelu(self.fc1(self.n2(x))))

    class TSMixer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rev_w = nn.Parameter(torch.ones(chans))  # RevIN's affine
            self.rev_b = nn.Parameter(torch.zeros(chans))
            self.blocks = nn.Sequential(*[MixerBlock() for _ in range(blocks)])
            self.head = nn.Linear(lookback, horizon)

        def forward(self, x):  # (b, lookback, chans) -> (b, horizon, chans)
            mean = x.mean(1, keepdim=True)
            std = torch.sqrt(((x - mean) ** 2).mean(1, keepdim=True) + 1e-5)
            h = (x - mean) / std * self.rev_w + self.rev_b
            h = self.head(self.blocks(h).transpose(1, 2)).transpose(1, 2)
            return (h - self.rev_b) / (self.rev_w + 1e-8) * std + mean

    model = TSMixer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model) if fixed else model
    gen = torch.Generator().manual_seed(145)
    steps = lookback + horizon
    t = torch.arange(steps, dtype=torch.float32)[None, :, None]
    period = torch.randint(12, 96, (batch, 1, chans), generator=gen).float()
    phase = torch.rand(batch, 1, chans, generator=gen) * 6.283
    walk = torch.randn(batch, steps, chans, generator=gen).cumsum(1) * 0.05
    series = torch.sin(6.283 * t / period + phase) + walk  # seasonal series with a drift
    x = series[:, :lookback].contiguous().to(device)
    target = series[:, lookback:].contiguous().to(device)

    def loss_fn():  # MSE + 0.5 L1 + 0.1 first-difference smoothness, eager in both variants
        pred = run(x)
        err = pred - target
        smooth = (pred[:, 1:] - pred[:, :-1]) - (target[:, 1:] - target[:, :-1])
        return err.pow(2).mean() + 0.5 * err.abs().mean() + 0.1 * smooth.pow(2).mean()

    k.meta["compiled"] = fixed
    k.meta["compiled_scope"] = "model only (loss and optimizer eager)" if fixed else "none"
    k.meta["optimizer"] = "AdamW(fused=True)" if k.cuda else "AdamW"
    return k.train(opt, loss_fn), batch, model


def _hardnet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 2.15 TFLOP a step (FlopCounter; ~2.8 GMAC an image forward, x 2 x 3 x 128) of bf16
    # channels-last convs, narrow (16-264 ch): ~150-200 TFLOP/s, ~11-14 ms. Elementwise: the 50
    # BatchNorm+ReLU outputs hold ~3.3 M values an image, the 26 concatenations ~3.6 M; eager
    # BatchNorm (stats and normalise) and ReLU move ~10 B a value forward and ~16 backward, each
    # concatenation ~4 B a value forward and the gradients summed where a layer feeds several ~6
    # backward: ~125 MB an image, x 128 = 16 GB, ~6-7 ms. ~600 launches fwd+bwd with the weight
    # casts (~6-15 ms of host): ~18-21 ms, GPU-bound. Compiled: BatchNorm's normalise, ReLU and
    # the casts one pass (~16 B a value fwd+bwd), the concatenations written by their producers
    # where Inductor can, the gradient sums fused: ~3-4 ms less and half the launches, ~15-25 %
    # off.
    torch, nn, F = k.torch, k.nn, k.F
    img, stem, spec, classes, batch = (
        (32, (8, 16), ((8, 4, 16), (8, 4, 24)), 10, 2)
        if k.quick
        else (
            224,
            (24, 48),
            ((16, 8, 128), (24, 16, 256), (32, 16, 384), (64, 4, 768)),
            1000,
            128,
        )
    )  # per block: growth, layers, transition width

    def cbr(ci: int, co: int, ks: int = 3, s: int = 1):
        return nn.Sequential(
            nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co), nn.ReLU()
        )

    def harmonic(layer: int, growth: int) -> tuple[list[int], int]:  # links and width of layer
        links, width = [], float(growth)
        for i in range(10):
            if layer % 2**i == 0:
                links.append(layer - 2**i)
                width *= 1.7 if i > 0 else 1.0
        return links, max(8, int(width / 8 + 0.5) * 8)

    class HarDBlock(nn.Module):
        def __init__(self, ci: int, growth: int, n: int) -> None:
            super().__init__()
            widths, self.links, layers = [ci], [], []
            for j in range(1, n + 1):
                links, co = harmonic(j, growth)
                self.links.append(links)
                layers.append(cbr(sum(widths[i] for i in links), co))
                widths.append(co)
            self.layers = nn.ModuleList(layers)
            self.keep = [j for j in range(1, n + 1) if j % 2 == 1 or j == n]
            self.width = sum(widths[j] for j in self.keep)

        def forward(self, x):
            feats = [x]
            for links, layer in zip(self.links, self.layers, strict=True):
                ins = [feats[i] for i in links]
                feats.append(layer(ins[0] if len(ins) == 1 else torch.cat(ins, 1)))
            return torch.cat([feats[j] for j in self.keep], 1)

    class HarDNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            parts: list = [cbr(3, stem[0], 3, 2), cbr(stem[0], stem[1]), nn.MaxPool2d(3, 2, 1)]
            ci = stem[1]
            for s, (growth, n, width) in enumerate(spec):
                block = HarDBlock(ci, growth, n)
                parts += [block, cbr(block.width, width, 1)]
                if s < len(spec) - 1:
                    parts.append(nn.AvgPool2d(2, 2))
                ci = width
            self.features = nn.Sequential(*parts)
            self.head = nn.Linear(ci, classes)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))

    model = HarDNet().to(device, memory_format=torch.channels_last)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model) if fixed else model
    x = torch.randn(batch, 3, img, img, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(run(x).float(), y)

    k.meta["compiled"] = fixed
    k.meta["memory_format"] = "channels_last"
    k.meta["batchnorm_layers"] = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    return k.train(opt, loss_fn), batch, model


def _espnet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per 512x1024 image 3.47 GMAC of convolutions (level 1 0.06, the strided ESP to 64 ch
    # 0.29, 2 ESP modules at 1/4 0.50, the strided ESP to 128 ch 0.48, 8 ESP modules at 1/8 2.1,
    # the classifier 0.04), ~20.8 GFLOP a step an image (no data gradient at the first conv), x 12
    # = 250 GFLOP; the dilated 3x3 convs have 12-28 channels a side, too narrow for TF32's tensor
    # cores to pay off: ~15-25 TFLOP/s under cuDNN's heuristic picks (implicit GEMM; no Winograd
    # or FFT for dilated convs), ~10-17 ms. Elementwise in fp32: the hierarchical sums,
    # concatenations, residuals, BatchNorm and PReLU ~2.8 GB an image fwd+bwd, x 12 = 34 GB,
    # ~13 ms. ~600 launches (~6-15 ms of host): GPU-bound, ~25-30 ms. cudnn.benchmark times every
    # algorithm for each of the 16 conv shapes (forward, data and weight gradients); dilation
    # and odd channel counts are where heuristics and measurement part most (the ASPP case's
    # dilated convs gained ~28 %): ~25-40 % off the convs, ~10-20 % off the step.
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cudnn.benchmark = fixed
    h, w, n2, n3, alpha2, alpha3, classes, batch = (
        (32, 64, 20, 40, 1, 2, 5, 2) if k.quick else (512, 1024, 64, 128, 2, 8, 20, 12)
    )

    class BR(nn.Module):  # BatchNorm and PReLU
        def __init__(self, c: int) -> None:
            super().__init__()
            self.bn, self.act = nn.BatchNorm2d(c, eps=1e-3), nn.PReLU(c)

        def forward(self, x):
            return self.act(self.bn(x))

    class ESP(nn.Module):  # reduce, split, transform (dilated), merge (hierarchical sums)
        def __init__(self, ci: int, co: int, down: bool) -> None:
            super().__init__()
            d = co // 5
            first = co - 4 * d
            self.reduce = (
                nn.Conv2d(ci, d, 3, 2, 1, bias=False) if down else nn.Conv2d(ci, d, 1, bias=False)
            )
            self.branches = nn.ModuleList(
                [
                    nn.Conv2d(d, first if i == 0 else d, 3, 1, 2**i, 2**i, bias=False)
                    for i in range(5)
                ]
            )
            self.br = BR(co)
            self.residual = not down and ci == co

        def forward(self, x):
            r = self.reduce(x)
            outs = [b(r) for b in self.branches]
            merged, acc = [outs[0], outs[1]], outs[1]
            for o in outs[2:]:
                acc = acc + o
                merged.append(acc)
            y = torch.cat(merged, 1)
            return self.br(x + y if self.residual else y)

    class ESPNetC(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.level1 = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), BR(16))
            self.b1 = BR(16 + 3)
            self.down2 = ESP(16 + 3, n2, True)
            self.level2 = nn.Sequential(*[ESP(n2, n2, False) for _ in range(alpha2)])
            self.b2 = BR(2 * n2 + 3)
            self.down3 = ESP(2 * n2 + 3, n3, True)
            self.level3 = nn.Sequential(*[ESP(n3, n3, False) for _ in range(alpha3)])
            self.b3 = BR(2 * n3)
            self.classifier = nn.Conv2d(2 * n3, classes, 1, bias=False)

        def forward(self, x):
            x2 = F.avg_pool2d(x, 3, 2, 1)  # the image at 1/2 and 1/4, re-injected
            x4 = F.avg_pool2d(x2, 3, 2, 1)
            o1 = self.b1(torch.cat([self.level1(x), x2], 1))
            d2 = self.down2(o1)
            o2 = self.b2(torch.cat([d2, self.level2(d2), x4], 1))
            d3 = self.down3(o2)
            o3 = self.b3(torch.cat([d3, self.level3(d3)], 1))
            return self.classifier(o3)

    model = ESPNetC().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(147)
    x = torch.randn(batch, 3, h, w, generator=gen).to(device)
    coarse = torch.randint(0, classes, (batch, h // 64 + 1, w // 64 + 1), generator=gen)
    labels = coarse.repeat_interleave(8, 1).repeat_interleave(8, 2)[:, : h // 8, : w // 8]
    labels = labels.contiguous().to(device)  # blocky label maps at 1/8

    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["precision"] = "fp32, cuDNN TF32 on, matmul TF32 off"
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    k.meta["conv2d_layers"] = len(convs)
    k.meta["dilated_convs"] = sum(m.dilation[0] > 1 for m in convs)
    return k.train(opt, lambda: F.cross_entropy(model(x), labels)), batch, model


def _palm(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 59.8 M parameters in the 4 blocks (per block: q and out 2 x 1024^2, one key and one
    # value head 2 x 1024 x 128, SwiGLU 3 x 1024 x 4096) and the 8.4 M shared embedding as the
    # LM head: 6 x 68.2 M x 4096 tokens = 1.68 TFLOP, attention (256 x 256 scores, 8 heads, 16
    # sequences, 4 blocks) 0.05: 1.74 TFLOP a step. fp32 without TF32 at ~45-50 TFLOP/s:
    # ~35-39 ms + ~6 GB of fp32 norm, rotary, SwiGLU and softmax traffic (~3 ms): ~38-42 ms,
    # GPU-bound (~400 launches, ~4-10 ms of host). bf16 at ~450 TFLOP/s: ~4 ms of matmuls,
    # ~2 ms of traffic, the fused AdamW over 68 M parameters ~0.8 ms: ~7 ms of GPU beside ~450
    # launches with the weight casts (~4.5-11 ms of host): ~7-11 ms, ~70-80 % off.
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cuda.matmul.allow_tf32 = False
    seq, d, heads, ff, layers, vocab, batch = (
        (16, 32, 4, 64, 2, 64, 2) if k.quick else (256, 1024, 8, 4096, 4, 8192, 16)
    )
    hd = d // heads

    def rotary_tables():
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.arange(seq).float()[:, None] * inv[None]  # (seq, hd/2)
        return torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rotate(x, cos, sin):
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    class ParallelBlock(nn.Module):  # x + attention(LN(x)) + SwiGLU(LN(x)), one LayerNorm
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(d, bias=False)
            self.q = nn.Linear(d, d, bias=False)
            self.kv = nn.Linear(d, 2 * hd, bias=False)  # multi-query: one key and value head
            self.o = nn.Linear(d, d, bias=False)
            self.gate_up = nn.Linear(d, 2 * ff, bias=False)
            self.down = nn.Linear(ff, d, bias=False)

        def forward(self, x, cos, sin, mask):
            b, t, _ = x.shape
            h = self.norm(x)
            q = self.q(h).view(b, t, heads, hd).transpose(1, 2)  # (b, heads, t, hd)
            kk, v = self.kv(h).view(b, 1, t, 2 * hd).chunk(2, -1)  # (b, 1, t, hd) each
            q, kk = rotate(q, cos, sin), rotate(kk, cos, sin)
            scores = (q @ kk.transpose(-1, -2)) * hd**-0.5 + mask
            a = torch.softmax(scores.float(), -1).type_as(v) @ v
            gate, up = self.gate_up(h).chunk(2, -1)
            mlp = self.down(F.silu(gate) * up)
            return x + self.o(a.transpose(1, 2).reshape(b, t, d)) + mlp

    class PaLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            nn.init.normal_(self.embed.weight, std=d**-0.5)
            self.blocks = nn.ModuleList([ParallelBlock() for _ in range(layers)])
            self.norm = nn.LayerNorm(d, bias=False)
            cos, sin = rotary_tables()
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
            mask = torch.full((seq, seq), float("-inf")).triu(1)
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, ids):
            x = self.embed(ids)
            for blk in self.blocks:
                x = blk(x, self.cos, self.sin, self.mask)
            return (self.norm(x) @ self.embed.weight.t()).flatten(0, 1)  # shared embeddings

    model = PaLM().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(148)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)
    ids, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].flatten()

    loss_fn = precision_loss(k, fixed, model, F.cross_entropy, ids, labels)

    k.meta["precision"] = "bf16 autocast, TF32 off" if fixed else "fp32, TF32 off"
    return k.train(opt, loss_fn), batch, model


def _segformer(k: Kit, fixed: bool, device: str, rank: int):
    # H100: ~15.9 GMAC an image at 512x512 (MiT-B1 and its all-MLP decoder), x 2 x 3 x 16 = 1.5
    # TFLOP a step of bf16 matmuls, convs and attention (~6-8 ms); the elementwise work is the
    # larger share: stage 1's 16384 tokens x 64 ch (2 MB an image a pass, bf16) through the
    # LayerNorms, residuals, transposes around the depthwise conv and Mix-FFN's 256-ch hidden
    # maps (8 MB a pass, GELU), stage 2's at half that, and the decoder's four 256-ch maps at
    # 128x128 (concatenated, BatchNorm, ReLU): ~2 GB an image fwd+bwd, x 16 = 32 GB, ~13 ms:
    # ~20 ms of GPU fixed beside ~900 launches (~9-22 ms of host). Planted, each of the 8 blocks'
    # forward runs twice (the blocks are ~3/4 of the forward's GPU time and ~300 of the
    # launches): ~+4-5 ms of GPU and ~+300 launches, ~20-30 % off when checkpointing goes.
    # Memory: ~0.5 GB of activations an image kept fixed, ~8 GB at batch 16.
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    img, dims, heads, srs, depth, dec, classes, batch = (
        (64, (8, 16, 24, 32), (1, 2, 3, 4), (8, 4, 2, 1), 2, 16, 4, 2)
        if k.quick
        else (512, (64, 128, 320, 512), (1, 2, 5, 8), (8, 4, 2, 1), 2, 256, 19, 16)
    )

    class PatchEmbed(nn.Module):  # overlapping patches: a strided conv and LayerNorm
        def __init__(self, ci: int, co: int, ks: int, s: int) -> None:
            super().__init__()
            self.proj, self.norm = nn.Conv2d(ci, co, ks, s, ks // 2), nn.LayerNorm(co)

        def forward(self, x):
            x = self.proj(x)
            hh, ww = x.shape[2:]
            return self.norm(x.flatten(2).transpose(1, 2)), hh, ww

    class Attention(nn.Module):  # efficient self-attention: keys and values from a reduced map
        def __init__(self, c: int, nh: int, sr: int) -> None:
            super().__init__()
            self.nh, self.sr = nh, sr
            self.q, self.kv, self.o = nn.Linear(c, c), nn.Linear(c, 2 * c), nn.Linear(c, c)
            if sr > 1:
                self.reduce, self.norm = nn.Conv2d(c, c, sr, sr), nn.LayerNorm(c)

        def forward(self, x, hh, ww):
            b, n, c = x.shape
            q = self.q(x).view(b, n, self.nh, -1).transpose(1, 2)
            src = x
            if self.sr > 1:
                m = self.reduce(x.transpose(1, 2).reshape(b, c, hh, ww))
                src = self.norm(m.flatten(2).transpose(1, 2))
            kk, v = self.kv(src).view(b, -1, 2, self.nh, c // self.nh).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v)
            return self.o(a.transpose(1, 2).reshape(b, n, c))

    class MixFFN(nn.Module):  # Linear 4x, 3x3 depthwise conv, GELU, Linear back
        def __init__(self, c: int) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.dw = nn.Conv2d(4 * c, 4 * c, 3, 1, 1, groups=4 * c)

        def forward(self, x, hh, ww):
            b = x.shape[0]
            h = self.fc1(x).transpose(1, 2).reshape(b, -1, hh, ww)
            return self.fc2(F.gelu(self.dw(h)).flatten(2).transpose(1, 2))

    class Block(nn.Module):
        def __init__(self, c: int, nh: int, sr: int) -> None:
            super().__init__()
            self.n1, self.attn = nn.LayerNorm(c), Attention(c, nh, sr)
            self.n2, self.ffn = nn.LayerNorm(c), MixFFN(c)

        def forward(self, x, hh, ww):
            x = x + self.attn(self.n1(x), hh, ww)
            return x + self.ffn(self.n2(x), hh, ww)

    class SegFormer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            ins = (3, *dims[:-1])
            self.embeds = nn.ModuleList(
                [
                    PatchEmbed(ins[i], dims[i], 7 if i == 0 else 3, 4 if i == 0 else 2)
                    for i in range(4)
                ]
            )
            self.stages = nn.ModuleList(
                [
                    nn.ModuleList([Block(dims[i], heads[i], srs[i]) for _ in range(depth)])
                    for i in range(4)
                ]
            )
            self.norms = nn.ModuleList([nn.LayerNorm(c) for c in dims])
            self.dec_proj = nn.ModuleList([nn.Linear(c, dec) for c in dims])
            self.fuse = nn.Sequential(
                nn.Conv2d(4 * dec, dec, 1, bias=False), nn.BatchNorm2d(dec), nn.ReLU()
            )
            self.classify = nn.Conv2d(dec, classes, 1)

        def forward(self, x):
            b = x.shape[0]
            maps = []
            for embed, blocks, norm in zip(self.embeds, self.stages, self.norms, strict=True):
                t, hh, ww = embed(x)
                for blk in blocks:
                    t = blk(t, hh, ww) if fixed else checkpoint(blk, t, hh, ww, use_reentrant=False)
                x = norm(t).transpose(1, 2).reshape(b, -1, hh, ww)
                maps.append(x)
            size = maps[0].shape[2:]
            ups = []
            for m, proj in zip(maps, self.dec_proj, strict=True):
                p = proj(m.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(b, dec, *m.shape[2:])
                ups.append(p if p.shape[2:] == size else F.interpolate(p, size, mode="bilinear"))
            return self.classify(self.fuse(torch.cat(ups[::-1], 1)))

    model = SegFormer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(149)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    coarse = torch.randint(0, classes, (batch, img // 32, img // 32), generator=gen)
    labels = coarse.repeat_interleave(8, 1).repeat_interleave(8, 2).contiguous().to(device)

    def loss_fn():
        with k.ac:
            logits = model(x)
        return F.cross_entropy(logits.float(), labels)

    k.meta["checkpointed_modules"] = 0 if fixed else sum(len(s) for s in model.stages)
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v145": _tsmixer,
    "v146": _hardnet,
    "v147": _espnet,
    "v148": _palm,
    "v149": _segformer,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
