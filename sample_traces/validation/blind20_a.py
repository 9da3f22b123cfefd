"""The twentieth blind part's cases v236-v239 (merged by record_blind20.py): four one-GPU pairs on
model families no earlier case used, chosen to judge on unseen runs ``optimizer_fused``'s
re-timing factors, read off the fused steps of the sixteen looping pairs recorded before
(``OPS_KEPT``, ``BOOKKEEPING_KEPT``, ``KERNELS_KEPT``; sample_traces/validation/optimizer_fused):
the optimizer's per-parameter loop (``foreach=False``) planted on a host-bound step (v236), on a
GPU-bound one where the loop's own kernels are what it costs (v237), and on a step between (v238);
and one chosen to gain nothing, a loop over two tensors beside a GPU-bound step (v239).

An xDeepFM-style click-through model with AdamW's loop over its 93 tensors (v236); a CvT-style
convolutional vision transformer in fp32 with AdamW's loop over its 341 tensors (v237); an
NFNet-style normalizer-free network under bf16 autocast with Adam's loop over its 233 tensors
(v238); a Word2Vec-style skip-gram model with AdamW's loop over its two embedding tables (v239).
The fix is ``fused=True`` in each.

Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model); planted and fixed
build the same model from the same seed and differ only in the optimizer's ``foreach=False`` /
``fused=True``. Sizes come from FLOP, byte and launch counts over one step, worked by hand
(nothing here ran on a GPU before the part was fixed); each builder's comment gives its estimate
of one step on an H200 (fp32 matmuls at ~50 TFLOP/s, bf16 and TF32 convolutions at ~100-200,
memory at ~3.5 TB/s, ~10-25 us of host an eager launch, ~65-95 us of host and ~9 kernels of ~2-3
us a parameter tensor in the planted loop, as the looping pairs recorded before ran).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import FP32_TF32, Kit  # noqa: E402

CASES: dict[str, dict] = {
    "v236": {
        "name": "optimizer_fused",
        "model": "xDeepFM-style click-through model (39 categorical fields, each its own "
        "embedding table of 1,000-40,000 rows x 10 and its own 1-D table for the linear part; a "
        "compressed interaction network of 3 layers of 100 feature maps, each the outer product "
        "of the field embeddings with the previous layer's maps reduced by a 1x1 Conv1d, sum "
        "pooled; a DNN 390-400-400-1 with ReLU; 93 parameter tensors) on batches of 1,024 "
        f"rows, {FP32_TF32}, binary cross-entropy: ~700 small kernels a step",
        "planted": "AdamW(foreach=False): a Python loop of ~9 kernels per parameter tensor "
        "(93 tensors)",
        "fix": "AdamW(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v237": {
        "name": "optimizer_fused",
        "model": "CvT-style convolutional vision transformer (CvT-13's layout: 3 stages of 1, 2 "
        "and 10 blocks at 64, 192 and 384 wide with 1, 3 and 6 heads, each stage a strided "
        "convolutional token embedding (7x7 stride 4, then 3x3 stride 2) and a LayerNorm; each "
        "block's attention projects its queries, keys and values through a depthwise 3x3 "
        "convolution and BatchNorm (keys and values at stride 2), then a Linear; a 4x GELU MLP, "
        "pre-LayerNorm; a mean-pooled LayerNorm and Linear head to 1,000 classes; 341 parameter "
        f"tensors, 20.0 M parameters) on 224x224 images, batch 128, {FP32_TF32}: GPU-bound",
        "planted": "AdamW(foreach=False): a Python loop of ~9 kernels per parameter tensor "
        "(341 tensors)",
        "fix": "AdamW(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v238": {
        "name": "optimizer_fused",
        "model": "NFNet-style normalizer-free network (NFNet-F0's layout: a stem of four 3x3 "
        "convolutions to 128 ch, two of them strided; 12 bottleneck blocks in 4 stages of 1, 2, "
        "6 and 3 at 256, 512, 1,536 and 1,536 ch, each GELU-scaled by its expected variance, a "
        "1x1, two 3x3 grouped (128 ch a group) and a 1x1 convolution, a squeeze-excite and a "
        "zero-initialised skip gain, alpha 0.2; every convolution weight-standardised with its "
        "own gain; a 1x1 convolution to 3,072 ch, a global mean and a Linear to 1,000 classes; "
        "233 parameter tensors, 71.5 M parameters) on 160x160 images, batch 64, bf16 autocast",
        "planted": "Adam(foreach=False): a Python loop of ~8 kernels per parameter tensor "
        "(233 tensors)",
        "fix": "Adam(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v239": {
        "name": "null_optimizer_fused",
        "model": "Word2Vec-style skip-gram model with negative sampling (a 20,000-word "
        "vocabulary, 128-D input and output embedding tables, dense gradients; per pair the "
        "centre word's vector against its context word's and 10 sampled negatives', "
        f"log-sigmoid loss; 2 parameter tensors) on batches of 131,072 pairs, {FP32_TF32}: "
        "GPU-bound",
        "planted": "AdamW(foreach=False): a Python loop of ~9 kernels per parameter tensor "
        "(2 tensors)",
        "fix": "AdamW(fused=True) (gains ~0: ~18 launches and ~0.1 ms of GPU traffic over 5.1 M "
        "parameters beside a GPU-bound step of ~5-10 ms)",
        "expected_fix": "optimizer_fused",
        "null": True,
    },
}


def _optimizer(k: Kit, model: Any, fixed: bool, name: str = "AdamW") -> Any:
    """``name`` (AdamW or Adam) at lr 1e-4 over ``model``'s parameters: ``fused=True`` in the
    fixed variant (the fix), ``foreach=False`` in the planted one; the optimizer, its tensors and
    parameters in ``k.meta``."""
    cls = getattr(k.torch.optim, name)
    kw = {"fused": True} if fixed else {"foreach": False}
    k.meta["optimizer"] = f"{name}(fused=True)" if fixed else f"{name}(foreach=False)"
    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["params"] = sum(q.numel() for q in model.parameters())
    return cls(model.parameters(), lr=1e-4, **kw)


# ---------------------------------------------------------------- v236: xDeepFM, AdamW's loop


def _xdeepfm(k: Kit, fixed: bool, device: str, rank: int):
    # H200: the CIN's layers are 1x1 Conv1d over (1,024, 39 x H, 10): 100 x 3,900 x 10,240 x 2 =
    # 8 GFLOP forward each (the first, H = 39, 3), x 3 with the backward ~57 GFLOP, fp32 without
    # TF32 ~1.2 ms; the DNN ~1 GFLOP; the outer products ~0.3 GB each: ~2 ms of GPU. Host: 78
    # lookups and their dense embedding backwards (~10 kernels each), ~700 launches, ~8-12 ms:
    # host-bound, ~8-12 ms fixed (the fused AdamW's few launches). Planted: ~9 kernels and ~65-95
    # us of host per tensor over 93 tensors, ~6-9 ms more: ~15-20 ms, ~35-45 % off
    torch, nn, F = k.torch, k.nn, k.F
    fields, emb, cin, hidden, batch = (
        (4, 4, (6, 6), 16, 8) if k.quick else (39, 10, (100,) * 3, 400, 1024)
    )
    vocabs = [(10 + 3 * i) if k.quick else 1000 * (1 + (7 * i) % 40) for i in range(fields)]

    class XDeepFM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tables = nn.ModuleList(nn.Embedding(v, emb) for v in vocabs)
            self.linear = nn.ModuleList(nn.Embedding(v, 1) for v in vocabs)
            self.bias = nn.Parameter(torch.zeros(1))
            sizes = (fields, *cin)
            self.cin = nn.ModuleList(
                nn.Conv1d(fields * sizes[i], sizes[i + 1], 1) for i in range(len(cin))
            )
            self.cin_out = nn.Linear(sum(cin), 1)
            self.dnn = nn.Sequential(
                nn.Linear(fields * emb, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, 1),
            )

        def forward(self, ids):
            b = ids.shape[0]
            x0 = torch.stack([t(ids[:, f]) for f, t in enumerate(self.tables)], 1)  # (b, m, D)
            lin = torch.cat([t(ids[:, f]) for f, t in enumerate(self.linear)], 1).sum(1)
            h, pooled = x0, []
            for conv in self.cin:  # each layer: the outer product with x0, then a 1x1 conv
                z = torch.einsum("bmd,bhd->bmhd", x0, h).reshape(b, -1, emb)
                h = F.relu(conv(z))
                pooled.append(h.sum(-1))
            cin_logit = self.cin_out(torch.cat(pooled, 1)).squeeze(-1)
            return lin + self.bias + cin_logit + self.dnn(x0.flatten(1)).squeeze(-1)

    model = XDeepFM().to(device)
    opt = _optimizer(k, model, fixed)
    gen = torch.Generator().manual_seed(236)
    ids = torch.stack([torch.randint(0, v, (batch,), generator=gen) for v in vocabs], 1)
    clicks = (torch.rand(batch, generator=gen) < 0.25).float()
    ids, clicks = ids.to(device), clicks.to(device)

    def loss_fn():
        return F.binary_cross_entropy_with_logits(model(ids), clicks)

    k.meta["precision"] = FP32_TF32
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v237: CvT, AdamW's loop


def _cvt(k: Kit, fixed: bool, device: str, rank: int):
    # H200, fp32 without TF32 for the matmuls: CvT-13 is ~4.5 G multiply-adds an image forward
    # (9 GFLOP), x 3 x 128 = 3.5 TFLOP at ~50 TFLOP/s: ~70 ms of GPU, with the attention and
    # the norms' traffic ~75-85 ms; ~1,500 launches forward and backward (~15-25 ms of host):
    # GPU-bound. The planted loop: ~25-30 ms of host over 341 tensors, issued while the GPU
    # still works through the backward, but ~3,000 kernels of ~2-3 us of GPU each (~7-9 ms)
    # after it, against the fused AdamW's ~0.5 ms over 20.0 M parameters: ~7-10 % off
    torch, nn, F = k.torch, k.nn, k.F
    side, batch, dims, depths, heads, classes = (
        (32, 2, (8, 16, 24), (1, 1, 2), (1, 2, 2), 10)
        if k.quick
        else (224, 128, (64, 192, 384), (1, 2, 10), (1, 3, 6), 1000)
    )
    embeds = ((7, 4, 2), (3, 2, 1), (3, 2, 1))  # each stage's token embedding: kernel, stride, pad

    class ConvProj(nn.Module):  # CvT's convolutional projection: depthwise 3x3 and BatchNorm
        def __init__(self, d: int, stride: int) -> None:
            super().__init__()
            self.conv = nn.Conv2d(d, d, 3, stride, 1, groups=d, bias=False)
            self.bn = nn.BatchNorm2d(d)

        def forward(self, img):  # (b, d, h, w) -> (b, tokens, d)
            return self.bn(self.conv(img)).flatten(2).transpose(1, 2)

    class Attention(nn.Module):
        def __init__(self, d: int, h: int) -> None:
            super().__init__()
            self.h = h
            self.pq, self.pk, self.pv = ConvProj(d, 1), ConvProj(d, 2), ConvProj(d, 2)
            self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))

        def forward(self, x, hw):
            b, n, d = x.shape
            img = x.transpose(1, 2).reshape(b, d, *hw)

            def split(t):
                return t.view(b, -1, self.h, d // self.h).transpose(1, 2)

            q = split(self.q(self.pq(img)))
            kk = split(self.k(self.pk(img)))
            v = split(self.v(self.pv(img)))
            a = F.scaled_dot_product_attention(q, kk, v)
            return self.out(a.transpose(1, 2).reshape(b, n, d))

    class Block(nn.Module):
        def __init__(self, d: int, h: int) -> None:
            super().__init__()
            self.n1, self.attn, self.n2 = nn.LayerNorm(d), Attention(d, h), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, hw):
            x = x + self.attn(self.n1(x), hw)
            return x + self.mlp(self.n2(x))

    class Stage(nn.Module):
        def __init__(self, ci: int, d: int, depth: int, h: int, ks: int, s: int, p: int) -> None:
            super().__init__()
            self.embed, self.norm = nn.Conv2d(ci, d, ks, s, p), nn.LayerNorm(d)
            self.blocks = nn.ModuleList(Block(d, h) for _ in range(depth))

        def forward(self, x):
            x = self.embed(x)
            b, d, hh, ww = x.shape
            t = self.norm(x.flatten(2).transpose(1, 2))
            for blk in self.blocks:
                t = blk(t, (hh, ww))
            return t.transpose(1, 2).reshape(b, d, hh, ww)

    class CvT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            ins = (3, *dims[:-1])
            self.stages = nn.Sequential(
                *(Stage(ins[i], dims[i], depths[i], heads[i], *embeds[i]) for i in range(3))
            )
            self.norm, self.head = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

        def forward(self, x):
            return self.head(self.norm(self.stages(x).mean((2, 3))))

    model = CvT().to(device)
    opt = _optimizer(k, model, fixed)
    gen = torch.Generator().manual_seed(237)
    x = torch.randn(batch, 3, side, side, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        return F.cross_entropy(model(x), y)

    k.meta["precision"] = FP32_TF32
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v238: NFNet, Adam's loop


def _nfnet(k: Kit, fixed: bool, device: str, rank: int):
    # H200, bf16: NFNet-F0 is ~7 G multiply-adds an image at 192 px, ~5 at 160: ~10 GFLOP, x 3 x
    # 64 = 1.9 TFLOP; grouped convolutions at ~100-200 TFLOP/s and the weight standardisation's
    # and GELUs' traffic: ~15-25 ms of GPU; ~1,000 launches forward and backward (~10-15 ms of
    # host): GPU-bound or near it. The planted loop: ~8 kernels and ~65-95 us of host per
    # tensor over 233 tensors, ~16-23 ms of host, partly under the backward's GPU time, and
    # ~2,000 kernels (~5 ms of GPU) after it, against the fused Adam's ~0.5 ms: ~15-40 % off
    torch, nn, F = k.torch, k.nn, k.F
    side, batch, widths, depths, group, stem, classes, final = (
        (32, 2, (8, 16, 16, 16), (1, 1, 2, 1), 4, (4, 4, 8, 8), 10, 32)
        if k.quick
        else (160, 64, (256, 512, 1536, 1536), (1, 2, 6, 3), 128, (16, 32, 64, 128), 1000, 3072)
    )
    alpha = 0.2

    class WSConv(nn.Conv2d):  # a scaled weight-standardised convolution with its own gain
        def __init__(self, ci: int, co: int, ks: int, s: int = 1, groups: int = 1) -> None:
            super().__init__(ci, co, ks, s, ks // 2, groups=groups)
            self.gain = nn.Parameter(torch.ones(co, 1, 1, 1))

        def forward(self, x):
            w = self.weight
            mean = w.mean((1, 2, 3), keepdim=True)
            var = w.var((1, 2, 3), keepdim=True, unbiased=False)
            w = (w - mean) * torch.rsqrt(var * w[0].numel() + 1e-4) * self.gain
            return F.conv2d(x, w, self.bias, self.stride, self.padding, 1, self.groups)

    class Block(nn.Module):
        def __init__(self, ci: int, co: int, s: int, beta: float) -> None:
            super().__init__()
            mid, self.s, self.beta = co // 2, s, beta
            g = max(1, mid // group)
            self.conv1, self.conv2 = WSConv(ci, mid, 1), WSConv(mid, mid, 3, s, g)
            self.conv2b, self.conv3 = WSConv(mid, mid, 3, 1, g), WSConv(mid, co, 1)
            self.se1, self.se2 = nn.Conv2d(co, co // 2, 1), nn.Conv2d(co // 2, co, 1)
            self.skip_gain = nn.Parameter(torch.zeros(()))
            self.short = WSConv(ci, co, 1) if s != 1 or ci != co else None

        def forward(self, x):
            out = F.gelu(x) * self.beta
            sc = x
            if self.short is not None:
                sc = self.short(F.avg_pool2d(out, self.s) if self.s > 1 else out)
            out = self.conv1(out)
            out = self.conv2(F.gelu(out))
            out = self.conv2b(F.gelu(out))
            out = self.conv3(F.gelu(out))
            se = torch.sigmoid(self.se2(F.relu(self.se1(out.mean((2, 3), keepdim=True)))))
            return sc + out * (2 * se) * alpha * self.skip_gain

    class NFNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = (3, *stem)
            self.stem = nn.ModuleList(
                WSConv(c[i], c[i + 1], 3, 2 if i in (0, 3) else 1) for i in range(4)
            )
            blocks, ci, var = [], stem[-1], 1.0
            for si, (co, depth) in enumerate(zip(widths, depths, strict=True)):
                for bi in range(depth):
                    s = 2 if bi == 0 and si > 0 else 1
                    blocks.append(Block(ci, co, s, 1.0 / var**0.5))
                    var = 1.0 + alpha**2 if bi == 0 else var + alpha**2
                    ci = co
            self.blocks = nn.Sequential(*blocks)
            self.final = WSConv(ci, final, 1)
            self.head = nn.Linear(final, classes)

        def forward(self, x):
            for i, conv in enumerate(self.stem):
                x = conv(x) if i == 0 else conv(F.gelu(x))
            x = F.gelu(self.final(self.blocks(x)))
            return self.head(x.mean((2, 3)))

    model = NFNet().to(device)
    opt = _optimizer(k, model, fixed, "Adam")
    gen = torch.Generator().manual_seed(238)
    x = torch.randn(batch, 3, side, side, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["precision"] = "bf16 autocast"
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v239: Word2Vec, two tensors (null)


def _word2vec(k: Kit, fixed: bool, device: str, rank: int):
    # H200: 131,072 pairs x 12 rows (centre, context, 10 negatives) x 128 x 4 B = 0.8 GB of
    # gathers forward, the negatives' batched dot products, and two dense embedding backwards
    # (sorting 131 K and 1.4 M indices, summing their rows into 20,000 x 128 tables): ~5-10 ms of
    # GPU in ~40 kernels, GPU-bound. AdamW(foreach=False) over 2 tables of 2.6 M values: ~18
    # kernels reading and writing ~0.4 GB (~0.1 ms), fused ~0.15 GB: ~0-2 % off
    torch, nn, F = k.torch, k.nn, k.F
    vocab, dim, batch, negatives = (100, 8, 64, 3) if k.quick else (20_000, 128, 131_072, 10)

    class SkipGram(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp, self.out = nn.Embedding(vocab, dim), nn.Embedding(vocab, dim)

        def forward(self, centre, context, negs):
            c = self.inp(centre)  # (b, d)
            pos = (c * self.out(context)).sum(-1)
            neg = torch.bmm(self.out(negs), c.unsqueeze(-1)).squeeze(-1)  # (b, negatives)
            return -(F.logsigmoid(pos).mean() + F.logsigmoid(-neg).sum(-1).mean())

    model = SkipGram().to(device)
    opt = _optimizer(k, model, fixed)
    gen = torch.Generator().manual_seed(239)
    # Zipf-like word frequencies: the sampled ids skew to the frequent words, as a corpus does
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64) ** 0.75
    centre = torch.multinomial(weights, batch, replacement=True, generator=gen)
    context = torch.multinomial(weights, batch, replacement=True, generator=gen)
    negs = torch.multinomial(weights, batch * negatives, replacement=True, generator=gen)
    centre, context = centre.to(device), context.to(device)
    negs = negs.view(batch, negatives).to(device)

    def loss_fn():
        return model(centre, context, negs)

    k.meta["precision"] = FP32_TF32
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v236": _xdeepfm,
    "v237": _cvt,
    "v238": _nfnet,
    "v239": _word2vec,
}
