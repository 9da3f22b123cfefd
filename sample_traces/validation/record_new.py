"""Record the validation set's second part (v16-v28): planted-and-fixed pairs for the fix units that
had no timed pair (cuda_graphs, compiled_overhead, dtensor_dispatch, overlap_communication,
load_imbalance) and fresh models for the older ones, one or two GPUs.

    python record_new.py drive --out DIR [--cases v16,v17] [--rounds 3] [--budget-s 520] [--tar T]
    python record_new.py one --case v16 --variant planted|fixed --mode time|trace --out DIR
    torchrun --standalone --nproc_per_node 2 record_new.py one --case v25 ...   (2-GPU cases)

``drive`` starts every run as a fresh process (``torchrun --nproc_per_node 2`` for the cases with
``gpus: 2``): first the profiled trace of the planted variant, then ``--rounds`` rounds of planted
and fixed timed without the profiler, alternately (planted/fixed, fixed/planted, ...). Timing: warm-up
steps, then blocks of 5 steps synchronised at both ends; ``step_ms_median`` is the median block (of
the slower rank on 2 GPUs). ``--quick --cpu`` shrinks every model to check the recipe on a CPU
(gloo for the 2-GPU cases).

**Held out**: every case at an even position of :data:`ORDER` (v16, v18, ..., v28: 7 of 13),
fixed here before any gpuscope estimate of these cases was looked at (group ``"new"``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fixes"))

from record_common import kit  # noqa: E402

QUICK = False
BATCH_MULT = 1
"""v18's batch × this (time_cuda_graphs_gate.py's ``batch<k>`` ways: gpuscope's ``batch_size``
fix, timed per sample); every other case ignores it."""

CASES: dict[str, dict] = {
    "v16": {
        "name": "cuda_graphs",
        "model": "residual MLP blocks (8 x LayerNorm + Linear 256-1024-256), 32 x 64 tokens, "
        "torch.compile (default mode)",
        "planted": "compiled without CUDA graphs: the step is bound by launches",
        "fix": "torch.compile(model, mode='reduce-overhead')",
        "expected_fix": "cuda_graphs",
    },
    "v17": {
        "name": "compiled_overhead",
        "model": "small CNN (4 convs 32-64 ch, 32x32, GELU, no norm), "
        'torch.compile(mode="reduce-overhead"), batch 32',
        "planted": "batch 32: the CUDA-graph step is still bound by its per-step host work",
        "fix": "batch 64 (2 x B, per-sample time)",
        "expected_fix": "compiled_overhead",
        "bound": "per_sample_time",
        "batch_multiple": 2,
    },
    "v18": {
        "name": "host_sync",
        "model": "MLP (6 x Linear 1024 + GELU), batch 256, fp32",
        "planted": "each layer's activation norm, the loss and the grad norm read with .item() "
        "every step (8 syncs)",
        "fix": "the statistics kept on the GPU (stacked and summed)",
        "expected_fix": "host_sync",
    },
    "v19": {
        "name": "optimizer_fused",
        "model": "ResNet-style CNN (16 basic blocks, 64 ch, BatchNorm, 16x16), batch 32",
        "planted": "Adam(foreach=False): a Python loop of small kernels per parameter "
        "(99 parameter tensors)",
        "fix": "Adam(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v20": {
        "name": "activation_checkpointing",
        "model": "Transformer encoder (nn.TransformerEncoderLayer x 8, d 768, seq 512), batch 16, "
        "bf16 autocast; most of the GPU's memory free",
        "planted": "torch.utils.checkpoint on every layer",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v21": {
        "name": "mixed_precision",
        "model": "MLP autoencoder (6 x Linear 4096, GELU), batch 1024",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v22": {
        "name": "kernel_fusion",
        "model": "8 blocks of hand-written LayerNorm, tanh-GELU MLP (d 512-1024) and a rotary-style "
        "elementwise mix, 32 x 128 tokens",
        "planted": "eager (many small elementwise kernels)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
    },
    "v23": {
        "name": "batch_size",
        "model": "LeNet-style CNN on 28x28 single-channel images",
        "planted": "batch 16",
        "fix": "batch 64 (4 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 4,
    },
    "v24": {
        "name": "null_batch_size",
        "model": "ResNet-style CNN (8 basic blocks 128 ch, 64x64), batch 128, bf16 autocast, "
        "channels_last (GPU-bound)",
        "planted": "batch 128",
        "fix": "batch 512 (4 x B, per-sample time; gains ~0: the GPU is full already)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 4,
        "null": True,
    },
    "v25": {
        "name": "overlap_communication",
        "model": "MLP (8 x Linear 4096, 134 M params) under DDP on 2 GPUs, 2048 rows per rank, "
        "bf16 autocast",
        "planted": "DDP(bucket_cap_mb=4096): one bucket, all-reduced after backward ends",
        "fix": "DDP(bucket_cap_mb=50, gradient_as_bucket_view=True, static_graph=True)",
        "expected_fix": "overlap_communication",
        "gpus": 2,
    },
    "v26": {
        "name": "load_imbalance",
        "model": "ResNet-style CNN (8 basic blocks 96 ch, 48x48) under DDP on 2 GPUs, bf16 autocast",
        "planted": "rank 0 batch 32, rank 1 batch 64 (2x)",
        "fix": "both ranks batch 48 (the same 96 samples per step, split evenly)",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
    "v27": {
        "name": "dtensor_dispatch",
        "model": "GPT-style LM (4 layers, d 512, seq 128), batch 4, tensor parallel on 2 GPUs "
        "(parallelize_module: q,k,v,fc1 column-wise, o,fc2 row-wise)",
        "planted": "eager: DTensor's Python dispatch per op (small matmuls)",
        "fix": "torch.compile(model) after parallelize_module",
        "expected_fix": "dtensor_dispatch",
        "gpus": 2,
    },
    "v28": {
        "name": "null_overlap_communication",
        "model": "GPT-style LM (6 layers, d 1024, seq 512, vocab 8192) under DDP on 2 GPUs, batch 8 "
        "per rank, bf16 autocast (compute-bound)",
        "planted": "DDP's defaults (bucket_cap_mb=25)",
        "fix": "DDP(bucket_cap_mb=50, gradient_as_bucket_view=True, static_graph=True) "
        "(gains ~0: the default buckets overlap already)",
        "expected_fix": "overlap_communication",
        "gpus": 2,
        "null": True,
    },
}
ORDER = list(CASES)
HELD_OUT = {c for i, c in enumerate(ORDER) if i % 2 == 0}
"""The new held-out group: every case at an even position of ORDER (v16, v18, ..., v28), fixed
before any estimate of these cases was seen."""
HELD_OUT_GROUP = "new"


def log(msg: str) -> None:
    print(msg, flush=True)


def gpt(torch, nn, F, vocab: int, d: int, layers: int, heads: int, seq: int):
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.o = nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.ln1(x)
            q, k, v = (
                m(h).view(b, t, -1, d // heads).transpose(1, 2) for m in (self.q, self.k, self.v)
            )
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return LM()


def resnet(nn, ch: int, blocks: int, classes: int = 10):
    class Basic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch)
            self.c2, self.b2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch)

        def forward(self, x):
            return (x + self.b2(self.c2(self.b1(self.c1(x)).relu()))).relu()

    return nn.Sequential(
        nn.Conv2d(3, ch, 3, padding=1, bias=False),
        nn.BatchNorm2d(ch),
        nn.ReLU(),
        *[Basic() for _ in range(blocks)],
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(ch, classes),
    )


def build(case: str, variant: str, device: str, rank: int = 0, world: int = 1):
    """(step_fn, samples_per_step, meta, model) of one case and variant on this rank."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    fixed = variant == "fixed"
    q = QUICK
    k = kit(device, seed=4321, quick=QUICK)
    cuda, dt, ac = k.cuda, k.dt, k.ac
    meta: dict = {}

    def train(model, opt, loss_fn):
        def step():
            loss = loss_fn()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step

    def adamw(model, **kw):
        return torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)

    if case == "v16":
        d, blocks, b, t = (32, 2, 4, 8) if q else (256, 8, 32, 64)

        class MB(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ln, self.fc1, self.fc2 = (
                    nn.LayerNorm(d),
                    nn.Linear(d, 4 * d),
                    nn.Linear(4 * d, d),
                )

            def forward(self, x):
                return x + self.fc2(F.gelu(self.fc1(self.ln(x))))

        model = nn.Sequential(*[MB() for _ in range(blocks)]).to(device)
        opt = adamw(model, fused=cuda)
        run = torch.compile(model, mode="reduce-overhead" if fixed else None)
        x = torch.randn(b, t, d, device=device)
        meta["compile_mode"] = "reduce-overhead" if fixed else "default"
        return train(model, opt, lambda: run(x).pow(2).mean()), b, meta, model

    if case == "v17":
        batch = (4 if q else 32) * (2 if fixed else 1)
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.GELU(),
            nn.Conv2d(32, 64, 3, padding=1, stride=2),
            nn.GELU(),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.GELU(),
            nn.Conv2d(64, 64, 3, padding=1, stride=2),
            nn.GELU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        ).to(device)
        opt = adamw(model, fused=cuda)
        run = torch.compile(model, mode="reduce-overhead" if cuda else None)
        hw = 16 if q else 32
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        meta["batch_multiple"] = 2
        meta["compile_mode"] = "reduce-overhead"
        return train(model, opt, lambda: F.cross_entropy(run(x), y)), batch, meta, model

    if case == "v18":
        d, n, batch = (64, 3, 16) if q else (1024, 6, 256)
        batch *= BATCH_MULT
        layers = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])
        head = nn.Linear(d, 10)
        model = nn.ModuleList([layers, head]).to(device)
        opt = adamw(model)
        x = torch.randn(batch, d, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        tot = torch.zeros(n + 2, device=device)
        seen: list[float] = []

        def step():
            h, norms = x, []
            for lin in layers:
                h = F.gelu(lin(h))
                norms.append(h.detach().norm() if fixed else h.norm().item())
            loss = F.cross_entropy(head(h), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if fixed:
                tot.add_(torch.stack([*norms, loss.detach(), gn]))
            else:  # planted: n + 2 host syncs per step
                seen.extend([*norms, loss.item(), gn.item()])

        meta["syncs_per_step"] = 0 if fixed else n + 2
        return step, batch, meta, model

    if case == "v19":
        ch, blocks, hw, batch = (8, 2, 8, 4) if q else (64, 16, 16, 32)
        model = resnet(nn, ch, blocks).to(device)
        opt = (
            torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
            if fixed and cuda
            else torch.optim.Adam(model.parameters(), lr=1e-4, foreach=fixed)
        )
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        meta["param_tensors"] = len(list(model.parameters()))
        meta["optimizer"] = "Adam(fused=True)" if fixed else "Adam(foreach=False)"
        return train(model, opt, lambda: F.cross_entropy(model(x), y)), batch, meta, model

    if case == "v20":
        from torch.utils.checkpoint import checkpoint

        d, layers, heads, seq, batch = (64, 2, 4, 32, 4) if q else (768, 8, 12, 512, 16)
        blocks = nn.ModuleList(
            [
                nn.TransformerEncoderLayer(
                    d,
                    heads,
                    4 * d,
                    dropout=0.0,
                    batch_first=True,
                    norm_first=True,
                    activation="gelu",
                )
                for _ in range(layers)
            ]
        )
        head = nn.Linear(d, 100)
        model = nn.ModuleList([blocks, head]).to(device)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, seq, d, device=device)
        y = torch.randint(0, 100, (batch,), device=device)

        def loss_fn():
            h = x
            with ac:
                for blk in blocks:
                    h = blk(h) if fixed else checkpoint(blk, h, use_reentrant=False)
                return F.cross_entropy(head(h.mean(dim=1)).float(), y)

        meta["checkpointed_layers"] = 0 if fixed else layers
        return train(model, opt, loss_fn), batch, meta, model

    if case == "v21":
        d, n, batch = (64, 3, 32) if q else (4096, 6, 1024)
        mods: list = []
        for _ in range(n):
            mods += [nn.Linear(d, d), nn.GELU()]
        model = nn.Sequential(*mods[:-1]).to(device)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, d, device=device)

        def loss_fn():
            with torch.autocast(dt, dtype=torch.bfloat16, enabled=fixed):
                return F.mse_loss(model(x).float(), x)

        meta["autocast"] = "bf16" if fixed else "off (fp32, TF32 off)"
        return train(model, opt, loss_fn), batch, meta, model

    if case == "v22":
        d, blocks, b, t = (32, 2, 4, 16) if q else (512, 8, 32, 128)

        class LN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w, self.b = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

            def forward(self, x):
                m = x.mean(-1, keepdim=True)
                v = (x - m).pow(2).mean(-1, keepdim=True)
                return (x - m) / torch.sqrt(v + 1e-5) * self.w + self.b

        class Blk(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ln = LN()
                self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
                self.register_buffer("theta", torch.linspace(0.0, 3.0, d // 2))

            def forward(self, x):
                h = self.ln(x)
                a, c = h[..., : d // 2], h[..., d // 2 :]  # a rotary-style mix, by hand
                h = torch.cat(
                    [
                        a * torch.cos(self.theta) - c * torch.sin(self.theta),
                        a * torch.sin(self.theta) + c * torch.cos(self.theta),
                    ],
                    -1,
                )
                u = self.fc1(h)
                u = 0.5 * u * (1 + torch.tanh(0.79788456 * (u + 0.044715 * u * u * u)))
                return x + self.fc2(u) * 0.5

        model = nn.Sequential(*[Blk() for _ in range(blocks)]).to(device)
        opt = adamw(model, fused=cuda)
        run = torch.compile(model) if fixed else model
        x = torch.randn(b, t, d, device=device)
        return train(model, opt, lambda: run(x).pow(2).mean()), b, meta, model

    if case == "v23":
        batch = (4 if q else 16) * (4 if fixed else 1)
        model = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * 5 * 5, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, 10),
        ).to(device)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        meta["batch_multiple"] = 4
        return train(model, opt, lambda: F.cross_entropy(model(x), y)), batch, meta, model

    if case == "v24":
        ch, blocks, hw = (8, 2, 16) if q else (128, 8, 64)
        batch = (4 if q else 128) * (4 if fixed else 1)
        model = resnet(nn, ch, blocks).to(device, memory_format=torch.channels_last)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device).to(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (batch,), device=device)

        def loss_fn():
            with ac:
                return F.cross_entropy(model(x).float(), y)

        meta["batch_multiple"] = 4
        return train(model, opt, loss_fn), batch, meta, model

    # ---------------------------------------------------------------- 2 GPUs
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev_ids = [torch.device(device).index] if cuda else None

    if case == "v25":
        d, n, rows = (64, 3, 32) if q else (4096, 8, 2048)
        mods: list = []
        for _ in range(n):
            mods += [nn.Linear(d, d), nn.GELU()]
        model = nn.Sequential(*mods[:-1]).to(device)
        if fixed:
            kw = {"bucket_cap_mb": 50, "gradient_as_bucket_view": True, "static_graph": True}
        else:
            kw = {"bucket_cap_mb": 4096}
        run = DDP(model, device_ids=dev_ids, **kw)
        opt = adamw(model, fused=cuda)
        x = torch.randn(rows, d, device=device)

        def loss_fn():
            with ac:
                return F.mse_loss(run(x).float(), x)

        meta["ddp"] = kw
        return train(run, opt, loss_fn), rows, meta, model

    if case == "v26":
        ch, blocks, hw = (8, 2, 16) if q else (96, 8, 48)
        base = 4 if q else 32
        batch = base * 3 // 2 if fixed else (base * 2 if rank == 1 else base)
        model = resnet(nn, ch, blocks).to(device)
        run = DDP(model, device_ids=dev_ids)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 10, (batch,), device=device)

        def loss_fn():
            with ac:
                return F.cross_entropy(run(x).float(), y)

        meta["batch_by_rank"] = [base * 3 // 2] * 2 if fixed else [base, base * 2]
        return train(run, opt, loss_fn), batch, meta, model

    if case == "v27":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        vocab, d, layers, heads, seq, batch = (
            (256, 32, 2, 4, 16, 2) if q else (4096, 512, 4, 8, 128, 4)
        )
        model = gpt(torch, nn, F, vocab, d, layers, heads, seq).to(device)
        mesh = init_device_mesh(dt, (world,))
        plan = {
            "q": ColwiseParallel(),
            "k": ColwiseParallel(),
            "v": ColwiseParallel(),
            "o": RowwiseParallel(),
            "fc1": ColwiseParallel(),
            "fc2": RowwiseParallel(),
        }
        for blk in model.blocks:
            parallelize_module(blk, mesh, plan)
        run = torch.compile(model) if fixed else model
        # foreach kernels cannot mix DTensors and plain tensors: one AdamW each
        groups = [
            [p for p in model.parameters() if isinstance(p, DTensor) == s] for s in (True, False)
        ]
        opts = [torch.optim.AdamW(g, lr=1e-4) for g in groups if g]
        gen = torch.Generator().manual_seed(99)
        idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

        def step():
            with ac:
                logits = run(idx[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))
            for o in opts:
                o.zero_grad(set_to_none=True)
            loss.backward()
            for o in opts:
                o.step()

        meta["compiled"] = fixed
        return step, batch, meta, model

    if case == "v28":
        vocab, d, layers, heads, seq, batch = (
            (256, 32, 2, 4, 16, 2) if q else (8192, 1024, 6, 16, 512, 8)
        )
        model = gpt(torch, nn, F, vocab, d, layers, heads, seq).to(device)
        kw = (
            {"bucket_cap_mb": 50, "gradient_as_bucket_view": True, "static_graph": True}
            if fixed
            else {}
        )
        run = DDP(model, device_ids=dev_ids, **kw)
        opt = adamw(model, fused=cuda)
        gen = torch.Generator().manual_seed(99 + rank)
        idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

        def loss_fn():
            with ac:
                logits = run(idx[:, :-1])
            return F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

        meta["ddp"] = kw or "defaults (bucket_cap_mb=25)"
        return train(run, opt, loss_fn), batch, meta, model

    raise SystemExit(f"unknown case {case}")


def one(args, cases: dict | None = None, build_fn=None) -> int:
    """One run of ``args.case`` in this process (``cases``/``build_fn``: another recorder's cases
    and builder, ``record_blind.py``'s; default this file's)."""
    import torch
    from record_fixes import timed

    cases = CASES if cases is None else cases
    build_fn = build if build_fn is None else build_fn
    gpus = cases[args.case].get("gpus", 1)
    cuda = torch.cuda.is_available() and not args.cpu
    rank, world, dist = 0, 1, None
    if gpus > 1:
        import torch.distributed as dist

        local = int(os.environ.get("LOCAL_RANK", "0"))
        if cuda:
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        device = f"cuda:{local}" if cuda else "cpu"
    else:
        device = "cuda" if cuda else "cpu"
    t_start = time.perf_counter()
    step, samples, meta, _model = build_fn(args.case, args.variant, device, rank, world)
    compiled = args.case in ("v16", "v17", "v22", "v27") or bool(cases[args.case].get("compiled"))
    warm = 3 if QUICK else (30 if compiled else 15)
    n = 10 if QUICK else 40
    if dist is not None:
        dist.barrier()
    per = timed(step, "cuda" if cuda else "cpu", warm, n)
    med = statistics.median(per)
    if dist is not None:  # the job's step: the slower rank's
        t = torch.tensor([med], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        med_rank, med = med, float(t.item())
        meta["step_ms_median_this_rank"] = med_rank
    res = {
        "case": args.case,
        "variant": args.variant,
        "mode": args.mode,
        "gpus": gpus,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "samples_per_step": samples,
        "step_ms_median": med,
        "step_ms_blocks": [round(x, 4) for x in per],
        "per_sample_us": med * 1e3 / samples,
        "setup_and_time_s": time.perf_counter() - t_start,
        **meta,
    }
    if cuda:
        res["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    if args.mode == "trace":
        from gpuscope.capture import profile_steps

        name = f"{args.case}_{cases[args.case]['name']}"
        # Kineto (torch 2.11) writes a '"' inside a metadata string as '/"', which is not JSON:
        # the words put in the trace hold no double quote (a test checks CASES)
        md = {
            "gpuscope.experiment": name,
            "samples_per_step": samples,
            "gpuscope.planted": {
                k: cases[args.case][k] for k in ("planted", "fix", "expected_fix")
            },
        }
        with profile_steps(
            str(Path(args.out)),
            name=name,
            wait=6,
            warmup=2,
            active=3,
            sample_gpu=False,
            metadata=md,
            untraced_steps=5,
            model=None,
        ) as prof:
            while not prof.done:
                step()
                prof.step()
            if cuda:
                torch.cuda.synchronize()
        res["trace"] = [Path(p).name for p in prof.trace_paths]
        res["trace_bytes"] = sum(Path(p).stat().st_size for p in prof.trace_paths)
        res["trace_untraced_step_ms"] = prof.untraced_step_ms
    if dist is not None:
        everyone: list = [None] * world
        mine = {
            k: res.get(k) for k in ("samples_per_step", "trace_untraced_step_ms", "trace_bytes")
        }
        mine["step_ms_median"] = meta["step_ms_median_this_rank"]
        dist.all_gather_object(everyone, mine)
        res["ranks"] = everyone
        dist.barrier()
        dist.destroy_process_group()
        if rank:
            return 0
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def drive(args, table: dict | None = None, script: str | None = None) -> int:
    """Every case of ``args.cases`` as fresh processes of ``script`` (default this file), the cases
    described by ``table`` (default :data:`CASES`)."""
    table = CASES if table is None else table
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = args.cases.split(",") if args.cases else list(table)
    me = str(Path(script or __file__).resolve())
    extra = (["--quick"] if QUICK else []) + (["--cpu"] if args.cpu else [])
    results: list[dict] = []
    t0 = time.time()

    def child(case: str, variant: str, mode: str) -> dict | None:
        if table[case].get("gpus", 1) > 1:
            pre = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node",
                "2",
                me,
            ]
        else:
            pre = [sys.executable, me]
        cmd = [*pre, "one", "--case", case, "--variant", variant, "--mode", mode]
        cmd += ["--out", str(out / case), *extra]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.child_timeout)
        except subprocess.TimeoutExpired:
            log(f"TIMEOUT {case} {variant} {mode}")
            return None
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode or not line:
            log(f"FAILED {case} {variant} {mode} rc={p.returncode}\n{p.stderr[-3000:]}")
            return None
        r = json.loads(line[-1][7:])
        log(
            f"[{time.time() - t0:6.1f}s] {case} {table[case]['name']:26s} {variant:7s} {mode:5s} "
            f"{r['step_ms_median']:9.3f} ms/step {r['per_sample_us']:9.3f} us/sample "
            f"({r['setup_and_time_s']:.1f}s)"
        )
        return r

    import torch

    env = {
        "device": torch.cuda.get_device_name(0)
        if torch.cuda.is_available() and not args.cpu
        else "cpu",
        "gpus": torch.cuda.device_count() if not args.cpu else 0,
        "torch": torch.__version__,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    log(json.dumps(env))
    for case in cases:
        if time.time() - t0 > args.budget_s:
            log(f"budget spent: {case} and later skipped")
            break
        rows = []
        rec = None if getattr(args, "no_trace", False) else child(case, "planted", "trace")
        rows += [rec] if rec else []
        for r in range(args.rounds):
            for v in ("planted", "fixed") if r % 2 == 0 else ("fixed", "planted"):
                res = child(case, v, "time")
                if res:
                    res["round"] = r
                    rows.append(res)
        results += rows
        (out / case).mkdir(parents=True, exist_ok=True)
        (out / case / "timing.json").write_text(json.dumps({"env": env, "runs": rows}, indent=1))
        (out / "all.json").write_text(json.dumps({"env": env, "runs": results}, indent=1))
        if args.tar:
            with tarfile.open(args.tar + ".tmp", "w:gz") as tf:
                tf.add(out, arcname=out.name)
            os.replace(args.tar + ".tmp", args.tar)
        key = "per_sample_us" if table[case].get("bound") == "per_sample_time" else "step_ms_median"
        p = [x[key] for x in rows if x["variant"] == "planted" and x["mode"] == "time"]
        f = [x[key] for x in rows if x["variant"] == "fixed" and x["mode"] == "time"]
        if p and f:
            gains = [100 * (1 - b / a) for a, b in zip(p, f, strict=False)]
            log(
                f"== {case} {table[case]['name']:26s} planted {statistics.median(p):9.3f} "
                f"fixed {statistics.median(f):9.3f} gain {statistics.median(gains):5.1f}% "
                f"[{min(gains):.1f}, {max(gains):.1f}]"
            )
    log(f"done in {time.time() - t0:.1f}s")
    return 0


def main(cases: dict | None = None, build_fn=None, script: str | None = None) -> int:
    """The command line; another recorder passes its ``cases``, ``build_fn`` and ``script``."""
    global QUICK
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("drive", "one"))
    ap.add_argument("--case")
    ap.add_argument("--cases")
    ap.add_argument("--variant", default="planted")
    ap.add_argument("--mode", default="time")
    ap.add_argument("--out", default="out_validation_new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--budget-s", type=float, default=500)
    ap.add_argument("--child-timeout", type=float, default=150)
    ap.add_argument("--tar", default="")
    ap.add_argument("--no-trace", action="store_true", help="time only, no profiled run")
    args = ap.parse_args()
    QUICK = args.quick
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.cmd == "drive":
        return drive(args, cases, script)
    return one(args, cases, build_fn)


if __name__ == "__main__":
    raise SystemExit(main())
