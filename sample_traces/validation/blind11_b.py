"""The eleventh blind part's last five cases (v180-v184; record_blind11.py merges them): a sixth
``cudnn_benchmark`` pair on an AR-CNN-style artifact-reduction net of dense 9x9, 7x7 and 5x5
convs at 16-64 ch on large images (v180); bf16 autocast on two fp32 conv nets with cuDNN TF32
off in both variants, NCHW: a Tiramisu-style (FC-DenseNet) segmenter of BN-ReLU-Conv layers and
concatenations (v181) and an SE-ResNet-style CNN (v182); and two ``cudnn_benchmark`` pairs chosen
to gain nothing: a CaiT-style vision transformer whose only convolution is its patch embedding
(v183) and a PointMLP-style point-cloud classifier of only kernel-1 Conv1d with BatchNorm (v184).
Each family is one no earlier case used. Each builder: (kit, fixed, device, rank) -> (step_fn,
samples_per_step, model); planted and fixed build the same model from the same seed and differ
only in the planted thing. Sizes come from FLOP, byte and launch counts (FLOPs from torch's
FlopCounterMode on the meta device; not timed: nothing here ran on a GPU before the part was
fixed); each builder's comment gives its estimate of one step on an H100, TF32 convs at ~20-40 %
of the TF32 peak and fp32 ones at ~40-70 % of the 67 TFLOP/s fp32 peak, with the host time at ~10
and ~25 us an eager launch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from blind11_a import _FIX, _PLANTED, _bench, _pooled_net, _projection  # noqa: E402
from record_common import Kit, precision_loss  # noqa: E402

CASES: dict[str, dict] = {
    "v180": {
        "name": "cudnn_benchmark",
        "model": "AR-CNN-style compression-artifact reduction net (9-7-1-5: a 9x9 conv 3-64, "
        "ReLU, a 7x7 conv 64-32, ReLU, a 1x1 conv 32-16, ReLU, a 5x5 conv 16-3; MSE to the "
        "clean image) on 256x256 blocky patches, batch 64, fp32 with cuDNN TF32 (TF32 off for "
        "matmuls): dense large kernels at low channel counts, 98 % of the FLOPs in the 9x9 and "
        "7x7 convs",
        "planted": _PLANTED,
        "fix": _FIX,
        "expected_fix": "cudnn_benchmark",
    },
    "v181": {
        "name": "mixed_precision",
        "model": "Tiramisu-style segmenter (FC-DenseNet56: a 3x3 conv to 48 ch; 5 dense blocks "
        "of 4 BN-ReLU-3x3 conv-dropout 0.2 layers, growth 12, each concatenated to its input, "
        "each followed by a transition down of BN, ReLU, a 1x1 conv, dropout and a 2x2 max "
        "pool; a 4-layer bottleneck block; 5 transitions up, each a 3x3 stride-2 transposed "
        "conv of the last block's new features, concatenated to the skip and a dense block; a "
        "1x1 conv to 12 classes, cross-entropy; RMSprop) on 224x224 crops of street scenes, "
        "batch 10, NCHW",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast (TF32 still off)",
        "expected_fix": "mixed_precision",
    },
    "v182": {
        "name": "mixed_precision",
        "model": "SE-ResNet-style CNN (SE-ResNet-50: a 7x7 stride-2 stem 64 ch and 3x3 max pool, "
        "16 bottlenecks in 4 stages of 3/4/6/3, 64-512 mid ch and 4 x as many out, each with a "
        "squeeze-and-excitation gate (global pool, 1x1 conv to 1/16, ReLU, 1x1 conv, sigmoid) "
        "before the residual sum; BatchNorm and ReLU; 1000 classes, SGD momentum 0.9) on "
        "160x160 images, batch 64, NCHW",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast (TF32 still off)",
        "expected_fix": "mixed_precision",
    },
    "v183": {
        "name": "null_cudnn_benchmark",
        "model": "CaiT-style vision transformer (CaiT-S12-like: a 16x16 stride-16 Conv2d patch "
        "embedding to d 384 of 224x224 images, 196 patches, learned positions; 12 pre-norm "
        "self-attention layers of 8 heads with LayerScale (1e-5), no talking heads, MLP 1536 "
        "with GELU; then 2 class-attention layers in which only the class token queries; 1000 "
        "classes) batch 128, bf16 autocast, AdamW(fused=True): the patch embedding its only "
        "convolution, ~1 % of the step's FLOPs",
        "planted": _PLANTED,
        "fix": _FIX + " (gains ~0: the one convolution, the patch embedding, a stride-16 16x16 "
        "conv with no overlap that cuDNN runs as a GEMM whatever the flag, is ~1 % of a step of "
        "attention and MLP matmuls)",
        "expected_fix": "cudnn_benchmark",
        "null": True,
    },
    "v184": {
        "name": "null_cudnn_benchmark",
        "model": "PointMLP-style point-cloud classifier (1024 points a cloud, a kernel-1 Conv1d "
        "embedding 3-64; 4 stages of 512/256/128/64 anchors (random sampling in place of "
        "farthest-point), each grouping 24 nearest neighbours, a geometric affine of their "
        "features about the anchor, a kernel-1 Conv1d transfer to 128/256/512/1024 ch, 2 "
        "residual point-MLP blocks before and 2 after a max over the neighbours; every conv "
        "kernel 1 with BatchNorm and ReLU, run over (batch, ch, anchors x neighbours); a 3-layer "
        "head to 40 classes) batch 16, fp32 with "
        "cuDNN TF32 (TF32 off for matmuls), SGD momentum 0.9: only 1x1 convolutions",
        "planted": _PLANTED,
        "fix": _FIX + " (gains ~0: every convolution is kernel 1, a plain GEMM for which "
        "cuDNN's heuristics and its measurement pick the same kind of kernel)",
        "expected_fix": "cudnn_benchmark",
        "null": True,
    },
}


def _arcnn(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 117.6 K MAC a pixel forward (9x9 3-64 15.6 K, 7x7 64-32 100.4 K, 1x1 0.5 K, 5x5 1.2
    # K) over 4.19 M pixels a step (batch 64 x 256x256): 2.8 TFLOP a step (FlopCounter; the
    # first conv's data gradient not needed) of fp32 convs with cuDNN TF32 at low channel
    # counts, ~100-200 TFLOP/s: ~14-28 ms; ReLUs and the MSE over ~0.45 G fp32 activations: ~5
    # GB, ~2 ms; ~40 kernels: GPU-bound, ~16-30 ms. For 9x9 and 7x7 kernels the candidates are
    # implicit GEMMs, FFT and tiled FFT, whose speeds the heuristics rank least surely:
    # benchmark ~5-25 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    img, batch = (32, 2) if k.quick else (256, 64)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 9, 1, 4), nn.ReLU(), nn.Conv2d(64, 32, 7, 1, 3), nn.ReLU(),
        nn.Conv2d(32, 16, 1), nn.ReLU(), nn.Conv2d(16, 3, 5, 1, 2),
    ).to(device)  # fmt: skip
    _bench(k, fixed, model)
    opt = k.adamw(model)
    gen = torch.Generator().manual_seed(180)
    # smooth clean images, their 8x8 blocks flattened toward the block mean as a JPEG at low
    # quality does, plus ringing-like noise
    clean = F.interpolate(
        torch.rand(batch, 3, img // 8, img // 8, generator=gen), scale_factor=8, mode="bicubic"
    ) + 0.05 * torch.randn(batch, 3, img, img, generator=gen)
    blocks = F.interpolate(F.avg_pool2d(clean, 8), scale_factor=8, mode="nearest")
    noisy = 0.6 * clean + 0.4 * blocks + 0.02 * torch.randn(batch, 3, img, img, generator=gen)
    x, target = noisy.to(device), clean.to(device)

    def loss_fn():
        return F.mse_loss(model(x), target)

    return k.train(opt, loss_fn), batch, model


def _fp32_no_tf32(k: Kit, fixed: bool) -> None:
    """The mixed-precision pairs' flags: cuDNN TF32 off (and matmul TF32, the kit's default) in
    both variants; ``cudnn.benchmark`` left off, as the kit sets it."""
    k.torch.backends.cudnn.allow_tf32 = False
    k.torch.backends.cuda.matmul.allow_tf32 = False
    k.meta["precision"] = "bf16 autocast, TF32 off" if fixed else "fp32, TF32 off"
    k.meta["torch_flags"] = {"cudnn_allow_tf32": False, "matmul_allow_tf32": False}


def _tiramisu(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 0.54 TFLOP a step at batch 10 of 224x224 crops (FlopCounter; 9 GMAC an image
    # forward, most of it in the dense layers at full and half resolution, 48-140 ch in, 12
    # out) of fp32 convs with TF32 off: CUDA-core fp32 convs of few output channels at ~25-40
    # TFLOP/s, ~14-22 ms; BN, ReLU, dropout and the concatenations copying every block's
    # growing input over ~1 G fp32 activations fwd+bwd: ~10-12 GB, ~4-5 ms; ~900 kernels (~9-22
    # ms of host, near the GPU's): ~18-28 ms planted. Under bf16 autocast the convs run on the
    # tensor cores, though at 12 output channels far below their peak, ~4-6 ms, and the
    # elementwise traffic partly halves: ~10-16 ms fixed (the host may set it), ~35-50 % off
    torch, nn, F = k.torch, k.nn, k.F
    h, w, batch, growth, first, per, classes = (
        (32, 32, 2, 4, 8, 2, 12) if k.quick else (224, 224, 10, 12, 48, 4, 12)
    )
    _fp32_no_tf32(k, fixed)

    def layer(ci: int) -> Any:
        return nn.Sequential(
            nn.BatchNorm2d(ci), nn.ReLU(), nn.Conv2d(ci, growth, 3, 1, 1), nn.Dropout2d(0.2)
        )

    class Dense(nn.Module):  # each layer's output concatenated to its input
        def __init__(self, ci: int, keep_input: bool) -> None:
            super().__init__()
            self.layers = nn.ModuleList(layer(ci + i * growth) for i in range(per))
            self.keep_input = keep_input

        def forward(self, x):
            new = []
            for lay in self.layers:
                out = lay(x)
                x = torch.cat([x, out], 1)
                new.append(out)
            return x if self.keep_input else torch.cat(new, 1)

    class Tiramisu(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = nn.Conv2d(3, first, 3, 1, 1)
            c, skips = first, []
            self.down, self.trans = nn.ModuleList(), nn.ModuleList()
            for _ in range(5):
                self.down.append(Dense(c, True))
                c += per * growth
                skips.append(c)
                self.trans.append(
                    nn.Sequential(
                        nn.BatchNorm2d(c),
                        nn.ReLU(),
                        nn.Conv2d(c, c, 1),
                        nn.Dropout2d(0.2),
                        nn.MaxPool2d(2),
                    )
                )
            self.bottleneck = Dense(c, False)
            up_c = per * growth
            self.ups, self.up_blocks = nn.ModuleList(), nn.ModuleList()
            for i, skip in enumerate(reversed(skips)):
                self.ups.append(nn.ConvTranspose2d(up_c, up_c, 3, 2, 1, output_padding=1))
                self.up_blocks.append(Dense(skip + up_c, i == 4))
            self.out = nn.Conv2d(skip + up_c + per * growth, classes, 1)

        def forward(self, x):
            x = self.first(x)
            skips = []
            for dense, trans in zip(self.down, self.trans, strict=True):
                x = dense(x)
                skips.append(x)
                x = trans(x)
            x = self.bottleneck(x)
            for up, block, skip in zip(self.ups, self.up_blocks, reversed(skips), strict=True):
                x = block(torch.cat([up(x), skip], 1))
            return self.out(x)

    model = Tiramisu().to(device)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(181)
    x = torch.randn(batch, 3, h, w, generator=gen).to(device)
    coarse = torch.randint(0, classes, (batch, 1, h // 16, w // 16), generator=gen)
    labels = F.interpolate(coarse.float(), scale_factor=16, mode="nearest")[:, 0].long()
    labels = labels.to(device)
    loss_fn = precision_loss(k, fixed, model, F.cross_entropy, x, labels)
    return k.train(opt, loss_fn), batch, model


def _se_resnet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 2.0 GMAC an image forward at 160x160 (FlopCounter: 0.79 TFLOP a step at batch 64) of
    # fp32 convs with TF32 off, ~25-45 TFLOP/s on the CUDA cores: ~18-32 ms; BatchNorm, ReLU,
    # the SE gates' pooling and scaling and the residual sums over ~1.2 G fp32 activations
    # fwd+bwd: ~12 GB, ~4-5 ms; ~650 kernels (~7-16 ms of host, under the GPU's): ~22-37 ms
    # planted. Under bf16 autocast the convs run on the tensor cores, ~3-5 ms, the elementwise
    # traffic partly halved: ~9-14 ms fixed, ~55-65 % off
    torch, nn, F = k.torch, k.nn, k.F
    img, batch, units, mids, stem, classes = (
        (32, 2, (1, 1, 1, 1), (8, 16, 16, 32), 8, 10)
        if k.quick
        else (160, 64, (3, 4, 6, 3), (64, 128, 256, 512), 64, 1000)
    )
    _fp32_no_tf32(k, fixed)

    class SEBottleneck(nn.Module):
        def __init__(self, ci: int, mid: int, stride: int) -> None:
            super().__init__()
            co = 4 * mid
            self.body = nn.Sequential(
                nn.Conv2d(ci, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                nn.Conv2d(mid, co, 1, bias=False), nn.BatchNorm2d(co),
            )  # fmt: skip
            self.se = nn.Sequential(
                nn.AdaptiveAvgPool2d(1), nn.Conv2d(co, co // 16, 1), nn.ReLU(),
                nn.Conv2d(co // 16, co, 1), nn.Sigmoid(),
            )  # fmt: skip
            self.short = _projection(k, ci, co, stride)

        def forward(self, x):
            out = self.body(x)
            out = out * self.se(out)
            return F.relu(out + (x if self.short is None else self.short(x)))

    def body(ci: int) -> tuple[list, int]:
        layers: list = []
        for i, (n, mid) in enumerate(zip(units, mids, strict=True)):
            for j in range(n):
                layers.append(SEBottleneck(ci, mid, 2 if (i > 0 and j == 0) else 1))
                ci = 4 * mid
        return layers, ci

    SEResNet = _pooled_net(k, "SEResNet", stem, classes, body)
    model = SEResNet().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(182)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)
    loss_fn = precision_loss(k, fixed, model, F.cross_entropy, x, y)
    return k.train(opt, loss_fn), batch, model


def _cait(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 4.7 GMAC an image forward (FlopCounter: 3.6 TFLOP a step at batch 128; the patch
    # embedding 58 M MAC an image, ~1 %) of bf16 matmuls and attention, ~350-450 TFLOP/s:
    # ~8-10 ms; LayerNorms, GELU, LayerScale, residuals and the weight casts over 25 K tokens
    # of d 384 (19 MB a bf16 tensor): ~8 GB, ~3-4 ms; ~700 kernels (~7-18 ms of host, near the
    # GPU's): ~12-20 ms. The patch embedding's conv, forward and weight gradient (no data
    # gradient: the images need none), ~0.1-0.2 ms whatever cuDNN picks: benchmark ~0-1 % off
    torch, nn, F = k.torch, k.nn, k.F
    img, patch, d, heads, depth, ca_depth, batch, classes = (
        (32, 8, 32, 4, 2, 1, 2, 10) if k.quick else (224, 16, 384, 8, 12, 2, 128, 1000)
    )

    class Attention(nn.Module):  # heads over (b, n, d); queries from the class token only if ca
        def __init__(self, ca: bool) -> None:
            super().__init__()
            self.ca = ca
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            b, n, _ = x.shape
            q, kk, v = self.qkv(x).view(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            if self.ca:
                q = q[:, :, :1]
            a = F.scaled_dot_product_attention(q, kk, v)
            return self.proj(a.transpose(1, 2).reshape(b, q.shape[2], d))

    class Layer(nn.Module):  # pre-norm attention and MLP, each scaled by LayerScale
        def __init__(self, ca: bool) -> None:
            super().__init__()
            self.ca = ca
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = Attention(ca)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.g1 = nn.Parameter(torch.full((d,), 1e-5))
            self.g2 = nn.Parameter(torch.full((d,), 1e-5))

        def forward(self, x, cls=None):
            if self.ca:  # class attention: the class token attends to itself and the patches
                u = torch.cat([cls, x], 1)
                cls = cls + self.g1 * self.attn(self.n1(u))
                return cls + self.g2 * self.mlp(self.n2(cls))
            x = x + self.g1 * self.attn(self.n1(x))
            return x + self.g2 * self.mlp(self.n2(x))

    class CaiT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Conv2d(3, d, patch, patch)
            self.pos = nn.Parameter(torch.randn(1, (img // patch) ** 2, d) * 0.02)
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.sa = nn.ModuleList(Layer(False) for _ in range(depth))
            self.ca = nn.ModuleList(Layer(True) for _ in range(ca_depth))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
            for lay in self.sa:
                x = lay(x)
            cls = self.cls.expand(x.shape[0], -1, -1)
            for lay in self.ca:
                cls = lay(x, cls)
            return self.head(self.norm(cls[:, 0]))

    model = CaiT().to(device)
    _bench(k, fixed, model, "bf16 autocast, cuDNN TF32 on, matmul TF32 off")
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(183)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    return k.train(opt, loss_fn), batch, model


def _pointmlp(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 1.5 TFLOP a step at batch 16 (FlopCounter; 15.6 GMAC a cloud forward, most of it in
    # the pre-extractors' kernel-1 convs over the 24 neighbours of each anchor) of fp32 1x1
    # convs with cuDNN TF32, GEMMs of 196 K columns (batch x anchors x neighbours) at ~150-250
    # TFLOP/s: ~6-10 ms; BatchNorm and ReLU over five 100 MB fp32 tensors a stage, the
    # neighbour gathers, the affine and the maxes, fwd+bwd: ~30-40 GB, ~12-15 ms; the 4 kNN
    # searches (cdist and topk, ~1 ms); ~600 kernels (~6-15 ms of host): GPU-bound, ~19-26 ms.
    # Each 1x1 conv has one natural algorithm (a GEMM): benchmark ~0-2 % off
    torch, nn, F = k.torch, k.nn, k.F
    points, batch, embed, dims, anchors, nbrs, classes = (
        (64, 2, 8, (16, 16, 32, 32), (32, 16, 8, 4), 4, 40)
        if k.quick
        else (1024, 16, 64, (128, 256, 512, 1024), (512, 256, 128, 64), 24, 40)
    )

    def cbr(ci: int, co: int, relu: bool = True) -> list:
        return [nn.Conv1d(ci, co, 1, bias=False), nn.BatchNorm1d(co)] + ([nn.ReLU()] * relu)

    class ResP(nn.Module):  # a residual point-MLP block: conv-BN-ReLU, conv-BN, add, ReLU
        def __init__(self, c: int) -> None:
            super().__init__()
            self.net = nn.Sequential(*cbr(c, c), *cbr(c, c, relu=False))

        def forward(self, x):
            return F.relu(x + self.net(x))

    class Stage(nn.Module):
        def __init__(self, ci: int, co: int, s: int) -> None:
            super().__init__()
            self.s = s
            self.alpha = nn.Parameter(torch.ones(1, 1, 1, ci))
            self.beta = nn.Parameter(torch.zeros(1, 1, 1, ci))
            self.transfer = nn.Sequential(*cbr(2 * ci, co))
            self.pre = nn.Sequential(ResP(co), ResP(co))
            self.pos = nn.Sequential(ResP(co), ResP(co))

        def forward(self, xyz, feat):  # xyz (b, n, 3), feat (b, c, n)
            b, c, _ = feat.shape
            a_xyz = xyz[:, : self.s]  # the clouds are shuffled: the first s points, a sample
            idx = torch.cdist(a_xyz, xyz).topk(nbrs, largest=False).indices  # (b, s, k)
            f = feat.transpose(1, 2)  # (b, n, c)
            grouped = torch.gather(
                f.unsqueeze(1).expand(b, self.s, -1, c), 2, idx[..., None].expand(-1, -1, -1, c)
            )  # (b, s, k, c)
            anchor = f[:, : self.s, None]
            diff = grouped - anchor
            std = diff.reshape(b, -1).std(-1)[:, None, None, None] + 1e-5
            g = self.alpha * diff / std + self.beta  # the geometric affine
            g = torch.cat([g, anchor.expand_as(g)], -1)  # (b, s, k, 2c)
            g = g.permute(0, 3, 1, 2).reshape(b, 2 * c, self.s * nbrs)  # kernel 1: pointwise
            g = self.pre(self.transfer(g)).view(b, -1, self.s, nbrs).amax(-1)  # (b, co, s)
            return a_xyz, self.pos(g)

    class PointMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Sequential(*cbr(3, embed))
            chans = (embed, *dims)
            self.stages = nn.ModuleList(Stage(chans[i], chans[i + 1], anchors[i]) for i in range(4))
            self.head = nn.Sequential(
                nn.Linear(dims[-1], 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5),
                nn.Linear(512, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.5),
                nn.Linear(256, classes),
            )  # fmt: skip

        def forward(self, xyz):
            feat = self.embed(xyz.transpose(1, 2))
            for st in self.stages:
                xyz, feat = st(xyz, feat)
            return self.head(feat.amax(-1))

    model = PointMLP().to(device)
    _bench(k, fixed, model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)
    gen = torch.Generator().manual_seed(184)
    # clouds on the surfaces of random boxes and spheres, shuffled, normalised to the unit ball
    u = torch.randn(batch, points, 3, generator=gen)
    sphere = u / u.norm(dim=-1, keepdim=True)
    box = torch.rand(batch, points, 3, generator=gen) * 2 - 1
    box = box / box.abs().amax(-1, keepdim=True)
    kind = torch.randint(0, 2, (batch, 1, 1), generator=gen).bool()
    scale = 0.5 + torch.rand(batch, 1, 3, generator=gen)
    xyz = torch.where(kind, sphere, box) * scale
    xyz = xyz / xyz.norm(dim=-1).amax(-1)[:, None, None]
    xyz = xyz[:, torch.randperm(points, generator=gen)].to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        return F.cross_entropy(model(xyz), y, label_smoothing=0.2)

    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v180": _arcnn,
    "v181": _tiramisu,
    "v182": _se_resnet,
    "v183": _cait,
    "v184": _pointmlp,
}
