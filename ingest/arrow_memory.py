"""Which allocator Arrow's buffers come from while gpuscope ingests.

pyarrow's default pool on Linux is mimalloc, which keeps the pages a thread freed for that thread:
an ingest's Arrow buffers are made on the parse threads and freed on the writer's and the flush
thread, so those pages sit idle. With the C library's allocator the 1 GB trace's ingest peaked
at 412-434 MiB, against 443-517 MiB with mimalloc, and 128 rank files took 60 MB less on a
device host. Both took the same time (docs/benchmarks.md, "Arrow's allocator").

The pool is the process's: :func:`use_system_pool` switches it once, unless the user chose one
(``$ARROW_DEFAULT_MEMORY_POOL``). Buffers made before keep the pool they came from.
"""

from __future__ import annotations

import os
import threading

ENV_POOL = "ARROW_DEFAULT_MEMORY_POOL"  # Arrow's own variable: a pool the user chose stays
_lock = threading.Lock()
_done = False


def use_system_pool() -> str:
    """Make the C library's allocator Arrow's default pool, unless ``$ARROW_DEFAULT_MEMORY_POOL``
    names one; returns the backend now in use (``"system"``, else the user's)."""
    global _done
    import pyarrow as pa

    with _lock:
        if not _done and not os.environ.get(ENV_POOL):
            pa.set_memory_pool(pa.system_memory_pool())
        _done = True
        return str(pa.default_memory_pool().backend_name)
