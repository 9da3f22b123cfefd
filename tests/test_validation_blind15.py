"""The validation set's fifteenth blind part (v209-v214, record_blind15.py over blind15_a.py): its
cases are their own group (``blind15``), held out, on model families no earlier case used, and
all on two GPUs under torchrun: an uneven batch split under DDP, host work of rank 0 alone (its
training metric in Python), activation checkpointing under FSDP2 where most of the memory is
free, DDP's gradients held in one bucket, FSDP2's forward all-gathers serialized behind the
compute (unshard with async_op=True) against gpuscope's explicit prefetch, and a pair chosen to
gain nothing (DataLoader workers beside a slice and a stack on a GPU-bound step). Nothing here
analyses a trace: the part is judged once, by the lead, with ``validate_gains_set.py --blind``.
Every build here is at the --quick sizes on the CPU under gloo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from validation_parts import (
    VAL,
    assert_case_words,
    assert_device_script_drives_lanes,
    assert_new_families,
    assert_part_layout,
    make_truth,
    record_blind15,
)

FAMILIES = {
    "v209": "ResNeSt",
    "v210": "LayoutLM",
    "v211": "MPT",
    "v212": "Marian",
    "v213": "StableLM",
    "v214": "MobileViT",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

FIXES = {
    "v209": "load_imbalance",
    "v210": "load_imbalance",
    "v211": "activation_checkpointing",
    "v212": "overlap_communication",
    "v213": "fsdp_prefetch",
    "v214": "dataloader_workers",
}
"""Each case's expected fix."""

SAME_MATH = frozenset(record_blind15.CASES) - {"v209"}
"""The cases whose fix leaves the step's arithmetic alone on a CPU (a metric beside the step,
checkpointing, which recomputes the same values, DDP's buckets, FSDP2's prefetch order, loading
workers over the same samples in the same order): both variants, seeded alike, end two steps
with the same parameters on both ranks. v209's fix moves images from rank 1 to rank 0."""

LANES = ("v209,v210,v211", "v212,v213,v214")
"""The two calls' lanes, one of both GPUs each, as the recorder and the device script plan them."""


def test_the_fifteenth_blind_part_is_its_own_held_out_group_numbered_on_from_v209() -> None:
    assert_part_layout(record_blind15, "blind15", 209, (record_blind15.blind15_a,), count=6)
    assert record_blind15 in make_truth.BLIND_PARTS  # the sixteenth part follows it
    assert "blind15" in make_truth.GROUPS
    # the first fixes named where the planted one gained nothing, each on two GPUs
    assert {k: (v["base"], v["how"], v["gpus"]) for k, v in record_blind15.FIRST_FIXES.items()} == {
        "v209c": ("v209", "cuda_graphs", 2),
        "v212k": ("v212", "compile", 2),
        "v213k": ("v213", "compile", 2),
        "v214k": ("v214", "compile", 2),
    }
    # not recorded yet: make_truth leaves out every case without its timing.json
    recorded = [c for c in record_blind15.ORDER if (VAL / c / "timing.json").exists()]
    assert all(make_truth.single(c) is not None for c in recorded)


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind15, FAMILIES)


def test_six_two_gpu_pairs_five_fixes_and_one_null() -> None:
    from gpuscope.analysis.fixes import BY_ID
    from gpuscope.analysis.fixes.fsdp_prefetch import WORDS

    cases = record_blind15.CASES
    assert_case_words(record_blind15)
    assert {k: c["expected_fix"] for k, c in cases.items()} == FIXES
    assert set(FIXES.values()) <= set(BY_ID)
    assert all(c["gpus"] == 2 for c in cases.values()) and len(cases) == 6
    assert not any(c.get("compiled") or "torch.compile(" in c["fix"] for c in cases.values())
    nulls = {k: c for k, c in cases.items() if c.get("null")}
    assert set(nulls) == {"v214"}
    assert all(c["name"] == f"null_{c['expected_fix']}" for c in nulls.values())
    assert all("gains ~0" in c["fix"] for c in nulls.values())
    assert "gains ~0" not in "".join(c["fix"] for k, c in cases.items() if k not in nulls)
    # v209: rank 1 gets 1.5 x rank 0's work; the job's images the same in both variants
    assert "rank 1" in cases["v209"]["planted"] and "1.5" in cases["v209"]["planted"]
    assert "(24 and 16)" in cases["v209"]["planted"] and "(20 each)" in cases["v209"]["fix"]
    # v210: rank 0 alone, its metric in Python; fixed on the GPU
    assert "rank 0 alone" in cases["v210"]["planted"]
    assert ".tolist()" in cases["v210"]["planted"] and "on the GPU" in cases["v210"]["fix"]
    # v211: every FSDP2 block checkpointed, where most of the memory is free
    assert "use_reentrant=False" in cases["v211"]["planted"]
    assert cases["v211"]["fix"] == "checkpointing dropped"
    assert "FSDP2" in cases["v211"]["model"] and "most of its memory free" in cases["v211"]["model"]
    # v212: one 4 GB bucket against DDP's defaults
    assert cases["v212"]["planted"].startswith("DDP(bucket_cap_mb=4096)")
    assert cases["v212"]["fix"].startswith("DDP's defaults")
    # v213: all-gathers serialized by async unshards, fixed with the unit's own code
    assert "FSDP2" in cases["v213"]["model"] and "reshard after forward" in cases["v213"]["model"]
    assert cases["v213"]["planted"].startswith("FSDPModule._set_unshard_async_op(True)")
    assert "set_modules_to_forward_prefetch([next])" in cases["v213"]["fix"]
    assert "set_modules_to_backward_prefetch([prev])" in cases["v213"]["fix"]
    assert "gpuscope's fsdp_prefetch code" in cases["v213"]["fix"]
    assert "set_modules_to_forward_prefetch([nxt])" in WORDS.code  # what the unit tells
    assert "set_modules_to_backward_prefetch([prev])" in WORDS.code
    # v214: v83's null on 2 GPUs
    assert cases["v214"]["planted"] == "DataLoader(num_workers=0)"
    assert cases["v214"]["fix"].startswith("DataLoader(num_workers=4, persistent_workers=True)")
    assert "GPU-bound" in cases["v214"]["model"]


def test_the_device_script_drives_the_part_in_one_lane_of_both_gpus() -> None:
    """record_blind15_device.sh drives the part alone or in lanes, and it and the recorder name
    the same two calls, each one lane of both GPUs and 32 cores: every case once, in order."""
    assert_device_script_drives_lanes(record_blind15)
    script = (make_truth.HERE / "record_blind15_device.sh").read_text()
    doc = record_blind15.__doc__ or ""
    for lane in LANES:
        assert f'"0,1/0-31/{lane}"' in script and f'"0,1/0-31/{lane}"' in doc, lane
    assert ",".join(LANES).split(",") == record_blind15.ORDER
    assert "nvidia-h200-x2" in script and "nvidia-h200-x2" in doc


def test_the_host_and_gpu_metrics_of_v210_agree() -> None:
    """v210's two ways of counting its metric give the same counts: the planted Python entity
    extraction (seqeval's rules, page by page over the scored tokens) and the fixed one's
    cummax/cummin marks over whole pages, on synthetic pages with predictions more or less
    wrong, unscored tokens given any label."""
    torch = pytest.importorskip("torch")
    a = record_blind15.blind15_a
    for seed in range(12):
        gen = torch.Generator().manual_seed(seed)
        _ids, _boxes, labels = a._layout_batch(torch, 3, 96, 3000, gen)
        pred = labels.clamp_min(0)
        wrong = torch.rand(pred.shape, generator=gen) < (0.0, 0.05, 0.3, 0.8)[seed % 4]
        pred = torch.where(wrong, torch.randint(0, 7, pred.shape, generator=gen), pred)
        pred = torch.where(labels < 0, torch.randint(0, 7, pred.shape, generator=gen), pred)
        scored = labels >= 0
        pos = torch.arange(labels.shape[1]).expand_as(labels)
        gk, gs, ge = a._chunk_marks(torch, labels, scored, pos)
        pk, ps, pe = a._chunk_marks(torch, pred, scored, pos)
        right = gs & ps & (gk == pk) & (ge == pe)
        for b in range(labels.shape[0]):
            g = [a.FUNSD_LABELS[t] for t in labels[b].tolist() if t >= 0]
            p = [
                a.FUNSD_LABELS[t]
                for t, ok in zip(pred[b].tolist(), scored[b].tolist(), strict=True)
                if ok
            ]
            found_g, found_p = set(a._chunks(g)), set(a._chunks(p))
            assert len(found_g) == int(gs[b].sum()) > 0
            assert len(found_p) == int(ps[b].sum())
            assert len(found_g & found_p) == int(right[b].sum())
            if seed % 4 == 0:  # every prediction right
                assert found_g == found_p


def _two_rank_child(rank: int, pg_file: str, out: str) -> None:
    """One of two gloo processes: every case of the part built as planted and fixed (--quick
    sizes), stepped twice; torch.utils.checkpoint and Tensor.tolist counted in each build's two
    steps. Saves, per (case, variant), this rank's meta, samples, those counts, v210's metric
    counts and the full parameters."""
    import gc
    import multiprocessing

    import record_new
    import torch
    import torch.distributed as dist
    import torch.utils.checkpoint as ckpt
    from torch.distributed.tensor import DTensor

    torch.set_num_threads(1)
    # DataLoader workers forked, as in a torchrun job's process (Linux's default; mp.spawn made
    # this child's default spawn, which restarts Python and torch in each worker)
    multiprocessing.set_start_method("fork", force=True)
    record_new.QUICK = True
    now = [("", "")]
    counts: dict[tuple[str, str, str], int] = {}
    real_checkpoint, real_tolist = ckpt.checkpoint, torch.Tensor.tolist

    def count(what: str) -> None:
        key = (*now[-1], what)
        counts[key] = counts.get(key, 0) + 1

    def checkpoint(fn, *a, **kw):
        assert kw.get("use_reentrant") is False
        count("checkpoint")
        return real_checkpoint(fn, *a, **kw)

    def tolist(self):
        count("tolist")
        return real_tolist(self)

    ckpt.checkpoint = checkpoint
    torch.Tensor.tolist = tolist
    dist.init_process_group("gloo", init_method=f"file://{pg_file}", rank=rank, world_size=2)
    got: dict = {}
    try:
        for case in record_blind15.ORDER:
            for variant in ("planted", "fixed"):
                step, n, meta, model = record_blind15.build(case, variant, "cpu", rank, 2)
                now.append((case, variant))  # the two steps' calls, not the build's
                step()
                step()
                now.append(("", ""))
                metric = step.metric_counts() if hasattr(step, "metric_counts") else None
                params = [
                    (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
                    for p in model.parameters()
                ]
                got[case, variant] = {
                    "meta": dict(meta),
                    "samples": n,
                    "checkpoints": counts.get((case, variant, "checkpoint"), 0),
                    "tolists": counts.get((case, variant, "tolist"), 0),
                    "metric": metric,
                    "params": params,
                }
                del step, model, meta
                if case == "v214":  # its persistent DataLoader workers shut down
                    gc.collect()
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
    on both ranks (but v209, whose fix moves images between the ranks); only the planted thing
    differs, as each variant's record says: v209 the images per rank (4 and 6 against 5 and 5,
    10 a step either way), v210 rank 0's metric in Python (2 .tolist() a step, on rank 0 only)
    against the same counts on the GPU, v211 every block checkpointed, v212 DDP's bucket cap,
    v213 the explicit prefetch over the async unshards, v214 the loader's workers."""
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    mp.spawn(_two_rank_child, args=(str(tmp_path / "pg"), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]

    def meta(rank: int, case: str, key: str) -> tuple:
        return tuple(ranks[rank][case, v]["meta"][key] for v in ("planted", "fixed"))

    def each(rank: int, case: str, key: str) -> tuple:
        return tuple(ranks[rank][case, v][key] for v in ("planted", "fixed"))

    for got in ranks:
        for case in record_blind15.ORDER:
            p, f = got[case, "planted"], got[case, "fixed"]
            assert p["samples"] > 0 and f["samples"] > 0, case
            assert [t.shape for t in p["params"]] == [t.shape for t in f["params"]], case
            if case in SAME_MATH:
                assert p["samples"] == f["samples"], case
                for a, b in zip(p["params"], f["params"], strict=True):
                    torch.testing.assert_close(a, b, msg=case)
    for case in SAME_MATH:  # DDP and FSDP2 keep both ranks' parameters the same
        for a, b in zip(
            ranks[0][case, "fixed"]["params"], ranks[1][case, "fixed"]["params"], strict=True
        ):
            torch.testing.assert_close(a, b, msg=case)
    # v209: rank 1 gets 1.5 x rank 0's images planted, the same 10 split evenly fixed
    assert each(0, "v209", "samples") == (4, 5) and each(1, "v209", "samples") == (6, 5)
    for rank in (0, 1):
        assert meta(rank, "v209", "batch_by_rank") == ([4, 6], [5, 5])
        assert meta(rank, "v209", "samples_per_job_step") == (10, 10)
    # v210: rank 0 alone copies predictions and labels to the host, twice a step, planted only
    assert each(0, "v210", "tolists") == (2 * 2, 0)
    assert each(1, "v210", "tolists") == (0, 0)
    assert meta(0, "v210", "host_metric_tokens_per_step")[0] > 0
    assert meta(0, "v210", "host_metric_tokens_per_step")[1] == 0
    assert meta(1, "v210", "host_metric_tokens_per_step") == (0, 0)
    planted, fixed = each(0, "v210", "metric")
    assert planted == fixed and planted[1] == 2 * meta(0, "v210", "scored_tokens")[0]
    assert sum(planted[2:5]) > 0  # the gold entities of two steps, counted both ways
    assert each(1, "v210", "metric") == ([0] * 11, [0] * 11)  # rank 1 keeps no metric
    for rank in (0, 1):
        # v211: each of its blocks (2 at the quick sizes) checkpointed in each of two steps
        assert each(rank, "v211", "checkpoints") == (2 * 2, 0)
        assert meta(rank, "v211", "checkpointed_modules") == (2, 0)
        assert all(
            ranks[rank][c, v]["checkpoints"] == 0
            for c in record_blind15.ORDER
            if c != "v211"
            for v in ("planted", "fixed")
        )
        # v212: one 4 GB bucket planted, DDP's defaults fixed, as the DDP object holds them
        assert meta(rank, "v212", "bucket_cap_mb") == (4096, 25)
        assert meta(rank, "v212", "ddp") == ({"bucket_cap_mb": 4096}, "defaults (bucket_cap_mb=25)")
        # v213: async unshards in both; gpuscope's explicit prefetch fixed only
        assert meta(rank, "v213", "unshard_async_op") == (True, True)
        assert meta(rank, "v213", "reshard_after_forward") == (True, True)
        assert meta(rank, "v213", "prefetch")[1] == "explicit"
        assert meta(rank, "v213", "forward_prefetch_set") == (0, 2)  # 3 layers at quick sizes
        assert meta(rank, "v213", "backward_prefetch_set") == (0, 2)
        assert "explicit prefetch" in meta(rank, "v213", "fsdp")[1]
        assert "prefetch" not in meta(rank, "v213", "fsdp")[0]
        # v214: the loader's workers
        assert meta(rank, "v214", "num_workers") == (0, 2)
        assert meta(rank, "v214", "persistent_workers") == (False, True)
