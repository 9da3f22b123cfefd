"""Hand the memory that the allocators hold freed back to the system, between two heavy stages.

Two allocators keep freed pages resident (counted in the process's RSS) for reuse:

- DuckDB's jemalloc (linked into ``_duckdb``, its symbols prefixed ``duckdb_je_``) keeps each
  arena's dirty pages for a decay time. DuckDB purges them itself on some events (a change of its
  thread count, a database closed), not between two statements.
- glibc's malloc (NumPy's arrays, Python's larger objects, Arrow's buffers with the system pool:
  :mod:`gpuscope.ingest.arrow_memory`) keeps free chunks inside its arenas; one arena per thread
  that allocated, so pages freed in a parse thread's arena serve no other thread.

`release_free_memory` purges jemalloc's arenas (``arena.<all>.purge``) and calls ``malloc_trim(0)``.
Each is skipped where it does not exist (another C library, a DuckDB built without jemalloc or
without exported symbols): nothing fails, nothing is freed. A call takes a few milliseconds; the
pages given back cost a page fault each when they are used again, so this runs between stages (a
big rank's summary parts: docs/benchmarks.md), not in a loop.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import Any

#: jemalloc's ``MALLCTL_ARENAS_ALL``: the index that names every arena.
_ARENAS_ALL = 4096


@cache
def _jemalloc_mallctl() -> Any | None:
    """DuckDB's ``duckdb_je_mallctl``, or None where it is not exported."""
    try:
        import _duckdb

        lib = ctypes.CDLL(_duckdb.__file__)
        fn = lib.duckdb_je_mallctl
    except (ImportError, OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
    ]
    return fn


@cache
def _malloc_trim() -> Any | None:
    """glibc's ``malloc_trim``, or None (another C library)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_size_t]
    return fn


def duckdb_resident_bytes() -> int | None:
    """Bytes of physical memory DuckDB's jemalloc holds (``stats.resident``), None where it cannot
    be read. For tests and benchmarks."""
    mallctl = _jemalloc_mallctl()
    if mallctl is None:
        return None
    epoch = ctypes.c_uint64(1)
    size = ctypes.c_size_t(ctypes.sizeof(epoch))
    mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), size)
    value = ctypes.c_size_t(0)
    size = ctypes.c_size_t(ctypes.sizeof(value))
    if mallctl(b"stats.resident", ctypes.byref(value), ctypes.byref(size), None, 0) != 0:
        return None
    return int(value.value)


def release_free_memory() -> None:
    """Give the pages that DuckDB's jemalloc and glibc's malloc hold freed back to the system
    (module doc); never raises."""
    mallctl = _jemalloc_mallctl()
    if mallctl is not None:
        mallctl(b"thread.tcache.flush", None, None, None, 0)
        mallctl(f"arena.{_ARENAS_ALL}.purge".encode(), None, None, None, 0)
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
