#!/usr/bin/env python3
"""Record the "naive profile" samples: traces as a user writes them with ``torch.profiler`` alone
(no ``gpuscope.capture``), in two shapes that mislead a reader of the window.

    python sample_traces/record_naive.py --out DIR [--configs a,b]

Each config runs in a fresh Python process and writes DIR/<config>/<config>_rank0.pt.trace.json.gz
and DIR/<config>/timing.json (versions, what was run). Configs:

- ``naive_stub``: a small CNN (4 conv-BN-ReLU blocks, 64 ch, 64×64, batch 64), SGD, profiled with
  ``schedule(wait=1, warmup=1, active=3)`` over a loop of 4 iterations, ``prof.step()`` after each:
  the last ``prof.step()`` opens ``ProfilerStep#4`` while the profiler is still active, and the
  ``with`` block's exit closes it at once (a stub with nothing in it).
- ``naive_capture``: ``record_wild.py``'s GPT, small (4 layers, d 256, seq 128, batch 8), under
  ``torch.compile(mode="reduce-overhead")``, profiled from its first step with
  ``schedule(wait=0, warmup=0, active=5, repeat=1)`` (the cycle saved by ``on_trace_ready``): the window holds the compilation, the CUDA-graph trees'
  warm-up and capture (``cudaStreamBeginCapture``, ``cudaGraphInstantiate``) and the first replays.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = ("naive_stub", "naive_capture")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # record_wild, beside this file


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cnn(torch):
    nn = torch.nn
    layers = [nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def run_one(config: str, out: Path) -> None:
    """Record ``config`` into ``out`` (this process)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    dev = "cuda"
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"{config}_rank0.pt.trace.json"
    if config == "naive_stub":
        model = cnn(torch).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(64, 3, 64, 64, device=dev)
        y = torch.randint(0, 10, (64,), device=dev)
        for _ in range(3):  # warm cuDNN and the allocator before the profiled loop
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=3)) as prof:
            for _ in range(4):  # one iteration short of the schedule's cycle
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                prof.step()
        what = "CNN, schedule(wait=1, warmup=1, active=3), 4 iterations: the last step a stub"
    else:
        from record_wild import gpt  # the wild samples' GPT, smaller

        model = torch.compile(gpt(torch, 4096, 256, 4, 4, 128).to(dev), mode="reduce-overhead")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        idx = torch.randint(0, 4096, (8, 128), device=dev)
        sched = schedule(wait=0, warmup=0, active=5, repeat=1)
        done = lambda p: p.export_chrome_trace(str(raw))  # noqa: E731  (the one cycle)
        with profile(activities=acts, schedule=sched, on_trace_ready=done) as prof:
            for _ in range(6):
                torch.compiler.cudagraph_mark_step_begin()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = model(idx)
                loss = torch.nn.functional.cross_entropy(
                    logits.float().view(-1, 4096), idx.view(-1)
                )
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                prof.step()
        what = 'GPT, torch.compile(mode="reduce-overhead") profiled from its first step'
    torch.cuda.synchronize()
    if config == "naive_stub":
        prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    (out / "timing.json").write_text(
        json.dumps(
            {
                "config": config,
                "what": what,
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0),
                "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=1,
        )
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        run_one(args.one, args.out / args.one)
        return 0
    rc = 0
    for c in args.configs.split(","):
        log(f"{c}: recording")
        r = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--one", c])
        log(f"{c}: exit {r.returncode}")
        rc = rc or r.returncode
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
