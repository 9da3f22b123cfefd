"""Browser tests: a real `gpuscope ui` (streamlit) server on a free port against a temp store, driven
by Playwright in Debian's chromium. Screenshots go to artifacts/screenshots/ (kept as CI artefacts)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    CHROMIUM_ARGS,
    Server,
    browser_context,
    chromium_path,
    pages_report,
    start_server,
    stop_server,
)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("e2e"))
    yield s
    stop_server(s)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A browser test that fails says what each of its pages showed: a screenshot of each (kept as
    a CI artefact), the start of its visible text, its URL, and the end of the server's log: the
    pages it made (``new_page``) and those it was handed (``shown``)."""
    outcome = yield
    report = outcome.get_result()
    contexts = [
        *getattr(item, "_gpuscope_contexts", []),
        *getattr(item, "_gpuscope_shown", []),
    ]
    if report.when != "call" or not report.failed or not contexts:
        return
    server = item.funcargs.get("server") if hasattr(item, "funcargs") else None
    text = pages_report(contexts, f"failed-{item.name}", getattr(server, "log", None))
    report.sections.append(("what the pages showed", text))


@pytest.fixture
def new_page(browser, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A factory of pages, each in its own fresh browser context (no shared cookies or storage),
    each page watching how Streamlit's script runs end (``RUN_END_JS``: ``wait_idle`` reads it)."""
    contexts: list[Any] = []
    request.node._gpuscope_contexts = contexts

    def make(color_scheme: str = "light"):  # type: ignore[no-untyped-def]
        ctx = browser_context(browser, color_scheme)
        contexts.append(ctx)
        return ctx.new_page()

    yield make
    for c in contexts:
        c.close()


@pytest.fixture
def shown(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """``shown(page)`` -> page: a page the test reads but did not make (a module's shared page,
    made by ``browser_context``), shown in the test's failure report as its own pages are; it is
    not closed after the test."""
    pages: list[Any] = []
    request.node._gpuscope_shown = pages

    def show(page):  # type: ignore[no-untyped-def]
        if page.context not in pages:
            pages.append(page.context)
        return page

    return show
