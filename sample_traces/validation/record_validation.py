"""Record issue 43's validation set: planted-and-fixed pairs on models and sizes that
sample_traces/fixes does not have, each a profiled trace of the planted variant plus unprofiled
timings of planted vs fixed in fresh processes, interleaved.

    python record_validation.py drive --out DIR [--cases v01,v02] [--rounds 3] [--budget-s 520]
    python record_validation.py one --case v01 --variant planted|fixed --mode time|trace --out DIR

``--quick --cpu`` shrinks every model to check the recipe on a CPU. ``drive`` writes
``DIR/<case>/timing.json`` after each case and ``DIR/all.json`` at the end; with ``--tar T`` it
re-packs DIR into the tar.gz ``T`` after every case (so a timeout still returns what finished).

The timing harness (warm-up, then blocks of 5 steps, synchronised at both ends of each block) is
``timed`` of ../fixes/record_fixes.py; the trace goes through ``gpuscope.capture.profile_steps``
(its 5 untraced steps' median is ``gpuscope.untraced_step_ms``; wait 6, warmup 2, active 3).
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

QUICK = False

# case -> (model/size, planted cause, fix applied, expected gpuscope fix id, bound)
CASES: dict[str, dict] = {
    "v01": {
        "name": "dataloader_workers",
        "model": "Transformer encoder classifier (2 layers, d 256, seq 256), batch 64",
        "planted": "each sample tokenised in Python in the main process (num_workers=0)",
        "fix": "DataLoader(num_workers=6, persistent_workers=True, prefetch_factor=4)",
        "expected_fix": "dataloader_workers",
    },
    "v02": {
        "name": "pin_memory",
        "model": "1-D conv audio net (4 convs, 32k-sample clips), batch 128, bf16 autocast",
        "planted": "16.4 MB of audio per step copied from pageable memory",
        "fix": "batches pinned once, copied non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v03": {
        "name": "host_sync",
        "model": "2-layer GRU (hidden 512, seq 100), batch 128",
        "planted": "loss.item(), accuracy.item() and clip_grad_norm_(...).item() every step",
        "fix": "the three kept on the GPU (summed; read every 100 steps)",
        "expected_fix": "host_sync",
    },
    "v04": {
        "name": "mixed_precision",
        "model": "ViT-style encoder (6 layers, d 768, 196 patches), batch 64",
        "planted": "fp32 matmuls, TF32 off",
        "fix": "bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v05": {
        "name": "kernel_fusion",
        "model": "MLP-mixer-style blocks with hand-written RMSNorm and SwiGLU (6 blocks, d 384, 64x64 tokens)",
        "planted": "eager (many small elementwise kernels)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
    },
    "v06": {
        "name": "batch_size",
        "model": "MobileNet-style depthwise-separable CNN (32x32), batch 16",
        "planted": "batch 16",
        "fix": "batch 128 (per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 8,
    },
    "v07": {
        "name": "cudnn_benchmark",
        "model": "conv net with 7x7 and 3x3 convs (72, 120 channels, 48x48), batch 48",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v08": {
        "name": "activation_checkpointing",
        "model": "GPT-style LM (8 layers, d 1024, seq 512), batch 8, bf16 autocast",
        "planted": "torch.utils.checkpoint on every block (most of the GPU's memory free)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v09": {
        "name": "optimizer_foreach_false",
        "model": "deep residual MLP (48 blocks of Linear 256 + LayerNorm, a Linear head: 194 parameter tensors), batch 256",
        "planted": "AdamW(foreach=False): a Python loop of small kernels per parameter",
        "fix": "AdamW(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v10": {
        "name": "null_pin_memory",
        "model": "GPT-style LM (6 layers, d 1024, seq 256), batch 16, bf16 autocast (compute-bound)",
        "planted": "token ids (32 KB per step) copied from pageable memory",
        "fix": "token ids pinned, copied non_blocking=True (gains ~0: the copy is tiny)",
        "expected_fix": "pin_memory",
        "null": True,
    },
    "v11": {
        "name": "null_host_sync",
        "model": "ViT-style encoder (12 layers, d 1024, 256 patches), batch 96, bf16 autocast (long step)",
        "planted": "one loss.item() per step",
        "fix": "the loss summed on the GPU (gains ~0: one sync at the step's end of a long step)",
        "expected_fix": "host_sync",
        "null": True,
    },
    "v12": {
        "name": "batch_size_lstm",
        "model": "2-layer LSTM language model (vocab 4096, hidden 256, seq 64), batch 8",
        "planted": "batch 8",
        "fix": "batch 64 (per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 8,
    },
    "v13": {
        "name": "memory_near_full",
        "model": "conv encoder-decoder (64-128-256 channels, 128x128), batch 32, with a ballast tensor "
        "leaving 25% + 256 MiB over the step's peak free",
        "planted": "GPU memory nearly full (the allocator frees its cache and re-asks cudaMalloc)",
        "fix": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (same ballast)",
        "expected_fix": "memory_near_full",
    },
    "v15": {
        "name": "null_dataloader_workers",
        "model": "ViT-style encoder (8 layers, d 768, 64x64 images in 4x4 patches: 256 tokens), batch 64, "
        "bf16 autocast (compute-bound); samples are slices of a pre-made tensor (3.1 MB per step)",
        "planted": "num_workers=0 with a data path that costs almost nothing",
        "fix": "DataLoader(num_workers=6, persistent_workers=True, prefetch_factor=4) (gains ~0)",
        "expected_fix": "dataloader_workers",
        "null": True,
    },
}
ORDER = list(CASES)
HELD_OUT = {
    c for i, c in enumerate(ORDER) if i % 3 == 2
}  # v03, v06, v09, v12: fixed before any estimate


def log(msg: str) -> None:
    print(msg, flush=True)


class PyTokenised:
    """Samples "tokenised" in Python: a text of 1,500 characters made and hashed char by char."""

    def __init__(self, n: int, seq: int, vocab: int, chars: int) -> None:
        self.n, self.seq, self.vocab, self.chars = n, seq, vocab, chars

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import random

        import torch

        rng = random.Random(i)
        text = "".join(rng.choice("abcdefghij klmnop qrstu vwxyz") for _ in range(self.chars))
        ids, h = [], 0
        for ch in text:  # a byte-level "tokeniser"
            h = (h * 31 + ord(ch)) % self.vocab
            if ch == " ":
                ids.append(h)
                h = 0
        ids = (ids + [0] * self.seq)[: self.seq]
        return torch.tensor(ids), i % 4


def build(case: str, variant: str, device: str):
    """(step_fn, samples_per_step, meta, model)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    fixed = variant == "fixed"
    q = QUICK
    torch.manual_seed(4321)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    cuda = device == "cuda"
    meta: dict = {}

    def adam(model, **kw):
        return torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)

    def train(model, opt, loss_fn):
        def step():
            loss = loss_fn()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step

    def encoder(d, layers, heads):
        layer = nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
        )
        return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def gpt(vocab, d, layers, heads, seq, ckpt=False):
        from torch.utils.checkpoint import checkpoint

        class Block(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.qkv = nn.Linear(d, 3 * d)
                self.o = nn.Linear(d, d)
                self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

            def forward(self, x):
                b, t, _ = x.shape
                qkv = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
                x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
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
                    x = checkpoint(blk, x, use_reentrant=False) if ckpt else blk(x)
                return self.head(self.ln(x))

        return LM()

    ac = torch.autocast(device, dtype=torch.bfloat16, enabled=cuda)

    if case == "v01":
        d, seq, batch = (64, 32, 8) if q else (256, 256, 64)
        emb, enc, head = nn.Embedding(4096, d), encoder(d, 2, 4), nn.Linear(d, 4)
        model = nn.ModuleList([emb, enc, head]).to(device)
        opt = adam(model)
        ds = PyTokenised(100_000, seq, 4096, 300 if q else 1500)
        kw = {"num_workers": 6, "persistent_workers": True, "prefetch_factor": 4} if fixed else {}
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, **kw)
        it = iter(loader)

        def loss_fn():
            nonlocal it
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            x, y = x.to(device), y.to(device)
            with ac:
                h = enc(emb(x)).mean(dim=1)
                return F.cross_entropy(head(h).float(), y)

        meta["num_workers"] = 6 if fixed else 0
        return train(model, opt, loss_fn), batch, meta, model

    if case == "v02":
        n, batch = (4000, 16) if q else (32000, 128)
        model = nn.Sequential(
            nn.Conv1d(1, 32, 80, stride=16),
            nn.GELU(),
            nn.Conv1d(32, 64, 3, stride=2),
            nn.GELU(),
            nn.Conv1d(64, 128, 3, stride=2),
            nn.GELU(),
            nn.Conv1d(128, 128, 3, stride=2),
            nn.AdaptiveAvgPool1d(1),
            nn.Flatten(),
            nn.Linear(128, 35),
        ).to(device)
        opt = adam(model)
        pool = [(torch.randn(batch, 1, n), torch.randint(0, 35, (batch,))) for _ in range(4)]
        if fixed and cuda:
            pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
        k = 0

        def loss_fn():
            nonlocal k
            x, y = pool[k % len(pool)]
            k += 1
            x, y = x.to(device, non_blocking=fixed), y.to(device, non_blocking=fixed)
            with ac:
                return F.cross_entropy(model(x).float(), y)

        meta["bytes_per_step"] = batch * n * 4 + batch * 8
        return train(model, opt, loss_fn), batch, meta, model

    if case == "v03":
        hid, seq, batch = (64, 10, 16) if q else (512, 100, 128)

        class Seq(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rnn = nn.GRU(64, hid, num_layers=2, batch_first=True)
                self.head = nn.Linear(hid, 10)

            def forward(self, x):
                return self.head(self.rnn(x)[0][:, -1])

        model = Seq().to(device)
        opt = adam(model)
        x = torch.randn(batch, seq, 64, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        tot = torch.zeros(3, device=device)
        seen: list[float] = []

        def step():
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            acc = (out.argmax(-1) == y).float().mean()
            if fixed:
                tot.add_(torch.stack([loss.detach(), acc, gn]))
            else:  # planted: three host syncs per step
                seen.extend([loss.item(), acc.item(), gn.item()])

        return step, batch, meta, model

    if case in ("v04", "v11"):
        if case == "v04":
            d, layers, heads, tokens, batch = (64, 2, 4, 16, 4) if q else (768, 6, 12, 196, 64)
        else:
            d, layers, heads, tokens, batch = (64, 2, 4, 16, 4) if q else (1024, 12, 16, 256, 96)
        enc = encoder(d, layers, heads)
        patch = nn.Linear(768, d)
        head = nn.Linear(d, 100)
        model = nn.ModuleList([patch, enc, head]).to(device)
        opt = adam(model)
        x = torch.randn(batch, tokens, 768, device=device)
        y = torch.randint(0, 100, (batch,), device=device)
        amp = (case == "v04" and fixed) or (case == "v11" and cuda)
        tot = torch.zeros((), device=device)
        seen: list[float] = []

        def step():
            nonlocal tot
            with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
                loss = F.cross_entropy(head(enc(patch(x)).mean(dim=1)).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if case == "v11":
                if fixed:
                    tot += loss.detach()
                else:
                    seen.append(loss.item())  # planted: one sync at the end of a long step

        return step, batch, meta, model

    if case == "v15":
        d, layers, heads, hw, batch = (64, 2, 4, 16, 4) if q else (768, 8, 12, 64, 64)
        enc, head = encoder(d, layers, heads), nn.Linear(d, 100)
        patch = nn.Conv2d(3, d, 4, stride=4)  # 4x4 patches: (hw/4)^2 tokens

        def embed(x):
            return patch(x).flatten(2).transpose(1, 2)

        model = nn.ModuleList([patch, enc, head]).to(device)
        opt = adam(model)
        data = torch.utils.data.TensorDataset(
            torch.randn(batch * 8, 3, hw, hw), torch.randint(0, 100, (batch * 8,))
        )
        kw = {"num_workers": 6, "persistent_workers": True, "prefetch_factor": 4} if fixed else {}
        loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True, **kw)
        it = iter(loader)

        def loss_fn():
            nonlocal it
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            x, y = x.to(device), y.to(device)
            with ac:
                return F.cross_entropy(head(enc(embed(x)).mean(dim=1)).float(), y)

        meta["num_workers"] = 6 if fixed else 0
        meta["bytes_per_step"] = batch * 3 * hw * hw * 4
        return train(model, opt, loss_fn), batch, meta, model

    if case == "v05":
        d, tokens, batch, blocks = (64, 16, 8, 2) if q else (384, 64, 64, 6)

        class RMS(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = nn.Parameter(torch.ones(d))

            def forward(self, x):
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

        class Mix(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.n1, self.n2 = RMS(), RMS()
                self.tok = nn.Linear(tokens, tokens)
                self.gate, self.up, self.down = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

            def forward(self, x):
                h = self.n1(x).transpose(1, 2)
                x = x + torch.tanh(self.tok(h)).transpose(1, 2) * 0.5
                h = self.n2(x)
                g = self.gate(h)
                return x + self.down(g * torch.sigmoid(g) * self.up(h)) * 0.5

        model = nn.Sequential(*[Mix() for _ in range(blocks)]).to(device)
        opt = adam(model)
        run = torch.compile(model) if fixed else model
        x = torch.randn(batch, tokens, d, device=device)
        return train(model, opt, lambda: run(x).pow(2).mean()), batch, meta, model

    if case == "v06":
        batch = (4 if q else 16) * (8 if fixed else 1)

        def dws(cin, cout, stride):
            return nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin),
                nn.BatchNorm2d(cin),
                nn.ReLU6(),
                nn.Conv2d(cin, cout, 1),
                nn.BatchNorm2d(cout),
                nn.ReLU6(),
            )

        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, 1, 1),
            dws(32, 64, 1),
            dws(64, 128, 2),
            dws(128, 128, 1),
            dws(128, 256, 2),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(256, 10),
        ).to(device)
        opt = adam(model)
        x = torch.randn(batch, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        meta["batch_multiple"] = 8
        return train(model, opt, lambda: F.cross_entropy(model(x), y)), batch, meta, model

    if case == "v07":
        torch.backends.cudnn.benchmark = fixed
        batch, hw = (4, 16) if q else (48, 48)
        model = nn.Sequential(
            nn.Conv2d(3, 72, 7, padding=3),
            nn.ReLU(),
            nn.Conv2d(72, 72, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(72, 120, 3, padding=1, stride=2),
            nn.ReLU(),
            nn.Conv2d(120, 120, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(120, 10),
        ).to(device)
        opt = adam(model)
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        meta["torch_flags"] = {"cudnn_benchmark": fixed}
        return train(model, opt, lambda: F.cross_entropy(model(x), y)), batch, meta, model

    if case in ("v08", "v10"):
        if case == "v08":
            vocab, d, layers, heads, seq, batch = (
                (512, 64, 2, 4, 32, 4) if q else (8192, 1024, 8, 16, 512, 8)
            )
        else:
            vocab, d, layers, heads, seq, batch = (
                (512, 64, 2, 4, 32, 4) if q else (8192, 1024, 6, 16, 256, 16)
            )
        model = gpt(vocab, d, layers, heads, seq, ckpt=case == "v08" and not fixed).to(device)
        opt = adam(model)
        if case == "v08":
            idx = torch.randint(0, vocab, (batch, seq + 1), device=device)

            def loss_fn():
                with ac:
                    out = model(idx[:, :-1])
                return F.cross_entropy(out.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

            meta["checkpointed_blocks"] = 0 if fixed else layers
            return train(model, opt, loss_fn), batch, meta, model
        pool = [torch.randint(0, vocab, (batch, seq + 1)) for _ in range(4)]
        if fixed and cuda:
            pool = [p.pin_memory() for p in pool]
        k = 0

        def loss_fn():
            nonlocal k
            idx = pool[k % 4].to(device, non_blocking=fixed)
            k += 1
            with ac:
                out = model(idx[:, :-1])
            return F.cross_entropy(out.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

        meta["bytes_per_step"] = batch * (seq + 1) * 8
        return train(model, opt, loss_fn), batch, meta, model

    if case == "v09":
        d, blocks, batch = (32, 4, 16) if q else (256, 48, 256)

        class Res(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc, self.ln = nn.Linear(d, d), nn.LayerNorm(d)

            def forward(self, x):
                return x + F.relu(self.fc(self.ln(x)))

        model = nn.Sequential(*[Res() for _ in range(blocks)], nn.Linear(d, 1)).to(device)
        opt = adam(model, fused=True) if fixed and cuda else adam(model, foreach=fixed)
        x = torch.randn(batch, d, device=device)
        y = torch.randn(batch, 1, device=device)
        meta["param_tensors"] = len(list(model.parameters()))
        meta["optimizer"] = "AdamW(fused=True)" if fixed else "AdamW(foreach=False)"
        return train(model, opt, lambda: F.mse_loss(model(x), y)), batch, meta, model

    if case == "v12":
        vocab, hid, seq = (512, 64, 16) if q else (4096, 256, 64)
        batch = (4 if q else 8) * (8 if fixed else 1)

        class LSTMLM(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(vocab, hid)
                self.rnn = nn.LSTM(hid, hid, num_layers=2, batch_first=True)
                self.head = nn.Linear(hid, vocab)

            def forward(self, idx):
                return self.head(self.rnn(self.emb(idx))[0])

        model = LSTMLM().to(device)
        opt = adam(model)
        idx = torch.randint(0, vocab, (batch, seq + 1), device=device)

        def loss_fn():
            out = model(idx[:, :-1])
            return F.cross_entropy(out.reshape(-1, vocab), idx[:, 1:].reshape(-1))

        meta["batch_multiple"] = 8
        return train(model, opt, loss_fn), batch, meta, model

    if case == "v13":
        batch, hw = (2, 32) if q else (32, 128)
        c = (8, 16, 32) if q else (64, 128, 256)
        model = nn.Sequential(
            nn.Conv2d(3, c[0], 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(c[0], c[1], 3, padding=1, stride=2),
            nn.ReLU(),
            nn.Conv2d(c[1], c[2], 3, padding=1, stride=2),
            nn.ReLU(),
            nn.ConvTranspose2d(c[2], c[1], 2, stride=2),
            nn.ReLU(),
            nn.ConvTranspose2d(c[1], c[0], 2, stride=2),
            nn.ReLU(),
            nn.Conv2d(c[0], 3, 3, padding=1),
        ).to(device)
        opt = adam(model)
        gen = torch.Generator(device=device).manual_seed(5)
        sizes = [batch - 8, batch, batch - 4, batch - 12] if not q else [batch]

        k = 0

        def loss_fn():
            nonlocal k
            b = sizes[k % len(sizes)]  # varying batch: differently sized activations each step
            k += 1
            x = torch.randn(b, 3, hw, hw, device=device, generator=gen)
            with ac:
                return F.mse_loss(model(x).float(), x)

        step = train(model, opt, loss_fn)
        meta["ballast_bytes"] = 0
        if cuda:  # the ballast: leave ~10% over the step's peak free
            for _ in range(len(sizes) * 2):
                step()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            held = torch.cuda.memory_allocated()
            torch.cuda.empty_cache()
            free, total = torch.cuda.mem_get_info()
            ballast = int(free - (peak - held) * 1.25 - (256 << 20))
            meta["ballast_bytes"] = ballast
            meta["device_total_bytes"] = total
            meta["step_peak_bytes"] = peak - held
            meta["_ballast"] = torch.empty(ballast, dtype=torch.uint8, device=device)
        meta["expandable_segments"] = fixed
        return step, batch, meta, model

    raise SystemExit(f"unknown case {case}")


def one(args) -> int:
    if args.case == "v13" and args.variant == "fixed":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch
    from record_fixes import timed

    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    t_start = time.perf_counter()
    step, samples, meta, _model = build(args.case, args.variant, device)
    ballast = meta.pop("_ballast", None)
    warm = 3 if QUICK else (40 if args.case == "v05" else 20)
    n = 10 if QUICK else 40
    per = timed(step, device, warm, n)
    med = statistics.median(per)
    res = {
        "case": args.case,
        "variant": args.variant,
        "mode": args.mode,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "samples_per_step": samples,
        "step_ms_median": med,
        "step_ms_blocks": [round(x, 4) for x in per],
        "per_sample_us": med * 1e3 / samples,
        "setup_and_time_s": time.perf_counter() - t_start,
        **meta,
    }
    if device == "cuda":
        res["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    if args.mode == "trace":
        from gpuscope.capture import profile_steps

        out = Path(args.out)
        md = {
            "gpuscope.experiment": f"{args.case}_{CASES[args.case]['name']}",
            "samples_per_step": samples,
            "gpuscope.planted": {
                k: CASES[args.case][k] for k in ("planted", "fix", "expected_fix")
            },
        }
        with profile_steps(
            str(out),
            name=f"{args.case}_{CASES[args.case]['name']}",
            wait=6,
            warmup=2,
            active=3,
            sample_gpu=False,
            metadata=md,
            untraced_steps=5,
            profile_memory=args.case == "v13",
            model=None,
        ) as prof:
            while not prof.done:
                step()
                prof.step()
            if device == "cuda":
                torch.cuda.synchronize()
        res["trace"] = [Path(p).name for p in prof.trace_paths]
        res["trace_bytes"] = sum(Path(p).stat().st_size for p in prof.trace_paths)
        res["trace_untraced_step_ms"] = prof.untraced_step_ms
    del ballast
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def drive(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = args.cases.split(",") if args.cases else ORDER
    me = [sys.executable, str(Path(__file__).resolve())]
    extra = (["--quick"] if QUICK else []) + (["--cpu"] if args.cpu else [])
    results: list[dict] = []
    t0 = time.time()

    def child(case: str, variant: str, mode: str) -> dict | None:
        cmd = [*me, "one", "--case", case, "--variant", variant, "--mode", mode]
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
            f"[{time.time() - t0:6.1f}s] {case} {CASES[case]['name']:26s} {variant:7s} {mode:5s} "
            f"{r['step_ms_median']:9.3f} ms/step {r['per_sample_us']:9.3f} us/sample "
            f"({r['setup_and_time_s']:.1f}s)"
        )
        return r

    import torch
    from record_fixes import gemm_ratio

    dev = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    env = {
        "gemm_and_copy": gemm_ratio(dev) if not QUICK else {},
        "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    log(json.dumps(env))
    for case in cases:
        if time.time() - t0 > args.budget_s:
            log(f"budget spent: {case} and later skipped")
            break
        rows = []
        rec = child(case, "planted", "trace")
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
        p = [x["per_sample_us"] for x in rows if x["variant"] == "planted" and x["mode"] == "time"]
        f = [x["per_sample_us"] for x in rows if x["variant"] == "fixed" and x["mode"] == "time"]
        if p and f:
            gains = [100 * (1 - b / a) for a, b in zip(p, f, strict=False)]
            log(
                f"== {case} {CASES[case]['name']:26s} planted {statistics.median(p):9.3f} "
                f"fixed {statistics.median(f):9.3f} us/sample gain {statistics.median(gains):5.1f}% "
                f"[{min(gains):.1f}, {max(gains):.1f}]"
            )
    log(f"done in {time.time() - t0:.1f}s")
    return 0


def main() -> int:
    global QUICK
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("drive", "one"))
    ap.add_argument("--case")
    ap.add_argument("--cases")
    ap.add_argument("--variant", default="planted")
    ap.add_argument("--mode", default="time")
    ap.add_argument("--out", default="out_validation")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--budget-s", type=float, default=500)
    ap.add_argument("--child-timeout", type=float, default=120)
    ap.add_argument("--tar", default="")
    args = ap.parse_args()
    QUICK = args.quick
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return drive(args) if args.cmd == "drive" else one(args)


if __name__ == "__main__":
    raise SystemExit(main())
