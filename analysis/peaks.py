"""Peak dense FLOP/s by GPU model and dtype, matched from Kineto's ``deviceProperties``; MFU helpers.

Every number is the vendor's dense figure (no 2:4 sparsity; where a datasheet lists only the sparse
figure, half of it), in TFLOP/s (TOPS for int8). Sources are in ``SOURCES`` and docs/metrics.md.
A device that cannot be matched with certainty gets no peak (``Peak.tflops is None`` with a reason):
a wrong MFU is worse than none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpuscope.analysis.json_row import JsonRow

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class GpuPeaks:
    model: str
    tflops: dict[str, float]
    source: str
    sms: int | None = None  # SMs / CUs of the full part, to scale MIG slices
    note: str = ""


_NV_V100 = "NVIDIA Tesla V100 GPU Accelerator datasheet (2020), nvidia.com/en-us/data-center/v100"
_NV_T4 = "NVIDIA T4 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/tesla-t4"
_NV_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021), nvidia.com/en-us/data-center/a100 (sparse figures halved)"
_NV_A10 = "NVIDIA A10 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/products/a10-gpu"
_NV_L4 = (
    "NVIDIA L4 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/l4 (sparse figures halved)"
)
_NV_L40 = "NVIDIA L40S / L40 datasheets, nvidia.com/en-us/data-center/l40s"
_NV_H100 = "NVIDIA H100 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/h100 (sparse figures halved)"
_NV_H200 = "NVIDIA H200 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/h200 (sparse figures halved)"
_NV_B200 = "NVIDIA HGX B200 / GB200 NVL72 specifications, nvidia.com/en-us/data-center/hgx (sparse figures halved)"
_NV_ADA = (
    "NVIDIA Ada GPU Architecture whitepaper, Appendix A (GeForce RTX 4090), FP32-accumulate rates"
)
_AMD_MI250 = "AMD Instinct MI250X / MI250 accelerator datasheets, amd.com/en/products/accelerators/instinct/mi200"
_AMD_MI300 = "AMD Instinct MI300X / MI300A / MI325X datasheets, amd.com/en/products/accelerators/instinct/mi300"

# MI325X is the MI300X's CDNA3 compute with more HBM: the same dense peaks.
_MI300X_DENSE = {
    "fp64": 163.4,
    "fp32": 163.4,
    "tf32": 653.7,
    "bf16": 1307.4,
    "fp16": 1307.4,
    "fp8": 2614.9,
    "int8": 2614.9,
}
_H100_SXM = {
    "fp64": 67.0,
    "fp32": 67.0,
    "tf32": 494.7,
    "bf16": 989.4,
    "fp16": 989.4,
    "fp8": 1978.9,
    "int8": 1978.9,
}
_NVL = {
    "fp64": 60.0,
    "fp32": 60.0,
    "tf32": 417.5,
    "bf16": 835.5,
    "fp16": 835.5,
    "fp8": 1670.5,
    "int8": 1670.5,
}

PEAKS: dict[str, GpuPeaks] = {
    "V100 SXM2": GpuPeaks(
        "V100 SXM2",
        {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0},
        _NV_V100,
        80,
        "fp16 = tensor cores with fp32 accumulate; no bf16/tf32",
    ),
    "V100 PCIe": GpuPeaks("V100 PCIe", {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}, _NV_V100, 80),
    "V100S PCIe": GpuPeaks("V100S PCIe", {"fp64": 8.2, "fp32": 16.4, "fp16": 130.0}, _NV_V100, 80),
    "T4": GpuPeaks("T4", {"fp32": 8.1, "fp16": 65.0, "int8": 130.0}, _NV_T4, 40),
    "A100": GpuPeaks(
        "A100",
        {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "int8": 624.0},
        _NV_A100,
        108,
        "SXM4 and PCIe, 40 and 80 GB: same peaks",
    ),
    "A10": GpuPeaks(
        "A10",
        {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0, "int8": 250.0},
        _NV_A10,
        72,
    ),
    "A10G": GpuPeaks(
        "A10G",
        {},
        "no NVIDIA datasheet: an AWS-only part whose tensor rates differ from the A10's",
        None,
        "pass a peak override (--peak-tflops) for MFU",
    ),
    "L4": GpuPeaks(
        "L4",
        {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5, "int8": 242.5},
        _NV_L4,
        58,
    ),
    "L40S": GpuPeaks(
        "L40S",
        {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0, "int8": 733.0},
        _NV_L40,
        142,
    ),
    "L40": GpuPeaks(
        "L40",
        {"fp32": 90.5, "tf32": 90.5, "bf16": 181.05, "fp16": 181.05, "fp8": 362.0, "int8": 362.0},
        _NV_L40,
        142,
    ),
    "H100 SXM": GpuPeaks("H100 SXM", dict(_H100_SXM), _NV_H100, 132),
    "H100 PCIe": GpuPeaks(
        "H100 PCIe",
        {
            "fp64": 51.0,
            "fp32": 51.0,
            "tf32": 378.0,
            "bf16": 756.5,
            "fp16": 756.5,
            "fp8": 1513.0,
            "int8": 1513.0,
        },
        _NV_H100,
        114,
    ),
    "H100 NVL": GpuPeaks("H100 NVL", dict(_NVL), _NV_H100, 132),
    "H200": GpuPeaks(
        "H200", dict(_H100_SXM), _NV_H200, 132, "H200 SXM: the H100 SXM chip with more memory"
    ),
    "H200 NVL": GpuPeaks("H200 NVL", dict(_NVL), _NV_H200, 132),
    "GH200": GpuPeaks(
        "GH200",
        dict(_H100_SXM),
        "NVIDIA GH200 Grace Hopper Superchip datasheet (sparse figures halved)",
        132,
    ),
    "B200": GpuPeaks(
        "B200",
        {
            "fp64": 37.0,
            "fp32": 75.0,
            "tf32": 1100.0,
            "bf16": 2250.0,
            "fp16": 2250.0,
            "fp8": 4500.0,
            "int8": 4500.0,
        },
        _NV_B200,
        148,
        "HGX B200 (1000 W)",
    ),
    "GB200": GpuPeaks(
        "GB200",
        {
            "fp64": 40.0,
            "fp32": 80.0,
            "tf32": 1250.0,
            "bf16": 2500.0,
            "fp16": 2500.0,
            "fp8": 5000.0,
            "int8": 5000.0,
        },
        _NV_B200,
        148,
        "B200 in GB200 NVL72 (1200 W)",
    ),
    "RTX 4090": GpuPeaks(
        "RTX 4090",
        {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3, "int8": 660.6},
        _NV_ADA,
        128,
        "GeForce: fp16/bf16/fp8 with fp32 accumulate (what PyTorch uses) run at half the fp16-accumulate rate",
    ),
    "MI250X": GpuPeaks(
        "MI250X",
        {"fp64": 95.7, "fp32": 95.7, "bf16": 383.0, "fp16": 383.0, "int8": 383.0},
        _AMD_MI250,
        220,
        "fp32/fp64 = matrix-core rates (vector: 47.9)",
    ),
    "MI250": GpuPeaks(
        "MI250",
        {"fp64": 90.5, "fp32": 90.5, "bf16": 362.1, "fp16": 362.1, "int8": 362.1},
        _AMD_MI250,
        208,
        "fp32/fp64 = matrix-core rates (vector: 45.3)",
    ),
    "MI300X": GpuPeaks(
        "MI300X",
        _MI300X_DENSE,
        _AMD_MI300,
        304,
    ),
    "MI325X": GpuPeaks(
        "MI325X",
        _MI300X_DENSE,
        _AMD_MI300,
        304,
    ),
    "MI300A": GpuPeaks(
        "MI300A",
        {
            "fp64": 122.6,
            "fp32": 122.6,
            "tf32": 490.3,
            "bf16": 980.6,
            "fp16": 980.6,
            "fp8": 1961.2,
            "int8": 1961.2,
        },
        _AMD_MI300,
        228,
    ),
}
SOURCES: dict[str, str] = {k: v.source for k, v in PEAKS.items()}

_NV_GH200 = "NVIDIA GH200 Grace Hopper Superchip datasheet, nvidia.com/en-us/data-center/grace-hopper-superchip"
#: Peak DRAM (HBM/GDDR) bandwidth, TB/s (10^12 bytes/s), by the same model keys as PEAKS: the memory
#: roof of the roofline (analysis/roofline.py). Vendor datasheet figures; the source is that of the
#: model's FLOP/s row unless named here. The A100 row is the 40 GB part; see :func:`mem_tbs_for`.
MEM_TBS: dict[str, float] = {
    "V100 SXM2": 0.9,
    "V100 PCIe": 0.9,
    "V100S PCIe": 1.134,
    "T4": 0.32,
    "A100": 1.555,  # 40 GB; 80 GB: 2.039 (SXM4) / 1.935 (PCIe)
    "A10": 0.6,
    "A10G": 0.6,
    "L4": 0.3,
    "L40S": 0.864,
    "L40": 0.864,
    "H100 SXM": 3.35,
    "H100 PCIe": 2.0,
    "H100 NVL": 3.9,
    "H200": 4.8,
    "H200 NVL": 4.8,
    "GH200": 4.0,  # 96 GB HBM3; the 144 GB HBM3e part: 4.9 (_NV_GH200)
    "B200": 8.0,
    "GB200": 8.0,
    "RTX 4090": 1.008,
    "MI250X": 3.2768,
    "MI250": 3.2768,
    "MI300X": 5.3,
    "MI325X": 6.0,
    "MI300A": 5.3,
}


def mem_tbs_for(device: dict[str, Any] | None) -> tuple[float | None, str | None, str]:
    """(peak DRAM bandwidth in TB/s or None, model, how it was matched) of one deviceProperties
    entry. An A100 with more than 48 GB is the 80 GB part (2.039 TB/s SXM4, 1.935 PCIe)."""
    if not device:
        return None, None, "no deviceProperties in the trace"
    model, how = match_model(device)
    if model is None:
        return None, None, f"unknown GPU: {how}"
    tbs = MEM_TBS.get(model)
    if model == "A100":
        try:
            big = int(device.get("totalGlobalMem") or 0) > 48 * 2**30
        except (TypeError, ValueError):
            big = False
        if big:
            tbs = 1.935 if "PCIE" in str(device.get("name", "")).upper() else 2.039
    if model == "GH200":
        try:
            if int(device.get("totalGlobalMem") or 0) > 120 * 2**30:
                tbs = 4.9
        except (TypeError, ValueError):
            pass
    return tbs, model, how


# deviceProperties[].name -> model; ordered, most specific first (case-insensitive search).
NAME_RULES: tuple[tuple[str, str, str], ...] = (
    (r"GH200", "GH200", "NVIDIA GH200 480GB"),
    (r"GB200", "GB200", "NVIDIA GB200"),
    (r"H200\s*NVL", "H200 NVL", "NVIDIA H200 NVL"),
    (r"H200", "H200", "NVIDIA H200"),
    (r"H100\s*NVL", "H100 NVL", "NVIDIA H100 NVL"),
    (r"H100\s*PCIe", "H100 PCIe", "NVIDIA H100 PCIe"),
    (r"H100\b(?!.*PCIe)", "H100 SXM", "NVIDIA H100 80GB HBM3"),
    (r"\bB200\b", "B200", "NVIDIA B200"),
    (r"A100", "A100", "NVIDIA A100-SXM4-80GB"),
    (r"A10G\b", "A10G", "NVIDIA A10G"),
    (r"\bA10\b", "A10", "NVIDIA A10"),
    (r"L40S\b", "L40S", "NVIDIA L40S"),
    (r"\bL40\b", "L40", "NVIDIA L40"),
    (r"\bL4\b", "L4", "NVIDIA L4"),
    (r"V100S", "V100S PCIe", "Tesla V100S-PCIE-32GB"),
    (r"V100.*PCI", "V100 PCIe", "Tesla V100-PCIE-16GB"),
    (r"V100.*SXM2", "V100 SXM2", "Tesla V100-SXM2-16GB"),
    (r"\bT4\b", "T4", "Tesla T4"),
    (r"RTX\s*4090(?!\s*D)", "RTX 4090", "NVIDIA GeForce RTX 4090"),
    (r"MI250X", "MI250X", "AMD Instinct MI250X"),
    (r"MI250\b", "MI250", "AMD Instinct MI250"),
    (r"MI300X", "MI300X", "AMD Instinct MI300X"),
    (r"MI325X", "MI325X", "AMD Instinct MI325X"),
    (r"MI300A", "MI300A", "AMD Instinct MI300A"),
)
_NAME_RX = tuple((re.compile(p, re.IGNORECASE), m) for p, m, _ in NAME_RULES)

# (computeMajor, computeMinor, numSms) -> model, only where the triple names one peak table row.
# Not here on purpose: (9, 0, 132) is H100 SXM, H100 NVL, H200 or H200 NVL, which differ in peak;
# (8, 6, 72) is A10 or A10G; (8, 9, 142) is L40 or L40S.
CC_RULES: dict[tuple[int, int, int], str] = {
    (9, 0, 114): "H100 PCIe",
    (8, 0, 108): "A100",
    (8, 9, 58): "L4",
    (8, 9, 128): "RTX 4090",
    (7, 5, 40): "T4",
}

DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "fp32": "fp32",
    "tf32": "tf32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "fp8": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "int8": "int8",
    "fp64": "fp64",
    "float64": "fp64",
    "double": "fp64",
}


@dataclass(frozen=True)
class Peak(JsonRow):
    """Peak dense throughput for one device and dtype. tflops None = unknown (``reason`` says why)."""

    tflops: float | None
    gpu_model: str | None
    dtype: str | None
    source: str
    matched_name: str | None
    reason: str = ""


def match_model(device: dict[str, Any]) -> tuple[str | None, str]:
    """(model key of PEAKS or None, how it was matched) for one deviceProperties entry."""
    name = str(device.get("name") or "")
    for rx, model in _NAME_RX:
        if rx.search(name):
            return model, f"name '{name}'"
    try:
        key = (int(device["computeMajor"]), int(device["computeMinor"]), int(device["numSms"]))
    except (KeyError, TypeError, ValueError):
        return None, f"name '{name}' not in the table"
    cc_model = CC_RULES.get(key)
    if cc_model:
        return cc_model, f"compute capability {key[0]}.{key[1]} with {key[2]} SMs"
    return None, f"name '{name}' (cc {key[0]}.{key[1]}, {key[2]} SMs) not in the table"


def _devices(device_properties: list[Any] | dict[str, Any] | str | None) -> list[dict[str, Any]]:
    if isinstance(device_properties, str):
        try:
            device_properties = json.loads(device_properties)
        except ValueError:
            return []
    if isinstance(device_properties, dict):
        return [device_properties]
    if isinstance(device_properties, list):
        return [d for d in device_properties if isinstance(d, dict)]
    return []


def peak_for(
    device_properties: list[Any] | dict[str, Any] | str | None,
    dtype: str | None,
    *,
    override_tflops: float | None = None,
    device: int | None = None,
) -> Peak:
    """Peak dense TFLOP/s of the traced GPU for ``dtype`` (fp32, tf32, bf16, fp16, fp8, int8, fp64).

    ``device_properties`` is Kineto's ``deviceProperties`` (list, one dict, or its JSON text);
    ``device`` picks the entry with that ``id`` (default: the first). ``override_tflops`` wins.
    MIG slices are scaled by their SM count.
    """
    dt = DTYPE_ALIASES.get((dtype or "").lower(), (dtype or "").lower() or None)
    devs = _devices(device_properties)
    dev = next(
        (d for d in devs if device is not None and d.get("id") == device), devs[0] if devs else None
    )
    name = str(dev.get("name")) if dev and dev.get("name") is not None else None
    model, how = match_model(dev) if dev else (None, "no deviceProperties in the trace")
    if override_tflops is not None:
        if override_tflops <= 0:
            return Peak(None, model, dt, "user override", name, "override must be > 0")
        return Peak(float(override_tflops), model, dt, "user override", name)
    if model is None:
        return Peak(None, None, dt, "", name, f"unknown GPU: {how}; pass a peak override")
    row = PEAKS[model]
    if dt is None:
        return Peak(None, model, None, row.source, name, "no dtype: nothing was counted")
    value = row.tflops.get(dt)
    if value is None:
        why = row.note if not row.tflops else f"{model} has no published dense {dt} peak"
        return Peak(None, model, dt, row.source, name, why)
    source = f"{row.source}; matched by {how}"
    if dev and name and "MIG" in name.upper() and row.sms:
        try:
            sms = int(dev["numSms"])
        except (KeyError, TypeError, ValueError):
            return Peak(
                None, model, dt, row.source, name, "MIG slice without numSms: its share is unknown"
            )
        value = value * sms / row.sms
        source += f"; MIG slice: scaled by {sms}/{row.sms} SMs"
    return Peak(value, model, dt, source, name)


def mfu_pct(
    flops_per_step: float | None, step_time_s: float | None, peak_tflops: float | None
) -> float | None:
    """Model FLOPs utilisation, %: FLOPs per step / step time (s) / peak (TFLOP/s × 1e12) × 100."""
    if not flops_per_step or not step_time_s or not peak_tflops:
        return None
    if flops_per_step <= 0 or step_time_s <= 0 or peak_tflops <= 0:
        return None
    return 100.0 * flops_per_step / step_time_s / (peak_tflops * 1e12)


def mfu_busy_pct(
    flops_per_step: float | None, busy_s_per_step: float | None, peak_tflops: float | None
) -> float | None:
    """MFU over GPU-busy time, %: the MFU if every idle gap were closed (FLOPs per step / busy seconds
    per step / peak). An upper bound for what removing idle time alone can give."""
    return mfu_pct(flops_per_step, busy_s_per_step, peak_tflops)


def achieved_tflops(flops_per_step: float | None, step_time_s: float | None) -> float | None:
    """FLOPs per step / step time, in TFLOP/s."""
    if not flops_per_step or not step_time_s or step_time_s <= 0:
        return None
    return flops_per_step / step_time_s / 1e12


def peaks_markdown() -> str:
    """The peak table as markdown (docs/metrics.md)."""
    head = "| model | " + " | ".join(DTYPES) + " | memory TB/s | source |"
    out = [head, "| --- |" + " --- |" * (len(DTYPES) + 2)]
    for m, p in PEAKS.items():
        vals = [f"{p.tflops[d]:g}" if d in p.tflops else "—" for d in DTYPES]
        bw = f"{MEM_TBS[m]:g}" if m in MEM_TBS else "—"
        src = p.source + (f" ({p.note})" if p.note else "")
        out.append(f"| {m} | " + " | ".join(vals) + f" | {bw} | {src} |")
    return "\n".join(out)
