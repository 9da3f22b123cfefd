"""Record the validation set's fifth part, **blind** (v55-v69): planted-and-fixed pairs on models,
sizes and workloads unlike any earlier case (v01-v54, ../fixes, ../multi_gpu), recorded after
v41-v54 had been judged, and kept out of every calibration (truth.json ``group: "blind3"``).
Nobody runs gpuscope's analysis on these cases before the lead judges them once.

    python record_blind3.py drive --out DIR [--cases v55,v56] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind3.py one --case v55 --variant planted|fixed --mode time|trace --out DIR
    python record_blind3.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.main`` with this
file's cases and builder), as record_blind2.py's: per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps`` (5 untraced steps timed by CUDA events, wait
6, warmup 2, active 3), then ``--rounds`` rounds of planted and fixed timed without the profiler,
each a fresh process, alternately (planted/fixed, fixed/planted, ...); 15 warm-up steps (30 for
the compiled cases), then 40 steps in blocks of 5 synchronised at both ends; ``step_ms_median``
is the median block. v55-v68 run on one GPU; v69 on 2 GPUs (each run a fresh ``torchrun
--nproc_per_node 2`` job; ``step_ms_median`` the slower rank's), added after v55-v68 were
recorded and committed before its own device call.

The cases, their sizes and the two chosen to gain nothing (v67: bf16 autocast on a recommender
bound by its big embedding tables' dense gradients and their optimizer update; v68:
checkpointing dropped where it wraps only a cheap positional encoding) were fixed here and
committed before the first device call. The causes blind2's judgement found weak (recompute,
mixed precision) get two pairs each.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import record_new  # noqa: E402
from record_common import Kit, kit, pinned_pool, precision_loss  # noqa: E402

GROUP = "blind3"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

CASES: dict[str, dict] = {
    "v55": {
        "name": "activation_checkpointing",
        "model": "DiT-style diffusion denoiser (adaLN-Zero blocks conditioned on a timestep "
        "embedding; 12 blocks, d 512, 8 heads; 4 x 32 x 32 latents in 2x2 patches: 256 tokens), "
        "batch 64, bf16 autocast; most of the GPU's memory free",
        "planted": "torch.utils.checkpoint on each of the 12 blocks",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v56": {
        "name": "activation_checkpointing",
        "model": "speech Conformer (conv subsampling 4x of 80-mel x 800 frames to 200; 8 blocks "
        "d 256, 4 heads: macaron FFNs, self-attention, conv module with GLU, depthwise conv k31 "
        "and BatchNorm), batch 64, bf16 autocast; most of the GPU's memory free",
        "planted": "torch.utils.checkpoint on each of the 8 Conformer blocks",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v57": {
        "name": "mixed_precision",
        "model": "EDSR-style super-resolution CNN (16 residual blocks of two 3x3 convs, 64 ch, "
        "48x48 low-resolution patches, 2x pixel-shuffle upsampler, L1 loss), batch 32",
        "planted": "fp32, TF32 off (matmuls and cuDNN)",
        "fix": "bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v58": {
        "name": "mixed_precision",
        "model": "Mixture-of-Experts MLP (2 layers of 8 experts, d 768, hidden 3072, "
        "expert-choice routing: each expert picks 2048 of 8192 tokens by router score, tokens "
        "gathered by index and combined by index_add_), 16 x 512 tokens",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v59": {
        "name": "pin_memory",
        "model": "hyperspectral patch classifier (2-D CNN on 64 bands, 32x32 patches: convs "
        "64-128-128-256, BatchNorm), batch 128, bf16 autocast",
        "planted": "33.6 MB per step (fp32 patches) copied from pageable memory",
        "fix": "batches pinned, copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v60": {
        "name": "batch_size",
        "model": "bidirectional GRU frame tagger (40 features per frame, hidden 128, 100 "
        "frames, 20 tags per frame), fp32",
        "planted": "batch 16",
        "fix": "batch 128 (8 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 8,
    },
    "v61": {
        "name": "dataloader_workers",
        "model": "DGCNN-style point-cloud classifier (2 EdgeConv layers on a k-nearest-neighbour "
        "graph, k 16, of 256 points; shared MLPs 64 wide; global max-pool), batch 16; each "
        "sample rotated, scaled, jittered and cut to 256 of 2048 points by farthest-point "
        "sampling in numpy",
        "planted": "DataLoader(num_workers=0): the point sampling runs in the training process",
        "fix": "DataLoader(num_workers=6, persistent_workers=True, prefetch_factor=4)",
        "expected_fix": "dataloader_workers",
    },
    "v62": {
        "name": "host_sync",
        "model": "GIN graph network (3 layers, d 256, message passing by index_add_ over 400000 "
        "edges of a 50000-node graph held on the GPU); each step the host builds the loss's "
        "node set (1024 seed nodes and their neighbours) from the graph's CSR lists in Python",
        "planted": "loss.item() and acc.item() every step: the host waits for the GPU before it "
        "builds the next node set",
        "fix": "the metrics summed on the GPU: the next node set is built while the GPU computes",
        "expected_fix": "host_sync",
    },
    "v63": {
        "name": "optimizer_fused",
        "model": "multi-task tabular net (shared trunk 2 x Linear 512, 80 task towers of "
        "Linear 512-64-1: 324 parameter tensors), batch 512, fp32",
        "planted": "Adam(weight_decay=1e-5, foreach=False): a Python loop of small kernels per "
        "parameter",
        "fix": "Adam(weight_decay=1e-5, fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v64": {
        "name": "kernel_fusion",
        "model": "BigVGAN-style 1-D conv blocks (6 residual blocks of dilated Conv1d k7, 128 ch, "
        "hand-written Snake activations x + sin(a x)^2 / a with a learned a per channel) on "
        "8192-sample frames, batch 16, bf16 autocast",
        "planted": "eager (many small elementwise kernels)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v65": {
        "name": "cudnn_benchmark",
        "model": "DCGAN-style generator (ConvTranspose2d 128-512-256-128-64-3, 4x4, to 64x64, "
        "BatchNorm, ReLU, tanh; MSE to target images), batch 128, fp32 (cuDNN TF32)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v66": {
        "name": "cuda_graphs",
        "model": "actor-critic MLP for reinforcement learning (observations 64, 3 x Linear 256, "
        "tanh; 8 action logits and a value; policy-gradient, value and entropy losses), batch "
        "256, torch.compile (default mode)",
        "planted": "compiled without CUDA graphs: the step is bound by launches",
        "fix": "torch.compile(model, mode='reduce-overhead')",
        "expected_fix": "cuda_graphs",
        "compiled": True,
    },
    "v67": {
        "name": "null_mixed_precision",
        "model": "recommender with big embeddings (4 EmbeddingBag tables 500000 x 64, sum of 32 "
        "ids per bag, dense gradients; MLP 256-128-1), batch 2048, fp32, TF32 off, fused AdamW: "
        "the step is bound by the tables' gradients and their update",
        "planted": "fp32",
        "fix": "bf16 autocast (gains ~0: the matmuls are a small part of the step)",
        "expected_fix": "mixed_precision",
        "null": True,
    },
    "v68": {
        "name": "null_activation_checkpointing",
        "model": "NeRF-style coordinate MLP (positional encoding of 3-D points, 10 frequencies "
        "with a learned scale; "
        "8 x Linear 256, ReLU, a skip at layer 4), 65536 points per batch, bf16 autocast",
        "planted": "torch.utils.checkpoint on the positional encoding only (a cheap recompute)",
        "fix": "checkpointing dropped (gains ~0: the recompute is a few elementwise kernels)",
        "expected_fix": "activation_checkpointing",
        "null": True,
    },
    "v69": {
        "name": "overlap_communication",
        "model": "ResMLP (196 patch tokens of 16 x 16 x 3, d 1024, 12 layers of cross-patch "
        "Linear 196 and MLP 4x, LayerNorm: 103 M parameters) under DDP on 2 GPUs, batch 32 per "
        "rank, bf16 autocast",
        "planted": "DDP(bucket_cap_mb=4096): one bucket, all-reduced after backward ends",
        "fix": "DDP(bucket_cap_mb=50, gradient_as_bucket_view=True, static_graph=True)",
        "expected_fix": "overlap_communication",
        "gpus": 2,
    },
}
ORDER = list(CASES)


def _dit(k: Kit, fixed: bool, device: str):
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    hw, d, heads, blocks, batch = (8, 32, 4, 2, 2) if k.quick else (32, 512, 8, 12, 64)
    p, ch = 2, 4
    tokens = (hw // p) ** 2

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1 = nn.LayerNorm(d, elementwise_affine=False)
            self.n2 = nn.LayerNorm(d, elementwise_affine=False)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.ada = nn.Linear(d, 6 * d)
            nn.init.zeros_(self.ada.weight)

        def forward(self, x, c):
            s1, g1, a1, s2, g2, a2 = self.ada(F.silu(c))[:, None].chunk(6, -1)
            h = self.n1(x) * (1 + g1) + s1
            b, t, _ = h.shape
            q, kk, v = self.qkv(h).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v).transpose(1, 2).reshape(b, t, d)
            x = x + a1 * self.o(a)
            h = self.n2(x) * (1 + g2) + s2
            return x + a2 * self.fc2(F.gelu(self.fc1(h), approximate="tanh"))

    class DiT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(ch * p * p, d)
            self.pos = nn.Parameter(torch.randn(1, tokens, d) * 0.02)
            self.temb = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))
            self.blocks = nn.ModuleList([Block() for _ in range(blocks)])
            self.norm = nn.LayerNorm(d)
            self.out = nn.Linear(d, ch * p * p)

        def forward(self, z, t):
            b = z.shape[0]
            x = z.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(b, tokens, -1)
            x = self.embed(x) + self.pos
            f = torch.exp(-torch.arange(128, device=z.device) * (9.21 / 128))
            c = self.temb(torch.cat([(t[:, None] * f).sin(), (t[:, None] * f).cos()], 1))
            for blk in self.blocks:
                x = blk(x, c) if fixed else checkpoint(blk, x, c, use_reentrant=False)
            return self.out(self.norm(x))

    model = DiT().to(device)
    opt = k.adamw(model, fused=k.cuda)
    z = torch.randn(batch, ch, hw, hw, device=device)
    t = torch.rand(batch, device=device) * 1000
    noise = torch.randn(batch, tokens, ch * p * p, device=device)

    def loss_fn():
        with k.ac:
            return F.mse_loss(model(z, t).float(), noise)

    k.meta["checkpointed_blocks"] = 0 if fixed else blocks
    return k.train(opt, loss_fn), batch, model


def _conformer(k: Kit, fixed: bool, device: str):
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    frames, mels, d, heads, blocks, batch = (
        (64, 16, 32, 4, 2, 2) if k.quick else (800, 80, 256, 4, 8, 64)
    )

    def ffn():
        return nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))

    class ConvModule(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.pw1 = nn.Conv1d(d, 2 * d, 1)
            self.dw = nn.Conv1d(d, d, 31, padding=15, groups=d)
            self.bn = nn.BatchNorm1d(d)
            self.pw2 = nn.Conv1d(d, d, 1)

        def forward(self, x):
            h = F.glu(self.pw1(self.ln(x).transpose(1, 2)), dim=1)
            return self.pw2(F.silu(self.bn(self.dw(h)))).transpose(1, 2)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ff1, self.ff2 = ffn(), ffn()
            self.ln_att = nn.LayerNorm(d)
            self.att = nn.MultiheadAttention(d, heads, batch_first=True)
            self.conv = ConvModule()
            self.ln = nn.LayerNorm(d)

        def forward(self, x):
            x = x + 0.5 * self.ff1(x)
            h = self.ln_att(x)
            x = x + self.att(h, h, h, need_weights=False)[0]
            x = x + self.conv(x)
            return self.ln(x + 0.5 * self.ff2(x))

    class Conformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sub = nn.Sequential(
                nn.Conv2d(1, d, 3, 2, 1), nn.ReLU(), nn.Conv2d(d, d, 3, 2, 1), nn.ReLU()
            )
            self.proj = nn.Linear(d * (mels // 4), d)
            self.blocks = nn.ModuleList([Block() for _ in range(blocks)])
            self.head = nn.Linear(d, 500)

        def forward(self, x):
            h = self.sub(x)  # b, d, frames/4, mels/4
            h = self.proj(h.permute(0, 2, 1, 3).flatten(2))
            for blk in self.blocks:
                h = blk(h) if fixed else checkpoint(blk, h, use_reentrant=False)
            return self.head(h)

    model = Conformer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 1, frames, mels, device=device)
    y = torch.randint(0, 500, (batch, frames // 4), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())

    k.meta["checkpointed_blocks"] = 0 if fixed else blocks
    return k.train(opt, loss_fn), batch, model


def _edsr(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    if not fixed:
        torch.backends.cudnn.allow_tf32 = False
    ch, nblocks, hw, batch = (8, 2, 12, 2) if k.quick else (64, 16, 48, 32)

    class Res(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(ch, ch, 3, padding=1)
            self.c2 = nn.Conv2d(ch, ch, 3, padding=1)

        def forward(self, x):
            return x + 0.1 * self.c2(F.relu(self.c1(x)))

    class EDSR(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Conv2d(3, ch, 3, padding=1)
            self.body = nn.Sequential(*[Res() for _ in range(nblocks)], nn.Conv2d(ch, ch, 3, 1, 1))
            self.up = nn.Sequential(nn.Conv2d(ch, 4 * ch, 3, padding=1), nn.PixelShuffle(2))
            self.tail = nn.Conv2d(ch, 3, 3, padding=1)

        def forward(self, x):
            h = self.head(x)
            return self.tail(self.up(h + self.body(h)))

    model = EDSR().to(device)
    opt = k.adamw(model, fused=k.cuda)
    lr = torch.rand(batch, 3, hw, hw, device=device)
    hr = torch.rand(batch, 3, 2 * hw, 2 * hw, device=device)

    loss_fn = precision_loss(k, fixed, model, F.l1_loss, lr, hr)

    k.meta["precision"] = "bf16 autocast" if fixed else "fp32, TF32 off"
    return k.train(opt, loss_fn), batch, model


def _moe(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    d, hid, experts, layers, batch, seq = (
        (32, 64, 4, 2, 2, 16) if k.quick else (768, 3072, 8, 2, 16, 512)
    )
    tokens = batch * seq
    cap = tokens * 2 // experts

    class MoE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.router = nn.Linear(d, experts, bias=False)
            self.up = nn.ModuleList([nn.Linear(d, hid) for _ in range(experts)])
            self.down = nn.ModuleList([nn.Linear(hid, d) for _ in range(experts)])

        def forward(self, x):
            h = self.ln(x)
            score = self.router(h).float().softmax(-1)  # tokens x experts
            out = torch.zeros_like(x)
            for e in range(experts):
                g, idx = score[:, e].topk(cap)
                y = self.down[e](F.gelu(self.up[e](h[idx]))) * g[:, None]
                out.index_add_(0, idx, y.to(out.dtype))
            return x + out

    model = nn.Sequential(*[MoE() for _ in range(layers)], nn.LayerNorm(d)).to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(tokens, d, device=device)
    target = torch.randn(tokens, d, device=device)

    loss_fn = precision_loss(k, fixed, model, F.mse_loss, x, target)

    k.meta["precision"] = "bf16 autocast" if fixed else "fp32, TF32 off"
    k.meta["tokens_per_expert"] = cap
    return k.train(opt, loss_fn), tokens, model


def _hyperspectral(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    bands, hw, batch = (8, 16, 2) if k.quick else (64, 32, 128)

    def cbr(ci: int, co: int):
        return [nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU()]

    model = nn.Sequential(
        *cbr(bands, 128),
        *cbr(128, 128),
        nn.MaxPool2d(2),
        *cbr(128, 256),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 16),
    ).to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(53)
    pool = [
        (
            torch.randn(batch, bands, hw, hw, generator=gen),
            torch.randint(0, 16, (batch,), generator=gen),
        )
        for _ in range(3)
    ]
    if fixed and k.cuda:
        pool = pinned_pool(pool)
    n = 0

    def loss_fn():
        nonlocal n
        a, b = pool[n % len(pool)]
        n += 1
        x, y = a.to(device, non_blocking=fixed), b.to(device, non_blocking=fixed)
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["bytes_per_step"] = batch * bands * hw * hw * 4 + batch * 8
    k.meta["pinned"] = fixed
    return k.train(opt, loss_fn), batch, model


def _bigru(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    feats, hidden, frames, tags, batch = (8, 16, 20, 5, 2) if k.quick else (40, 128, 100, 20, 16)
    batch *= 8 if fixed else 1

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(feats, hidden, batch_first=True, bidirectional=True)
            self.out = nn.Linear(2 * hidden, tags)

        def forward(self, x):
            return self.out(self.gru(x)[0])

    model = Tagger().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, frames, feats, device=device)
    y = torch.randint(0, tags, (batch, frames), device=device)
    k.meta["batch_multiple"] = 8
    loss_fn = lambda: F.cross_entropy(model(x).flatten(0, 1), y.flatten())  # noqa: E731
    return k.train(opt, loss_fn), batch, model


class PointClouds:
    """v61's dataset: 64 stored clouds of ``points`` (numpy float32), ``1_000_000`` virtual
    samples; per sample in numpy: a random rotation about z, anisotropic scaling, jitter, then
    ``keep`` points by farthest-point sampling (a Python loop of ``keep`` steps). Returns
    (keep x 3 float32 tensor, label)."""

    def __init__(self, points: int, keep: int) -> None:
        import numpy as np

        rng = np.random.default_rng(41)
        self.clouds = rng.standard_normal((64, points, 3)).astype(np.float32)
        self.labels = rng.integers(0, 40, 64)
        self.keep = keep

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        j = i % len(self.clouds)
        a = rng.uniform(0, 2 * np.pi)
        rot = np.array(
            [[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]], np.float32
        )
        p = self.clouds[j] @ rot.T * rng.uniform(0.8, 1.2, 3).astype(np.float32)
        p = p + rng.normal(0, 0.01, p.shape).astype(np.float32)
        chosen = np.empty(self.keep, dtype=np.int64)
        dist = np.full(len(p), np.inf, dtype=np.float32)
        chosen[0] = int(rng.integers(0, len(p)))
        for s in range(1, self.keep):  # farthest-point sampling
            dist = np.minimum(dist, ((p - p[chosen[s - 1]]) ** 2).sum(1))
            chosen[s] = int(dist.argmax())
        return torch.from_numpy(p[chosen]), int(self.labels[j])


def _dgcnn(k: Kit, fixed: bool, device: str):
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    points, keep, nb, batch, workers = (128, 32, 4, 2, 2) if k.quick else (2048, 256, 16, 16, 6)

    def edge(x, conv):  # x: b, n, c -> b, n, c'
        idx = torch.cdist(x, x).topk(nb, largest=False).indices  # b, n, k
        nbr = torch.gather(
            x[:, None].expand(-1, x.shape[1], -1, -1),
            2,
            idx[..., None].expand(-1, -1, -1, x.shape[2]),
        )
        e = torch.cat([x[:, :, None].expand_as(nbr), nbr - x[:, :, None]], -1)
        return conv(e).amax(2)

    class DGCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.e1 = nn.Sequential(nn.Linear(6, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU())
            self.e2 = nn.Sequential(nn.Linear(128, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU())
            self.head = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 40))

        def forward(self, p):
            h1 = edge(p, self.e1)
            h2 = edge(h1, self.e2)
            return self.head(torch.cat([h1, h2], -1).amax(1))

    model = DGCNN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True, "prefetch_factor": 4}
    loader = DataLoader(
        PointClouds(points, keep),
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        **(kw if fixed else {}),
    )
    it = iter(loader)

    def loss_fn():
        p, y = next(it)
        p, y = p.to(device), y.to(device)
        return F.cross_entropy(model(p), y)

    k.meta["num_workers"] = workers if fixed else 0
    return k.train(opt, loss_fn), batch, model


def _gin(k: Kit, fixed: bool, device: str):
    import numpy as np

    torch, nn, F = k.torch, k.nn, k.F
    nodes, edges, d, layers, seeds, classes = (
        (500, 4000, 16, 2, 32, 4) if k.quick else (50_000, 400_000, 256, 3, 1024, 16)
    )
    rng = np.random.default_rng(59)
    src = rng.integers(0, nodes, edges)
    dst = rng.integers(0, nodes, edges)
    order = np.argsort(src, kind="stable")
    indptr = np.searchsorted(src[order], np.arange(nodes + 1))
    nbrs = dst[order]
    ei = torch.from_numpy(np.stack([src, dst])).to(device)
    feats = torch.randn(nodes, d, device=device)
    labels = torch.randint(0, classes, (nodes,), device=device)

    class GIN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.eps = nn.Parameter(torch.zeros(layers))
            self.mlps = nn.ModuleList(
                [
                    nn.Sequential(nn.Linear(d, d), nn.BatchNorm1d(d), nn.ReLU(), nn.Linear(d, d))
                    for _ in range(layers)
                ]
            )
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            for i, mlp in enumerate(self.mlps):
                agg = torch.zeros_like(x).index_add_(0, ei[1], x[ei[0]])
                x = F.relu(mlp((1 + self.eps[i]) * x + agg))
            return self.head(x)

    model = GIN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    tot = torch.zeros(2, device=device)
    seen: list[float] = []

    def node_set():
        """1024 seed nodes and their out-neighbours, from the CSR lists, in Python."""
        s = rng.choice(nodes, seeds, replace=False)
        parts = [s] + [nbrs[indptr[v] : indptr[v + 1]] for v in s]
        return np.unique(np.concatenate(parts))

    def step():
        ids = torch.from_numpy(node_set())
        if k.cuda:
            ids = ids.pin_memory()
        ids = ids.to(device, non_blocking=True)
        logits = model(feats)[ids]
        loss = F.cross_entropy(logits, labels[ids])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc = (logits.argmax(1) == labels[ids]).float().mean()
        if fixed:
            tot.add_(torch.stack([loss.detach(), acc]))
        else:  # planted: 2 host syncs per step
            seen.extend([loss.item(), acc.item()])

    k.meta["syncs_per_step"] = 0 if fixed else 2
    return step, seeds, model


def _towers(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    d, tasks, batch = (32, 6, 8) if k.quick else (512, 80, 512)

    class MultiTask(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trunk = nn.Sequential(nn.Linear(64, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
            self.towers = nn.ModuleList(
                [nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 1)) for _ in range(tasks)]
            )

        def forward(self, x):
            h = self.trunk(x)
            return torch.cat([t(h) for t in self.towers], 1)

    model = MultiTask().to(device)
    kw = {"fused": True} if fixed and k.cuda else {"foreach": fixed}
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=1e-5, **kw)
    x = torch.randn(batch, 64, device=device)
    y = torch.randint(0, 2, (batch, tasks), device=device).float()
    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "Adam(fused=True)" if fixed else "Adam(foreach=False)"
    loss_fn = lambda: F.binary_cross_entropy_with_logits(model(x), y)  # noqa: E731
    return k.train(opt, loss_fn), batch, model


def _snake(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    ch, nblocks, length, batch = (8, 2, 256, 2) if k.quick else (128, 6, 8192, 16)

    class Snake(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.alpha = nn.Parameter(torch.ones(1, ch, 1))

        def forward(self, x):
            return x + torch.sin(self.alpha * x).pow(2) / (self.alpha + 1e-9)

    class ResBlock(nn.Module):
        def __init__(self, dil: int) -> None:
            super().__init__()
            self.a1, self.a2 = Snake(), Snake()
            self.c1 = nn.Conv1d(ch, ch, 7, dilation=dil, padding=3 * dil)
            self.c2 = nn.Conv1d(ch, ch, 7, padding=3)

        def forward(self, x):
            return x + self.c2(self.a2(self.c1(self.a1(x))))

    class Gen(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Conv1d(1, ch, 7, padding=3)
            self.blocks = nn.Sequential(*[ResBlock((1, 3, 5)[i % 3]) for i in range(nblocks)])
            self.act = Snake()
            self.out = nn.Conv1d(ch, 1, 7, padding=3)

        def forward(self, x):
            return torch.tanh(self.out(self.act(self.blocks(self.inp(x)))))

    model = Gen().to(device)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model) if fixed else model
    x = torch.randn(batch, 1, length, device=device)
    target = torch.randn(batch, 1, length, device=device).tanh()

    def loss_fn():
        with k.ac:
            return F.l1_loss(run(x).float(), target)

    k.meta["compiled"] = fixed
    return k.train(opt, loss_fn), batch, model


def _dcgan(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cudnn.benchmark = fixed
    z_dim, w, batch = (16, 8, 2) if k.quick else (128, 64, 128)

    def up(ci: int, co: int, first: bool = False):
        conv = (
            nn.ConvTranspose2d(ci, co, 4, 1, 0, bias=False)
            if first
            else nn.ConvTranspose2d(ci, co, 4, 2, 1, bias=False)
        )
        return [conv, nn.BatchNorm2d(co), nn.ReLU()]

    model = nn.Sequential(
        *up(z_dim, 8 * w, first=True),
        *up(8 * w, 4 * w),
        *up(4 * w, 2 * w),
        *up(2 * w, w),
        nn.ConvTranspose2d(w, 3, 4, 2, 1, bias=False),
        nn.Tanh(),
    ).to(device)
    opt = k.adamw(model, fused=k.cuda)
    z = torch.randn(batch, z_dim, 1, 1, device=device)
    target = torch.rand(batch, 3, 64, 64, device=device) * 2 - 1
    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    return k.train(opt, lambda: F.mse_loss(model(z), target)), batch, model


def _actor_critic(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    obs, hid, acts, batch = (8, 16, 4, 4) if k.quick else (64, 256, 8, 256)

    class AC(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Linear(obs, hid), nn.Tanh(), nn.Linear(hid, hid), nn.Tanh(),
                nn.Linear(hid, hid), nn.Tanh(),
            )  # fmt: skip
            self.pi, self.v = nn.Linear(hid, acts), nn.Linear(hid, 1)

        def forward(self, o, a, adv, ret):
            h = self.body(o)
            logp = F.log_softmax(self.pi(h), -1)
            ent = -(logp.exp() * logp).sum(-1).mean()
            pg = -(logp.gather(1, a[:, None]).squeeze(1) * adv).mean()
            return pg + 0.5 * F.mse_loss(self.v(h).squeeze(1), ret) - 0.01 * ent

    model = AC().to(device)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model, mode="reduce-overhead" if fixed and k.cuda else None)
    o = torch.randn(batch, obs, device=device)
    a = torch.randint(0, acts, (batch,), device=device)
    adv, ret = torch.randn(batch, device=device), torch.randn(batch, device=device)
    k.meta["compile_mode"] = "reduce-overhead" if fixed else "default"
    return k.train(opt, lambda: run(o, a, adv, ret)), batch, model


def _recsys(k: Kit, fixed: bool, device: str):
    torch, nn, F = k.torch, k.nn, k.F
    rows, e, tables, bag, batch = (1000, 8, 4, 4, 8) if k.quick else (500_000, 64, 4, 32, 2048)

    class Rec(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.ModuleList([nn.EmbeddingBag(rows, e, mode="sum") for _ in range(tables)])
            self.mlp = nn.Sequential(nn.Linear(tables * e, 128), nn.ReLU(), nn.Linear(128, 1))

        def forward(self, ids):
            return self.mlp(torch.cat([t(ids[i]) for i, t in enumerate(self.emb)], 1)).squeeze(1)

    model = Rec().to(device)
    opt = k.adamw(model, fused=k.cuda)
    ids = torch.randint(0, rows, (tables, batch, bag), device=device)
    y = torch.randint(0, 2, (batch,), device=device).float()

    loss_fn = precision_loss(k, fixed, model, F.binary_cross_entropy_with_logits, ids, y)

    k.meta["precision"] = "bf16 autocast" if fixed else "fp32, TF32 off"
    k.meta["params"] = sum(p.numel() for p in model.parameters())
    return k.train(opt, loss_fn), batch, model


def _nerf(k: Kit, fixed: bool, device: str):
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    freqs, w, layers, batch = (4, 32, 4, 64) if k.quick else (10, 256, 8, 65536)
    width_in = 3 + 6 * freqs
    skip = layers // 2

    def encode(x, scale):
        f = 2.0 ** torch.arange(freqs, device=x.device) * torch.pi * scale
        xf = (x[..., None] * f).flatten(1)
        return torch.cat([x, xf.sin(), xf.cos()], 1)

    class NeRF(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fcs = nn.ModuleList(
                [
                    nn.Linear(width_in if i == 0 else w + (width_in if i == skip else 0), w)
                    for i in range(layers)
                ]
            )
            self.out = nn.Linear(w, 4)
            self.scale = nn.Parameter(torch.ones(freqs))  # learned: the encoding is recomputed

        def forward(self, x):
            if fixed:
                pe = encode(x, self.scale)
            else:
                pe = checkpoint(encode, x, self.scale, use_reentrant=False)
            h = pe
            for i, fc in enumerate(self.fcs):
                h = F.relu(fc(torch.cat([h, pe], 1) if i == skip else h))
            return self.out(h)

    model = NeRF().to(device)
    opt = k.adamw(model, fused=k.cuda)
    pts = torch.rand(batch, 3, device=device) * 2 - 1
    rgba = torch.rand(batch, 4, device=device)

    def loss_fn():
        with k.ac:
            return F.mse_loss(model(pts).float(), rgba)

    k.meta["checkpointed"] = "nothing" if fixed else "the positional encoding"
    return k.train(opt, loss_fn), batch, model


def _resmlp_ddp(k: Kit, fixed: bool, device: str):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    tokens, d, layers, batch = (16, 32, 2, 2) if k.quick else (196, 1024, 12, 32)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.cross = nn.Linear(tokens, tokens)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + self.cross(self.n1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.fc2(F.gelu(self.fc1(self.n2(x))))

    class ResMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(768, d)
            self.layers = nn.Sequential(*[Layer() for _ in range(layers)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 1000)

        def forward(self, p):
            return self.head(self.norm(self.layers(self.embed(p))).mean(1))

    model = ResMLP().to(device)
    if fixed:
        kw = {"bucket_cap_mb": 50, "gradient_as_bucket_view": True, "static_graph": True}
    else:
        kw = {"bucket_cap_mb": 4096}
    ids = [torch.device(device).index] if k.cuda else None
    run = DDP(model, device_ids=ids, **kw)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, tokens, 768, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(run(x).float(), y)

    k.meta["ddp"] = kw
    k.meta["params"] = sum(p.numel() for p in model.parameters())
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v55": _dit,
    "v56": _conformer,
    "v57": _edsr,
    "v58": _moe,
    "v59": _hyperspectral,
    "v60": _bigru,
    "v61": _dgcnn,
    "v62": _gin,
    "v63": _towers,
    "v64": _snake,
    "v65": _dcgan,
    "v66": _actor_critic,
    "v67": _recsys,
    "v68": _nerf,
    "v69": _resmlp_ddp,
}
"""Each case's builder: (kit, fixed, device) -> (step_fn, samples_per_step, model)."""


def build(case: str, variant: str, device: str, rank: int = 0, world: int = 1):
    """(step_fn, samples_per_step, meta, model) of one case and variant on this rank."""
    if case not in BUILDERS:
        raise SystemExit(f"unknown case {case}")
    k = kit(device, seed=86420, quick=record_new.QUICK)
    step, samples, model = BUILDERS[case](k, variant == "fixed", device)
    return step, samples, k.meta, model


def main() -> int:
    return record_new.main(cases=CASES, build_fn=build, script=__file__)


if __name__ == "__main__":
    raise SystemExit(main())
