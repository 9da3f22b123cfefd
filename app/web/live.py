"""Polling a ``gpuscope sample`` server (``GET /api/samples?since_ns=N``) for the Live page.

Pure functions, no Streamlit: fetching one batch, folding it into a bounded frame, diagnosing a
window per GPU and writing the held samples back as a ``gpuscope-nvml`` JSONL file (to save a run).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from gpuscope.analysis.live import LiveDiagnosis, sawtooth_diagnosis

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
    "mem_clock_mhz",
    "pcie_rx_bytes_s",
    "pcie_tx_bytes_s",
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
    gpus: list[dict[str, Any]] = field(default_factory=list)  # the recording's header "gpus"


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
    return Batch(
        body.get("host"),
        body.get("now_ns"),
        body.get("interval_ms"),
        frame,
        [g for g in body.get("gpus") or [] if isinstance(g, dict)],
    )


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


def diagnose(rows: pd.DataFrame, window_s: float) -> dict[int, LiveDiagnosis]:
    """Per GPU, ``sawtooth_diagnosis`` of ``gpu_util_pct`` over the last ``window_s`` seconds."""
    if rows is None or rows.empty:
        return {}
    newest = int(rows["t_ns"].max())
    view = rows[rows["t_ns"] > newest - int(window_s * 1e9)]
    return {
        int(gpu): sawtooth_diagnosis(
            g["t_ns"].to_numpy(dtype="int64"),
            g["gpu_util_pct"].to_numpy(dtype="float64"),
            label=f"GPU {gpu}",
        )
        for gpu, g in view.groupby("gpu", sort=True)
    }


def _jsonable(v: Any) -> Any:
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, (np.integer, int)):
        return int(v)
    f = float(v)
    return int(f) if f.is_integer() else f


def to_jsonl(
    rows: pd.DataFrame,
    *,
    host: str | None,
    gpus: list[dict[str, Any]],
    interval_ms: float | None,
) -> str:
    """The held samples as a ``gpuscope-nvml`` v1 file (docs/sampler.md): header + one line each."""
    if rows is None or rows.empty:
        raise ValueError("no samples to save")
    rows = rows.sort_values(["t_ns", "gpu"])
    seen = sorted(int(g) for g in rows["gpu"].unique())
    by_index = {int(g["index"]): g for g in gpus if g.get("index") is not None}
    header = {
        "format": "gpuscope-nvml",
        "version": 1,
        "host": host or "unknown",
        "interval_ms": float(interval_ms or 100.0),
        "gpus": [by_index.get(i, {"index": i}) for i in seen],
        "started_ns": int(rows["t_ns"].min()),
        "written_by": "gpuscope live page",
    }
    lines = [json.dumps(header, separators=(",", ":"))]
    for t, g in rows.groupby("t_ns", sort=True):
        per_gpu = [
            {"gpu": int(r["gpu"]), **{f: _jsonable(r[f]) for f in FIELDS}}
            for r in g.to_dict("records")
        ]
        lines.append(json.dumps({"t_ns": int(t), "gpus": per_gpu}, separators=(",", ":")))
    return "\n".join(lines) + "\n"
