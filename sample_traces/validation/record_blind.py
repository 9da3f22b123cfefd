"""Record the validation set's third part, **blind** (v29-v40): planted-and-fixed pairs on models,
sizes and dtypes unlike any earlier case, recorded after the estimates of v01-v28 were tuned and
kept out of every calibration (truth.json ``group: "blind"``); and the torch.compile timings of
v06, v12 and v23's planted variants (``--cases v06c,v12c,v23c --no-trace``: eager vs
``model.compile()``, the fix gpuscope names first there).

    python record_blind.py drive --out DIR [--cases v29,v30] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind.py one --case v29 --variant planted|fixed --mode time|trace --out DIR
    python record_blind.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.drive`` and
``record_new.one`` with this file's cases and builder): per case one profiled trace of the planted
variant through ``gpuscope.capture.profile_steps`` (5 untraced steps timed by CUDA events, wait 6,
warmup 2, active 3), then ``--rounds`` rounds of planted and fixed timed without the profiler, each a
fresh process, alternately (planted/fixed, fixed/planted, ...); 15 warm-up steps (30 for the
compiled cases), then 40 steps in blocks of 5 synchronised at both ends; ``step_ms_median`` is the
median block (the slower rank's on 2 GPUs).

Nothing here was looked at by gpuscope's analysis before it was recorded; the whole part is held
out (no half is calibration).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

import record_new  # noqa: E402
from record_common import kit, pinned_pool  # noqa: E402

GROUP = "blind"
"""truth.json's group of every case here: kept out of every calibration."""

CASES: dict[str, dict] = {
    "v29": {
        "name": "activation_checkpointing",
        "model": "U-Net (3 levels 64-128-256 ch, GroupNorm, SiLU, 96x96, 4-class per-pixel), "
        "batch 24, bf16 autocast; most of the GPU's memory free",
        "planted": "torch.utils.checkpoint on each of the 5 conv blocks",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v30": {
        "name": "optimizer_fused",
        "model": "DLRM-style recommender (26 embedding tables 20000 x 32, dense grads; bottom MLP "
        "13-256-128-32, top MLP 864-512-256-1), batch 4096, fp32 (38 parameter tensors)",
        "planted": "SGD(momentum=0.9, foreach=False): a Python loop of small kernels per parameter",
        "fix": "SGD(momentum=0.9, fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v31": {
        "name": "mixed_precision",
        "model": "Transformer decoder with cross-attention (nn.TransformerDecoderLayer x 6, d 512, "
        "target seq 256, memory seq 128, vocab 8000), batch 32",
        "planted": "fp32, TF32 off",
        "fix": "fp16 autocast with GradScaler",
        "expected_fix": "mixed_precision",
    },
    "v32": {
        "name": "dataloader_workers",
        "model": "EfficientNet-style CNN (depthwise convs, SiLU, squeeze-excite; 64x64), batch 128, "
        "bf16 autocast; uint8 images cropped, flipped, jittered and normalised in numpy per sample",
        "planted": "DataLoader(num_workers=0): the augmentation runs in the training process",
        "fix": "DataLoader(num_workers=6, persistent_workers=True, prefetch_factor=4)",
        "expected_fix": "dataloader_workers",
    },
    "v33": {
        "name": "pin_memory",
        "model": "PointNet segmentation (shared MLP 9-64-128-1024, global max-pool, head "
        "1088-512-256-13) on 32 clouds of 8192 points, bf16 autocast",
        "planted": "11.5 MB per step (points fp32, labels int64) copied from pageable memory",
        "fix": "batches pinned, copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v34": {
        "name": "host_sync",
        "model": "GCN on dense adjacency (3 layers, 1024 nodes, features 256, 16 classes), "
        "batch 32 graphs, fp32",
        "planted": "loss on the labelled nodes by boolean indexing (2 syncs) and 3 statistics "
        "read with .item() every step",
        "fix": "a masked loss weighted on the GPU, the statistics summed on the GPU",
        "expected_fix": "host_sync",
    },
    "v35": {
        "name": "kernel_fusion",
        "model": "RWKV-style blocks (hand-written RMSNorm, token shift, squared-ReLU channel mix, "
        "sigmoid gates; 6 blocks, d 768), 16 x 256 tokens, bf16 autocast",
        "planted": "eager (many small elementwise kernels)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v36": {
        "name": "batch_size",
        "model": "character-level 1-D CNN text classifier (embedding 64, 4 x Conv1d 256 k5, "
        "seq 512, max-pool), fp32",
        "planted": "batch 8",
        "fix": "batch 64 (8 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 8,
    },
    "v37": {
        "name": "cudnn_benchmark",
        "model": "ASPP segmentation-style CNN (3 modules of 4 dilated 3x3 convs, dilations "
        "1/6/12/18, 96 ch at 64x64), batch 16, fp32 (cuDNN TF32 on)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v38": {
        "name": "null_pin_memory",
        "model": "wide MLP regressor (256-8192-8192-8192-8192-256), batch 4096, fp32, TF32 off "
        "(a long GPU-bound step)",
        "planted": "8 MB per step (inputs and targets) copied from pageable memory",
        "fix": "batches pinned, copied with non_blocking=True (gains ~0: the copy and the host "
        "wait it adds are small beside the step)",
        "expected_fix": "pin_memory",
        "null": True,
    },
    "v39": {
        "name": "load_imbalance_host",
        "model": "BERT-style masked LM (4 x nn.TransformerEncoderLayer d 384, seq 128, vocab "
        "8000) under DDP on 2 GPUs, batch 32 per rank, bf16 autocast",
        "planted": "rank 1 alone does extra Python work each step (a metrics loop on the host, "
        "before its forward): rank 0 waits for it in every all-reduce",
        "fix": "the extra Python work dropped (off the step path of rank 1)",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
    "v40": {
        "name": "load_imbalance_batch",
        "model": "VGG-style CNN (6 convs 64-128-256 ch, BatchNorm, 64x64) under DDP on 2 GPUs, "
        "bf16 autocast",
        "planted": "rank 0 batch 32, rank 1 batch 48 (1.5x)",
        "fix": "both ranks batch 40 (the same 80 samples per step, split evenly)",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
}
ORDER = list(CASES)

COMPILE: dict[str, dict] = {
    f"{base}c": {
        "name": f"{base}_compile",
        "base": base,
        "planted": f"{base}'s planted variant, eager",
        "fix": "the same, model.compile() (torch.compile of the model in place)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    }
    for base in ("v06", "v12", "v23")
}
"""torch.compile of v06, v12 and v23's planted variants (variant ``fixed`` = compiled), timed only:
gpuscope names torch.compile their first fix; these settle whether it gains what it says."""

AMP: dict[str, dict] = {
    f"{base}a": {
        "name": f"{base}_amp",
        "base": base,
        "planted": f"{base}'s planted variant, fp32",
        "fix": "the same step under torch.autocast('cuda', dtype=torch.bfloat16)",
        "expected_fix": "mixed_precision",
        "amp": True,
    }
    for base in ("v07", "v37")
}
"""bf16 autocast of v07 and v37's planted variants (variant ``fixed`` = the whole step under
autocast: matmuls and convolutions in bf16, the backward in the forward's dtypes), timed only: a
mixed-precision re-timing that also shrank the fp32 convolutions its evidence counts made
mixed precision the first fix on both; these measured it (README: not landed). v45 was timed
too and dropped: its planted step wraps the loss in ``autocast(enabled=False)``, which turns an
outer autocast off (both variants ran fp32)."""

ALL = {**CASES, **COMPILE, **AMP}


class AugmentedImages:
    """v32's dataset (and v225's): uint8 images augmented in numpy per sample (crop, flip,
    brightness and contrast jitter, per-channel normalisation); ``length`` virtual samples over
    ``stored`` ones drawn from ``seed``, labels below ``classes``."""

    def __init__(
        self,
        hw: int,
        crop: int,
        length: int = 1_000_000,
        *,
        stored: int = 256,
        classes: int = 10,
        seed: int = 7,
    ) -> None:
        import numpy as np

        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, (stored, 3, hw, hw), dtype=np.uint8)
        self.labels = rng.integers(0, classes, stored)
        self.hw, self.crop, self.length = hw, crop, length
        self.mean = np.array([0.485, 0.456, 0.406], dtype=np.float32)[:, None, None]
        self.std = np.array([0.229, 0.224, 0.225], dtype=np.float32)[:, None, None]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        k = i % len(self.images)
        top, left = rng.integers(0, self.hw - self.crop + 1, 2)
        img = self.images[k, :, top : top + self.crop, left : left + self.crop]
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        x = img.astype(np.float32) / 255.0
        x = x * rng.uniform(0.8, 1.2) + rng.uniform(-0.1, 0.1)  # contrast, brightness
        gray = x.mean(axis=0, keepdims=True)
        x = gray + (x - gray) * rng.uniform(0.7, 1.3)  # saturation
        x = (np.clip(x, 0.0, 1.0) - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(x)), int(self.labels[k])


def _busy_python(n: int) -> int:
    """v39's extra host work on rank 1: a pure-Python loop (~n/15 µs of one core)."""
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return acc


def build(case: str, variant: str, device: str, rank: int = 0, world: int = 1):
    """(step_fn, samples_per_step, meta, model) of one case and variant on this rank."""
    if case in COMPILE:
        return build_compile(case, variant, device, rank, world)
    if case in AMP:
        return build_amp(case, variant, device, rank, world)
    import torch
    import torch.nn.functional as F
    from torch import nn

    fixed = variant == "fixed"
    q = record_new.QUICK
    k = kit(device, seed=2468, quick=record_new.QUICK)
    cuda, dt, ac = k.cuda, k.dt, k.ac
    meta: dict = {}

    def train(opt, loss_fn):
        def step():
            loss = loss_fn()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step

    def adamw(model, **kw):
        return torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)

    if case == "v29":
        from torch.utils.checkpoint import checkpoint

        hw, batch, c = (16, 2, 8) if q else (96, 24, 64)

        def blk(ci: int, co: int):
            return nn.Sequential(
                nn.Conv2d(ci, co, 3, padding=1),
                nn.GroupNorm(8, co),
                nn.SiLU(),
                nn.Conv2d(co, co, 3, padding=1),
                nn.GroupNorm(8, co),
                nn.SiLU(),
            )

        class UNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.e1, self.e2, self.mid = blk(3, c), blk(c, 2 * c), blk(2 * c, 4 * c)
                self.d2, self.d1 = blk(6 * c, 2 * c), blk(3 * c, c)
                self.head = nn.Conv2d(c, 4, 1)

            def run(self, m, x):
                return m(x) if fixed else checkpoint(m, x, use_reentrant=False)

            def forward(self, x):
                a = self.run(self.e1, x)
                b = self.run(self.e2, F.avg_pool2d(a, 2))
                m = self.run(self.mid, F.avg_pool2d(b, 2))
                u = self.run(self.d2, torch.cat([F.interpolate(m, scale_factor=2.0), b], 1))
                u = self.run(self.d1, torch.cat([F.interpolate(u, scale_factor=2.0), a], 1))
                return self.head(u)

        model = UNet().to(device)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 4, (batch, hw, hw), device=device)

        def loss_fn():
            with ac:
                return F.cross_entropy(model(x).float(), y)

        meta["checkpointed_blocks"] = 0 if fixed else 5
        return train(opt, loss_fn), batch, meta, model

    if case == "v30":
        rows, dim, tables, batch = (500, 8, 4, 64) if q else (20000, 32, 26, 4096)

        def mlp(*sizes: int, last_act: bool = True):
            mods: list = []
            for a, b in itertools.pairwise(sizes):
                mods += [nn.Linear(a, b), nn.ReLU()]
            return nn.Sequential(*(mods if last_act else mods[:-1]))

        class DLRM(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.ModuleList([nn.Embedding(rows, dim) for _ in range(tables)])
                self.bottom = mlp(13, 256, 128, dim)
                self.top = mlp(dim * (tables + 1), 512, 256, 1, last_act=False)

            def forward(self, dense, sparse):
                feats = [self.bottom(dense)] + [e(sparse[:, i]) for i, e in enumerate(self.emb)]
                return self.top(torch.cat(feats, 1)).squeeze(1)

        model = DLRM().to(device)
        if fixed and cuda:
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=fixed)
        dense = torch.randn(batch, 13, device=device)
        sparse = torch.randint(0, rows, (batch, tables), device=device)
        y = torch.randint(0, 2, (batch,), device=device).float()
        meta["param_tensors"] = len(list(model.parameters()))
        meta["optimizer"] = (
            "SGD(momentum=0.9, fused=True)" if fixed else "SGD(momentum=0.9, foreach=False)"
        )
        loss_fn = lambda: F.binary_cross_entropy_with_logits(model(dense, sparse), y)  # noqa: E731
        return train(opt, loss_fn), batch, meta, model

    if case == "v31":
        vocab, d, layers, heads, t, s, batch = (
            (256, 32, 2, 4, 16, 8, 2) if q else (8000, 512, 6, 8, 256, 128, 32)
        )

        class Dec(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
                self.mem = nn.Linear(d, d)
                layer = nn.TransformerDecoderLayer(
                    d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True
                )
                self.dec = nn.TransformerDecoder(layer, layers)
                self.head = nn.Linear(d, vocab)

            def forward(self, idx, memory):
                x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
                mask = nn.Transformer.generate_square_subsequent_mask(
                    idx.shape[1], device=idx.device
                )
                return self.head(self.dec(x, self.mem(memory), tgt_mask=mask, tgt_is_causal=True))

        model = Dec().to(device)
        opt = adamw(model, fused=cuda)
        idx = torch.randint(0, vocab, (batch, t + 1), device=device)
        memory = torch.randn(batch, s, d, device=device)
        half = torch.autocast(dt, dtype=torch.float16, enabled=fixed and cuda)
        scaler = torch.amp.GradScaler(dt, enabled=fixed and cuda)

        def step():
            with half:
                out = model(idx[:, :-1], memory)
            loss = F.cross_entropy(out.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        meta["precision"] = "fp16 autocast + GradScaler" if fixed else "fp32, TF32 off"
        return step, batch, meta, model

    if case == "v32":
        from torch.utils.data import DataLoader

        batch, hw, crop, workers = (8, 40, 32, 2) if q else (128, 80, 64, 6)

        def se(ch: int):
            return nn.Sequential(
                nn.AdaptiveAvgPool2d(1),
                nn.Conv2d(ch, ch // 4, 1),
                nn.SiLU(),
                nn.Conv2d(ch // 4, ch, 1),
                nn.Sigmoid(),
            )

        class MB(nn.Module):
            def __init__(self, ci: int, co: int, stride: int) -> None:
                super().__init__()
                mid = 4 * ci
                self.expand = nn.Sequential(
                    nn.Conv2d(ci, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU()
                )
                self.dw = nn.Sequential(
                    nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                    nn.BatchNorm2d(mid),
                    nn.SiLU(),
                )
                self.se = se(mid)
                self.project = nn.Sequential(nn.Conv2d(mid, co, 1, bias=False), nn.BatchNorm2d(co))
                self.res = ci == co and stride == 1

            def forward(self, x):
                h = self.dw(self.expand(x))
                h = self.project(h * self.se(h))
                return x + h if self.res else h

        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1, bias=False),
            nn.BatchNorm2d(32),
            nn.SiLU(),
            MB(32, 32, 1),
            MB(32, 48, 2),
            MB(48, 48, 1),
            MB(48, 96, 2),
            MB(96, 96, 1),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(96, 10),
        ).to(device)
        opt = adamw(model, fused=cuda)
        ds = AugmentedImages(hw, crop)
        kw = {"num_workers": workers, "persistent_workers": True, "prefetch_factor": 4}
        loader = DataLoader(
            ds, batch_size=batch, shuffle=True, drop_last=True, **(kw if fixed else {})
        )
        it = iter(loader)

        def loss_fn():
            x, y = next(it)
            x, y = x.to(device), y.to(device)
            with ac:
                return F.cross_entropy(model(x).float(), y)

        meta["num_workers"] = workers if fixed else 0
        return train(opt, loss_fn), batch, meta, model

    if case == "v33":
        batch, n = (2, 256) if q else (32, 8192)

        class PointNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.local = nn.Sequential(
                    nn.Conv1d(9, 64, 1), nn.ReLU(), nn.Conv1d(64, 128, 1), nn.ReLU()
                )
                self.glob = nn.Sequential(nn.Conv1d(128, 1024, 1), nn.ReLU())
                self.head = nn.Sequential(
                    nn.Conv1d(1024 + 64, 512, 1),
                    nn.ReLU(),
                    nn.Conv1d(512, 256, 1),
                    nn.ReLU(),
                    nn.Conv1d(256, 13, 1),
                )

            def forward(self, pts):
                f64 = self.local[1](self.local[0](pts))
                g = self.glob(self.local[3](self.local[2](f64))).amax(2, keepdim=True)
                return self.head(torch.cat([f64, g.expand(-1, -1, pts.shape[2])], 1))

        model = PointNet().to(device)
        opt = adamw(model, fused=cuda)
        gen = torch.Generator().manual_seed(5)
        pool = [
            (
                torch.randn(batch, 9, n, generator=gen),
                torch.randint(0, 13, (batch, n), generator=gen),
            )
            for _ in range(4)
        ]
        if fixed and cuda:
            pool = pinned_pool(pool)
        k = 0

        def loss_fn():
            nonlocal k
            a, b = pool[k % 4]
            k += 1
            pts, y = a.to(device, non_blocking=fixed), b.to(device, non_blocking=fixed)
            with ac:
                return F.cross_entropy(model(pts).float(), y)

        meta["bytes_per_step"] = batch * n * (9 * 4 + 8)
        meta["pinned"] = fixed
        return train(opt, loss_fn), batch, meta, model

    if case == "v34":
        batch, n, f, classes = (2, 32, 16, 4) if q else (32, 1024, 256, 16)
        gen = torch.Generator().manual_seed(11)
        adj = (torch.rand(batch, n, n, generator=gen) < 0.02).float() + torch.eye(n)
        adj = (adj / adj.sum(-1, keepdim=True)).to(device)
        x = torch.randn(batch, n, f, generator=gen).to(device)
        y = torch.randint(0, classes, (batch, n), generator=gen).to(device)
        mask = (torch.rand(batch, n, generator=gen) < 0.3).to(device)
        lins = nn.ModuleList([nn.Linear(f, f), nn.Linear(f, f), nn.Linear(f, classes)])
        model = lins.to(device)
        opt = adamw(model, fused=cuda)
        stats = torch.zeros(3, device=device)
        seen: list[float] = []

        def forward():
            h = x
            for i, lin in enumerate(lins):
                h = torch.bmm(adj, lin(h))
                h = F.relu(h) if i < len(lins) - 1 else h
            return h

        def step():
            logits = forward()
            if fixed:
                m = mask.float()
                per = F.cross_entropy(logits.reshape(-1, classes), y.reshape(-1), reduction="none")
                loss = (per * m.reshape(-1)).sum() / m.sum().clamp_min(1.0)
                acc = ((logits.argmax(-1) == y).float() * m).sum() / m.sum().clamp_min(1.0)
            else:  # boolean indexing: 2 syncs (nonzero); then 3 .item() reads
                sel, ys = logits[mask], y[mask]
                loss = F.cross_entropy(sel, ys)
                acc = (sel.argmax(-1) == ys).float().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if fixed:
                stats.add_(torch.stack([loss.detach(), acc, mask.sum().float()]))
            else:
                seen.extend([loss.item(), acc.item(), float(mask.sum().item())])

        meta["syncs_per_step"] = 0 if fixed else 5
        return step, batch, meta, model

    if case == "v35":
        d, blocks, b, t = (32, 2, 2, 16) if q else (768, 6, 16, 256)

        class RMS(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = nn.Parameter(torch.ones(d))

            def forward(self, x):
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

        class Blk(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.n1, self.n2 = RMS(), RMS()
                self.mk, self.mr = nn.Parameter(torch.rand(d)), nn.Parameter(torch.rand(d))
                self.key, self.value = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, False)
                self.recept = nn.Linear(d, d, bias=False)
                self.gate, self.out = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, d, bias=False)

            def forward(self, x):
                h = self.n1(x)
                prev = F.pad(h[:, :-1], (0, 0, 1, 0))  # token shift
                xk = h * self.mk + prev * (1 - self.mk)
                xr = h * self.mr + prev * (1 - self.mr)
                k = torch.relu(self.key(xk)).square()
                x = x + torch.sigmoid(self.recept(xr)) * self.value(k)
                a, g = self.gate(self.n2(x)).chunk(2, -1)
                return x + self.out(a * torch.sigmoid(g) * g)

        model = nn.Sequential(*[Blk() for _ in range(blocks)]).to(device)
        opt = adamw(model, fused=cuda)
        run = torch.compile(model) if fixed else model
        x = torch.randn(b, t, d, device=device)

        def loss_fn():
            with ac:
                return run(x).float().pow(2).mean()

        meta["compiled"] = fixed
        return train(opt, loss_fn), b, meta, model

    if case == "v36":
        vocab, seq = (96, 64) if q else (96, 512)
        batch = (2 if q else 8) * (8 if fixed else 1)
        ch = 32 if q else 256

        class TextCNN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(vocab, 64)
                convs: list = []
                for i in range(4):
                    convs += [nn.Conv1d(64 if i == 0 else ch, ch, 5, padding=2), nn.ReLU()]
                self.convs = nn.Sequential(*convs)
                self.head = nn.Linear(ch, 20)

            def forward(self, idx):
                return self.head(self.convs(self.emb(idx).transpose(1, 2)).amax(2))

        model = TextCNN().to(device)
        opt = adamw(model, fused=cuda)
        idx = torch.randint(0, vocab, (batch, seq), device=device)
        y = torch.randint(0, 20, (batch,), device=device)
        meta["batch_multiple"] = 8
        return train(opt, lambda: F.cross_entropy(model(idx), y)), batch, meta, model

    if case == "v37":
        torch.backends.cudnn.benchmark = fixed
        batch, hw, c = (2, 32, 16) if q else (16, 128, 96)

        class ASPP(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.branches = nn.ModuleList(
                    [nn.Conv2d(c, c // 2, 3, padding=r, dilation=r) for r in (1, 6, 12, 18)]
                )
                self.fuse = nn.Sequential(nn.Conv2d(2 * c, c, 1), nn.BatchNorm2d(c), nn.ReLU())

            def forward(self, x):
                return x + self.fuse(torch.cat([b(x) for b in self.branches], 1))

        model = nn.Sequential(
            nn.Conv2d(3, c, 3, 2, 1),
            nn.ReLU(),
            ASPP(),
            ASPP(),
            ASPP(),
            nn.Conv2d(c, 8, 1),
        ).to(device)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 8, (batch, hw // 2, hw // 2), device=device)
        meta["torch_flags"] = {"cudnn_benchmark": fixed}
        return train(opt, lambda: F.cross_entropy(model(x), y)), batch, meta, model

    if case == "v38":
        d_in, width, batch = (32, 64, 16) if q else (256, 8192, 4096)
        model = nn.Sequential(
            nn.Linear(d_in, width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
            nn.Linear(width, d_in),
        ).to(device)
        opt = adamw(model, fused=cuda)
        gen = torch.Generator().manual_seed(3)
        pool = [
            (torch.randn(batch, d_in, generator=gen), torch.randn(batch, d_in, generator=gen))
            for _ in range(4)
        ]
        if fixed and cuda:
            pool = pinned_pool(pool)
        k = 0

        def loss_fn():
            nonlocal k
            a, b = pool[k % 4]
            k += 1
            xx, yy = a.to(device, non_blocking=fixed), b.to(device, non_blocking=fixed)
            return F.mse_loss(model(xx), yy)

        meta["bytes_per_step"] = 2 * batch * d_in * 4
        meta["pinned"] = fixed
        return train(opt, loss_fn), batch, meta, model

    # ---------------------------------------------------------------- 2 GPUs
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev_ids = [torch.device(device).index] if cuda else None

    if case == "v39":
        vocab, d, layers, seq, batch = (256, 32, 2, 16, 4) if q else (8000, 384, 4, 128, 32)
        busy = 2_000 if q else 90_000

        class MLM(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
                layer = nn.TransformerEncoderLayer(
                    d, 6 if not q else 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True
                )
                self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
                self.head = nn.Linear(d, vocab)

            def forward(self, idx):
                x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
                return self.head(self.enc(x))

        model = MLM().to(device)
        run = DDP(model, device_ids=dev_ids)
        opt = adamw(model, fused=cuda)
        gen = torch.Generator().manual_seed(40 + rank)
        idx = torch.randint(0, vocab, (batch, seq), generator=gen).to(device)
        y = torch.randint(0, vocab, (batch, seq), generator=gen).to(device)
        extra = not fixed and rank == 1
        sink: list[int] = []

        def step():
            if extra:  # host work on the step path of rank 1 alone
                sink.append(_busy_python(busy))
            with ac:
                out = run(idx)
            loss = F.cross_entropy(out.float().reshape(-1, vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        meta["extra_python_on_rank"] = None if fixed else 1
        meta["extra_python_loop"] = 0 if fixed else busy
        return step, batch, meta, model

    if case == "v40":
        hw = 16 if q else 64
        base = 4 if q else 32
        batch = base * 5 // 4 if fixed else (base * 3 // 2 if rank == 1 else base)

        def cbr(ci: int, co: int):
            return [nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU()]

        model = nn.Sequential(
            *cbr(3, 64),
            *cbr(64, 64),
            nn.MaxPool2d(2),
            *cbr(64, 128),
            *cbr(128, 128),
            nn.MaxPool2d(2),
            *cbr(128, 256),
            *cbr(256, 256),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(256, 10),
        ).to(device)
        run = DDP(model, device_ids=dev_ids)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 10, (batch,), device=device)

        def loss_fn():
            with ac:
                return F.cross_entropy(run(x).float(), y)

        meta["batch_by_rank"] = [base * 5 // 4] * 2 if fixed else [base, base * 3 // 2]
        return train(opt, loss_fn), batch, meta, model

    raise SystemExit(f"unknown case {case}")


def build_compile(case: str, variant: str, device: str, rank: int = 0, world: int = 1):
    """The planted variant of ``COMPILE[case]['base']`` as its own recorder builds it; ``fixed``:
    the same model compiled in place as ``torch.compile(model)`` compiles it
    (:func:`record_common.compile_in_place`), so the step's own ``model(x)`` calls run compiled.
    v06c and v23c were recorded with ``model.compile()``, which compiles nothing of an
    ``nn.Sequential`` of torch's layers (both are): make_truth marks them void."""
    base = COMPILE[case]["base"]
    if base in record_new.CASES:
        step, samples, meta, model = record_new.build(base, "planted", device, rank, world)
    else:
        import record_validation

        record_validation.QUICK = record_new.QUICK
        step, samples, meta, model = record_validation.build(base, "planted", device)
    if variant == "fixed":
        from record_common import compile_in_place

        compile_in_place(model)
    meta = {**meta, "compiled": variant == "fixed", "base_case": base}
    return step, samples, meta, model


def build_amp(case: str, variant: str, device: str, rank: int = 0, world: int = 1):
    """The planted variant of ``AMP[case]['base']`` as its own recorder builds it; ``fixed``: each
    step under ``torch.autocast(device, dtype=torch.bfloat16)``."""
    import contextlib

    import torch

    base = AMP[case]["base"]
    if base in CASES:
        step, samples, meta, model = build(base, "planted", device, rank, world)
    else:
        import record_validation

        record_validation.QUICK = record_new.QUICK
        step, samples, meta, model = record_validation.build(base, "planted", device)
    if variant != "fixed":
        return step, samples, {**meta, "amp": False, "base_case": base}, model
    dt = "cuda" if str(device).startswith("cuda") else "cpu"

    def amp_step():
        with torch.autocast(dt, dtype=torch.bfloat16) if dt == "cuda" else contextlib.nullcontext():
            return step()

    return amp_step, samples, {**meta, "amp": True, "base_case": base}, model


def main() -> int:
    return record_new.main(cases=ALL, build_fn=build, script=__file__)


if __name__ == "__main__":
    raise SystemExit(main())
