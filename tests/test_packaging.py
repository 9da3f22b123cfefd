"""Layout contracts: the package list matches the folders, and the layers keep their boundaries:
no SQL in the app, app/web reads analysis only through its facade, ingest free of the app, analysis
free of UI libraries, no import cycles. Each check is shown to fail on a tiny bad tree."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = {
    "gpuscope": REPO / "app",
    "gpuscope.ingest": REPO / "ingest",
    "gpuscope.analysis": REPO / "analysis",
    "gpuscope.vocabulary": REPO / "vocabulary",
    "gpuscope.store": REPO / "store",
}


def declared_packages() -> set[str]:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    return set(cfg["tool"]["setuptools"]["packages"])


def folder_packages() -> set[str]:
    found = set()
    for name, root in ROOTS.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    return found


def test_every_package_folder_is_declared():
    assert declared_packages() == folder_packages()


# -- the import graph ----------------------------------------------------------------------------------
# Every import of every module, at any depth (module level, inside functions, relative ones), resolved
# to the module it loads. Imports under ``if TYPE_CHECKING:`` load nothing at run time: left out.


@dataclass(frozen=True)
class Import:
    """``module`` imports ``target`` (a module of the tree when it is one, else the dotted name as
    written, e.g. ``streamlit.runtime``) at ``line``."""

    module: str
    target: str
    line: int


def module_files(roots: dict[str, Path]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under each root (a package ``__init__.py`` is
    the package's name)."""
    out: dict[str, Path] = {}
    for name, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([name, *parts])] = path
    return out


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:``."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if _type_checking_only(node):
            todo.extend(getattr(node, "orelse", []))
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def imports(roots: dict[str, Path]) -> list[Import]:
    """Every run-time import of every module under ``roots``."""
    files = module_files(roots)
    known = set(files)
    out: list[Import] = []
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out += [Import(mod, a.name, node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join([*pkg, *([node.module] if node.module else [])])
                else:
                    base = node.module or ""
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    out.append(Import(mod, sub if sub in known else base, node.lineno))
    return sorted(out, key=lambda i: (i.module, i.line, i.target))


def cycles(imps: list[Import], known: set[str]) -> list[list[str]]:
    """One import cycle per strongly connected group of modules (Tarjan), each as the path
    ``[a, b, ..., a]``; sorted."""
    graph: dict[str, set[str]] = {m: set() for m in known}
    for i in imps:
        if i.target in known:
            graph[i.module].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # recursion depth = the longest import chain: small
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)

    def path_in(group: set[str]) -> list[str]:
        """The shortest cycle through the group's first module (breadth first inside it)."""
        start = min(group)
        prev: dict[str, str] = {}
        todo = [start]
        while todo:
            v = todo.pop(0)
            for w in sorted(graph[v] & group):
                if w == start:
                    back = [v]
                    while back[-1] != start:
                        back.append(prev[back[-1]])
                    return [*reversed(back), start]
                if w not in prev:
                    prev[w] = v
                    todo.append(w)
        raise AssertionError(f"no cycle through {start}")  # a strongly connected group has one

    return sorted(path_in(g) for g in groups)


APP_PARTS = ("gpuscope.cli", "gpuscope.web", "gpuscope.sampler", "gpuscope.capture")
UI_LIBRARIES = ("streamlit", "plotly")
#: The modules of gpuscope.analysis that the web pages read (the analysis facade): what a page shows
#: of a run, the busy-over-time plot, NVML series, Compare and Live, and the vocabulary (idle causes,
#: NVML fields) that colours and columns are keyed by. Everything else in analysis is free to change
#: shape without touching app/web.
WEB_FACADE = (
    "gpuscope.analysis.event_classes",
    "gpuscope.analysis.run_views",
    "gpuscope.analysis.sawtooth",
    "gpuscope.analysis.nvml_run",
    "gpuscope.analysis.compare",
    "gpuscope.analysis.live",
)


def _under(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_violations(imps: list[Import]) -> list[str]:
    """ingest imports only itself, the store and the vocabulary (nothing of the app, nor the
    analysis); analysis imports no UI library and nothing of the app, and reaches the store through
    gpuscope.store, never ingest's; neither imports streamlit or plotly; the store imports only
    itself and the vocabulary; the vocabulary (the bottom layer) nothing of gpuscope but itself."""
    bad = []
    for i in imps:
        ingest_out = _under(i.module, "gpuscope.ingest") and (
            (
                _under(i.target, "gpuscope")
                and not _under(
                    i.target, ("gpuscope.ingest", "gpuscope.store", "gpuscope.vocabulary")
                )
            )
            or _under(i.target, UI_LIBRARIES)
        )
        vocabulary_out = _under(i.module, "gpuscope.vocabulary") and (
            _under(i.target, "gpuscope") and not _under(i.target, "gpuscope.vocabulary")
        )
        store_out = _under(i.module, "gpuscope.store") and (
            _under(i.target, ("gpuscope", *UI_LIBRARIES))
            and not _under(i.target, ("gpuscope.store", "gpuscope.vocabulary"))
        )
        analysis_out = _under(i.module, "gpuscope.analysis") and (
            _under(i.target, (*APP_PARTS, *UI_LIBRARIES, "gpuscope.ingest"))
            or i.target == "gpuscope"
        )
        if ingest_out or analysis_out or vocabulary_out or store_out:
            bad.append(f"{i.module}:{i.line} imports {i.target}")
    return bad


def facade_violations(imps: list[Import], facade: tuple[str, ...] = WEB_FACADE) -> list[str]:
    """app/web imports of gpuscope.analysis that go around the facade."""
    return [
        f"{i.module}:{i.line} imports {i.target}"
        for i in imps
        if _under(i.module, "gpuscope.web")
        and _under(i.target, "gpuscope.analysis")
        and not _under(i.target, facade)
    ]


# -- SQL in the app ----------------------------------------------------------------------------------

#: Query text: a statement's shape in SQL's capitals (the app's prose says "Select a run", never
#: "SELECT x FROM").
SQL_TEXT = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\w*\s+)?(?:TABLE|VIEW|INDEX|SEQUENCE)\b"
    r"|\b(?:DROP|ALTER)\s+TABLE\b|\bCOPY\s+\w+\s+(?:TO|FROM)\b|\bATTACH\s+'"
)
#: Calls that run SQL on a DuckDB connection (or the duckdb module).
SQL_CALLS = ("execute", "executemany", "sql", "query", "query_df", "read_sql", "from_query")
#: Where the app may call them: db.py's connection management passes a caller's statement on (a
#: parameter, never text of its own); nothing in app/ calls it with text (checked below).
SQL_PASS_THROUGH = {"gpuscope.web.db"}
#: Calls of those names that run no SQL: the capture's torch.cuda.Event.query (is the GPU past it?).
NOT_SQL_CALLS = {("gpuscope.capture", "query")}


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal and f-string (its literal parts joined) of ``tree``."""
    parts = {
        id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
            out.append((node.lineno, text))
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts
        ):
            out.append((node.lineno, node.value))
    return out


def sql_findings(roots: dict[str, Path], package: str = "gpuscope") -> list[str]:
    """Query text or SQL-running calls in the app (``package`` and below, except the store, ingest
    and analysis): every string literal that reads as SQL, and every ``.execute``/``.sql``/... call,
    but in db.py's pass-through whose statement is a parameter."""
    bad = []
    for mod, path in module_files(roots).items():
        if not _under(mod, package) or _under(
            mod, ("gpuscope.ingest", "gpuscope.analysis", "gpuscope.store")
        ):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for line, text in _strings(tree):
            if SQL_TEXT.search(text):
                bad.append(f"{mod}:{line} query text {' '.join(text.split())[:60]!r}")
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if name not in SQL_CALLS or (mod, name) in NOT_SQL_CALLS:
                continue
            passes_on = mod in SQL_PASS_THROUGH and node.args and isinstance(node.args[0], ast.Name)
            if not passes_on:
                bad.append(f"{mod}:{node.lineno} runs SQL ({name})")
    return bad


# -- the checks on this repository -------------------------------------------------------------------


def test_no_sql_in_the_app():
    assert sql_findings(ROOTS) == []


def test_the_web_reads_analysis_only_through_its_facade():
    assert facade_violations(imports(ROOTS)) == []
    for mod in WEB_FACADE:  # the facade exists: a renamed module is not silently allowed
        assert mod in module_files(ROOTS), mod


@pytest.mark.slow
def test_layers_keep_their_boundaries():
    """ingest never imports the app (nor analysis); analysis never streamlit, plotly or the app."""
    assert layer_violations(imports(ROOTS)) == []


def test_no_import_cycles():
    """No import cycle anywhere in gpuscope, counting imports inside functions."""
    found = cycles(imports(ROOTS), set(module_files(ROOTS)))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


# -- each check catches what it is for: tiny bad trees ---------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    """Write ``files`` (path under the repo -> source) and return roots like ROOTS."""
    for rel, src in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(src)
    for folder in ("app", "ingest", "analysis", "vocabulary", "store", "app/web"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").touch()
    return {
        "gpuscope": tmp_path / "app",
        "gpuscope.ingest": tmp_path / "ingest",
        "gpuscope.analysis": tmp_path / "analysis",
        "gpuscope.vocabulary": tmp_path / "vocabulary",
        "gpuscope.store": tmp_path / "store",
    }


@pytest.mark.parametrize(
    ("src", "found"),
    [
        ('def f(con):\n    return con.execute("SELECT count(*) FROM runs").fetchone()\n', 2),
        ("def f(con, t):\n    return con.sql(f'SELECT * FROM {t}')\n", 2),
        ('Q = """\n  select 1;\n  DELETE FROM events WHERE run_id = ?\n"""\n', 1),
        ("def f(con, q):\n    return con.execute(q)\n", 1),  # runs SQL outside db.py
        ('def f(db):\n    return db.query_df("x")\n', 1),
    ],
)
def test_sql_check_finds_query_text_and_calls(tmp_path: Path, src: str, found: int):
    roots = _tree(tmp_path, {"app/web/page.py": src})
    assert len(sql_findings(roots)) == found, sql_findings(roots)


def test_sql_check_allows_prose_and_db_pass_through(tmp_path: Path):
    roots = _tree(
        tmp_path,
        {
            "app/web/page.py": 'TEXT = "Select a run from the list, then update its tags."\n',
            "app/web/db.py": "def query_df(con, sql, p):\n    return con.execute(sql, p).df()\n",
            "analysis/q.py": 'def f(con):\n    return con.execute("SELECT 1 FROM runs")\n',
        },
    )
    assert sql_findings(roots) == []
    # the pass-through with text of its own is query text all the same
    roots = _tree(
        tmp_path, {"app/web/db.py": 'def n(con):\n    return con.execute("SELECT 1 FROM runs")\n'}
    )
    assert len(sql_findings(roots)) == 2


def test_facade_check_finds_a_way_around(tmp_path: Path):
    roots = _tree(
        tmp_path,
        {
            "analysis/busy.py": "",
            "analysis/compare.py": "",
            "app/web/page.py": (
                "from gpuscope.analysis import compare\n"
                "def f():\n    from gpuscope.analysis.busy import busy_series\n"
                "    from ..analysis import busy\n"
            ),
        },
    )
    bad = facade_violations(imports(roots), facade=("gpuscope.analysis.compare",))
    assert bad == [
        "gpuscope.web.page:3 imports gpuscope.analysis.busy",
        "gpuscope.web.page:4 imports gpuscope.analysis.busy",
    ]


def test_layer_check_finds_ingest_importing_the_app_and_analysis_importing_ui(tmp_path: Path):
    roots = _tree(
        tmp_path,
        {
            "app/web/ui.py": "",
            "ingest/load.py": "def f():\n    from gpuscope.web import ui\n",
            "ingest/ok.py": (
                "from gpuscope.ingest import load\nfrom . import load as again\n"
                "from gpuscope.vocabulary import words\n"
            ),
            "vocabulary/words.py": "from gpuscope.vocabulary import errors\n",
            "vocabulary/errors.py": "def f():\n    from gpuscope.ingest import load\n",
            "store/open.py": "from gpuscope.vocabulary import words\nfrom gpuscope.ingest import ok\n",
            "analysis/plot.py": "import plotly.graph_objects as go\nfrom gpuscope.ingest import ok\n",
            "analysis/page.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import streamlit\n"
                "def f():\n    import streamlit as st\n"
            ),
        },
    )
    assert sorted(layer_violations(imports(roots))) == [
        "gpuscope.analysis.page:5 imports streamlit",
        "gpuscope.analysis.plot:1 imports plotly.graph_objects",
        "gpuscope.analysis.plot:2 imports gpuscope.ingest.ok",
        "gpuscope.ingest.load:2 imports gpuscope.web.ui",
        "gpuscope.store.open:2 imports gpuscope.ingest.ok",
        "gpuscope.vocabulary.errors:2 imports gpuscope.ingest.load",
    ]


def test_cycle_check_counts_function_level_and_relative_imports(tmp_path: Path):
    roots = _tree(
        tmp_path,
        {
            "analysis/a.py": "from gpuscope.analysis.b import x\n",
            "analysis/b.py": "x = 1\ndef f():\n    from gpuscope.analysis import c\n",
            "analysis/c.py": "from . import a\n",
            "analysis/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import e\n",
            "analysis/e.py": "from gpuscope.analysis import d\n",
            "ingest/self.py": "def f():\n    from gpuscope.ingest import self\n",
        },
    )
    found = cycles(imports(roots), set(module_files(roots)))
    assert found == [
        [
            "gpuscope.analysis.a",
            "gpuscope.analysis.b",
            "gpuscope.analysis.c",
            "gpuscope.analysis.a",
        ],
        ["gpuscope.ingest.self", "gpuscope.ingest.self"],
    ]


def test_every_subcommand_exists_and_has_its_module():
    from gpuscope.cli.main import SUBCOMMANDS, build_parser

    for name in SUBCOMMANDS:
        assert (REPO / "app" / "cli" / f"{name}.py").exists(), name
    help_text = build_parser().format_help()
    assert all(name in help_text for name in SUBCOMMANDS)


def test_a_subcommand_imports_its_own_module_and_parses_as_with_every_one():
    """``gpuscope analyze ...`` builds the parser of ``analyze`` alone: no other command's module,
    none of the ingest's or the sampler's (~0.35 s of a 128-rank run's analyze); its arguments
    parse as with every subcommand's parser; help and a typo still get every subcommand."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from gpuscope.cli.main import build_parser\n"
        "args = build_parser(sys.argv[1:]).parse_args(sys.argv[1:])\n"
        "print(vars(args)['command'], vars(args)['json'])\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('gpuscope.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "analyze", "abc", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert out[0] == "analyze True"
    loaded = out[1].split()
    assert "gpuscope.cli.analyze" in loaded
    others = {f"gpuscope.cli.{n}" for n in ("ingest", "sample", "ui", "compare", "report")}
    assert not others & set(loaded)
    assert not [m for m in loaded if m.startswith(("gpuscope.ingest.", "gpuscope.sampler."))]

    from gpuscope.cli.main import SUBCOMMANDS, build_parser

    argv = ["analyze", "abc", "--json", "--rank", "1"]
    assert vars(build_parser(argv).parse_args(argv)) == vars(build_parser().parse_args(argv))
    for argv in (["--help"], ["analyse"], []):
        help_text = build_parser(argv).format_help()
        assert all(name in help_text for name in SUBCOMMANDS), argv


def test_schema_doc_is_generated_from_the_code():
    from gpuscope.store.schema import markdown

    assert (REPO / "docs" / "schema.md").read_text() == markdown()


@pytest.mark.slow
def test_static_tools_resolve_the_package():
    """The editable install is one that type checkers and editors follow (strict mode: a tree of
    links on sys.path, no import hook): mypy finds every `gpuscope.*` module it is asked about."""
    import shutil
    import subprocess
    import sys

    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    assert mypy, "mypy is a dev dependency (make lint / make typecheck)"
    code = (
        "from gpuscope.analysis.report import analyze_run\n"
        "from gpuscope.ingest.loader import ingest_paths\n"
        "from gpuscope.capture import profile_steps\n"
        "from gpuscope.cli.main import main\n"
        "reveal_type(analyze_run)\n"
    )
    # The Makefile's own mypy flags and cache (.mypy_cache at the root): after `make lint`, `test`
    # or `test-fast` has checked the package, this reads the cache instead of checking it again.
    out = subprocess.run(
        [mypy, "--ignore-missing-imports", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    ).stdout
    assert "import-not-found" not in out and "Cannot find implementation" not in out, out
    assert 'Revealed type is "def (' in out, out  # the real signature, not Any


def test_the_image_copies_every_package_folder():
    """The Dockerfile's `pip install .` sees every folder that pyproject.toml maps to a package."""
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders = set(cfg["tool"]["setuptools"]["package-dir"].values())
    copied = set(re.findall(r"^COPY (\S+) \./\1$", (REPO / "Dockerfile").read_text(), re.M))
    assert folders <= copied, sorted(folders - copied)
