"""Polling a ``gpuscope sample`` server (``GET /api/samples?since_ns=N``) for the Live page.

Pure functions, no Streamlit: fetching one batch, folding it into a bounded frame, diagnosing a
window per GPU, and saving the held samples as a run (typed records, :func:`store_window`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pandas as pd
from gpuscope.analysis.event_classes import NVML_METRIC_FIELDS
from gpuscope.analysis.live import LiveDiagnosis, sawtooth_diagnosis
from gpuscope.ingest.env import positive_int
from gpuscope.ingest.nvml import ingest_samples
from gpuscope.ingest.records import GpuReading, RunResult, Sample, SeriesGpu, SeriesHeader
from gpuscope.vocabulary.nvml_fields import GPU_UTIL_PCT, MEM_TOTAL_BYTES, MEM_USED_BYTES

if TYPE_CHECKING:
    from gpuscope.store import Connection

ENV_SAMPLER = "GPUSCOPE_SAMPLER_URL"
DEFAULT_URL = "http://127.0.0.1:9401"
MAX_ROWS = 200_000
ENV_ALLOW_HOSTS = "GPUSCOPE_LIVE_ALLOW_HOSTS"
ENV_MAX_BYTES = "GPUSCOPE_LIVE_MAX_BYTES"
DEFAULT_MAX_BYTES = 32 << 20  # one /api/samples answer: ~20,000 samples x 8 GPUs is ~25 MB
SCHEMES = ("http", "https")


def default_url() -> str:
    return os.environ.get(ENV_SAMPLER) or DEFAULT_URL


def max_response_bytes() -> int:
    """Largest ``/api/samples`` answer read (bytes); ``$GPUSCOPE_LIVE_MAX_BYTES`` overrides it."""
    try:
        return positive_int(ENV_MAX_BYTES, DEFAULT_MAX_BYTES)
    except ValueError as e:
        raise SamplerError(str(e)) from None


def allowed_hosts() -> set[str]:
    """Host names (lower case) the Live page may poll besides loopback; ``*`` allows any host.

    From ``$GPUSCOPE_LIVE_ALLOW_HOSTS`` (comma-separated, set by whoever runs the dashboard), plus
    the host of ``$GPUSCOPE_SAMPLER_URL``: the deployer chose both, a visitor's URL chooses neither.
    """
    hosts = {
        h.strip().lower().strip("[]")
        for h in os.environ.get(ENV_ALLOW_HOSTS, "").split(",")
        if h.strip()
    }
    env_url = os.environ.get(ENV_SAMPLER)
    if env_url:
        host = urllib.parse.urlsplit(normalise_url(env_url)).hostname
        if host:
            hosts.add(host.lower())
    return hosts


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_HOST_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
_PATH_RE = re.compile(r"^[A-Za-z0-9._~/%-]{0,200}$")


def check_url(url: str) -> str:
    """The URL as it will be polled, or SamplerError (one line) when policy forbids it.

    Only ``http``/``https``; only a loopback host (``localhost``, 127.0.0.0/8, ``::1``) unless
    the host is listed in ``$GPUSCOPE_LIVE_ALLOW_HOSTS`` (or is ``$GPUSCOPE_SAMPLER_URL``'s). No
    user name, password, query or fragment; a plain host name and path (the page adds the path
    and query of the call itself). Refusals do not echo the URL: it came from a visitor.
    """
    base = normalise_url(url)
    if not base:
        raise SamplerError("no sampler URL")
    scheme = base.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise SamplerError("sampler URL refused: only http:// and https:// URLs are polled")
    try:
        parts = urllib.parse.urlsplit(base)
        port = parts.port
    except ValueError:
        raise SamplerError("sampler URL refused: not a valid URL (bad host or port)") from None
    if parts.username is not None or parts.password is not None:
        raise SamplerError("sampler URL refused: no user name or password in the URL")
    if parts.query or parts.fragment or "#" in base or "?" in base:
        raise SamplerError("sampler URL refused: a sampler URL has no query or fragment")
    host = (parts.hostname or "").lower()
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is None and not _HOST_RE.match(host):
        raise SamplerError("sampler URL refused: not a valid host name")
    if not _PATH_RE.match(parts.path):
        raise SamplerError("sampler URL refused: unexpected characters in the path")
    allow = allowed_hosts()
    if not (_is_loopback(host) or "*" in allow or host in allow):
        raise SamplerError(
            f"sampler URL refused: host {host} is not loopback; this dashboard polls other hosts "
            f"only when {ENV_ALLOW_HOSTS} lists them (docs/security.md)"
        )
    netloc = f"[{host}]" if ip is not None and ip.version == 6 else host
    if port is not None:
        netloc += f":{port}"
    return urllib.parse.urlunsplit((scheme, netloc, parts.path, "", ""))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is answered as the HTTP error it is: no second, unchecked fetch


# No proxies from the environment, no redirects, no file:// / ftp:// / data: handlers.
_OPENER = urllib.request.OpenerDirector()
for _handler in (
    urllib.request.HTTPHandler(),
    urllib.request.HTTPSHandler(),
    urllib.request.HTTPDefaultErrorHandler(),
    urllib.request.HTTPErrorProcessor(),
    _NoRedirect(),
):
    _OPENER.add_handler(_handler)


def read_capped(response: Any, *, max_bytes: int, deadline: float, what: str) -> bytes:
    """Read a response body in chunks: at most ``max_bytes`` bytes, finished by ``deadline``.

    ``deadline`` is a ``time.monotonic()`` value (s); each chunk read is also bounded by the
    socket timeout. Raises SamplerError (one line) when either limit is passed.
    """
    length = response.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > max_bytes:
        raise SamplerError(
            f"{what}: answer of {int(length):,} bytes is over the {max_bytes:,}-byte cap"
        )
    parts: list[bytes] = []
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise SamplerError(f"{what}: answer not complete in time (slow or endless response)")
        read = getattr(response, "read1", response.read)
        block = read(min(1 << 16, max_bytes + 1 - total))
        if not block:
            return b"".join(parts)
        total += len(block)
        if total > max_bytes:
            raise SamplerError(
                f"{what}: answer is over the {max_bytes:,}-byte cap ({ENV_MAX_BYTES})"
            )
        parts.append(block)


@dataclass
class Batch:
    host: str | None
    now_ns: int | None
    interval_ms: float | None
    rows: pd.DataFrame  # t_ns, gpu, NVML_METRIC_FIELDS...
    gpus: list[dict[str, Any]] = field(default_factory=list)  # the recording's header "gpus"


class SamplerError(RuntimeError):
    """The sampler could not be read; ``str()`` is one line for the page."""


def normalise_url(url: str) -> str:
    url = (url or "").strip().rstrip("/")
    if url and "://" not in url:
        url = "http://" + url
    return url


def fetch(
    url: str,
    since_ns: int,
    *,
    timeout: float = 2.0,
    limit: int = 20_000,
    max_bytes: int | None = None,
    total_timeout: float = 5.0,
) -> Batch:
    """One ``/api/samples`` call: every sample newer than ``since_ns``, one row per GPU.

    ``url`` must pass :func:`check_url`. ``timeout`` (s) bounds the connect and each read,
    ``total_timeout`` (s) the whole answer, ``max_bytes`` its size (default
    :func:`max_response_bytes`). Any failure is a one-line SamplerError.
    """
    base = check_url(url)
    shown = base  # checked: a plain scheme, host, port and path
    cap = max_response_bytes() if max_bytes is None else max_bytes
    full = f"{base}/api/samples?since_ns={int(since_ns)}&limit={int(limit)}"
    deadline = time.monotonic() + total_timeout
    try:
        with _OPENER.open(full, timeout=timeout) as r:
            raw = read_capped(r, max_bytes=cap, deadline=deadline, what=shown)
    except urllib.error.HTTPError as e:
        raise SamplerError(f"{shown}: HTTP {e.code} from /api/samples") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise SamplerError(f"{shown}: cannot connect ({_one_line(reason)})") from None
    try:
        body = json.loads(raw)
    except ValueError:
        raise SamplerError(f"{shown}: /api/samples did not return JSON") from None
    try:
        return parse(body)
    except (AttributeError, TypeError, ValueError, KeyError):
        raise SamplerError(f"{shown}: /api/samples did not return sampler JSON") from None


def _one_line(reason: object, limit: int = 200) -> str:
    """An OS/HTTP error reason as one short line of printable ASCII."""
    text = " ".join(str(reason).split()).encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= limit else text[: limit - 1] + "..."


def parse(body: dict[str, Any]) -> Batch:
    rows: list[dict[str, Any]] = []
    for s in body.get("samples") or []:
        t = s.get("t_ns")
        for g in s.get("gpus") or []:
            row = {"t_ns": t, "gpu": g.get("gpu")}
            row.update({f: g.get(f) for f in NVML_METRIC_FIELDS})
            rows.append(row)
    frame = pd.DataFrame(rows, columns=["t_ns", "gpu", *NVML_METRIC_FIELDS])
    if not frame.empty:
        frame = frame.astype({"t_ns": "int64", "gpu": "int64"})
        for f in NVML_METRIC_FIELDS:
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


def fmt_bytes(v: Any) -> str:
    """A byte count for a card: ``—`` for N/A, else B/KiB/MiB/GiB with three figures (a few MB
    of a started process reads 527 MiB, not 0.0 GiB)."""
    if v is None or v != v:
        return "—"
    b = float(v)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:,.3g} {unit}" if b / size < 1000 else f"{b / size:,.0f} {unit}"
    return f"{b:,.0f} B"


def shown(rows: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """The rows of the last ``window_s`` seconds before the newest sample: what the Live page's
    charts draw and, the same rows, what its diagnosis reads."""
    if rows is None or rows.empty:
        return rows
    newest = int(rows["t_ns"].max())
    return rows[rows["t_ns"] >= newest - int(window_s * 1e9)]


def diagnose(rows: pd.DataFrame, window_s: float) -> dict[int, LiveDiagnosis]:
    """Per GPU, ``sawtooth_diagnosis`` of ``gpu_util_pct`` over :func:`shown` rows."""
    if rows is None or rows.empty:
        return {}
    view = shown(rows, window_s)
    return {
        int(gpu): sawtooth_diagnosis(
            g["t_ns"].to_numpy(dtype="int64"),
            g[GPU_UTIL_PCT].to_numpy(dtype="float64"),
            label=f"GPU {gpu}",
        )
        for gpu, g in view.groupby("gpu", sort=True)
    }


# -- saving the window: typed records -------------------------------------------------------------
# The held window travels as typed sample records (one :class:`Sample` per poll, its GPUs'
# :class:`GpuReading`) to gpuscope.ingest.nvml.ingest_samples, which stores them as the same rows
# as the equivalent gpuscope-nvml file, without writing one.

Reading = int | float | None


@dataclass(frozen=True)
class Window:
    """The samples a Live page holds, as the NVML series that saving stores: the sampler's host,
    its poll interval (ms), the GPUs seen (as the sampler describes them) and the samples in time
    order."""

    host: str
    interval_ms: float | None
    gpus: tuple[SeriesGpu, ...]
    samples: tuple[Sample, ...]


_INT_FIELDS = frozenset({MEM_USED_BYTES, MEM_TOTAL_BYTES})  # byte counts: BIGINT in the store


def _reading(field_name: str, v: Any) -> Reading:
    if v is None or v != v:  # None or NaN: N/A
        return None
    return round(v) if field_name in _INT_FIELDS else float(v)


def _gpu_info(index: int, described: dict[str, Any] | None) -> SeriesGpu:
    d = described or {}

    def text(k: str) -> str | None:
        return None if d.get(k) is None else str(d[k])

    total = d.get(MEM_TOTAL_BYTES)
    return SeriesGpu(index, text("name"), text("uuid"), total if isinstance(total, int) else None)


def window_of(
    rows: pd.DataFrame,
    *,
    host: str | None,
    gpus: list[dict[str, Any]],
    interval_ms: float | None,
) -> Window:
    """The held rows (``t_ns``, ``gpu``, NVML_METRIC_FIELDS; NaN = N/A) as a :class:`Window`.
    ``gpus``: the sampler's description of its GPUs (``index``, ``name``, ``uuid``,
    ``mem_total_bytes``); a GPU it does not describe is listed by index alone. Raises ValueError
    when there is no sample."""
    if rows is None or rows.empty:
        raise ValueError("no samples to save")
    rows = rows.sort_values(["t_ns", "gpu"])
    described = {
        int(g["index"]): g for g in gpus if isinstance(g.get("index"), int | float | np.integer)
    }
    seen = sorted(int(g) for g in rows["gpu"].unique())
    samples = tuple(
        Sample(
            int(t),
            tuple(
                msgspec.convert(
                    {"gpu": int(r["gpu"]), **{f: _reading(f, r[f]) for f in NVML_METRIC_FIELDS}},
                    GpuReading,
                )
                for r in g.to_dict("records")
            ),
        )
        for t, g in rows.groupby("t_ns", sort=True)
    )
    return Window(
        host or "unknown",
        interval_ms,
        tuple(_gpu_info(i, described.get(i)) for i in seen),
        samples,
    )


WRITTEN_BY = "gpuscope live page"  # the saved series' header says who wrote it


def store_window(
    con: Connection, window: Window, *, name: str, uploaded_by: str | None = None
) -> RunResult:
    """Store the window as an NVML-only run named ``name``, saved by ``uploaded_by`` (a run
    already holding exactly these samples is reported as a duplicate). Raises IngestError as the
    NVML ingest does; on error the store is unchanged."""
    header = SeriesHeader(
        window.host,
        float(window.interval_ms or 100.0),
        window.gpus,
        window.samples[0].t_ns if window.samples else 0,
        written_by=WRITTEN_BY,
    )
    source = f"live window of {window.host}"
    return ingest_samples(
        con, header, window.samples, source=source, name=name, uploaded_by=uploaded_by
    ).run_result()
