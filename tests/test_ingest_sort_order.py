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


@pytest.mark.parametrize("seeded", [False, True])
def test_names_coded_get_the_plain_names_ids(seeded: bool) -> None:
    """The parse threads hand the writer dictionary-encoded names (batch_insert._names_coded):
    each batch's ids, and the order new names get them in, are those of the plain strings."""
    from gpuscope.ingest.batch_insert import IdMap, _names_coded

    r = random.Random(5)
    words = [f"aten::op{i}" for i in range(40)] + ["", "é"]
    batches = []
    for k in range(6):
        names = [r.choice(words[: 10 + 6 * k]) for _ in range(300)]
        if k == 4:
            names[17] = None  # a null name is the id of ""
        batches.append(pa.table({"name": pa.array(names, pa.string())}))
    plain, coded = IdMap(), IdMap()
    if seeded:
        plain.seed({"aten::op3": 7, "older": 2})
        coded.seed({"aten::op3": 7, "older": 2})
    for t in batches:
        want = plain.ids_of(pc.fill_null(t.column("name"), ""))
        name = _names_coded(t).column("name")
        got = coded.ids_of(pc.fill_null(name.cast(pa.string()), "") if name.null_count else name)
        assert pa.types.is_dictionary(_names_coded(t).column("name").type)
        assert (
            pa.chunked_array([got])
            .combine_chunks()
            .equals(pa.chunked_array([want]).combine_chunks())
        )
    assert coded.ids == plain.ids


def test_ids_of_keeps_nulls_of_labels() -> None:
    """pid/tid labels are NULL where the id is numeric: they stay NULL (the names' NULL is "")."""
    from gpuscope.ingest.batch_insert import IdMap

    got = IdMap().ids_of(pa.chunked_array([pa.array([None, "Spans", None, "Traces", "Spans"])]))
    assert pa.chunked_array([got]).to_pylist() == [None, 0, None, 1, 0]
