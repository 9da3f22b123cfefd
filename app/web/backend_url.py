"""Deep links without 404s: the page tells Streamlit's client where the server is.

Streamlit's client does not know which part of the address is the server's and which is a page's
``url_path``. Opened at ``/runs?run=…`` it probes every prefix of the path (``/runs/_stcore/health``,
``/runs/_stcore/host-config``, then ``/_stcore/…``): two requests that end in 404 on every deep
link. The client takes the server's address from ``window.__streamlit.BACKEND_BASE_URL`` when the
page sets it before the client's bundle loads. This ASGI middleware, in front of ``st.App`` (see
``asgi.py``), puts that one line into the HTML page: the page's origin plus Streamlit's
``server.baseUrlPath`` (empty by default); the page is asked of Streamlit uncompressed (the
browser asks for gzip) so that it can be rewritten. Everything else passes through untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gpuscope.web import html_safe

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEAD = b"<head>"


def base_url_path() -> str:
    """Streamlit's ``server.baseUrlPath``, as ``/path`` (``""`` when served at the root)."""
    from streamlit import config

    path = str(config.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{path}" if path else ""


def snippet(base: str) -> bytes:
    """The line that tells the client its server: ``location.origin`` + ``base`` (written as
    script-safe JSON: a base path holding ``</script>`` stays a string)."""
    return (
        b"<script>window.__streamlit=Object.assign({},window.__streamlit,"
        b"{BACKEND_BASE_URL:window.location.origin+"
        + html_safe.script_json(base).encode()
        + b"});</script>"
    )


def inject(html: bytes, base: str) -> bytes:
    """``html`` with :func:`snippet` right after ``<head>`` (unchanged without one, or when the
    page already sets ``window.__streamlit``)."""
    if b"window.__streamlit=" in html:
        return html
    i = html.find(HEAD)
    if i < 0:
        return html
    i += len(HEAD)
    return html[:i] + snippet(base) + html[i:]


def _is_page_request(scope: Scope) -> bool:
    path = str(scope.get("path", ""))
    return (
        scope["type"] == "http"
        and scope.get("method") == "GET"
        and "/_stcore/" not in path
        and "/static/" not in path
        and "/media/" not in path
        and "/component/" not in path
    )


class BackendBaseUrl:
    """ASGI middleware: adds :func:`snippet` to the HTML page Streamlit serves for any page path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_page_request(scope):
            await self.app(scope, receive, send)
            return
        # the page uncompressed (8 KB), so that it can be rewritten: the browser asks for gzip
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"accept-encoding"]
        scope = {**scope, "headers": headers}
        start: Message | None = None
        body: list[bytes] = []

        async def hold(message: Message) -> None:
            nonlocal start
            if start is None and message["type"] == "http.response.start":
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                html = headers.get(b"content-type", b"").startswith(b"text/html")
                if not html or b"content-encoding" in headers:
                    start = {}  # not a plain HTML page: pass through
                    await send(message)
                    return
                start = message
                return
            if not start:  # passing through
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            page = inject(b"".join(body), base_url_path())
            out = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            out.append((b"content-length", str(len(page)).encode()))
            await send({**start, "headers": out})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, hold)
