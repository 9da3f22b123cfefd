"""Reading input files as a stream of byte chunks: gzip detected by magic bytes, inflation capped."""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

from gpuscope.ingest.errors import IngestError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 4 << 20  # bytes read (and at most inflated) at a time
ENV_MAX_JSON = "GPUSCOPE_MAX_JSON_BYTES"
DEFAULT_MAX_JSON_BYTES = 64 << 30  # 64 GiB of JSON per file


def max_json_bytes() -> int:
    """Largest uncompressed JSON accepted per file (guards against gzip bombs); env-configurable."""
    raw = os.environ.get(ENV_MAX_JSON)
    return int(raw) if raw else DEFAULT_MAX_JSON_BYTES


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK_BYTES):
            h.update(block)
    return h.hexdigest()


def iter_json_bytes(
    path: Path, *, limit: int | None = None, chunk: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """The file's JSON text in chunks; inflates gzip (also concatenated members) on the fly.

    Raises IngestError when the gzip stream is corrupt or truncated, or inflates beyond ``limit`` bytes.
    """
    limit = max_json_bytes() if limit is None else limit
    total = 0
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            f.seek(0)
            while block := f.read(chunk):
                total += len(block)
                if total > limit:
                    raise IngestError(
                        path, f"larger than the limit of {limit} bytes of JSON ({ENV_MAX_JSON})"
                    )
                yield block
            return
        f.seek(0)
        d = zlib.decompressobj(wbits=31)
        pending = False  # the current gzip member got input but has not reached its end
        while block := f.read(chunk):
            data = block
            while data:
                pending = True
                try:
                    out = d.decompress(data, chunk)
                except zlib.error as e:
                    raise IngestError(path, f"corrupt gzip data ({e})") from None
                total += len(out)
                if total > limit:
                    raise IngestError(
                        path, f"gzip inflates beyond the limit of {limit} bytes ({ENV_MAX_JSON})"
                    )
                if out:
                    yield out
                if d.eof:  # a file may hold several gzip members back to back
                    pending = False
                    data = d.unused_data
                    d = zlib.decompressobj(wbits=31)
                    if data and data[:2] != GZIP_MAGIC:
                        if data.strip(b"\x00"):
                            raise IngestError(path, "trailing bytes after the gzip data")
                        data = b""
                else:
                    data = d.unconsumed_tail
        if pending:
            raise IngestError(path, "truncated gzip file (the compressed stream ends early)")
