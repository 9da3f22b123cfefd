"""One door to the store: everything outside ``gpuscope.store`` reaches a store through the
package (``gpuscope.store``), its table definitions (``.schema``), its faults (``.errors``) or its
offline extensions (``.extensions``), and opens no DuckDB database of its own (a scratch
``:memory:`` one aside)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("app", "ingest", "analysis", "vocabulary")
#: The package, and the modules other layers need by name: the tables, the faults, and DuckDB's
#: extensions (loaded offline for a scratch ``:memory:`` database of the ingest).
DOORS = (
    "gpuscope.store",
    "gpuscope.store.schema",
    "gpuscope.store.errors",
    "gpuscope.store.extensions",
)


def side_doors(repo: Path = REPO) -> list[str]:
    bad = []
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*.py")):
            where = path.relative_to(repo)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    mods = [node.module]
                    if node.module == "gpuscope.store":
                        mods = [f"gpuscope.store.{a.name}" for a in node.names]
                        mods = [m for m in mods if (repo / "store" / f"{m[15:]}.py").exists()]
                elif isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                else:
                    mods = []
                for m in mods:
                    if (m.startswith("gpuscope.store.") and m not in DOORS) or m.startswith(
                        "gpuscope.ingest.store"
                    ):
                        bad.append(f"{where}:{node.lineno} imports {m}")
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "connect"
                    and getattr(node.func.value, "id", None) == "duckdb"
                    and not (
                        node.args
                        and isinstance(node.args[0], ast.Constant)
                        and node.args[0].value == ":memory:"
                    )
                ):
                    bad.append(f"{where}:{node.lineno} opens a DuckDB database")
    return bad


def test_the_store_has_one_door() -> None:
    assert side_doors() == []


def test_a_side_door_is_found(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "lock.py").write_text("")
    (tmp_path / "app" / "page.py").write_text(
        "import duckdb\n"
        "from gpuscope.store import open_store, schema\n"
        "from gpuscope.store.connection import Store\n"
        "from gpuscope.store import lock\n"
        "def f(p):\n"
        "    duckdb.connect(':memory:')\n"
        "    return duckdb.connect(p)\n"
    )
    assert side_doors(tmp_path) == [
        "app/page.py:3 imports gpuscope.store.connection",
        "app/page.py:4 imports gpuscope.store.lock",
        "app/page.py:7 opens a DuckDB database",
    ]
