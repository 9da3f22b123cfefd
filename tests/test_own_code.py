"""The user's own code stays in every re-timing that scales host work: a host segment of 1 ms or
more on which no operator and no runtime call runs (analysis/fixes/base.py ``own_code``,
docs/metrics.md "Gains from the path"). Hand-made nodes with answers by hand."""

from __future__ import annotations

import pytest
from gpuscope.analysis.critical_path import HostEvent, Node
from gpuscope.analysis.fixes import base as fx
from gpuscope.analysis.fixes import kernel_fusion as kf

MS = 1_000_000


def host(
    dur_ns: int, cat: str | None, node_cat: str = "cpu", tags: frozenset = frozenset()
) -> Node:
    """A host segment of ``dur_ns`` whose innermost event has category ``cat`` (None: untraced)."""
    ev = None if cat is None else HostEvent("x", cat, 0, dur_ns, 1)
    return Node("host", node_cat, 0, dur_ns, "x" if ev else "(untraced host time)", tags, ev)


@pytest.mark.parametrize(
    ("dur_ns", "cat", "node_cat", "own"),
    [
        (2 * MS, None, "cpu", True),  # untraced: a sleep between ops
        (2 * MS, "user_annotation", "cpu", True),  # inside ProfilerStep#N or a record_function
        (2 * MS, "python_function", "cpu", True),  # a Python function between its ops
        (MS, None, "cpu", True),  # the threshold itself
        (MS - 1, None, "cpu", False),  # Python between two ops: dispatch
        (2 * MS, "cpu_op", "cpu", False),  # a long operator is the model's work
        (2 * MS, "cuda_runtime", "cpu", False),  # a runtime call
        (2 * MS, "cuda_runtime", "launch", False),  # a launch call
        (2 * MS, None, "data_loading", False),  # the DataLoader's: its own fix
    ],
)
def test_own_code_is_a_long_host_segment_no_op_holds(
    dur_ns: int, cat: str | None, node_cat: str, own: bool
) -> None:
    n = host(dur_ns, cat, node_cat)
    assert fx.own_code(n) is own
    if node_cat in ("cpu", "launch"):
        assert fx.is_host_work(n) is (not own)


def test_compile_and_graphs_keep_a_sleep_and_cut_the_dispatch_around_it() -> None:
    """A 5 ms untraced segment (a sleep), a 100 µs CPU op and a 20 µs untraced segment (Python
    between two ops), ρ = 0.5: torch.compile's mid level scales host work by 1 − 0.7 × 0.5 = 0.65
    (the op to 65 µs, the short gap to 13 µs) and leaves the sleep at 5 ms; CUDA graphs' top
    removes every host op (0) but the sleep (its host × 0.5 / 0.2 / 0: ``cuda_graphs._host_scaled``
    on a step without recurrent layers)."""
    sleep, op, gap = host(5 * MS, None), host(100_000, "cpu_op"), host(20_000, None)
    mid = kf._fused(frozenset(), 0.5, set(), False)["mid"][0]
    assert [mid(i, n) for i, n in enumerate((sleep, op, gap))] == pytest.approx(
        [5 * MS, 65_000, 13_000]
    )
    top = fx.scaled_variants(fx.is_host_work, 0.5, 0.2, 0.0)["high"][0]  # cuda_graphs' levels
    assert [top(i, n) for i, n in enumerate((sleep, op, gap))] == pytest.approx([5 * MS, 0, 0])
