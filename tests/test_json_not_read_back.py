"""``to_json()`` is for the faces that write JSON, never read back inside the package: code that
needs a report's figures reads the typed dataclasses (``RunReport``, ``MemoryResult``, ...), not
the document they print. A ``.to_json()`` call is allowed only where a JSON document is the
product: inside a serializer (a method or function named ``to_json`` / ``*_json``, building its
document from its parts' documents) or in a module whose job is to write JSON (below)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("app", "ingest", "analysis", "store", "vocabulary")

#: Modules (a path, or a folder ending in ``/``) whose job is to serialize, and why.
SERIALIZERS = {
    # the CLI prints the documented JSON (--json) and renders its text from that same document,
    # so that the text and the JSON never disagree
    "app/cli/": "the CLI's JSON output (docs/cli-json.md) and the text rendered from it",
    # the Markdown/HTML report a user downloads embeds the analyze document
    "app/reports.py": "the report files a user downloads",
    # the payload logged to W&B / MLflow is the analyze document and the report files
    "app/trackers.py": "the files sent to an experiment tracker",
    # stored summary parts are JSON documents by design (read back with json.loads)
    "analysis/rank_summary.py": "the stored per-rank summary parts",
}

#: Readers still to be replaced by typed page models (issue 21, step 3), as "path:function": none
#: left (the web's analyze document, ``run_views.report_doc``, gave way to the page models of
#: ``gpuscope.analysis.run_views``). The list may only shrink: a new reader fails the test.
PENDING: dict[str, str] = {}


def _allowed(where: str) -> bool:
    return any(where.startswith(m) if m.endswith("/") else where == m for m in SERIALIZERS)


def readers(repo: Path = REPO) -> list[str]:
    """Every ``.to_json()`` call outside a serializer, as ``path:function:line``."""
    bad: list[str] = []
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*.py")):
            where = path.relative_to(repo).as_posix()
            if _allowed(where):
                continue
            _visit(ast.parse(path.read_text(), str(path)), where, "<module>", bad)
    return bad


def _visit(node: ast.AST, where: str, func: str, bad: list[str]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            if child.name == "to_json" or child.name.endswith("_json"):
                continue  # a serializer: composes its document from its parts' documents
            _visit(child, where, child.name, bad)
            continue
        if (
            isinstance(child, ast.Call)
            and isinstance(child.func, ast.Attribute)
            and child.func.attr == "to_json"
        ):
            bad.append(f"{where}:{func}:{child.lineno}")
        _visit(child, where, func, bad)


def test_no_to_json_read_back_in_the_package() -> None:
    found = readers()
    pending = {r.rsplit(":", 1)[0] for r in found}
    assert [r for r in found if r.rsplit(":", 1)[0] not in PENDING] == []
    # a pending reader that is gone must leave the list (it only shrinks)
    assert pending == set(PENDING)


def test_a_read_back_is_found(tmp_path: Path) -> None:
    for d in ("analysis", "app/cli", "app/web"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "analysis" / "views.py").write_text(
        "class Part:\n"
        "    def to_json(self):\n"
        "        return {'x': self.x.to_json()}\n"  # a serializer: allowed
        "def cause_json(r):\n"
        "    return r.idle.to_json()\n"  # a serializer function: allowed
        "def busy(r):\n"
        "    return r.to_json().get('gpu_busy_pct')\n"  # read back: found
        "top = REPORT.to_json()\n"  # at module level: found
    )
    (tmp_path / "app" / "cli" / "show.py").write_text("def main(r):\n    print(r.to_json())\n")
    (tmp_path / "app" / "web" / "page.py").write_text(
        "def page(r):\n    def inner():\n        return r.busy.to_json()\n    return inner\n"
    )
    assert readers(tmp_path) == [
        "app/web/page.py:inner:3",
        "analysis/views.py:busy:7",
        "analysis/views.py:<module>:8",
    ]
