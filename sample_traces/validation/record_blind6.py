"""Record the validation set's eighth part, **blind** (v100-v114, the sixth blind part): planted-and-
fixed pairs on models, sizes and workloads unlike any earlier case (v01-v99, ../fixes,
../multi_gpu), recorded after v85-v99 had been judged, and kept out of every calibration
(truth.json ``group: "blind6"``). Nobody runs gpuscope's analysis on these cases before the lead
judges them once.

    python record_blind6.py drive --out DIR [--cases v100,v101] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind6.py one --case v100 --variant planted|fixed --mode time|trace --out DIR
    python record_blind6.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
file's cases and builder), as record_blind5.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps`` (5 untraced steps timed by CUDA events, wait
6, warmup 2, active 3), then ``--rounds`` rounds of planted and fixed timed without the profiler,
each a fresh process, alternately (planted/fixed, fixed/planted, ...); 15 warm-up steps (30 for
the compiled case, v100), then 40 steps in blocks of 5 synchronised at both ends;
``step_ms_median`` is the median block. v100-v113 run on one GPU; v114 on 2 GPUs (each run a
fresh ``torchrun --nproc_per_node 2`` job; ``step_ms_median`` the slower rank's).

The cases, their sizes and the three chosen to gain nothing were fixed here and committed before
the first device call (v114, the 2-GPU pair, too): v111, DataLoader workers where loading is a
slice of a pre-made uint8 tensor and the PSPNet step is GPU-bound; v112, pinned memory for the
0.29 MB of token ids and masks copied beside a long GPU-bound ELECTRA step; v113, a fused AdamW
where the unfused loop over 156 parameter tensors runs on the host while the GPU still works
through a long Xception backward. Every one-GPU fix is timed once more on a new model
(v100-v110); bf16 on fp32 with TF32 already on (the TF32 branch of ``mixed_precision``) is asked
on a matmul transformer (v103) and on an NCHW convolution net (v104); the CUDA-graph pair is an
eager launch-bound model whose GPU idles most of the step, captured whole by torch.cuda.graph
(v108, after v93: the eager case of ``cuda_graphs``); and v114's pace-setter, rank 1, runs host
work of a new kind: a per-class metric, class by class.

Kept small for the 150 s child limit (v85's compiled PoolFormer passed it): the one compiled
model repeats one block at one resolution (v100: 6 NAFNet blocks at 256 x 256), so Inductor
compiles each distinct kernel once. Every step is meant to take 20-200 ms on an H100 (sizes from
FLOP and launch counts, not timed: nothing was run on a GPU for this part before it was fixed).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

from record_common import (  # noqa: E402
    Kit,
    cycled,
    part_recorder,
    precision_loss,
    uint8_batches,
    whole_step_graph,
)

GROUP = "blind6"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

CASES: dict[str, dict] = {
    "v100": {
        "name": "kernel_fusion",
        "model": "NAFNet-style image restoration net (3x3 conv in and out, 6 NAFBlocks of 32 ch "
        "at 256x256: hand-written LayerNorm2d as an elementwise chain, 1x1 and depthwise 3x3 "
        "convs, SimpleGate x1 * x2, simplified channel attention, learned residual scales; L1 "
        "loss to a clean image), batch 16, bf16 autocast: long kernels, the time in "
        "memory-bound elementwise chains",
        "planted": "eager (each elementwise op its own long memory-bound kernel)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v101": {
        "name": "activation_checkpointing",
        "model": "TimeSformer-style video transformer (divided space-time attention: temporal "
        "attention over 8 frames, then spatial attention over 196 patches of 16x16 on 224x224; "
        "12 blocks d 384, 6 heads, MLP 4x), batch 16 clips, bf16 autocast; most of the GPU's "
        "memory free",
        "planted": "torch.utils.checkpoint on every TimeSformer block (12 nn.Modules)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v102": {
        "name": "optimizer_fused",
        "model": "GhostNet-style CNN (16 ghost bottlenecks: ghost modules of a 1x1 primary conv "
        "and a cheap depthwise 3x3, BatchNorm, squeeze-excite in 7; stem 16 ch, 16-160 ch; 267 "
        "parameter tensors) on 64x64 images, batch 64, fp32 (cuDNN TF32)",
        "planted": "AdamW(foreach=False): a Python loop of small kernels per parameter",
        "fix": "AdamW(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v103": {
        "name": "mixed_precision",
        "model": "Linformer-style encoder (keys and values projected along the sequence from "
        "1024 to 256 by learned Linear maps, attention as explicit matmuls and softmax; 6 "
        "pre-norm layers d 1024, 16 heads, MLP 4x; token embeddings, 100-class head on the mean) "
        "on sequences of 1024 tokens, batch 32, fp32 with TF32 on (matmuls and cuDNN) in both "
        "variants",
        "planted": "fp32 with TF32",
        "fix": "bf16 autocast (TF32 still on)",
        "expected_fix": "mixed_precision",
    },
    "v104": {
        "name": "mixed_precision",
        "model": "SegNet-style encoder-decoder (13 3x3 convs 64-128-256-512-512 with BatchNorm "
        "and max pools keeping their indices, a mirrored decoder of max-unpools and 3x3 convs; "
        "NCHW; 12 classes per pixel) on 256x256 images, batch 16, fp32 with TF32 on (matmuls "
        "and cuDNN) in both variants",
        "planted": "fp32 with TF32",
        "fix": "bf16 autocast (TF32 still on)",
        "expected_fix": "mixed_precision",
    },
    "v105": {
        "name": "dataloader_workers",
        "model": "CRNN text-line recognizer (7 convs 64-512 ch with BatchNorm on 3, pools to "
        "height 1, 2-layer bidirectional LSTM 256, CTC loss over 37 symbols) on 32x256 grey "
        "lines, batch 128, fp32 (cuDNN TF32); each line decoded per sample from a PNG-style "
        "zlib blob (Sub filter undone by a cumulative sum) and augmented in numpy: random crop, "
        "row-by-row shear, 5x5 Gaussian blur, contrast, brightness, noise",
        "planted": "DataLoader(num_workers=0): decoding and augmenting run in the training process",
        "fix": "DataLoader(num_workers=6, persistent_workers=True, prefetch_factor=4)",
        "expected_fix": "dataloader_workers",
    },
    "v106": {
        "name": "pin_memory",
        "model": "ECAPA-TDNN-style speaker encoder (Conv1d 80-384 k5, 3 SE-TDNN blocks of 1x1, "
        "dilated k3 (dilation 2, 3, 4) and 1x1 Conv1d 384 ch with squeeze-excite, multi-layer "
        "aggregation to 1152 ch, attentive statistics pooling, 192-D embedding, 1000 speakers) "
        "on 80-mel filterbanks of 800 frames, batch 256, bf16 autocast",
        "planted": "65.5 MB per step (fp32 filterbanks, int64 speaker ids) copied from pageable "
        "memory with non_blocking=True",
        "fix": "the same batches pinned, copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v107": {
        "name": "host_sync",
        "model": "FaceNet-style embedding net (conv trunk of 5 stages 64-128-256-512-512 ch, "
        "each a strided and a plain 3x3 conv with BatchNorm and ReLU; global pool, 128-D "
        "L2-normalised embedding) trained by a batch-hard triplet loss on 128x128 crops, batch "
        "512 (128 identities x 4), bf16 autocast",
        "planted": "2 syncs per step: the 512 x 512 distance matrix read by .cpu() for the "
        "hardest positive and negative of each anchor picked in numpy, and loss.item() for the "
        "log",
        "fix": "the same hardest positives and negatives picked on the GPU (masked argmax and "
        "argmin), the log summed on the GPU, never read in the step",
        "expected_fix": "host_sync",
    },
    "v108": {
        "name": "cuda_graphs",
        "model": "Neural ODE (encoder Linear 16-64, dynamics MLP 65-128-128-64 with softplus "
        "integrated by 8 fixed RK4 steps written out in Python: 32 evaluations, decoder "
        "Linear 64-16; static shapes) regressing a fixed rotation of its input, batch 64, fp32, "
        "AdamW(fused=True, capturable=True) in both variants: the step is bound by launches, "
        "its GPU idle most of it",
        "planted": "eager: every kernel launched from Python each step",
        "fix": "the whole step (forward, backward, optimizer) captured once by "
        "torch.cuda.graph and replayed (no torch.compile)",
        "expected_fix": "cuda_graphs",
    },
    "v109": {
        "name": "cudnn_benchmark",
        "model": "ERFNet-style segmenter (downsampler blocks of a strided 3x3 conv beside a max "
        "pool, non-bottleneck-1D blocks of factorised 3x1 and 1x3 convs dilated 1-16, 16-128 "
        "ch; transposed-conv decoder; 20 classes) on 384x768 images, batch 8, fp32 (cuDNN TF32)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v110": {
        "name": "batch_size",
        "model": "Bahdanau-attention seq2seq translator (embedding 256, bidirectional GRU "
        "encoder 256 over 50 source tokens, GRUCell decoder unrolled over 48 target tokens in "
        "Python with additive attention, vocab 4000, teacher forcing), fp32",
        "planted": "batch 16",
        "fix": "batch 64 (4 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 4,
    },
    "v111": {
        "name": "null_dataloader_workers",
        "model": "PSPNet-style segmenter (dilated conv backbone 64-128-256-512 ch at stride 8, "
        "BatchNorm; pyramid pooling of 1/2/3/6 bins; 21 classes) on 256x256 images, batch 32, "
        "bf16 autocast; each sample a slice of pre-made uint8 image and label tensors: the step "
        "is GPU-bound",
        "planted": "DataLoader(num_workers=0)",
        "fix": "DataLoader(num_workers=6, persistent_workers=True) (gains ~0: loading is a slice "
        "and a stack, done while the GPU computes)",
        "expected_fix": "dataloader_workers",
        "null": True,
    },
    "v112": {
        "name": "null_pin_memory",
        "model": "ELECTRA-style pre-training (generator 4 layers d 256 and discriminator 8 layers "
        "d 768 sharing token embeddings, vocab 8192, seq 512; 15 % of tokens masked, "
        "replacements sampled with Gumbel noise, replaced-token detection loss), batch 64, "
        "bf16 autocast: a long GPU-bound step",
        "planted": "0.29 MB per step (int64 token ids, bool masks) copied from pageable memory "
        "with non_blocking=True",
        "fix": "the same batches pinned, copied with non_blocking=True (gains ~0: a copy of "
        "0.29 MB beside a long GPU-bound step)",
        "expected_fix": "pin_memory",
        "null": True,
    },
    "v113": {
        "name": "null_optimizer_fused",
        "model": "Xception-style CNN (entry flow of 3 strided blocks, 8 middle-flow blocks of 3 "
        "depthwise-separable convs 728 ch, exit flow to 2048 ch; BatchNorm; 156 parameter "
        "tensors) on 224x224 images, batch 256, bf16 autocast: a long GPU-bound step",
        "planted": "AdamW(foreach=False): a Python loop of small kernels per parameter",
        "fix": "AdamW(fused=True) (gains ~0: the loop is launched while the GPU still runs the "
        "backward, and its kernels are a small part of the step)",
        "expected_fix": "optimizer_fused",
        "null": True,
    },
    "v114": {
        "name": "load_imbalance_host",
        "model": "Res2Net-style CNN (stem 64 ch; 3 stages of 2 bottlenecks whose 3x3 conv is "
        "split into 4 hierarchical scales, 128/256/512 ch; 64x64 images, 200 classes) under DDP "
        "on 2 GPUs, batch 256 per rank, bf16 autocast",
        "planted": "rank 1 alone, after backward, keeps per-class confusion counts (true "
        "positives, false positives, false negatives) class by class over the 200 classes: "
        "about 14 small ops per class launched one by one, so its host is the pace-setter and "
        "rank 0 waits in every all-reduce",
        "fix": "rank 1's per-class counts removed",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
}
ORDER = list(CASES)


def _nafnet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    c, blocks, img, batch = (4, 1, 16, 2) if k.quick else (32, 6, 256, 16)

    class LayerNorm2d(nn.Module):  # over the channels of each pixel, written out
        def __init__(self, ch: int) -> None:
            super().__init__()
            self.w, self.b = nn.Parameter(torch.ones(ch)), nn.Parameter(torch.zeros(ch))

        def forward(self, x):
            mu = x.mean(1, keepdim=True)
            xc = x - mu
            y = xc / torch.sqrt((xc * xc).mean(1, keepdim=True) + 1e-6)
            return y * self.w[:, None, None] + self.b[:, None, None]

    class NAFBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = LayerNorm2d(c), LayerNorm2d(c)
            self.conv1 = nn.Conv2d(c, 2 * c, 1)
            self.conv2 = nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c)
            self.sca = nn.Conv2d(c, c, 1)
            self.conv3 = nn.Conv2d(c, c, 1)
            self.conv4, self.conv5 = nn.Conv2d(c, 2 * c, 1), nn.Conv2d(c, c, 1)
            self.beta = nn.Parameter(torch.zeros(1, c, 1, 1))
            self.gamma = nn.Parameter(torch.zeros(1, c, 1, 1))

        def forward(self, inp):
            x = self.conv2(self.conv1(self.n1(inp)))
            a, b = x.chunk(2, 1)
            x = a * b  # SimpleGate
            x = x * self.sca(x.mean((2, 3), keepdim=True))
            y = inp + self.conv3(x) * self.beta
            a, b = self.conv4(self.n2(y)).chunk(2, 1)
            return y + self.conv5(a * b) * self.gamma

    class NAFNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.intro, self.ending = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, 3, 3, padding=1)
            self.body = nn.Sequential(*[NAFBlock() for _ in range(blocks)])

        def forward(self, x):
            return x + self.ending(self.body(self.intro(x)))

    model = NAFNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model) if fixed else model
    clean = torch.rand(batch, 3, img, img, device=device)
    noisy = clean + 0.1 * torch.randn_like(clean)

    def loss_fn():
        with k.ac:
            return F.l1_loss(run(noisy).float(), clean)

    k.meta["compiled"] = fixed
    return k.train(opt, loss_fn), batch, model


def _timesformer(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    frames, img, patch, d, depth, heads, batch = (
        (2, 16, 8, 16, 2, 2, 2) if k.quick else (8, 224, 16, 384, 12, 6, 16)
    )
    n = (img // patch) ** 2

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.qkv, self.o = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x):  # (groups, seq, d)
            g, t, _ = x.shape
            q, kk, v = self.qkv(self.norm(x)).view(g, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            return self.o(F.scaled_dot_product_attention(q, kk, v).transpose(1, 2).reshape(g, t, d))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.time, self.space = Attention(), Attention()
            self.n2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):  # (b, frames, n, d)
            b = x.shape[0]
            xt = x.transpose(1, 2).reshape(b * n, frames, d)  # each patch over time
            x = x + self.time(xt).view(b, n, frames, d).transpose(1, 2)
            xs = x.reshape(b * frames, n, d)  # each frame over its patches
            x = x + self.space(xs).view(b, frames, n, d)
            return x + self.mlp(self.n2(x))

    class TimeSformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Conv2d(3, d, patch, patch)
            self.pos = nn.Parameter(torch.randn(1, 1, n, d) * 0.02)
            self.time_pos = nn.Parameter(torch.randn(1, frames, 1, d) * 0.02)
            self.blocks = nn.ModuleList([Block() for _ in range(depth)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 400)

        def forward(self, video):  # (b, frames, 3, H, W)
            b = video.shape[0]
            x = self.embed(video.flatten(0, 1)).flatten(2).transpose(1, 2)
            x = x.reshape(b, frames, n, d) + self.pos + self.time_pos
            for blk in self.blocks:
                x = blk(x) if fixed else checkpoint(blk, x, use_reentrant=False)
            return self.head(self.norm(x).mean((1, 2)))

    model = TimeSformer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, frames, 3, img, img, device=device)
    y = torch.randint(0, 400, (batch,), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["checkpointed_modules"] = 0 if fixed else depth
    return k.train(opt, loss_fn), batch, model


def _ghostnet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # (kernel, expansion, out, squeeze-excite, stride) per bottleneck: GhostNet 1.0x's table
    cfg = [
        (3, 16, 16, False, 1), (3, 48, 24, False, 2), (3, 72, 24, False, 1),
        (5, 72, 40, True, 2), (5, 120, 40, True, 1), (3, 240, 80, False, 2),
        (3, 200, 80, False, 1), (3, 184, 80, False, 1), (3, 184, 80, False, 1),
        (3, 480, 112, True, 1), (3, 672, 112, True, 1), (5, 672, 160, True, 2),
        (5, 960, 160, False, 1), (5, 960, 160, True, 1), (5, 960, 160, False, 1),
        (5, 960, 160, True, 1),
    ]  # fmt: skip
    img, batch, div = (16, 2, 8) if k.quick else (64, 64, 1)
    cfg = [(ks, max(2, e // div), max(2, o // div), se, s) for ks, e, o, se, s in cfg]
    cfg = cfg[:5] if k.quick else cfg  # the first 5: identity and conv shortcuts, SE or not

    class Ghost(nn.Module):  # half the channels by a 1x1 conv, the other half by a cheap dw 3x3
        def __init__(self, ci: int, co: int, relu: bool) -> None:
            super().__init__()
            half = (co + 1) // 2
            act = [nn.ReLU()] if relu else []
            self.primary = nn.Sequential(
                nn.Conv2d(ci, half, 1, bias=False), nn.BatchNorm2d(half), *act
            )
            self.cheap = nn.Sequential(
                nn.Conv2d(half, half, 3, 1, 1, groups=half, bias=False), nn.BatchNorm2d(half), *act
            )
            self.co = co

        def forward(self, x):
            a = self.primary(x)
            return torch.cat([a, self.cheap(a)], 1)[:, : self.co]

    class SE(nn.Module):
        def __init__(self, ch: int) -> None:
            super().__init__()
            self.r, self.e = nn.Conv2d(ch, max(1, ch // 4), 1), nn.Conv2d(max(1, ch // 4), ch, 1)

        def forward(self, x):
            return x * F.hardsigmoid(self.e(F.relu(self.r(x.mean((2, 3), keepdim=True)))))

    class Bottleneck(nn.Module):
        def __init__(self, ci: int, ks: int, mid: int, co: int, se: bool, s: int) -> None:
            super().__init__()
            layers: list = [Ghost(ci, mid, True)]
            if s > 1:
                layers += [nn.Conv2d(mid, mid, ks, s, ks // 2, groups=mid, bias=False)]
                layers += [nn.BatchNorm2d(mid)]
            if se:
                layers.append(SE(mid))
            layers.append(Ghost(mid, co, False))
            self.body = nn.Sequential(*layers)
            self.short = (
                nn.Sequential(
                    nn.Conv2d(ci, ci, ks, s, ks // 2, groups=ci, bias=False), nn.BatchNorm2d(ci),
                    nn.Conv2d(ci, co, 1, bias=False), nn.BatchNorm2d(co),
                )
                if (s > 1 or ci != co)
                else nn.Identity()
            )  # fmt: skip

        def forward(self, x):
            return self.body(x) + self.short(x)

    stem = max(2, 16 // div)
    mods: list = [nn.Conv2d(3, stem, 3, 2, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU()]
    ci = stem
    for ks, e, o, se, s in cfg:
        mods.append(Bottleneck(ci, ks, e, o, se, s))
        ci = o
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, 200)]
    model = nn.Sequential(*mods).to(device)
    kw = {"fused": True} if fixed and k.cuda else {"foreach": fixed}
    opt = k.adamw(model, **kw)
    x = torch.randn(batch, 3, img, img, device=device)
    y = torch.randint(0, 200, (batch,), device=device)
    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "AdamW(fused=True)" if fixed else "AdamW(foreach=False)"
    return k.train(opt, lambda: F.cross_entropy(model(x), y)), batch, model


def _linformer(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    seq, proj, d, layers, heads, vocab, batch = (
        (16, 4, 16, 1, 2, 50, 2) if k.quick else (1024, 256, 1024, 6, 16, 8192, 32)
    )
    hd = d // heads

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.e, self.f = nn.Linear(seq, proj, bias=False), nn.Linear(seq, proj, bias=False)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b = x.shape[0]
            q, kk, v = self.qkv(self.n1(x)).view(b, seq, 3, heads, hd).permute(2, 0, 3, 1, 4)
            kp = self.e(kk.transpose(-1, -2)).transpose(-1, -2)  # (b, h, proj, hd)
            vp = self.f(v.transpose(-1, -2)).transpose(-1, -2)
            att = torch.softmax((q @ kp.transpose(-1, -2)) * hd**-0.5, -1)
            a = (att @ vp).transpose(1, 2).reshape(b, seq, d)
            x = x + self.o(a)
            return x + self.mlp(self.n2(x))

    class Linformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(seq, d) * 0.02)
            self.layers = nn.Sequential(*[Layer() for _ in range(layers)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 100)

        def forward(self, ids):
            return self.head(self.norm(self.layers(self.tok(ids) + self.pos)).mean(1))

    model = Linformer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    y = torch.randint(0, 100, (batch,), device=device)

    loss_fn = precision_loss(k, fixed, model, F.cross_entropy, ids, y)

    k.meta["precision"] = "bf16 autocast, TF32 on" if fixed else "fp32, TF32 on"
    return k.train(opt, loss_fn), batch, model


def _segnet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    img, batch, div = (32, 2, 16) if k.quick else (256, 16, 1)
    stages = [(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]
    stages = [(max(2, c // div), n) for c, n in stages]
    stages = stages[1:3] if k.quick else stages  # 2 and 3 convs a stage

    def cbr(ci: int, co: int):
        return [nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU()]

    class SegNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            enc, dec = [], []
            ci = 3
            for co, n in stages:
                layers = cbr(ci, co)
                for _ in range(n - 1):
                    layers += cbr(co, co)
                enc.append(nn.Sequential(*layers))
                ci = co
            outs = [*[c for c, _ in stages][::-1][1:], stages[0][0]]  # each decoder stage's out
            for (c, n), co in zip(stages[::-1], outs, strict=True):
                layers = []
                for _ in range(n - 1):
                    layers += cbr(c, c)
                layers += cbr(c, co)
                dec.append(nn.Sequential(*layers))
            self.enc, self.dec = nn.ModuleList(enc), nn.ModuleList(dec)
            self.head = nn.Conv2d(stages[0][0], 12, 3, padding=1)

        def forward(self, x):
            idx = []
            for e in self.enc:
                x, i = F.max_pool2d(e(x), 2, 2, return_indices=True)
                idx.append(i)
            for dblk, i in zip(self.dec, idx[::-1], strict=True):
                x = dblk(F.max_unpool2d(x, i, 2, 2))
            return self.head(x)

    model = SegNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, img, img, device=device)
    y = torch.randint(0, 12, (batch, img, img), device=device)

    loss_fn = precision_loss(k, fixed, model, F.cross_entropy, x, y)

    k.meta["precision"] = "bf16 autocast, TF32 on" if fixed else "fp32, TF32 on"
    return k.train(opt, loss_fn), batch, model


class TextLines:
    """v105's dataset: ``1_000_000`` virtual text lines cut from ``pool`` grey canvases of
    (h + 16) x (w + 32), made once and stored as PNG-style blobs (each row's Sub filter, then
    zlib). Per sample (in numpy, seeded by the index): the blob decoded (zlib, the Sub filter
    undone by a cumulative sum), a random h x w crop, each row shifted by its own shear, a 5x5
    Gaussian blur as shifted adds, contrast, brightness and noise; a label of ``max_len`` / 2 to
    ``max_len`` of 36 symbols (1-36; 0 is CTC's blank) padded with 0. Returns (1 x h x w float32
    image, ``max_len`` int64 labels, length)."""

    def __init__(self, h: int, w: int, pool: int, max_len: int) -> None:
        import zlib

        import numpy as np

        self.h, self.w, self.max_len = h, w, max_len
        rng = np.random.default_rng(105)
        hh, ww = h + 16, w + 32
        self.blobs = []
        for _ in range(pool):
            img = np.full((hh, ww), 230, np.uint8)
            for x0 in range(8, ww - 8, max(4, h // 2)):  # one glyph-like cluster of bars a cell
                for _ in range(3):
                    r0, c0 = rng.integers(4, hh - 12), x0 + rng.integers(0, 4)
                    img[r0 : r0 + rng.integers(3, 8), c0 : c0 + rng.integers(1, 4)] = 40
            filtered = np.diff(img, axis=1, prepend=np.uint8(0))  # PNG's Sub filter, mod 256
            self.blobs.append(zlib.compress(filtered.tobytes(), 6))
        self.shape = (hh, ww)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        import zlib

        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        h, w = self.h, self.w
        raw = np.frombuffer(zlib.decompress(self.blobs[i % len(self.blobs)]), np.uint8)
        img = np.cumsum(raw.reshape(self.shape), axis=1, dtype=np.uint8).astype(np.float32) / 255
        y0, x0 = rng.integers(0, 17), rng.integers(0, 33)
        img = img[y0 : y0 + h, x0 : x0 + w]
        shear = rng.uniform(-0.3, 0.3)
        out = np.empty_like(img)
        for r in range(h):  # row by row, as a shear
            out[r] = np.roll(img[r], round(shear * (r - h / 2)))
        g = np.array([1, 4, 6, 4, 1], np.float32) / 16
        pad = np.pad(out, 2, mode="edge")
        across = sum(g[j] * pad[:, j : j + w] for j in range(5))
        img = sum(g[j] * across[j : j + h] for j in range(5))
        img = (img - img.mean()) * rng.uniform(0.7, 1.3) + rng.uniform(0.3, 0.7)
        img = img + rng.normal(0.0, 0.05, img.shape)
        n = int(rng.integers(self.max_len // 2, self.max_len + 1))
        label = np.zeros(self.max_len, np.int64)
        label[:n] = rng.integers(1, 37, n)
        return torch.from_numpy(img[None].astype(np.float32)), torch.from_numpy(label), n


def _crnn(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    h, w, div, hidden, batch, workers, pool, max_len = (
        (32, 64, 16, 8, 4, 2, 4, 4) if k.quick else (32, 256, 1, 256, 128, 6, 64, 16)
    )  # w / 4 - 1 CTC steps (63) for labels of up to max_len symbols
    c = [max(2, x // div) for x in (64, 128, 256, 256, 512, 512, 512)]

    def conv(ci: int, co: int, bn: bool, ks: int = 3, pad: int = 1):
        return [nn.Conv2d(ci, co, ks, 1, pad), *([nn.BatchNorm2d(co)] if bn else []), nn.ReLU()]

    class CRNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cnn = nn.Sequential(
                *conv(1, c[0], False), nn.MaxPool2d(2),
                *conv(c[0], c[1], False), nn.MaxPool2d(2),
                *conv(c[1], c[2], True), *conv(c[2], c[3], False), nn.MaxPool2d((2, 1)),
                *conv(c[3], c[4], True), *conv(c[4], c[5], False), nn.MaxPool2d((2, 1)),
                *conv(c[5], c[6], True, 2, 0),
            )  # fmt: skip
            self.rnn = nn.LSTM(c[6], hidden, num_layers=2, bidirectional=True)
            self.out = nn.Linear(2 * hidden, 37)

        def forward(self, x):
            f = self.cnn(x)  # (b, c, 1, T)
            seq, _ = self.rnn(f.squeeze(2).permute(2, 0, 1))  # (T, b, c)
            return self.out(seq).log_softmax(-1)  # (T, b, 37)

    model = CRNN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True, "prefetch_factor": 4}
    loader = DataLoader(
        TextLines(h, w, pool, max_len), batch_size=batch, shuffle=True, drop_last=True,
        **(kw if fixed else {}),
    )  # fmt: skip
    it = iter(loader)

    def loss_fn():
        x, labels, lengths = next(it)
        x, labels = x.to(device), labels.to(device)
        logp = model(x)
        steps = torch.full((logp.shape[1],), logp.shape[0], dtype=torch.long)
        return F.ctc_loss(logp, labels, steps, lengths, zero_infinity=True)

    k.meta["num_workers"] = workers if fixed else 0
    return k.train(opt, loss_fn), batch, model


def _ecapa(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    mels, frames, ch, batch, speakers = (8, 32, 8, 2, 10) if k.quick else (80, 800, 384, 256, 1000)

    def cbr(ci: int, co: int, ks: int = 1, dil: int = 1):
        return nn.Sequential(
            nn.Conv1d(ci, co, ks, padding=dil * (ks // 2), dilation=dil), nn.ReLU(),
            nn.BatchNorm1d(co),
        )  # fmt: skip

    class SEBlock(nn.Module):
        def __init__(self, dil: int) -> None:
            super().__init__()
            self.f = nn.Sequential(cbr(ch, ch), cbr(ch, ch, 3, dil), cbr(ch, ch))
            self.se1, self.se2 = nn.Conv1d(ch, ch // 4, 1), nn.Conv1d(ch // 4, ch, 1)

        def forward(self, x):
            y = self.f(x)
            s = torch.sigmoid(self.se2(F.relu(self.se1(y.mean(2, keepdim=True)))))
            return x + y * s

    class ECAPA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(mels, ch, 5)
            self.blocks = nn.ModuleList([SEBlock(d) for d in (2, 3, 4)])
            self.mfa = cbr(3 * ch, 3 * ch)
            self.att = nn.Sequential(
                nn.Conv1d(3 * ch, 128, 1), nn.Tanh(), nn.Conv1d(128, 3 * ch, 1)
            )
            self.bn, self.emb = nn.BatchNorm1d(6 * ch), nn.Linear(6 * ch, 192)
            self.cls = nn.Linear(192, speakers)

        def forward(self, x):
            h = self.stem(x)
            outs = []
            for b in self.blocks:
                h = b(h)
                outs.append(h)
            h = self.mfa(torch.cat(outs, 1))
            a = torch.softmax(self.att(h), dim=2)  # attentive statistics pooling
            mu = (h * a).sum(2)
            sd = ((h * h * a).sum(2) - mu * mu).clamp(min=1e-5).sqrt()
            return self.cls(self.emb(self.bn(torch.cat([mu, sd], 1))))

    model = ECAPA().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(106)
    pool = [
        (
            torch.randn(batch, mels, frames, generator=gen),
            torch.randint(0, speakers, (batch,), generator=gen),
        )
        for _ in range(3)
    ]
    next_batch = cycled(pool, device, pinned=fixed and k.cuda)

    def loss_fn():
        x, y = next_batch()
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["bytes_per_step"] = batch * (mels * frames * 4 + 8)
    k.meta["pinned"] = fixed
    return k.train(opt, loss_fn), batch, model


def _facenet(k: Kit, fixed: bool, device: str, rank: int):
    import numpy as np

    torch, nn, F = k.torch, k.nn, k.F
    widths, img, ids, per = (
        ((4, 4, 8, 8, 8), 16, 4, 2) if k.quick else ((64, 128, 256, 512, 512), 128, 128, 4)
    )
    batch = ids * per
    mods: list = []
    ci = 3
    for co in widths:
        mods += [nn.Conv2d(ci, co, 3, 2, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU()]
        mods += [nn.Conv2d(co, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU()]
        ci = co
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, 128)]
    model = nn.Sequential(*mods).to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, img, img, device=device)
    who = np.repeat(np.arange(ids), per)
    same_h = who[:, None] == who[None, :]
    pos_h, neg_h = same_h & ~np.eye(batch, dtype=bool), ~same_h
    not_pos = torch.from_numpy(~pos_h).to(device)
    not_neg = torch.from_numpy(~neg_h).to(device)
    rows = torch.arange(batch, device=device)
    tot = torch.zeros((), device=device)
    seen: list[float] = []

    def step():
        with k.ac:
            e = F.normalize(model(x).float(), dim=1)
        dist = (2 - 2 * e @ e.t()).clamp(min=1e-12).sqrt()
        if fixed:  # the same mining on the GPU
            hard_pos = dist.detach().masked_fill(not_pos, -1.0).argmax(1)
            hard_neg = dist.detach().masked_fill(not_neg, 1e9).argmin(1)
        else:  # planted: the distances read on the host, mined in numpy
            dh = dist.detach().cpu().numpy()
            hp = np.where(pos_h, dh, -1.0).argmax(1)
            hn = np.where(neg_h, dh, 1e9).argmin(1)
            hard_pos, hard_neg = torch.from_numpy(hp).to(device), torch.from_numpy(hn).to(device)
        loss = F.relu(dist[rows, hard_pos] - dist[rows, hard_neg] + 0.2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if fixed:
            tot.add_(loss.detach())
        else:
            seen.append(loss.item())

    k.meta["syncs_per_step"] = 0 if fixed else 2
    return step, batch, model


def _neural_ode(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    dim, width, hidden, steps, batch = (4, 8, 8, 1, 8) if k.quick else (16, 64, 128, 8, 64)

    class Dynamics(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1, self.l2 = nn.Linear(width + 1, hidden), nn.Linear(hidden, hidden)
            self.l3 = nn.Linear(hidden, width)

        def forward(self, t: float, z):
            tz = torch.cat([z, torch.full_like(z[:, :1], t)], 1)
            return self.l3(F.softplus(self.l2(F.softplus(self.l1(tz)))))

    class NeuralODE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc, self.f, self.dec = nn.Linear(dim, width), Dynamics(), nn.Linear(width, dim)

        def forward(self, x):
            z, dt = self.enc(x), 1.0 / steps
            for i in range(steps):  # classic RK4, fixed step
                t = i * dt
                k1 = self.f(t, z)
                k2 = self.f(t + dt / 2, z + dt / 2 * k1)
                k3 = self.f(t + dt / 2, z + dt / 2 * k2)
                k4 = self.f(t + dt, z + dt * k3)
                z = z + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return self.dec(z)

    model = NeuralODE().to(device)
    opt = k.adamw(model, fused=True, capturable=True) if k.cuda else k.adamw(model)
    x = torch.randn(batch, dim, device=device)
    y = x @ torch.linalg.qr(torch.randn(dim, dim, device=device))[0]

    def loss_fn():
        return F.mse_loss(model(x), y)

    step = whole_step_graph(k, opt, loss_fn, k.train(opt, loss_fn), fixed)
    k.meta["ode_evaluations"] = 4 * steps
    return step, batch, model


def _erfnet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cudnn.benchmark = fixed
    hh, ww, batch, div, enc64, dils, dec = (
        (16, 32, 2, 8, 1, (2,), 1) if k.quick else (384, 768, 8, 1, 5, (2, 4, 8, 16) * 2, 2)
    )
    c16, c64, c128 = max(4, 16 // div), max(8, 64 // div), max(16, 128 // div)

    class Down(nn.Module):
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(ci, co - ci, 3, 2, 1), nn.BatchNorm2d(co)

        def forward(self, x):
            return F.relu(self.bn(torch.cat([self.conv(x), F.max_pool2d(x, 2, 2)], 1)))

    class NonBottleneck1D(nn.Module):
        def __init__(self, c: int, dil: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(c, c, (3, 1), padding=(1, 0))
            self.c2 = nn.Conv2d(c, c, (1, 3), padding=(0, 1))
            self.c3 = nn.Conv2d(c, c, (3, 1), padding=(dil, 0), dilation=(dil, 1))
            self.c4 = nn.Conv2d(c, c, (1, 3), padding=(0, dil), dilation=(1, dil))
            self.b1, self.b2 = nn.BatchNorm2d(c), nn.BatchNorm2d(c)

        def forward(self, x):
            y = F.relu(self.b1(self.c2(F.relu(self.c1(x)))))
            y = self.b2(self.c4(F.relu(self.c3(y))))
            return F.relu(x + y)

    def up(ci: int, co: int):
        return nn.Sequential(
            nn.ConvTranspose2d(ci, co, 3, 2, 1, output_padding=1), nn.BatchNorm2d(co), nn.ReLU()
        )

    model = nn.Sequential(
        Down(3, c16), Down(c16, c64), *[NonBottleneck1D(c64, 1) for _ in range(enc64)],
        Down(c64, c128), *[NonBottleneck1D(c128, d) for d in dils],
        up(c128, c64), *[NonBottleneck1D(c64, 1) for _ in range(dec)],
        up(c64, c16), *[NonBottleneck1D(c16, 1) for _ in range(dec)],
        nn.ConvTranspose2d(c16, 20, 2, 2),
    ).to(device)  # fmt: skip
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, hh, ww, device=device)
    y = torch.randint(0, 20, (batch, hh, ww), device=device)
    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    return k.train(opt, lambda: F.cross_entropy(model(x), y)), batch, model


def _bahdanau(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    emb, hid, src, tgt, vocab, batch = (
        (8, 8, 5, 4, 20, 4) if k.quick else (256, 256, 50, 48, 4000, 16)
    )
    batch *= 4 if fixed else 1

    class Seq2Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.src_emb, self.tgt_emb = nn.Embedding(vocab, emb), nn.Embedding(vocab, emb)
            self.enc = nn.GRU(emb, hid, batch_first=True, bidirectional=True)
            self.init = nn.Linear(2 * hid, hid)
            self.wa, self.ua = nn.Linear(hid, hid, bias=False), nn.Linear(2 * hid, hid)
            self.va = nn.Linear(hid, 1, bias=False)
            self.cell = nn.GRUCell(emb + 2 * hid, hid)
            self.out = nn.Linear(hid + 2 * hid, vocab)

        def forward(self, s, t):
            enc, _ = self.enc(self.src_emb(s))  # (b, src, 2 hid)
            keys = self.ua(enc)
            h = torch.tanh(self.init(enc.mean(1)))
            logits = []
            for i in range(t.shape[1] - 1):  # one decoder step per target token, in Python
                score = self.va(torch.tanh(keys + self.wa(h)[:, None])).squeeze(-1)
                ctx = torch.bmm(torch.softmax(score, -1)[:, None], enc).squeeze(1)
                h = self.cell(torch.cat([self.tgt_emb(t[:, i]), ctx], -1), h)
                logits.append(self.out(torch.cat([h, ctx], -1)))
            return torch.stack(logits, 1)

    model = Seq2Seq().to(device)
    opt = k.adamw(model, fused=k.cuda)
    s = torch.randint(0, vocab, (batch, src), device=device)
    t = torch.randint(0, vocab, (batch, tgt + 1), device=device)

    def loss_fn():
        return F.cross_entropy(model(s, t).reshape(-1, vocab), t[:, 1:].reshape(-1))

    k.meta["batch_multiple"] = 4
    k.meta["decoder_steps"] = tgt
    return k.train(opt, loss_fn), batch, model


class SlicedScenes:
    """v111's dataset: ``n`` uint8 RGB ``hw`` x ``hw`` images and their uint8 label maps (21
    classes) made once; a sample is a slice of each."""

    def __init__(self, n: int, hw: int) -> None:
        import torch

        gen = torch.Generator().manual_seed(111)
        self.x = torch.randint(0, 256, (n, 3, hw, hw), dtype=torch.uint8, generator=gen)
        self.y = torch.randint(0, 21, (n, hw, hw), dtype=torch.uint8, generator=gen)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def _pspnet(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    hw, batch, workers, n, div = (32, 2, 2, 8, 16) if k.quick else (256, 32, 6, 512, 1)
    w = [max(2, c // div) for c in (64, 128, 256, 512)]

    def cbr(ci: int, co: int, s: int = 1, dil: int = 1):
        return [
            nn.Conv2d(ci, co, 3, s, dil, dilation=dil, bias=False),
            nn.BatchNorm2d(co),
            nn.ReLU(),
        ]

    class PSPNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Sequential(
                *cbr(3, w[0], 2), *cbr(w[0], w[0]),
                *cbr(w[0], w[1], 2), *cbr(w[1], w[1]),
                *cbr(w[1], w[2], 2), *cbr(w[2], w[2]), *cbr(w[2], w[2]),
                *cbr(w[2], w[3], 1, 2), *cbr(w[3], w[3], 1, 2), *cbr(w[3], w[3], 1, 4),
                *cbr(w[3], w[3], 1, 4),
            )  # fmt: skip
            self.bins = (1, 2, 3, 6)
            self.ppm = nn.ModuleList(
                [
                    nn.Sequential(nn.Conv2d(w[3], w[3] // 4, 1, bias=False), nn.BatchNorm2d(w[3] // 4), nn.ReLU())
                    for _ in self.bins
                ]
            )  # fmt: skip
            self.fuse = nn.Sequential(*cbr(2 * w[3], w[3] // 2), nn.Conv2d(w[3] // 2, 21, 1))

        def forward(self, x):
            f = self.backbone(x)
            size = f.shape[-2:]
            pyr = [
                F.interpolate(m(F.adaptive_avg_pool2d(f, b)), size=size, mode="bilinear")
                for b, m in zip(self.bins, self.ppm, strict=True)
            ]
            out = self.fuse(torch.cat([f, *pyr], 1))
            return F.interpolate(out, size=x.shape[-2:], mode="bilinear")

    model = PSPNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True}
    loader = DataLoader(
        SlicedScenes(n, hw), batch_size=batch, shuffle=True, drop_last=True, **(kw if fixed else {})
    )
    next_batch = uint8_batches(loader, device)

    def loss_fn():
        x, y = next_batch()
        with k.ac:
            return F.cross_entropy(model(x).float(), y.long())

    k.meta["num_workers"] = workers if fixed else 0
    return k.train(opt, loss_fn), batch, model


def _electra(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    vocab, seq, batch, gen_cfg, disc_cfg = (
        (50, 16, 2, (8, 1, 2), (16, 1, 2))
        if k.quick
        else (8192, 512, 64, (256, 4, 4), (768, 8, 12))
    )  # (d, layers, heads) of the generator and the discriminator

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.h = heads
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, kk, v = self.qkv(self.n1(x)).view(b, t, 3, self.h, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v).transpose(1, 2).reshape(b, t, d)
            x = x + self.o(a)
            return x + self.mlp(self.n2(x))

    class Electra(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            e = disc_cfg[0]
            self.tok, self.pos = nn.Embedding(vocab, e), nn.Parameter(torch.randn(seq, e) * 0.02)
            self.g_in = nn.Linear(e, gen_cfg[0])
            self.gen = nn.Sequential(*[Block(gen_cfg[0], gen_cfg[2]) for _ in range(gen_cfg[1])])
            self.g_out = nn.Linear(gen_cfg[0], vocab)
            self.disc = nn.Sequential(*[Block(e, disc_cfg[2]) for _ in range(disc_cfg[1])])
            self.d_out = nn.Linear(e, 1)

        def forward(self, ids, mask):
            masked = ids.masked_fill(mask, 0)  # token 0: [MASK]
            g = self.g_out(self.gen(self.g_in(self.tok(masked) + self.pos)))
            gen_loss = F.cross_entropy(
                g.float().flatten(0, 1), ids.masked_fill(~mask, -100).flatten(), ignore_index=-100
            )
            with torch.no_grad():
                u = torch.rand_like(g, dtype=torch.float32).clamp_(1e-9, 1 - 1e-9)
                sampled = (g.float() - torch.log(-torch.log(u))).argmax(-1)
                corrupt = torch.where(mask, sampled, ids)
            r = self.d_out(self.disc(self.tok(corrupt) + self.pos)).squeeze(-1)
            disc_loss = F.binary_cross_entropy_with_logits(r.float(), (corrupt != ids).float())
            return gen_loss + 50 * disc_loss

    model = Electra().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(112)
    pool = [
        (
            torch.randint(1, vocab, (batch, seq), generator=gen),
            torch.rand(batch, seq, generator=gen) < 0.15,
        )
        for _ in range(3)
    ]
    next_batch = cycled(pool, device, pinned=fixed and k.cuda)

    def loss_fn():
        ids, mask = next_batch()
        with k.ac:
            return model(ids, mask)

    k.meta["bytes_per_step"] = batch * seq * (8 + 1)
    k.meta["pinned"] = fixed
    return k.train(opt, loss_fn), batch, model


def _xception(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    img, batch, middle, div = (32, 2, 1, 32) if k.quick else (224, 256, 8, 1)

    def ch(c: int) -> int:
        return max(4, c // div)

    def sep(ci: int, co: int):  # depthwise 3x3, pointwise 1x1, BatchNorm
        return [
            nn.Conv2d(ci, ci, 3, 1, 1, groups=ci, bias=False),
            nn.Conv2d(ci, co, 1, bias=False), nn.BatchNorm2d(co),
        ]  # fmt: skip

    class Block(nn.Module):
        def __init__(self, ci: int, co: int, reps: int, stride: int, relu_first: bool) -> None:
            super().__init__()
            layers: list = []
            for r in range(reps):
                if r or relu_first:
                    layers.append(nn.ReLU())
                layers += sep(ci if r == 0 else co, co)
            if stride > 1:
                layers.append(nn.MaxPool2d(3, stride, 1))
            self.body = nn.Sequential(*layers)
            self.short = (
                nn.Sequential(nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co))
                if (stride > 1 or ci != co)
                else None
            )

        def forward(self, x):
            return self.body(x) + (x if self.short is None else self.short(x))

    mods: list = [
        nn.Conv2d(3, ch(32), 3, 2, 1, bias=False), nn.BatchNorm2d(ch(32)), nn.ReLU(),
        nn.Conv2d(ch(32), ch(64), 3, 1, 1, bias=False), nn.BatchNorm2d(ch(64)), nn.ReLU(),
        Block(ch(64), ch(128), 2, 2, False), Block(ch(128), ch(256), 2, 2, True),
        Block(ch(256), ch(728), 2, 2, True),
        *[Block(ch(728), ch(728), 3, 1, True) for _ in range(middle)],
        Block(ch(728), ch(1024), 2, 2, True),
        *sep(ch(1024), ch(1536)), nn.ReLU(), *sep(ch(1536), ch(2048)), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch(2048), 1000),
    ]  # fmt: skip
    model = nn.Sequential(*mods).to(device)
    kw = {"fused": True} if fixed and k.cuda else {"foreach": fixed}
    opt = k.adamw(model, **kw)
    x = torch.randn(batch, 3, img, img, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "AdamW(fused=True)" if fixed else "AdamW(foreach=False)"
    return k.train(opt, loss_fn), batch, model


def _res2net_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    img, batch, classes, div = (16, 2, 6, 16) if k.quick else (64, 256, 200, 1)
    stem = max(4, 64 // div)
    outs = [max(8, c // div) for c in (128, 256, 512)]
    scales = 4

    def cbn(ci: int, co: int, ks: int = 1):
        return nn.Sequential(nn.Conv2d(ci, co, ks, 1, ks // 2, bias=False), nn.BatchNorm2d(co))

    class Bottle2neck(nn.Module):
        def __init__(self, ci: int, co: int, stride: int) -> None:
            super().__init__()
            wd = co // 2 // scales  # each scale's width
            self.stride, self.wd = stride, wd
            self.reduce = cbn(ci, wd * scales)
            self.convs = nn.ModuleList([cbn(wd, wd, 3) for _ in range(scales - 1)])
            self.expand = cbn(wd * scales, co)
            self.short = cbn(ci, co) if (stride > 1 or ci != co) else None

        def forward(self, x):
            h = F.relu(self.reduce(x))
            if self.stride > 1:
                h, x = F.avg_pool2d(h, 2), F.avg_pool2d(x, 2)
            parts = h.split(self.wd, 1)
            ys, y = [parts[0]], None
            for conv, p in zip(self.convs, parts[1:], strict=True):  # hierarchical scales
                y = F.relu(conv(p if y is None else p + y))
                ys.append(y)
            out = self.expand(torch.cat(ys, 1))
            return F.relu(out + (x if self.short is None else self.short(x)))

    mods: list = [nn.Conv2d(3, stem, 3, 1, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU()]
    ci = stem
    for i, co in enumerate(outs):
        mods += [Bottle2neck(ci, co, 1 if i == 0 else 2), Bottle2neck(co, co, 1)]
        ci = co
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, classes)]
    model = nn.Sequential(*mods).to(device)
    ids = [torch.device(device).index] if k.cuda else None
    run = DDP(model, device_ids=ids)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(114 + rank)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)
    conf = torch.zeros(classes, 3, device=device)

    def step():
        with k.ac:
            logits = run(x).float()
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if rank == 1 and not fixed:  # planted: per-class confusion counts, class by class
            pred = logits.detach().argmax(1)
            for c in range(classes):
                p, t = pred == c, y == c
                conf[c] += torch.stack([(p & t).sum(), (p & ~t).sum(), (~p & t).sum()])
        opt.step()

    k.meta["extra_host_work_rank"] = 1
    k.meta["per_class_counts"] = "none" if fixed else "class by class on rank 1"
    k.meta["classes"] = classes
    return step, batch, model


BUILDERS = {
    "v100": _nafnet,
    "v101": _timesformer,
    "v102": _ghostnet,
    "v103": _linformer,
    "v104": _segnet,
    "v105": _crnn,
    "v106": _ecapa,
    "v107": _facenet,
    "v108": _neural_ode,
    "v109": _erfnet,
    "v110": _bahdanau,
    "v111": _pspnet,
    "v112": _electra,
    "v113": _xception,
    "v114": _res2net_ddp,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""


FIRST_FIXES: dict[str, dict] = {
    "v107c": {
        "name": "v107_compile",
        "base": "v107",
        "how": "compile",
        "planted": "v107's planted variant, eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v110c": {
        "name": "v110_compile",
        "base": "v110",
        "how": "compile",
        "planted": "v110's planted variant (batch 16), eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
    },
    "v113b": {
        "name": "v113_cudnn_benchmark",
        "base": "v113",
        "how": "cudnn_benchmark",
        "planted": "v113's planted variant, cudnn.benchmark off",
        "fix": "the same, torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
}
"""The first fixes gpuscope named on this part where they were not the planted cause's (the
judgement at 227b3e5: ``kernel_fusion`` on v107 and v110, ``cudnn_benchmark`` on the null v113),
timed only (no trace), on each base case's planted variant: variant ``fixed`` applies that fix.
They settle whether the first fix gains what it says; they are not cases of the part."""


build, main = part_recorder(CASES, BUILDERS, FIRST_FIXES, 13579, __file__)
"""``build``: (step_fn, samples_per_step, meta, model) of one case or first fix and variant on this
rank; ``main``: record_new's driver over this part's cases and first fixes."""

if __name__ == "__main__":
    raise SystemExit(main())
