"""The validation set's recorders and truth (sample_traces/validation/), importable by the tests of
its recorded parts, and the one-GPU fixes every blind part times (issue 43, item 4)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VAL = ROOT / "sample_traces" / "validation"
TRUTH = VAL / "truth.json"
sys.path.insert(0, str(VAL))

import make_truth  # noqa: E402
import record_advised  # noqa: E402
import record_blind  # noqa: E402
import record_blind2  # noqa: E402
import record_blind3  # noqa: E402
import record_blind4  # noqa: E402
import record_blind5  # noqa: E402
import record_blind6  # noqa: E402
import record_blind7  # noqa: E402
import record_blind8  # noqa: E402
import record_blind9  # noqa: E402
import record_blind10  # noqa: E402
import record_blind11  # noqa: E402
import record_blind12  # noqa: E402
import record_blind13  # noqa: E402
import record_blind14  # noqa: E402
import record_blind15  # noqa: E402
import record_blind16  # noqa: E402
import record_blind17  # noqa: E402
import record_blind18  # noqa: E402
import record_blind19  # noqa: E402
import record_blind20  # noqa: E402
import record_new  # noqa: E402
import record_sharded_graphs  # noqa: E402
import record_validation  # noqa: E402

__all__ = [
    "ONE_GPU_FIXES",
    "ROOT",
    "TRUTH",
    "VAL",
    "RecordedCalls",
    "assert_case_words",
    "assert_compiled_fixed_only",
    "assert_first_fixes",
    "assert_first_fixes_apply_to_the_fixed_variant_only",
    "assert_graphs_and_compile_fixed_only",
    "assert_own_held_out_group",
    "assert_part_layout",
    "autocast_counts",
    "build_one_gpu_cases",
    "earlier_cases",
    "later_groups",
    "make_truth",
    "planted_on_meta",
    "record_advised",
    "record_blind",
    "record_blind2",
    "record_blind3",
    "record_blind4",
    "record_blind5",
    "record_blind6",
    "record_blind7",
    "record_blind8",
    "record_blind9",
    "record_blind10",
    "record_blind11",
    "record_blind12",
    "record_blind13",
    "record_blind14",
    "record_blind15",
    "record_blind16",
    "record_blind17",
    "record_blind18",
    "record_blind19",
    "record_blind20",
    "record_calls",
    "record_new",
    "record_sharded_graphs",
    "record_validation",
    "variant_pair",
]

ONE_GPU_FIXES = frozenset(
    {
        "activation_checkpointing",
        "optimizer_fused",
        "host_sync",
        "pin_memory",
        "mixed_precision",
        "kernel_fusion",
        "batch_size",
        "dataloader_workers",
        "cudnn_benchmark",
        "cuda_graphs",
    }
)
"""The one-GPU fixes each blind part must time (issue 43, item 4)."""


def earlier_cases(part: Any) -> dict[str, dict]:
    """Every case recorded before the blind part ``part`` (a recorder module: record_blind2 to
    7), by case: v01-v28, then each earlier blind part's."""
    parts = list(make_truth.BLIND_PARTS[1:])  # record_blind's cases are record_blind.ALL
    out = {**record_validation.CASES, **record_new.CASES, **record_blind.ALL}
    for p in parts[: parts.index(part)]:
        out.update(p.CASES)
    return out


def assert_new_families(
    part: Any, families: dict[str, str], repeats: Collection[str] = frozenset()
) -> None:
    """No model description of the blind part ``part`` is an earlier part's, ``families`` names
    one family per case (case -> a word of its model), and no family appears as a word in an
    earlier case's model or in the recorders of ../fixes and ../multi_gpu, but exactly those of
    the cases ``repeats`` (said so in their part's notes). A family is matched in any letter case
    ("Capsule" is v75's "capsule network"), an acronym in its own ("OPT" is not "opt")."""
    before = [c.get("model") or "" for c in earlier_cases(part).values()]
    others = [
        (VAL.parent / "fixes" / "record_fixes.py").read_text(),
        (VAL.parent / "multi_gpu" / "record_multi_gpu.py").read_text(),
    ]
    mine = [c["model"] for c in part.CASES.values()]
    assert len(set(mine)) == len(mine)
    assert not set(mine) & set(before)
    assert set(families) == set(part.CASES)
    seen = set()
    for case, family in families.items():
        assert family in part.CASES[case]["model"], case
        flags = 0 if family.upper() == family else re.IGNORECASE
        word = re.compile(rf"(?<![A-Za-z]){re.escape(family)}(?![a-z])", flags)
        if [m for m in before if word.search(m)] or [t for t in others if word.search(t)]:
            seen.add(case)
    assert seen == set(repeats)


def assert_own_held_out_group(part: Any, group: str, first: int) -> None:
    """The blind part ``part`` is its own held-out group ``group`` in make_truth, no case of it was
    recorded before, and its cases are numbered on from v``first`` with a builder each."""
    assert group == part.GROUP
    assert group in make_truth.GROUPS and group in make_truth.HELD_OUT_GROUPS
    for case in part.ORDER:
        assert make_truth.group(case) == group, case
    assert not set(part.CASES) & set(earlier_cases(part))
    assert [f"v{n}" for n in range(first, first + len(part.ORDER))] == part.ORDER
    if hasattr(part, "BUILDERS"):
        assert set(part.BUILDERS) == set(part.CASES)


def assert_device_script_drives_lanes(part: Any) -> None:
    """record_<GROUP>_device.sh runs device_env.sh's drive_part on the blind part ``part`` (its
    group) with the script's arguments, or drive_lanes after a first argument ``lanes``; the part's
    recorder is beside it."""
    text = (VAL / f"record_{part.GROUP}_device.sh").read_text()
    commands = [x.strip() for x in text.splitlines() if x.strip() and not x.startswith("#")]
    assert f'drive_part {part.GROUP} "$@"' in commands
    assert f'drive_lanes {part.GROUP} "$@"' in commands
    assert 'if [ "${1:-}" = lanes ]; then' in commands
    assert (VAL / f"record_{part.GROUP}.py").is_file()


def assert_part_layout(
    part: Any, group: str, first: int, modules: Sequence[Any] | None = None, count: int = 15
) -> None:
    """The blind part ``part`` is laid out as recorded: :func:`assert_own_held_out_group` (its own
    held-out group ``group``, no case recorded before, numbered on from v``first`` with a builder
    each), ``count`` cases, and the ``CASES`` and ``BUILDERS`` of ``modules`` (the modules it is
    written in, merged in this order; ``None``: ``part`` alone) one after another are its
    ``ORDER``, each case once."""
    assert_own_held_out_group(part, group, first)
    assert len(part.ORDER) == count
    modules = (part,) if modules is None else modules
    assert [c for m in modules for c in m.CASES] == part.ORDER  # in order, each once
    assert [c for m in modules for c in m.BUILDERS] == part.ORDER


def assert_case_words(part: Any) -> None:
    """Each case of the blind part ``part``: a batch-size pair is judged per sample, with its
    multiple, and no other is; the words written into its trace (planted, fix, expected fix)
    hold no '"', which Kineto (torch 2.11) writes as '/"' in a metadata string (not JSON)."""
    for name, c in part.CASES.items():
        per_sample = c.get("bound") == "per_sample_time"
        assert per_sample == (c["expected_fix"] == "batch_size"), name
        assert per_sample == ("batch_multiple" in c), name
        for key in ("planted", "fix", "expected_fix"):
            assert '"' not in c[key], (name, key)


def assert_one_gpu_pairs(
    part: Any, fixes: dict[str, str], nulls: frozenset[str], compiled: set[str]
) -> None:
    """The blind part ``part``'s cases: each its expected fix (``fixes``), a fix unit gpuscope
    has, on one GPU; torch.compile in the fix of exactly the cases marked ``compiled`` (and those
    are ``compiled``); the pairs chosen to gain nothing exactly ``nulls``, named ``null_<fix>`` and
    saying "gains ~0" in their fix, which no other case says."""
    from gpuscope.analysis.fixes import BY_ID

    cases = part.CASES
    assert {c["expected_fix"] for c in cases.values()} <= set(BY_ID)
    assert {k: c["expected_fix"] for k, c in cases.items()} == fixes
    assert all(c.get("gpus", 1) == 1 for c in cases.values())
    marked = {k for k, c in cases.items() if c.get("compiled")}
    assert {k for k, c in cases.items() if "torch.compile(" in c["fix"]} == marked == compiled
    chosen = {k: c for k, c in cases.items() if c.get("null")}
    assert set(chosen) == nulls
    assert all(c["name"] == f"null_{c['expected_fix']}" for c in chosen.values())
    assert all("gains ~0" in c["fix"] for c in chosen.values())
    real = {k: c for k, c in cases.items() if not c.get("null")}
    assert all(c["name"] == c["expected_fix"] for c in real.values())
    assert "gains ~0" not in "".join(c["fix"] for c in real.values())


SCATTER_POINTS = 12.0
"""Rounds whose gains spread over this many points need >= 5 of them (the recording rule)."""


def later_groups(part: Any) -> set[str]:
    """The groups of the blind parts recorded after ``part`` (make_truth.BLIND_PARTS' order)."""
    parts = make_truth.BLIND_PARTS
    return {p.GROUP for p in parts[parts.index(part) + 1 :]}


def assert_recorded_part(part: Any, short_of_rounds: frozenset[str] = frozenset()) -> None:
    """Every recorded case of the blind part ``part`` in truth.json: its group, held out, one trace
    of its planted variant per rank (17 KB-3 MiB), timed in fresh processes on an NVIDIA GPU, >= 3
    rounds (>= 5 where the rounds scatter over :data:`SCATTER_POINTS`, except exactly the cases
    ``short_of_rounds``), its row whole (device, torch, timings, rounds, extra) and read again by
    ``make_truth.single``; make_truth's
    earlier cases come first, in their own order, and only the later blind parts' groups follow it."""
    import json

    later = later_groups(part)

    cases = json.loads(TRUTH.read_text())["cases"]
    mine = [c for c in cases if c["group"] == part.GROUP]
    recorded = [k for k in part.ORDER if (VAL / k / "timing.json").exists()]
    assert [c["case"] for c in mine] == recorded
    before = [c for c in cases if c["group"] not in later]
    assert [c["case"] for c in before[-len(mine) :]] == recorded if mine else True
    for c in mine:
        assert c["held_out"], c["case"]
        assert c["device"].startswith("NVIDIA"), c["case"]
        assert c["torch"].startswith("2."), c["case"]
        assert len(c["traces"]) == c["gpus"] == part.CASES[c["case"]].get("gpus", 1)
        for t in c["traces"]:
            assert 17_000 <= (VAL / t).stat().st_size <= 3 << 20, t
        g = c["gain_pct_by_round"]
        assert len(g) >= 3, c["case"]
        short = len(g) < 5 and max(g) - min(g) > SCATTER_POINTS
        assert short == (c["case"] in short_of_rounds), c["case"]
        t = c["timings"]
        assert len(t["planted"]) == len(t["fixed"]) == len(g), c["case"]
        assert len(t["traced_run_step_ms"]) == 1, c["case"]
        assert c["extra"]["samples_per_step"] > 0, c["case"]
        assert c["intended_null"] == bool(part.CASES[c["case"]].get("null"))
        assert make_truth.single(c["case"]) is not None, c["case"]


TWO_RANK_RUNS = (("planted", 1), ("planted", 0), ("fixed", 1))
"""The (variant, rank) builds a 2-GPU case's rank test steps: rank 1 is the planted pace-setter."""


def ops_by_variant_and_rank(
    part: Any, case: str, names: Collection[str], tmp_path: Path
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], tuple[int, dict, Any]]]:
    """The 2-GPU ``case`` of the blind part ``part`` built under DDP (gloo, one process, --quick
    sizes) as each of :data:`TWO_RANK_RUNS`: the ops named in ``names`` that one profiled step
    runs (after one step unprofiled), and each build's (samples per step, meta, model)."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    saved = record_new.QUICK
    record_new.QUICK = True
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    counts: dict[tuple[str, int], int] = {}
    builds: dict[tuple[str, int], tuple[int, dict, Any]] = {}
    try:
        for variant, rank in TWO_RANK_RUNS:
            step, n, meta, model = part.build(case, variant, "cpu", rank=rank)
            step()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step()
            counts[variant, rank] = sum(e.count for e in prof.key_averages() if e.key in names)
            builds[variant, rank] = (n, meta, model)
    finally:
        dist.destroy_process_group()
        record_new.QUICK = saved
    return counts, builds


def assert_fifteen_with_one_two_gpu_straggler(part: Any) -> None:
    """The blind part ``part`` (from the fifth on) has 15 cases: 14 on one GPU and one on two whose
    expected fix is ``load_imbalance`` with rank 1 planted; a case is marked ``compiled`` exactly
    when its fix calls ``torch.compile(``."""
    cases = list(part.CASES.values())
    compiled = {k for k, c in part.CASES.items() if c.get("compiled")}
    assert {k for k, c in part.CASES.items() if "torch.compile(" in c["fix"]} == compiled
    assert sum(c.get("gpus", 1) == 1 for c in cases) == 14
    two = [c for c in cases if c.get("gpus", 1) == 2]
    assert [c["expected_fix"] for c in two] == ["load_imbalance"]
    assert "rank 1" in two[0]["planted"]
    assert len(cases) == 15


def assert_first_fixes(part: Any, short_of_rounds: frozenset[str] = frozenset()) -> None:
    """truth.json's ``first_fixes`` hold each of ``part.FIRST_FIXES`` timed on its base case's
    planted variant (``first_fix_timing.json``, or the spec's ``timing`` file; per sample, at four
    times the batch, for a ``batch_size`` one), >= 3 rounds paired planted/fixed in round order on
    an NVIDIA GPU, its gain the median of ``1 - fixed/planted``; the fix applied only in the fixed
    runs, never in the planted ones; >= 5 rounds where they scatter over :data:`SCATTER_POINTS`,
    except exactly the first fixes ``short_of_rounds``."""
    import json
    import statistics

    import pytest

    doc = json.loads(TRUTH.read_text())
    got = {c["case"]: c for c in doc["first_fixes"]}
    assert set(part.FIRST_FIXES) <= set(got)
    for case, spec in part.FIRST_FIXES.items():
        assert spec["base"] in part.CASES and case not in part.CASES
        runs = [
            r
            for r in json.loads(
                (VAL / spec["base"] / spec.get("timing", "first_fix_timing.json")).read_text()
            )["runs"]
            if r["mode"] == "time"
        ]
        assert {r["applied"] for r in runs if r["variant"] == "fixed"} == {True}
        assert {r["applied"] for r in runs if r["variant"] == "planted"} == {False}
        assert {r["first_fix"] for r in runs} == {spec["how"]}
        c = got[case]
        assert c["base"] == spec["base"] and c["gpuscope_fix_id"] == spec["expected_fix"]
        assert c["device"].startswith("NVIDIA")
        rounds = sorted({r["round"] for r in runs})
        assert len(rounds) >= 3 and len(c["planted"]) == len(c["fixed"]) == len(rounds)
        key = "per_sample_us" if spec["how"] == "batch_size" else "step_ms_median"
        for i, rnd in enumerate(rounds):
            p = [r for r in runs if r["round"] == rnd and r["variant"] == "planted"]
            f = [r for r in runs if r["round"] == rnd and r["variant"] == "fixed"]
            assert (c["planted"][i], c["fixed"][i]) == (p[0][key], f[0][key])
            if spec["how"] == "batch_size":  # four times the batch, judged per sample
                assert f[0]["samples_per_step"] == 4 * p[0]["samples_per_step"]
        g = [100 * (1 - f / p) for p, f in zip(c["planted"], c["fixed"], strict=True)]
        assert c["gain_pct"] == pytest.approx(statistics.median(g))
        short = len(g) < 5 and max(g) - min(g) > SCATTER_POINTS  # short of the recording rule
        assert short == (case in short_of_rounds), case


def build_each_at_quick_sizes(
    part: Any, monkeypatch: Any
) -> tuple[dict[tuple[str, str], dict], dict[tuple[str, str], int]]:
    """Each one-GPU case of the blind part ``part`` built as planted and fixed on the CPU at the
    --quick sizes and stepped once, torch.compile replaced by a recorder of its calls that returns
    the model (compiling is slow on a CPU). Returns each build's meta and the number of
    torch.compile calls each made (builds that made none left out), by (case, variant)."""
    import torch

    compiles: dict[tuple[str, str], int] = {}
    now: list[tuple[str, str]] = []

    def compile_(model: Any, **kw: Any) -> Any:
        compiles[now[-1]] = compiles.get(now[-1], 0) + 1
        return model

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(record_new, "QUICK", True)
    metas: dict[tuple[str, str], dict] = {}
    for case in [c for c in part.ORDER if part.CASES[c].get("gpus", 1) == 1]:
        for variant in ("planted", "fixed"):
            now.append((case, variant))
            step, samples, meta, _model = part.build(case, variant, "cpu")
            step()
            assert samples > 0 and isinstance(meta, dict), (case, variant)
            metas[case, variant] = dict(meta)
    return metas, compiles


def planted_on_meta(part: Any) -> dict[str, tuple]:
    """Each case of the blind part ``part`` built as planted at full size on the meta device
    (nothing allocated, nothing run): case -> (step_fn, samples_per_step, meta, model);
    ``record_new.QUICK`` set back after."""
    saved = record_new.QUICK
    record_new.QUICK = False
    try:
        return {c: part.build(c, "planted", "meta") for c in part.ORDER}
    finally:
        record_new.QUICK = saved


def build_one_gpu_cases(
    part: Any, monkeypatch: Any, same_math: Collection[str], benchmark_cases: Collection[str]
) -> tuple[dict[tuple[str, str], dict], dict[tuple[str, str], int], dict]:
    """Each one-GPU case of the blind part ``part`` built as planted and fixed on the CPU at the
    --quick sizes and stepped twice (torch.compile replaced by a recorder of its calls that returns
    the model): both variants make parameters of the same shapes, the cases ``same_math`` end
    with the same parameters, and ``benchmark_cases`` leave ``cudnn.benchmark`` as the variant
    says. Returns (meta, samples per step, torch.compile's calls), each by (case, variant)."""
    import torch

    compiled: list[tuple[str, dict]] = []

    def compile_(model, **kw):
        compiled.append((type(model).__name__, kw))
        return model

    def build(case: str, variant: str, *a, **kw):
        out = real_build(case, variant, *a, **kw)
        calls[case, variant] = list(compiled)
        compiled.clear()
        return out

    real_build = part.build
    calls: dict[tuple[str, str], list] = {}
    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(part, "build", build)
    monkeypatch.setattr(record_new, "QUICK", True)
    metas: dict[tuple[str, str], dict] = {}
    samples: dict[tuple[str, str], int] = {}
    try:
        for case in [c for c in part.ORDER if part.CASES[c].get("gpus", 1) == 1]:
            ends = {}
            for variant in ("planted", "fixed"):
                step, n, meta, model = part.build(case, variant, "cpu")
                step()
                step()
                assert n > 0 and isinstance(meta, dict), (case, variant)
                metas[case, variant], samples[case, variant] = dict(meta), n
                ends[variant] = [q.detach().clone() for q in model.parameters()]
                if case in benchmark_cases:  # the flag itself, as the builder leaves it
                    assert torch.backends.cudnn.benchmark == (variant == "fixed")
            assert [p.shape for p in ends["planted"]] == [p.shape for p in ends["fixed"]], case
            if case in same_math:
                for a, b in zip(ends["planted"], ends["fixed"], strict=True):
                    torch.testing.assert_close(a, b, msg=case)
    finally:
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = False
    return metas, samples, {k: v for k, v in calls.items() if v}


def counting_autocast(monkeypatch: Any) -> list[str]:
    """Every recorder's kit (``record_common.kit``) built with an autocast context (``k.ac``)
    that counts its entries instead of casting (an ``"ac"`` per ``with k.ac``, in the list
    returned), and record_new at its --quick sizes."""
    import record_common

    entered: list[str] = []

    class Ac:
        def __enter__(self) -> None:
            entered.append("ac")

        def __exit__(self, *exc: object) -> None:
            return None

    kit = record_common.kit

    def counting_kit(*a: Any, **kw: Any) -> Any:
        return record_common.Kit(**{**kit(*a, **kw).__dict__, "ac": Ac(), "meta": {}})

    # the first parts bound ``kit`` by name (``from record_common import kit``)
    for mod in [record_common, *(m for m in list(sys.modules.values()) if m is not None)]:
        if getattr(mod, "kit", None) is kit:
            monkeypatch.setattr(mod, "kit", counting_kit)
    monkeypatch.setattr(record_new, "QUICK", True)
    return entered


@dataclass
class RecordedCalls:
    """What each (case, variant) build of a blind part did, by (case, variant): AdamW's keyword
    arguments, ``checkpoint`` calls (non-reentrant only), ``Tensor.item()`` reads, boolean-mask
    indexings (a nonzero each: a sync) and the TF32 flags (cuDNN, matmul) the build left."""

    adamw: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str], int] = field(default_factory=dict)
    items: dict[tuple[str, str], int] = field(default_factory=dict)
    nonzeros: dict[tuple[str, str], int] = field(default_factory=dict)
    flags: dict[tuple[str, str], tuple[bool, bool]] = field(default_factory=dict)


def record_calls(part: Any, monkeypatch: Any) -> RecordedCalls:
    """Patch torch (through ``monkeypatch``) and ``part.build`` so that every build of the blind
    part ``part`` and the steps taken after it are counted in the :class:`RecordedCalls`
    returned, under the build's (case, variant); a reentrant checkpoint fails the test."""
    import torch
    import torch.utils.checkpoint as ckpt

    rec = RecordedCalls()
    now: list[tuple[str, str]] = [("", "")]

    def count(d: dict[tuple[str, str], int]) -> None:
        d[now[-1]] = d.get(now[-1], 0) + 1

    class RecordedAdamW(torch.optim.AdamW):
        def __init__(self, params: Any, **kw: Any) -> None:
            rec.adamw[now[-1]] = kw
            super().__init__(params, **kw)

    real_checkpoint, real_item = ckpt.checkpoint, torch.Tensor.item
    real_getitem, real_build = torch.Tensor.__getitem__, part.build

    def checkpoint(fn: Any, *a: Any, **kw: Any) -> Any:
        assert kw.get("use_reentrant") is False
        count(rec.checkpoints)
        return real_checkpoint(fn, *a, **kw)

    def item(self: Any) -> Any:
        count(rec.items)
        return real_item(self)

    def getitem(self: Any, key: Any) -> Any:
        if isinstance(key, torch.Tensor) and key.dtype == torch.bool:
            count(rec.nonzeros)
        return real_getitem(self, key)

    def build(case: str, variant: str, *a: Any, **kw: Any) -> Any:
        now.append((case, variant))
        out = real_build(case, variant, *a, **kw)
        rec.flags[case, variant] = (
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
        )
        return out

    monkeypatch.setattr(torch.optim, "AdamW", RecordedAdamW)
    monkeypatch.setattr(ckpt, "checkpoint", checkpoint)
    monkeypatch.setattr(torch.Tensor, "item", item)
    monkeypatch.setattr(torch.Tensor, "__getitem__", getitem)
    monkeypatch.setattr(part, "build", build)
    return rec


def autocast_counts(part: Any, monkeypatch: Any) -> dict[tuple[str, str], int]:
    """How many times each case of the one-GPU blind part ``part`` enters the kit's bf16 autocast
    (``k.ac``) in one step of its planted and its fixed variant, by (case, variant): built on the
    CPU at the --quick sizes, torch.compile replaced by the model itself."""
    monkeypatch.setattr(record_new, "QUICK", True)
    monkeypatch.setattr("torch.compile", lambda model, **kw: model)
    entered = counting_autocast(monkeypatch)
    counts = {}
    for case in part.ORDER:
        for variant in ("planted", "fixed"):
            entered.clear()
            step, _n, _meta, _model = part.build(case, variant, "cpu")
            step()
            del step
            counts[case, variant] = len(entered)
    return counts


def assert_first_fixes_apply_to_the_fixed_variant_only(part: Any, monkeypatch: Any) -> None:
    """record_common.first_fix_builders on the CPU (--quick sizes) for ``part.FIRST_FIXES``: each
    first fix builds its base case's planted variant; only variant ``fixed`` applies the fix
    (cudnn.benchmark set, ``model.compile()`` called once, in mode "reduce-overhead" for
    ``cuda_graphs``, the step run under ``k.ac``), as its
    record says; a fix the recorders do not apply is refused."""
    import pytest
    import record_common
    import torch

    compiled: list[object] = []
    monkeypatch.setattr(
        torch.nn.Module, "compile", lambda self, *a, **kw: compiled.append(kw.get("mode"))
    )
    entered = counting_autocast(monkeypatch)
    assert part.FIRST_FIXES
    for case, spec in part.FIRST_FIXES.items():
        entries = {}
        for variant in ("planted", "fixed"):
            compiled.clear()
            entered.clear()
            torch.backends.cudnn.benchmark = False
            step, _n, meta, _model = part.build(case, variant, "cpu")
            step()
            entries[variant] = len(entered)  # the base case's own autocast, if any, counts too
            applied = variant == "fixed"
            assert meta == {
                **meta,
                "base_case": spec["base"],
                "first_fix": spec["how"],
                "applied": applied,
            }
            assert torch.backends.cudnn.benchmark == (applied and spec["how"] == "cudnn_benchmark")
            modes = {"compile": [None], "cuda_graphs": ["reduce-overhead"]}
            assert compiled == (modes.get(spec["how"], []) if applied else []), case
        assert entries["fixed"] - entries["planted"] == int(spec["how"] == "bf16"), case
    torch.backends.cudnn.benchmark = False
    with pytest.raises(ValueError, match="not one the recorders apply"):
        record_common.first_fix_builders({"x": {"base": "v142", "how": "fused"}}, {})


def variant_pair(metas: dict[tuple[str, str], dict]) -> Callable[[str, str], tuple]:
    """``pair(case, key)``: the meta value ``key`` of ``case``'s planted and fixed variants, from
    :func:`build_one_gpu_cases`'s metas."""

    def pair(case: str, key: str) -> tuple:
        return metas[case, "planted"][key], metas[case, "fixed"][key]

    return pair


def assert_graphs_and_compile_fixed_only(
    calls: dict, metas: dict[tuple[str, str], dict], graphs: str, compiled: str
) -> None:
    """torch.compile (:func:`build_one_gpu_cases`' ``calls``) was called once on the fixed
    variant of ``graphs`` in mode "reduce-overhead" and once on that of ``compiled`` in its default
    mode, on nothing else; both say ``compiled`` False planted, True fixed, and ``graphs`` its
    ``compile_mode``."""
    modes = {key: [kw for _name, kw in got] for key, got in calls.items()}
    assert modes == {(graphs, "fixed"): [{"mode": "reduce-overhead"}], (compiled, "fixed"): [{}]}
    pair = variant_pair(metas)
    assert pair(graphs, "compiled") == pair(compiled, "compiled") == (False, True)
    assert pair(graphs, "compile_mode") == ("eager", "reduce-overhead")


def assert_compiled_fixed_only(
    calls: dict, metas: dict[tuple[str, str], dict], cases: Collection[str]
) -> None:
    """torch.compile (:func:`build_one_gpu_cases`'s ``calls``) was called on the fixed variants of
    exactly ``cases``, once each, in its default mode, and each one's meta says ``compiled``
    False planted, True fixed."""
    got = {k: v for k, v in calls.items() if v}
    assert set(got) == {(c, "fixed") for c in cases}
    assert all(len(v) == 1 and v[0][1] == {} for v in got.values())
    pair = variant_pair(metas)
    for case in cases:
        assert pair(case, "compiled") == (False, True), case
