"""The eighth blind part's first five cases (v130-v134; record_blind8.py merges them): torch.compile
on a ConvFormer-style image classifier whose time is in memory-bound LayerNorm, StarReLU and
layer-scale chains (v130) and on a PeleeNet-style densely connected CNN whose elementwise work is
training BatchNorm, ReLU and concatenation (v131), activation checkpointing on a Squeezeformer-style
speech encoder with most of the GPU's memory free (v132), an unfused Adam over the 361 small
parameter tensors of a FiBiNET-style click-through ranking model (v133), and bf16 autocast on a
T5-style encoder-decoder with TF32 off for matmuls and cuDNN (v134). The families asked for first
(ConvNeXt, DenseNet, Conformer) had been used by earlier parts; each case takes a sibling family
never used. Sizes come from FLOP, byte and launch counts (not timed: nothing ran on a GPU before
the part was fixed); each builder's comment gives its estimate of one step on an H100."""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, precision_loss  # noqa: E402

CASES: dict[str, dict] = {
    "v130": {
        "name": "kernel_fusion",
        "model": "ConvFormer-style image classifier (channels-last throughout: 7x7 stride-4 stem "
        "conv and LayerNorm, stages 64/128/320/512 ch with 2/2/6/2 blocks, pre-LayerNorm 3x3 "
        "stride-2 downsampling convs; each block LayerNorm over channels, a separable-conv "
        "token mixer (pointwise Linear 2x, StarReLU s * relu(x)^2 + b, permute, depthwise 7x7 "
        "conv, permute back, pointwise Linear), layer scale and residual, then LayerNorm, MLP "
        "4x with StarReLU, layer scale and residual; mean pool, LayerNorm, Linear to 1000 "
        "classes, cross-entropy) on 224x224 images, batch 48, bf16 autocast: the time in "
        "memory-bound LayerNorm, StarReLU and layer-scale chains",
        "planted": "eager (each elementwise op its own memory-bound kernel)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v131": {
        "name": "kernel_fusion",
        "model": "PeleeNet-style densely connected CNN (stem block: strided 3x3 conv 32 ch, a "
        "1x1-3x3 strided branch beside a 2x2 max pool, concatenated, 1x1 conv; 4 stages of "
        "2/3/6/3 two-way dense layers, growth 32, bottleneck widths 1/2/4/4: one branch 1x1 "
        "then 3x3 to 16 ch, the other 1x1 then two 3x3 to 16 ch, both concatenated onto the "
        "input; transition 1x1 convs keeping the width, 2x2 average pools after stages 1-3; "
        "78 convs, each followed by training-mode BatchNorm and ReLU; 96/192/384/480 ch; NCHW; "
        "mean pool, Linear to 1000 classes, cross-entropy) on 224x224 images, batch 192, bf16 "
        "autocast",
        "planted": "eager (each elementwise op its own memory-bound kernel)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v132": {
        "name": "activation_checkpointing",
        "model": "Squeezeformer-style speech encoder (depthwise-separable conv subsampling 4x "
        "of 80-mel x 1600 frames, 144 ch, to 400 frames, Linear to d 384, sinusoidal "
        "positions; 12 post-LayerNorm blocks, 6 heads, each MHSA, half-step FFN 4x Swish, conv "
        "module (pointwise, Swish, depthwise k31, BatchNorm, Swish, pointwise), half-step FFN, "
        "every module after a learned scale and bias and followed by residual and LayerNorm; a "
        "temporal U-Net: strided depthwise conv to 200 frames after block 6, repeated back to "
        "400 with a skip after block 12; CTC loss over 128 tokens, 80 per utterance), batch "
        "32, bf16 autocast; most of the GPU's memory free",
        "planted": "torch.utils.checkpoint on every Squeezeformer block (12 nn.Modules)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v133": {
        "name": "optimizer_fused",
        "model": "FiBiNET-style click-through ranking model (26 categorical fields, each its own "
        "embedding table of 500-20000 x 16, dense gradients; SENET field reweighting 26-13-26; "
        "field-interaction bilinear layer, one 16 x 16 weight per field pair (325 pairs), "
        "applied to the raw and the reweighted embeddings as one batched matmul; 13 dense "
        "features; DNN 10413-400-400-400-1 with ReLU, binary cross-entropy; 361 parameter "
        "tensors), batch 4096, fp32: a short step beside the optimizer's loop",
        "planted": "Adam(foreach=False): a Python loop of small kernels per parameter",
        "fix": "Adam(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v134": {
        "name": "mixed_precision",
        "model": "T5-style encoder-decoder (6 + 6 pre-norm layers d 512, 8 heads, no biases; "
        "RMSNorm; gated-GELU FFN 1024; bucketed relative position bias, 32 buckets, "
        "bidirectional in the encoder, causal in the decoder, one table per stack shared by "
        "its layers; attention as explicit matmuls without scaling; shared token embedding, "
        "vocab 8192, separate LM head; cross-entropy) on 512 source and 128 target tokens, "
        "batch 16, fp32, TF32 off (matmuls and cuDNN) in both variants",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast (TF32 still off)",
        "expected_fix": "mixed_precision",
    },
}


def _compiled_classifier(
    k: Kit, fixed: bool, device: str, model, img: int, classes: int, batch: int
):
    """The step of an image classifier ``model`` (v130, v131): ``model`` moved to ``device``, AdamW
    (fused on a GPU), torch.compile of it in the fixed variant (eager in the planted one), one
    fixed batch of ``batch`` random ``img`` x ``img`` RGB images and labels of ``classes``
    classes, cross-entropy on the fp32 logits under ``k.ac`` (bf16 autocast on a GPU). Records
    ``compiled`` in ``k.meta``; returns (step_fn, samples_per_step, model). ``batch`` ×
    ``k.batch_scale`` (4 under v131's ``batch_size`` first fix, record_blind8.FIRST_FIXES)."""
    torch, F = k.torch, k.F
    batch *= k.batch_scale
    model = model.to(device)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model) if fixed else model
    x = torch.randn(batch, 3, img, img, device=device)
    y = torch.randint(0, classes, (batch,), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(run(x).float(), y)

    k.meta["compiled"] = fixed
    return k.train(opt, loss_fn), batch, model


def _convformer(k: Kit, fixed: bool, device: str, rank: int):
    # H100 eager: per image the 12 blocks hold ~1.03M channel-positions (sum of H*W*C); each
    # block's LayerNorms, StarReLUs (relu, square, scale with an fp32 parameter: fp32 out, bias),
    # bf16 casts, layer scales and residual adds move ~230 B per channel-position forward, ~700
    # fwd+bwd: ~0.72 GB an image, x 48 = 35 GB, ~14 ms at 2.5 TB/s; matmuls ~5 GFLOP fwd an image,
    # x 3 x 48 = 0.75 TFLOP bf16 (~2.5 ms) and the depthwise 7x7 convs ~1.5 ms: ~18 ms on the GPU
    # vs ~900 launches fwd+bwd (~6 ms of host). Compiled: the chains fused, ~8 ms.
    torch, nn, F = k.torch, k.nn, k.F
    img, widths, depths, classes, batch = (
        (32, (8, 16, 24, 32), (1, 1, 1, 1), 10, 2)
        if k.quick
        else (224, (64, 128, 320, 512), (2, 2, 6, 2), 1000, 48)
    )

    class StarReLU(nn.Module):  # s * relu(x)^2 + b, learned scalars s and b
        def __init__(self) -> None:
            super().__init__()
            self.scale, self.bias = nn.Parameter(torch.ones(1)), nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return self.scale * F.relu(x) ** 2 + self.bias

    class SepConv(nn.Module):  # pointwise 2x, StarReLU, depthwise 7x7, pointwise back
        def __init__(self, c: int) -> None:
            super().__init__()
            self.pw1, self.act = nn.Linear(c, 2 * c, bias=False), StarReLU()
            self.dw = nn.Conv2d(2 * c, 2 * c, 7, padding=3, groups=2 * c, bias=False)
            self.pw2 = nn.Linear(2 * c, c, bias=False)

        def forward(self, x):  # x: (b, h, w, c)
            h = self.dw(self.act(self.pw1(x)).permute(0, 3, 1, 2))
            return self.pw2(h.permute(0, 2, 3, 1))

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(c, eps=1e-6), nn.LayerNorm(c, eps=1e-6)
            self.mixer = SepConv(c)
            self.mlp = nn.Sequential(
                nn.Linear(c, 4 * c, bias=False), StarReLU(), nn.Linear(4 * c, c, bias=False)
            )
            self.ls1 = nn.Parameter(torch.full((c,), 1e-2))
            self.ls2 = nn.Parameter(torch.full((c,), 1e-2))

        def forward(self, x):
            x = x + self.ls1 * self.mixer(self.n1(x))
            return x + self.ls2 * self.mlp(self.n2(x))

    class Down(nn.Module):  # pre-LayerNorm, strided 3x3 conv, channels-last in and out
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.norm, self.conv = nn.LayerNorm(ci, eps=1e-6), nn.Conv2d(ci, co, 3, 2, 1)

        def forward(self, x):
            return self.conv(self.norm(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)

    class ConvFormer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, widths[0], 7, 4, 2)
            self.stem_norm = nn.LayerNorm(widths[0], eps=1e-6)
            stages = []
            for s, (c, n) in enumerate(zip(widths, depths, strict=True)):
                down = [Down(widths[s - 1], c)] if s else []
                stages.append(nn.Sequential(*down, *[Block(c) for _ in range(n)]))
            self.stages = nn.Sequential(*stages)
            self.norm, self.head = nn.LayerNorm(widths[-1]), nn.Linear(widths[-1], classes)

        def forward(self, x):
            h = self.stem_norm(self.stem(x).permute(0, 2, 3, 1))
            return self.head(self.norm(self.stages(h).mean((1, 2))))

    return _compiled_classifier(k, fixed, device, ConvFormer(), img, classes, batch)


def _peleenet(k: Kit, fixed: bool, device: str, rank: int):
    # H100 eager: 0.62 GFLOP fwd an image, x 3 x 192 = 0.36 TFLOP of bf16 convs, most of them
    # 16-64 ch at 56x56 and 28x28 (~40 TFLOP/s: ~9 ms); 2.35M conv-output elements an image,
    # each through cuDNN's training BatchNorm and ReLU (~28 B fwd+bwd), and 1.5M concatenated
    # (~8 B): ~80 MB an image, ~15 GB a step, ~6 ms: ~15 ms on the GPU vs ~700 launches fwd+bwd
    # (~5 ms of host). Compiled: BatchNorm's statistics still a reduction over each conv's
    # output, normalise and ReLU fused, the concatenations written in place: ~13 ms, ~10-15 %.
    # (Stages trimmed from PeleeNet's 3/4/8/6 to keep the first compilation short.)
    torch, nn = k.torch, k.nn
    img, stem, growth, layers, widths, classes, batch = (
        (32, 16, 8, (1, 1, 1, 1), (1, 2, 4, 4), 10, 2)
        if k.quick
        else (224, 32, 32, (2, 3, 6, 3), (1, 2, 4, 4), 1000, 192)
    )
    half = growth // 2

    def cbr(ci: int, co: int, ks: int, s: int = 1):  # conv, training BatchNorm, ReLU
        return nn.Sequential(
            nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co), nn.ReLU(True)
        )

    class StemBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = cbr(3, stem, 3, 2)
            self.branch = nn.Sequential(cbr(stem, stem // 2, 1), cbr(stem // 2, stem, 3, 2))
            self.pool, self.fuse = nn.MaxPool2d(2, 2), cbr(2 * stem, stem, 1)

        def forward(self, x):
            h = self.conv(x)
            return self.fuse(torch.cat([self.branch(h), self.pool(h)], 1))

    class DenseLayer(nn.Module):  # two-way: 1x1-3x3 and 1x1-3x3-3x3, concatenated onto x
        def __init__(self, ci: int, width: int) -> None:
            super().__init__()
            inter = int(half * width / 4) * 4
            inter = ci // 8 * 4 if inter > ci // 2 else inter
            self.a = nn.Sequential(cbr(ci, inter, 1), cbr(inter, half, 3))
            self.b = nn.Sequential(cbr(ci, inter, 1), cbr(inter, half, 3), cbr(half, half, 3))

        def forward(self, x):
            return torch.cat([x, self.a(x), self.b(x)], 1)

    class PeleeNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            parts: list = [StemBlock()]
            c = stem
            for s, (n, width) in enumerate(zip(layers, widths, strict=True)):
                for _ in range(n):
                    parts.append(DenseLayer(c, width))
                    c += growth
                parts.append(cbr(c, c, 1))  # transition, the width kept
                if s < len(layers) - 1:
                    parts.append(nn.AvgPool2d(2, 2))
            self.features = nn.Sequential(*parts)
            self.head = nn.Linear(c, classes)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))

    return _compiled_classifier(k, fixed, device, PeleeNet(), img, classes, batch)


def _squeezeformer(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per utterance ~22 d^2 + 2 T d MACs a frame a block (7.1 MFLOP) over 6 blocks at 400
    # frames and 6 at 200, with the subsampling 25 GFLOP fwd (FLOP-counted), x 3 x 32 = 2.4 TFLOP
    # bf16 (~250 TFLOP/s: ~10 ms) + ~13 GB of norm, scale, Swish, BatchNorm traffic (~5 ms):
    # ~15 ms fixed; ~1,600 launches fwd+bwd (~9 ms of host). The planted recompute of every
    # block's forward adds ~6 ms of GPU time and ~550 launches: ~21 ms, ~25-30 %. Memory: ~3 GB
    # of activations saved fixed.
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    mels, frames, sub, d, heads, blocks, vocab, target, batch = (
        (16, 32, 8, 16, 2, 2, 10, 3, 2) if k.quick else (80, 1600, 144, 384, 6, 12, 128, 80, 32)
    )
    mid = blocks // 2

    class ScaleBias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w, self.b = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

        def forward(self, x):
            return x * self.w + self.b

    class MHSA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(x).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v)
            return self.o(a.transpose(1, 2).reshape(b, t, d))

    def ffn():
        return nn.Sequential(nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))

    class ConvModule(nn.Module):  # pointwise, Swish, depthwise k31, BatchNorm, Swish, pointwise
        def __init__(self) -> None:
            super().__init__()
            self.pw1, self.pw2 = nn.Linear(d, d), nn.Linear(d, d)
            self.dw = nn.Conv1d(d, d, 31, padding=15, groups=d)
            self.bn = nn.BatchNorm1d(d)

        def forward(self, x):
            h = F.silu(self.pw1(x)).transpose(1, 2)
            return self.pw2(F.silu(self.bn(self.dw(h))).transpose(1, 2))

    class Block(nn.Module):  # post-LayerNorm: MHSA, FFN, conv, FFN (the FFNs half-step)
        def __init__(self) -> None:
            super().__init__()
            self.mods = nn.ModuleList([MHSA(), ffn(), ConvModule(), ffn()])
            self.scales = nn.ModuleList([ScaleBias() for _ in range(4)])
            self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(4)])

        def forward(self, x):
            for i, (m, s, n) in enumerate(zip(self.mods, self.scales, self.norms, strict=True)):
                h = m(s(x))
                x = n(x + (0.5 * h if i % 2 else h))
            return x

    class Squeezeformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sub = nn.Sequential(
                nn.Conv2d(1, sub, 3, 2, 1),
                nn.ReLU(),
                nn.Conv2d(sub, sub, 3, 2, 1, groups=sub),
                nn.Conv2d(sub, sub, 1),
                nn.ReLU(),
            )
            self.proj = nn.Linear(sub * (mels // 4), d)
            self.blocks = nn.ModuleList([Block() for _ in range(blocks)])
            self.reduce_dw = nn.Conv1d(d, d, 3, 2, 1, groups=d)
            self.reduce_pw, self.recover = nn.Linear(d, d), nn.Linear(d, d)
            self.head = nn.Linear(d, vocab)
            t = frames // 4
            pos = torch.arange(t)[:, None] * torch.exp(torch.arange(0, d, 2) * (-4 / d))[None]
            self.register_buffer("pos", torch.cat([pos.sin(), pos.cos()], 1), persistent=False)

        def forward(self, mel):  # mel: (b, mels, frames)
            h = self.sub(mel[:, None])  # (b, sub, mels/4, frames/4)
            h = self.proj(h.permute(0, 3, 1, 2).flatten(2)) + self.pos
            t = h.shape[1]
            skip = h
            for i, blk in enumerate(self.blocks):
                if i == mid:  # temporal U-Net: half the frames in the middle blocks
                    skip = h
                    h = self.reduce_pw(self.reduce_dw(h.transpose(1, 2)).transpose(1, 2))
                h = blk(h) if fixed else checkpoint(blk, h, use_reentrant=False)
            h = skip + self.recover(h.repeat_interleave(2, 1)[:, :t])
            return self.head(h)

    model = Squeezeformer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    mel = torch.randn(batch, mels, frames, device=device)
    labels = torch.randint(1, vocab, (batch, target), device=device)
    t_out = torch.full((batch,), frames // 4, dtype=torch.long, device=device)
    t_lab = torch.full((batch,), target, dtype=torch.long, device=device)

    def loss_fn():
        with k.ac:
            logp = F.log_softmax(model(mel).float(), -1).transpose(0, 1)
        return F.ctc_loss(logp, labels, t_out, t_lab)

    k.meta["checkpointed_modules"] = 0 if fixed else len(model.blocks)
    return k.train(opt, loss_fn), batch, model


def _fibinet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: the GPU idles: the DNN's 10413 x 400 layer is 34 GFLOP fwd (x 3, fp32 without TF32,
    # ~2.3 ms), the (4096, 325, 16) interaction tensors ~1 GB of traffic (~0.5 ms); ~430 launches
    # fwd+bwd (26 lookups, each table's dense embedding backward ~10 kernels; ~4 ms of host).
    # The planted loop: ~7 kernels and ~65 us of host per tensor over 361 tensors, ~23 ms: ~28
    # ms planted, ~5 ms with the fused Adam's ~11 multi-tensor launches.
    torch, nn, F = k.torch, k.nn, k.F
    fields, dense_n, emb, hidden, batch = (4, 3, 4, 16, 8) if k.quick else (26, 13, 16, 400, 4096)
    vocabs = [(10 + 3 * i) if k.quick else 500 * (1 + (7 * i) % 40) for i in range(fields)]
    pairs = [(i, j) for i in range(fields) for j in range(i + 1, fields)]

    class FiBiNET(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tables = nn.ModuleList([nn.Embedding(v, emb) for v in vocabs])
            self.squeeze = nn.Linear(fields, max(1, fields // 2), bias=False)
            self.excite = nn.Linear(max(1, fields // 2), fields, bias=False)
            self.bilinear = nn.ModuleList([nn.Linear(emb, emb, bias=False) for _ in pairs])
            self.register_buffer("left", torch.tensor([i for i, _ in pairs]), persistent=False)
            self.register_buffer("right", torch.tensor([j for _, j in pairs]), persistent=False)
            din = 2 * len(pairs) * emb + dense_n
            self.dnn = nn.Sequential(
                nn.Linear(din, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, 1),
            )

        def interact(self, e, w):  # per pair (i, j): (W_ij e_i) * e_j
            vi = torch.einsum("bpi,poi->bpo", e[:, self.left], w)
            return (vi * e[:, self.right]).flatten(1)

        def forward(self, ids, dense):
            e = torch.stack([t(ids[:, f]) for f, t in enumerate(self.tables)], 1)  # (b, F, emb)
            a = F.relu(self.excite(F.relu(self.squeeze(e.mean(-1)))))  # SENET field weights
            w = torch.stack([lin.weight for lin in self.bilinear])  # (pairs, emb, emb)
            h = torch.cat([self.interact(e, w), self.interact(e * a[..., None], w), dense], 1)
            return self.dnn(h).squeeze(-1)

    model = FiBiNET().to(device)
    kw = {"fused": True} if fixed and k.cuda else {"foreach": fixed}
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, **kw)
    ids = torch.stack([torch.randint(0, v, (batch,)) for v in vocabs], 1).to(device)
    dense = torch.randn(batch, dense_n, device=device)
    clicks = (torch.rand(batch, device=device) < 0.25).float()

    def loss_fn():
        return F.binary_cross_entropy_with_logits(model(ids, dense), clicks)

    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "Adam(fused=True)" if fixed else "Adam(foreach=False)"
    return k.train(opt, loss_fn), batch, model


def _t5(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per sample 19.3 GFLOP fwd in the encoder (512 tokens x 6 layers x (2.6M MACs of
    # projections and FFN + 0.5M of attention) x 2), 9 in the decoder (128 tokens, cross keys
    # and values over 512) and 1.1 in the LM head: 29.4 GFLOP, x 3 x 16 = 1.41 TFLOP; fp32 without
    # TF32 at ~45 TFLOP/s: ~31 ms + ~10 GB of fp32 score and norm traffic (~4 ms): ~35 ms. bf16:
    # ~4.5 ms of matmuls + ~5 ms of traffic (the scores stay fp32: the fp32 bias promotes them)
    # beside ~1,800 launches fwd+bwd (~9 ms of host): ~10 ms.
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    src, tgt, d, heads, ff, layers, vocab, batch = (
        (16, 8, 16, 2, 32, 1, 50, 2) if k.quick else (512, 128, 512, 8, 1024, 6, 8192, 16)
    )
    hd, n_buckets, max_dist = d // heads, 32, 128

    def buckets(q_len: int, k_len: int, bidirectional: bool):  # T5's relative buckets
        rel = torch.arange(k_len)[None] - torch.arange(q_len)[:, None]
        n, out = n_buckets, torch.zeros_like(rel)
        if bidirectional:
            n //= 2
            out = (rel > 0).long() * n
            rel = rel.abs()
        else:
            rel = -rel.clamp(max=0)
        exact = n // 2
        log = torch.log(rel.clamp(min=1).float() / exact) / math.log(max_dist / exact)
        large = (exact + (log * (n - exact)).long()).clamp(max=n - 1)
        return out + torch.where(rel < exact, rel, large)

    class RMSNorm(nn.Module):  # no mean, no bias; the variance in fp32
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(d))

        def forward(self, x):
            var = x.float().pow(2).mean(-1, keepdim=True)
            return self.w * (x * torch.rsqrt(var + 1e-6))

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.v, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)

        def forward(self, x, kv, bias=None):
            b, t, _ = x.shape
            s = kv.shape[1]
            q = self.q(x).view(b, t, heads, hd).transpose(1, 2)
            kk = self.k(kv).view(b, s, heads, hd).transpose(1, 2)
            v = self.v(kv).view(b, s, heads, hd).transpose(1, 2)
            scores = q @ kk.transpose(-1, -2)  # T5: no 1/sqrt(d) scaling
            if bias is not None:
                scores = scores + bias
            a = torch.softmax(scores.float(), -1).type_as(scores)
            return self.o((a @ v).transpose(1, 2).reshape(b, t, d))

    class GatedGelu(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wi0, self.wi1 = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
            self.wo = nn.Linear(ff, d, bias=False)

        def forward(self, x):
            return self.wo(F.gelu(self.wi0(x), approximate="tanh") * self.wi1(x))

    class EncoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.attn, self.n2, self.ff = RMSNorm(), Attention(), RMSNorm(), GatedGelu()

        def forward(self, x, bias):
            h = self.n1(x)
            x = x + self.attn(h, h, bias)
            return x + self.ff(self.n2(x))

    class DecoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.self_attn = RMSNorm(), Attention()
            self.n2, self.cross = RMSNorm(), Attention()
            self.n3, self.ff = RMSNorm(), GatedGelu()

        def forward(self, x, memory, bias):
            h = self.n1(x)
            x = x + self.self_attn(h, h, bias)
            x = x + self.cross(self.n2(x), memory)
            return x + self.ff(self.n3(x))

    class T5(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.enc_rel, self.dec_rel = (
                nn.Embedding(n_buckets, heads),
                nn.Embedding(n_buckets, heads),
            )
            self.enc = nn.ModuleList([EncoderLayer() for _ in range(layers)])
            self.dec = nn.ModuleList([DecoderLayer() for _ in range(layers)])
            self.enc_norm, self.dec_norm = RMSNorm(), RMSNorm()
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.register_buffer("enc_b", buckets(src, src, True), persistent=False)
            self.register_buffer("dec_b", buckets(tgt, tgt, False), persistent=False)
            causal = torch.full((tgt, tgt), -1e9).triu(1)
            self.register_buffer("causal", causal, persistent=False)

        def forward(self, pair):
            ids, dec_ids = pair
            enc_bias = self.enc_rel(self.enc_b).permute(2, 0, 1)[None]  # (1, heads, src, src)
            dec_bias = self.dec_rel(self.dec_b).permute(2, 0, 1)[None] + self.causal
            x = self.embed(ids)
            for layer in self.enc:
                x = layer(x, enc_bias)
            memory = self.enc_norm(x)
            y = self.embed(dec_ids)
            for layer in self.dec:
                y = layer(y, memory, dec_bias)
            return self.lm_head(self.dec_norm(y)).flatten(0, 1)

    model = T5().to(device)
    opt = k.adamw(model, fused=k.cuda)
    ids = torch.randint(1, vocab, (batch, src), device=device)
    labels = torch.randint(1, vocab, (batch, tgt), device=device)
    dec_ids = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], 1)  # shifted right

    loss_fn = precision_loss(k, fixed, model, F.cross_entropy, (ids, dec_ids), labels.flatten())

    k.meta["precision"] = "bf16 autocast, TF32 off" if fixed else "fp32, TF32 off"
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v130": _convformer,
    "v131": _peleenet,
    "v132": _squeezeformer,
    "v133": _fibinet,
    "v134": _t5,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
