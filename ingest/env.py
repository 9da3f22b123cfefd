"""Limits and settings read from the environment: one reader, one error wording.

A bad value is a ``ValueError`` whose text names the variable and the value, to be shown as one
line by whoever reads it (CLI, dashboard page, sampler).
"""

from __future__ import annotations

import math
import os


def positive_number(name: str, default: float) -> float:
    """``$name`` as a finite number > 0, else ``default`` when it is unset or empty."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={raw!r} must be a positive number")
    return value


def positive_int(name: str, default: int) -> int:
    """``$name`` as a whole number > 0 (a count or a size in bytes), else ``default``."""
    value = positive_number(name, default)
    if value != int(value):
        raise ValueError(f"{name}={os.environ.get(name)!r} must be a whole number")
    return int(value)
