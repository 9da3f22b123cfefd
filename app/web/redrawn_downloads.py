"""A click on a deferred download button that a later script run drew again still gets its file.

``st.download_button(data=callable)`` registers the callable under a new placeholder id at every
script run and revokes the previous run's id for that button. The browser sends the id it holds:
a click that lands while a script run redraws the page (the Run page starts runs of its own while
it fills its figures in) sends an id the server has just revoked, and Streamlit answers
"Deferred file … not found": no file, and the reader must click again.

:func:`serve_redrawn_downloads` makes the server answer such a click with the callable the same
button (same session, same element id: a keyed widget's id is stable across runs) holds now. A
button revoked for good (drawn disabled, or no longer drawn) has no current callable, and the
click fails as before; an id of another session or another button is never served.

The file a click generates belongs to no session's elements, so Streamlit's sweep after any
script run of any session (and after a session closes) marks it, and the next sweep deletes it: a
browser slower to fetch it than two sweeps (a loaded host; another reader's page running)
cancels the download. A generated file is kept out of those sweeps for
:data:`GENERATED_KEEP_S` after it was made.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

log = logging.getLogger(__name__)

_PATCHED = "_gpuscope_serves_redrawn_downloads"
KEEP = 512
"""Placeholder ids remembered (id → session, element), oldest first out: far more than a session's
buttons times the runs a click can race."""

GENERATED_KEEP_S = 120.0
"""Seconds a file made by a click stays out of Streamlit's orphan sweeps (then it goes at the next
two, as before): the browser fetches it as soon as it has its URL."""


def generated_id(url: str) -> str:
    """The media file id in a URL of Streamlit's media storage (``/media/<id><extension>``)."""
    return url.rsplit("/", 1)[-1].split(".", 1)[0]


def current_id(callables: dict[str, Any], session_id: str, element_id: str) -> str | None:
    """The newest registered placeholder id of ``element_id`` in ``session_id`` (None: none).
    ``callables`` is the manager's id → entry map, in registration order."""
    if not element_id:
        return None
    for file_id in reversed(list(callables)):
        entry = callables[file_id]
        if entry.get("session_id") == session_id and entry.get("element_id") == element_id:
            return file_id
    return None


def serve_redrawn_downloads() -> bool:
    """Patch Streamlit's ``MediaFileManager`` (idempotent): ``add_deferred`` remembers each id's
    session and element, and ``execute_deferred`` of an id no longer registered runs the same
    button's current callable (:func:`current_id`). False (and a warning in the log) where this
    Streamlit's manager is not the one this was written for: nothing is changed."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    add, run_deferred = MediaFileManager.add_deferred, MediaFileManager.execute_deferred
    if getattr(run_deferred, _PATCHED, False):
        return True
    needed = ("remove_deferred", "_drop_deferred_id", "_get_inactive_file_ids")
    if not all(hasattr(MediaFileManager, a) for a in needed):
        log.warning("redrawn_downloads: this Streamlit's MediaFileManager has no deferred ids; "
                    "a download clicked while the page is redrawn may fail")  # fmt: skip
        return False
    inactive = MediaFileManager._get_inactive_file_ids
    lock = threading.Lock()

    def made(self: MediaFileManager) -> dict[str, float]:
        got = getattr(self, "_gpuscope_generated_at", None)
        if got is None:
            got = {}
            self._gpuscope_generated_at = got  # type: ignore[attr-defined]
        return got

    def known(self: MediaFileManager) -> OrderedDict[str, tuple[str, str]]:
        ids = getattr(self, "_gpuscope_deferred_owner", None)
        if ids is None:
            ids = OrderedDict()
            self._gpuscope_deferred_owner = ids  # type: ignore[attr-defined]
        return ids

    @functools.wraps(add)
    def add_deferred(self: MediaFileManager, *a: Any, **k: Any) -> str:
        file_id = add(self, *a, **k)
        with self._lock:
            entry = self._deferred_callables.get(file_id)
            owner = (entry["session_id"], entry["element_id"]) if entry else None
        if owner is not None:
            with lock:
                ids = known(self)
                ids[file_id] = owner
                while len(ids) > KEEP:
                    ids.popitem(last=False)
        return file_id

    @functools.wraps(run_deferred)
    def execute_deferred(self: MediaFileManager, file_id: str) -> str:
        with self._lock:
            registered = file_id in self._deferred_callables
            if not registered:
                with lock:
                    owner = known(self).get(file_id)
                now = current_id(self._deferred_callables, *owner) if owner else None
        if not registered and now is not None:
            log.info("redrawn_downloads: %s was drawn again as %s; serving that", file_id, now)
            file_id = now
        url: str = run_deferred(self, file_id)
        with lock:
            made(self)[generated_id(url)] = time.monotonic()
        return url

    @functools.wraps(inactive)
    def inactive_file_ids(self: MediaFileManager) -> set[str]:
        ids: set[str] = inactive(self)
        with lock:
            at = made(self)
            if not at:
                return ids
            now = time.monotonic()
            for file_id in [f for f, t in at.items() if now - t >= GENERATED_KEEP_S]:
                del at[file_id]  # old enough: swept as Streamlit sweeps
            return ids - at.keys()

    setattr(execute_deferred, _PATCHED, True)
    MediaFileManager.add_deferred = add_deferred  # type: ignore[method-assign]
    MediaFileManager.execute_deferred = execute_deferred  # type: ignore[method-assign]
    MediaFileManager._get_inactive_file_ids = inactive_file_ids  # type: ignore[method-assign]
    return True
