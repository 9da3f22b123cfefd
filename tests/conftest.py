from __future__ import annotations

import inspect
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
    """`make test` runs on every core (pytest-xdist, ``--dist loadgroup``): the browser tests share one
    worker (one chromium and one session server at a time), everything else spreads over the rest."""
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group("browser"))


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
