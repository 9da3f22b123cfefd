"""The validation set's twentieth blind part (v236-v239, record_blind20.py over blind20_a.py): its
cases are their own group (``blind20``), held out, all on one GPU, on model families no earlier
case used, each the optimizer's per-parameter loop (``foreach=False``) against ``fused=True``: an
xDeepFM-style click-through model, a CvT-style vision transformer, an NFNet-style network (Adam),
and one chosen to gain nothing, a Word2Vec-style skip-gram model of two tensors. Nothing here
analyses a trace: the part is judged once, by the lead, with ``validate_gains_set.py --blind``.
Every build here is at the --quick sizes on the CPU."""

from __future__ import annotations

from typing import Any

import pytest
from validation_parts import (
    VAL,
    assert_case_words,
    assert_device_script_drives_lanes,
    assert_first_fixes,
    assert_first_fixes_apply_to_the_fixed_variant_only,
    assert_new_families,
    assert_one_gpu_pairs,
    assert_part_layout,
    assert_recorded_part,
    autocast_counts,
    build_one_gpu_cases,
    make_truth,
    planted_on_meta,
    record_blind20,
    record_new,
    variant_pair,
)

FAMILIES = {
    "v236": "xDeepFM",
    "v237": "CvT",
    "v238": "NFNet",
    "v239": "Word2Vec",
}
"""Each case's architecture family, as its model description names it."""

NULLS = frozenset({"v239"})
"""The pair chosen to gain nothing, fixed before the first device call."""

TENSORS = {"v236": 93, "v237": 341, "v238": 233, "v239": 2}
"""Each case's parameter tensors at full size, as its description says (the loop's length)."""


def test_the_twentieth_blind_part_is_its_own_held_out_group_numbered_on_from_v236() -> None:
    assert_part_layout(record_blind20, "blind20", 236, (record_blind20.blind20_a,), count=4)
    assert make_truth.BLIND_PARTS[-1] is record_blind20
    assert make_truth.GROUPS[-1] == "blind20"
    # the first fix gpuscope named at the judgement (a32e846) where the planted fix was not, and
    # timed here (v237's, bf16 in channels_last, is record_advised's v237mc)
    assert {k: (v["base"], v["how"]) for k, v in record_blind20.FIRST_FIXES.items()} == {
        "v239k": ("v239", "compile")
    }


def test_the_first_fixes_apply_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind20, monkeypatch)


def test_the_models_and_their_families_are_new() -> None:
    assert_new_families(record_blind20, FAMILIES)


def test_four_one_gpu_pairs_of_the_optimizer_loop_one_of_them_a_null() -> None:
    cases = record_blind20.CASES
    assert_one_gpu_pairs(record_blind20, dict.fromkeys(cases, "optimizer_fused"), NULLS, set())
    assert_case_words(record_blind20)
    for case, c in cases.items():
        name = "Adam" if case == "v238" else "AdamW"
        assert c["planted"].startswith(f"{name}(foreach=False): a Python loop of ~")
        assert c["planted"].endswith(f"({TENSORS[case]} tensors)")
        assert c["fix"].startswith(f"{name}(fused=True)")
        assert f"{TENSORS[case]} parameter tensors" in c["model"]


def test_the_device_script_drives_the_part_in_one_lane() -> None:
    assert_device_script_drives_lanes(record_blind20)
    script = (make_truth.HERE / "record_blind20_device.sh").read_text()
    lane = "v236,v237,v238,v239"
    assert f"TAG {lane} 3 430" in script and f"TAG {lane} 3 430" in (record_blind20.__doc__ or "")
    assert lane.split(",") == record_blind20.ORDER


def _recorded_optimizers(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str], tuple]:
    """Every AdamW and Adam a build of the part makes: (class name, keyword arguments), by (case,
    variant)."""
    import torch

    made: dict[tuple[str, str], tuple] = {}
    now: list[tuple[str, str]] = [("", "")]
    real_build = record_blind20.build

    def recording(cls: Any) -> Any:
        class Recorded(cls):  # type: ignore[misc, valid-type]
            def __init__(self, params: Any, **kw: Any) -> None:
                made[now[-1]] = (cls.__name__, kw)
                super().__init__(params, **kw)

        return Recorded

    def build(case: str, variant: str, *a: Any, **kw: Any) -> Any:
        now.append((case, variant))
        return real_build(case, variant, *a, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", recording(torch.optim.AdamW))
    monkeypatch.setattr(torch.optim, "Adam", recording(torch.optim.Adam))
    monkeypatch.setattr(record_blind20, "build", build)
    return made


def test_every_case_builds_and_steps_on_the_cpu_differing_only_in_the_optimizer(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Both variants of each case make the same model and take two steps (the CPU, --quick
    sizes): the planted one builds its optimizer with ``foreach=False``, the fixed one with
    ``fused=True`` and nothing else differs; the fused step computes the loop's update (the same
    parameters after two steps, to float tolerance; v237's, whose norms' biases get gradients
    near Adam's eps, where the two round differently, in :func:`test_v237s_fused_update`);
    nothing is compiled."""
    pytest.importorskip("torch")
    made = _recorded_optimizers(monkeypatch)
    same = set(record_blind20.ORDER) - {"v237"}
    metas, samples, calls = build_one_gpu_cases(record_blind20, monkeypatch, same, ())
    pair = variant_pair(metas)
    assert calls == {}
    for case in record_blind20.ORDER:
        name = "Adam" if case == "v238" else "AdamW"
        assert made[case, "planted"] == (name, {"lr": 1e-4, "foreach": False}), case
        assert made[case, "fixed"] == (name, {"lr": 1e-4, "fused": True}), case
        assert pair(case, "optimizer") == (f"{name}(foreach=False)", f"{name}(fused=True)")
        assert pair(case, "param_tensors")[0] == pair(case, "param_tensors")[1] >= 2
        assert pair(case, "precision")[0] == pair(case, "precision")[1]
        assert samples[case, "planted"] == samples[case, "fixed"]
    assert pair("v239", "param_tensors") == (2, 2)


def test_v237s_fused_update(monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    """v237's parameters after two steps at the --quick sizes, fused against the loop: each within
    a quarter of the two steps' largest move (2 x lr = 2e-4), and nine in ten of their values
    within 1e-6 (the two differ only where a gradient is near eps = 1e-8)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(record_new, "QUICK", True)
    ends = {}
    for variant in ("planted", "fixed"):
        step, _n, _meta, model = record_blind20.build("v237", variant, "cpu")
        step()
        step()
        ends[variant] = torch.cat([q.detach().flatten() for q in model.parameters()])
    diff = (ends["planted"] - ends["fixed"]).abs()
    assert diff.max().item() < 0.25 * 2 * 1e-4
    assert (diff > 1e-6).float().mean().item() < 0.1


def test_only_v238_runs_under_autocast(monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    pytest.importorskip("torch")
    counts = autocast_counts(record_blind20, monkeypatch)
    assert counts == {
        (c, v): int(c == "v238") for c in record_blind20.ORDER for v in ("planted", "fixed")
    }


def test_full_sizes_on_the_meta_device() -> None:
    """At full size (built on the meta device, nothing run): the batches and parameter tensors the
    descriptions say, and the parameter counts of v237, v238 and v239."""
    pytest.importorskip("torch")
    got = planted_on_meta(record_blind20)
    assert [got[c][1] for c in record_blind20.ORDER] == [1024, 128, 64, 131_072]
    assert {c: got[c][2]["param_tensors"] for c in got} == TENSORS
    params = {c: got[c][2]["params"] for c in got}
    assert round(params["v237"] / 1e6, 1) == 20.0
    assert round(params["v238"] / 1e6, 1) == 71.5
    assert params["v239"] == 2 * 20_000 * 128
    for c in ("v237", "v238"):
        assert f"{params[c] / 1e6:.1f} M parameters" in record_blind20.CASES[c]["model"]


def test_every_recorded_case_is_whole() -> None:
    """Recorded on one H200 (2026-12-01): each case's planted trace and 3 rounds; v238, whose
    first three spread over 19.5 points, 3 more (timing_run2.json)."""
    assert_recorded_part(record_blind20)
    assert all((VAL / c / "timing.json").exists() for c in record_blind20.ORDER)
    rounds = [len(make_truth.single(c)["timings"]["planted"]) for c in record_blind20.ORDER]
    assert rounds == [3, 3, 6, 3]


def test_every_first_fix_is_timed() -> None:
    """torch.compile on v239's planted variant, named first at the judgement (a32e846), timed on
    one H200 (2026-12-01), 3 rounds paired in order; bf16 in channels_last on v237 is
    record_advised's v237mc (tests/test_validation_advised.py)."""
    assert_first_fixes(record_blind20)
    assert len(make_truth.first_fix("v239k")["planted"]) == 3


def test_torch_compile_on_three_embedding_heavy_planted_variants() -> None:
    """compile_embeddings.json (after the judgement, one H200): v30, v133 and v236's planted
    variants eager and under torch.compile, 3 rounds, each run a fresh process of its case and
    way, every compile without a graph break; the medians the validation README gives: 48.5 %
    on v30, -1.1 on v133, -4.2 on v236."""
    import json
    import statistics

    runs = json.loads((VAL / "compile_embeddings.json").read_text())["runs"]
    assert {(r["case"], r["how"], r["round"]) for r in runs} == {
        (c, h, n) for c in ("v30", "v133", "v236") for h in ("eager", "compile") for n in range(3)
    }
    assert len(runs) == 18 and all(r["device"] == "NVIDIA H200" for r in runs)
    assert all(r["graph_breaks"] == 0 for r in runs if r["how"] == "compile")
    ms = {(r["case"], r["how"], r["round"]): r["step_ms_median"] for r in runs}
    gains = {
        c: round(
            statistics.median(
                100 * (1 - ms[c, "compile", n] / ms[c, "eager", n]) for n in range(3)
            ),
            1,
        )
        for c in ("v30", "v133", "v236")
    }
    assert gains == {"v30": 48.5, "v133": -1.1, "v236": -4.2}
