"""The writer's chunk order (batch_insert.sort_order): the same indices as Arrow's own sort on
(rank, cat, ts_ns), ties in their input order, nulls last."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from gpuscope.ingest.batch_insert import sort_order

KEYS = [("rank", "ascending"), ("cat", "ascending"), ("ts_ns", "ascending")]
CATS = ["kernel", "cpu_op", "", "gpu_memcpy", "Kernel", "cuda_runtime", "é-cat", "python_function"]


def _rows(seed: int, n: int, *, null_cat: bool = False) -> pa.Table:
    r = random.Random(seed)
    cats = [r.choice(CATS) for _ in range(n)]
    if null_cat:
        cats[r.randrange(n)] = None
    return pa.table({
        "rank": pa.array([r.choice([0, 0, 0, 3, -1]) for _ in range(n)], pa.int32()),
        "cat": pa.array(cats, pa.string()),
        "ts_ns": pa.array([None if r.random() < 0.05 else r.randrange(50) for _ in range(n)], pa.int64()),
        "row": pa.array(range(n), pa.int64()),
    })  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_sort_order_is_arrows_stable_sort(seed: int) -> None:
    rows = _rows(seed, 1 + seed * 97)
    assert sort_order(rows).equals(pc.sort_indices(rows, KEYS))


def test_sort_order_of_chunked_columns() -> None:
    a, b = _rows(1, 300), _rows(2, 200)
    rows = pa.concat_tables([a, b])  # two chunks per column, as the writer's buffer is
    assert rows.column("cat").num_chunks == 2
    assert sort_order(rows).equals(pc.sort_indices(rows, KEYS))


def test_sort_order_with_a_null_cat() -> None:
    rows = _rows(3, 400, null_cat=True)
    assert sort_order(rows).equals(pc.sort_indices(rows, KEYS))
