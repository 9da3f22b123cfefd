"""Reading input files as a stream of byte chunks: gzip detected by magic bytes, inflation capped."""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import CancelledError
from pathlib import Path

from gpuscope.ingest.env import positive_number
from gpuscope.ingest.errors import IngestError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 4 << 20  # bytes read (and at most inflated) at a time
ENV_MAX_JSON = "GPUSCOPE_MAX_JSON_BYTES"
DEFAULT_MAX_JSON_BYTES = 32 << 30  # 32 GiB of JSON per file, compressed or not
ENV_MAX_RATIO = "GPUSCOPE_MAX_INFLATE_RATIO"
# Kineto traces inflate about 15x (sample_traces/: 14.9-15.3x); 100x leaves room for odd ones while
# a gzip bomb (1000x and more) is refused after reading a few MB of it.
DEFAULT_MAX_INFLATE_RATIO = 100.0


def max_json_bytes() -> int:
    """Largest uncompressed JSON accepted per file, bytes (``$GPUSCOPE_MAX_JSON_BYTES``)."""
    return int(positive_number(ENV_MAX_JSON, DEFAULT_MAX_JSON_BYTES))


def max_inflate_ratio() -> float:
    """Largest inflated / compressed size of a gzip file (``$GPUSCOPE_MAX_INFLATE_RATIO``)."""
    return positive_number(ENV_MAX_RATIO, DEFAULT_MAX_INFLATE_RATIO)


def inflate_limit(compressed_bytes: int) -> tuple[int, str]:
    """Bytes of JSON a gzip file of ``compressed_bytes`` may inflate to, and which limit that is.

    The smaller of ``max_inflate_ratio() x compressed_bytes`` (at least 1 MiB, so tiny files are
    not refused for compressing well) and the absolute ``max_json_bytes()``.
    """
    absolute = max_json_bytes()
    by_ratio = max(int(max_inflate_ratio() * compressed_bytes), 1 << 20)
    if by_ratio < absolute:
        return by_ratio, f"{max_inflate_ratio():g}x its compressed size ({ENV_MAX_RATIO})"
    return absolute, ENV_MAX_JSON


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def file_sha256(path: Path, stop: threading.Event | None = None) -> str:
    """SHA-256 of the file's bytes as stored (hex). ``stop`` set: raises CancelledError between
    two blocks (a hash nobody waits for any more ends within a block's read)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK_BYTES):
            if stop is not None and stop.is_set():
                raise CancelledError(f"{path}: hash stopped")
            h.update(block)  # releases the GIL
    return h.hexdigest()


def iter_json_bytes(
    path: Path, *, limit: int | None = None, chunk: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """The file's JSON text in chunks; inflates gzip (also concatenated members) on the fly.

    Raises IngestError when the gzip stream is corrupt or truncated, or inflates beyond ``limit``
    bytes (default: :func:`inflate_limit` of the file's size for gzip, :func:`max_json_bytes` for
    plain JSON).
    """
    which = ENV_MAX_JSON
    if limit is None:
        try:
            limit = max_json_bytes()
            if is_gzip(path):
                limit, which = inflate_limit(path.stat().st_size)
        except ValueError as e:
            raise IngestError(path, f"bad limit setting: {e}") from None
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
                        path,
                        f"gzip inflates beyond the limit of {limit} bytes ({which}); "
                        "a decompression bomb, or raise the limit",
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
