"""The tenth blind part's first five cases (v160-v164; record_blind10.py merges them): activation
checkpointing on every decoder block of a LLaMA-style language model whose blocks are large
matmuls, with most of the GPU's memory free (v160); an unfused AdamW over the 347 small parameter
tensors of a deep, narrow DeiT-style distilled vision transformer (v161); bf16 autocast on a
Funnel-Transformer-style encoder in fp32 with TF32 off for matmuls (v162); torch.compile of a
DeepFM-style click-through model whose deep tower is hand-written LayerNorms and tanh-GELUs on a
launch-bound step (v163); and a whole-step CUDA graph on a launch-bound MnasNet-style mobile CNN on
64x64 images (v164). Each family is one no earlier case used. Each builder: (kit, fixed, device,
rank) -> (step_fn, samples_per_step, model); planted and fixed build the same model from the same
seed and differ only in the planted thing. Sizes come from FLOP, byte and launch counts (not
timed: nothing here ran on a GPU before the part was fixed); each builder's comment gives its
estimate of one step on an H100, with the host time at ~10 and ~25 us an eager launch (the
earlier parts' recordings ran nearer the second where the host set the pace)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, precision_loss, whole_step_graph  # noqa: E402

CASES: dict[str, dict] = {
    "v160": {
        "name": "activation_checkpointing",
        "model": "LLaMA-style decoder-only language model (vocab 8192, untied LM head; 8 "
        "pre-norm blocks d 1024, 16 heads, rotary position embeddings on queries and keys, "
        "causal scaled_dot_product_attention, SwiGLU MLP 2816, RMSNorm written by hand as "
        "LLaMA's reference code (in fp32), no biases; 120 M parameters) on 8 sequences of 1024 "
        "tokens, bf16 autocast, AdamW(fused=True): the blocks' large matmuls most of the step; "
        "most of the GPU's memory free",
        "planted": "torch.utils.checkpoint (use_reentrant=False) on every LLaMA decoder block "
        "(8 nn.Modules)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v161": {
        "name": "optimizer_fused",
        "model": "DeiT-style distilled vision transformer at Tiny width and double depth "
        "(16x16 patches of 224x224 images, a class and a distillation token, learned "
        "positions; 24 pre-LayerNorm blocks d 192, 3 heads, scaled_dot_product_attention, MLP "
        "768 with GELU, LayerScale on both branches as DeiT III; a class head and a distillation "
        "head to 1000 classes, hard-label distillation: the mean of the cross-entropies to the "
        "labels and to a teacher's labels; 347 parameter tensors, 11 M parameters), batch 32, "
        "bf16 autocast, weight decay 0.05: a host-bound step beside the optimizer's loop",
        "planted": "AdamW(foreach=False): a Python loop of small kernels per parameter",
        "fix": "AdamW(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v162": {
        "name": "mixed_precision",
        "model": "Funnel-Transformer-style encoder for masked-token pretraining (vocab 8192, "
        "learned absolute positions in place of Funnel's relative attention; 3 blocks of 2 "
        "post-LayerNorm layers d 1024, 16 heads, scaled_dot_product_attention, FFN 4096 with "
        "GELU; between blocks the sequence mean-pooled by 2 (512, 256, 128 tokens), the first "
        "layer of each later block attending from the pooled queries to the unpooled keys and "
        "values; a decoder: the last block's output repeated back to 512 tokens plus the first "
        "block's, 2 more layers; an LM head tied to the embeddings, cross-entropy on 15 % of the "
        "tokens) on 6 sequences of 512 tokens, fp32, TF32 off for matmuls, AdamW(fused=True)",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast (TF32 still off)",
        "expected_fix": "mixed_precision",
    },
    "v163": {
        "name": "kernel_fusion",
        "model": "DeepFM-style click-through model (26 categorical fields with 500-20000 ids in "
        "one offset embedding table of dim 16, 13 numeric fields each a learned dim-16 vector "
        "scaled by its value; a first-order term of per-id weights and the numeric values; the "
        "factorisation machine's pairwise term 0.5 x ((sum e)^2 - sum e^2); a deep tower on the "
        "flattened 624 embeddings of 8 Linear layers of 512, each followed by a LayerNorm and a "
        "tanh-GELU both written by hand, and a Linear to 1; the three logits summed, binary "
        "cross-entropy) on batch 4096, fp32 (TF32 off for matmuls), AdamW(fused=True): ~500 "
        "small kernels a step, each a few microseconds of GPU, the step bound by their launches",
        "planted": "eager (each elementwise op of the norms and activations its own small kernel "
        "launch)",
        "fix": "torch.compile(model); the loss and the optimizer stay eager",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v164": {
        "name": "cuda_graphs",
        "model": "MnasNet-style mobile CNN (MnasNet-B1 at width 1.0: a strided 3x3 stem 32 ch, a "
        "depthwise-separable block to 16 ch, 16 inverted-residual blocks of expansion 3 or 6, "
        "3x3 or 5x5 depthwise convs, 24/40/80/96/192/320 ch, a 1x1 conv to 1280 ch; 52 convs, "
        "each followed by training-mode BatchNorm, ReLU after all but the projections; mean "
        "pool, Linear to 200 classes, cross-entropy) on 64x64 images, batch 32, fp32 (cuDNN "
        "TF32), Adam(capturable=True) in both variants: ~600 kernels of a few microseconds "
        "each, the step bound by launches, its GPU idle most of it",
        "planted": "eager: each of the step's small kernels launched from Python",
        "fix": "the whole step captured once with torch.cuda.graph and replayed (warm-up on a "
        "side stream first)",
        "expected_fix": "cuda_graphs",
    },
}


def _llama(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per block 4 x 1024^2 (attention) + 3 x 1024 x 2816 (SwiGLU) = 12.85 M weights, x 8 =
    # 102.8 M, and the 8.4 M LM head: 6 x 111.2 M x 8192 tokens = 5.47 TFLOP; causal flash
    # attention (1024 x 1024, 16 heads of 64) ~0.06 TFLOP a block fwd+bwd, 0.48 in all: ~5.95
    # TFLOP a step (FlopCounterMode: 6.29, attention counted as if not causal) of bf16 matmuls at ~450-550 TFLOP/s, ~11-13 ms. Traffic: the hand-written fp32
    # RMSNorms (33.5 MB a pass, ~0.7 GB each fwd+bwd, 17 of them: ~12 GB), rotary on queries and
    # keys (~6 GB), SwiGLU's 46 MB bf16 maps (~6 GB), the weight casts, the 8192 x 8192 logits and
    # the fused AdamW over 120 M parameters (~6 GB): ~30 GB, ~12 ms: ~24-26 ms of GPU fixed beside
    # ~950 launches (~10-24 ms of host). Planted, each block's forward runs again in the
    # backward: +1.8 TFLOP of matmuls (~3.5 ms), +~10 GB of traffic (~3.5-4 ms) and +~360
    # launches: ~32-36 ms, ~20-30 % off when checkpointing goes. Memory: ~0.65 GB of saved
    # activations a block fixed, ~5.5 GB in all.
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    vocab, d, heads, ff, layers, seq, batch = (
        (64, 32, 4, 64, 2, 16, 2) if k.quick else (8192, 1024, 16, 2816, 8, 1024, 8)
    )
    hd = d // heads

    class RMSNorm(nn.Module):  # LLaMA's reference: normalised in fp32, cast back, then scaled
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
            return h.type_as(x) * self.weight

    def rotate(x, cos, sin):  # x: (b, t, heads, hd); rotate-half form, in fp32 as LLaMA's
        h = x.float()
        h1, h2 = h.chunk(2, -1)
        return (h * cos + torch.cat([-h2, h1], -1) * sin).type_as(x)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn_norm, self.ffn_norm = RMSNorm(), RMSNorm()
            self.wq, self.wk = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.wv, self.wo = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.w1, self.w3 = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
            self.w2 = nn.Linear(ff, d, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            h = self.attn_norm(x)
            q = rotate(self.wq(h).view(b, t, heads, hd), cos, sin).transpose(1, 2)
            kk = rotate(self.wk(h).view(b, t, heads, hd), cos, sin).transpose(1, 2)
            v = self.wv(h).view(b, t, heads, hd).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
            x = x + self.wo(a.transpose(1, 2).reshape(b, t, d))
            h = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    class LLaMA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.norm = RMSNorm()
            self.out = nn.Linear(d, vocab, bias=False)
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.arange(seq).float()[:, None] * inv[None]  # (seq, hd/2)
            ang = torch.cat([ang, ang], -1)[:, None]  # (seq, 1, hd): broadcast over heads
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, ids):
            x = self.tok(ids)
            for blk in self.blocks:
                if fixed:
                    x = blk(x, self.cos, self.sin)
                else:
                    x = checkpoint(blk, x, self.cos, self.sin, use_reentrant=False)
            return self.out(self.norm(x)).flatten(0, 1)

    model = LLaMA().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(160)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)
    ids, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].flatten()

    def loss_fn():
        with k.ac:
            logits = model(ids)
        return F.cross_entropy(logits.float(), labels)

    k.meta["checkpointed_modules"] = 0 if fixed else len(model.blocks)
    k.meta["precision"] = "bf16 autocast"
    return k.train(opt, loss_fn), batch, model


def _deit(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per image 198 tokens x 24 blocks x 12 x 192^2 MACs (2.1 G) + attention (0.36 G) +
    # the patch embedding (0.03 G): ~2.5 GMAC, x 6 x 32 = 0.48 TFLOP a step of narrow bf16
    # matmuls (6336 x 192 rows, ~150-250 TFLOP/s): ~2-3 ms; every other kernel on 1.2 M values
    # (~2-5 MB), ~3 us: ~1,400 kernels fwd+bwd (per block ~22 forward with the weight casts, ~35
    # backward), ~6-7 ms of GPU against ~14-35 ms of host: host-bound. The planted loop: ~7
    # kernels and ~65-95 us of host per tensor (v133 and v153 recorded ~85-95) over 347 tensors,
    # ~22-33 ms: ~40-65 ms planted, ~15-35 ms with the fused AdamW's ~10 multi-tensor launches
    # (11 M parameters, ~0.2 GB of traffic): ~45-55 % off.
    torch, nn, F = k.torch, k.nn, k.F
    img, patch, d, heads, depth, classes, batch = (
        (32, 8, 16, 2, 3, 10, 2) if k.quick else (224, 16, 192, 3, 24, 1000, 32)
    )
    tokens = (img // patch) ** 2 + 2

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ls1 = nn.Parameter(torch.full((d,), 1e-4))
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.ls2 = nn.Parameter(torch.full((d,), 1e-4))

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(self.n1(x)).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v)
            x = x + self.ls1 * self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.ls2 * self.fc2(F.gelu(self.fc1(self.n2(x))))

    class DeiT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, d, patch, patch)
            self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
            self.dist = nn.Parameter(torch.randn(1, 1, d) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, tokens, d) * 0.02)
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.head, self.head_dist = nn.Linear(d, classes), nn.Linear(d, classes)

        def forward(self, x):
            p = self.patch(x).flatten(2).transpose(1, 2)
            b = p.shape[0]
            t = torch.cat([self.cls.expand(b, -1, -1), self.dist.expand(b, -1, -1), p], 1)
            t = self.norm(self.blocks(t + self.pos))
            return self.head(t[:, 0]), self.head_dist(t[:, 1])

    model = DeiT().to(device)
    kw = {"fused": True} if fixed and k.cuda else {"foreach": fixed}
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05, **kw)
    gen = torch.Generator().manual_seed(161)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen)
    agree = torch.rand(batch, generator=gen) < 0.7  # the teacher agrees with 70 % of the labels
    y_teacher = torch.where(agree, y, torch.randint(0, classes, (batch,), generator=gen))
    y, y_teacher = y.to(device), y_teacher.to(device)

    def loss_fn():
        with k.ac:
            out, out_dist = model(x)
        return 0.5 * F.cross_entropy(out.float(), y) + 0.5 * F.cross_entropy(
            out_dist.float(), y_teacher
        )

    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "AdamW(fused=True)" if fixed else "AdamW(foreach=False)"
    return k.train(opt, loss_fn), batch, model


def _funnel(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per sequence, MACs of the 12 d^2 weights a layer over its tokens: block 1 2 x 512,
    # block 2 (first layer: queries, output and FFN on 256 pooled tokens, keys and values on
    # 512) 6,656 / d^2, block 3 3,328, the decoder 2 x 512: 34,560 d^2 = 36.2 GMAC, the tied LM
    # head 4.3, attention ~2.6 fwd (~3.3 with the backward's recompute): ~260 GFLOP fwd+bwd a
    # sequence, x 6 = 1.57 TFLOP a step. fp32 without TF32 at ~45-50 TFLOP/s: ~32-35 ms + ~4 GB
    # of fp32 LayerNorm, GELU (3072 x 4096 maps), pooling and softmax traffic (~2 ms): ~34-38
    # ms, GPU-bound (~650 launches, ~7-16 ms of host). bf16 at ~450 TFLOP/s: ~3.5 ms of
    # matmuls, ~2 ms of traffic, the fused AdamW over 110 M parameters ~0.8 ms: ~6-7 ms of GPU
    # beside ~750 launches with the weight casts (~8-19 ms of host): ~9-19 ms, ~50-75 % off.
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cuda.matmul.allow_tf32 = False
    vocab, d, heads, ff, per_block, dec_layers, seq, batch = (
        (64, 32, 4, 64, 1, 1, 16, 2) if k.quick else (8192, 1024, 16, 4096, 2, 2, 512, 6)
    )
    blocks = 3

    class Layer(nn.Module):  # post-norm; queries may be the pooled sequence
        def __init__(self) -> None:
            super().__init__()
            self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

        def forward(self, x, src):  # x: the queries (and residual), src: keys and values
            b, t, _ = x.shape
            q = self.q(x).view(b, t, heads, -1).transpose(1, 2)
            kk, v = self.kv(src).view(b, src.shape[1], 2, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v)
            x = self.n1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
            return self.n2(x + self.ff(x))

    def pool(x):  # mean over each pair of neighbouring tokens
        b, t, _ = x.shape
        return x.view(b, t // 2, 2, d).mean(2)

    class Funnel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(1, seq, d))
            nn.init.normal_(self.pos, std=0.02)
            self.n_emb = nn.LayerNorm(d)
            self.blocks = nn.ModuleList(
                [nn.ModuleList([Layer() for _ in range(per_block)]) for _ in range(blocks)]
            )
            self.decoder = nn.ModuleList([Layer() for _ in range(dec_layers)])
            self.bias = nn.Parameter(torch.zeros(vocab))

        def forward(self, ids):
            h = self.n_emb(self.tok(ids) + self.pos)
            first = h
            for i, layers in enumerate(self.blocks):
                # a later block's first layer: pooled queries over the unpooled keys and values
                for j, layer in enumerate(layers):
                    h = layer(pool(h), h) if i > 0 and j == 0 else layer(h, h)
                if i == 0:
                    first = h
            up = h.repeat_interleave(2 ** (blocks - 1), 1) + first  # back to full length
            for layer in self.decoder:
                up = layer(up, up)
            return F.linear(up, self.tok.weight, self.bias).flatten(0, 1)  # tied

    model = Funnel().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(162)
    ids = torch.randint(5, vocab, (batch, seq), generator=gen)
    masked = torch.rand(batch, seq, generator=gen) < 0.15
    labels = torch.where(masked, ids, torch.full_like(ids, -100)).flatten().to(device)
    ids = torch.where(masked, torch.full_like(ids, 4), ids).to(device)  # [MASK] = 4

    loss_fn = precision_loss(k, fixed, model, F.cross_entropy, ids, labels)

    k.meta["precision"] = "bf16 autocast, TF32 off" if fixed else "fp32, TF32 off"
    return k.train(opt, loss_fn), batch, model


def _deepfm(k: Kit, fixed: bool, device: str, rank: int):
    # H100 eager: the deep tower's maps are 4096 x 512 fp32 (8.4 MB); per layer the hand-
    # written LayerNorm (9 kernels) and tanh-GELU (8) move ~0.25 GB forward and ~0.5 GB
    # backward, x 8 = ~6 GB, ~2.5 ms; matmuls 2 x 4096 x (624 x 512 + 7 x 512^2 + 512) x 3 = 53
    # GFLOP (FlopCounterMode) of fp32 without TF32, ~1.2 ms; the embedding lookups and their
    # dense backward, the FM term and the loss ~0.3 ms: ~4-4.5 ms of GPU, each kernel ~3-8 us,
    # against ~170 kernels forward and ~330 backward with the loss and the fused AdamW: ~5-13
    # ms of host, the step bound by it. Compiled: each layer's norm and activation one kernel
    # forward and ~2 backward, ~80 kernels in all with the eager loss and optimizer, the
    # matmuls and ~1 GB of traffic: ~2.5-3.5 ms, ~55-75 % off.
    torch, nn, F = k.torch, k.nn, k.F
    cat_fields, num_fields, emb, hidden, layers, batch = (
        (4, 3, 4, 16, 2, 8) if k.quick else (26, 13, 16, 512, 8, 4096)
    )
    vocabs = [(10 + 3 * i) if k.quick else 500 * (1 + (11 * i) % 40) for i in range(cat_fields)]
    offsets = torch.tensor([0, *vocabs[:-1]]).cumsum(0)
    fields = cat_fields + num_fields

    class LayerNorm(nn.Module):  # written by hand: each step its own kernel when eager
        def __init__(self, c: int) -> None:
            super().__init__()
            self.w, self.b = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

        def forward(self, x):
            mu = x.mean(-1, keepdim=True)
            xc = x - mu
            var = xc.pow(2).mean(-1, keepdim=True)
            return xc * torch.rsqrt(var + 1e-5) * self.w + self.b

    def gelu(x):  # the tanh approximation, written by hand
        return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x.pow(3))))

    class DeepFM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("offsets", offsets, persistent=False)
            self.emb = nn.Embedding(sum(vocabs), emb)  # one table, each field at its offset
            self.first = nn.Embedding(sum(vocabs), 1)
            self.num_emb = nn.Parameter(torch.randn(num_fields, emb) * 0.01)
            self.num_first = nn.Parameter(torch.zeros(num_fields))
            self.bias = nn.Parameter(torch.zeros(1))
            nn.init.normal_(self.emb.weight, std=0.01)
            nn.init.zeros_(self.first.weight)
            widths = [fields * emb] + [hidden] * layers
            self.linears = nn.ModuleList(
                [nn.Linear(widths[i], widths[i + 1]) for i in range(layers)]
            )
            self.norms = nn.ModuleList([LayerNorm(hidden) for _ in range(layers)])
            self.out = nn.Linear(hidden, 1)

        def forward(self, ids, nums):
            idx = ids + self.offsets
            e = torch.cat([self.emb(idx), nums[..., None] * self.num_emb], 1)  # (b, fields, emb)
            first = self.first(idx).sum((1, 2)) + nums @ self.num_first
            s = e.sum(1)
            fm = 0.5 * (s.pow(2) - e.pow(2).sum(1)).sum(1)  # pairwise interactions
            h = e.flatten(1)
            for lin, norm in zip(self.linears, self.norms, strict=True):
                h = gelu(norm(lin(h)))
            return self.bias + first + fm + self.out(h).squeeze(-1)

    model = DeepFM().to(device)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model) if fixed else model
    gen = torch.Generator().manual_seed(163)
    ids = torch.stack([torch.randint(0, v, (batch,), generator=gen) for v in vocabs], 1)
    nums = torch.log1p(torch.rand(batch, num_fields, generator=gen) * 100)  # Criteo-like counts
    clicks = (torch.rand(batch, generator=gen) < 0.25).float()
    ids, nums, clicks = ids.to(device), nums.to(device), clicks.to(device)

    def loss_fn():
        return F.binary_cross_entropy_with_logits(run(ids, nums), clicks)

    k.meta["compiled"] = fixed
    k.meta["deep_layers"] = layers
    return k.train(opt, loss_fn), batch, model


def _mnasnet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: MnasNet-B1 ~315 M MACs at 224x224, ~26 M at 64x64: x 6 x 32 = 5 GFLOP a step, nothing;
    # the largest maps 32 x 48 x 32 x 32 (6 MB fp32), most far smaller: every kernel ~2-5 us.
    # Per conv unit ~3.5 kernels forward (the conv, training BatchNorm, ReLU, the running-count
    # add) and ~6 backward, x 52, the residual adds, pool, head and loss, Adam(capturable) over
    # 158 tensors (~20 multi-tensor launches): ~600 kernels, ~6-15 ms of host (~20 ms where
    # autograd and a launch are slower), the GPU busy ~2-3 ms of it. A replayed graph: ~600
    # kernels back to back, ~2-3 ms: ~65-85 % off the step.
    torch, nn, F = k.torch, k.nn, k.F
    img, classes, batch, div = (16, 10, 2, 8) if k.quick else (64, 200, 32, 1)

    def c(ch: int) -> int:
        return max(4, ch // div)

    # (expansion, out channels, repeats, first stride, kernel): torchvision's mnasnet1_0
    stages = [(3, 24, 3, 2, 3), (3, 40, 3, 2, 5), (6, 80, 3, 2, 5), (6, 96, 2, 1, 3)]
    stages += [(6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]

    def cbr(ci: int, co: int, ks: int, s: int = 1, groups: int = 1, relu: bool = True):
        mods = [nn.Conv2d(ci, co, ks, s, ks // 2, groups=groups, bias=False), nn.BatchNorm2d(co)]
        return mods + ([nn.ReLU(inplace=True)] if relu else [])

    class InvertedResidual(nn.Module):
        def __init__(self, ci: int, co: int, expand: int, s: int, ks: int) -> None:
            super().__init__()
            mid = ci * expand
            self.body = nn.Sequential(
                *cbr(ci, mid, 1), *cbr(mid, mid, ks, s, groups=mid), *cbr(mid, co, 1, relu=False)
            )
            self.residual = s == 1 and ci == co

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MnasNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers = [*cbr(3, c(32), 3, 2), *cbr(c(32), c(32), 3, 1, groups=c(32))]
            layers += cbr(c(32), c(16), 1, relu=False)
            ci = c(16)
            for expand, co, repeats, s, ks in stages:
                for r in range(repeats):
                    layers.append(InvertedResidual(ci, c(co), expand, s if r == 0 else 1, ks))
                    ci = c(co)
            layers += cbr(ci, c(1280), 1)
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(c(1280), classes)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))

    model = MnasNet().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=k.cuda)
    gen = torch.Generator().manual_seed(164)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        return F.cross_entropy(model(x), y)

    step = whole_step_graph(k, opt, loss_fn, k.train(opt, loss_fn), fixed)
    k.meta["optimizer"] = "Adam(capturable=True)"
    k.meta["conv2d_layers"] = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    return step, batch, model


BUILDERS = {
    "v160": _llama,
    "v161": _deit,
    "v162": _funnel,
    "v163": _deepfm,
    "v164": _mnasnet,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
