"""The eleventh blind part's first five cases (v175-v179; record_blind11.py merges them), each a
``cudnn_benchmark`` pair on a conv net whose shapes cuDNN's heuristics meet differently: an
Attention U-Net-style 2-D segmenter with transposed convs in its decoder (v175), a TCN-style stack
of dilated causal Conv1d (v176), an nnU-Net-style 3-D segmenter of Conv3d on volumes (v177), an
SKNet-style CNN of grouped 3x3 convs (32 groups, plain and dilated; v178), all fp32 with PyTorch's
default cuDNN TF32 (matmul TF32 off, its default), and a PyramidNet-style CNN under bf16 autocast
in channels_last (v179). Planted ``torch.backends.cudnn.benchmark = False``, fixed ``True``; the
input shapes never change. Each family is one no earlier case used. Each builder: (kit, fixed,
device, rank) -> (step_fn, samples_per_step, model); planted and fixed build the same model from
the same seed and differ only in the flag. Sizes come from FLOP, byte and launch counts (FLOPs
from torch's FlopCounterMode on the CPU; not timed: nothing here ran on a GPU before the part was
fixed); each builder's comment gives its estimate of one step on an H100, convs at ~20-40 % of
the TF32 peak (~100-200 TFLOP/s), with the host time at ~10 and ~25 us an eager launch."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import FP32_TF32, Kit  # noqa: E402

_PLANTED = "torch.backends.cudnn.benchmark = False"
_FIX = "torch.backends.cudnn.benchmark = True"


def _bench(k: Kit, fixed: bool, model: Any, precision: str = FP32_TF32) -> None:
    """Set ``cudnn.benchmark`` as the variant says (before the first step) and record it, the
    precision and the model's conv layers by kind in ``k.meta``."""
    k.torch.backends.cudnn.benchmark = fixed
    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["precision"] = precision
    nn = k.nn
    kinds = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    k.meta["conv_layers"] = {
        t.__name__: n for t in kinds if (n := sum(type(m) is t for m in model.modules()))
    }


CASES: dict[str, dict] = {
    "v175": {
        "name": "cudnn_benchmark",
        "model": "Attention U-Net-style 2-D segmenter (an encoder of 5 levels 32/64/128/256/512 "
        "ch, two 3x3 convs with BatchNorm and ReLU a level, 2x2 max pools; a decoder of 2x2 "
        "stride-2 transposed convs, an additive attention gate on each skip (1x1 convs of the "
        "gating and skip features, ReLU, a 1x1 conv to one map, sigmoid), concatenation and two "
        "3x3 convs; a 1x1 conv to 4 classes, cross-entropy) on 256x256 images, batch 16, fp32 "
        "with cuDNN TF32 (TF32 off for matmuls)",
        "planted": _PLANTED,
        "fix": _FIX,
        "expected_fix": "cudnn_benchmark",
    },
    "v176": {
        "name": "cudnn_benchmark",
        "model": "TCN-style temporal convolutional network (byte-level language model: an "
        "embedding of 256 bytes to 256 ch, 8 residual blocks of two width-3 dilated causal "
        "Conv1d 256-256 (dilation 1 to 128, left-padded), ReLU and dropout 0.1, no weight norm; "
        "a 1x1 Conv1d to 256 bytes, cross-entropy on the next byte) on sequences of 2048 bytes, "
        "batch 32, fp32 with cuDNN TF32 (TF32 off for matmuls)",
        "planted": _PLANTED,
        "fix": _FIX,
        "expected_fix": "cudnn_benchmark",
    },
    "v177": {
        "name": "cudnn_benchmark",
        "model": "nnU-Net-style 3-D segmenter (3d_fullres layout: 5 stages 32/64/128/256/320 ch "
        "of two 3x3x3 Conv3d with InstanceNorm and LeakyReLU 0.01, the first strided 2 from the "
        "second stage on; a decoder of 2x2x2 stride-2 ConvTranspose3d, concatenation and two "
        "3x3x3 convs; a 1x1x1 conv to 3 classes, cross-entropy plus soft Dice, no deep "
        "supervision) on one-channel 80x80x80 patches, batch 2, fp32 with cuDNN TF32 (TF32 off "
        "for matmuls)",
        "planted": _PLANTED,
        "fix": _FIX,
        "expected_fix": "cudnn_benchmark",
    },
    "v178": {
        "name": "cudnn_benchmark",
        "model": "SKNet-style CNN (SKNet-26: a 7x7 stride-2 stem 64 ch and 3x3 max pool, 4 "
        "stages of 2 SK bottlenecks 128/256/512/1024 mid ch and 2 x as many out, strided 2 from "
        "the second stage; each a 1x1 conv, a selective-kernel conv of two 3x3 branches of 32 "
        "groups, one dilated 2, fused by a global pool, a 1x1 squeeze to 32-128 ch and a "
        "softmax over the two branches, then a 1x1 conv; BatchNorm and ReLU; 1000 classes) on "
        "224x224 images, batch 32, fp32 with cuDNN TF32 (TF32 off for matmuls)",
        "planted": _PLANTED,
        "fix": _FIX,
        "expected_fix": "cudnn_benchmark",
    },
    "v179": {
        "name": "cudnn_benchmark",
        "model": "PyramidNet-style CNN (bottleneck PyramidNet, alpha 300: a 7x7 stride-2 stem "
        "64 ch and 3x3 max pool, 16 bottleneck units in 4 stages of 3/4/6/3, the mid width "
        "growing by 18.75 ch a unit from 64 to 364 and the output 4 x it; each BatchNorm, 1x1 "
        "conv, BatchNorm, ReLU, 3x3 conv, BatchNorm, ReLU, 1x1 conv, BatchNorm, added to a "
        "zero-padded shortcut, 2x2 average pooled where strided; 1000 classes) on 224x224 "
        "images, batch 64, bf16 autocast, channels_last, SGD momentum 0.9",
        "planted": _PLANTED,
        "fix": _FIX,
        "expected_fix": "cudnn_benchmark",
    },
}


def _attention_unet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 12.3 GMAC an image forward (by hand: the encoder 4.3, the decoder's 3x3 convs 7.2,
    # the transposed convs and the gates ~0.8), x 16 x 2 x 3 = 1.18 TFLOP a step (FlopCounter) of fp32
    # convs with cuDNN TF32, ~100-200 TFLOP/s under the heuristics' picks: ~6-13 ms; BatchNorm,
    # ReLU, the gates and concatenations over ~1.2 G fp32 activations fwd+bwd at 256x256 and
    # 128x128: ~8-10 GB, ~3-4 ms; ~650 kernels (~7-16 ms of host): ~12-20 ms. benchmark times
    # every algorithm for the 18 3x3 shapes, the 4 transposed convs and the 1x1 gate convs
    # (forward, data and weight gradients): ~5-15 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    img, batch, widths, classes = (
        (32, 2, (8, 16, 16, 32, 32), 4) if k.quick else (256, 16, (32, 64, 128, 256, 512), 4)
    )

    def double(ci: int, co: int) -> Any:
        return nn.Sequential(
            nn.Conv2d(ci, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(),
            nn.Conv2d(co, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(),
        )  # fmt: skip

    class Gate(nn.Module):  # additive attention on the skip, gated by the decoder's features
        def __init__(self, c: int) -> None:
            super().__init__()
            inter = max(1, c // 2)
            self.wg = nn.Sequential(nn.Conv2d(c, inter, 1), nn.BatchNorm2d(inter))
            self.wx = nn.Sequential(nn.Conv2d(c, inter, 1), nn.BatchNorm2d(inter))
            self.psi = nn.Sequential(nn.Conv2d(inter, 1, 1), nn.BatchNorm2d(1), nn.Sigmoid())

        def forward(self, g, x):
            return x * self.psi(F.relu(self.wg(g) + self.wx(x)))

    class AttentionUNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            chans = (3, *widths)
            self.down = nn.ModuleList(double(chans[i], chans[i + 1]) for i in range(5))
            self.up = nn.ModuleList(
                nn.ConvTranspose2d(widths[i + 1], widths[i], 2, 2) for i in range(4)
            )
            self.gates = nn.ModuleList(Gate(widths[i]) for i in range(4))
            self.dec = nn.ModuleList(double(2 * widths[i], widths[i]) for i in range(4))
            self.out = nn.Conv2d(widths[0], classes, 1)

        def forward(self, x):
            skips = []
            for i, d in enumerate(self.down):
                x = d(x if i == 0 else F.max_pool2d(x, 2))
                skips.append(x)
            for i in reversed(range(4)):
                g = self.up[i](x)
                x = self.dec[i](torch.cat([self.gates[i](g, skips[i]), g], 1))
            return self.out(x)

    model = AttentionUNet().to(device)
    _bench(k, fixed, model)
    opt = k.adamw(model)
    gen = torch.Generator().manual_seed(175)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    coarse = torch.randint(0, classes, (batch, 1, img // 16, img // 16), generator=gen)
    labels = F.interpolate(coarse.float(), scale_factor=16, mode="nearest")[:, 0].long()
    labels = labels.to(device)

    def loss_fn():
        return F.cross_entropy(model(x), labels)

    return k.train(opt, loss_fn), batch, model


def _tcn(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 16 dilated width-3 Conv1d 256-256 over 65,536 positions a step (batch 32 x 2048):
    # 3.2 M MAC a position forward (FlopCounter, with the 1x1 output conv), 1.27 TFLOP a step
    # of fp32 convs with cuDNN TF32 (cuDNN runs them as 2-D convs of height 1), ~100-200
    # TFLOP/s: ~6-13 ms; the left pads, ReLUs, dropouts and residuals on 67 MB fp32 tensors,
    # ~30 passes a block forward and backward: ~16 GB, ~6-7 ms; ~280 kernels (~3-7 ms of
    # host): GPU-bound, ~13-20 ms. Dilation on Conv1d is where the heuristics pick least well
    # (v168's DeepLab): ~10-25 % off the convs, ~5-15 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    vocab, ch, blocks, seq, batch = (256, 16, 3, 64, 2) if k.quick else (256, 256, 8, 2048, 32)

    class Block(nn.Module):  # two dilated causal convs, ReLU and dropout, a residual
        def __init__(self, d: int) -> None:
            super().__init__()
            self.d = d
            self.c1 = nn.Conv1d(ch, ch, 3, dilation=d)
            self.c2 = nn.Conv1d(ch, ch, 3, dilation=d)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            h = self.drop(F.relu(self.c1(F.pad(x, (2 * self.d, 0)))))
            h = self.drop(F.relu(self.c2(F.pad(h, (2 * self.d, 0)))))
            return F.relu(x + h)

    class TCN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, ch)
            self.blocks = nn.Sequential(*[Block(2**i) for i in range(blocks)])
            self.out = nn.Conv1d(ch, vocab, 1)

        def forward(self, ids):
            return self.out(self.blocks(self.emb(ids).transpose(1, 2)))

    model = TCN().to(device)
    _bench(k, fixed, model)
    opt = k.adamw(model)
    gen = torch.Generator().manual_seed(176)
    # bytes of a text-like stream: a skewed draw over 256 values, runs of spaces between words
    data = torch.multinomial(
        torch.linspace(1, 0.01, vocab) ** 3, batch * (seq + 1), True, generator=gen
    ).view(batch, seq + 1)
    data[:, ::7] = 32
    ids, nxt = data[:, :-1].to(device), data[:, 1:].to(device)

    def loss_fn():
        return F.cross_entropy(model(ids), nxt)

    return k.train(opt, loss_fn), batch, model


def _nnunet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 115 GMAC an 80^3 patch forward (FlopCounter: 1.38 TFLOP a step at batch 2; the
    # 80^3 and 40^3 levels, encoder and decoder, most of it) of fp32 Conv3d with cuDNN TF32 (the
    # input conv's data gradient not needed), Conv3d at ~80-150 TFLOP/s under the heuristics:
    # ~9-17 ms; InstanceNorm and LeakyReLU over ~0.3 G fp32 voxel-channels fwd+bwd (66 MB a
    # 32-ch tensor at 80^3), the concatenations and the loss: ~6-8 GB, ~3 ms; ~330 kernels (~3-8
    # ms of host): GPU-bound, ~12-21 ms. 3-D convs are where cuDNN's heuristics have the fewest
    # tuned picks: benchmark ~10-30 % off the convs, ~8-20 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    side, batch, widths, classes = (
        (32, 1, (4, 4, 8, 8, 8), 3) if k.quick else (80, 2, (32, 64, 128, 256, 320), 3)
    )

    def stage(ci: int, co: int, stride: int) -> Any:
        return nn.Sequential(
            nn.Conv3d(ci, co, 3, stride, 1), nn.InstanceNorm3d(co, affine=True),
            nn.LeakyReLU(0.01),
            nn.Conv3d(co, co, 3, 1, 1), nn.InstanceNorm3d(co, affine=True), nn.LeakyReLU(0.01),
        )  # fmt: skip

    class NNUNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            chans = (1, *widths)
            self.enc = nn.ModuleList(
                stage(chans[i], chans[i + 1], 1 if i == 0 else 2) for i in range(5)
            )
            self.up = nn.ModuleList(
                nn.ConvTranspose3d(widths[i + 1], widths[i], 2, 2, bias=False) for i in range(4)
            )
            self.dec = nn.ModuleList(stage(2 * widths[i], widths[i], 1) for i in range(4))
            self.out = nn.Conv3d(widths[0], classes, 1)

        def forward(self, x):
            skips = []
            for e in self.enc:
                x = e(x)
                skips.append(x)
            for i in reversed(range(4)):
                x = self.dec[i](torch.cat([skips[i], self.up[i](x)], 1))
            return self.out(x)

    model = NNUNet().to(device)
    _bench(k, fixed, model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.99, nesterov=True)
    gen = torch.Generator().manual_seed(177)
    x = torch.randn(batch, 1, side, side, side, generator=gen).to(device)
    coarse = torch.randint(0, classes, (batch, 1, side // 8, side // 8, side // 8), generator=gen)
    labels = F.interpolate(coarse.float(), scale_factor=8, mode="nearest")[:, 0].long()
    labels = labels.to(device)
    onehot = F.one_hot(labels, classes).permute(0, 4, 1, 2, 3).float()

    def loss_fn():
        logits = model(x)
        prob = logits.softmax(1)
        inter = (prob * onehot).sum((2, 3, 4))
        dice = (2 * inter + 1e-5) / (prob.sum((2, 3, 4)) + onehot.sum((2, 3, 4)) + 1e-5)
        return F.cross_entropy(logits, labels) + (1 - dice[:, 1:].mean())

    return k.train(opt, loss_fn), batch, model


def _projection(k: Kit, ci: int, co: int, stride: int) -> Any:
    """A residual unit's shortcut: None where the input already has the output's shape, else a
    strided 1x1 convolution and BatchNorm (SKNet's and SE-ResNet's units)."""
    if stride == 1 and ci == co:
        return None
    return k.nn.Sequential(k.nn.Conv2d(ci, co, 1, stride, bias=False), k.nn.BatchNorm2d(co))


def _pooled_net(k: Kit, name: str, stem: int, classes: int, body: Callable[[int], Any]) -> Any:
    """The ImageNet-shaped net SKNet (v178), PyramidNet (v179) and SE-ResNet (v182) share, as a
    class named ``name``: a 7x7/2 stem convolution with BatchNorm and ReLU and a 3x3/2 max-pool,
    then the layers ``body(stem)`` returns with their output channels (``(layers, ci)``), as
    ``features``; global average pooling and ``fc`` to ``classes``. Made in that order inside
    ``__init__``, so a seed gives each builder the weights it was recorded with."""
    nn, F = k.nn, k.F

    def init(self: Any) -> None:
        nn.Module.__init__(self)
        layers: list = [
            nn.Conv2d(3, stem, 7, 2, 3, bias=False), nn.BatchNorm2d(stem), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]  # fmt: skip
        more, ci = body(stem)
        self.features = nn.Sequential(*layers, *more)
        self.fc = nn.Linear(ci, classes)

    def forward(self: Any, x: Any) -> Any:
        return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))

    return type(name, (nn.Module,), {"__init__": init, "forward": forward})


def _sknet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 4.9 GMAC an image forward at 224x224 (FlopCounter: 0.95 TFLOP a step at batch 32;
    # the 1x1 convs most of it, the two grouped 3x3 branches ~1.4, the stem 0.12) of fp32 convs
    # with cuDNN TF32: the dense 1x1s ~150-250 TFLOP/s, ~3-5 ms; the grouped 3x3s (4 ch a group
    # at the first stage, 32 at the last) far below the peak, bound by their ~50-200 MB fp32
    # activations, ~4-8 ms; BatchNorm, ReLU, the branch softmax and the weighted sum over ~0.5 G
    # activations fwd+bwd: ~8 GB, ~3 ms; ~750 kernels (~8-19 ms of host): ~12-22 ms. The
    # grouped and dilated grouped convs are where cuDNN's heuristics and measurement part (v56's
    # ResNeXt-style grouped convs): ~10-20 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    img, batch, mids, stem, classes = (
        (32, 2, (32, 32, 64, 64), 16, 10) if k.quick else (224, 32, (128, 256, 512, 1024), 64, 1000)
    )
    groups = 8 if k.quick else 32

    class SKConv(nn.Module):  # two grouped 3x3 branches (one dilated 2), softmax-selected
        def __init__(self, c: int, stride: int) -> None:
            super().__init__()
            self.branches = nn.ModuleList(
                nn.Sequential(
                    nn.Conv2d(c, c, 3, stride, d, d, groups=groups, bias=False),
                    nn.BatchNorm2d(c),
                    nn.ReLU(),
                )
                for d in (1, 2)
            )
            z = max(c // 16, 32)
            self.squeeze = nn.Sequential(
                nn.Conv2d(c, z, 1, bias=False), nn.BatchNorm2d(z), nn.ReLU()
            )
            self.select = nn.Conv2d(z, 2 * c, 1)

        def forward(self, x):
            u1, u2 = (b(x) for b in self.branches)
            s = self.squeeze(F.adaptive_avg_pool2d(u1 + u2, 1))
            a = self.select(s).view(x.shape[0], 2, -1, 1, 1).softmax(1)
            return u1 * a[:, 0] + u2 * a[:, 1]

    class SKUnit(nn.Module):
        def __init__(self, ci: int, mid: int, stride: int) -> None:
            super().__init__()
            co = 2 * mid
            self.body = nn.Sequential(
                nn.Conv2d(ci, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                SKConv(mid, stride),
                nn.Conv2d(mid, co, 1, bias=False), nn.BatchNorm2d(co),
            )  # fmt: skip
            self.short = _projection(k, ci, co, stride)

        def forward(self, x):
            return F.relu(self.body(x) + (x if self.short is None else self.short(x)))

    def body(ci: int) -> tuple[list, int]:
        layers: list = []
        for i, mid in enumerate(mids):
            for j in range(2):
                layers.append(SKUnit(ci, mid, 2 if (i > 0 and j == 0) else 1))
                ci = 2 * mid
        return layers, ci

    SKNet = _pooled_net(k, "SKNet", stem, classes, body)
    model = SKNet().to(device)
    _bench(k, fixed, model)
    k.meta["grouped_convs"] = sum(
        isinstance(m, nn.Conv2d) and m.groups > 1 for m in model.modules()
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(178)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        return F.cross_entropy(model(x), y)

    return k.train(opt, loss_fn), batch, model


def _pyramidnet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 5.1 GMAC an image forward at 224x224 (FlopCounter: 1.95 TFLOP a step at batch 64)
    # of bf16 convs in channels_last, ~300-450 TFLOP/s under the heuristics' picks: ~4-7 ms;
    # BatchNorm (4 a unit), ReLU, the padded shortcuts' concatenation and sums over ~1.5 G
    # bf16/fp32 activations fwd+bwd: ~12 GB, ~5 ms; ~600 kernels (~6-15 ms of host): ~10-16
    # ms. Under bf16 channels_last the heuristics mostly pick the NHWC tensor core kernels
    # already: benchmark ~3-10 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    img, batch, units, alpha, stem, classes = (
        (32, 2, (1, 1, 1, 1), 32, 16, 10) if k.quick else (224, 64, (3, 4, 6, 3), 300, 64, 1000)
    )
    step_w = alpha / sum(units)

    class Unit(nn.Module):  # PyramidNet's bottleneck (BN first, no ReLU before the first conv)
        def __init__(self, ci: int, mid: int, stride: int) -> None:
            super().__init__()
            co = 4 * mid
            self.body = nn.Sequential(
                nn.BatchNorm2d(ci), nn.Conv2d(ci, mid, 1, bias=False), nn.BatchNorm2d(mid),
                nn.ReLU(), nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid),
                nn.ReLU(), nn.Conv2d(mid, co, 1, bias=False), nn.BatchNorm2d(co),
            )  # fmt: skip
            self.stride, self.pad = stride, co - ci

        def forward(self, x):
            out = self.body(x)
            short = F.avg_pool2d(x, 2) if self.stride > 1 else x
            pad = short.new_zeros(short.shape[0], self.pad, *short.shape[2:])
            pad = pad.contiguous(memory_format=torch.channels_last)  # as the features
            return out + torch.cat([short, pad], 1)

    def body(ci: int) -> tuple[list, int]:
        layers: list = []
        width = float(ci)
        for i, n in enumerate(units):
            for j in range(n):
                width += step_w
                layers.append(Unit(ci, round(width), 2 if (i > 0 and j == 0) else 1))
                ci = 4 * round(width)
        return [*layers, nn.BatchNorm2d(ci), nn.ReLU()], ci

    PyramidNet = _pooled_net(k, "PyramidNet", stem, classes, body)
    model = PyramidNet().to(device, memory_format=torch.channels_last)
    _bench(k, fixed, model, "bf16 autocast, cuDNN TF32 on, matmul TF32 off")
    k.meta["memory_format"] = "channels_last"
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(179)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v175": _attention_unet,
    "v176": _tcn,
    "v177": _nnunet,
    "v178": _sknet,
    "v179": _pyramidnet,
}
