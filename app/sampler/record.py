"""The recorder file: JSON Lines, append-only, one ``write`` per line, so a crash loses at most the line
being written. docs/sampler.md describes the format; :func:`gpuscope.ingest.nvml.read_jsonl` reads it.

Line 1: ``{"format": "gpuscope-nvml", "version": 1, "host": str, "interval_ms": float,
"gpus": [{"index": 0, "name": str, "uuid": str, "mem_total_bytes": int}], "started_ns": int}``.
Then one line per poll: ``{"t_ns": <Unix ns>, "gpus": [{"gpu": 0, "gpu_util_pct": 37, ...}]}``
with the field names of the ``nvml_samples`` table; ``null`` (or a missing key) = N/A.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
from gpuscope.ingest.nvml import FORMAT, VERSION

_ENC = msgspec.json.Encoder()


def make_header(
    host: str, interval_ms: float, gpus: list[dict[str, Any]], started_ns: int, **extra: Any
) -> dict[str, Any]:
    """The header object. ``gpus``: ``[{"index", "name", "uuid", "mem_total_bytes"}]``; extra keys
    (e.g. ``driver_version``, ``replay_of``) are kept and ignored by readers."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "host": host,
        "interval_ms": interval_ms,
        "gpus": gpus,
        "started_ns": started_ns,
        **extra,
    }


def encode_line(obj: Any) -> bytes:
    """One JSON line, newline included."""
    return _ENC.encode(obj) + b"\n"


class SeriesWriter:
    """Appends a header then sample lines to a file. Each line is one unbuffered ``write``: nothing
    waits in a user-space buffer, so a killed process leaves every completed line on disk (no fsync:
    a power cut may lose more)."""

    def __init__(
        self, path: str | os.PathLike[str], header: dict[str, Any], *, overwrite: bool = True
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = "wb" if overwrite else "xb"
        self._f = open(self.path, mode, buffering=0)  # noqa: SIM115 - closed by close()
        self.n_samples = 0
        self.bytes_written = 0
        self._write(encode_line(header))

    def _write(self, line: bytes) -> None:
        view = memoryview(line)
        while view:
            n = self._f.write(view)
            if n is None:  # pragma: no cover - only non-blocking files
                continue
            view = view[n:]
        self.bytes_written += len(line)

    def write_sample(self, t_ns: int, gpus: list[dict[str, Any]]) -> None:
        """Append one poll: ``gpus`` rows in table units, None for N/A."""
        self._write(encode_line({"t_ns": t_ns, "gpus": gpus}))
        self.n_samples += 1

    def write_encoded(self, line: bytes) -> None:
        """Append a line made by :func:`encode_line` (newline included)."""
        self._write(line)
        self.n_samples += 1

    @property
    def closed(self) -> bool:
        return self._f.closed

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> SeriesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
