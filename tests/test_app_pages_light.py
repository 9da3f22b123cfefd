"""The dashboard's Streamlit settings that keep a warm page's server work small
(app/web/.streamlit/config.toml, ``[runner]``), and what they require of the pages."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parent.parent / "app" / "web"
CONFIG = WEB / ".streamlit" / "config.toml"
SCRIPTS = [
    WEB / "main.py",
    *sorted(p for p in (WEB / "screens").glob("*.py") if p.stem != "__init__"),
]


def test_runner_settings() -> None:
    runner = tomllib.loads(CONFIG.read_text())["runner"]
    # magic's AST pass cost more CPU than the rest of a warm first screen whenever the script
    # cache had been emptied; a full collection after every run cost as much again
    assert runner["magicEnabled"] is False
    assert runner["postScriptGC"] is False


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_pages_write_nothing_through_magic(script: Path) -> None:
    """With magic off, a bare expression in a page would silently show nothing: magic must find
    nothing to write in any page (it adds only its import)."""
    from streamlit.runtime.scriptrunner import magic

    src = script.read_text()
    plain = ast.parse(src)
    magicked = magic.add_magic(src, str(script))
    body = [
        n
        for n in magicked.body
        if not (
            isinstance(n, ast.Import) and any(a.asname == "__streamlitmagic__" for a in n.names)
        )
    ]
    assert len(plain.body) > 0
    assert [ast.dump(n) for n in body] == [ast.dump(n) for n in plain.body]
