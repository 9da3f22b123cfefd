"""Peak table, matching deviceProperties names, and the MFU helpers."""

from __future__ import annotations

import json

import pytest
from gpuscope.analysis.peaks import (
    DTYPES,
    NAME_RULES,
    PEAKS,
    achieved_tflops,
    match_model,
    mfu_busy_pct,
    mfu_pct,
    peak_for,
    peaks_markdown,
)
from hypothesis import given
from hypothesis import strategies as st
from test_analysis_kernels import DOCS
from tracegen import H100


def dev(name: str, **kw: object) -> dict[str, object]:
    return {"id": 0, "name": name, **kw}


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 SXM5 80GB", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI300A", "MI300A"),
        ("AMD Instinct MI325X", "MI325X"),
        ("AMD Instinct MI250X", "MI250X"),
        ("AMD Instinct MI250", "MI250"),
    ],
)
def test_name_matching(name, model):
    assert match_model(dev(name))[0] == model


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA H800",
        "Tesla V100-SXM3-32GB",
        "gfx942",
        "NVIDIA RTX A6000",
        "",
    ],
)
def test_unmatched_names_give_no_peak(name):
    p = peak_for([dev(name)], "bf16")
    assert p.tflops is None and p.reason


def test_h200_and_h100_sxm_peaks():
    """NVIDIA H100/H200 datasheets (SXM): TF32 989, BF16/FP16 1979, FP8 3958 TFLOP/s with sparsity;
    dense is half. FP32 67."""
    for name in ("NVIDIA H200", "NVIDIA H100 80GB HBM3"):
        got = {d: peak_for([dev(name)], d).tflops for d in ("fp32", "tf32", "bf16", "fp16", "fp8")}
        assert got == {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}
    assert peak_for([dev("NVIDIA H100 PCIe")], "bf16").tflops == 756.5
    assert peak_for([dev("NVIDIA H200 NVL")], "bf16").tflops == 835.5


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA A100-PCIE-40GB", "tf32", 156.0),
        ("NVIDIA A100-SXM4-40GB", "fp32", 19.5),
        ("NVIDIA A10", "fp16", 125.0),
        ("NVIDIA L4", "fp8", 242.5),
        ("NVIDIA L40S", "bf16", 362.05),
        ("Tesla V100-SXM2-16GB", "fp16", 125.0),
        ("Tesla T4", "fp16", 65.0),
        ("NVIDIA B200", "bf16", 2250.0),
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2),
        ("AMD Instinct MI300X", "bf16", 1307.4),
        ("AMD Instinct MI250X", "fp16", 383.0),
        ("AMD Instinct MI250X", "fp32", 95.7),
    ],
)
def test_table_values(name, dtype, tflops):
    assert peak_for([dev(name)], dtype).tflops == tflops


def test_missing_dtype_and_unpublished_parts_have_a_reason():
    p = peak_for([dev("Tesla V100-SXM2-16GB")], "bf16")
    assert p.tflops is None and p.gpu_model == "V100 SXM2" and "bf16" in p.reason
    g = peak_for([dev("NVIDIA A10G")], "bf16")
    assert g.tflops is None and "datasheet" in g.source
    assert peak_for([dev("NVIDIA A10")], None).tflops is None
    assert peak_for(None, "bf16").reason.startswith("unknown GPU")


def test_dtype_aliases():
    props = [dev("NVIDIA H200")]
    assert peak_for(props, "bfloat16").tflops == peak_for(props, "bf16").tflops == 989.4
    assert (
        peak_for(props, "float32").tflops == 67.0
        and peak_for(props, "float8_e4m3fn").tflops == 1978.9
    )


def test_device_properties_as_kineto_writes_them():
    assert peak_for([H100], "bf16").gpu_model == "H100 SXM"
    assert (
        peak_for(json.dumps([H100]), "bf16").tflops == 989.4
    )  # the ranks.device_properties JSON text
    assert peak_for(H100, "bf16").tflops == 989.4
    two = [dev("NVIDIA A10"), {**dev("NVIDIA H200"), "id": 1}]
    assert peak_for(two, "bf16", device=1).gpu_model == "H200"
    assert peak_for(two, "bf16").gpu_model == "A10"


def test_compute_capability_fallback_only_when_unambiguous():
    assert (
        match_model({"name": "weird", "computeMajor": 8, "computeMinor": 0, "numSms": 108})[0]
        == "A100"
    )
    assert (
        match_model({"name": "weird", "computeMajor": 9, "computeMinor": 0, "numSms": 114})[0]
        == "H100 PCIe"
    )
    # 132 SMs at cc 9.0 is H100 SXM, H100 NVL, H200 or H200 NVL: different peaks, so no guess
    assert (
        match_model({"name": "weird", "computeMajor": 9, "computeMinor": 0, "numSms": 132})[0]
        is None
    )
    assert (
        match_model({"name": "weird", "computeMajor": 8, "computeMinor": 6, "numSms": 72})[0]
        is None
    )


def test_mig_slice_is_scaled_by_sms():
    p = peak_for([dev("NVIDIA A100-SXM4-40GB MIG 3g.20gb", numSms=42)], "bf16")
    assert p.tflops == pytest.approx(312.0 * 42 / 108) and "MIG" in p.source
    assert peak_for([dev("NVIDIA H100 80GB HBM3 MIG 1g.10gb")], "bf16").tflops is None


def test_override():
    p = peak_for([dev("NVIDIA A10G")], "bf16", override_tflops=70.0)
    assert (p.tflops, p.source, p.gpu_model) == (70.0, "user override", "A10G")
    assert peak_for(None, "fp32", override_tflops=12.5).tflops == 12.5
    assert peak_for(None, "fp32", override_tflops=0).tflops is None


def test_mfu():
    # 876.2 GFLOP per step at 10 ms on a 989.4 TFLOP/s part: 8.856 %
    assert mfu_pct(876_173_328_384, 0.010, 989.4) == pytest.approx(
        100 * 876.173328384e9 / 0.010 / 989.4e12
    )
    assert mfu_busy_pct(1e12, 0.5, 100.0) == pytest.approx(2.0)
    assert achieved_tflops(2e12, 0.5) == 4.0
    for bad in ((None, 1, 1), (1, 0, 1), (1, 1, None), (-1, 1, 1), (1, 1, 0)):
        assert mfu_pct(*bad) is None


@given(st.floats(1e6, 1e16), st.floats(1e-4, 10), st.floats(1, 5000))
def test_mfu_is_flops_over_time_over_peak(flops, secs, peak):
    assert mfu_pct(flops, secs, peak) == pytest.approx(flops / secs / (peak * 1e12) * 100)


def test_table_is_consistent():
    for model, p in PEAKS.items():
        assert p.model == model and p.source
        assert set(p.tflops) <= set(DTYPES)
        if "bf16" in p.tflops and "fp32" in p.tflops:
            assert p.tflops["bf16"] > p.tflops["fp32"]
    models = {m for _, m, _ in NAME_RULES}
    assert models <= set(PEAKS)
    for _, model, example in NAME_RULES:
        assert match_model(dev(example))[0] == model


def test_docs_hold_the_peak_table():
    assert peaks_markdown() in DOCS.read_text()
