"""The guard of ``kept_analyses`` (tests/conftest.py, its digest in tests/analysis_digest.py): a face handed a kept analysis must leave it
as it was. Its digest sees any change of what the analysis holds, and not a cache the analysis
fills as it is read (a field its equality leaves out: ``critical_path.Graph.memo``, where the
fixes' re-timings keep their node masks)."""

from __future__ import annotations

import numpy as np
from analysis_digest import _digest_of
from gpuscope.analysis.critical_path import Graph, Node


def _graph(n: int) -> Graph:
    nodes = [Node("host", "cpu", 10 * i, 10 * i + 5, f"op{i}") for i in range(n)]
    return Graph(nodes, [[] for _ in nodes], list(range(n)))


def test_the_digest_sees_a_changed_graph_not_its_filled_cache() -> None:
    for n in (2, 40):  # a short list of nodes, and one taken apart in columns (32 or more)
        g = _graph(n)
        before = _digest_of(g)
        g.memo["mask:plain"] = np.ones(n, dtype=bool)  # what a re-timing reads once per graph
        assert _digest_of(g) == before
        g.nodes[1].e += 1
        assert _digest_of(g) != before
        g.nodes[1].e -= 1
        assert _digest_of(g) == before
        g.order.reverse()
        assert _digest_of(g) != before
