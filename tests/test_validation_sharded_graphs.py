"""CUDA graphs around FSDP2's and DTensor's collectives (sample_traces/validation/
record_sharded_graphs.py, its timings in sharded_graphs/ and logs/sharded_graphs_*.log): the
recorder builds each 2-GPU step as its base case builds it and compiles it with reduce-overhead
only in the fixed runs; the recorded timings are what ``cuda_graphs`` reads its silence on sharded
ranks from (docs/metrics.md; tests/test_cuda_graphs_eager.py holds the rule's side)."""

from __future__ import annotations

import json
import os
import re
import statistics
from pathlib import Path

import pytest
from validation_parts import ROOT, VAL
from validation_parts import record_sharded_graphs as rsg

FSDP_CASES = ("v191g", "v185g", "v186g", "v170g")
"""The FSDP2 steps timed: three rounds each, v170g two (the rest of a later lease)."""
ROUNDS = {"v170g": 2}
"""The cases timed in fewer than three rounds."""
TP_CASES = ("v171g", "v190g")
"""The tensor-parallel steps whose compiled runs never ended (the logs' TIMEOUT lines)."""


def _two_rank_child(rank: int, pg_file: str, out: str) -> None:
    """One of two gloo processes: every case built as planted and fixed (--quick sizes;
    ``nn.Module.compile`` replaced by a recorder of its mode), stepped once; saves, per (case,
    variant), this rank's meta, the compile calls and the parameters, and the base case's own
    variant's parameters."""
    import record_new
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    torch.set_num_threads(1)
    record_new.QUICK = True
    calls: list[object] = []
    torch.nn.Module.compile = lambda self, *a, **kw: calls.append(kw.get("mode"))
    dist.init_process_group("gloo", init_method=f"file://{pg_file}", rank=rank, world_size=2)

    def params(model) -> list:
        return [
            (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for p in model.parameters()
        ]

    got: dict = {}
    try:
        for case, spec in rsg.CASES.items():
            base = spec["base"]
            step, _n, _meta, model = rsg.PARTS[base].build(
                base, spec["base_variant"], "cpu", rank, 2
            )
            step()
            got[case, "base"] = {"params": params(model)}
            for variant in ("planted", "fixed"):
                calls.clear()
                step, _n, meta, model = rsg.build(case, variant, "cpu", rank, 2)
                step()
                kept = {k: v for k, v in meta.items() if isinstance(v, (str, bool, int, float))}
                got[case, variant] = {"meta": kept, "calls": list(calls), "params": params(model)}
                dist.barrier()
        torch.save(got, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
    os._exit(0)  # gloo's teardown at interpreter exit aborts now and then


@pytest.mark.slow
def test_each_case_is_its_base_step_compiled_with_reduce_overhead_only_when_fixed(
    tmp_path: Path,
) -> None:
    """On two gloo ranks: both variants of a case build its base case's ``base_variant`` (the
    same parameters as the base's own build, one step on), and only the fixed one calls
    ``model.compile(mode="reduce-overhead")``, once; the record says so."""
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    mp.spawn(_two_rank_child, args=(str(tmp_path / "pg"), str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        for case, spec in rsg.CASES.items():
            for variant in ("planted", "fixed"):
                g = got[case, variant]
                applied = variant == "fixed"
                assert g["calls"] == (["reduce-overhead"] if applied else []), (case, variant)
                assert g["meta"]["applied"] is applied
                assert g["meta"]["base_case"] == spec["base"]
                assert g["meta"]["base_variant"] == spec["base_variant"]
                assert g["meta"]["first_fix"] == "cuda_graphs"
                assert ("compiled_as" in g["meta"]) is applied
                for a, b in zip(g["params"], got[case, "base"]["params"], strict=True):
                    torch.testing.assert_close(a, b, msg=f"{case} {variant}")
        # the FSDP2 steps keep FSDP2's default prefetching; the DTensor steps stay eager
        for case in FSDP_CASES:
            assert got[case, "planted"]["meta"]["prefetch"] == "default", case
        for case in ("v171g", "v190g"):
            assert got[case, "planted"]["meta"]["compiled"] is False, case


def _timings(case: str) -> list[dict]:
    doc = json.loads((VAL / "sharded_graphs" / case / "timing.json").read_text())
    assert doc["env"]["device"] == "NVIDIA H200" and doc["env"]["gpus"] == 2
    return [r for r in doc["runs"] if r["mode"] == "time"]


def test_under_fsdp2_every_round_of_replayed_graphs_ran_the_step_over_twice_as_long() -> None:
    """sharded_graphs/<case>/timing.json: three rounds of eager against reduce-overhead (v170g
    two), each a fresh 2-GPU job, the fix applied only in the fixed runs, which compiled the
    model; every round's fixed step is over 2x its eager one; docs/metrics.md gives the
    medians."""
    metrics = (ROOT / "docs" / "metrics.md").read_text()
    for case in FSDP_CASES:
        runs = _timings(case)
        by_round: dict[int, dict[str, dict]] = {}
        for r in runs:
            assert r["gpus"] == 2 and r["applied"] == (r["variant"] == "fixed")
            assert r["base_case"] == rsg.CASES[case]["base"]
            by_round.setdefault(r["round"], {})[r["variant"]] = r
        assert sorted(by_round) == list(range(ROUNDS.get(case, 3))), case
        for pair in by_round.values():
            assert pair["fixed"]["compiled_as"]
            assert pair["fixed"]["step_ms_median"] > 2 * pair["planted"]["step_ms_median"], case
        eager = statistics.median(p["planted"]["step_ms_median"] for p in by_round.values())
        graphs = statistics.median(p["fixed"]["step_ms_median"] for p in by_round.values())
        words = f"{rsg.CASES[case]['base']} {eager:.1f} → {graphs:.3g} ms"
        assert words in metrics, words


def test_under_dtensor_no_run_with_replayed_graphs_ended() -> None:
    """logs/sharded_graphs_a.log and _c.log: each tensor-parallel case's fixed runs (two each)
    ran past the driver's child timeout, and its eager runs were timed."""
    text = "".join((VAL / "logs" / f"sharded_graphs_{t}.log").read_text() for t in "abc")
    for case in TP_CASES:
        assert text.count(f"TIMEOUT {case} fixed time") == 2, case
        assert not re.search(rf"\] {case} \S+ +fixed +time", text), case
        assert len(re.findall(rf"\] {case} \S+ +planted +time +[\d.]+ ms/step", text)) >= 2, case


@pytest.mark.slow
def test_the_replayed_fsdp2_step_records_its_backward_graph_again_every_step(con) -> None:
    """v191g's fixed variant (reduce-overhead over FSDP2), traced on 2 H200s after its warm-up and
    40 timed steps (sharded_graphs/v191gc, logs/sharded_graphs_v191gc_trace.log): in each of the
    three traced steps of both ranks CUDA graphs were captured again (3, 2 and 1
    ``cudaStreamBeginCapture`` with its ``cudaGraphInstantiateWithFlags``, one
    ``CUDAGraphNode.record`` each, backward graphs), beside 12 replays a step: gpuscope counts the
    12 captures of the window as the program's, in all 3 steps (recorded again, not a warm-up),
    and the rank is sharded (FSDP's all-gathers), so
    neither CUDA graphs nor their compiled re-timing is told there."""
    import gzip

    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths

    folder = VAL / "sharded_graphs" / "v191gc"
    for path in sorted(folder.glob("*.json.gz")):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        steps = sorted(
            (
                e
                for e in events
                if e.get("cat") == "user_annotation" and "ProfilerStep#" in e["name"]
            ),
            key=lambda e: e["ts"],
        )
        records = [
            sum(
                1
                for e in events
                if e.get("name") == "CUDAGraphNode.record"
                and s["ts"] <= e["ts"] < s["ts"] + s["dur"]
            )
            for s in steps
        ]
        assert records == [3, 2, 1], (path.name, records)
    [res] = ingest_paths(con, [folder])
    for rank in (0, 1):
        r = analyze_run(con, res.run_id, rank=rank, with_path=False, stored_parts=False)
        assert r.compiled is not None and r.compiled.cuda_graphs
        assert r.compiled.graph_captures == 12 and r.compiled.graph_launches_per_step == 12.0
        assert r.compiled.graph_capture_steps == 3 and r.compiled.recaptured
        assert r.sharded_by == "FSDP"
        assert not {x.id for x in r.recommendations} & {"cuda_graphs", "compiled_overhead"}
