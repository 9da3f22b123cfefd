"""The seventh blind part's cases v125-v129 (merged by record_blind7.py): a 4 x batch on a GRU
session recommender (v125); three pairs chosen to gain nothing: cudnn.benchmark where four stem
convolutions are a small slice of a long attention step (v126), DataLoader workers where loading
is a slice and a stack beside a GPU-bound segmenter (v127), torch.compile of a GRU stack that
Dynamo leaves eager (v128); and a 2-GPU pair whose pace-setter, rank 1, computes 1.5 x as much
(v129: longer sequences), with no host work of its own.

Sizes come from FLOP and launch counts (one line beside each), not from timings: nothing here
was run on a GPU before the part was fixed.
"""

from __future__ import annotations

from record_common import Kit, uint8_batches

CASES: dict[str, dict] = {
    "v125": {
        "name": "batch_size",
        "model": "GRU4Rec-style session recommender (item embedding 20000 x 64, one nn.GRU layer "
        "hidden 128 over 20 clicks, a Linear 128-64, scores against all 20000 items by a matmul "
        "with the embedding table, cross-entropy on the next item at each of the 20 clicks), "
        "fp32 (TF32 off for matmuls, on for cuDNN)",
        "planted": "batch 16",
        "fix": "batch 64 (4 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 4,
    },
    "v126": {
        "name": "null_cudnn_benchmark",
        "model": "LeViT-style hybrid (a stem of 4 strided 3x3 convs 3-32-64-128-256 with "
        "BatchNorm and Hardswish, 224x224 to 14x14; then 12 attention blocks d 256 on the 196 "
        "tokens: pre-norm LayerNorm, 8 heads of 32, explicit attention with a learned per-head "
        "bias over relative offsets, MLP 2x with Hardswish; mean pool, 1000 classes), batch 128, "
        "bf16 autocast: convolutions are a small slice of a long GPU-bound step",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True (gains ~0: the four stem convs are a small "
        "share of the step)",
        "expected_fix": "cudnn_benchmark",
        "null": True,
    },
    "v127": {
        "name": "null_dataloader_workers",
        "model": "BiSeNet-style real-time segmenter (spatial path of 3 strided 3x3 convs "
        "64-128-256 to 1/8; context path of a small residual backbone, a 3x3 stem 64 ch, max "
        "pool and 4 stages of 2 basic blocks 64-128-256-512 to 1/32, with attention refinement "
        "modules on the 1/16 and 1/32 features and a global-pool context, refined to 128 ch at "
        "1/8; a feature fusion module to 256 ch; 19 classes, upsampled 8x; BatchNorm) on 512x512 "
        "images, batch 16, bf16 autocast; each sample a slice of pre-made uint8 image and label "
        "tensors (256 samples): the step is GPU-bound",
        "planted": "DataLoader(num_workers=0)",
        "fix": "DataLoader(num_workers=6, persistent_workers=True) (gains ~0: loading is a slice "
        "and a stack, done while the GPU computes)",
        "expected_fix": "dataloader_workers",
        "null": True,
    },
    "v128": {
        "name": "null_kernel_fusion",
        "model": "DeepSpeech2-style acoustic model (2 Conv2d layers 32 ch, 41x11 stride (2,2) "
        "and 21x11 stride (2,1), over 161-bin spectrograms, each with BatchNorm and "
        "Hardtanh(0, 20); one nn.GRU of 3 bidirectional layers hidden 512 over the 200 frames "
        "left; a Linear to 29 characters, log-softmax, CTC loss on transcripts of 30-60 characters), batch 32 "
        "utterances of 400 frames, fp32 (cuDNN TF32)",
        "planted": "eager",
        "fix": "torch.compile(model) (gains ~0: the step is the cuDNN GRU layers, which Dynamo "
        "leaves eager)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
        "null": True,
    },
    "v129": {
        "name": "load_imbalance_seq",
        "model": "ALBERT-style encoder (factorised embedding vocab 16000 x 128 with learned "
        "positions, LayerNorm, projected to d 768; one post-norm transformer layer's weights "
        "shared across 12 layers, 12 heads, MLP 4x with GELU; masked-LM loss on 15 % of each "
        "sequence's tokens through a 768-128 head tied to the embedding table) under DDP on 2 "
        "GPUs, batch 32 sequences per rank, bf16 autocast",
        "planted": "uneven sequence lengths: rank 0's batch is 256 tokens long, rank 1's 384, so "
        "rank 1 computes about 1.5 x as much per step and rank 0 waits in every all-reduce",
        "fix": "the same tokens split evenly: both ranks 320 tokens long",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
}


def _gru4rec(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # batch 16: ~110 kernels (cuDNN GRU ~2 a click each way, CE, fused AdamW), ~2-4 ms of host
    # launches; GPU ~0.3 ms (2.5 GFLOP); batch 64 adds ~1 ms of GPU (10 GFLOP fp32, 0.4 GB of
    # logits traffic): both launch-bound, so 4 x samples for about the same step
    items, emb, hid, clicks, batch = (50, 8, 16, 5, 4) if k.quick else (20000, 64, 128, 20, 16)
    batch *= 4 if fixed else 1

    class GRU4Rec(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.items = nn.Embedding(items, emb)
            self.gru = nn.GRU(emb, hid, batch_first=True)
            self.proj = nn.Linear(hid, emb)

        def forward(self, s):  # (b, clicks) item ids -> (b, clicks, items) scores
            h, _ = self.gru(self.items(s))
            return self.proj(h) @ self.items.weight.t()

    model = GRU4Rec().to(device)
    opt = k.adamw(model, fused=k.cuda)
    sessions = torch.randint(0, items, (batch, clicks + 1), device=device)

    def loss_fn():
        scores = model(sessions[:, :-1])
        return F.cross_entropy(scores.reshape(-1, items), sessions[:, 1:].reshape(-1))

    k.meta["batch_multiple"] = 4
    k.meta["clicks"] = clicks
    return k.train(opt, loss_fn), batch, model


def _levit(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cudnn.benchmark = fixed
    # per block (25088 tokens): 8 d^2 + 2 N d MACs a token, 31 GFLOP fwd; explicit attention
    # moves ~1 GB fwd, ~2 GB bwd (fp32 softmax of 128 x 8 x 196 x 196): ~1.5 ms a block, ~20 ms
    # for 12; stem 47 GFLOP fwd (~1-2 ms of convs of ~25 ms) plus BatchNorm/Hardswish over
    # 96 M elements; ~800 launches, ~10 ms of host: GPU-bound
    img, chans, depth, heads, batch = (
        (32, (4, 8, 16, 16), 1, 2, 2) if k.quick else (224, (32, 64, 128, 256), 12, 8, 128)
    )
    d = chans[-1]
    r = img // 16  # tokens a side
    n = r * r

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ab = nn.Parameter(torch.zeros(heads, n))  # a bias per head and offset
            yy, xx = torch.meshgrid(torch.arange(r), torch.arange(r), indexing="ij")
            pts = torch.stack([yy.flatten(), xx.flatten()], 1)
            off = (pts[:, None] - pts[None]).abs()
            self.register_buffer("idx", off[..., 0] * r + off[..., 1], persistent=False)

        def forward(self, x):
            b = x.shape[0]
            q, kk, v = self.qkv(x).view(b, n, 3, heads, -1).permute(2, 0, 3, 1, 4)
            att = (q * q.shape[-1] ** -0.5) @ kk.transpose(-1, -2) + self.ab[:, self.idx]
            a = torch.softmax(att, -1) @ v
            return self.o(a.transpose(1, 2).reshape(b, n, d))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = Attention()
            self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.Hardswish(), nn.Linear(2 * d, d))

        def forward(self, x):
            x = x + self.att(self.n1(x))
            return x + self.mlp(self.n2(x))

    class LeViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            stem: list = []
            ci = 3
            for co in chans:
                stem += [nn.Conv2d(ci, co, 3, 2, 1, bias=False), nn.BatchNorm2d(co), nn.Hardswish()]
                ci = co
            self.stem = nn.Sequential(*stem)
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 1000)

        def forward(self, x):
            t = self.stem(x).flatten(2).transpose(1, 2)  # (b, n, d)
            return self.head(self.norm(self.blocks(t)).mean(1))

    model = LeViT().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, img, img, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["conv_layers"] = len(chans)
    return k.train(opt, loss_fn), batch, model


class SlicedStreets:
    """v127's dataset: ``n`` uint8 RGB ``hw`` x ``hw`` images and their uint8 label maps (19
    classes) made once; a sample is a slice of each."""

    def __init__(self, n: int, hw: int) -> None:
        import torch

        gen = torch.Generator().manual_seed(127)
        self.x = torch.randint(0, 256, (n, 3, hw, hw), dtype=torch.uint8, generator=gen)
        self.y = torch.randint(0, 19, (n, hw, hw), dtype=torch.uint8, generator=gen)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def _bisenet(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    # ~13.6 GMAC an image (context ResNet-18-like body 8.9, spatial path 2.5, ARMs, FFM, head
    # 2.2): 1.3 TFLOP a step, ~10 ms of bf16 NCHW convs, ~4 ms of BatchNorm/ReLU and the
    # 512x512 loss; ~400 launches, ~5 ms of host. Loading: 16.8 MB sliced and stacked, ~3-4 ms
    hw, batch, workers, n, div = (32, 2, 2, 8, 16) if k.quick else (512, 16, 6, 256, 1)
    sp = [max(4, c // div) for c in (64, 128, 256)]
    cp = [max(4, c // div) for c in (64, 128, 256, 512)]
    mid, fuse = max(4, 128 // div), max(4, 256 // div)
    classes = 19

    def cbr(ci: int, co: int, ks: int = 3, s: int = 1):
        return nn.Sequential(
            nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co), nn.ReLU()
        )

    class Basic(nn.Module):
        def __init__(self, ci: int, co: int, s: int) -> None:
            super().__init__()
            self.c1 = cbr(ci, co, 3, s)
            self.c2 = nn.Sequential(nn.Conv2d(co, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co))
            self.short = (
                nn.Sequential(nn.Conv2d(ci, co, 1, s, bias=False), nn.BatchNorm2d(co))
                if (s > 1 or ci != co)
                else nn.Identity()
            )

        def forward(self, x):
            return F.relu(self.c2(self.c1(x)) + self.short(x))

    class ARM(nn.Module):  # attention refinement: a 3x3 conv, reweighted by its pooled channels
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.conv = cbr(ci, co)
            self.att = nn.Sequential(nn.Conv2d(co, co, 1, bias=False), nn.BatchNorm2d(co))

        def forward(self, x):
            f = self.conv(x)
            return f * torch.sigmoid(self.att(f.mean((2, 3), keepdim=True)))

    class FFM(nn.Module):  # feature fusion: concat, 1x1 conv, channel attention as a residual
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.conv = cbr(ci, co, 1)
            self.a1, self.a2 = nn.Conv2d(co, co // 4, 1), nn.Conv2d(co // 4, co, 1)

        def forward(self, a, b):
            f = self.conv(torch.cat([a, b], 1))
            w = torch.sigmoid(self.a2(F.relu(self.a1(f.mean((2, 3), keepdim=True)))))
            return f + f * w

    class BiSeNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.spatial = nn.Sequential(
                cbr(3, sp[0], 3, 2), cbr(sp[0], sp[1], 3, 2), cbr(sp[1], sp[2], 3, 2)
            )
            self.stem = nn.Sequential(cbr(3, cp[0], 3, 2), nn.MaxPool2d(3, 2, 1))
            stages, ci = [], cp[0]
            for i, co in enumerate(cp):
                stages.append(nn.Sequential(Basic(ci, co, 1 if i == 0 else 2), Basic(co, co, 1)))
                ci = co
            self.stages = nn.ModuleList(stages)
            self.arm16, self.arm32 = ARM(cp[2], mid), ARM(cp[3], mid)
            self.gctx = cbr(cp[3], mid, 1)
            self.ref32, self.ref16 = cbr(mid, mid), cbr(mid, mid)
            self.ffm = FFM(sp[2] + mid, fuse)
            self.head = nn.Sequential(cbr(fuse, fuse // 4), nn.Conv2d(fuse // 4, classes, 1))

        def forward(self, x):
            s = self.spatial(x)  # 1/8
            f = self.stem(x)  # 1/4
            feats = []
            for st in self.stages:
                f = st(f)
                feats.append(f)
            f16, f32 = feats[2], feats[3]
            g = self.gctx(f32.mean((2, 3), keepdim=True))
            up = self.ref32(F.interpolate(self.arm32(f32) + g, size=f16.shape[-2:], mode="nearest"))
            up = self.ref16(F.interpolate(self.arm16(f16) + up, size=s.shape[-2:], mode="nearest"))
            out = self.head(self.ffm(s, up))
            return F.interpolate(out, size=x.shape[-2:], mode="bilinear")

    model = BiSeNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True}
    loader = DataLoader(
        SlicedStreets(n, hw),
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        **(kw if fixed else {}),
    )
    next_batch = uint8_batches(loader, device)

    def loss_fn():
        x, y = next_batch()
        with k.ac:
            return F.cross_entropy(model(x).float(), y.long())

    k.meta["num_workers"] = workers if fixed else 0
    k.meta["loaded_bytes_per_step"] = batch * hw * hw * 4  # uint8: 3 image bytes, 1 label
    return k.train(opt, loss_fn), batch, model


def _deepspeech2(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # convs 70 GMAC fwd (conv2 62), ~0.4 TFLOP a step at cuDNN TF32: ~4 ms; the GRU stack 96
    # GMAC fwd but sequential: 200 frames x 3 layers of 32 x 512 gemms, ~6 ms fwd, ~15 ms bwd;
    # ~25-35 ms a step. Compiled, only the conv front end and the head fuse (~1 ms of elementwise)
    freq, frames, ch, hid, batch, chars, k1, k2 = (
        (17, 16, 4, 8, 2, (2, 3), (5, 3), (5, 3))
        if k.quick
        else (161, 400, 32, 512, 32, (30, 60), (41, 11), (21, 11))
    )
    f1 = (freq + 2 * (k1[0] // 2) - k1[0]) // 2 + 1
    f2 = (f1 + 2 * (k2[0] // 2) - k2[0]) // 2 + 1
    steps = (frames + 2 * (k1[1] // 2) - k1[1]) // 2 + 1

    class DeepSpeech2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(1, ch, k1, (2, 2), (k1[0] // 2, k1[1] // 2)), nn.BatchNorm2d(ch),
                nn.Hardtanh(0, 20),
                nn.Conv2d(ch, ch, k2, (2, 1), (k2[0] // 2, k2[1] // 2)), nn.BatchNorm2d(ch),
                nn.Hardtanh(0, 20),
            )  # fmt: skip
            self.rnn = nn.GRU(ch * f2, hid, num_layers=3, bidirectional=True)
            self.out = nn.Linear(2 * hid, 29)

        def forward(self, x):  # (b, 1, freq, frames) -> (steps, b, 29) log-probabilities
            f = self.conv(x)  # (b, ch, f2, steps)
            h, _ = self.rnn(f.flatten(1, 2).permute(2, 0, 1).contiguous())
            return self.out(h).log_softmax(-1)

    model = DeepSpeech2().to(device)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model) if fixed else model
    gen = torch.Generator().manual_seed(128)
    x = torch.randn(batch, 1, freq, frames, generator=gen).to(device)
    lengths = torch.randint(chars[0], chars[1] + 1, (batch,), generator=gen)  # on the host
    labels = torch.randint(1, 29, (batch, chars[1]), generator=gen).to(device)
    steps_t = torch.full((batch,), steps, dtype=torch.long)  # on the host: no sync in ctc_loss

    def loss_fn():
        return F.ctc_loss(run(x), labels, steps_t, lengths, zero_infinity=True)

    k.meta["compiled"] = fixed
    k.meta["rnn_steps"] = steps
    return k.train(opt, loss_fn), batch, model


def _albert_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # rank 1 planted: 32 x 384 tokens x 12 layers x (12 d^2 + 2 T d) MACs = 2.3 TFLOP fwd,
    # 6.8 a step: ~20-25 ms; rank 0 (256) ~2/3 of it, both at 320 ~0.83; ~600 launches, ~6-9 ms
    # of host: GPU-bound, so the planted step is rank 1's and the fix gains ~15 %
    vocab, e, d, heads, layers, batch, lens = (
        (50, 8, 16, 2, 2, 2, (8, 12)) if k.quick else (16000, 128, 768, 12, 12, 32, (256, 384))
    )
    total = sum(lens)
    seq = total // 2 if fixed else lens[rank]
    start = rank * seq if fixed else (0, lens[0])[rank]
    masked = round(0.15 * seq)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(x).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v).transpose(1, 2).reshape(b, t, d)
            x = self.n1(x + self.o(a))
            return self.n2(x + self.mlp(x))

    class ALBERT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, e), nn.Parameter(torch.randn(512, e) * 0.02)
            self.emb_norm, self.emb_proj = nn.LayerNorm(e), nn.Linear(e, d)
            self.layer = Layer()  # one layer's weights, applied `layers` times
            self.mlm = nn.Sequential(nn.Linear(d, e), nn.GELU(), nn.LayerNorm(e))
            self.bias = nn.Parameter(torch.zeros(vocab))

        def forward(self, ids, where):  # where: (b, masked) positions scored
            t = ids.shape[1]
            x = self.emb_proj(self.emb_norm(self.tok(ids) + self.pos[:t]))
            for _ in range(layers):
                x = self.layer(x)
            h = x.gather(1, where[..., None].expand(-1, -1, d))
            return self.mlm(h) @ self.tok.weight.t() + self.bias

    model = ALBERT().to(device)
    ids = [torch.device(device).index] if k.cuda else None
    run = DDP(model, device_ids=ids)
    opt = k.adamw(model, fused=k.cuda)
    # the same rows on both ranks: each rank takes its span of the 640 (quick: 20) tokens a row
    rows = torch.randint(1, vocab, (batch, total), generator=torch.Generator().manual_seed(129))
    tokens = rows[:, start : start + seq]
    gen = torch.Generator().manual_seed(1290 + rank)
    pos = torch.rand(batch, seq, generator=gen).argsort(1)[:, :masked]
    inputs = tokens.scatter(1, pos, 0).to(device)  # token 0: [MASK]
    target, pos = tokens.gather(1, pos).to(device), pos.to(device)

    def loss_fn():
        with k.ac:
            logits = run(inputs, pos)
        return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())

    k.meta["seq_len"] = seq
    k.meta["extra_work_rank"] = 1
    k.meta["masked_per_sequence"] = masked
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v125": _gru4rec,
    "v126": _levit,
    "v127": _bisenet,
    "v128": _deepspeech2,
    "v129": _albert_ddp,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
