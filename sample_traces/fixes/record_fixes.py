"""Plant one bottleneck per fix rule, record a profiled trace of it, and time it against the fix.

For each experiment (one per gpuscope fix rule) the driver runs, each in a FRESH Python process:

1. ``trace``: the planted variant, timed without the profiler (warm-up, then timed steps), then
   profiled for 3 active steps (``record_shapes=True``); the trace carries
   ``gpuscope.untraced_step_ms`` (the unprofiled median step) so gpuscope can calibrate against it;
2. ``time``: the planted and the fixed variant, without the profiler, interleaved
   (planted/fixed, fixed/planted, planted/fixed, ...), ``--rounds`` times each.

The models differ from those in sample_traces/before|after|ddp (an encoder LM) and wild (GPT):
a small CNN, a wide MLP regressor, a residual MLP with LayerNorm, an MLP autoencoder, a
SiLU-gated "ODE" MLP, a tiny ResNet and an odd-shaped CNN. Usage (GPU):

    python record_fixes.py drive --out DIR [--exps a,b] [--rounds 3]
    python record_fixes.py one --exp NAME --variant planted|fixed --mode time|trace --out DIR

``--quick`` shrinks everything for a dry run on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUICK = False
ALT = False
"""``--alt``: other model sizes for ``pin_memory`` (d_in 3072, hidden 2048, batch 2048: 25.2 MB per
step) and ``batch_size`` (1.5x the channels, batch 16 -> 64), to check the gain model on a
recording it was not made on."""


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------- experiments
EXPS = (
    "dataloader_workers",
    "pin_memory",
    "host_sync",
    "mixed_precision",
    "kernel_fusion",
    "batch_size",
    "cudnn_benchmark",
)


class CpuHeavyImages:
    """32×32 RGB images made on the CPU with a few numpy passes per sample (the planted cost)."""

    def __init__(self, n: int, rounds: int) -> None:
        self.n, self.rounds = n, rounds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        x = rng.standard_normal((3, 32, 32)).astype(np.float32)
        for _ in range(self.rounds):  # "decode + augment"
            x = np.tanh(x @ rng.standard_normal((32, 32)).astype(np.float32) * 0.1)
            x = np.flip(x, axis=2).copy()
        return torch.from_numpy(x), int(i % 10)


def build(exp: str, variant: str, device: str):
    """(step_fn, samples_per_step, meta): one training step of the experiment's variant."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    fixed = variant == "fixed"
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    q = QUICK
    meta: dict = {"exp": exp, "variant": variant}

    def adam(model):
        return torch.optim.AdamW(model.parameters(), lr=1e-4)

    if exp == "dataloader_workers":
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1, stride=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        ).to(device)
        opt = adam(model)
        batch = 16 if q else 128
        ds = CpuHeavyImages(100_000, 1 if q else 3)
        kw = {"num_workers": 6, "persistent_workers": True, "prefetch_factor": 4} if fixed else {}
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, **kw)
        it = iter(loader)

        def step():
            nonlocal it
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        meta["num_workers"] = 6 if fixed else 0
        return step, batch, meta

    if exp == "pin_memory":
        d_in = 256 if q else (3072 if ALT else 2048)
        batch = 64 if q else (2048 if ALT else 4096)
        hid = 2048 if ALT else 1024
        model = nn.Sequential(nn.Linear(d_in, hid), nn.GELU(), nn.Linear(hid, 1)).to(device)
        opt = adam(model)
        pool = [(torch.randn(batch, d_in), torch.randn(batch, 1)) for _ in range(4)]
        if fixed and device == "cuda":
            pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
        k = 0

        def step():
            nonlocal k
            x, y = pool[k % len(pool)]
            k += 1
            x, y = x.to(device, non_blocking=fixed), y.to(device, non_blocking=fixed)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                loss = F.mse_loss(model(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        meta["bytes_per_step"] = batch * (d_in + 1) * 4
        meta["alt"] = ALT
        return step, batch, meta

    if exp == "host_sync":
        d = 128 if q else 1024
        batch = 32 if q else 512
        n_blocks = 2 if q else 12

        class Res(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ln = nn.LayerNorm(d)
                self.fc = nn.Linear(d, d)

            def forward(self, x):
                return x + F.gelu(self.fc(self.ln(x)))

        model = nn.Sequential(*[Res() for _ in range(n_blocks)], nn.Linear(d, 1)).to(device)
        opt = adam(model)
        x = torch.randn(batch, d, device=device)
        y = torch.randn(batch, 1, device=device)
        total = torch.zeros((), device=device)
        seen: list[float] = []

        def step():
            nonlocal total
            loss = F.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if fixed:
                total += loss.detach()
            else:
                seen.append(loss.item())  # planted: a host sync every step

        return step, batch, meta

    if exp == "mixed_precision":
        d = 256 if q else 4096
        batch = 64 if q else 2048
        model = nn.Sequential(
            nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, d)
        ).to(device)
        opt = adam(model)
        x = torch.randn(batch, d, device=device)

        def step():
            with torch.autocast(device, dtype=torch.bfloat16, enabled=fixed):
                loss = F.mse_loss(model(x).float(), x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step, batch, meta

    if exp == "kernel_fusion":
        d = 64 if q else 256
        batch = 32 if q else 256
        n_blocks = 2 if q else 8

        class OdeBlock(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc = nn.Linear(d, d)
                self.scale = nn.Parameter(torch.ones(d))

            def forward(self, x):
                h = self.fc(x)
                h = h * torch.sigmoid(h) * self.scale  # SiLU-gated
                h = torch.tanh(h) * 0.5 + h * 0.5
                return x + 0.1 * (h - h.mean(dim=-1, keepdim=True))

        model = nn.Sequential(*[OdeBlock() for _ in range(n_blocks)]).to(device)
        opt = adam(model)
        run = torch.compile(model) if fixed else model
        x = torch.randn(batch, d, device=device)

        def step():
            loss = run(x).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step, batch, meta

    if exp == "batch_size":
        c1, c2 = (48, 96) if ALT else (32, 64)

        class TinyRes(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = nn.Conv2d(3, c1, 3, padding=1)
                self.b1 = nn.Conv2d(c1, c1, 3, padding=1)
                self.bn1 = nn.BatchNorm2d(c1)
                self.b2 = nn.Conv2d(c1, c2, 3, padding=1, stride=2)
                self.bn2 = nn.BatchNorm2d(c2)
                self.head = nn.Linear(c2, 10)

            def forward(self, x):
                x = F.relu(self.stem(x))
                x = x + F.relu(self.bn1(self.b1(x)))
                x = F.relu(self.bn2(self.b2(x)))
                return self.head(x.mean(dim=(2, 3)))

        model = TinyRes().to(device)
        opt = adam(model)
        batch = (8 if q else (16 if ALT else 32)) * (4 if fixed else 1)
        x = torch.randn(batch, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (batch,), device=device)

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        meta["batch_multiple"] = 4
        meta["alt"] = ALT
        return step, batch, meta

    if exp == "cudnn_benchmark":
        torch.backends.cudnn.benchmark = fixed
        model = nn.Sequential(
            nn.Conv2d(3, 96, 5, padding=2),
            nn.ReLU(),
            nn.Conv2d(96, 96, 5, padding=2),
            nn.ReLU(),
            nn.Conv2d(96, 160, 3, padding=1, stride=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(160, 10),
        ).to(device)
        opt = adam(model)
        batch = 8 if q else 64
        hw = 16 if q else 56
        x = torch.randn(batch, 3, hw, hw, device=device)
        y = torch.randint(0, 10, (batch,), device=device)

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        meta["torch_flags"] = {"cudnn_benchmark": fixed}
        return step, batch, meta

    raise SystemExit(f"unknown experiment {exp}")


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed(step, device: str, warmup: int, steps: int) -> list[float]:
    """Wall ms of blocks of steps (synchronize before and after each block of 5 steps)."""
    for _ in range(warmup):
        step()
    sync(device)
    per: list[float] = []
    block = 5
    for _ in range(max(1, steps // block)):
        t0 = time.perf_counter()
        for _ in range(block):
            step()
        sync(device)
        per.append((time.perf_counter() - t0) * 1e3 / block)
    return per


def profiled_steps(step, device: str, path: Path, metadata: dict) -> None:
    """Six steps under torch.profiler (1 waited, 2 warm-up, 3 recorded, shapes on), ``metadata``
    (each value as JSON) added at the fourth, exported as a Chrome trace to ``path``."""
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    with profile(
        activities=acts, schedule=schedule(wait=1, warmup=2, active=3, repeat=1), record_shapes=True
    ) as prof:
        for i in range(6):
            step()
            if i == 3:
                for key, value in metadata.items():
                    prof.add_metadata_json(key, json.dumps(value))
            prof.step()
        sync(device)
    prof.export_chrome_trace(str(path))


def one(args) -> int:
    import torch

    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    t_start = time.perf_counter()
    step, samples, meta = build(args.exp, args.variant, device)
    warm = 3 if QUICK else (30 if args.exp != "kernel_fusion" else 40)
    n = 10 if QUICK else 60
    per = timed(step, device, warm, n)
    med = statistics.median(per)
    res = {
        "exp": args.exp,
        "variant": args.variant,
        "mode": args.mode,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "samples_per_step": samples,
        "step_ms_median": med,
        "step_ms_blocks": per,
        "per_sample_us": med * 1e3 / samples,
        "setup_and_time_s": time.perf_counter() - t_start,
        **{k: v for k, v in meta.items() if k not in ("exp", "variant")},
    }
    if args.mode == "trace":
        out = Path(args.out)
        tag = "" if args.variant == "planted" else f"_{args.variant}"
        path = out / f"{args.exp}{tag}_rank0.pt.trace.json.gz"
        extra = {"gpuscope.experiment": args.exp}
        if "torch_flags" in meta:
            extra["gpuscope.torch_flags"] = meta["torch_flags"]
        profiled_steps(
            step,
            device,
            path,
            {"gpuscope.untraced_step_ms": med, "samples_per_step": samples, **extra},
        )
        res["trace"] = path.name
        res["trace_bytes"] = path.stat().st_size
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def gemm_ratio(device: str) -> dict:
    """fp32 (no TF32) vs bf16 matmul time on this GPU at a few square sizes."""
    import torch

    out = {}
    if device != "cuda":
        return out
    torch.backends.cuda.matmul.allow_tf32 = False
    for n in (512, 1024, 2048, 4096):
        t = {}
        for dt in (torch.float32, torch.bfloat16):
            a = torch.randn(n, n, device=device, dtype=dt)
            b = torch.randn(n, n, device=device, dtype=dt)
            for _ in range(5):
                a @ b
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20):
                a @ b
            e1.record()
            torch.cuda.synchronize()
            t[str(dt)] = e0.elapsed_time(e1) / 20
        out[n] = {
            "fp32_ms": t["torch.float32"],
            "bf16_ms": t["torch.bfloat16"],
            "ratio": t["torch.float32"] / t["torch.bfloat16"],
        }
    # pinned vs pageable host-to-device bandwidth, 32 MB
    x = torch.randn(8 << 20)
    xp = x.pin_memory()
    for name, src in (("pageable", x), ("pinned", xp)):
        for _ in range(3):
            src.to(device)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            src.to(device, non_blocking=name == "pinned")
        torch.cuda.synchronize()
        out[f"h2d_{name}_gbps"] = 10 * x.numel() * 4 / (time.perf_counter() - t0) / 1e9
    return out


def drive(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    exps = args.exps.split(",") if args.exps else list(EXPS)
    me = [sys.executable, str(Path(__file__).resolve())]
    extra = ["--quick"] if QUICK else []
    if ALT:
        extra.append("--alt")
    if args.cpu:
        extra.append("--cpu")
    results: list[dict] = []
    t0 = time.time()

    def child(exp: str, variant: str, mode: str) -> dict | None:
        cmd = [*me, "one", "--exp", exp, "--variant", variant, "--mode", mode]
        cmd += ["--out", str(out / exp), *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.child_timeout)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode or not line:
            log(f"FAILED {exp} {variant} {mode} rc={p.returncode}\n{p.stderr[-3000:]}")
            return None
        r = json.loads(line[-1][7:])
        log(
            f"[{time.time() - t0:6.1f}s] {exp:20s} {variant:7s} {mode:5s} "
            f"{r['step_ms_median']:9.3f} ms/step {r['per_sample_us']:9.3f} us/sample"
        )
        return r

    import torch

    dev = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    env = {
        "gemm_and_copy": gemm_ratio(dev),
        "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    log(json.dumps(env))
    for exp in exps:
        if time.time() - t0 > args.budget_s:
            log(f"budget spent: {exp} and later skipped")
            break
        rows = []
        for variant in ("planted", "fixed") if exp in args.trace_fixed.split(",") else ("planted",):
            if variant == "planted" and args.no_trace:
                continue
            rec = child(exp, variant, "trace")
            rows += [rec] if rec else []
        for r in range(args.rounds):
            order = ("planted", "fixed") if r % 2 == 0 else ("fixed", "planted")
            for v in order:
                res = child(exp, v, "time")
                if res:
                    res["round"] = r
                    rows.append(res)
        results += rows
        timing = {"env": env, "runs": rows}
        (out / exp).mkdir(parents=True, exist_ok=True)
        (out / exp / "timing.json").write_text(json.dumps(timing, indent=1))
    (out / "all.json").write_text(json.dumps({"env": env, "runs": results}, indent=1))
    for exp in exps:
        p = [
            r["per_sample_us"]
            for r in results
            if r["exp"] == exp and r["variant"] == "planted" and r["mode"] == "time"
        ]
        f = [
            r["per_sample_us"]
            for r in results
            if r["exp"] == exp and r["variant"] == "fixed" and r["mode"] == "time"
        ]
        if p and f:
            gains = [100 * (1 - b / a) for a, b in zip(p, f, strict=False)]
            log(
                f"{exp:20s} planted {statistics.median(p):9.3f} fixed {statistics.median(f):9.3f} "
                f"us/sample gain {statistics.median(gains):5.1f}% [{min(gains):.1f}, {max(gains):.1f}]"
            )
    return 0


def main() -> int:
    global QUICK, ALT
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("drive", "one"))
    ap.add_argument("--exp")
    ap.add_argument("--exps")
    ap.add_argument("--variant", default="planted")
    ap.add_argument("--mode", default="time")
    ap.add_argument("--out", default="out_fixes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--alt", action="store_true", help="other model sizes (pin_memory, batch_size)")
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument(
        "--trace-fixed", default="", help="experiments whose fixed variant is traced too"
    )
    ap.add_argument("--no-trace", action="store_true", help="time only (no planted trace)")
    ap.add_argument("--child-timeout", type=float, default=150)
    args = ap.parse_args()
    QUICK = args.quick
    ALT = args.alt
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return drive(args) if args.cmd == "drive" else one(args)


if __name__ == "__main__":
    raise SystemExit(main())
