"""The capture's untraced step time against plain timing, on a GPU (issue: v08 read 38.2 ms
untraced against 30.7 ms timed plainly).

    python benchmarks/untraced_timer_device.py drive [--rounds 3] [--jobs v08,overlap,gpu]
        [--budget-s 300] [--out FILE] [--quick]
    python benchmarks/untraced_timer_device.py one --job v08 --mode plain|old|new|paired [--quick]
    python benchmarks/untraced_timer_device.py pairs [--rounds 3] [--budget-s 100] [--out FILE]
    python benchmarks/untraced_timer_device.py wait-cost [--rounds 6]   # CPU only

Each (job, mode) runs in a fresh process; ``drive`` interleaves them, the modes' order rotating
from round to round, and prints the medians over the rounds. Modes, after the same warm-up:

* ``plain``: no profiler; blocks of ``BLOCK`` steps, synchronised at both ends of each block only;
  the figure is the median of the blocks' mean step. The same process then times 5 steps with the
  new timer alone (``events_bare``), no profiler.
* ``old``: ``gpuscope.capture.profile_steps`` with the timer as it was before (a CUDA synchronise
  and a ``perf_counter`` mark at each step's end): ``gpuscope.untraced_step_ms``.
* ``new``: ``profile_steps`` as it is (CUDA events, no synchronise): ``gpuscope.untraced_step_ms``.

``pairs`` (one fresh process per job and round, the jobs interleaved) compares the three inside
one process, which takes the process-to-process spread of a host-bound job (v08's plain step read
25 to 33 ms across processes) out of the comparison: after ``WARM_S`` s of steps, three times in a
rotating order: a plain block of ``BLOCK`` steps, the new timer alone (5 steps), the old timer
alone (5 steps) (the plain block also records an event per step: the median of those steps, beside
the block's mean); then one ``profile_steps`` capture (new timer) for what the profiler's wait phase
adds.

``wait-cost`` (no GPU needed) compares the host CPU time of small ops outside any profiler with
that inside ``profile_steps``' wait phase.

Jobs: ``v08`` (sample_traces/validation's GPT-style LM with activation checkpointing, host-bound),
``overlap`` (host-bound: ~8 ms of Python batch making per step while the GPU runs ~5 ms of the
previous batch's MLP, pinned non-blocking copies), ``gpu`` (GPU-bound: 4 Linear 8192 layers, batch
4096, bf16 autocast). Needs only PyTorch: without an installed gpuscope, app/ is imported as one.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODES = ("plain", "old", "new")
JOBS = ("v08", "overlap", "gpu")
BLOCK = 20
WARM_S = 2.0


def import_capture() -> Any:
    try:
        import gpuscope.capture as capture
    except ImportError:  # the device has no venv: this checkout's app/ is the package
        pkg = types.ModuleType("gpuscope")
        pkg.__path__ = [str(REPO / "app")]
        pkg.__version__ = "tree"  # type: ignore[attr-defined]
        sys.modules["gpuscope"] = pkg
        import gpuscope.capture as capture
    return capture


def old_timer_class(capture: Any) -> type:
    """``capture.UntracedTimer`` as it was before commit 8ce50dd: a CUDA synchronise at each mark,
    ``perf_counter`` marks (the class's host clock does the rest: ``done``, ``ready``,
    ``step_ms``, ``metadata``)."""

    class OldUntracedTimer(capture.UntracedTimer):  # type: ignore[name-defined,misc]
        def mark(self, call: int) -> None:
            if self.n <= 0 or not self.first <= call <= self.first + self.n:
                return
            cuda = self.torch.cuda
            if cuda.is_available() and cuda.is_initialized():
                cuda.synchronize()
            self.events = False
            self.marks.append(time.perf_counter())

    return OldUntracedTimer


def build(job: str, device: str, quick: bool):
    """The job's ``step()`` (one training step, no synchronise)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    cuda = device == "cuda"
    if job == "v08":
        sys.path.insert(0, str(REPO / "sample_traces" / "validation"))
        import record_validation as rv

        rv.QUICK = quick
        step, _samples, _meta, _model = rv.build("v08", "planted", device)
        return step
    if job == "overlap":
        d, batch, chars = (64, 64, 2000) if quick else (4096, 8192, 60_000)
        model = nn.Sequential(
            nn.Embedding(4096, d), *[m for _ in range(4) for m in (nn.Linear(d, d), nn.GELU())]
        ).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
        k = 0

        def make_batch() -> Any:  # a "tokeniser" in Python, in the training process
            nonlocal k
            k += 1
            h, ids = k, []
            for i in range(chars):
                h = (h * 31 + i) % 4093
                if h % 7 == 0:
                    ids.append(h)
            ids = (ids * (batch // max(1, len(ids)) + 1))[:batch]
            x = torch.tensor(ids)
            return x.pin_memory() if cuda else x

        def step() -> None:
            x = make_batch().to(device, non_blocking=True)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
                loss = model(x).float().square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step
    if job == "gpu":
        d, batch = (64, 32) if quick else (8192, 4096)
        model = nn.Sequential(*[nn.Linear(d, d) for _ in range(4)]).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
        x = torch.randn(batch, d, device=device)

        def step() -> None:
            with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
                loss = F.mse_loss(model(x).float(), x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step
    raise SystemExit(f"unknown job {job}")


def timer_ms(timer: Any, step: Any) -> float:
    """The median step of ``timer`` (first=1) over its steps, no profiler around it."""
    call = 0
    while not timer.done:
        step()
        call += 1
        timer.mark(call)
    return statistics.median(timer.step_ms())


def capture_ms(capture: Any, step: Any, sync: Any) -> float:
    """``gpuscope.untraced_step_ms`` of one ``profile_steps`` capture as it is (5 steps)."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with capture.profile_steps(
            tmp, name="u", wait=1, warmup=1, active=1, sample_gpu=False, record_shapes=False
        ) as prof:
            while not prof.done:
                step()
                prof.step()
            sync()
        with gzip.open(prof.trace_paths[0], "rt") as f:
            return float(json.load(f)["gpuscope.untraced_step_ms"])


def paired(capture: Any, torch: Any, step: Any, sync: Any, quick: bool) -> dict[str, Any]:
    """Plain, new and old in one process, three times in a rotating order, then one capture."""
    t = time.perf_counter()
    n = 0
    while n < 10 or time.perf_counter() - t < (0.2 if quick else WARM_S):
        step()
        n += 1
    sync()
    cuda = torch.cuda.is_available()
    out: dict[str, Any] = {"warm_steps": n, "plain": [], "plain_med": [], "new": [], "old": []}
    for k in range(3):
        for mode in MODES[k:] + MODES[:k]:
            if mode == "plain":  # + an event per step, read after the block: its median
                evs = []
                sync()
                a = time.perf_counter()
                for _ in range(BLOCK):
                    step()
                    if cuda:
                        evs.append(torch.cuda.Event(enable_timing=True))
                        evs[-1].record()
                sync()
                out["plain"].append(1e3 * (time.perf_counter() - a) / BLOCK)
                if evs:
                    out["plain_med"].append(
                        statistics.median(x.elapsed_time(y) for x, y in itertools.pairwise(evs))
                    )
            elif mode == "new":
                out["new"].append(timer_ms(capture.UntracedTimer(torch, 1, 5), step))
            else:
                out["old"].append(timer_ms(old_timer_class(capture)(torch, 1, 5), step))
    out["capture_new"] = capture_ms(capture, step, sync)
    out["step_ms"] = statistics.median(out["plain"])
    return out


def one(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    import torch

    capture = import_capture()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    step = build(args.job, device, args.quick)
    warm, blocks = (3, 2) if args.quick else (15, 3)
    for _ in range(warm):
        step()
    sync()
    res: dict[str, Any] = {"job": args.job, "mode": args.mode, "device": device}
    if device == "cuda":
        res["gpu"] = torch.cuda.get_device_name(0)
    if args.mode == "paired":
        res.update(paired(capture, torch, step, sync, args.quick))
    elif args.mode == "plain":
        per = []
        for _ in range(blocks):
            a = time.perf_counter()
            for _ in range(BLOCK):
                step()
            sync()
            per.append(1e3 * (time.perf_counter() - a) / BLOCK)
        res["step_ms"] = statistics.median(per)
        res["blocks_ms"] = [round(x, 3) for x in per]
        bare = capture.UntracedTimer(torch, 1, 5)  # the new timer, no profiler around it
        for call in range(1, 7):
            step()
            bare.mark(call)
        res["events_bare_ms"] = statistics.median(bare.step_ms())
        res["events_bare_all"] = [round(x, 3) for x in bare.step_ms()]
        sync()
    else:
        if args.mode == "old":
            capture.UntracedTimer = old_timer_class(capture)
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with capture.profile_steps(
                tmp,
                name="u",
                wait=1,
                warmup=1,
                active=1,
                untraced_steps=5,
                sample_gpu=False,
                record_shapes=False,
            ) as prof:
                while not prof.done:
                    step()
                    prof.step()
                sync()
            with gzip.open(prof.trace_paths[0], "rt") as f:
                doc = json.load(f)
            trace_meta = {k: doc[k] for k in doc if k.startswith("gpuscope.untraced")}
        res["step_ms"] = trace_meta["gpuscope.untraced_step_ms"]
        res["untraced_all"] = trace_meta["gpuscope.untraced_step_ms_all"]
    ru = resource.getrusage(resource.RUSAGE_SELF)
    res["cpu_s"] = round(ru.ru_utime + ru.ru_stime, 2)
    res["peak_rss_mb"] = round(ru.ru_maxrss / 1024, 1)
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def _one_process(job: str, mode: str, quick: bool, round_no: int) -> dict[str, Any] | None:
    """One ``one`` run in a fresh process: its RESULT line with ``round`` added (None: it failed,
    said on stdout)."""
    cmd = [sys.executable, __file__, "one", "--job", job, "--mode", mode]
    if quick:
        cmd.append("--quick")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode != 0 or not line:
        print(f"FAILED {job} {mode} rc {p.returncode}: {p.stderr[-2000:]}", flush=True)
        return None
    res: dict[str, Any] = json.loads(line[-1][7:])
    res["round"] = round_no
    return res


class Rounds:
    """What ``drive`` and ``pairs`` share: the jobs, the rows so far (written to ``--out`` after
    each), the time budget and the load average at start and end."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.t_start = time.perf_counter()
        self.budget_s = float(args.budget_s)
        self.jobs: list[str] = args.jobs.split(",")
        self.rows: list[dict[str, Any]] = []
        self.out = Path(args.out) if args.out else None
        print(f"load average at start: {os.getloadavg()}", flush=True)

    def spent(self, round_no: int) -> bool:
        """Whether the budget is spent (said once per call that finds it so)."""
        if time.perf_counter() - self.t_start <= self.budget_s:
            return False
        print(f"budget {self.budget_s:g} s spent: stopping in round {round_no}", flush=True)
        return True

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self.out is not None:
            self.out.write_text(json.dumps(self.rows, indent=1))

    def end(self) -> None:
        print(f"load average at end: {os.getloadavg()}; {time.perf_counter() - self.t_start:.0f} s")


def drive(args: argparse.Namespace) -> int:
    run = Rounds(args)
    jobs, rows = run.jobs, run.rows
    stopped = False
    for r in range(args.rounds):
        order = MODES[r % 3 :] + MODES[: r % 3]
        for job in jobs:
            for mode in order:
                if run.spent(r + 1):
                    stopped = True
                    break
                res = _one_process(job, mode, args.quick, r + 1)
                if res is None:
                    continue
                run.add(res)
                extra = (
                    f" events_bare {res['events_bare_ms']:.2f} blocks {res['blocks_ms']}"
                    if mode == "plain"
                    else f" all {res['untraced_all']}"
                )
                print(
                    f"r{r + 1} {job:8s} {mode:5s} {res['step_ms']:8.2f} ms{extra}"
                    f"  (cpu {res['cpu_s']} s, rss {res['peak_rss_mb']} MB, wall {res['wall_s']} s)",
                    flush=True,
                )
            if stopped:
                break
        if stopped:
            break
    print("\nmedian over rounds (ms): job, plain, old, new, old/plain, new/plain, events_bare")
    for job in jobs:
        med = {}
        for mode in MODES:
            v = [x["step_ms"] for x in rows if x["job"] == job and x["mode"] == mode]
            med[mode] = statistics.median(v) if v else float("nan")
        bare = [x["events_bare_ms"] for x in rows if x["job"] == job and x["mode"] == "plain"]
        print(
            f"{job:8s} {med['plain']:8.2f} {med['old']:8.2f} {med['new']:8.2f} "
            f"{med['old'] / med['plain']:6.3f} {med['new'] / med['plain']:6.3f} "
            f"{statistics.median(bare) if bare else float('nan'):8.2f}"
        )
    run.end()
    return 0


def pairs(args: argparse.Namespace) -> int:
    run = Rounds(args)
    jobs, rows = run.jobs, run.rows
    for r in range(args.rounds):
        for job in jobs if r % 2 == 0 else jobs[::-1]:
            if run.spent(r + 1):
                break
            res = _one_process(job, "paired", args.quick, r + 1)
            if res is None:
                continue
            run.add(res)
            f = {k: [round(x, 2) for x in res[k]] for k in (*MODES, "plain_med")}
            print(
                f"r{r + 1} {job:8s} plain {f['plain']} (per-step median {f['plain_med']})"
                f" new {f['new']} old {f['old']}"
                f" capture_new {res['capture_new']:.2f} (warm {res['warm_steps']} steps;"
                f" cpu {res['cpu_s']} s, rss {res['peak_rss_mb']} MB, wall {res['wall_s']} s)",
                flush=True,
            )
    print("\nwithin-process ratios, median over processes x repeats: job, plain ms, new/plain,")
    print("old/plain (range), capture_new/plain")
    for job in jobs:
        rs = [x for x in rows if x["job"] == job]
        if not rs:
            continue
        nr = [n / p for x in rs for n, p in zip(x["new"], x["plain"], strict=True)]
        orr = [o / p for x in rs for o, p in zip(x["old"], x["plain"], strict=True)]
        cr = [x["capture_new"] / statistics.median(x["plain"]) for x in rs]
        plain = statistics.median([p for x in rs for p in x["plain"]])
        print(
            f"{job:8s} {plain:8.2f}  new {statistics.median(nr):.3f} ({min(nr):.3f}-{max(nr):.3f})"
            f"  old {statistics.median(orr):.3f} ({min(orr):.3f}-{max(orr):.3f})"
            f"  capture_new {statistics.median(cr):.3f} ({min(cr):.3f}-{max(cr):.3f})"
        )
    run.end()
    return 0


def wait_cost(args: argparse.Namespace) -> int:
    """Host CPU time per small CPU op outside any profiler vs inside ``profile_steps``' wait phase
    (thread CPU time, so a loaded machine's waits do not count), interleaved A B A B."""
    import torch

    capture = import_capture()
    torch.set_num_threads(1)
    x = torch.ones(8)

    def burst(n: int = 4000) -> float:
        t = time.thread_time()
        for _ in range(n):
            x.add(1.0).mul(2.0)
        return 1e6 * (time.thread_time() - t) / (2 * n)  # us per op

    for _ in range(3):
        burst()
    outside, wait = [], []
    for _ in range(args.rounds):
        outside.append(burst())
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with capture.profile_steps(
                tmp, wait=1, warmup=0, active=1, untraced_steps=5, sample_gpu=False
            ) as prof:
                per = []
                while not prof.untraced.done:
                    per.append(burst())
                    prof.step()
                wait.append(statistics.median(per))
    print(
        f"us/op outside: {[round(v, 3) for v in outside]} median {statistics.median(outside):.3f}"
    )
    print(
        f"us/op in the wait phase: {[round(v, 3) for v in wait]} median {statistics.median(wait):.3f}"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("one")
    o.add_argument("--job", choices=JOBS, required=True)
    o.add_argument("--mode", choices=(*MODES, "paired"), required=True)
    o.add_argument("--quick", action="store_true")
    d = sub.add_parser("drive")
    d.add_argument("--rounds", type=int, default=3)
    d.add_argument("--jobs", default=",".join(JOBS))
    d.add_argument("--budget-s", type=float, default=300.0)
    d.add_argument("--out")
    d.add_argument("--quick", action="store_true")
    q = sub.add_parser("pairs")
    q.add_argument("--rounds", type=int, default=3)
    q.add_argument("--jobs", default=",".join(JOBS))
    q.add_argument("--budget-s", type=float, default=100.0)
    q.add_argument("--out")
    q.add_argument("--quick", action="store_true")
    w = sub.add_parser("wait-cost")
    w.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    return {"one": one, "drive": drive, "pairs": pairs, "wait-cost": wait_cost}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
