"""The validation set's eleventh blind part (v175-v184, record_blind11.py over blind11_a/b.py): its
cases are their own group (``blind11``), held out, on conv-net families no earlier case used; ten
one-GPU pairs: six ``cudnn_benchmark`` pairs over what cuDNN's heuristics meet differently
(transposed convs, dilated causal Conv1d, Conv3d, grouped convs, bf16 channels_last, dense large
kernels), two ``mixed_precision`` pairs on fp32 conv nets with cuDNN TF32 off in both variants,
and two ``cudnn_benchmark`` pairs chosen to gain nothing (a vision transformer whose only conv is
its patch embedding, a net of only kernel-1 convs). Nothing here analyses a trace: the part is
judged once, by the lead, with ``validate_gains_set.py --blind``."""

from __future__ import annotations

import pytest
from validation_parts import (
    TRUTH,
    assert_first_fixes,
    assert_first_fixes_apply_to_the_fixed_variant_only,
    assert_new_families,
    assert_part_layout,
    build_one_gpu_cases,
    counting_autocast,
    make_truth,
    record_blind11,
    variant_pair,
)

FAMILIES = {
    "v175": "Attention U-Net",
    "v176": "TCN",
    "v177": "nnU-Net",
    "v178": "SKNet",
    "v179": "PyramidNet",
    "v180": "AR-CNN",
    "v181": "Tiramisu",
    "v182": "SE-ResNet",
    "v183": "CaiT",
    "v184": "PointMLP",
}
"""Each case's architecture family, as its model description names it (case-sensitive)."""

BENCHMARK = ("v175", "v176", "v177", "v178", "v179", "v180", "v183", "v184")
"""The ``cudnn_benchmark`` pairs (the last two chosen to gain nothing)."""
PRECISION = ("v181", "v182")
"""The ``mixed_precision`` pairs (cuDNN TF32 off in both variants)."""
SAME_MATH = frozenset(record_blind11.CASES)
"""Every case's fix leaves the step's arithmetic alone on a CPU (cudnn flags and autocast change
nothing there): both variants, seeded alike, end two steps with the same parameters."""


def test_the_eleventh_blind_part_is_its_own_held_out_group_numbered_on_from_v175() -> None:
    parts = (record_blind11.blind11_a, record_blind11.blind11_b)
    assert_part_layout(record_blind11, "blind11", 175, parts, count=10)
    assert record_blind11 in make_truth.BLIND_PARTS  # the twelfth part follows it
    # recorded (2026-11-27, 4 x H100): every case has its timings, ten pairs of three rounds
    assert all(make_truth.single(c) is not None for c in record_blind11.ORDER)


def test_the_models_and_their_families_are_new() -> None:
    """No model description of this part is an earlier part's, and no family it names appears in
    an earlier case's model or in the recorders of ../fixes and ../multi_gpu."""
    assert_new_families(record_blind11, FAMILIES)


def test_six_benchmark_pairs_two_precision_pairs_and_two_nulls_all_on_one_gpu() -> None:
    from gpuscope.analysis.fixes import BY_ID

    cases = record_blind11.CASES
    assert {c["expected_fix"] for c in cases.values()} <= set(BY_ID)
    assert all(c.get("gpus", 1) == 1 for c in cases.values())
    assert not any(c.get("compiled") or "torch.compile(" in c["fix"] for c in cases.values())
    by_fix = {k: c["expected_fix"] for k, c in cases.items()}
    assert [k for k, f in by_fix.items() if f == "cudnn_benchmark"] == list(BENCHMARK)
    assert [k for k, f in by_fix.items() if f == "mixed_precision"] == list(PRECISION)
    for k in BENCHMARK:
        assert cases[k]["planted"] == "torch.backends.cudnn.benchmark = False", k
        assert cases[k]["fix"].startswith("torch.backends.cudnn.benchmark = True"), k
    for k in PRECISION:
        assert cases[k]["planted"] == "fp32, TF32 off", k
        assert "bf16 autocast" in cases[k]["fix"] and "TF32 still off" in cases[k]["fix"], k
        assert "NCHW" in cases[k]["model"] and "channels_last" not in cases[k]["model"], k
    nulls = {k: c for k, c in cases.items() if c.get("null")}
    assert {k: c["expected_fix"] for k, c in nulls.items()} == {
        "v183": "cudnn_benchmark",
        "v184": "cudnn_benchmark",
    }
    assert all(c["name"] == "null_cudnn_benchmark" for c in nulls.values())
    assert all("gains ~0" in c["fix"] for c in nulls.values())
    assert "only convolution" in cases["v183"]["model"]
    assert "only 1x1 convolutions" in cases["v184"]["model"]
    assert "channels_last" in cases["v179"]["model"] and "bf16" in cases["v179"]["model"]
    assert len(cases) == 10


@pytest.mark.slow
def test_every_case_builds_and_steps_on_the_cpu_differing_only_as_planted(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """Each builder's planted and fixed variants make the same model and take two steps (the CPU,
    --quick sizes). Only the planted thing differs, as each variant's record says: the benchmark
    pairs leave ``cudnn.benchmark`` off planted and on fixed; the precision pairs run fp32 with
    TF32 off planted and bf16 autocast with TF32 off fixed, benchmark off in both. Both variants
    of every case end with the same parameters."""
    pytest.importorskip("torch")
    import torch

    seen: dict[tuple[str, str], tuple[bool, bool, bool]] = {}
    real = record_blind11.build

    def build(case: str, variant: str, *a, **kw):
        out = real(case, variant, *a, **kw)
        seen[case, variant] = (
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
        )
        return out

    monkeypatch.setattr(record_blind11, "build", build)
    metas, samples, calls = build_one_gpu_cases(record_blind11, monkeypatch, SAME_MATH, BENCHMARK)
    assert calls == {}  # nothing compiled
    pair = variant_pair(metas)
    for c in BENCHMARK:
        assert pair(c, "torch_flags") == ({"cudnn_benchmark": False}, {"cudnn_benchmark": True})
        assert seen[c, "planted"] == (False, True, False), c  # cuDNN TF32 on, matmul TF32 off
        assert seen[c, "fixed"] == (True, True, False), c
        assert pair(c, "precision")[0] == pair(c, "precision")[1], c
        assert sum(pair(c, "conv_layers")[0].values()) > 0, c
    assert pair("v183", "conv_layers")[0] == {"Conv2d": 1}
    assert set(pair("v184", "conv_layers")[0]) == {"Conv1d"}
    assert pair("v177", "conv_layers")[0]["Conv3d"] > 0
    assert set(pair("v176", "conv_layers")[0]) == {"Conv1d"}  # 17 at full size, 7 quick
    assert pair("v175", "conv_layers")[0]["ConvTranspose2d"] == 4
    assert pair("v178", "grouped_convs")[0] > 0
    assert pair("v179", "memory_format") == ("channels_last", "channels_last")
    assert pair("v179", "precision")[0].startswith("bf16 autocast")
    for c in PRECISION:
        assert pair(c, "precision") == ("fp32, TF32 off", "bf16 autocast, TF32 off"), c
        assert seen[c, "planted"] == seen[c, "fixed"] == (False, False, False), c
    assert all(samples[c, "planted"] == samples[c, "fixed"] for c in SAME_MATH)


@pytest.mark.slow
def test_the_precision_pairs_step_under_autocast_only_when_fixed(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    """v181's and v182's loss runs under the kit's bf16 autocast (``k.ac``) in the fixed variant
    only, and the benchmark pairs v179 and v183 under it in both (their own bf16, not the fix)."""
    pytest.importorskip("torch")
    entered = counting_autocast(monkeypatch)
    counts = {}
    for case in ("v181", "v182", "v179", "v183"):
        for variant in ("planted", "fixed"):
            entered.clear()
            step, _n, _meta, _model = record_blind11.build(case, variant, "cpu")
            step()
            counts[case, variant] = len(entered)
    assert counts == {
        ("v181", "planted"): 0,
        ("v181", "fixed"): 1,
        ("v182", "planted"): 0,
        ("v182", "fixed"): 1,
        ("v179", "planted"): 1,
        ("v179", "fixed"): 1,
        ("v183", "planted"): 1,
        ("v183", "fixed"): 1,
    }


@pytest.mark.skipif(not TRUTH.exists(), reason="validation set not recorded")
def test_the_first_fixes_timed_are_what_their_files_say() -> None:
    """truth.json's ``first_fixes`` of this part: the fixes gpuscope named first at 2e02d2d in
    place of the planted cause, timed on the base cases' planted variants (3 rounds each, 4 x
    H200): bf16 autocast on v175 (10.0 %), v177 (24.4), v178 (8.3), v184 (4.6); torch.compile
    on v176 (20.1) and v179 (13.7). Three scatter over more than the rounds' limit and were not
    timed again this session: v178c, v179c, v184c."""
    assert_first_fixes(record_blind11, frozenset({"v178c", "v179c", "v184c"}))
    hows = {k: v["how"] for k, v in record_blind11.FIRST_FIXES.items()}
    assert hows == {
        "v175c": "bf16",
        "v176c": "compile",
        "v177c": "bf16",
        "v178c": "bf16",
        "v179c": "compile",
        "v184c": "bf16",
    }


@pytest.mark.slow
def test_the_first_fixes_apply_their_fix_to_the_fixed_variant_only(
    monkeypatch: pytest.MonkeyPatch, one_thread: None
) -> None:
    pytest.importorskip("torch")
    assert_first_fixes_apply_to_the_fixed_variant_only(record_blind11, monkeypatch)
