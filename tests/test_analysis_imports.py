"""The analysis modules import each other without a cycle, counting imports inside functions too
(a function-level import is how a cycle hides): the graph any tool can follow is a DAG."""

from __future__ import annotations

import ast
from pathlib import Path

ANALYSIS = Path(__file__).resolve().parent.parent / "analysis"
PKG = "gpuscope.analysis"


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in ANALYSIS.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods:
        for node in ast.walk(ast.parse((ANALYSIS / f"{m}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == PKG:
                    graph[m] |= {a.name for a in node.names if a.name in mods}
                elif node.module.startswith(PKG + "."):
                    graph[m].add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith(PKG + "."):
                        graph[m].add(a.name.split(".")[2])
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return [*path[path.index(d) :], d]
            if d not in state and (c := visit(d)):
                return c
        state[n] = 2
        path.pop()
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_import_cycle_in_analysis():
    assert _cycle(_graph()) is None


def test_the_check_finds_a_cycle():
    g = _graph()
    assert "tensor_cores" in g["kernels"]  # kernels reads the tensor-core rules ...
    g["tensor_cores"].add("kernels")  # ... so tensor_cores importing kernels would close a loop
    assert _cycle(g) is not None
