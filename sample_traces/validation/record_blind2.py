"""Record the validation set's fourth part, **blind** (v41-v54): planted-and-fixed pairs on models,
sizes and dtypes unlike any earlier case (v01-v40, ../fixes, ../multi_gpu), recorded after the
estimates were tuned on v01-v28 and v29-v40 had been looked at, and kept out of every calibration
(truth.json ``group: "blind2"``). Nobody runs gpuscope's analysis on these cases before the lead
judges them once.

    python record_blind2.py drive --out DIR [--cases v41,v42] [--rounds 3] [--budget-s 520] [--tar T]
    python record_blind2.py one --case v41 --variant planted|fixed --mode time|trace --out DIR
    python record_blind2.py drive --quick --cpu --out DIR     (the recipe on a CPU, tiny sizes)

The driver, the timing and the profiled run are record_new.py's (``record_new.drive`` and
``record_new.one`` with this file's cases and builder), as record_blind.py's: per case one
profiled trace of the planted variant per rank through ``gpuscope.capture.profile_steps`` (5
untraced steps timed by CUDA events, wait 6, warmup 2, active 3), then ``--rounds`` rounds of
planted and fixed timed without the profiler, each a fresh process (a fresh ``torchrun
--nproc_per_node 2`` job for the 2-GPU cases), alternately (planted/fixed, fixed/planted, ...);
15 warm-up steps (30 for the compiled cases), then 40 steps in blocks of 5 synchronised at both
ends; ``step_ms_median`` is the median block (the slower rank's on 2 GPUs).

The cases, their sizes and the two chosen to gain nothing (v50: cudnn.benchmark on a model with
no convolution; v51: a fused optimizer for 4 large parameter tensors under a long GPU-bound step)
were fixed here and committed before the first device call.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))
sys.path.insert(0, str(HERE.parent / "multi_gpu"))

import record_new  # noqa: E402
from record_common import kit, pinned_pool  # noqa: E402

GROUP = "blind2"
"""truth.json's group of every case here: kept out of every calibration, judged once."""

CASES: dict[str, dict] = {
    "v41": {
        "name": "activation_checkpointing",
        "model": "ConvNeXt-style CNN (stem 4x4/4, stages 96/192/384 ch with 3/3/9 blocks: 7x7 "
        "depthwise conv, LayerNorm, MLP 4x, layer scale; 192x192), batch 48, bf16 autocast; "
        "most of the GPU's memory free",
        "planted": "torch.utils.checkpoint on each of the 15 ConvNeXt blocks",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v42": {
        "name": "optimizer_fused",
        "model": "FT-Transformer-style tabular model (192 numeric features, each with its own "
        "weight and bias vector of d 64; 3 nn.TransformerEncoderLayer d 64 on 193 tokens), "
        "batch 256, fp32 (about 420 small parameter tensors)",
        "planted": "AdamW(amsgrad=True, foreach=False): a Python loop of small kernels per "
        "parameter",
        "fix": "AdamW(amsgrad=True, fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v43": {
        "name": "host_sync",
        "model": "temporal convolutional network (8 causal dilated Conv1d layers, 192 ch, "
        "dilations 1-128, seq 2048, 8 series), batch 32, fp32 (cuDNN TF32); each batch cut "
        "from a numpy series and detrended per window on the host in the training loop",
        "planted": "loss.item() and mae.item() every step: the host waits for the GPU before it "
        "prepares the next batch",
        "fix": "the metrics summed on the GPU: the next batch is prepared while the GPU computes",
        "expected_fix": "host_sync",
    },
    "v44": {
        "name": "pin_memory",
        "model": "3-D CNN video classifier (4 Conv3d 3-32-64-128-128, clips 3 x 16 x 112 x 112), "
        "batch 16, bf16 autocast",
        "planted": "38.5 MB per step (fp32 clips) copied from pageable memory",
        "fix": "batches pinned, copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v45": {
        "name": "mixed_precision",
        "model": "ResNet-50-style bottleneck CNN (1x1-3x3-1x1 blocks, stages 256/512/1024 ch, 2 "
        "blocks each, BatchNorm), 96x96, batch 64",
        "planted": "fp32, TF32 off (matmuls and cuDNN)",
        "fix": "bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v46": {
        "name": "kernel_fusion",
        "model": "gMLP (spatial gating unit; hand-written LayerNorm and erf-GELU; 6 blocks, "
        "d 256, hidden 1024, 196 patches), batch 32, bf16 autocast",
        "planted": "eager (many small elementwise kernels)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v47": {
        "name": "batch_size",
        "model": "DCN-v2 click-through model (one hashed embedding table 100000 x 16 for 39 "
        "fields, 3 cross layers 637 wide, deep MLP 637-512-256), fp32",
        "planted": "batch 32",
        "fix": "batch 512 (16 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 16,
    },
    "v48": {
        "name": "dataloader_workers",
        "model": "keyword-spotting CNN on log-mel spectrograms (4 convs 32-64-128-128, 64 mels x "
        "97 frames), batch 96; each 1 s clip shifted, scaled, noised, framed, FFT-ed, "
        "mel-filtered and masked in numpy per sample",
        "planted": "DataLoader(num_workers=0): the feature extraction runs in the training process",
        "fix": "DataLoader(num_workers=6, persistent_workers=True, prefetch_factor=4)",
        "expected_fix": "dataloader_workers",
    },
    "v49": {
        "name": "cuda_graphs",
        "model": "tiny GPT LM (4 layers, d 128, 4 heads, seq 64, vocab 512), batch 8, "
        "torch.compile (default mode)",
        "planted": "compiled without CUDA graphs: the step is bound by launches",
        "fix": "torch.compile(model, mode='reduce-overhead')",
        "expected_fix": "cuda_graphs",
        "compiled": True,
    },
    "v50": {
        "name": "null_cudnn_benchmark",
        "model": "Set Transformer (point sets of 2048 x 3, 2 ISAB blocks with 32 inducing points, "
        "PMA pooling; nn.MultiheadAttention d 512, 8 heads; no convolution), batch 64, bf16 "
        "autocast (GPU-bound)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True (gains ~0: the model has no convolution)",
        "expected_fix": "cudnn_benchmark",
        "null": True,
    },
    "v51": {
        "name": "null_optimizer_fused",
        "model": "convolutional denoiser (4 convs 3-256-256-256-3, 3x3, no bias, no norm, "
        "128x128), batch 16, fp32 (cuDNN TF32): 4 parameter tensors, a long GPU-bound step",
        "planted": "Adam(foreach=False)",
        "fix": "Adam(fused=True) (gains ~0: 4 parameter tensors beside a long step)",
        "expected_fix": "optimizer_fused",
        "null": True,
    },
    "v52": {
        "name": "load_imbalance_batch",
        "model": "ConvMixer (patch 2 on 64x64, 512 ch, 8 layers of 9x9 depthwise + pointwise "
        "conv, GELU, BatchNorm) under DDP on 2 GPUs, bf16 autocast",
        "planted": "rank 0 batch 80, rank 1 batch 104 (1.3x)",
        "fix": "both ranks batch 92 (the same 184 samples per step, split evenly)",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
    "v53": {
        "name": "load_imbalance_host",
        "model": "DenseNet-style CNN (3 dense blocks of 4 bottleneck layers, growth 32, 32x32; "
        "83 parameter tensors) under DDP on 2 GPUs, batch 128 per rank, bf16 autocast",
        "planted": "rank 0 alone logs per-tensor diagnostics every step (gradient norm and "
        "weight norm of each parameter tensor, small ops launched one by one): its host is the "
        "pace-setter, rank 1 waits in every all-reduce",
        "fix": "the same diagnostics by torch._foreach_norm over all tensors at once",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
    "v54": {
        "name": "fsdp_prefetch",
        "model": "feed-forward residual stack (8 blocks of RMSNorm + SwiGLU, d 3072, hidden "
        "8192: 604 M parameters) under FSDP2 on 2 GPUs (fully_shard per block + root, bf16 "
        "parameters, fp32 reduce), 4 x 512 tokens per rank",
        "planted": "FSDP2 prefetch defeated: each block's all-gather waits for the compute "
        "before it (forward and backward), backward prefetch off",
        "fix": "FSDP2's default prefetching",
        "expected_fix": "fsdp_prefetch",
        "gpus": 2,
    },
}
ORDER = list(CASES)


class Series:
    """v43's data: 8 random-walk series of 400,000 steps (numpy float32); :meth:`batch` cuts
    ``batch`` windows of ``length + 1`` and, per window, in Python, removes each series' linear
    trend, scales it to unit variance, clips and jitters it (the host work of every step)."""

    def __init__(self, channels: int, total: int = 400_000) -> None:
        import numpy as np

        rng = np.random.default_rng(17)
        self.x = np.cumsum(rng.standard_normal((channels, total)), axis=1).astype(np.float32)
        self.rng = rng

    def batch(self, batch: int, length: int):
        import numpy as np

        n = length + 1
        t = np.arange(n, dtype=np.float32) - (n - 1) / 2
        tt = float((t * t).sum())
        out = np.empty((batch, self.x.shape[0], n), dtype=np.float32)
        for b, s in enumerate(self.rng.integers(0, self.x.shape[1] - n, batch)):
            w = self.x[:, s : s + n]
            w = w - w.mean(axis=1, keepdims=True)
            w = w - ((w * t).sum(axis=1, keepdims=True) / tt) * t  # detrend
            w = w / (w.std(axis=1, keepdims=True) + 1e-5)
            w = np.clip(w, -5.0, 5.0)
            out[b] = w + self.rng.normal(0.0, 0.01, w.shape).astype(np.float32)
        return out


class MelClips:
    """v48's dataset: 1 s clips at 16 kHz (256 stored, ``length`` virtual samples); per sample in
    numpy: random circular shift and gain, added noise, 512-point frames every 160 samples, Hann
    window, FFT power, 64 triangular mel filters, log, per-clip normalisation, one time mask and
    one frequency mask. Returns (1 x 64 x frames float32, label)."""

    def __init__(self, n: int = 16000, n_fft: int = 512, hop: int = 160, mels: int = 64) -> None:
        import numpy as np

        rng = np.random.default_rng(23)
        self.wave = (0.1 * rng.standard_normal((256, n))).astype(np.float32)
        self.labels = rng.integers(0, 35, 256)
        self.n, self.n_fft, self.hop = n, n_fft, hop
        self.win = np.hanning(n_fft).astype(np.float32)
        hz = 700.0 * (
            10 ** (np.linspace(0.0, 2595.0 * np.log10(1 + 8000 / 700), mels + 2) / 2595) - 1
        )
        bins = np.floor((n_fft + 1) * hz / 16000).astype(int)
        fb = np.zeros((mels, n_fft // 2 + 1), dtype=np.float32)
        for m in range(1, mels + 1):
            a, b, c = bins[m - 1], bins[m], bins[m + 1]
            fb[m - 1, a:b] = (np.arange(a, b) - a) / max(b - a, 1)
            fb[m - 1, b:c] = (c - np.arange(b, c)) / max(c - b, 1)
        self.fb = fb.T.copy()

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        k = i % len(self.wave)
        w = np.roll(self.wave[k], int(rng.integers(0, self.n))) * rng.uniform(0.5, 1.5)
        w = w + rng.standard_normal(self.n).astype(np.float32) * 0.005
        frames = np.lib.stride_tricks.sliding_window_view(w, self.n_fft)[:: self.hop]
        spec = np.abs(np.fft.rfft(frames * self.win, axis=1)) ** 2
        mel = np.log(spec @ self.fb + 1e-6).T  # mels x frames
        mel = (mel - mel.mean()) / (mel.std() + 1e-5)
        t0, f0 = rng.integers(0, mel.shape[1] - 10), rng.integers(0, mel.shape[0] - 8)
        mel[:, t0 : t0 + int(rng.integers(1, 10))] = 0.0
        mel[f0 : f0 + int(rng.integers(1, 8))] = 0.0
        return torch.from_numpy(mel[None].astype(np.float32)), int(self.labels[k])


def build(case: str, variant: str, device: str, rank: int = 0, world: int = 1):
    """(step_fn, samples_per_step, meta, model) of one case and variant on this rank."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    fixed = variant == "fixed"
    q = record_new.QUICK
    k = kit(device, seed=97531, quick=record_new.QUICK)
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

    if case == "v41":
        from torch.utils.checkpoint import checkpoint

        hw, batch, dims, depths = (
            (32, 2, (16, 32, 64), (1, 1, 2))
            if q
            else (
                192,
                48,
                (96, 192, 384),
                (3, 3, 9),
            )
        )

        class LN2d(nn.Module):
            def __init__(self, c: int) -> None:
                super().__init__()
                self.ln = nn.LayerNorm(c)

            def forward(self, x):
                return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

        class Block(nn.Module):
            def __init__(self, c: int) -> None:
                super().__init__()
                self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
                self.ln = nn.LayerNorm(c)
                self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
                self.gamma = nn.Parameter(torch.full((c,), 1e-6))

            def forward(self, x):
                h = self.dw(x).permute(0, 2, 3, 1)
                h = self.fc2(F.gelu(self.fc1(self.ln(h)))) * self.gamma
                return x + h.permute(0, 3, 1, 2)

        class ConvNeXt(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LN2d(dims[0]))
                self.stages = nn.ModuleList()
                self.downs = nn.ModuleList()
                for i, (c, n) in enumerate(zip(dims, depths, strict=True)):
                    self.stages.append(nn.ModuleList([Block(c) for _ in range(n)]))
                    if i + 1 < len(dims):
                        self.downs.append(nn.Sequential(LN2d(c), nn.Conv2d(c, dims[i + 1], 2, 2)))
                self.norm, self.head = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], 100)

            def forward(self, x):
                x = self.stem(x)
                for i, stage in enumerate(self.stages):
                    for blk in stage:
                        x = blk(x) if fixed else checkpoint(blk, x, use_reentrant=False)
                    if i < len(self.downs):
                        x = self.downs[i](x)
                return self.head(self.norm(x.mean((2, 3))))

        model = ConvNeXt().to(device)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 100, (batch,), device=device)

        def loss_fn():
            with ac:
                return F.cross_entropy(model(x).float(), y)

        meta["checkpointed_blocks"] = 0 if fixed else sum(depths)
        return train(opt, loss_fn), batch, meta, model

    if case == "v42":
        feats, d, layers, batch = (16, 16, 1, 8) if q else (192, 64, 3, 256)

        class FTT(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = nn.ParameterList(
                    [nn.Parameter(torch.randn(d) * 0.1) for _ in range(feats)]
                )
                self.b = nn.ParameterList([nn.Parameter(torch.zeros(d)) for _ in range(feats)])
                self.cls = nn.Parameter(torch.zeros(1, 1, d))
                layer = nn.TransformerEncoderLayer(
                    d, 4, 2 * d, dropout=0.0, batch_first=True, norm_first=True
                )
                self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
                self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 1)

            def forward(self, x):
                w, b = torch.stack(list(self.w)), torch.stack(list(self.b))
                tok = x[:, :, None] * w + b
                tok = torch.cat([self.cls.expand(x.shape[0], -1, -1), tok], 1)
                return self.head(self.norm(self.enc(tok)[:, 0])).squeeze(1)

        model = FTT().to(device)
        if fixed and cuda:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, amsgrad=True, fused=True)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, amsgrad=True, foreach=fixed)
        x = torch.randn(batch, feats, device=device)
        y = torch.randn(batch, device=device)
        meta["param_tensors"] = len(list(model.parameters()))
        meta["optimizer"] = (
            "AdamW(amsgrad=True, fused=True)" if fixed else "AdamW(amsgrad=True, foreach=False)"
        )
        return train(opt, lambda: F.mse_loss(model(x), y)), batch, meta, model

    if case == "v43":
        ch, layers, seq, batch, series = (16, 3, 128, 4, 4) if q else (192, 8, 2048, 32, 8)

        class TCN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inp = nn.Conv1d(series, ch, 1)
                self.convs = nn.ModuleList(
                    [nn.Conv1d(ch, ch, 3, dilation=2**i) for i in range(layers)]
                )
                self.out = nn.Conv1d(ch, series, 1)

            def forward(self, x):
                h = self.inp(x)
                for i, conv in enumerate(self.convs):
                    h = h + F.relu(conv(F.pad(h, (2 * 2**i, 0))))  # causal
                return self.out(h)

        model = TCN().to(device)
        opt = adamw(model, fused=cuda)
        data = Series(series)
        ring = [torch.empty(batch, series, seq + 1) for _ in range(4)]
        if cuda:
            ring = [r.pin_memory() for r in ring]
        done = [torch.cuda.Event() if cuda else None for _ in ring]  # copy out of slot i ended
        stats = torch.zeros(2, device=device)
        seen: list[float] = []
        k = 0

        def step():
            nonlocal k
            i = k % len(ring)
            k += 1
            batch_np = data.batch(batch, seq)  # host work, both variants
            if cuda and k > len(ring):
                done[i].synchronize()  # the slot's copy of 4 steps ago has ended
            ring[i].copy_(torch.from_numpy(batch_np))
            xy = ring[i].to(device, non_blocking=cuda)
            if cuda:
                done[i].record()
            x, y = xy[:, :, :-1], xy[:, :, 1:]
            pred = model(x)
            loss = F.mse_loss(pred, y)
            mae = (pred.detach() - y).abs().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if fixed:
                stats.add_(torch.stack([loss.detach(), mae]))
            else:  # planted: 2 host syncs at the end of every step
                seen.extend([loss.item(), mae.item()])

        meta["syncs_per_step"] = 0 if fixed else 2
        return step, batch, meta, model

    if case == "v44":
        batch, frames, hw = (2, 4, 32) if q else (16, 16, 112)
        model = nn.Sequential(
            nn.Conv3d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool3d((1, 2, 2)),
            nn.Conv3d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool3d(2),
            nn.Conv3d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool3d(2),
            nn.Conv3d(128, 128, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool3d(1),
            nn.Flatten(),
            nn.Linear(128, 10),
        ).to(device)
        opt = adamw(model, fused=cuda)
        gen = torch.Generator().manual_seed(31)
        pool = [
            (
                torch.randn(batch, 3, frames, hw, hw, generator=gen),
                torch.randint(0, 10, (batch,), generator=gen),
            )
            for _ in range(3)
        ]
        if fixed and cuda:
            pool = pinned_pool(pool)
        k = 0

        def loss_fn():
            nonlocal k
            a, b = pool[k % len(pool)]
            k += 1
            clip, y = a.to(device, non_blocking=fixed), b.to(device, non_blocking=fixed)
            with ac:
                return F.cross_entropy(model(clip).float(), y)

        meta["bytes_per_step"] = batch * 3 * frames * hw * hw * 4 + batch * 8
        meta["pinned"] = fixed
        return train(opt, loss_fn), batch, meta, model

    if case == "v45":
        if not fixed:
            torch.backends.cudnn.allow_tf32 = False
        hw, batch, stages = (
            (32, 2, ((32, 8, 1), (64, 16, 1)))
            if q
            else (
                96,
                64,
                ((256, 64, 2), (512, 128, 2), (1024, 256, 2)),
            )
        )

        class Bottleneck(nn.Module):
            def __init__(self, ci: int, co: int, mid: int, stride: int) -> None:
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(ci, mid, 1, bias=False),
                    nn.BatchNorm2d(mid),
                    nn.ReLU(),
                    nn.Conv2d(mid, mid, 3, stride, 1, bias=False),
                    nn.BatchNorm2d(mid),
                    nn.ReLU(),
                    nn.Conv2d(mid, co, 1, bias=False),
                    nn.BatchNorm2d(co),
                )
                self.short = (
                    nn.Sequential(nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co))
                    if ci != co or stride != 1
                    else nn.Identity()
                )

            def forward(self, x):
                return F.relu(self.body(x) + self.short(x))

        mods: list = [nn.Conv2d(3, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
        ci = 64
        for i, (co, mid, n) in enumerate(stages):
            for j in range(n):
                mods.append(Bottleneck(ci, co, mid, 2 if i > 0 and j == 0 else 1))
                ci = co
        mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, 100)]
        model = nn.Sequential(*mods).to(device)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 100, (batch,), device=device)
        half = torch.autocast(dt, dtype=torch.bfloat16, enabled=fixed and cuda)

        def loss_fn():
            with half:
                return F.cross_entropy(model(x).float(), y)

        meta["precision"] = "bf16 autocast" if fixed else "fp32, TF32 off"
        return train(opt, loss_fn), batch, meta, model

    if case == "v46":
        d, hid, blocks, seq, batch = (32, 64, 2, 16, 2) if q else (256, 1024, 6, 196, 32)

        def layer_norm(x, w, b):
            mu = x.mean(-1, keepdim=True)
            var = (x - mu).pow(2).mean(-1, keepdim=True)
            return (x - mu) * torch.rsqrt(var + 1e-5) * w + b

        def gelu(x):
            return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))

        class GBlock(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w1, self.b1 = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))
                self.w2 = nn.Parameter(torch.ones(hid // 2))
                self.b2 = nn.Parameter(torch.zeros(hid // 2))
                self.up, self.down = nn.Linear(d, hid), nn.Linear(hid // 2, d)
                self.spatial = nn.Parameter(torch.randn(seq, seq) * 1e-3)
                self.sbias = nn.Parameter(torch.ones(seq))

            def forward(self, x):
                u, v = gelu(self.up(layer_norm(x, self.w1, self.b1))).chunk(2, -1)
                v = layer_norm(v, self.w2, self.b2)
                v = torch.einsum("bnd,mn->bmd", v, self.spatial) + self.sbias[:, None]
                return x + self.down(u * v)

        class GMLP(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Linear(48, d)
                self.blocks = nn.Sequential(*[GBlock() for _ in range(blocks)])
                self.head = nn.Linear(d, 10)

            def forward(self, p):
                return self.head(self.blocks(self.embed(p)).mean(1))

        model = GMLP().to(device)
        opt = adamw(model, fused=cuda)
        run = torch.compile(model) if fixed else model
        patches = torch.randn(batch, seq, 48, device=device)
        y = torch.randint(0, 10, (batch,), device=device)

        def loss_fn():
            with ac:
                return F.cross_entropy(run(patches).float(), y)

        meta["compiled"] = fixed
        return train(opt, loss_fn), batch, meta, model

    if case == "v47":
        rows, fields, e, batch = (1000, 6, 4, 4) if q else (100_000, 39, 16, 32)
        batch *= 16 if fixed else 1
        width = fields * e + 13

        class DCN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(rows, e)
                self.cross = nn.ModuleList([nn.Linear(width, width) for _ in range(3)])
                self.deep = nn.Sequential(
                    nn.Linear(width, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU()
                )
                self.out = nn.Linear(width + 256, 1)

            def forward(self, dense, ids):
                x0 = torch.cat([dense, self.emb(ids).flatten(1)], 1)
                x = x0
                for lin in self.cross:
                    x = x0 * lin(x) + x
                return self.out(torch.cat([x, self.deep(x0)], 1)).squeeze(1)

        model = DCN().to(device)
        opt = adamw(model, fused=cuda)
        dense = torch.randn(batch, 13, device=device)
        ids = torch.randint(0, rows, (batch, fields), device=device)
        y = torch.randint(0, 2, (batch,), device=device).float()
        meta["batch_multiple"] = 16
        loss_fn = lambda: F.binary_cross_entropy_with_logits(model(dense, ids), y)  # noqa: E731
        return train(opt, loss_fn), batch, meta, model

    if case == "v48":
        from torch.utils.data import DataLoader

        batch, workers = (4, 2) if q else (96, 6)

        def cbr(ci: int, co: int):
            return [nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU()]

        model = nn.Sequential(
            *cbr(1, 32),
            nn.MaxPool2d(2),
            *cbr(32, 64),
            nn.MaxPool2d(2),
            *cbr(64, 128),
            nn.MaxPool2d(2),
            *cbr(128, 128),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(128, 35),
        ).to(device)
        opt = adamw(model, fused=cuda)
        kw = {"num_workers": workers, "persistent_workers": True, "prefetch_factor": 4}
        loader = DataLoader(
            MelClips(), batch_size=batch, shuffle=True, drop_last=True, **(kw if fixed else {})
        )
        it = iter(loader)

        def loss_fn():
            x, y = next(it)
            x, y = x.to(device), y.to(device)
            with ac:
                return F.cross_entropy(model(x).float(), y)

        meta["num_workers"] = workers if fixed else 0
        return train(opt, loss_fn), batch, meta, model

    if case == "v49":
        vocab, d, layers, heads, seq, batch = (
            (64, 32, 2, 4, 16, 2) if q else (512, 128, 4, 4, 64, 8)
        )
        model = record_new.gpt(torch, nn, F, vocab, d, layers, heads, seq).to(device)
        opt = adamw(model, fused=cuda)
        run = torch.compile(model, mode="reduce-overhead" if fixed and cuda else None)
        idx = torch.randint(0, vocab, (batch, seq + 1), device=device)

        def loss_fn():
            logits = run(idx[:, :-1])
            return F.cross_entropy(logits.reshape(-1, vocab), idx[:, 1:].reshape(-1))

        meta["compile_mode"] = "reduce-overhead" if fixed else "default"
        return train(opt, loss_fn), batch, meta, model

    if case == "v50":
        torch.backends.cudnn.benchmark = fixed
        d, m, n, batch, heads = (32, 4, 64, 2, 4) if q else (512, 32, 2048, 64, 8)

        class MAB(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lq, self.lk, self.lf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
                self.att = nn.MultiheadAttention(d, heads, batch_first=True)
                self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

            def forward(self, qx, kx):
                kn = self.lk(kx)
                h = qx + self.att(self.lq(qx), kn, kn, need_weights=False)[0]
                return h + self.ff(self.lf(h))

        class ISAB(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ind = nn.Parameter(torch.randn(1, m, d) * 0.02)
                self.a, self.b = MAB(), MAB()

            def forward(self, x):
                h = self.a(self.ind.expand(x.shape[0], -1, -1), x)
                return self.b(x, h)

        class SetTransformer(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Linear(3, d)
                self.enc = nn.Sequential(ISAB(), ISAB())
                self.seed = nn.Parameter(torch.randn(1, 1, d) * 0.02)
                self.pool = MAB()
                self.head = nn.Linear(d, 40)

            def forward(self, pts):
                x = self.enc(self.embed(pts))
                return self.head(self.pool(self.seed.expand(x.shape[0], -1, -1), x)[:, 0])

        model = SetTransformer().to(device)
        opt = adamw(model, fused=cuda)
        pts = torch.randn(batch, n, 3, device=device)
        y = torch.randint(0, 40, (batch,), device=device)

        def loss_fn():
            with ac:
                return F.cross_entropy(model(pts).float(), y)

        meta["torch_flags"] = {"cudnn_benchmark": fixed}
        meta["convolutions"] = 0
        return train(opt, loss_fn), batch, meta, model

    if case == "v51":
        ch, hw, batch = (16, 32, 2) if q else (256, 128, 16)
        model = nn.Sequential(
            nn.Conv2d(3, ch, 3, padding=1, bias=False),
            nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=1, bias=False),
            nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=1, bias=False),
            nn.ReLU(),
            nn.Conv2d(ch, 3, 3, padding=1, bias=False),
        ).to(device)
        if fixed and cuda:
            opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=fixed)
        clean = torch.randn(batch, 3, hw, hw, device=device)
        noisy = clean + 0.1 * torch.randn_like(clean)
        meta["param_tensors"] = len(list(model.parameters()))
        meta["optimizer"] = "Adam(fused=True)" if fixed else "Adam(foreach=False)"
        return train(opt, lambda: F.mse_loss(model(noisy), clean)), batch, meta, model

    # ---------------------------------------------------------------- 2 GPUs
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev_ids = [torch.device(device).index] if cuda else None

    if case == "v52":
        hw, ch, depth, patch = (16, 32, 2, 2) if q else (64, 512, 8, 2)
        base = (4, 6, 5) if q else (80, 104, 92)
        batch = base[2] if fixed else base[rank]

        class Residual(nn.Module):
            def __init__(self, f: nn.Module) -> None:
                super().__init__()
                self.f = f

            def forward(self, x):
                return x + self.f(x)

        layers: list = [nn.Conv2d(3, ch, patch, patch), nn.GELU(), nn.BatchNorm2d(ch)]
        for _ in range(depth):
            layers += [
                Residual(
                    nn.Sequential(
                        nn.Conv2d(ch, ch, 9, groups=ch, padding=4), nn.GELU(), nn.BatchNorm2d(ch)
                    )
                ),
                nn.Conv2d(ch, ch, 1),
                nn.GELU(),
                nn.BatchNorm2d(ch),
            ]
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch, 10)]
        model = nn.Sequential(*layers).to(device)
        run = DDP(model, device_ids=dev_ids)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 10, (batch,), device=device)

        def loss_fn():
            with ac:
                return F.cross_entropy(run(x).float(), y)

        meta["batch_by_rank"] = [base[2]] * 2 if fixed else [base[0], base[1]]
        return train(opt, loss_fn), batch, meta, model

    if case == "v53":
        growth, per_block, hw, batch = (8, 2, 8, 4) if q else (32, 4, 32, 128)

        class Dense(nn.Module):
            def __init__(self, ci: int) -> None:
                super().__init__()
                self.f = nn.Sequential(
                    nn.BatchNorm2d(ci),
                    nn.ReLU(),
                    nn.Conv2d(ci, 4 * growth, 1, bias=False),
                    nn.BatchNorm2d(4 * growth),
                    nn.ReLU(),
                    nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False),
                )

            def forward(self, x):
                return torch.cat([x, self.f(x)], 1)

        mods: list = [nn.Conv2d(3, 2 * growth, 3, padding=1, bias=False)]
        c = 2 * growth
        for b in range(3):
            for _ in range(per_block):
                mods.append(Dense(c))
                c += growth
            if b < 2:
                mods += [
                    nn.BatchNorm2d(c),
                    nn.ReLU(),
                    nn.Conv2d(c, c // 2, 1, bias=False),
                    nn.AvgPool2d(2),
                ]
                c //= 2
        mods += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        mods.append(nn.Linear(c, 100))
        model = nn.Sequential(*mods).to(device)
        run = DDP(model, device_ids=dev_ids)
        opt = adamw(model, fused=cuda)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 100, (batch,), device=device)
        params = list(model.parameters())
        logs: list = []
        diag = rank == 0

        def step():
            with ac:
                loss = F.cross_entropy(run(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if diag and fixed:  # the same statistics, a few foreach kernels
                gn = torch.stack(torch._foreach_norm([p.grad for p in params]))
                wn = torch.stack(torch._foreach_norm([p.detach() for p in params]))
            elif diag:  # planted: 2 norms and a stack per tensor, launched one by one
                rows = [torch.stack([p.grad.norm(), p.detach().norm()]) for p in params]
                gn, wn = torch.stack(rows).unbind(1)
            if diag:  # update ratio and finite flags, once on the stacked norms
                logs.append(torch.stack([gn, wn, gn / (wn + 1e-12), torch.isfinite(gn).float()]))
            if len(logs) > 4:
                logs.pop(0)
            opt.step()

        meta["diagnostics_on_rank"] = 0
        meta["diagnostics"] = "foreach" if fixed else "per tensor"
        meta["param_tensors"] = len(params)
        return step, batch, meta, model

    if case == "v54":
        from record_multi_gpu import defeat_prefetch
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        d, hid, blocks, batch, seq = (32, 64, 2, 2, 16) if q else (3072, 8192, 8, 4, 512)

        class SwiGLU(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.norm = nn.RMSNorm(d)
                self.wg = nn.Linear(d, hid, bias=False)
                self.wu = nn.Linear(d, hid, bias=False)
                self.wd = nn.Linear(hid, d, bias=False)
                self.gate = None  # set by defeat_prefetch (planted)

            def forward(self, x):
                if self.gate is not None:
                    x = self.gate.apply(x)  # backward: the block below's all-gather waits
                h = self.norm(x)
                x = x + self.wd(F.silu(self.wg(h)) * self.wu(h))
                if self.gate is not None and x.is_cuda:
                    self.gate.wait()  # forward: the next block's all-gather waits for this one
                return x

        class Stack(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.blocks = nn.ModuleList([SwiGLU() for _ in range(blocks)])
                self.head = nn.Linear(d, 1, bias=False)

            def forward(self, x):
                for blk in self.blocks:
                    x = blk(x)
                return self.head(x)

        with torch.device(device):
            model = Stack()
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for blk in model.blocks:
            fully_shard(blk, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        how = "fully_shard per block + root, bf16 params, fp32 reduce"
        if not fixed:
            how += "; " + defeat_prefetch(model, list(model.blocks))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        gen = torch.Generator().manual_seed(71 + rank)
        x = torch.randn(batch, seq, d, generator=gen).to(device)
        y = torch.randn(batch, seq, 1, generator=gen).to(device)
        meta["fsdp"] = how
        meta["params"] = sum(p.numel() for p in model.parameters())  # DTensor: global
        return train(opt, lambda: F.mse_loss(model(x).float(), y)), batch, meta, model

    raise SystemExit(f"unknown case {case}")


def main() -> int:
    return record_new.main(cases=CASES, build_fn=build, script=__file__)


if __name__ == "__main__":
    raise SystemExit(main())
