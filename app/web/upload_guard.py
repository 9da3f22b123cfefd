"""The upload guard: ASGI middleware in front of Streamlit that refuses a request to the upload
endpoint before its body is read, unless the request may make it, and cuts a body that outgrows
what it declared.

Streamlit takes uploads at ``PUT /_stcore/upload_file/<session>/<file>`` (and removes them at
``DELETE`` of the same path) from any client that has a websocket session and sends the XSRF cookie
with a matching header (both of which a client can make up), and holds each file in memory. Every
request to that path, whatever its method, passes this guard. With sign-in on it answers:

* ``401`` unless the request carries a valid sign-in cookie (Streamlit's signed ``_streamlit_user``
  with gpuscope's seal, of a person who has not signed out since: ``auth.request_identity``);
* ``403`` unless the session it names is that same person's (an upload into, or a removal from,
  someone else's session).

With or without sign-in, still before reading the body:

* ``400`` for a request with both ``Transfer-Encoding`` and ``Content-Length`` (which one frames
  the body is for the server to pick, so the declared size says nothing);
* ``411`` for an upload (``PUT``, ``POST``) without ``Content-Length``, or any request with
  ``Transfer-Encoding``: its size cannot be checked before it arrives;
* ``413`` for an upload larger than ``server.maxUploadSize`` (``gpuscope ui --max-upload-mb``);
* ``429`` for an upload that would take the session's files held and in flight beyond
  ``$GPUSCOPE_MAX_SESSION_UPLOAD_MB`` (default: 2x the file cap).

The body is counted as it arrives: a request whose bytes pass its ``Content-Length`` (``0`` when it
declared none) is cut there and answered ``400``, so what is held and in flight never exceeds what
was declared and checked.

``gpuscope ui`` serves ``asgi.py``, which wraps ``main.py`` in ``st.App`` with this middleware.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gpuscope.web import auth

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UPLOAD_PATH = "/_stcore/upload_file/"
ENV_MAX_UPLOAD = "GPUSCOPE_MAX_UPLOAD_MB"
ENV_SESSION_CAP = "GPUSCOPE_MAX_SESSION_UPLOAD_MB"
DEFAULT_MAX_UPLOAD_MB = 256
MB = 1 << 20


def _mb(var: str, default: int) -> int:
    raw = os.environ.get(var, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        return default
    return value if value >= 1 else default


def file_cap() -> int:
    """The largest upload, bytes (``$GPUSCOPE_MAX_UPLOAD_MB``, which ``gpuscope ui`` sets)."""
    return _mb(ENV_MAX_UPLOAD, DEFAULT_MAX_UPLOAD_MB) * MB


def session_cap() -> int:
    """The most bytes one session may hold in uploads, held and in flight together."""
    return _mb(ENV_SESSION_CAP, 2 * file_cap() // MB) * MB


def _headers(scope: Scope, key: bytes) -> list[str]:
    return [
        str(value.decode("latin-1"))
        for name, value in scope.get("headers", [])
        if name.lower() == key
    ]


def _held(session: str) -> int:
    """Bytes of files Streamlit holds for ``session`` (uploaded, not yet removed)."""
    try:
        from streamlit.runtime import Runtime

        mgr = Runtime.instance().uploaded_file_mgr
        storage = getattr(mgr, "file_storage", {})
        return sum(len(f.data) for f in dict(storage.get(session, {})).values())
    except (RuntimeError, AttributeError):  # no runtime yet, or another file manager
        return 0


def session_owner(session: str) -> str | None:
    """Who is signed in on Streamlit's session ``session`` (their identity, ``auth.identity``);
    None when there is no such session or nobody is signed in on it."""
    try:
        from streamlit.runtime import Runtime

        info = Runtime.instance()._session_mgr.get_session_info(session)
        user = getattr(info.session, "_user_info", None) if info is not None else None
    except (RuntimeError, AttributeError):  # no runtime yet, or another session manager
        return None
    if not isinstance(user, dict) or user.get("is_logged_in") is not True:
        return None
    return auth.identity(user)


UPLOADING = ("PUT", "POST")  # methods that bring a file; any other may bring no body


class _Cut(Exception):
    """The body passed what the request declared: raised to the app from ``receive``."""


class UploadGuard:
    """ASGI middleware: see the module docstring. ``owner_of`` names who is signed in on a
    session (default :func:`session_owner`, Streamlit's sessions)."""

    def __init__(self, app: ASGIApp, owner_of: Callable[[str], str | None] | None = None) -> None:
        self.app = app
        self._owner_of = owner_of or session_owner
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}  # session id -> bytes of uploads being received
        path = auth.config_path()
        self._signin = path is not None
        self._secret = ""  # no secret: no cookie is valid, every upload refused (fail closed)
        if path is not None:
            try:
                self._secret = auth.load_config(path).cookie_secret
            except auth.AuthConfigError:  # checked at start, broken since: refuse, don't serve
                self._secret = ""

    def refusal(self, scope: Scope, session: str) -> tuple[int, str] | None:
        """(status, reason) for a request to the upload path that must not be read; None: let it
        in (the session's cap is checked after, under the lock)."""
        if self._signin:
            who = auth.request_identity(
                auth.request_cookies(scope.get("headers", [])), self._secret
            )
            if who is None:
                return 401, "sign in to upload"
            if self._owner_of(session) != who:
                return 403, "this upload session is not yours"
        lengths = _headers(scope, b"content-length")
        if _headers(scope, b"transfer-encoding"):
            if lengths:
                return 400, "both Transfer-Encoding and Content-Length: the size is not known"
            return 411, "an upload needs a Content-Length, not Transfer-Encoding"
        if len(lengths) > 1:
            return 400, "more than one Content-Length"
        if not lengths:
            if scope.get("method") in UPLOADING:
                return 411, "an upload needs a Content-Length"
            return None
        raw = lengths[0].strip()
        if not raw.isdigit():
            return 400, "a Content-Length that is not a number"
        if int(raw) > file_cap() + MB:  # the multipart framing around the file
            return 413, f"larger than the upload limit of {file_cap() // MB} MB"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or UPLOAD_PATH not in path:
            await self.app(scope, receive, send)
            return
        session = path.split(UPLOAD_PATH, 1)[1].split("/", 1)[0]
        refused = self.refusal(scope, session)
        declared = 0
        if refused is None:
            lengths = _headers(scope, b"content-length")
            declared = int(lengths[0].strip()) if lengths else 0
            with self._lock:
                busy = self._in_flight.get(session, 0)
                if declared and busy + _held(session) + declared > session_cap():
                    refused = (429, f"this session holds uploads up to {session_cap() // MB} MB")
                else:
                    self._in_flight[session] = busy + declared
        if refused is not None:
            await _answer(send, *refused)
            return
        received = 0
        cut = False
        started = False

        async def counted() -> Message:
            nonlocal received, cut
            message = await receive()
            if message.get("type") == "http.request":
                received += len(message.get("body", b""))
                if received > declared:
                    cut = True
                    raise _Cut
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if cut:  # the guard answers instead
                return
            started = started or message.get("type") == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _Cut:
            pass
        finally:
            with self._lock:
                left = self._in_flight.get(session, 0) - declared
                if left > 0:
                    self._in_flight[session] = left
                else:
                    self._in_flight.pop(session, None)
        if cut and not started:
            await _answer(send, 400, "the body is longer than its Content-Length")


async def _answer(send: Send, status: int, reason: str) -> None:
    """A short plain-text answer that closes the connection (the body is never read)."""
    body = f"{reason}\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
