"""Freed memory handed back to the system between heavy stages (gpuscope.store.free_memory): the
pages DuckDB's jemalloc and glibc's malloc hold after a stage leave the process's RSS."""

from __future__ import annotations

import duckdb
import numpy as np
from gpuscope.store import duckdb_resident_bytes, release_free_memory

MB = 1 << 20


def _rss_anon_mb() -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split("RssAnon:")[1].split()[0]) >> 10


def test_duckdb_pages_freed_by_a_query_are_given_back() -> None:
    """A sort of 6 M rows leaves ~200 MB of freed pages in DuckDB's allocator; release_free_memory() gives
    them back. The jemalloc symbols are read from the installed DuckDB: if a release stops
    exporting them, release_free_memory() would silently free nothing, and this fails."""
    con = duckdb.connect(":memory:", config={"threads": 2})
    try:
        con.execute("CREATE TABLE t AS SELECT range AS i, random() AS r FROM range(6000000)")
        con.execute("SELECT count(*) FROM (SELECT * FROM t ORDER BY r)").fetchall()
        con.execute("DROP TABLE t")
        held = duckdb_resident_bytes()
        assert held is not None, "DuckDB's jemalloc is not reachable: nothing is freed"
        assert held > 100 * MB
        release_free_memory()
        after = duckdb_resident_bytes()
        assert after is not None and after < held - 80 * MB
    finally:
        con.close()


def test_malloc_pages_freed_in_the_middle_of_the_heap_are_given_back() -> None:
    """Arrays of 64 KB come from malloc's arena (below its mmap threshold); freeing every other
    one leaves ~94 MB of free chunks that free() alone keeps resident."""
    arrays = [np.ones(8000) for _ in range(3000)]  # 3000 x 64 KB
    del arrays[::2]
    held = _rss_anon_mb()
    release_free_memory()
    assert _rss_anon_mb() < held - 60
    assert sum(int(a[0]) for a in arrays) == 1500  # the kept half is intact
