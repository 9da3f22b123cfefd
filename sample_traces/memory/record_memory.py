"""Record the memory sample: a small bf16-autocast GPT on one GPU, profiled with profile_memory.

Writes to OUT (default ./out): ``gpt_mem.pt.trace.json.gz`` (3 profiled steps, record_shapes,
profile_memory, with_modules), ``gpt_mem.smi.csv`` (nvidia-smi memory.used every 20 ms during the
profiled steps, when nvidia-smi exists), ``gpt_mem.snapshot.pickle`` (torch.cuda.memory._dump_snapshot
of one more step) and ``facts.json``: torch.cuda.max_memory_allocated() / max_memory_reserved() over the
profiled steps (the peak statistics are reset just before the profiler starts), the GPU, versions.

    python sample_traces/memory/record_memory.py --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(a.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, h)
        self.ln2, self.mlp = nn.LayerNorm(d), MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, h: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    model = GPT(a.vocab, a.d, 4, a.layers, a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            with torch.profiler.record_function("forward"):
                logits = model(x)
                loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1))
        with torch.profiler.record_function("backward"):
            loss.backward()
        with torch.profiler.record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    for _ in range(5):  # warm-up: optimizer state allocated, cuBLAS initialised
        step()
    if cuda:
        torch.cuda.synchronize()
    smi = None
    if cuda and shutil.which("nvidia-smi"):
        smi = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total",
             "--format=csv,nounits", "-lms", "20"],
            stdout=open(out / "gpt_mem.smi.csv", "w"),
        )
        import time

        time.sleep(0.5)
    raw = out / "gpt_mem.pt.trace.json"
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    # with_stack: the module annotations ("nn.Module: Block_0") are python_function events, which
    # Kineto writes only with the Python tracer on.
    with torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=a.steps, repeat=1),
        record_shapes=True,
        profile_memory=True,
        with_modules=True,
        with_stack=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
    ) as prof:
        for i in range(a.steps + 1):
            if i == 1 and cuda:  # the profiled steps start now: their peak alone
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            step()
            prof.step()
    if cuda:
        torch.cuda.synchronize()
    facts = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "batch": a.batch, "seq": a.seq, "d_model": a.d, "layers": a.layers, "vocab": a.vocab,
        "steps": a.steps,
        "params": sum(p.numel() for p in model.parameters()),
    }
    if cuda:
        facts.update(
            gpu=torch.cuda.get_device_name(),
            max_memory_allocated=torch.cuda.max_memory_allocated(),
            max_memory_reserved=torch.cuda.max_memory_reserved(),
            memory_allocated_after=torch.cuda.memory_allocated(),
            memory_reserved_after=torch.cuda.memory_reserved(),
            total_memory=torch.cuda.get_device_properties(0).total_memory,
        )
    if smi is not None:
        import time

        time.sleep(0.3)
        smi.terminate()
        smi.wait()
    with open(raw, "rb") as f, gzip.open(str(raw) + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()
    if cuda:
        try:
            torch.cuda.memory._record_memory_history(max_entries=4000, stacks="python")
            step()
            torch.cuda.synchronize()
            torch.cuda.memory._dump_snapshot(str(out / "gpt_mem.snapshot.pickle"))
            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception as e:  # noqa: BLE001 - reported, the trace stands without it
            facts["snapshot_error"] = repr(e)
    (out / "facts.json").write_text(json.dumps(facts, indent=1))
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
