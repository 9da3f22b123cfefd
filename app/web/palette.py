"""One colour table for every chart: idle causes, kernel categories, run A/B, busy and NVML.

Colours are mid-tone (Okabe-Ito and Tableau families) so they read on Streamlit's light and dark
backgrounds alike. A cause or category that is not listed gets a stable colour from ``EXTRA``
(chosen by a hash of its name), so two charts never disagree about a colour.
"""

from __future__ import annotations

import hashlib

BUSY = "#3b82c4"  # GPU busy (kernels running)
BUSY_FILL = "rgba(59,130,196,0.55)"
# Communication wait: a communication kernel waiting for the last rank to arrive (busy, yet no
# work): its own colour (Okabe-Ito yellow, darkened to read on white), apart from busy blue and
# from the idle causes (docs/metrics.md "Busy, split").
WAIT = "#d4b106"
WAIT_FILL = "rgba(212,177,6,0.7)"
NVML = "#e8590c"  # NVML utilization.gpu overlay
ENVELOPE = "rgba(120,120,140,0.28)"  # busy min–max band inside a bucket (the sawtooth)
STEP_LINE = "rgba(128,128,128,0.75)"
RUN_A = "#7f8c9b"  # "before"
RUN_B = "#2a9d8f"  # "after"
GOOD = "#2a9d8f"
BAD = "#d1495b"

# Idle causes: gpuscope.analysis.event_classes.CAUSES in its precedence order (the legend's order),
# each with one colour and one label (tests/test_app_figures.py holds the three to the same causes).
# Aliases map other spellings.
CAUSES: dict[str, str] = {
    "launch_overhead": "#cc79a7",  # work queued, GPU still idle: launch latency, tiny kernels
    "data_loading": "#e69f00",  # inside a DataLoader __next__
    "pageable_copy": "#56b4e9",  # host-to-device copy from pageable memory
    "communication": "#8e6cbf",  # inside a collective (NCCL, gloo)
    "host_sync": "#d1495b",  # inside a synchronizing call (.item(), cudaStreamSynchronize)
    "cpu_overhead": "#d55e00",  # inside other host work (Python, framework)
    "other": "#8c8c8c",  # nothing traced on the host explains it
}
CAUSE_ALIASES: dict[str, str] = {
    "dataloader": "data_loading",
    "data_loader": "data_loading",
    "input": "data_loading",
    "memcpy": "pageable_copy",
    "h2d": "pageable_copy",
    "copy": "pageable_copy",
    "nccl": "communication",
    "comm": "communication",
    "collective": "communication",
    "sync": "host_sync",
    "synchronize": "host_sync",
    "cpu_bound": "cpu_overhead",
    "host_bound": "cpu_overhead",
    "python": "cpu_overhead",
    "launch": "launch_overhead",
    "launch_latency": "launch_overhead",
    "unknown": "other",
}
CAUSE_TEXT: dict[str, str] = {
    "launch_overhead": "Launch overhead",
    "data_loading": "Data loading",
    "pageable_copy": "Pageable copy",
    "communication": "Communication",
    "host_sync": "Host sync",
    "cpu_overhead": "CPU overhead",
    "other": "Other",
}

# Kernel categories (busy time): blues and greens, apart from the warm/pink idle-cause colours.
CATEGORIES: dict[str, str] = {
    "kernel": BUSY,
    "gemm": "#2f6fb0",
    "attention": "#5e60ce",
    "convolution": "#1b9e77",
    "elementwise": "#66a61e",
    "reduction_norm_softmax": "#2a9d8f",
    "optimizer": "#009e73",
    "copy_memset": "#0f7c8c",
    "communication": "#6a3d9a",
    "other": "#6c7a89",
    # spellings other tools use
    "matmul": "#2f6fb0",
    "conv": "#1b9e77",
    "reduction": "#2a9d8f",
    "norm": "#2a9d8f",
    "softmax": "#2a9d8f",
    "nccl": "#6a3d9a",
    "memcpy": "#0f7c8c",
    "memset": "#0f7c8c",
}

EXTRA = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)


def _stable(name: str) -> str:
    h = int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)
    return EXTRA[h % len(EXTRA)]


def canonical_cause(cause: str | None) -> str:
    c = (cause or "other").strip().lower().replace("-", "_").replace(" ", "_")
    return CAUSE_ALIASES.get(c, c)


def cause_color(cause: str | None) -> str:
    c = canonical_cause(cause)
    return CAUSES.get(c) or _stable(c)


def category_color(category: str | None) -> str:
    c = (category or "other").strip().lower()
    return CATEGORIES.get(c) or _stable(c)


def cause_label(cause: str | None) -> str:
    """``data_loading`` -> ``Data loading``: the legend text for a cause."""
    canon = canonical_cause(cause)
    if canon in CAUSE_TEXT:
        return CAUSE_TEXT[canon]
    c = (cause or "other").replace("_", " ").strip()
    return c[:1].upper() + c[1:]


def rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha:g})"
