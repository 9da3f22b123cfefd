"""Run a coroutine to its end in a thread of its own (tests that drive an ASGI app directly).

A browser test in the same xdist worker holds this thread's event loop (Playwright's sync API), so
``asyncio.run`` here would fail; any error of the coroutine is raised again in the caller."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


def run_in_thread(coro: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(coro)`` in a new thread: its result, or its exception raised here."""
    errors: list[BaseException] = []
    results: list[Any] = []

    def go() -> None:
        try:
            results.append(asyncio.run(coro))
        except BaseException as e:  # re-raised below, in the caller's thread
            errors.append(e)

    t = threading.Thread(target=go)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return results[0]
