"""Test-only timing hooks for a browser test's `gpuscope ui` server, put on its PYTHONPATH by
tests/e2e/test_browser_upload_while_filling.py (never installed, never imported by gpuscope).

``GPUSCOPE_TEST_LATE_FLUSH_S=S``: the reply to a file chooser's request for upload URLs reaches the
browser late, as on a loaded machine: after the session's file-URLs request is answered, nothing is
sent to that browser until the next full script run of the session has started (its queue is
cleared then), or ``S`` seconds have passed. This makes the worst interleaving certain rather than
rare: the reply waits in the session's queue while a script run starts.

``GPUSCOPE_TEST_SLOW_SUMMARY_S=S``: each stored run summary the Runs list reads takes ``S`` seconds
more, as a slow analysis does, so the Runs page keeps filling its figures in for a while.
"""

from __future__ import annotations

import os
import time
from typing import Any


def _late_flush(hold_s: float) -> None:
    from streamlit.runtime.app_session import AppSession
    from streamlit.runtime.scriptrunner import ScriptRunnerEvent

    handle_urls = AppSession._handle_file_urls_request
    flush = AppSession.flush_browser_queue
    on_event = AppSession._handle_scriptrunner_event_on_event_loop

    held: set[str] = set()  # the ids of the sessions whose messages are held

    def release(self: AppSession) -> None:
        if self.id in held:
            held.discard(self.id)
            if self._message_enqueued_callback:
                self._message_enqueued_callback()  # the runtime flushes at once

    def handle_urls_late(self: AppSession, request: Any) -> None:
        handle_urls(self, request)
        held.add(self.id)
        self._event_loop.call_later(hold_s, release, self)

    def flush_late(self: AppSession) -> list:  # type: ignore[type-arg]
        return [] if self.id in held else flush(self)

    def on_event_late(self: AppSession, sender: Any, event: Any, *a: Any, **k: Any) -> None:
        on_event(self, sender, event, *a, **k)
        fragments = k.get("fragment_ids_this_run", a[4] if len(a) > 4 else None)
        if event == ScriptRunnerEvent.SCRIPT_STARTED and not fragments:
            release(self)

    AppSession._handle_file_urls_request = handle_urls_late  # type: ignore[method-assign,assignment]
    AppSession.flush_browser_queue = flush_late  # type: ignore[method-assign]
    AppSession._handle_scriptrunner_event_on_event_loop = on_event_late  # type: ignore[method-assign]


def _slow_summary(extra_s: float) -> None:
    from gpuscope.analysis import run_views

    stored = run_views.stored_run_summary

    def slow(*a: Any, **k: Any) -> Any:
        time.sleep(extra_s)
        return stored(*a, **k)

    run_views.stored_run_summary = slow  # type: ignore[assignment]


if os.environ.get("GPUSCOPE_TEST_LATE_FLUSH_S"):
    _late_flush(float(os.environ["GPUSCOPE_TEST_LATE_FLUSH_S"]))
if os.environ.get("GPUSCOPE_TEST_SLOW_SUMMARY_S"):
    _slow_summary(float(os.environ["GPUSCOPE_TEST_SLOW_SUMMARY_S"]))
