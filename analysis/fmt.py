"""How numbers are written for people: three significant figures, thousands separators."""

from __future__ import annotations

import math


def sig3(v: float | None, *, none: str = "-") -> str:
    """``v`` rounded to three significant figures, with thousands separators: 12.66 → ``12.7``,
    0.012345 → ``0.0123``, 22222 → ``22,200``, 0 → ``0``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, 2 - mag)
    r = round(v, 2 - mag)
    if decimals == 0:
        return f"{int(r):,}"
    # rounding may carry into a new digit (9.996 → 10.0): recompute the decimals
    mag2 = math.floor(math.log10(abs(r))) if r else mag
    decimals = max(0, 2 - mag2)
    return f"{r:,.{decimals}f}"
