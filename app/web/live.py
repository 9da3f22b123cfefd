"""Polling a ``gpuscope sample`` server (``GET /api/samples?since_ns=N``) for the Live page.

Pure functions, no Streamlit: fetching one batch and folding it into a bounded frame.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import pandas as pd

ENV_SAMPLER = "GPUSCOPE_SAMPLER_URL"
DEFAULT_URL = "http://127.0.0.1:9401"
FIELDS = (
    "gpu_util_pct",
    "sm_active_pct",
    "tensor_active_pct",
    "mem_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
)
MAX_ROWS = 200_000


def default_url() -> str:
    return os.environ.get(ENV_SAMPLER) or DEFAULT_URL


@dataclass
class Batch:
    host: str | None
    now_ns: int | None
    interval_ms: float | None
    rows: pd.DataFrame  # t_ns, gpu, FIELDS...


class SamplerError(RuntimeError):
    """The sampler could not be read; ``str()`` is one line for the page."""


def normalise_url(url: str) -> str:
    url = (url or "").strip().rstrip("/")
    if url and "://" not in url:
        url = "http://" + url
    return url


def fetch(url: str, since_ns: int, *, timeout: float = 2.0, limit: int = 20_000) -> Batch:
    """One ``/api/samples`` call: every sample newer than ``since_ns``, one row per GPU."""
    base = normalise_url(url)
    if not base:
        raise SamplerError("no sampler URL")
    full = f"{base}/api/samples?since_ns={int(since_ns)}&limit={int(limit)}"
    try:
        with urllib.request.urlopen(full, timeout=timeout) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise SamplerError(f"{base}: HTTP {e.code} from /api/samples") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise SamplerError(f"{base}: cannot connect ({reason})") from None
    except ValueError:
        raise SamplerError(f"{base}: /api/samples did not return JSON") from None
    return parse(body)


def parse(body: dict[str, Any]) -> Batch:
    rows: list[dict[str, Any]] = []
    for s in body.get("samples") or []:
        t = s.get("t_ns")
        for g in s.get("gpus") or []:
            row = {"t_ns": t, "gpu": g.get("gpu")}
            row.update({f: g.get(f) for f in FIELDS})
            rows.append(row)
    frame = pd.DataFrame(rows, columns=["t_ns", "gpu", *FIELDS])
    if not frame.empty:
        frame = frame.astype({"t_ns": "int64", "gpu": "int64"})
        for f in FIELDS:
            frame[f] = pd.to_numeric(frame[f], errors="coerce")
    return Batch(body.get("host"), body.get("now_ns"), body.get("interval_ms"), frame)


def fold(buffer: pd.DataFrame | None, batch: pd.DataFrame, *, keep_ns: int) -> pd.DataFrame:
    """Append ``batch`` and drop rows older than ``keep_ns`` before the newest sample."""
    parts = [b for b in (buffer, batch) if b is not None and not b.empty]
    if not parts:
        return batch if buffer is None else buffer
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    newest = int(out["t_ns"].max())
    out = out[out["t_ns"] >= newest - keep_ns]
    if len(out) > MAX_ROWS:
        out = out.iloc[-MAX_ROWS:]
    return out.reset_index(drop=True)
