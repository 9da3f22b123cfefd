from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from analysis_digest import _digest
from disk_room import pytest_sessionstart  # noqa: F401  (the suite's disk check, a hook)
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


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread for the test (skipped without torch): the tiny models' steps
    gain nothing from a second thread, and on a busy machine its spin-waits cost more CPU than
    it saves (the third to fifth blind parts' builds and steps: 54 s of CPU on 2 threads at a
    load average of 7 on 2 cores, 26 s on one)."""
    torch = pytest.importorskip("torch")
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


#: An analysis kept for ``kept_analyses``: (store, run, rank, options with ``with_path`` resolved).
_Key = tuple[str, str, int, object]


@pytest.fixture(scope="module")
def _kept_of_module() -> Iterator[dict[_Key, tuple[object, dict[str, bytes]]]]:
    """The analyses ``kept_analyses`` kept for this module, each with :func:`_digest` of it when
    made: dropped with the module."""
    kept: dict[_Key, tuple[object, dict[str, bytes]]] = {}
    yield kept
    kept.clear()


@pytest.fixture
def kept_analyses(
    _kept_of_module: dict[_Key, tuple[object, dict[str, bytes]]], monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """For tests whose faces (CLI text and JSON, reports, pages, ``check``, ``compare``) must say
    the same of a run: each analysis of a (store, run, rank) with the same options is made once
    for the test module and handed to every face that asks for it, as the web hands one analysis
    to its cards and verdict. What each face asks for and how it renders it is unchanged: other
    options, another rank, run or store get an analysis of their own; an in-memory store is never
    kept (two of them may hold the same run ids). Only the module's fixtures may write a store
    its kept tests read. A face handed a kept analysis must leave it as it was: the test fails if
    any field of one it used holds anything else after it."""
    from gpuscope.analysis import report

    real = report.RunAnalysis.report
    used: set[_Key] = set()

    def kept(self: report.RunAnalysis, *, with_path: bool | None = None) -> report.RunReport:
        spec = getattr(self.con, "spec", None)
        if spec is None or spec.location == ":memory:":
            return real(self, with_path=with_path)
        options = self.options
        if with_path is not None:
            options = dataclasses.replace(options, with_path=with_path)
        key = (repr(spec), self.run_id, self.rank, options)
        if key not in _kept_of_module:
            made = real(self, with_path=with_path)
            _kept_of_module[key] = (made, _digest(made))
        used.add(key)
        return _kept_of_module[key][0]  # type: ignore[return-value]

    monkeypatch.setattr(report.RunAnalysis, "report", kept)
    yield
    for key in used:
        made, digest = _kept_of_module[key]
        now = _digest(made)
        changed = [name for name in digest if now[name] != digest[name]]
        assert not changed, f"a face changed {changed} of the analysis of {key[1:3]} it was handed"


def pytest_configure(config: pytest.Config) -> None:
    _scan_components_once()


def _scan_components_once() -> None:
    """Every ``AppTest`` scans the metadata of every installed package for Streamlit components
    (``streamlit.components.v2.manifest_scanner.scan_component_manifests``: 0.15 CPU s, and none
    is installed here); nothing installs a package during a run, so each process scans once and
    each caller gets its own copy of the list."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # another Streamlit: its own scan stays
        return
    scan = functools.cache(manifest_scanner.scan_component_manifests)

    def once(*args: object, **kwargs: object) -> list:
        return list(scan(*args, **kwargs))

    manifest_scanner.scan_component_manifests = once


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
