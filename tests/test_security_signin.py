"""Issue 22, parts 2-4: nothing before sign-in, identity from sign-in only, and the low points.

* the upload guard (``gpuscope.web.upload_guard``), called as the ASGI middleware it is: an upload
  without a valid sign-in cookie, without a length, too large, or beyond the session's cap is
  answered before its body is read (the real server is replayed in tests/e2e/test_upload_guard.py);
* sign-out ends the session on the server: a cookie made before it (a copy) signs nobody in;
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
    """The cookies Streamlit sets at sign-in (its own signing function), for ``claims``."""
    value = json.dumps({"origin": ORIGIN, "is_logged_in": True, **claims})
    return {auth.USER_COOKIE: create_signed_value(secret, auth.USER_COOKIE, value).decode()}


def chunked_cookie(claims: dict[str, Any]) -> dict[str, str]:
    """The same, split in chunks as Streamlit splits a large cookie."""
    value = json.dumps({"origin": ORIGIN, "is_logged_in": True, **claims})
    half = len(value) // 2
    parts = {auth.USER_COOKIE: "chunks-2"}
    parts[f"{auth.USER_COOKIE}_1"] = value[:half]
    parts[f"{auth.USER_COOKIE}_2"] = value[half:]
    return {k: create_signed_value(SECRET, k, v).decode() for k, v in parts.items()}


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


@pytest.mark.slow
def test_a_cookie_made_before_sign_out_signs_nobody_in(signouts: Path) -> None:
    alice = {"email": "Alice@Example.com", "sub": "a-1"}
    copied = user_cookie(alice)
    assert auth.request_identity(copied, SECRET) == "alice@example.com"
    assert auth.request_identity(chunked_cookie(alice), SECRET) == "alice@example.com"
    auth.record_sign_out("ALICE@example.com")
    assert json.loads(signouts.read_text()).keys() == {"alice@example.com"}
    assert auth.request_identity(copied, SECRET) is None  # the copy no longer works
    assert auth.request_identity(chunked_cookie(alice), SECRET) is None  # nor one of this second
    time.sleep(1.1)  # a new sign-in (a cookie signed after the sign-out) works again
    assert auth.request_identity(user_cookie(alice), SECRET) == "alice@example.com"
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
    signouts.parent.mkdir(parents=True)
    signouts.write_text("{not json")
    assert auth.request_identity(user_cookie({"email": "alice@example.com"}), SECRET) is None


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
    guard: UploadGuard, *, size: int, cookies: dict[str, str] | None = None, session: str = "s1"
) -> tuple[int, bytes, int]:
    """PUT an upload of ``size`` bytes (sent only if asked for); (status, body, bytes read)."""
    headers = [(b"content-length", str(size).encode())] if size >= 0 else []
    if cookies:
        jar = "; ".join(f"{k}={v}" for k, v in cookies.items())
        headers.append((b"cookie", jar.encode("latin-1")))
    scope = {
        "type": "http",
        "method": "PUT",
        "path": f"/_stcore/upload_file/{session}/f1",
        "headers": headers,
    }
    sent: list[dict] = []
    read = [0]

    async def receive() -> dict:
        read[0] += max(size, 0)
        return {"type": "http.request", "body": b"x" * max(size, 0), "more_body": False}

    async def send(msg: dict) -> None:
        sent.append(msg)

    run_in_thread(guard(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), body, read[0]


@pytest.fixture
def signin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = write_config(tmp_path / "auth.toml")
    monkeypatch.setenv("GPUSCOPE_AUTH_CONFIG", str(cfg))
    monkeypatch.setenv("GPUSCOPE_MAX_UPLOAD_MB", "4")
    monkeypatch.setenv("GPUSCOPE_MAX_SESSION_UPLOAD_MB", "6")
    return cfg


def test_the_guard_refuses_an_upload_without_sign_in_before_reading_it(signin: Path) -> None:
    inner = Inner()
    guard = UploadGuard(inner)
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
    guard = UploadGuard(inner)
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

    guard = UploadGuard(Slow())

    async def both() -> None:
        async def one(session: str) -> None:
            scope = {
                "type": "http",
                "method": "PUT",
                "path": f"/_stcore/upload_file/{session}/f",
                "headers": [
                    (b"content-length", str(4 << 20).encode()),
                    (b"cookie", f"{auth.USER_COOKIE}={alice[auth.USER_COOKIE]}".encode()),
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
    guard = UploadGuard(inner)
    assert put(guard, size=1000)[0] == 204 and inner.calls == 1


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
