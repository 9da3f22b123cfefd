from __future__ import annotations

import inspect
import math
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tracegen import TraceBuilder

# PostgreSQL + S3 servers for the team-store tests (fixtures postgres_server, s3_server, team_store).
pytest_plugins = ["team_servers"]

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A real local store (a DuckLake folder: SQLite catalog + Parquet), fresh for each test."""
    return tmp_path / "store"


@pytest.fixture
def con(request: pytest.FixtureRequest):
    """The store a test writes and reads: the real DuckLake at ``db_path``; an in-memory store
    (plain DuckDB: the same tables, the same door) in a module marked ``memory_store`` (analysis
    tests: opening + ingesting 0.05 s instead of 0.24 s), unless the test names ``db_path`` itself
    (it reopens the store or hands it to the CLI). tests/test_store_equivalence.py checks that
    analysis answers the same on both; ``GPUSCOPE_TESTS_ON_LAKE=1`` runs every test on the lake."""
    from gpuscope.store import connect

    function = getattr(request.node, "function", None)
    named = inspect.signature(function).parameters if function else {}
    in_memory = (
        request.node.get_closest_marker("memory_store")
        and "db_path" not in named
        and not os.environ.get("GPUSCOPE_TESTS_ON_LAKE")
    )
    c = connect(":memory:" if in_memory else request.getfixturevalue("db_path"))
    yield c
    c.close()


@pytest.fixture
def trace() -> TraceBuilder:
    return TraceBuilder()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` hands whole modules to its workers (pytest-xdist ``--dist loadfile
    --no-loadscope-reorder``): a module's fixtures are built once, its tests run in file order on
    one worker. The modules go out in this order: the browser modules first, test_browser.py
    first of them (its first test needs the session's ``server`` before anything is uploaded to
    it), then the other browser modules and then the rest, each group costliest first
    (tests/module_seconds.tsv: CPU seconds, a browser module's with its dashboards and chromium),
    so that a parallel run ends on short modules, not a long one started last."""
    cost = _module_seconds()
    first: dict[Path, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.path, i)
    browser = {item.path for item in items if item.get_closest_marker("browser")}

    def key(item: pytest.Item) -> tuple[int, float, int]:
        group = 2
        if item.path in browser:
            group = 0 if item.path.name == "test_browser.py" else 1
        return (group, -cost.get(_rel(item.path), math.inf), first[item.path])

    items.sort(key=key)


def _rel(path: Path) -> str:
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def _module_seconds() -> dict[str, float]:
    """tests/module_seconds.tsv: CPU seconds per test module (a module it does not list: first)."""
    table = Path(__file__).with_name("module_seconds.tsv")
    rows = [line.split("\t") for line in table.read_text().splitlines()]
    return {r[0]: float(r[1]) for r in rows if len(r) == 2 and not r[0].startswith("#")}


@pytest.fixture(scope="session", autouse=True)
def _signouts_of_this_session(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Sign-outs (gpuscope.web.auth.record_sign_out) go to a file of the test session, never the
    user's own ~/.local/state: dashboards started by module fixtures inherit it."""
    path = tmp_path_factory.mktemp("signouts") / "signed-out.json"
    os.environ.setdefault("GPUSCOPE_SIGNOUT_FILE", str(path))


@pytest.fixture(autouse=True)
def _signouts_of_this_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """...and each in-process test starts with none (a sign-out clicked in one AppTest must not
    sign the same person out of the next test's)."""
    monkeypatch.setenv("GPUSCOPE_SIGNOUT_FILE", str(tmp_path / "signed-out" / "signed-out.json"))
