"""One colour table for every chart: idle causes, kernel categories, run A/B, busy and NVML.

Colours are mid-tone (Okabe-Ito and Tableau families) so they read on Streamlit's light and dark
backgrounds alike. A cause or category that is not listed gets a stable colour from ``EXTRA``
(chosen by a hash of its name), so two charts never disagree about a colour.
"""

from __future__ import annotations

import hashlib

from gpuscope.vocabulary import causes

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

# Idle causes: gpuscope.vocabulary.causes in its precedence order (the legend's order), each with
# its one colour and one label.
CAUSES: dict[str, str] = {c.id: c.colour for c in causes.CAUSES}
CAUSE_TEXT: dict[str, str] = {c.id: c.label for c in causes.CAUSES}

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
    """A cause as written by a person or another tool (``Data loading``, ``host-sync``) -> its id."""
    return (cause or causes.OTHER).strip().lower().replace("-", "_").replace(" ", "_")


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
    c = (cause or causes.OTHER).replace("_", " ").strip()
    return c[:1].upper() + c[1:]


def rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha:g})"
