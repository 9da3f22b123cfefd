"""Issue 22, parts 2-4: nothing before sign-in, identity from sign-in only, and the low points.

* the upload guard (``gpuscope.web.upload_guard``), called as the ASGI middleware it is: an upload
  without a valid sign-in cookie, without a length, too large, or beyond the session's cap is
  answered before its body is read (the real server: tests/e2e/test_browser_signout.py);
* sign-out ends the session on the server: a cookie made before it (a copy) signs nobody in,
  whatever the clocks of the hosts say (issue 47, item 7: a nonce in gpuscope's seal, no time);
  chunks of different sign-ins are not one cookie (item 10); ``auth.SignInSeal`` sets the seal at
  sign-in and keeps cookies that do not hold from Streamlit;
* the guard refuses ``Transfer-Encoding`` with ``Content-Length``, counts the body as it arrives
  (item 8) and guards every method and session on the upload path (item 9); the same probes
  against two real hosts are in tests/test_security_two_hosts.py;
* who a CLI ingest credits (``$GPUSCOPE_UPLOADER``; ``--uploaded-by`` cannot claim another person
  unless ``$GPUSCOPE_ALLOW_UPLOADED_BY=1``), case-folded everywhere;
* ``gpuscope runs`` with control characters in a name, ``gpuscope ui --host`` odd forms.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from async_thread import run_in_thread
from gpuscope.cli.main import main as cli_main
from gpuscope.web import auth
from gpuscope.web.upload_guard import UploadGuard
from streamlit.web.server.starlette.starlette_app_utils import create_signed_value
from test_auth_cli import GOOD, write_config

REPO = Path(__file__).resolve().parent.parent
BEFORE = REPO / "sample_traces" / "before"
SECRET = str(GOOD["cookie_secret"])
ORIGIN = "http://127.0.0.1:8501"


@pytest.fixture(autouse=True)
def signouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Sign-outs are kept in a file of this test (never the user's own state folder)."""
    path = tmp_path / "state" / "signed-out.json"
    monkeypatch.setenv(auth.ENV_SIGNOUT_FILE, str(path))
    return path


def user_cookie(claims: dict[str, Any], secret: str = SECRET) -> dict[str, str]:
    """The cookies a sign-in sets for ``claims``: Streamlit's (its own signing function) and
    gpuscope's seal (what ``auth.SignInSeal`` adds at the provider's callback)."""
    value = json.dumps({"origin": ORIGIN, "is_logged_in": True, **claims})
    jar = {auth.USER_COOKIE: create_signed_value(secret, auth.USER_COOKIE, value).decode()}
    return {**jar, auth.SEAL_COOKIE: str(auth.make_seal(secret, value))}


def chunked_cookie(claims: dict[str, Any], parts: int = 2) -> dict[str, str]:
    """The same, split in ``parts`` chunks as Streamlit splits a large cookie."""
    value = json.dumps({"origin": ORIGIN, "is_logged_in": True, **claims})
    size = -(-len(value) // parts)
    jar = {auth.USER_COOKIE: f"chunks-{parts}"}
    for i in range(parts):
        jar[f"{auth.USER_COOKIE}_{i + 1}"] = value[i * size : (i + 1) * size]
    signed = {k: create_signed_value(SECRET, k, v).decode() for k, v in jar.items()}
    return {**signed, auth.SEAL_COOKIE: str(auth.make_seal(SECRET, value))}


# -- identity ---------------------------------------------------------------------------------------


def test_identities_are_case_folded_wherever_compared() -> None:
    assert auth.fold(" Carol@Example.COM ") == "carol@example.com"
    carol = auth.viewer_from_claims({"email": "carol@example.com"}, {"Carol@EXAMPLE.com"})
    assert carol.admin and carol.identity == "carol@example.com"
    dan = auth.viewer_from_claims({"email": "Dan@Example.com"}, set())
    # a run recorded before folding (mixed case) is still Dan's
    assert auth.may_change("DAN@example.COM", dan) == (True, "")
    assert not auth.may_change("dana@example.com", dan)[0]


# -- sign-out ends the session on the server ----------------------------------------------------------


def test_a_cookie_made_before_sign_out_signs_nobody_in(signouts: Path) -> None:
    alice = {"email": "Alice@Example.com", "sub": "a-1"}
    copied = user_cookie(alice)
    assert auth.request_identity(copied, SECRET) == "alice@example.com"
    before = chunked_cookie(alice)
    assert auth.request_identity(before, SECRET) == "alice@example.com"
    auth.record_sign_out("ALICE@example.com")
    assert json.loads(signouts.read_text()).keys() == {"alice@example.com"}
    assert auth.request_identity(copied, SECRET) is None  # the copy no longer works
    assert auth.request_identity(before, SECRET) is None  # nor a chunked one
    # a new sign-in (its seal made after the sign-out) works at once, in the same second
    assert auth.request_identity(user_cookie(alice), SECRET) == "alice@example.com"
    assert auth.request_identity(copied, SECRET) is None  # and does not revive the copy
    # another person's sign-out changes nothing for Bob
    assert auth.request_identity(user_cookie({"email": "bob@example.com"}), SECRET)


def test_forged_expired_or_signed_out_cookies_are_nobody() -> None:
    alice = {"email": "alice@example.com"}
    assert auth.request_identity({}, SECRET) is None
    assert auth.request_identity(user_cookie(alice, secret="x" * 64), SECRET) is None  # forged
    assert auth.request_identity({auth.USER_COOKIE: "not signed"}, SECRET) is None
    off = json.dumps({"origin": ORIGIN, "is_logged_in": False, "email": "alice@example.com"})
    signed_off = create_signed_value(SECRET, auth.USER_COOKIE, off).decode()
    assert auth.request_identity({auth.USER_COOKIE: signed_off}, SECRET) is None
    chunks = chunked_cookie(alice)
    del chunks[f"{auth.USER_COOKIE}_2"]
    assert auth.request_identity(chunks, SECRET) is None  # a chunk missing


def test_an_unreadable_sign_out_file_fails_closed(signouts: Path) -> None:
    before = user_cookie({"email": "alice@example.com"})
    for damaged in ("{not json", "[]", '{"alice@example.com": 1764000000.0}'):
        signouts.write_text(damaged)  # the last: the sign-out times an older gpuscope wrote
        assert auth.request_identity(before, SECRET) is None
    # the next sign-in starts the record afresh (everyone else signs in again)
    signouts.write_text("{not json")
    assert auth.request_identity(user_cookie({"email": "alice@example.com"}), SECRET)
    assert auth.request_identity(before, SECRET) is None


def test_sign_out_holds_whatever_the_clocks_of_the_hosts_say(
    signouts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47, item 7: host B's clock runs 90 s ahead of host A's, both share the record. Alice
    signs in on B (the copy is made there), then signs out on A: the copy must stop working on B.
    A time comparison let it through (signed "90 s later" than the sign-out)."""
    real = time.time
    alice = {"email": "alice@example.com", "sub": "a-1"}
    monkeypatch.setattr(time, "time", lambda: real() + 90)  # on host B
    copied = user_cookie(alice)
    assert auth.request_identity(copied, SECRET) == "alice@example.com"
    monkeypatch.setattr(time, "time", real)  # on host A: her sign-out
    auth.record_sign_out("alice@example.com")
    monkeypatch.setattr(time, "time", lambda: real() + 90)  # the copy, back on host B
    assert auth.request_identity(copied, SECRET) is None
    monkeypatch.setattr(time, "time", lambda: real() - 90)  # and on a host behind A
    assert auth.request_identity(user_cookie(alice), SECRET) == "alice@example.com"


def big_claims(who: str) -> dict[str, Any]:
    """Claims of over 4 KB (Streamlit splits such a cookie in chunks)."""
    return {"email": who, "sub": who, "groups": [f"{who}-group-{i:04d}" for i in range(200)]}


def test_chunks_of_another_sign_in_are_refused(signouts: Path) -> None:
    """Issue 47, item 10: a fresh head chunk (and seal) of Mallory's with Alice's chunks from
    before her sign-out signed in as Alice (only the head's time was compared). Chunks that do
    not belong together sign nobody in, signed out or not."""
    alice = chunked_cookie(big_claims("alice@example.com"), parts=3)
    assert auth.request_identity(alice, SECRET) == "alice@example.com"
    auth.record_sign_out("alice@example.com")
    mallory = chunked_cookie(big_claims("mallory@example.com"), parts=3)
    assert auth.request_identity(mallory, SECRET) == "mallory@example.com"
    spliced = {
        **mallory,
        **{k: v for k, v in alice.items() if k.startswith(auth.USER_COOKIE + "_")},
    }
    assert spliced[auth.USER_COOKIE] == mallory[auth.USER_COOKIE]  # her fresh head
    assert auth.request_identity(spliced, SECRET) is None
    # two sign-ins of one person that has not signed out: still not one cookie
    first, second = (chunked_cookie(big_claims("bob@example.com"), parts=3) for _ in range(2))
    second[f"{auth.USER_COOKIE}_2"] = chunked_cookie(
        {**big_claims("bob@example.com"), "name": "Bob"}, parts=3
    )[f"{auth.USER_COOKIE}_2"]
    assert auth.request_identity(first, SECRET) == "bob@example.com"
    assert auth.request_identity(second, SECRET) is None
    # Streamlit's cookie without a seal (made by anything but gpuscope's sign-in) is nobody
    unsealed = {k: v for k, v in first.items() if k != auth.SEAL_COOKIE}
    assert auth.request_identity(unsealed, SECRET) is None
    # a seal signed with another secret, or for another name, is nobody's
    forged = dict(first)
    forged[auth.SEAL_COOKIE] = create_signed_value(
        SECRET, auth.USER_COOKIE, forged[auth.SEAL_COOKIE]
    ).decode()
    assert auth.request_identity(forged, SECRET) is None


def asgi_call(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    """Call an ASGI app once with an empty body; the messages it sent."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(msg: dict) -> None:
        sent.append(msg)

    run_in_thread(app(scope, receive, send))
    return sent


def test_the_seal_is_set_at_sign_in_and_cookies_that_do_not_hold_never_reach_streamlit(
    signin: Path,
) -> None:
    """``auth.SignInSeal`` (in front of Streamlit): the provider's callback answer gets the seal
    beside Streamlit's cookie, with the same attributes; the sign-out answer deletes it; a page,
    websocket or upload request whose sign-in cookies sign nobody in reaches Streamlit without
    them (so ``st.user`` never holds a spliced or signed-out cookie's claims)."""
    value = json.dumps({"origin": ORIGIN, "is_logged_in": True, **big_claims("ana@example.com")})
    half = len(value) // 2
    made = {
        auth.USER_COOKIE: "chunks-2",
        f"{auth.USER_COOKIE}_1": value[:half],
        f"{auth.USER_COOKIE}_2": value[half:],
    }
    attrs = "HttpOnly; Max-Age=2592000; Path=/; SameSite=lax"
    set_cookies = [
        (b"set-cookie", f"{k}={create_signed_value(SECRET, k, v).decode()}; {attrs}".encode())
        for k, v in made.items()
    ]

    async def callback(scope: dict, receive: Any, send: Any) -> None:
        headers = [(b"location", b"/"), *(set_cookies if "oauth2" in scope["path"] else [])]
        if scope["path"].endswith("/auth/logout"):
            headers.append((b"set-cookie", f'{auth.USER_COOKIE}=""; Max-Age=0; Path=/'.encode()))
        await send({"type": "http.response.start", "status": 302, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    seal = auth.SignInSeal(callback)
    scope = {"type": "http", "method": "GET", "path": "/oauth2callback", "headers": []}
    start = asgi_call(seal, scope)[0]
    sealed = [v.decode() for k, v in start["headers"] if v.startswith(b"_gpuscope_signin=")]
    assert len(sealed) == 1 and sealed[0].endswith("; " + attrs)
    jar = {k: create_signed_value(SECRET, k, v).decode() for k, v in made.items()}
    jar[auth.SEAL_COOKIE] = sealed[0].split(";", 1)[0].split("=", 1)[1]
    assert auth.request_identity(jar, SECRET) == "ana@example.com"
    out = asgi_call(seal, {**scope, "path": "/auth/logout"})[0]["headers"]
    assert (b"set-cookie", b'_gpuscope_signin=""; Max-Age=0; Path=/') in out

    seen: list[dict[str, str]] = []

    async def streamlit(scope: dict, receive: Any, send: Any) -> None:
        seen.append(auth.request_cookies(scope["headers"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = auth.SignInSeal(streamlit)

    def through(cookies: dict[str, str], kind: str = "http") -> dict[str, str]:
        header = "; ".join(f"{k}={v}" for k, v in {**cookies, "_ga": "x"}.items())
        asgi_call(
            guard,
            {"type": kind, "path": "/_stcore/stream", "headers": [(b"cookie", header.encode())]},
        )
        return seen[-1]

    assert through(jar) == {**jar, "_ga": "x"}  # a good one passes whole
    assert through(jar, "websocket") == {**jar, "_ga": "x"}
    auth.record_sign_out("ana@example.com")
    assert through(jar) == {"_ga": "x"}  # signed out: Streamlit sees no sign-in at all
    assert through(jar, "websocket") == {"_ga": "x"}
    mallory = chunked_cookie(big_claims("mallory@example.com"))
    spliced = {**mallory, f"{auth.USER_COOKIE}_1": jar[f"{auth.USER_COOKIE}_1"]}
    assert through(spliced) == {"_ga": "x"}


def test_a_sign_in_whose_record_cannot_be_written_is_one_line(
    signin: Path, signouts: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The seal needs the record: where it cannot be written (here its folder is a file), the
    provider's callback is answered 503 with one line naming the record, not a traceback."""
    blocker = signouts.parent
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the record's folder should be")
    value = json.dumps({"origin": ORIGIN, "is_logged_in": True, "email": "ana@example.com"})
    cookie = create_signed_value(SECRET, auth.USER_COOKIE, value).decode()

    async def callback(scope: dict, receive: Any, send: Any) -> None:
        headers = [(b"set-cookie", f"{auth.USER_COOKIE}={cookie}; Path=/".encode())]
        await send({"type": "http.response.start", "status": 302, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    scope = {"type": "http", "method": "GET", "path": "/oauth2callback", "headers": []}
    sent = asgi_call(auth.SignInSeal(callback), scope)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 503
    assert not any(k == b"set-cookie" for k, _ in sent[0]["headers"])  # nobody signed in
    line = sent[1]["body"].decode()
    assert line.startswith(f"gpuscope: cannot sign in: the sign-in record {signouts} cannot be")
    assert line.count("\n") == 1 and "Traceback" not in caplog.text
    assert line.strip() in caplog.text


# -- the upload guard, as ASGI middleware ----------------------------------------------------------


class Inner:
    """Streamlit's side: records that the request got through (and reads its body)."""

    def __init__(self) -> None:
        self.calls = 0
        self.read = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        self.calls += 1
        while True:
            msg = await receive()
            self.read += len(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def put(
    guard: UploadGuard,
    *,
    size: int,
    cookies: dict[str, str] | None = None,
    session: str = "s1",
    method: str = "PUT",
    headers: list[tuple[bytes, bytes]] | None = None,
    body: list[bytes] | None = None,
) -> tuple[int, bytes, int]:
    """PUT an upload of ``size`` bytes (sent only if asked for); (status, body, bytes read).
    ``size`` < 0: no Content-Length; ``body``: the chunks sent instead of ``size`` bytes."""
    sent_headers = [(b"content-length", str(size).encode())] if size >= 0 else []
    sent_headers += headers or []
    if cookies:
        jar = "; ".join(f"{k}={v}" for k, v in cookies.items())
        sent_headers.append((b"cookie", jar.encode("latin-1")))
    scope = {
        "type": "http",
        "method": method,
        "path": f"/_stcore/upload_file/{session}/f1",
        "headers": sent_headers,
    }
    sent: list[dict] = []
    read = [0]
    chunks = list(body) if body is not None else [b"x" * max(size, 0)]

    async def receive() -> dict:
        chunk = chunks.pop(0) if chunks else b""
        read[0] += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(msg: dict) -> None:
        sent.append(msg)

    run_in_thread(guard(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body_out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), body_out, read[0]


def alices(session: str) -> str | None:
    """Who is signed in on a session, in these tests: Alice on s1 and s2, nobody elsewhere."""
    return "alice@example.com" if session in ("s1", "s2") else None


@pytest.fixture
def signin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = write_config(tmp_path / "auth.toml")
    monkeypatch.setenv("GPUSCOPE_AUTH_CONFIG", str(cfg))
    monkeypatch.setenv("GPUSCOPE_MAX_UPLOAD_MB", "4")
    monkeypatch.setenv("GPUSCOPE_MAX_SESSION_UPLOAD_MB", "6")
    return cfg


def test_the_guard_refuses_an_upload_without_sign_in_before_reading_it(signin: Path) -> None:
    inner = Inner()
    guard = UploadGuard(inner, owner_of=alices)
    status, body, read = put(guard, size=3 << 20)
    assert (status, body, read, inner.calls) == (401, b"sign in to upload\n", 0, 0)
    forged = user_cookie({"email": "alice@example.com"}, secret="y" * 64)
    assert put(guard, size=3 << 20, cookies=forged)[0] == 401 and inner.calls == 0
    # signed in: through to Streamlit
    alice = user_cookie({"email": "alice@example.com"})
    status, _, read = put(guard, size=3 << 20, cookies=alice)
    assert (status, read, inner.calls) == (204, 3 << 20, 1)
    # signed out since: the same cookie is refused again
    auth.record_sign_out("alice@example.com")
    assert put(guard, size=3 << 20, cookies=alice)[:2] == (401, b"sign in to upload\n")


def test_the_guard_caps_size_and_needs_a_length(signin: Path) -> None:
    inner = Inner()
    guard = UploadGuard(inner, owner_of=alices)
    alice = user_cookie({"email": "alice@example.com"})
    status, body, read = put(guard, size=6 << 20, cookies=alice)
    assert (status, read) == (413, 0) and b"4 MB" in body
    status, body, read = put(guard, size=-1, cookies=alice)  # no Content-Length (chunked)
    assert (status, read) == (411, 0)
    assert inner.calls == 0


def test_the_guard_caps_a_sessions_uploads_in_flight(signin: Path) -> None:
    """Two uploads of one session at once may not together pass the session's cap (6 MB)."""
    alice = user_cookie({"email": "alice@example.com"})
    results: list[int] = []

    class Slow(Inner):
        async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
            await asyncio.sleep(0.2)  # still receiving when the next upload starts
            await super().__call__(scope, receive, send)

    guard = UploadGuard(Slow(), owner_of=alices)

    async def both() -> None:
        async def one(session: str) -> None:
            scope = {
                "type": "http",
                "method": "PUT",
                "path": f"/_stcore/upload_file/{session}/f",
                "headers": [
                    (b"content-length", str(4 << 20).encode()),
                    (b"cookie", "; ".join(f"{k}={v}" for k, v in alice.items()).encode()),
                ],
            }

            async def receive() -> dict:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(msg: dict) -> None:
                if msg["type"] == "http.response.start":
                    results.append(int(msg["status"]))

            await guard(scope, receive, send)

        await asyncio.gather(one("s1"), one("s1"), one("s2"))

    run_in_thread(both())
    assert sorted(results) == [204, 204, 429]  # s1's second is refused, s2 is its own session
    assert guard._in_flight == {}  # nothing left counted once they ended


def test_without_sign_in_the_guard_only_caps() -> None:
    inner = Inner()
    guard = UploadGuard(inner, owner_of=alices)
    assert put(guard, size=1000)[0] == 204 and inner.calls == 1


CHUNKED = [(b"transfer-encoding", b"chunked")]


def test_the_guard_refuses_transfer_encoding_with_a_length_before_reading(signin: Path) -> None:
    """Issue 47, item 8: ``Transfer-Encoding: chunked`` with ``Content-Length: 10`` passed the
    411 rule and the session's cap (the server frames such a body by its chunks: 200 MB came in
    under a declared 10 bytes). Refused 400 before the body is read; chunked alone is 411."""
    inner = Inner()
    guard = UploadGuard(inner, owner_of=alices)
    alice = user_cookie({"email": "alice@example.com"})
    big = [b"x" * (1 << 20)] * 5  # 5 MB: past the session's 6 MB cap with the next one
    for _ in range(4):  # the probe sent four
        status, body, read = put(guard, size=10, cookies=alice, headers=CHUNKED, body=list(big))
        assert (status, read) == (400, 0), body
        assert b"Transfer-Encoding and Content-Length" in body
    status, _, read = put(guard, size=-1, cookies=alice, headers=CHUNKED, body=list(big))
    assert (status, read) == (411, 0)
    # with another spelling or a second length, the same
    upper = [(b"Transfer-Encoding", b"gzip, chunked")]
    assert put(guard, size=10, cookies=alice, headers=upper, body=list(big))[:3:2] == (400, 0)
    twice = [(b"content-length", b"10")]
    assert put(guard, size=10, cookies=alice, headers=twice, body=[b"x" * 10])[:3:2] == (400, 0)
    assert inner.calls == 0 and guard._in_flight == {}


def test_the_guard_counts_the_body_as_it_arrives(signin: Path) -> None:
    """A body that outgrows its Content-Length is cut where it passes it, answered 400, and what
    the session holds in flight never passes what was declared and checked against the cap."""
    from starlette.requests import Request

    got: list[int] = []

    async def streamlit(scope: dict, receive: Any, send: Any) -> None:
        got.append(len(await Request(scope, receive).body()))  # how Streamlit reads it
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = UploadGuard(streamlit, owner_of=alices)
    alice = user_cookie({"email": "alice@example.com"})
    chunks = [b"x" * (1 << 20)] * 4
    status, body, read = put(guard, size=10, cookies=alice, body=list(chunks))
    assert (status, body, read) == (400, b"the body is longer than its Content-Length\n", 1 << 20)
    assert got == [] and guard._in_flight == {}
    assert put(guard, size=4 << 20, cookies=alice, body=list(chunks))[0] == 204
    assert got == [4 << 20]
    # a DELETE declares nothing: a body sent with it is cut at its first byte
    status, _, read = put(guard, size=-1, cookies=alice, method="DELETE", body=[b"x" * 100])
    assert (status, read) == (400, 100)


def test_the_guard_guards_every_method(signin: Path) -> None:
    """Issue 47, item 9: an anonymous ``DELETE /_stcore/upload_file/<sid>/<fid>`` removed another
    session's upload (the guard looked at PUT only). Every method on the upload path passes the
    guard: nobody signed in is refused, and so is anyone on a session that is not theirs."""
    inner = Inner()
    guard = UploadGuard(inner, owner_of=alices)
    alice = user_cookie({"email": "alice@example.com"})
    mallory = user_cookie({"email": "mallory@example.com"})
    for method in ("DELETE", "POST", "PATCH", "GET", "OPTIONS"):
        size = 10 if method in ("POST", "PATCH") else -1
        assert put(guard, size=size, method=method)[:2] == (401, b"sign in to upload\n")
        status, body, _ = put(guard, size=size, cookies=mallory, method=method)
        assert (status, body) == (403, b"this upload session is not yours\n"), method
    # a session nobody is signed in on (or none at all) is nobody's to change
    assert put(guard, size=-1, cookies=alice, method="DELETE", session="s9")[0] == 403
    assert put(guard, size=10, cookies=mallory, session="s1")[0] == 403  # an upload into hers
    assert inner.calls == 0
    assert put(guard, size=-1, cookies=alice, method="DELETE")[0] == 204  # her own
    assert inner.calls == 1


# -- who a CLI ingest credits --------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_a_cli_ingest_credits_the_nodes_identity_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store"
    monkeypatch.delenv("GPUSCOPE_UPLOADER", raising=False)
    monkeypatch.delenv("GPUSCOPE_ALLOW_UPLOADED_BY", raising=False)
    code, out, err = run_cli(capsys, "ingest", BEFORE, "--db", db, "--uploaded-by", "alice@x.org")
    assert code == 2 and out == ""
    assert err.startswith("gpuscope: --uploaded-by alice@x.org: a run is credited to the ")
    assert "$GPUSCOPE_UPLOADER is unset" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("GPUSCOPE_UPLOADER", "Ingest@Node17.example.com")
    code, _, err = run_cli(capsys, "ingest", BEFORE, "--db", db, "--uploaded-by", "alice@x.org")
    assert code == 2 and "this node's identity is ingest@node17.example.com" in err
    code, out, err = run_cli(capsys, "ingest", BEFORE, "--db", db, "--json")
    assert code == 0, err
    assert json.loads(out)[0]["uploaded_by"] == "ingest@node17.example.com"
    monkeypatch.setenv("GPUSCOPE_ALLOW_UPLOADED_BY", "1")  # an admin's import
    code, out, err = run_cli(
        capsys,
        "ingest",
        REPO / "sample_traces" / "after",
        "--db",
        db,
        "--uploaded-by",
        "Alice@X.org",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)[0]["uploaded_by"] == "alice@x.org"


# -- the low points -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_control_characters_in_a_name_cannot_forge_rows_in_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store"
    forged = "real\nffffffffffff  forged-run                        trace     1        1  -"
    code, out, err = run_cli(capsys, "ingest", BEFORE, "--db", db, "--name", forged)
    assert code == 0, err
    code, out, err = run_cli(capsys, "runs", "--db", db)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2, out  # the header and one run
    assert lines[1].split()[1].startswith("real\\nffffffffffff")  # the name, escaped, in its cell
    assert not any(ln.startswith("ffffffffffff") for ln in lines)
    for name in ("tab\there", "cr\rhere", "bidi\u202eereh"):
        assert run_cli(capsys, "runs", "--db", db, "--rename", lines[1][:12], name)[0] == 0
        (row,) = run_cli(capsys, "runs", "--db", db)[1].splitlines()[1:]
        assert "\t" not in row and "\r" not in row and "\u202e" not in row
        assert ("\\t" in row) or ("\\r" in row) or ("\\u202e" in row)


@pytest.mark.parametrize(
    ("host", "answer"),
    [
        ("[::1]", None),
        ("127.0.0.1 ", None),
        ("  localhost", None),
        ("[not-ip]", "--host '[not-ip]': brackets hold an IPv6 address, e.g. [::1]"),
        ("127.0.0.1 evil", "--host '127.0.0.1 evil': not an IP address or a host name"),
        ("a/b", "--host a/b: not an IP address or a host name"),
    ],
)
def test_odd_host_forms_are_one_line(
    host: str,
    answer: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """``gpuscope ui --host '[::1]'`` or ``'127.0.0.1 '`` ended in a traceback: now a form that
    binds is bound cleaned (and said so in the start line), any other is one line, exit 2."""
    from gpuscope.cli import ui

    execs: list[list[str]] = []
    monkeypatch.setattr(ui.os, "execve", lambda _p, argv, _e: execs.append(argv))
    code, _, err = run_cli(capsys, "ui", "--host", host, "--headless", "--db", tmp_path / "s")
    if answer is None:
        assert code == 0 and len(execs) == 1, err
        bound = execs[0][execs[0].index("--server.address") + 1]
        assert bound == host.strip().strip("[]")
        shown = "[::1]" if bound == "::1" else "localhost" if bound != "localhost" else bound
        assert err.startswith(f"gpuscope: dashboard on http://{shown}:8501"), err
    else:
        assert (code, err) == (2, f"gpuscope: {answer}\n") and not execs


@pytest.mark.slow
def test_ipv6_loopback_really_serves(tmp_path: Path) -> None:
    """``--host '[::1]'`` starts a server that answers on [::1] (where the machine has IPv6)."""
    import socket
    import subprocess
    import urllib.request

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
            port = s.getsockname()[1]
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscope",
            "ui",
            "--host",
            "[::1]",
            "--port",
            str(port),
            "--headless",
            "--db",
            str(tmp_path / "s"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        ok = False
        while time.monotonic() < deadline and proc.poll() is None and not ok:
            try:
                with urllib.request.urlopen(f"http://[::1]:{port}/_stcore/health", timeout=2) as r:
                    ok = r.read().strip() == b"ok"
            except OSError:
                time.sleep(0.3)
        assert ok, proc.stderr.read() if proc.poll() is not None and proc.stderr else "no answer"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_sign_in_config_broken_since_start_refuses_every_upload(
    signin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signin.write_text("not toml [")
    guard = UploadGuard(Inner())
    assert put(guard, size=10, cookies=user_cookie({"email": "alice@example.com"}))[0] == 401
