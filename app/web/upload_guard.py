"""The upload guard: ASGI middleware in front of Streamlit that refuses an upload before its body
is read, unless the request may make one.

Streamlit takes uploads at ``PUT /_stcore/upload_file/<session>/<file>`` from any client that has
a websocket session and sends the XSRF cookie with a matching header (both of which a client can
make up), and holds each file in memory. With sign-in on, this guard answers such a request with
``401`` unless it carries a valid sign-in cookie (Streamlit's signed ``_streamlit_user``, signed
with the deployer's ``cookie_secret``, of a person who has not signed out since: see
``auth.request_identity``). With or without sign-in it refuses, still before reading the body:

* an upload without ``Content-Length`` (``411``): its size cannot be checked before it arrives;
* an upload larger than ``server.maxUploadSize`` (``413``; ``gpuscope ui --max-upload-mb``);
* an upload that would take the session's files held and in flight beyond
  ``$GPUSCOPE_MAX_SESSION_UPLOAD_MB`` (default: 2x the file cap) (``429``).

``gpuscope ui`` serves ``asgi.py``, which wraps ``main.py`` in ``st.App`` with this middleware.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
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


def _cookies(scope: Scope) -> dict[str, str]:
    jar: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        if name.lower() != b"cookie":
            continue
        parsed: SimpleCookie = SimpleCookie()
        try:
            parsed.load(value.decode("latin-1"))
        except CookieError:
            continue
        jar.update({k: m.value for k, m in parsed.items()})
    return jar


def _header(scope: Scope, key: bytes) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == key:
            return str(value.decode("latin-1"))
    return None


def _held(session: str) -> int:
    """Bytes of files Streamlit holds for ``session`` (uploaded, not yet removed)."""
    try:
        from streamlit.runtime import Runtime

        mgr = Runtime.instance().uploaded_file_mgr
        storage = getattr(mgr, "file_storage", {})
        return sum(len(f.data) for f in dict(storage.get(session, {})).values())
    except (RuntimeError, AttributeError):  # no runtime yet, or another file manager
        return 0


class UploadGuard:
    """ASGI middleware: see the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
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

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """(status, reason) for an upload request that must not be read; None: let it in."""
        if self._signin and auth.request_identity(_cookies(scope), self._secret) is None:
            return 401, "sign in to upload"
        raw = _header(scope, b"content-length")
        if raw is None or not raw.strip().isdigit():
            return 411, "an upload needs a Content-Length"
        size = int(raw)
        if size > file_cap() + MB:  # the multipart framing around the file
            return 413, f"larger than the upload limit of {file_cap() // MB} MB"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or scope.get("method") != "PUT" or UPLOAD_PATH not in path:
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        session = path.split(UPLOAD_PATH, 1)[1].split("/", 1)[0]
        size = int(_header(scope, b"content-length") or 0)
        if refused is None:
            with self._lock:
                busy = self._in_flight.get(session, 0)
                if busy + _held(session) + size > session_cap():
                    refused = (429, f"this session holds uploads up to {session_cap() // MB} MB")
                else:
                    self._in_flight[session] = busy + size
        if refused is not None:
            await _answer(send, *refused)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            with self._lock:
                left = self._in_flight.get(session, 0) - size
                if left > 0:
                    self._in_flight[session] = left
                else:
                    self._in_flight.pop(session, None)


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
