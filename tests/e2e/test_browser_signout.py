"""Issue 22 against a real `gpuscope ui --auth-config` server (and, for sign-out, a real OIDC
provider and Debian's chromium):

* the cookie-less upload replayed: a websocket session, a self-made XSRF cookie and header (double
  submit), ``PUT /_stcore/upload_file/<session>/<file>`` of 96 MB: refused (401) before the body
  is read, and the server's memory does not grow by the file; the same upload with a sign-in
  cookie goes through (so the replay itself is sound);
* a copied sign-in cookie used after its owner signed out: the pages show the sign-in page and
  the upload endpoint refuses it.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import secrets
import select
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import free_port, stop_server, ui_server, wait_idle
from test_browser_login import ALICE, _sign_in, provider  # noqa: F401 (provider: a fixture)

FILE_MB = 96
COOKIE = "_streamlit_user"


@dataclass
class Guarded:
    url: str
    port: int
    log: Path
    pid: int
    cookie_secret: str
    signouts: Path


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, provider: str) -> Iterator[Guarded]:  # noqa: F811
    work = tmp_path_factory.mktemp("guarded")
    port = free_port()
    secret = secrets.token_hex(32)
    config = work / "auth.toml"
    config.write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        f'cookie_secret = "{secret}"\n'
        'client_id = "gpuscope-e2e"\n'
        f'client_secret = "{secrets.token_hex(16)}"\n'
        f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n'
    )
    signouts = work / "signed-out.json"
    env = {**os.environ, "GPUSCOPE_SIGNOUT_FILE": str(signouts)}
    db = work / "store"
    server = ui_server(work, ["--db", str(db), "--auth-config", str(config)], env, port=port)
    yield Guarded(server.url, port, server.log, server.proc.pid, secret, signouts)
    stop_server(server)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def settled_rss_mb(pid: int, quiet_s: float = 1.5, timeout_s: float = 60.0) -> float:
    """The server's RSS (MB) once it has moved by under 1 MB for ``quiet_s``: a session's script
    run (a signed-in one imports the store and pandas) goes on after its upload has answered."""
    readings: list[tuple[float, float]] = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        now = time.monotonic()
        readings = [(t, r) for t, r in readings if now - t <= quiet_s] + [(now, rss_mb(pid))]
        values = [r for _, r in readings]
        if now - readings[0][0] >= quiet_s * 0.9 and max(values) - min(values) < 1:
            return values[-1]
        time.sleep(0.1)
    raise AssertionError(f"the server's RSS did not settle in {timeout_s:.0f} s: {values}")


def upload_in_session(
    port: int, cookies: str, size_mb: int, headers_only_s: float = 0.0
) -> tuple[int, str]:
    """Open a websocket session (as any client can), then replay an upload to it while it is
    open; the upload's (status, body) (``headers_only_s``: see :func:`replay_upload`). In a
    thread of its own: Playwright's sync API keeps an event loop running in this one."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(
            asyncio.run, _in_session(port, cookies, size_mb, headers_only_s)
        ).result()


async def _in_session(
    port: int, cookies: str, size_mb: int, headers_only_s: float
) -> tuple[int, str]:
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.web.server.starlette.starlette_app_utils import generate_xsrf_token_string

    xsrf = generate_xsrf_token_string()  # as the browser opens it: the session is the cookie's
    jar = f"_streamlit_xsrf={xsrf}" + (f"; {cookies}" if cookies else "")
    async with websockets.connect(
        f"ws://127.0.0.1:{port}/_stcore/stream",
        subprotocols=["streamlit", xsrf],  # type: ignore[list-item]
        origin=f"http://127.0.0.1:{port}",  # type: ignore[arg-type]
        additional_headers={"Cookie": jar},
        max_size=None,
        open_timeout=60,
    ) as ws:
        msg = BackMsg()
        msg.rerun_script.page_name = "runs"
        await ws.send(msg.SerializeToString())
        while True:
            raw = await asyncio.wait_for(ws.recv(), 60)
            fwd = ForwardMsg()
            fwd.ParseFromString(raw if isinstance(raw, bytes) else raw.encode())
            if fwd.WhichOneof("type") == "new_session":
                sid = str(fwd.new_session.initialize.session_id)
                break
        # the upload goes to the session while its websocket is open
        answer = await asyncio.to_thread(replay_upload, port, sid, cookies, size_mb, headers_only_s)
        # the session's own page run (a signed-in one opens the store and fills its caches)
        # ends before the answer is returned, so that a memory reading after it is the upload's
        while True:
            raw = await asyncio.wait_for(ws.recv(), 60)
            fwd = ForwardMsg()
            fwd.ParseFromString(raw if isinstance(raw, bytes) else raw.encode())
            if fwd.WhichOneof("type") == "script_finished" and fwd.script_finished in (
                ForwardMsg.FINISHED_SUCCESSFULLY,
                ForwardMsg.FINISHED_WITH_COMPILE_ERROR,
            ):
                return answer


def replay_upload(
    port: int, session: str, cookies: str, size_mb: int, headers_only_s: float = 0.0
) -> tuple[int, str]:
    """PUT a multipart upload of ``size_mb`` MB with a self-made XSRF double submit; (status,
    body). The body is streamed: a server that answers early may close before it is sent.
    ``headers_only_s`` > 0: send the headers alone and wait that long for the answer, sending
    no body byte; no answer by then is ``(0, "no answer ...")`` (a refusal on the headers arrives
    with nothing sent to race it: body bytes reaching a socket the server has closed draw a
    reset that can drop its answer)."""
    from streamlit.web.server.starlette.starlette_app_utils import generate_xsrf_token_string

    xsrf = generate_xsrf_token_string()
    boundary = "gpuscope" + secrets.token_hex(8)
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="t.json"\r\n'
        "Content-Type: application/json\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = size_mb << 20
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.putrequest("PUT", f"/_stcore/upload_file/{session}/{secrets.token_hex(8)}")
    conn.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    conn.putheader("Content-Length", str(len(head) + size + len(tail)))
    conn.putheader("X-Xsrftoken", xsrf)
    jar = f"_streamlit_xsrf={xsrf}" + (f"; {cookies}" if cookies else "")
    conn.putheader("Cookie", jar)
    conn.endheaders()
    chunk = b"x" * (1 << 20)
    if (
        headers_only_s > 0
        and conn.sock is not None
        and not select.select([conn.sock], [], [], headers_only_s)[0]
    ):
        conn.close()  # the server waits for the body: it would read it before answering
        return 0, f"no answer within {headers_only_s:g} s of the headers"
    try:
        if conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
            raise ConnectionAbortedError  # answered on the headers: no body byte is sent
        conn.send(head)
        for _ in range(size_mb):
            # as a browser does: a server that answers early is read at once, and nothing more
            # is sent (more bytes to a closed socket draw a reset that can drop the answer)
            if conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
                break
            conn.send(chunk)
        else:
            conn.send(tail)
    except OSError:  # the server answered and closed without reading the body
        pass
    try:
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def signed_cookie(secret: str, claims: dict[str, object], port: int, record: Path) -> str:
    """The cookies a sign-in of ``claims`` sets: Streamlit's and gpuscope's seal (its nonce in
    the server's sign-out ``record``)."""
    from gpuscope.web.auth import SEAL_COOKIE, make_seal
    from streamlit.web.server.starlette.starlette_app_utils import create_signed_value

    value = json.dumps({"origin": f"http://127.0.0.1:{port}", "is_logged_in": True, **claims})
    seal = make_seal(secret, value, record)
    return f"{COOKIE}={create_signed_value(secret, COOKIE, value).decode()}; {SEAL_COOKIE}={seal}"


@pytest.mark.slow
def test_a_cookie_less_upload_is_refused_and_costs_no_memory(guarded: Guarded) -> None:
    port = guarded.port
    # a refusal must come on the headers: no body byte is sent (a guard that waited for the body
    # before refusing gets no answer: status 0)
    assert upload_in_session(port, "", 1, headers_only_s=60)[0] == 401  # warm-up: imports
    before = settled_rss_mb(guarded.pid)
    status, body = upload_in_session(port, "", FILE_MB, headers_only_s=60)
    after = settled_rss_mb(guarded.pid)
    assert (status, body.strip()) == (401, "sign in to upload")
    # a session's own cost is ~12 MB here; without the guard the server grows by >100 MB
    assert after - before < FILE_MB / 2, (before, after)
    # the same replay with a sign-in cookie is accepted: the refusal above is the guard's
    cookie = signed_cookie(
        guarded.cookie_secret, {"email": "ana@example.com"}, port, guarded.signouts
    )
    assert upload_in_session(port, cookie, 1)[0] == 204
    # beyond the file cap (256 MB by default): refused on its Content-Length, nothing read;
    # measured once a signed-in session's page (the store opened, its caches filled) has settled
    assert upload_in_session(port, cookie, 1)[0] == 204
    before = settled_rss_mb(guarded.pid)
    # the answer must come on the headers alone: no body byte is sent for 60 s
    status, _ = upload_in_session(port, cookie, 300, headers_only_s=60)
    assert status == 413 and settled_rss_mb(guarded.pid) - before < FILE_MB / 2


@pytest.mark.browser
def test_a_copied_cookie_stops_working_at_sign_out(
    guarded: Guarded,
    provider: str,  # noqa: F811
    new_page,  # type: ignore[no-untyped-def]
) -> None:
    alice = new_page()
    _sign_in(alice, guarded, provider, ALICE["sub"])  # type: ignore[arg-type]
    alice.get_by_text("Signed in as").wait_for()
    copied = [c for c in alice.context.cookies() if c["name"].startswith((COOKIE, "_gpuscope"))]
    assert copied, "no sign-in cookie to copy"
    jar = "; ".join(f"{c['name']}={c['value']}" for c in copied)
    assert upload_in_session(guarded.port, jar, 1)[0] == 204  # the copy works while she is in
    nonce = json.loads(guarded.signouts.read_text())[ALICE["email"]]  # her sign-ins' (the seal's)

    alice.get_by_role("button", name="Sign out").click()
    alice.wait_for_url(re.compile(re.escape(provider) + r"/oauth2/end_session"))
    alice.get_by_role("button", name="End session").click()
    assert json.loads(guarded.signouts.read_text())[ALICE["email"]] != nonce  # replaced

    # the copy, in another browser: the sign-in page, nothing of the store
    thief = new_page()
    thief.context.add_cookies(copied)
    thief.goto(f"{guarded.url}/runs")
    wait_idle(thief)
    thief.get_by_role("button", name="Sign in").wait_for()
    app = thief.locator('[data-testid="stApp"]').inner_text()
    assert "Signed in as" not in app and "Upload traces" not in app
    # and at the upload endpoint
    assert upload_in_session(guarded.port, jar, 1, headers_only_s=60) == (
        401,
        "sign in to upload\n",
    )
