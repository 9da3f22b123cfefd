#!/usr/bin/env python3
"""Record real 2-rank runs with known, planted behaviour: DDP stragglers, uneven work, FSDP2 with
and without its all-gather prefetch, tensor parallel (issue 44; the FSDP pair also feeds issue 43).

    python record_multi_gpu.py drive --out DIR [--cpu] [--quick] [--budget-s 540]
        the whole plan, each run a fresh ``torchrun --nproc_per_node 2`` job; a tar.gz per
        group (ddp, fsdp, tp) is written to DIR as soon as the group is done
    torchrun --standalone --nproc_per_node 2 record_multi_gpu.py one --case CASE --mode trace|time ...
        one job (what ``drive`` starts)

    python record_multi_gpu.py drive --first-fixes ddp_clean,tp --rounds 5 --out DIR
        the first fix gpuscope names on these cases (torch.compile of the model) timed: per round
        the planted run and the compiled one, fresh jobs, in alternating order, no trace
        (first_fix_timing.json in a tar.gz of its own)

    python record_multi_gpu.py drive --first-fixes ddp_clean --base-variant compiled \
        --fix-variant compiled_cg --rounds 4 --out DIR
        the same, a compiled run against its own next fix (CUDA graphs)

Cases (``--case``) and what is planted (``--variant planted``; ``removed`` runs the same code
without it; ``compiled`` runs the planted code with ``model.compile()``, torch.compile of the
model in place, inside DDP or after ``parallelize_module``; ``compiled_ddp`` compiles the DDP
wrapper; ``compiled_cg`` is ``model.compile(mode="reduce-overhead")``, CUDA graphs; a compiled
variant's trace goes to ``OUT/<case>_<variant>/``):

- ``ddp_clean``: DDP, nothing planted (the "removed" run of the three DDP plants below);
- ``ddp_straggler_steps``: rank 1 sleeps in its data path for ``3 x`` the clean step at chosen
  steps: profiled steps 9 and 11 (the 2nd and 4th of the 5 active steps 8-12); unprofiled, the
  2nd and 4th of every 5 steps;
- ``ddp_straggler_every``: rank 1 sleeps ``1 x`` the clean step in its data path every step;
- ``ddp_uneven``: rank 1's batch is 1.5x rank 0's (12 vs 8 sequences);
- ``fsdp_prefetch``: FSDP2 ``fully_shard`` per block + root, bf16 params, default prefetching;
- ``fsdp_noprefetch``: the same with its prefetch defeated: each block's all-gather streams wait for
  the compute stream at the block's end (forward) and start (backward), and backward prefetch is
  turned off (each block "prefetches" itself), so every all-gather is exposed;
- ``tp``: tensor parallel on 2 GPUs (q/k/v and fc1 column-wise, out-proj and fc2 row-wise).

Every job times ``--timed-steps`` unprofiled steps (CUDA events at each step's start: per-step
times without a sync per step; wall time with a sync at both ends), and in ``trace`` mode then
profiles through ``gpuscope.capture.profile_steps`` (wait 6 of which 5 untraced-timed, warmup 2,
active 5; ``record_shapes``), one trace per rank. Rank 0 prints ``RESULT {json}`` with every
rank's times.
"""

from __future__ import annotations

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

CASES = (
    "ddp_clean",
    "ddp_straggler_steps",
    "ddp_straggler_every",
    "ddp_uneven",
    "fsdp_prefetch",
    "fsdp_noprefetch",
    "tp",
)
WAIT, WARMUP, ACTIVE = 6, 2, 5  # capture schedule (wait >= untraced_steps + 1)
ACTIVE_STEPS = list(range(WAIT + WARMUP, WAIT + WARMUP + ACTIVE))  # ProfilerStep numbers 8..12
PLANT_STEPS_TRACE = [ACTIVE_STEPS[1], ACTIVE_STEPS[3]]  # 9, 11
STRAGGLER = 1  # the rank that is planted


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------ model
def gpt(vocab: int, d: int, n_layers: int, n_heads: int, seq: int):
    """A GPT-style decoder: token + position embeddings, pre-LN blocks (separate q, k, v so that
    tensor parallel can split them by heads), causal SDPA, GELU MLP, tied-free LM head."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.q = nn.Linear(d, d, bias=False)
            self.k = nn.Linear(d, d, bias=False)
            self.v = nn.Linear(d, d, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d, bias=False)
            self.fc2 = nn.Linear(4 * d, d, bias=False)
            self.head_dim = d // n_heads
            self.gate = None  # set by fsdp_noprefetch

        def forward(self, x):
            if self.gate is not None:
                x = self.gate.apply(x)  # backward: the block below's all-gather waits for this one
            b, t, _ = x.shape
            h = self.ln1(x)
            q, k, v = self.q(h), self.k(h), self.v(h)
            nh = q.shape[-1] // self.head_dim  # local heads under tensor parallel
            q, k, v = (z.view(b, t, nh, self.head_dim).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, nh * self.head_dim))
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            if self.gate is not None and x.is_cuda:
                self.gate.wait()  # forward: the next block's all-gather waits for this block
            return x

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList([Block() for _ in range(n_layers)])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return GPT()


def sizes(case: str, quick: bool) -> dict:
    if quick:
        return {"vocab": 512, "d": 64, "n_layers": 2, "n_heads": 4, "seq": 32, "batch": 4}
    if case.startswith("fsdp"):
        return {"vocab": 8192, "d": 2048, "n_layers": 8, "n_heads": 16, "seq": 512, "batch": 8}
    if case == "tp":
        return {"vocab": 8192, "d": 2048, "n_layers": 6, "n_heads": 16, "seq": 512, "batch": 8}
    return {"vocab": 8192, "d": 768, "n_layers": 6, "n_heads": 12, "seq": 512, "batch": 8}


def defeat_prefetch(model, blocks) -> str:
    """Make every FSDP2 all-gather wait for the compute before it (no overlap); returns how."""
    import torch

    def streams():
        ctx = blocks[0]._get_fsdp_state()._comm_ctx
        return ctx.all_gather_copy_in_stream, ctx.all_gather_stream

    def wait() -> None:
        cur = torch.cuda.current_stream()
        try:
            ss = streams()
        except AttributeError:  # another torch's FSDP2 internals: wait on the host instead
            cur.synchronize()
            return
        for s in ss:
            s.wait_stream(cur)

    class Gate(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            if g.is_cuda:
                wait()
            return g

    Gate.wait = staticmethod(wait)  # type: ignore[attr-defined]
    for blk in blocks:
        blk.gate = Gate
        blk.set_modules_to_backward_prefetch([blk])  # non-empty: no default backward prefetch
    return "gate: all-gather streams wait_stream(compute) at block end (fwd) / start (bwd); backward prefetch off"


# ------------------------------------------------------------------ one job
def one(args) -> int:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    cuda = torch.cuda.is_available() and not args.cpu
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    case, planted = args.case, args.variant != "removed"
    sz = sizes(case, args.quick)
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = gpt(sz["vocab"], sz["d"], sz["n_layers"], sz["n_heads"], sz["seq"]).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    batch = sz["batch"] * args.batch_mult  # --batch-mult: the batch_size fix, timed per sample
    if case == "ddp_uneven" and planted and rank == STRAGGLER:
        batch = batch * 3 // 2
    how = ""
    autocast = True
    if case.startswith("ddp"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        run = DDP(model, device_ids=[local] if cuda else None)
        how = "DDP(bucket_cap_mb=25), bf16 autocast"
    elif case.startswith("fsdp"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for blk in model.blocks:
            fully_shard(blk, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        run = model
        autocast = False
        how = "fully_shard per block + root, MixedPrecisionPolicy(bf16 params, fp32 reduce), reshard_after_forward default (True)"
        if case == "fsdp_noprefetch" and planted:
            how += "; " + defeat_prefetch(model, list(model.blocks))
    elif case == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        mesh = init_device_mesh(dev.type, (world,))
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
        run = model
        how = "parallelize_module per block (q,k,v,fc1 Colwise; o,fc2 Rowwise), embeddings/head replicated, bf16 autocast"
    else:
        raise SystemExit(f"unknown case {case}")
    if args.variant == "compiled":
        model.compile()  # the module DDP (or the tensor-parallel plan) runs, compiled in place
        how += "; model.compile()"
    elif args.variant == "compiled_cg":
        # the compiled model's forward and backward replayed as CUDA graphs; DDP's all-reduce
        # and the optimizer stay outside them
        model.compile(mode="reduce-overhead")
        how += '; model.compile(mode="reduce-overhead")'
    elif args.variant == "compiled_ddp":
        run = torch.compile(run)  # the DDP wrapper compiled: Dynamo splits at its buckets
        how += "; torch.compile(DDP(model))"
    # one AdamW over the DTensor parameters and one over the rest (tp: replicated embeddings/head):
    # foreach kernels cannot mix DTensors and plain tensors
    from torch.distributed.tensor import DTensor

    groups = [[p for p in model.parameters() if isinstance(p, DTensor) == d] for d in (True, False)]
    opts = [torch.optim.AdamW(g, lr=1e-4) for g in groups if g]

    class _Opts:
        def zero_grad(self, set_to_none: bool = True) -> None:
            for o in opts:
                o.zero_grad(set_to_none=set_to_none)

        def step(self) -> None:
            for o in opts:
                o.step()

    opt = _Opts()
    # the data: a batch made on the CPU each step, pinned, copied without blocking
    gen = torch.Generator().manual_seed(99 + (0 if case == "tp" else rank))
    sleep_s = 0.0
    plant_at: set[int] = set()

    def step(i: int) -> None:
        if args.variant == "compiled_cg":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are free
        idx = torch.randint(0, sz["vocab"], (batch, sz["seq"] + 1), generator=gen)
        if i in plant_at and sleep_s > 0:
            time.sleep(sleep_s)  # planted: the straggler's data path stalls
        if cuda:
            idx = idx.pin_memory().to(dev, non_blocking=True)
        x, y = idx[:, :-1], idx[:, 1:]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            logits = run(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    # warm-up, then the clean step that sizes the planted sleep (same on every rank)
    for i in range(args.warmup_steps):
        step(i)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(5):
        step(i)
    sync()
    base_ms = (time.perf_counter() - t0) * 1e3 / 5
    base = torch.tensor([base_ms], dtype=torch.float64, device=dev)
    dist.all_reduce(base, op=dist.ReduceOp.MAX)
    base_ms = float(base.item())
    plant_ms = 0.0  # the planted stall (the same figure on every rank; only the straggler sleeps)
    if case == "ddp_straggler_steps" and planted:
        plant_ms = 3.0 * base_ms
    elif case == "ddp_straggler_every" and planted:
        plant_ms = 1.0 * base_ms
    if args.plant_ms > 0 and plant_ms > 0:
        plant_ms = args.plant_ms  # the first fixes' timing: the sleep of the recorded trace
    sleep_s = plant_ms / 1e3 if rank == STRAGGLER else 0.0
    n = args.timed_steps
    if case == "ddp_straggler_steps":
        plant_at = {i for i in range(n) if i % 5 in (1, 3)}
    elif case == "ddp_straggler_every":
        plant_at = set(range(n))
    # unprofiled: per-step times from CUDA events (no sync per step), wall with a sync at both ends
    dist.barrier()
    sync()
    evs = []
    tw = time.perf_counter()
    steps_wall: list[float] = []
    for i in range(n):
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            evs.append(e)
        ts = time.perf_counter()
        step(i)
        steps_wall.append((time.perf_counter() - ts) * 1e3)
    if cuda:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        evs.append(e)
    sync()
    wall_ms = (time.perf_counter() - tw) * 1e3
    per_step = [a.elapsed_time(b) for a, b in itertools.pairwise(evs)] if cuda else steps_wall
    mine = {
        "rank": rank,
        "batch": batch,
        "sleep_ms": sleep_s * 1e3,
        "step_ms": [round(x, 4) for x in per_step],
        "step_ms_median": statistics.median(per_step),
        "step_ms_mean_wall": wall_ms / n,
        "planted_steps_timed": sorted(plant_at) if sleep_s else [],
        "plant_ms": plant_ms,
    }
    res: dict = {
        "case": case,
        "variant": args.variant,
        "mode": args.mode,
        "world_size": world,
        "device": torch.cuda.get_device_name(local) if cuda else "cpu",
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "sizes": sz,
        "params": n_params,
        "how": how,
        "clean_step_ms_warmup": base_ms,
    }
    if args.mode == "trace":
        plant_at = set(PLANT_STEPS_TRACE) if case == "ddp_straggler_steps" else set()
        if case == "ddp_straggler_every":
            plant_at = set(range(WAIT + WARMUP + ACTIVE + 1))
        from gpuscope.capture import profile_steps

        meta = {
            "gpuscope.experiment": case,
            "gpuscope.planted": {
                "variant": args.variant,
                "straggler_rank": STRAGGLER
                if case.startswith("ddp_") and case != "ddp_clean"
                else None,
                "sleep_ms": plant_ms,
                "planted_steps": sorted(plant_at) if plant_ms else [],
                "batch_by_rank": {
                    str(r): (
                        sz["batch"] * args.batch_mult * 3 // 2
                        if case == "ddp_uneven" and planted and r == STRAGGLER
                        else sz["batch"] * args.batch_mult
                    )
                    for r in range(world)
                },
                "how": how,
            },
            "samples_per_step": batch,
            "tokens_per_step": batch * sz["seq"],
        }
        # a compiled fix's trace sits beside the planted one: <case>_<variant>/
        name = case if args.variant in ("planted", "removed") else f"{case}_{args.variant}"
        out = Path(args.out) / name
        with profile_steps(
            str(out),
            name=name,
            wait=WAIT,
            warmup=WARMUP,
            active=ACTIVE,
            sample_gpu=False,
            metadata=meta,
            untraced_steps=5,
            model=model if not case.startswith("fsdp") else None,
        ) as prof:
            i = 0
            while not prof.done:
                step(i)
                prof.step()
                i += 1
            sync()
        res["trace_untraced_step_ms"] = prof.untraced_step_ms
        res["trace_planted_steps"] = sorted(plant_at) if plant_ms else []
        mine["trace"] = [str(p) for p in prof.trace_paths]
        mine["trace_bytes"] = sum(Path(p).stat().st_size for p in prof.trace_paths)
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    res["ranks"] = everyone
    res["step_ms_median_max_rank"] = max(r["step_ms_median"] for r in everyone)
    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


# ------------------------------------------------------------------ driver
def drive(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data) if args.data else out / "multi_gpu"  # raw files; tar.gz go to --out
    data.mkdir(parents=True, exist_ok=True)
    me = str(Path(__file__).resolve())
    extra = (["--quick"] if args.quick else []) + (["--cpu"] if args.cpu else [])
    extra += ["--timed-steps", str(args.timed_steps), "--warmup-steps", str(args.warmup_steps)]
    t0 = time.time()
    results: list[dict] = []

    def job(case: str, variant: str, mode: str, rnd: int, more: tuple = ()) -> dict | None:
        if time.time() - t0 > args.budget_s:
            log(f"budget spent: {case} {variant} {mode} r{rnd} skipped")
            return None
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            me,
            "one",
            "--case",
            case,
            "--variant",
            variant,
            "--mode",
            mode,
            "--out",
            str(data),
            *extra,
            *more,
        ]
        ts = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.child_timeout)
        except subprocess.TimeoutExpired:
            log(f"TIMEOUT {case} {variant} {mode}")
            return None
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode or not line:
            log(
                f"FAILED {case} {variant} {mode} rc={p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-4000:]}"
            )
            return None
        r = json.loads(line[-1][7:])
        r["round"] = rnd
        r["job_s"] = time.time() - ts
        ranks = " ".join(
            f"r{x['rank']} {x['step_ms_median']:.2f}/{x['step_ms_mean_wall']:.2f}"
            for x in r["ranks"]
        )
        log(
            f"[{time.time() - t0:6.1f}s] {case:20s} {variant:8s} {mode:5s} r{rnd} {ranks} ms (median/mean) job {r['job_s']:.1f}s"
        )
        results.append(r)
        name = "first_fix_timing.json" if args.first_fixes else "timing.json"
        (data / name).write_text(json.dumps({"runs": results}, indent=1))
        return r

    def pack(group: str, cases: list[str]) -> None:
        tar = out / f"multi_gpu_{group}.tar.gz"
        with tarfile.open(tar, "w:gz") as tf:
            for c in cases:
                if (data / c).exists():
                    tf.add(data / c, arcname=f"multi_gpu/{c}")
            if (data / "timing.json").exists():
                tf.add(data / "timing.json", arcname=f"multi_gpu/timing_{group}.json")
        log(f"packed {tar.name} {tar.stat().st_size} bytes")

    if args.first_fixes:
        return first_fixes(args, job, out, data, t0)
    groups = {
        "ddp": (
            ["ddp_clean", "ddp_straggler_steps", "ddp_straggler_every", "ddp_uneven"],
            args.rounds,
        ),
        "fsdp": (["fsdp_prefetch", "fsdp_noprefetch"], args.rounds),
        "tp": (["tp"], max(1, args.rounds - 1)),
    }
    for g in args.groups.split(","):
        cases, rounds = groups[g]
        for c in cases:  # round 0: the trace job (it times first, then profiles)
            job(c, "planted", "trace", 0)
        for rnd in range(1, rounds):
            order = cases if rnd % 2 == 0 else cases[::-1]
            for c in order:
                job(c, "planted", "time", rnd)
        pack(g, cases)
    log(f"done in {time.time() - t0:.1f}s")
    return 0


FIRST_FIX_WARMUP = 30
"""Warm-up steps of a compiled job (the eager ones keep ``--warmup-steps``): compiling, then
steady."""
RECORDED_PLANT_MS = {"ddp_straggler_steps": 32.6, "ddp_straggler_every": 17.8}
"""The sleeps of the recorded traces (README.md): both variants of a first fix's timing sleep
the same, not a sleep sized from each job's own (compiled or eager) step."""


COMPILED = ("compiled", "compiled_ddp", "compiled_cg")
"""The compiled variants: ``model.compile()``, ``torch.compile(DDP(model))``,
``model.compile(mode="reduce-overhead")`` (CUDA graphs)."""


def warm(variant: str) -> tuple[str, ...]:
    """A compiled job's warm-up (compiling, then steady); the eager ones keep ``--warmup-steps``."""
    return ("--warmup-steps", str(FIRST_FIX_WARMUP)) if variant in COMPILED else ()


def first_fixes(args, job, out: Path, data: Path, t0: float) -> int:
    """``--first-fixes``: per round, each case's planted run and its compiled run (fresh jobs, no
    trace), the order of the two alternating by round and the cases' order reversed every other
    round; then first_fix_timing.json packed into multi_gpu_first_fixes.tar.gz."""
    cases = args.first_fixes.split(",")
    for rnd in range(1, args.rounds + 1):
        for c in cases if rnd % 2 else cases[::-1]:
            plant = ("--plant-ms", str(RECORDED_PLANT_MS[c])) if c in RECORDED_PLANT_MS else ()
            pair = [
                (args.base_variant, (*plant, *warm(args.base_variant))),
                (args.fix_variant, (*plant, *warm(args.fix_variant))),
            ]
            for variant, more in pair if rnd % 2 else pair[::-1]:
                job(c, variant, "time", rnd, more)
    tar = out / "multi_gpu_first_fixes.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        if (data / "first_fix_timing.json").exists():
            tf.add(data / "first_fix_timing.json", arcname="multi_gpu/first_fix_timing.json")
    log(f"packed {tar.name}; done in {time.time() - t0:.1f}s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("drive", "one"))
    ap.add_argument("--case", choices=CASES)
    ap.add_argument("--variant", default="planted", choices=("planted", "removed", *COMPILED))
    ap.add_argument("--mode", default="time", choices=("time", "trace"))
    ap.add_argument("--out", default="out_multi_gpu")
    ap.add_argument(
        "--data", default="", help="drive: where the raw files go (default OUT/multi_gpu)"
    )
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--timed-steps", type=int, default=30)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--groups", default="ddp,fsdp,tp")
    ap.add_argument("--budget-s", type=float, default=520)
    ap.add_argument("--child-timeout", type=float, default=120)
    ap.add_argument("--first-fixes", default="", help="drive: time these cases' compiled fix")
    ap.add_argument("--fix-variant", default="compiled", choices=COMPILED)
    ap.add_argument(
        "--base-variant",
        default="planted",
        choices=("planted", *COMPILED),
        help="drive --first-fixes: the run the fix is timed against (compiled: a compiled run's own fix)",
    )
    ap.add_argument(
        "--batch-mult",
        type=int,
        default=1,
        help="one: every rank's batch times this (the batch_size fix; compare time per sample)",
    )
    ap.add_argument("--plant-ms", type=float, default=0.0, help="one: the straggler's sleep (ms)")
    args = ap.parse_args()
    return drive(args) if args.cmd == "drive" else one(args)


if __name__ == "__main__":
    raise SystemExit(main())
