"""The channels_last factors of the mixed-precision fix (``mixed_precision.CL_*``) against the
traces they were read from: each case's fixed variant in channels_last bf16, traced on the H200
(sample_traces/validation/advised/), beside its planted NCHW fp32/TF32 trace on the same GPU."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest
from gpuscope.analysis.event_classes import CUDNN_LAYOUT_RE
from gpuscope.analysis.fixes import mixed_precision as MP
from gpuscope.analysis.kernel_names import classify_kernel
from gpuscope.analysis.tensor_cores import tensor_core_info

VAL = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"
SAME_GPU = ("v45", "v104", "v135", "v205", "v227")
"""The cases whose planted trace was recorded on an H200, as the channels_last one."""


def per_step_ms(path: Path) -> tuple[str, Counter]:
    """(GPU, kernel time per profiled step (ms) by class: ``tf32_conv``, ``conv``, ``bn``
    (cuDNN's or PyTorch's BatchNorm), ``layout`` (cuDNN's transforms), ``other``)."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"]
    steps = {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    out: Counter = Counter()
    for e in events:
        if e.get("cat") != "kernel" or e.get("ph") != "X":
            continue
        name = e["name"]
        kind = classify_kernel(name, "kernel")
        if re.search(CUDNN_LAYOUT_RE, name, re.IGNORECASE):
            key = "layout"
        elif MP.CUDNN_BN_RE.search(name) or "batch_norm" in name:
            key = "bn"
        elif kind == "convolution":
            info = tensor_core_info(name, kind)
            key = "tf32_conv" if info.tensor_core and info.precision == "tf32" else "conv"
        else:
            key = "other"
        out[key] += e["dur"] / 1e3 / len(steps)
    return doc["deviceProperties"][0]["name"], out


@pytest.fixture(scope="module")
def ratios() -> dict[str, dict[str, float]]:
    got = {}
    for case in SAME_GPU:
        gpu_p, planted = per_step_ms(VAL / case / f"{case}_mixed_precision_rank0.pt.trace.json.gz")
        gpu_f, fixed = per_step_ms(
            VAL / "advised" / f"{case}cl_mixed_precision_rank0.pt.trace.json.gz"
        )
        assert gpu_p == gpu_f == "NVIDIA H200", case
        # every convolution kernel (TF32, and the few fp32 ones cuDNN runs beside them) against
        # the fixed run's, all bf16; the TF32 cases are those whose planted convolutions are TF32
        conv = planted["tf32_conv"] + planted["conv"]
        got[case] = {
            k: v
            for k, v in {
                "tf32_conv": (fixed["tf32_conv"] + fixed["conv"]) / conv
                if planted["tf32_conv"] > 0.5 * conv
                else None,
                "bn": fixed["bn"] / planted["bn"] if planted["bn"] > 0.05 else None,
                "layout": fixed["layout"] / planted["layout"] if planted["layout"] > 0.05 else None,
            }.items()
            if v is not None
        }
    return got


def test_tf32_convolutions_take_the_median_of_their_measured_ratios(ratios: dict) -> None:
    tf32 = {c: r["tf32_conv"] for c, r in ratios.items() if "tf32_conv" in r}
    assert sorted(tf32) == ["v104", "v135", "v205", "v227"]
    assert [round(tf32[c], 2) for c in ("v104", "v135", "v205", "v227")] == [0.3, 0.34, 0.35, 0.47]
    assert round(statistics.median(tf32.values()) * 20) / 20 == MP.CL_TF32_CONV


def test_batchnorm_and_layout_factors_lie_within_what_the_traces_show(ratios: dict) -> None:
    bn = {c: round(r["bn"], 2) for c, r in ratios.items() if "bn" in r}
    assert bn == {"v45": 0.45, "v104": 0.31, "v205": 0.51}
    assert min(bn.values()) <= MP.CL_CUDNN_BN <= max(bn.values())
    layout = {c: round(r["layout"], 2) for c, r in ratios.items() if "layout" in r}
    assert layout == {"v45": 0.0, "v104": 0.0, "v135": 0.0, "v205": 0.0, "v227": 0.09}
    assert statistics.median(layout.values()) == MP.CL_LAYOUT
