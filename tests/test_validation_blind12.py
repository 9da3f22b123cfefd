"""The validation set's twelfth blind part (v185-v192, record_blind12.py over blind12_a.py): its
cases are their own group (``blind12``), held out, on model families no earlier case used, and
all on two GPUs: FSDP2's prefetch defeated (two pairs), DDP's gradients held in one bucket, host
work of rank 0 alone, rank 1 alone loading in its training process, DTensor's eager dispatch under
tensor parallelism, and two pairs chosen to gain nothing (gpuscope's explicit FSDP2 prefetch over
all-gathers that hide already, gpuscope's DDP buckets over 6 MB of gradients). Nothing here
analyses a trace: the part is judged once, by the lead, with ``validate_gains_set.py --blind``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from validation_parts import (
    VAL,
    assert_case_words,
    assert_device_script_drives_lanes,
    assert_first_fixes,
    assert_new_families,
    assert_part_layout,
    make_truth,
    record_blind12,
)

FAMILIES = {
    "v185": "BEiT",
    "v186": "BART",
    "v187": "OverFeat",
    "v188": "Synthesizer",
    "v189": "Jasper",
    "v190": "GPT-J",
    "v191": "Qwen",
    "v192": "RCAN",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

SAME_MATH = frozenset(record_blind12.CASES)
"""Every case's fix leaves the step's arithmetic alone on a CPU (prefetch order, DDP's buckets,
host work beside the step, loading workers over samples seeded by their index, torch.compile
replaced by the model itself): both variants, seeded alike, end two steps with the same
parameters on both ranks."""


def test_the_twelfth_blind_part_is_its_own_held_out_group_numbered_on_from_v185() -> None:
    assert_part_layout(record_blind12, "blind12", 185, (record_blind12.blind12_a,), count=8)
    assert record_blind12 in make_truth.BLIND_PARTS  # the thirteenth part follows it
    assert set(record_blind12.FIRST_FIXES) == {"v191c", "v192c", "v192b"}
    # not recorded yet: make_truth leaves out every case without its timing.json
    recorded = [c for c in record_blind12.ORDER if (VAL / c / "timing.json").exists()]
    assert all(make_truth.single(c) is not None for c in recorded)


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind12, FAMILIES)


def test_eight_two_gpu_pairs_six_fixes_and_two_nulls() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = record_blind12.CASES
    assert_case_words(record_blind12)
    assert_device_script_drives_lanes(record_blind12)
    assert {c["expected_fix"] for c in cases.values()} <= set(BY_ID)
    assert all(c["gpus"] == 2 for c in cases.values()) and len(cases) == 8
    assert {k: c["expected_fix"] for k, c in cases.items()} == {
        "v185": "fsdp_prefetch",
        "v186": "fsdp_prefetch",
        "v187": "overlap_communication",
        "v188": "load_imbalance",
        "v189": "dataloader_workers",
        "v190": "dtensor_dispatch",
        "v191": "fsdp_prefetch",
        "v192": "overlap_communication",
    }
    compiled = {k for k, c in cases.items() if c.get("compiled")}
    assert {k for k, c in cases.items() if "torch.compile(" in c["fix"]} == compiled == {"v190"}
    for k in ("v185", "v186"):
        assert "FSDP2" in cases[k]["model"] and "defeated" in cases[k]["planted"]
        assert cases[k]["fix"] == "FSDP2's default prefetching"
    assert cases["v187"]["planted"].startswith("DDP(bucket_cap_mb=4096)")
    assert cases["v187"]["fix"].startswith("DDP's defaults")
    assert "rank 0 alone" in cases["v188"]["planted"]
    assert "rank 1" in cases["v189"]["planted"] and "num_workers=0" in cases["v189"]["planted"]
    nulls = {k: c for k, c in cases.items() if c.get("null")}
    assert set(nulls) == {"v191", "v192"}
    assert all("gains ~0" in c["fix"] and "gpuscope's" in c["fix"] for c in nulls.values())
    assert "set_modules_to_forward_prefetch([next])" in nulls["v191"]["fix"]
    assert "set_modules_to_backward_prefetch([prev])" in nulls["v191"]["fix"]
    assert nulls["v191"]["planted"] == "FSDP2's default prefetching"
    assert (
        "DDP(bucket_cap_mb=50, gradient_as_bucket_view=True, static_graph=True)"
        in (nulls["v192"]["fix"])
    )
    assert nulls["v192"]["planted"] == "DDP's defaults (bucket_cap_mb=25)"


def _two_rank_child(rank: int, pg_file: str, out: str) -> None:
    """One of two gloo processes: every case of the part built as planted and fixed (--quick
    sizes; torch.compile replaced by a recorder of its calls that returns the model), stepped
    twice (v188's second step profiled: its ``aten::log`` calls counted); saves, per (case,
    variant), this rank's meta, samples, compile calls, log count and the full parameters."""
    import gc

    import record_new
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    record_new.QUICK = True
    calls: list[str] = []

    def compile_(model, **kw):
        calls.append(type(model).__name__)
        return model

    torch.compile = compile_
    # a first fix compiles the model in place: recorded the same way, the model left eager
    torch.nn.Module.compile = lambda self, *a, **kw: calls.append(f"{type(self).__name__}.compile")
    dist.init_process_group("gloo", init_method=f"file://{pg_file}", rank=rank, world_size=2)
    got: dict = {}
    try:
        for case in [*record_blind12.ORDER, *record_blind12.FIRST_FIXES]:
            for variant in ("planted", "fixed"):
                calls.clear()
                step, n, meta, model = record_blind12.build(case, variant, "cpu", rank, 2)
                step()
                logs = 0
                if case == "v188":
                    with profile(activities=[ProfilerActivity.CPU]) as prof:
                        step()
                    logs = sum(e.count for e in prof.key_averages() if e.key == "aten::log")
                else:
                    step()
                params = [
                    (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
                    for p in model.parameters()
                ]
                got[case, variant] = {
                    "meta": dict(meta),
                    "samples": n,
                    "calls": list(calls),
                    "logs": logs,
                    "params": params,
                }
                del step, model, meta
                gc.collect()  # persistent DataLoader workers shut down before the next case
                dist.barrier()
        torch.save(got, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
    os._exit(0)  # gloo's teardown at interpreter exit aborts now and then (v170's too)


@pytest.mark.slow
def test_every_case_builds_on_two_gloo_ranks_and_differs_only_as_planted(
    tmp_path: Path,
) -> None:
    """The quick recipe of every case under gloo with 2 processes, as ``drive --quick --cpu``
    runs it: planted and fixed build the same model and, two steps on, hold the same parameters
    on both ranks; only the planted thing differs, as each variant's record says."""
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    mp.spawn(_two_rank_child, args=(str(tmp_path / "pg"), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]

    def meta(rank: int, case: str, key: str) -> tuple:
        return tuple(ranks[rank][case, v]["meta"][key] for v in ("planted", "fixed"))

    for got in ranks:
        for case in record_blind12.ORDER:
            p, f = got[case, "planted"], got[case, "fixed"]
            assert p["samples"] == f["samples"] > 0, case
            assert [t.shape for t in p["params"]] == [t.shape for t in f["params"]], case
            if case in SAME_MATH:
                for a, b in zip(p["params"], f["params"], strict=True):
                    torch.testing.assert_close(a, b, msg=case)
    for rank in (0, 1):
        # FSDP2: v185 and v186 defeat the prefetch when planted; v191 sets gpuscope's when fixed
        for case in ("v185", "v186"):
            assert meta(rank, case, "prefetch") == ("defeated", "default")
            assert (
                "gate" in meta(rank, case, "fsdp")[0] and "gate" not in meta(rank, case, "fsdp")[1]
            )
        assert meta(rank, "v191", "prefetch") == ("default", "explicit")
        assert "explicit prefetch" in meta(rank, "v191", "fsdp")[1]
        assert "prefetch" not in meta(rank, "v191", "fsdp")[0]
        # DDP's buckets: v187 one bucket planted, defaults fixed; v192 defaults, then gpuscope's
        assert meta(rank, "v187", "ddp") == ({"bucket_cap_mb": 4096}, "defaults (bucket_cap_mb=25)")
        assert meta(rank, "v192", "ddp") == (
            "defaults (bucket_cap_mb=25)",
            {"bucket_cap_mb": 50, "gradient_as_bucket_view": True, "static_graph": True},
        )
        # v190: torch.compile once, on the fixed variant only, of the tensor-parallel model
        assert meta(rank, "v190", "compiled") == (False, True)
        assert [ranks[rank]["v190", v]["calls"] for v in ("planted", "fixed")] == [[], ["GPTJ"]]
        assert all(
            not ranks[rank][c, v]["calls"]
            for c in record_blind12.ORDER
            if c != "v190"
            for v in ("planted", "fixed")
        )
        # v189: rank 1 alone loads in its training process when planted
        assert meta(rank, "v189", "num_workers_by_rank") == ([2, 0], [2, 2])
    assert meta(1, "v189", "num_workers") == (0, 2) and meta(0, "v189", "num_workers") == (2, 2)
    # the first fixes: the base case's planted variant both times, compiled in place when fixed
    # (v191c, v192c), or at four times its batch a rank (v192b: batch_size)
    for rank in (0, 1):
        for case, spec in record_blind12.FIRST_FIXES.items():
            base = spec["base"]
            how = spec["how"]
            assert meta(rank, case, "applied") == (False, True)
            assert meta(rank, case, "first_fix") == (how, how)
            assert meta(rank, case, "base_case") == (base, base)
            if how == "batch_size":
                n0 = ranks[rank][base, "planted"]["samples"]
                assert ranks[rank][case, "planted"]["samples"] == n0
                assert ranks[rank][case, "fixed"]["samples"] == 4 * n0
                assert not ranks[rank][case, "fixed"]["calls"]
                continue
            assert [len(ranks[rank][case, v]["calls"]) for v in ("planted", "fixed")] == [0, 1]
            assert ranks[rank][case, "fixed"]["calls"][0].endswith(".compile")
            for v in ("planted", "fixed"):
                for a, b in zip(
                    ranks[rank][case, v]["params"],
                    ranks[rank][base, "planted"]["params"],
                    strict=True,
                ):
                    torch.testing.assert_close(a, b, msg=case)
    # v188: rank 0 alone logs each head's entropy (one log a head) when planted
    heads = ranks[0]["v188", "planted"]["meta"]["heads_logged"]
    assert heads > 0 and ranks[0]["v188", "planted"]["logs"] == heads
    assert ranks[0]["v188", "fixed"]["logs"] == 0
    assert ranks[1]["v188", "planted"]["logs"] == ranks[1]["v188", "fixed"]["logs"] == 0


@pytest.mark.skipif(not (VAL / "truth.json").exists(), reason="validation set not recorded")
def test_the_first_fixes_timed_are_what_their_files_say() -> None:
    """truth.json's ``first_fixes`` of this part: torch.compile, gpuscope's first fix at 5433cc1
    on the nulls v191 (11.3 %, 0.1-22.4) and v192 (28.6 %, 0.5-52.1), timed on their planted
    variants (5 rounds each, 4 x H200): 3.5 % and 5.0 %; and four times v192's batch a rank
    (``batch_size``, first at 87a823a at 33.0 % per sample; 3 rounds, 2 x H200): 42.7 % a
    sample, more than the planted buckets' 12.6."""
    import json

    assert_first_fixes(record_blind12)
    got = {c["case"]: c for c in json.loads((VAL / "truth.json").read_text())["first_fixes"]}
    assert got["v192b"]["unit"] == "us per sample"
    assert got["v192b"]["gain_pct"] == pytest.approx(42.7, abs=0.05)
