"""The page's server address (app/web/backend_url.py): the snippet goes right after <head>, once,
with the base path; a non-HTML or compressed response passes through unchanged."""

from __future__ import annotations

from typing import Any

from async_thread import run_in_thread
from gpuscope.web.backend_url import BackendBaseUrl, inject, snippet

PAGE = b"<!DOCTYPE html><html><head><title>x</title></head><body></body></html>"


def test_inject_puts_the_address_first_in_head_once() -> None:
    out = inject(PAGE, "")
    assert out.startswith(b"<!DOCTYPE html><html><head><script>window.__streamlit=")
    assert b'BACKEND_BASE_URL:window.location.origin+""' in out
    assert inject(out, "") == out  # already there: unchanged
    assert b'origin+"/team"' in inject(PAGE, "/team")
    assert inject(b"no head here", "") == b"no head here"


def _serve(body: bytes, content_type: bytes, path: str = "/runs", extra=()) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    sent: list[dict[str, Any]] = []

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers + list(extra)})
        half = len(body) // 2
        await send({"type": "http.response.body", "body": body[:half], "more_body": True})
        await send({"type": "http.response.body", "body": body[half:]})

    async def send(message) -> None:  # type: ignore[no-untyped-def]
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    run_in_thread(BackendBaseUrl(app)(scope, receive, send))
    return sent


def test_the_middleware_rewrites_html_pages_and_their_length() -> None:
    sent = _serve(PAGE, b"text/html; charset=utf-8")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert snippet("") in body and body == inject(PAGE, "")
    length = dict(sent[0]["headers"])[b"content-length"]
    assert int(length) == len(body)


def test_everything_else_passes_through() -> None:
    for args in (
        (b'{"a": 1}', b"application/json"),
        (PAGE, b"text/html", "/_stcore/health"),
        (PAGE, b"text/html", "/static/js/index.js"),
        (PAGE, b"text/html", "/runs", [(b"content-encoding", b"gzip")]),
    ):
        sent = _serve(*args)  # type: ignore[arg-type]
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        assert body == args[0]
