"""The one error root: every kind is a GpuscopeError with its exit code and one line, a store fault
is not bad input, and the CLI translates each kind once (``gpuscope.cli.main``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from gpuscope.ingest.errors import DuplicateRunError, IngestError
from gpuscope.store import AmbiguousRunName
from gpuscope.store.errors import StoreError, store_fault
from gpuscope.vocabulary.errors import Ambiguous, BadInput, GpuscopeError, NotFound, StoreFault

REPO = Path(__file__).resolve().parent.parent


def test_each_kind_has_its_exit_code_and_a_store_fault_is_not_bad_input() -> None:
    full = store_fault(OSError(28, "No space left on device", "/data/store"), "/data/store")
    assert isinstance(full, StoreError) and isinstance(full, StoreFault)
    assert not isinstance(full, IngestError) and not isinstance(full, BadInput)
    assert full.exit_code == 1 and str(full).startswith("/data/store: the disk holding it is full")
    amb = AmbiguousRunName("nightly", [("a" * 12, "nightly"), ("b" * 12, "nightly")])
    assert isinstance(amb, Ambiguous) and not isinstance(amb, IngestError) and amb.exit_code == 2
    assert IngestError("x.json", "bad").exit_code == 2
    assert DuplicateRunError("x.json", "c" * 12).exit_code == 2
    assert NotFound("r1", "no such run").exit_code == 2
    for e in (full, amb, IngestError("b.json", "two\nlines")):
        assert isinstance(e, GpuscopeError) and "\n" not in str(e)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (IngestError("t.json", "not a trace"), 2),
        (StoreError("/s", "the disk holding the store is full: errno 28"), 1),
        (AmbiguousRunName("n", [("a" * 12, "n"), ("b" * 12, "n")]), 2),
        (NotFound("r9", "no such run"), 2),
    ],
)
def test_the_cli_translates_each_kind_once(
    error: GpuscopeError, code: int, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    """Whatever subcommand lets a GpuscopeError through: one ``gpuscope: ...`` line, its code."""
    import gpuscope.cli.runs as runs
    from gpuscope.cli.main import main

    def fails(_args: object) -> int:
        raise error

    monkeypatch.setattr(runs, "run", fails)
    assert main(["runs", "--db", str(tmp_path / "s")]) == code
    assert capsys.readouterr().err == f"gpuscope: {error}\n"


def test_no_face_tells_the_kinds_apart_by_exact_type() -> None:
    """``type(e) is SomeError`` would undo the kinds (a subclass read as something else)."""
    bad = []
    for path in [*(REPO / "app").rglob("*.py"), *(REPO / "ingest").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Call)
                and getattr(node.left.func, "id", None) == "type"
                and any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops)
                and any(getattr(c, "id", "").endswith("Error") for c in node.comparators)
            ):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert bad == []
