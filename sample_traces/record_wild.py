#!/usr/bin/env python3
"""Record the "traces from the wild" samples: shapes of trace that real users bring and that the
before/after job does not have.

    python sample_traces/record_wild.py --out DIR [--configs a,b] [--device cuda]

Each config runs in a fresh Python process and writes DIR/<config>/<config>_rank0.pt.trace.json.gz
through ``gpuscope.capture.profile_steps`` (so the trace carries ``gpuscope.untraced_step_ms`` and the
model's parameter count) plus DIR/<config>/timing.json (step time measured without the profiler by
CUDA events, versions, what was run). Configs:

- ``resnet50_fp16``: torchvision ResNet-50, batch 64 of 224², fp16 autocast + GradScaler,
  ``cudnn.benchmark=True``, SGD: cuDNN convolution kernels at half precision.
- ``resnet50_bf16``: the same with bf16 autocast and ``cudnn.benchmark=False``.
- ``cuda_only``: ResNet-18 fp32, recorded with ``activities=[CUDA]`` only (no CPU ops: the launching
  threads have runtime events but no ``cpu_op``).
- ``gpt_compiled``: a GPT-style decoder (8 layers, d=768, seq 512, batch 16), bf16 autocast,
  ``torch.compile``, fused AdamW, 4 pinned DataLoader workers.
- ``gpt_cudagraphs``: the same compiled with ``mode="reduce-overhead"`` (CUDA graphs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = ("resnet50_fp16", "resnet50_bf16", "cuda_only", "gpt_compiled", "gpt_cudagraphs")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def gpt(torch, vocab: int, d: int, layers: int, heads: int, seq: int):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).unbind(2)
            a = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))

    return GPT()


class Tokens:
    """Random token sequences (x, y) of length ``seq``; the CPU cost of a real tokenised corpus read."""

    def __init__(self, torch, vocab: int, seq: int, n: int = 1 << 16) -> None:
        self.torch, self.vocab, self.seq, self.n = torch, vocab, seq, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = self.torch.Generator().manual_seed(i)
        t = self.torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return t[:-1], t[1:]


def run_config(name: str, out: Path, device: str) -> dict:
    import torch
    from gpuscope.capture import profile_steps
    from torch.profiler import ProfilerActivity

    torch.manual_seed(1234)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    meta: dict = {"config": name}
    activities = None
    scaler = None
    amp_dtype = None
    loader_it = None

    if name.startswith("resnet") or name == "cuda_only":
        import torchvision

        arch = torchvision.models.resnet18 if name == "cuda_only" else torchvision.models.resnet50
        model = arch(weights=None).to(dev)
        batch = 64
        torch.backends.cudnn.benchmark = name == "resnet50_fp16"
        if name == "resnet50_fp16":
            amp_dtype, scaler = torch.float16, torch.amp.GradScaler("cuda", enabled=cuda)
        elif name == "resnet50_bf16":
            amp_dtype = torch.bfloat16
        else:
            activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        host_x = torch.randn(batch, 3, 224, 224).pin_memory() if cuda else torch.randn(batch, 3, 224, 224)
        host_y = torch.randint(0, 1000, (batch,))
        host_y = host_y.pin_memory() if cuda else host_y
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        meta["samples_per_step"] = batch

        def next_batch():
            return host_x.to(dev, non_blocking=True), host_y.to(dev, non_blocking=True)

        def loss_of(x, y):
            return loss_fn(model(x), y)

    else:
        vocab, d, layers, heads, seq, batch = 8192, 768, 8, 12, 512, 16
        base = gpt(torch, vocab, d, layers, heads, seq).to(dev)
        mode = "reduce-overhead" if name == "gpt_cudagraphs" else "default"
        model = torch.compile(base, mode=mode)
        amp_dtype = torch.bfloat16
        opt = torch.optim.AdamW(base.parameters(), lr=3e-4, fused=cuda)
        loader = torch.utils.data.DataLoader(
            Tokens(torch, vocab, seq), batch_size=batch, num_workers=4, pin_memory=cuda,
            persistent_workers=True, prefetch_factor=4, drop_last=True,
        )
        loader_it = iter(loader)
        meta.update(samples_per_step=batch, tokens_per_step=batch * seq)
        n_matmul = layers * 12 * d * d + vocab * d
        meta["model_flops_per_step"] = 6 * n_matmul * batch * seq + 12 * batch * seq * seq * d * layers
        meta["model_flops_formula"] = "6*N_matmul*T + 12*B*S^2*d*L (causal attention counted in full)"

        def next_batch():
            x, y = next(loader_it)
            return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

        def loss_of(x, y):
            return torch.nn.functional.cross_entropy(model(x).view(-1, vocab), y.view(-1))

    def step() -> None:
        x, y = next_batch()
        with torch.autocast(dev.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    t0 = time.perf_counter()
    for _ in range(15):  # warm-up: compilation, cuDNN autotuning, allocator
        step()
    if cuda:
        torch.cuda.synchronize()
    log(f"[{name}] warm-up done in {time.perf_counter() - t0:.1f} s")
    n = 30
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)] if cuda else []
    t0 = time.perf_counter()
    for i in range(n):
        if cuda:
            ev[i].record()
        step()
    if cuda:
        ev[n].record()
        torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3 / n
    per = [ev[i].elapsed_time(ev[i + 1]) for i in range(n)] if cuda else [wall_ms]
    log(f"[{name}] untraced (CUDA events): median {statistics.median(per):.3f} ms/step, wall {wall_ms:.3f}")

    kw: dict = {"name": name, "wait": 1, "warmup": 2, "active": 2, "interval_ms": 100,
                "metadata": meta, "model": model}
    if activities is not None:
        kw["activities"] = activities
    t0 = time.perf_counter()
    with profile_steps(out / name, **kw) as prof:
        while not prof.done:
            step()
            prof.step()
    log(f"[{name}] profiled {prof.steps} steps in {time.perf_counter() - t0:.1f} s; "
        f"capture's untraced step {prof.untraced_step_ms:.3f} ms; trace {prof.trace_paths}")
    if loader_it is not None:
        del loader_it
    return {
        "config": name,
        "gpu_name": torch.cuda.get_device_name(dev) if cuda else platform.processor(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if cuda else None,
        "batch": batch,
        "metadata": meta,
        "untraced_cuda_events_median_ms": round(statistics.median(per), 4),
        "untraced_cuda_events_ms": [round(x, 4) for x in per],
        "untraced_wall_mean_ms": round(wall_ms, 4),
        "capture_untraced_step_ms": prof.untraced_step_ms,
        "steps_profiled": prof.steps,
        "activities": [str(a) for a in activities] if activities else "CPU+CUDA",
        "trace_files": [p.name for p in prof.trace_paths],
        "nvml_file": prof.nvml_path.name if prof.nvml_path else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", help="run this one config in this process (used by the driver)")
    a = ap.parse_args()
    if a.config:
        doc = run_config(a.config, a.out, a.device)
        (a.out / a.config / "timing.json").write_text(json.dumps(doc, indent=1) + "\n")
        return 0
    rc = 0
    for name in a.configs.split(","):
        log(f"== {name}")
        r = subprocess.run([sys.executable, __file__, "--out", str(a.out), "--device", a.device,
                            "--config", name], env=os.environ.copy())
        rc = rc or r.returncode
        log(f"== {name}: exit {r.returncode}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
