"""Layout contracts: the package list matches the folders, and the layers keep their boundaries."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = {
    "gpuscope": REPO / "app",
    "gpuscope.ingest": REPO / "ingest",
    "gpuscope.analysis": REPO / "analysis",
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


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


@pytest.mark.parametrize("path", modules("ingest"), ids=lambda p: p.name)
def test_ingest_never_imports_the_app(path):
    bad = {
        m
        for m in imports_of(path)
        if m.startswith("gpuscope.") and not m.startswith("gpuscope.ingest")
    }
    bad |= {m for m in imports_of(path) if m.split(".")[0] in ("streamlit", "plotly")}
    assert not bad, f"{path.name} imports {bad}"


@pytest.mark.parametrize("path", modules("analysis"), ids=lambda p: p.name)
def test_analysis_never_imports_streamlit_plotly_or_the_app(path):
    allowed = ("gpuscope.ingest", "gpuscope.analysis")
    bad = {m for m in imports_of(path) if m.startswith("gpuscope.") and not m.startswith(allowed)}
    bad |= {m for m in imports_of(path) if m.split(".")[0] in ("streamlit", "plotly")}
    assert not bad, f"{path.name} imports {bad}"


def test_every_subcommand_exists_and_has_its_module():
    from gpuscope.cli.main import SUBCOMMANDS, build_parser

    for name in SUBCOMMANDS:
        assert (REPO / "app" / "cli" / f"{name}.py").exists(), name
    help_text = build_parser().format_help()
    assert all(name in help_text for name in SUBCOMMANDS)


def test_schema_doc_is_generated_from_the_code():
    from gpuscope.ingest.schema import markdown

    assert (REPO / "docs" / "schema.md").read_text() == markdown()


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
    out = subprocess.run(
        [mypy, "--no-incremental", "--follow-imports=silent", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "import-not-found" not in out and "Cannot find implementation" not in out, out
    assert 'Revealed type is "def (' in out, out  # the real signature, not Any
