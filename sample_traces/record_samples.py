#!/usr/bin/env python3
"""Record gpuscope's sample traces: a small real training job, profiled "before" and "after" the
usual GPU-utilisation fixes, and the "after" job under DDP on 2 GPUs.

    python sample_traces/record_samples.py --out DIR [--device cuda] [--quick]
        runs the configs "before" and "after", each in its own fresh Python process
    torchrun --standalone --nproc_per_node 2 sample_traces/record_samples.py --ddp --out DIR
        runs "ddp" (one process per GPU; backend nccl on CUDA, gloo on CPU)

Each config writes DIR/<config>/<config>_rank<R>.pt.trace.json.gz (one per rank) and
DIR/<config>/timing.json (unprofiled step times, GPU, versions, sizes, analytic FLOPs, a summary
of what the trace holds). See sample_traces/README.md.
"""

from __future__ import annotations

import os

# Before torch.distributed is imported: no NVLink SHARP (NVLS) in NCCL, no multicast objects in
# symmetric memory; both need fabric set-up the lent multi-GPU machines do not have.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import argparse
import contextlib
import datetime
import gzip
import inspect
import json
import math
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload as wl  # noqa: E402

SEED = 1234
PROFILE_WAIT, PROFILE_WARMUP, PROFILE_ACTIVE = 1, 2, 5
PROFILE_STEPS = PROFILE_WAIT + PROFILE_WARMUP + PROFILE_ACTIVE  # prof.step() calls that end the cycle
REQUIRED_META = ("samples_per_step", "tokens_per_step", "model_flops_per_step", "config", "torch_version")


@dataclass(frozen=True)
class RunConfig:
    name: str
    description: str
    batch: int                  # sequences per rank per step
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    non_blocking: bool
    item_every_step: bool       # loss.item() every step (a host sync) vs. accumulate on the device
    bf16_autocast: bool
    tf32_off: bool              # allow_tf32 False everywhere and matmul precision "highest"
    ddp: bool = False


BEFORE = RunConfig(
    "before", "the classic mistakes: synchronous in-process data loading from pageable memory, "
    "a host sync every step, strict fp32 (no TF32, no tensor cores), small batch",
    batch=8, num_workers=0, pin_memory=False, persistent_workers=False, prefetch_factor=None,
    non_blocking=False, item_every_step=True, bf16_autocast=False, tf32_off=True)
AFTER = RunConfig(
    "after", "the fixes: 8 DataLoader workers with pinned memory and prefetch, non_blocking "
    "copies, no per-step host sync, bf16 autocast, 4x the batch",
    batch=32, num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4,
    non_blocking=True, item_every_step=False, bf16_autocast=True, tf32_off=False)
DDP_CFG = replace(AFTER, name="ddp", ddp=True,
                  description="the 'after' config under DistributedDataParallel, one process per GPU")
CONFIGS = {c.name: c for c in (BEFORE, AFTER, DDP_CFG)}


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------- helpers
def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def gzip_file(src: Path) -> Path:
    """src -> src.gz (mtime 0, so equal input gives equal bytes); src is removed."""
    dst = src.with_name(src.name + ".gz")
    with open(src, "rb") as fi, open(dst, "wb") as raw, \
            gzip.GzipFile(filename=src.name, mode="wb", fileobj=raw, compresslevel=6, mtime=0) as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)
    src.unlink()
    return dst


def load_trace(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def ensure_metadata(path: Path, metadata: dict) -> list[str]:
    """Put every key of `metadata` missing at the trace's top level into it (rewrites the file).
    A safety net: the keys are normally written by prof.add_metadata*/the capture helper."""
    doc = load_trace(path)
    missing = [k for k in metadata if k not in doc]
    if missing:
        for k in missing:
            doc[k] = metadata[k]
        tmp = path.with_name(path.name.removesuffix(".gz") + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        gz = gzip_file(tmp)
        gz.replace(path)
    return missing


def inspect_trace(path: Path) -> dict:
    """What the trace holds: the figures the README and the lead's checks quote."""
    doc = load_trace(path)
    evs = doc.get("traceEvents", [])
    steps = sorted({e.get("name", "") for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")},
                   key=lambda s: int(s.split("#")[1]) if s.split("#")[1].isdigit() else 0)
    cats = Counter(e.get("cat") for e in evs if e.get("ph") == "X")
    kernels: Counter = Counter()
    kernel_us = 0.0
    for e in evs:
        if e.get("cat") == "kernel":
            kernels[e.get("name", "")] += e.get("dur", 0)
            kernel_us += e.get("dur", 0)
    memcpy = Counter(e.get("name") for e in evs if e.get("cat") == "gpu_memcpy")
    syncs = Counter(e.get("name") for e in evs if e.get("cat") == "cuda_runtime"
                    and "ynchronize" in str(e.get("name", "")))
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else None
    return {
        "file": path.name,
        "bytes_gz": path.stat().st_size if path.name.endswith(".gz") else None,
        "n_events": len(evs),
        "events_by_cat": dict(cats.most_common()),
        "profiler_steps": steps,
        "n_input_dims": sum(1 for e in evs if "Input Dims" in (e.get("args") or {})),
        "n_dataloader_events": sum(1 for e in evs if "DataLoader" in str(e.get("name", ""))),
        "n_kernels": sum(1 for e in evs if e.get("cat") == "kernel"),
        "kernel_busy_ms_in_trace": round(kernel_us / 1000, 3),
        "top_kernels_by_time": [[n[:90], round(us / 1000, 3)] for n, us in kernels.most_common(5)],
        "memcpy": dict(memcpy),
        "sync_calls": dict(syncs),
        "metadata_present": {k: (k in doc) for k in (*REQUIRED_META, "distributedInfo", "deviceProperties")},
        "metadata": {k: doc.get(k) for k in REQUIRED_META},
        "distributed_rank": info.get("rank") if info else None,
        "distributed_backend": info.get("backend") if info else None,
    }


def check_trace(summary: dict, *, ddp: bool, rank: int, cuda: bool) -> list[str]:
    problems = []
    if len(summary["profiler_steps"]) != PROFILE_ACTIVE:
        problems.append(f"{len(summary['profiler_steps'])} ProfilerStep# annotations, want {PROFILE_ACTIVE}")
    if summary["n_input_dims"] == 0:
        problems.append("no 'Input Dims' (record_shapes)")
    for k in REQUIRED_META:
        if not summary["metadata_present"][k]:
            problems.append(f"metadata key {k} missing")
    if ddp and summary["distributed_rank"] != rank:
        problems.append(f"distributedInfo.rank is {summary['distributed_rank']}, want {rank}")
    if cuda and summary["n_kernels"] == 0:
        problems.append("no GPU kernels in the trace")
    return problems


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def set_precision(cfg: RunConfig, dev: torch.device) -> dict:
    """The "before" config turns TF32 off everywhere (legacy API only, so the flags never mix with
    the newer fp32_precision API); returns the flags as they stand."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if cfg.tf32_off:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.set_float32_matmul_precision("highest")
        out: dict = {"autocast_dtype": "bfloat16" if cfg.bf16_autocast else None}
        for key, get in (("allow_tf32_matmul", lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
                         ("allow_tf32_cudnn", lambda: bool(torch.backends.cudnn.allow_tf32)),
                         ("float32_matmul_precision", torch.get_float32_matmul_precision)):
            try:
                out[key] = get()
            except Exception as e:  # a torch whose getters refuse mixed API state
                out[key] = f"unreadable: {e}"[:200]
    return out


def load_capture(mode: bool | None):
    """gpuscope.capture's profile_steps, or None. mode None: use it when importable."""
    if mode is False:
        return None
    try:
        import gpuscope.capture as capture
    except Exception as e:  # ImportError, or the helper's own dependencies missing
        if mode:
            raise SystemExit(f"--use-capture: cannot import gpuscope.capture: {e!r}") from e
        log(f"gpuscope.capture not importable ({type(e).__name__}: {e}); using torch.profiler directly")
        return None
    if not hasattr(capture, "profile_steps"):
        if mode:
            raise SystemExit("--use-capture: gpuscope.capture has no profile_steps")
        log("gpuscope.capture has no profile_steps; using torch.profiler directly")
        return None
    return capture


# ------------------------------------------------------------------------------------- profiling
def profile_with_torch(step: Callable[[], None], out_dir: Path, stem: str, metadata: dict,
                       dev: torch.device) -> Path:
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    trace_json = out_dir / f"{stem}.pt.trace.json"
    exported: list[Path] = []

    def on_ready(prof) -> None:
        prof.export_chrome_trace(str(trace_json))
        exported.append(trace_json)

    with profile(activities=activities,
                 schedule=schedule(wait=PROFILE_WAIT, warmup=PROFILE_WARMUP, active=PROFILE_ACTIVE, repeat=1),
                 record_shapes=True, with_flops=False, on_trace_ready=on_ready) as prof:
        for i in range(PROFILE_STEPS):
            if i == PROFILE_WAIT + PROFILE_WARMUP:
                # the first active step: Kineto's trace is running, metadata added now is kept
                for k, v in metadata.items():
                    if isinstance(v, str):
                        prof.add_metadata(k, v)
                    else:
                        prof.add_metadata_json(k, json.dumps(v))
            step()
            prof.step()
    if not exported:
        raise RuntimeError("the profiler's on_trace_ready was never called")
    return gzip_file(trace_json)


def profile_with_capture(capture, step: Callable[[], None], out_dir: Path, name: str, rank: int,
                         metadata: dict, dev: torch.device, lead_in: int,
                         agree: Callable[[bool], bool], model=None) -> tuple[Path, dict] | None:
    """gpuscope.capture.profile_steps: the trace <out_dir>/<name>_rank<R>.pt.trace.json.gz and, on
    local rank 0 with NVML, the series <out_dir>/<name>.nvml.jsonl. `lead_in` unprofiled steps run
    first inside the block (its skip_first), so the NVML series covers a few seconds of training.

    Entering the helper is agreed on by all ranks (`agree`) before any step runs: if it fails on any
    rank (e.g. only local rank 0 samples NVML and lacks a dependency), every rank leaves it and the
    caller profiles with torch.profiler, so all ranks run the same steps. Returns None then."""
    kw: dict = {"name": name, "wait": PROFILE_WAIT, "warmup": PROFILE_WARMUP, "active": PROFILE_ACTIVE,
                "sample_gpu": dev.type == "cuda", "interval_ms": 100, "metadata": metadata}
    try:
        params = inspect.signature(capture.profile_steps).parameters
    except (TypeError, ValueError):
        params = {}
    if lead_in and "skip_first" in params:
        kw["skip_first"] = lead_in
    else:
        lead_in = 0
    if model is not None and "model" in params:
        kw["model"] = model  # parameter count and input shape into the trace
    t0 = time.time()
    cm = prof = None
    try:
        cm = capture.profile_steps(str(out_dir), **kw)
        prof = cm.__enter__()
        entered = True
    except Exception:
        log(f"[{name}] rank {rank}: gpuscope.capture.profile_steps failed to start:\n" + traceback.format_exc())
        entered = False
    if not agree(entered):
        if entered:  # another rank failed: leave the helper before any step, drop its NVML file
            cm.__exit__(None, None, None)
            nvml = getattr(prof, "nvml_path", None)
            if nvml is not None:
                with contextlib.suppress(OSError):
                    Path(nvml).unlink()
            log(f"[{name}] rank {rank}: another rank could not start gpuscope.capture; not using it")
        return None
    try:
        # the helper may lengthen the wait phase to time untraced steps: it says how many it needs
        for _ in range(getattr(prof, "steps_needed", None) or lead_in + PROFILE_STEPS):
            step()
            prof.step()
    except BaseException:
        if not cm.__exit__(*sys.exc_info()):
            raise
    else:
        cm.__exit__(None, None, None)
    info = {"lead_in_steps": lead_in,
            "untraced_step_ms": getattr(prof, "untraced_step_ms", None),
            "nvml_file": str(Path(prof.nvml_path).name) if getattr(prof, "nvml_path", None) else None,
            "nvml_samples": getattr(prof, "nvml_samples", None)}
    written = [Path(p) for p in (getattr(prof, "trace_paths", None) or [])]
    if not written:  # a helper that does not say: look for what it wrote
        want = out_dir / f"{name}_rank{rank}.pt.trace.json.gz"
        written = [want] if want.exists() else sorted(
            (p for p in out_dir.glob(f"*rank{rank}*.json*")
             if p.stat().st_mtime >= t0 - 1 and p.name != "timing.json"),
            key=lambda p: p.stat().st_size)
    if not written or not written[-1].exists():
        raise RuntimeError(f"gpuscope.capture wrote no trace of rank {rank} under {out_dir}")
    trace = written[-1]
    if not trace.name.endswith(".gz"):
        trace = gzip_file(trace)
    return trace, info


# ------------------------------------------------------------------------------------------- run
def run_config(name: str, args: argparse.Namespace) -> int:
    cfg = CONFIGS[name]
    mcfg = wl.QUICK if args.quick else wl.FULL
    if args.quick:
        cfg = replace(cfg, batch=max(2, cfg.batch // 4), num_workers=min(cfg.num_workers, 2))
    if args.num_workers is not None and cfg.num_workers > 0:
        cfg = replace(cfg, num_workers=args.num_workers)
    if args.batch is not None:
        cfg = replace(cfg, batch=args.batch)
    warmup_steps = args.warmup_steps if args.warmup_steps is not None else (2 if args.quick else 20)
    timed_steps = args.timed_steps if args.timed_steps is not None else (5 if args.quick else 100)

    want = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    # ---- processes and device
    rank, world, local_rank = 0, 1, 0
    if cfg.ddp:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise SystemExit("--ddp needs torchrun: torchrun --standalone --nproc_per_node 2 "
                             "sample_traces/record_samples.py --ddp --out DIR")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if want.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda but torch.cuda.is_available() is False")
        dev = torch.device("cuda", local_rank) if cfg.ddp else torch.device(want if ":" in want else "cuda:0")
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world)))))
    cuda = dev.type == "cuda"
    if cfg.ddp:
        backend = "nccl" if cuda else "gloo"
        timeout = datetime.timedelta(seconds=180)  # a stuck collective ends the run, not the budget
        if cuda:
            dist.init_process_group(backend, timeout=timeout, device_id=dev)
        else:
            dist.init_process_group(backend, timeout=timeout)
    out_dir = Path(args.out) / name
    out_dir.mkdir(parents=True, exist_ok=True)
    say = log if rank == 0 else (lambda _m: None)

    # ---- precision, seeds, model, optimiser
    precision = set_precision(cfg, dev)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    model = wl.EncoderLM(mcfg).to(dev)
    params = wl.count_params(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    net: torch.nn.Module = DDP(model, device_ids=[dev.index] if cuda else None) if cfg.ddp else model

    global_batch = cfg.batch * world
    flops = wl.analytic_flops(mcfg, global_batch)
    flops_rank = wl.analytic_flops(mcfg, cfg.batch)
    say(f"[{name}] device={dev} world={world} batch/rank={cfg.batch} global_batch={global_batch} "
        f"tokens/step={flops['tokens_per_step']} model={mcfg.as_dict()} params={params}")
    say(f"[{name}] analytic FLOPs per step (global): {flops['model_flops_per_step']} "
        f"({wl.human_flops(flops['model_flops_per_step'])}) = matmul {flops['matmul_flops_per_step']} "
        f"+ attention {flops['attention_flops_per_step']}; N_matmul={flops['n_matmul_params']}")

    # ---- data
    total_steps = warmup_steps + timed_steps + 1000 + 2 * PROFILE_STEPS + 2  # NVML lead-in, fallback
    ds = wl.SyntheticTextDataset(global_batch * total_steps, mcfg.seq_len, mcfg.vocab, seed=SEED,
                                 rounds=args.decode_rounds)
    sample_ms = wl.measure_sample_cost(ds, 32 if args.quick else 64)
    say(f"[{name}] dataset __getitem__ cost here: {sample_ms:.3f} ms/sample "
        f"({sample_ms * cfg.batch:.2f} ms of CPU per rank-batch of {cfg.batch})")
    if cfg.ddp:
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=SEED, drop_last=True)
    else:
        sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(SEED))
    pin = cfg.pin_memory and cuda
    loader_kw: dict = {"batch_size": cfg.batch, "sampler": sampler, "num_workers": cfg.num_workers,
                       "pin_memory": pin, "drop_last": True}
    if cfg.num_workers > 0:
        loader_kw.update(persistent_workers=cfg.persistent_workers, prefetch_factor=cfg.prefetch_factor)
    loader = DataLoader(ds, **loader_kw)

    def batches() -> Iterator:
        epoch = 0
        while True:
            if isinstance(sampler, DistributedSampler):
                sampler.set_epoch(epoch)
            yield from loader
            epoch += 1

    it = batches()
    state = {"steps": 0, "losses": [], "loss_sum": torch.zeros((), device=dev), "n_sum": 0}
    vocab = mcfg.vocab

    def step() -> None:
        x, y = next(it)
        x = x.to(dev, non_blocking=cfg.non_blocking)
        y = y.to(dev, non_blocking=cfg.non_blocking)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
            logits = net(x)
            loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state["steps"] += 1
        if cfg.item_every_step:
            value = loss.item()  # the host sync the "before" config is known for
            state["losses"].append(value)
            if state["steps"] % 10 == 0:
                say(f"[{name}] step {state['steps']} loss {value:.4f}")
        else:
            state["loss_sum"] += loss.detach()
            state["n_sum"] += 1

    # ---- warm-up, then unprofiled timing
    for _ in range(warmup_steps):
        step()
    sync(dev)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(timed_steps + 1)] if cuda else []
    marks: list[float] = []
    t_start = time.perf_counter()
    for i in range(timed_steps):
        if cuda:
            events[i].record()
        marks.append(time.perf_counter())
        step()
    if cuda:
        events[timed_steps].record()
    sync(dev)
    t_end = time.perf_counter()
    marks.append(t_end)
    if cuda:
        step_ms = [events[i].elapsed_time(events[i + 1]) for i in range(timed_steps)]
        step_method = "CUDA events recorded at the start of each step on the current stream (GPU timeline)"
    else:
        step_ms = [1000 * (marks[i + 1] - marks[i]) for i in range(timed_steps)]
        step_method = "time.perf_counter between step starts"
    mean_ms = 1000 * (t_end - t_start) / timed_steps
    q = sorted(step_ms)

    def pct(p: float) -> float:
        return q[min(len(q) - 1, int(round(p / 100 * (len(q) - 1))))]

    timing = {
        "warmup_steps": warmup_steps, "timed_steps": timed_steps,
        "mean_step_ms": round(mean_ms, 3), "p50_step_ms": round(statistics.median(step_ms), 3),
        "p10_step_ms": round(pct(10), 3), "p90_step_ms": round(pct(90), 3),
        "min_step_ms": round(q[0], 3), "max_step_ms": round(q[-1], 3),
        "samples_per_s": round(global_batch * 1000 / mean_ms, 1),
        "tokens_per_s": round(flops["tokens_per_step"] * 1000 / mean_ms, 1),
        "achieved_tflops": round(flops["model_flops_per_step"] / (mean_ms / 1000) / 1e12, 3),
        "achieved_tflops_per_gpu": round(flops["model_flops_per_step"] / world / (mean_ms / 1000) / 1e12, 3),
        "mean_method": "synchronize, time.perf_counter around the timed steps, divided by the step count",
        "p50_method": step_method,
    }
    say(f"[{name}] unprofiled: mean {timing['mean_step_ms']} ms/step, p50 {timing['p50_step_ms']} ms, "
        f"{timing['samples_per_s']} samples/s, {timing['achieved_tflops']} TFLOP/s (analytic)")

    # ---- profiled steps
    gpu_name = torch.cuda.get_device_name(dev) if cuda else None
    stem = f"{name}_rank{rank}"
    settings = {k: v for k, v in asdict(cfg).items() if k not in ("name", "description")}
    settings["pin_memory_effective"] = pin
    metadata = {
        "config": name,
        "torch_version": torch.__version__,
        "samples_per_step": global_batch,
        "tokens_per_step": flops["tokens_per_step"],
        "model_flops_per_step": flops["model_flops_per_step"],
        "world_size": world,
        "samples_per_step_per_rank": cfg.batch,
        "model_flops_per_step_per_rank": flops_rank["model_flops_per_step"],
        "gpuscope_sample": {
            "description": cfg.description, "model": mcfg.as_dict(), "params": params,
            "settings": settings, "precision": precision,
            "matmul_flops_per_step": flops["matmul_flops_per_step"],
            "attention_flops_per_step": flops["attention_flops_per_step"],
            "flops_formula": flops["formula"], "cuda_version": torch.version.cuda, "gpu_name": gpu_name,
            "unprofiled_mean_step_ms": timing["mean_step_ms"], "unprofiled_p50_step_ms": timing["p50_step_ms"],
        },
    }
    capture = load_capture(args.use_capture)
    recorder = "torch.profiler"
    capture_info: dict = {}
    trace: Path | None = None
    if capture is not None:
        nvml_s = args.nvml_seconds if args.nvml_seconds is not None else (3.0 if cuda else 0.0)
        lead_in = min(1000, math.ceil(nvml_s * 1000 / mean_ms)) if nvml_s > 0 else 0
        if cfg.ddp:  # every rank must run the same number of steps
            box = [lead_in]
            dist.broadcast_object_list(box, src=0)
            lead_in = int(box[0])

        def agree(ok: bool) -> bool:
            if not cfg.ddp:
                return ok
            flags: list = [None] * world
            dist.all_gather_object(flags, ok)
            return all(flags)

        try:
            got = profile_with_capture(capture, step, out_dir, name, rank, metadata, dev, lead_in,
                                       agree, model=net)
        except Exception:  # failed during or after the steps
            log(f"[{name}] rank {rank}: gpuscope.capture failed, falling back to torch.profiler:\n"
                + traceback.format_exc())
            got = None
        if not agree(got is not None):  # DDP: all ranks use one recorder, or all fall back together
            got = None
        if got is not None:
            trace, capture_info = got
            recorder = "gpuscope.capture.profile_steps"
        else:
            capture_info = {"capture_error": "gpuscope.capture could not be used; see the log"}
    if trace is None:
        trace = profile_with_torch(step, out_dir, stem, metadata, dev)
    patched = ensure_metadata(trace, metadata)
    if patched:
        log(f"[{name}] rank {rank}: metadata keys added after export: {patched}")

    # ---- mean loss over every step run, read once (the "after" configs never synchronised on it)
    if cfg.item_every_step:
        final_loss = sum(state["losses"]) / max(1, len(state["losses"]))
    else:
        final_loss = state["loss_sum"].item() / max(1, state["n_sum"])
    it.close()
    if getattr(loader, "_iterator", None) is not None:  # persistent workers: stop them now
        with contextlib.suppress(Exception):
            loader._iterator._shutdown_workers()

    summary = inspect_trace(trace)
    problems = check_trace(summary, ddp=cfg.ddp, rank=rank, cuda=cuda)
    rank_report = {"rank": rank, "device": str(dev), "gpu_name": gpu_name, "timing": timing,
                   "data_ms_per_sample": round(sample_ms, 4), "mean_loss_all_steps": round(final_loss, 5),
                   "recorder": recorder, "trace": summary, "metadata_patched": patched,
                   "problems": problems}
    reports = [rank_report]
    if cfg.ddp:
        reports = [None] * world
        dist.all_gather_object(reports, rank_report)

    if rank == 0:
        doc = {
            "config": name,
            "description": cfg.description,
            "gpu_name": gpu_name,
            "device": str(dev),
            "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "cudnn_version": torch.backends.cudnn.version() if cuda else None,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda and cfg.ddp else None,
            "python_version": platform.python_version(),
            "numpy_version": np.__version__,
            "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "world_size": world,
            "backend": dist.get_backend() if cfg.ddp else None,
            "batch_size_per_rank": cfg.batch, "global_batch": global_batch, "seq_len": mcfg.seq_len,
            "tokens_per_step": flops["tokens_per_step"],
            "quick": bool(args.quick),
            "model": {**mcfg.as_dict(), **params},
            "settings": settings, "precision": precision,
            "optimizer": "AdamW(lr=3e-4, weight_decay=0.01), torch defaults otherwise",
            "flops": {**flops, "model_flops_per_step_per_rank": flops_rank["model_flops_per_step"]},
            "data": {"dataset": "SyntheticTextDataset (sample_traces/workload.py)",
                     "decode_rounds": args.decode_rounds,
                     "ms_per_sample": round(sample_ms, 4),
                     "cpu_ms_per_rank_batch": round(sample_ms * cfg.batch, 3),
                     "note": "median __getitem__ time measured in the main process before training"},
            "timing": timing,
            "mean_loss_all_steps": round(final_loss, 5), "steps_run": state["steps"],
            "profile": {"schedule": {"wait": PROFILE_WAIT, "warmup": PROFILE_WARMUP, "active": PROFILE_ACTIVE,
                                     "repeat": 1},
                        "record_shapes": True, "with_flops": False, "recorder": recorder,
                        **capture_info},
            "trace_files": [r["trace"]["file"] for r in reports],
            "ranks": reports,
            "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")},
            "ok": not any(r["problems"] for r in reports),
        }
        (out_dir / "timing.json").write_text(json.dumps(doc, indent=2) + "\n")
        for r in reports:
            t = r["trace"]
            log(f"[{name}] rank {r['rank']}: {t['file']} {t['bytes_gz']} B gz, {t['n_events']} events, "
                f"steps {t['profiler_steps']}, Input Dims {t['n_input_dims']}, kernels {t['n_kernels']}, "
                f"memcpy {t['memcpy']}, syncs {t['sync_calls']}, dist rank {t['distributed_rank']}, "
                f"recorder {r['recorder']}" + (f" PROBLEMS {r['problems']}" if r["problems"] else " ok"))
        log(f"[{name}] wrote {out_dir / 'timing.json'}; mean loss over {state['steps']} steps {final_loss:.4f}")
    ok = not any(r["problems"] for r in reports)
    if cfg.ddp:
        dist.barrier(device_ids=[dev.index]) if cuda else dist.barrier()
        dist.destroy_process_group()
    return 0 if ok else 3


# ------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder; each config writes OUT/<config>/")
    p.add_argument("--device", default=None, help="cuda (default when available), cuda:N or cpu")
    p.add_argument("--quick", action="store_true", help="tiny model and few steps (CPU testing)")
    p.add_argument("--ddp", action="store_true", help="run the 'ddp' config (launch with torchrun)")
    p.add_argument("--config", choices=sorted(CONFIGS), help="run one config in this process")
    p.add_argument("--configs", default="before,after",
                   help="without --config/--ddp: configs to run, each in a fresh process (default before,after)")
    p.add_argument("--use-capture", action=argparse.BooleanOptionalAction, default=None,
                   help="record through gpuscope.capture.profile_steps (trace + NVML series); "
                        "default: when importable, else torch.profiler directly")
    p.add_argument("--nvml-seconds", type=float, default=None,
                   help="with gpuscope.capture: about this many seconds of unprofiled steps run inside "
                        "the capture before the profiled ones, so its NVML series has data (default 3 on "
                        "CUDA, 0 on CPU)")
    p.add_argument("--warmup-steps", type=int, default=None, help="default 20 (quick: 2)")
    p.add_argument("--timed-steps", type=int, default=None, help="unprofiled timed steps, default 100 (quick: 5)")
    p.add_argument("--batch", type=int, default=None, help="override the per-rank batch of the config")
    p.add_argument("--num-workers", type=int, default=None, help="override DataLoader workers of after/ddp")
    p.add_argument("--decode-rounds", type=int, default=2, help="dataset augment rounds (CPU cost per sample)")
    return p.parse_args(argv)


def strip_option(argv: list[str], opt: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == opt:
            skip = True
            continue
        if a.startswith(opt + "="):
            continue
        out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    args = parse_args(raw)
    if args.ddp or args.config == "ddp":
        return run_config("ddp", args)
    if args.config:
        return run_config(args.config, args)
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in names:
        if c not in ("before", "after"):
            raise SystemExit(f"--configs: {c!r} is not before/after (ddp runs under torchrun with --ddp)")
    rest = strip_option(raw, "--configs")
    worst = 0
    for c in names:  # a fresh process each: no TF32 flags, CUDA/cuBLAS state or profiler state shared
        cmd = [sys.executable, str(Path(__file__).resolve()), *rest, "--config", c]
        log(f"== {c}: {' '.join(cmd)}")
        rc = subprocess.call(cmd)
        if rc:
            log(f"== {c} exited {rc}")
        worst = max(worst, rc)
    return worst


if __name__ == "__main__":
    sys.exit(main())
