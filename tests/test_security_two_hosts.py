"""Issue 47, items 7-10, against real servers: two `gpuscope ui --auth-config` hosts on one team
store (PostgreSQL and S3 through moto, tests/team_servers.py) sharing one sign-out record, the
OIDC mock (`oidc-provider-mock`) as the provider, and hand-made clients (the probe's payloads):

* 7: host B's clock runs 90 s ahead (every Python clock read of its processes, through a
  ``sitecustomize`` on its ``PYTHONPATH``). Alice signs in on B (the cookie is copied there), signs
  in on A and clicks *Sign out* there: the copy must show the sign-in page on B and be refused an
  upload. A time comparison let it through (it was signed "90 s after" the sign-out);
* 8: signed in, ``Transfer-Encoding: chunked`` with ``Content-Length: 10``, four times: refused
  before the body is read, the server's memory does not grow by the files;
* 9: an anonymous ``DELETE /_stcore/upload_file/<sid>/<fid>`` (and one by another signed-in person)
  of Alice's upload is refused and the file stays held (the session's cap still counts it);
* 10: Mabel's fresh sign-in cookies with Alice's chunks from before her sign-out (claims over
  4 KB, so Streamlit splits the cookie) sign nobody in: the pages and the upload endpoint refuse.

The sign-in is the browser's, made by hand: ``/auth/login`` with the provider token the page's
*Sign in* button would carry, the provider's form, the callback; the pages are Streamlit's
websocket protocol (a session with its XSRF double submit and Origin, as the browser opens it),
and *Sign out* is a click on that button through it.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from async_thread import run_in_thread
from team_servers import S3, Postgres, TeamStore

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from e2e_support import clean_env, free_port, stop_process, stop_server, ui_server, wait_up

pytestmark = pytest.mark.slow

SKEW_S = 90
FILE_MB = 16  # --max-upload-mb of both hosts
SESSION_MB = 24  # $GPUSCOPE_MAX_SESSION_UPLOAD_MB of both hosts
# claims of ~5.5 KB that do not compress away (the cookie is signed compressed, and split when
# that passes 4 KB); Mabel's the same size as Alice's, so both cookies have as many chunks
GROUPS = [hashlib.sha256(str(i).encode()).hexdigest()[:24] for i in range(190)]
ALICE = {"sub": "alice", "email": "alice@example.com", "name": "Alice", "groups": GROUPS}
MABEL = {"sub": "mabel", "email": "mabel@example.com", "name": "Mabel", "groups": GROUPS}
USER = "_streamlit_user"

SKEWED_CLOCK = f"""
import time
_real = time.time
time.time = lambda: _real() + {SKEW_S}  # this host's clock runs {SKEW_S} s ahead
"""


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """oidc-provider-mock on a free port with Alice and Mabel predefined; its base URL."""
    work = tmp_path_factory.mktemp("oidc")
    port = free_port()
    log = work / "provider.log"
    argv = [sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", str(port)]
    for user in (ALICE, MABEL):
        argv += ["--user-claims", json.dumps(user)]
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_up(f"{url}/.well-known/openid-configuration", proc, "the OIDC provider", log=log)
    yield url
    stop_process(proc)


@dataclass
class Host:
    port: int
    pid: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Team:
    a: Host  # the clock is right
    b: Host  # the clock runs SKEW_S ahead
    secret: str
    record: Path  # the shared sign-out record
    store: TeamStore
    rss: dict[str, float] = field(default_factory=dict)


def _config(path: Path, port: int, secret: str, provider: str) -> Path:
    path.write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        f'cookie_secret = "{secret}"\n'
        'client_id = "gpuscope-hosts"\n'
        'client_secret = "not-checked-by-the-mock-provider"\n'
        f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n'
    )
    return path


@pytest.fixture(scope="module")
def team(
    tmp_path_factory: pytest.TempPathFactory,
    provider: str,
    postgres_server: Postgres,
    s3_server: S3,
) -> Iterator[Team]:
    """Hosts A and B: one team store, one cookie secret, one sign-out record; B's clock +90 s."""
    work = tmp_path_factory.mktemp("hosts")
    store = TeamStore(
        postgres_server, s3_server, postgres_server.create_database(), s3_server.create_bucket()
    )
    secret = secrets.token_hex(32)
    record = work / "shared" / "signed-out.json"
    skewed = work / "skewed-clock"
    skewed.mkdir()
    (skewed / "sitecustomize.py").write_text(SKEWED_CLOCK)
    hosts = []
    for name, extra in (("a", {}), ("b", {"PYTHONPATH": str(skewed)})):
        port = free_port()
        config = _config(work / f"auth-{name}.toml", port, secret, provider)
        env = clean_env(
            {
                **store.env(),
                "GPUSCOPE_SIGNOUT_FILE": str(record),
                "GPUSCOPE_MAX_SESSION_UPLOAD_MB": str(SESSION_MB),
                **extra,
            }
        )
        args = ["--auth-config", str(config), "--max-upload-mb", str(FILE_MB)]
        hosts.append(ui_server(work / name, args, env, port=port))
    a, b = (Host(int(s.url.rsplit(":", 1)[1]), s.proc.pid, s.log) for s in hosts)
    yield Team(a, b, secret, record, store)
    for server in hosts:
        stop_server(server)


# -- the hand-made browser -------------------------------------------------------------------------


def provider_token(secret: str) -> str:
    """What the page's *Sign in* button sends to ``/auth/login``: Streamlit's provider token."""
    from joserfc import jwt
    from joserfc.jwk import OctKey

    payload = {"provider": "default", "exp": int(time.time()) + 600}
    return str(jwt.encode({"alg": "HS256"}, payload, OctKey.import_key(secret)))


def sign_in(host: Host, secret: str, subject: str) -> dict[str, str]:
    """Sign ``subject`` in on ``host`` through the provider's form; the sign-in cookies set."""
    import requests

    s = requests.Session()
    r = s.get(f"{host.url}/auth/login?provider={provider_token(secret)}", allow_redirects=False)
    assert r.status_code in (302, 303, 307), r.text
    form = r.headers["location"]
    r = s.post(form, data={"sub": subject}, allow_redirects=False)
    assert r.status_code in (302, 303), r.text
    r = s.get(r.headers["location"], allow_redirects=False)  # the dashboard's callback
    assert r.status_code in (302, 303, 307), r.text
    # the provider's tokens (``_streamlit_user_tokens``) are left out, as the probe's client did:
    # nothing here reads them, and with them a cookie this large passes the 8 KB header line
    # the websocket handshake takes
    jar = {
        c.name: str(c.value)
        for c in s.cookies
        if c.name.startswith((USER, "_gpuscope")) and not c.name.startswith(f"{USER}_tokens")
    }
    assert USER in jar, f"no sign-in cookie from {host.url}: {sorted(jar)}"
    return jar


def is_chunk(name: str) -> bool:
    """Whether ``name`` is a chunk of Streamlit's split sign-in cookie (``_streamlit_user_N``)."""
    return name.startswith(f"{USER}_") and name[len(USER) + 1 :].isdigit()


def header(cookies: dict[str, str], xsrf: str | None = None) -> str:
    pairs = [f"{k}={v}" for k, v in cookies.items()]
    return "; ".join(pairs + ([f"_streamlit_xsrf={xsrf}"] if xsrf else []))


@dataclass
class Page:
    """A websocket session of the dashboard, as a browser opens it."""

    ws: object
    session: str = ""
    text: list[str] = field(default_factory=list)
    buttons: dict[str, str] = field(default_factory=dict)  # label -> widget id

    async def run(self, click: str | None = None) -> str:
        """Run the page (clicking the button labelled ``click``) until the script finishes; what
        it shows, as one text."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.page_name = "runs"
        if click is not None:
            msg.rerun_script.widget_states.widgets.add(id=self.buttons[click], trigger_value=True)
        self.text, self.buttons = [], {}
        await self.ws.send(msg.SerializeToString())  # type: ignore[attr-defined]
        while True:
            raw = await asyncio.wait_for(self.ws.recv(), 90)  # type: ignore[attr-defined]
            fwd = ForwardMsg()
            fwd.ParseFromString(raw if isinstance(raw, bytes) else raw.encode())
            kind = fwd.WhichOneof("type")
            if kind == "new_session":
                self.session = str(fwd.new_session.initialize.session_id)
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                what = el.WhichOneof("type")
                if what == "button":
                    self.buttons[el.button.label] = el.button.id
                    self.text.append(el.button.label)
                elif what in ("markdown", "heading", "alert", "text"):
                    self.text.append(getattr(el, what).body)
            elif kind == "script_finished":
                return "\n".join(self.text)


@asynccontextmanager
async def page(host: Host, cookies: dict[str, str]) -> AsyncIterator[Page]:
    """An open session of ``host`` with ``cookies`` (and its own XSRF double submit)."""
    import websockets
    from streamlit.web.server.starlette.starlette_app_utils import generate_xsrf_token_string

    xsrf = generate_xsrf_token_string()
    async with websockets.connect(
        f"ws://127.0.0.1:{host.port}/_stcore/stream",
        subprotocols=["streamlit", xsrf],  # type: ignore[list-item]
        origin=host.url,  # type: ignore[arg-type]
        additional_headers={"Cookie": header(cookies, xsrf)},
        max_size=None,
        open_timeout=60,
    ) as ws:
        p = Page(ws)
        await p.run()
        yield p


def shows(host: Host, cookies: dict[str, str]) -> str:
    """What ``host``'s Runs page shows to a browser with ``cookies``."""

    async def go() -> str:
        async with page(host, cookies) as p:
            return "\n".join(p.text)

    return run_in_thread(go())


def sign_out(host: Host, cookies: dict[str, str]) -> None:
    """Click *Sign out* on ``host``'s page, signed in with ``cookies``."""

    async def go() -> None:
        async with page(host, cookies) as p:
            assert "Sign out" in p.buttons, p.text
            await p.run(click="Sign out")

    run_in_thread(go())


def request(
    host: Host,
    method: str,
    path: str,
    cookies: dict[str, str],
    headers: dict[str, str],
    body: Iterator[bytes] | None = None,
) -> tuple[int, str]:
    """One raw HTTP/1.1 request with a self-made XSRF double submit, its body streamed (a server
    that answers early may close before it is all sent); (status, body)."""
    from streamlit.web.server.starlette.starlette_app_utils import generate_xsrf_token_string

    xsrf = generate_xsrf_token_string()
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{host.port}", f"X-Xsrftoken: {xsrf}"]
    lines += [f"Cookie: {header(cookies, xsrf)}"] + [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection(("127.0.0.1", host.port), timeout=120) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        try:
            for chunk in body or ():
                s.sendall(chunk)
        except OSError:  # answered and closed without reading the body
            pass
        resp = http.client.HTTPResponse(s, method=method)
        resp.begin()
        return resp.status, resp.read().decode("utf-8", "replace")


def multipart(size: int) -> tuple[str, bytes, bytes]:
    """(boundary, head, tail) of a one-file multipart body around ``size`` bytes."""
    boundary = "gpuscope" + secrets.token_hex(8)
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="t.json"\r\n'
        "Content-Type: application/json\r\n\r\n"
    ).encode()
    return boundary, head, f"\r\n--{boundary}--\r\n".encode()


def upload(host: Host, session: str, cookies: dict[str, str], mb: int) -> tuple[int, str]:
    """PUT an upload of ``mb`` MB with its Content-Length, as the browser sends it."""
    boundary, head, tail = multipart(mb << 20)
    length = len(head) + (mb << 20) + len(tail)
    body = iter([head, *([b"x" * (1 << 20)] * mb), tail])
    hdrs = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    hdrs["Content-Length"] = str(length)
    return request(host, "PUT", f"/_stcore/upload_file/{session}/f{mb}", cookies, hdrs, body)


def chunked_upload(host: Host, session: str, cookies: dict[str, str], mb: int) -> tuple[int, str]:
    """The probe's payload: ``Transfer-Encoding: chunked`` *and* ``Content-Length: 10``, with
    ``mb`` MB of file in 1 MB chunks."""
    boundary, head, tail = multipart(mb << 20)

    def framed(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    body = iter([framed(head), *([framed(b"x" * (1 << 20))] * mb), framed(tail), b"0\r\n\r\n"])
    hdrs = {
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "Transfer-Encoding": "chunked",
        "Content-Length": "10",
    }
    return request(host, "PUT", f"/_stcore/upload_file/{session}/c{mb}", cookies, hdrs, body)


def in_session(host: Host, cookies: dict[str, str], then):  # type: ignore[no-untyped-def]
    """Open a page session of ``host`` with ``cookies``; ``then(session_id)`` while it is open."""

    async def go():  # type: ignore[no-untyped-def]
        async with page(host, cookies) as p:
            return await asyncio.to_thread(then, p.session)

    return run_in_thread(go())


def rss_mb(pid: int) -> float:
    """The resident memory (MB) of the process ``pid`` and its children (``gpuscope ui`` execs
    Streamlit in place, so it is one process)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


# -- the tests -------------------------------------------------------------------------------------


def test_hosts_clocks_really_differ(team: Team) -> None:
    """The set-up itself: B signs cookies 90 s ahead of A (so A refuses B's fresh cookies as
    signed in its future, as itsdangerous does), while B's own pages take them."""
    copy = sign_in(team.b, team.secret, "alice")
    assert "Signed in as" in shows(team.b, copy)
    assert "Signed in as" not in shows(team.a, copy)


def test_sign_out_on_one_host_ends_a_copy_made_on_a_host_whose_clock_is_ahead(team: Team) -> None:
    """Item 7. The copy: Alice's cookie from host B (clock +90 s). She signs in on A too and
    signs out there; the copy, used on B, shows the sign-in page and is refused an upload."""
    copy = sign_in(team.b, team.secret, "alice")
    assert "Signed in as **Alice**" in shows(team.b, copy)
    assert in_session(team.b, copy, lambda sid: upload(team.b, sid, copy, 1))[0] == 204
    on_a = sign_in(team.a, team.secret, "alice")
    sign_out(team.a, on_a)
    assert "alice@example.com" in json.loads(team.record.read_text())
    after = shows(team.b, copy)
    assert "Signed in as" not in after and "Sign in" in after, after
    assert "Upload traces" not in after
    status, body = in_session(team.b, copy, lambda sid: upload(team.b, sid, copy, 1))
    assert (status, body) == (401, "sign in to upload\n")
    assert "Signed in as" not in shows(team.a, on_a)  # and her cookie on A, of course


def test_chunks_of_another_sign_in_sign_nobody_in(team: Team) -> None:
    """Item 10. Alice's cookie is split in chunks (claims over 4 KB); after she signs out, a
    fresh sign-in of Mabel's with Alice's old chunks in place of hers must not be Alice."""
    alice = sign_in(team.a, team.secret, "alice")
    assert f"{USER}_1" in alice and f"{USER}_2" in alice, sorted(alice)  # really in chunks
    assert "Signed in as **Alice**" in shows(team.a, alice)
    sign_out(team.a, alice)
    mabel = sign_in(team.a, team.secret, "mabel")
    chunks = {k: v for k, v in alice.items() if is_chunk(k)}
    assert chunks.keys() == {k for k in mabel if is_chunk(k)}  # as many chunks as hers
    spliced = {**mabel, **chunks}
    shown = shows(team.a, spliced)
    assert "Alice" not in shown and "Signed in as" not in shown, shown
    status, body = in_session(team.a, spliced, lambda sid: upload(team.a, sid, spliced, 1))
    assert (status, body) == (401, "sign in to upload\n")
    # Mabel's own cookies still sign her in (the refusal is the splice's)
    assert "Signed in as **Mabel**" in shows(team.a, mabel)


def test_chunked_with_a_length_is_refused_before_the_body_is_read(team: Team) -> None:
    """Item 8. Signed in, four uploads of 12 MB sent chunked with ``Content-Length: 10``: the
    session's cap is 24 MB, and the probe's four 200 MB went through against a 512 MB cap."""
    alice = sign_in(team.a, team.secret, "alice")

    def four(sid: str) -> list[tuple[int, str]]:
        assert upload(team.a, sid, alice, 1)[0] == 204  # the replay is sound: a plain upload works
        time.sleep(2)  # the session's script run after it
        before = rss_mb(team.a.pid)
        out = [chunked_upload(team.a, sid, alice, 12) for _ in range(4)]
        team.rss["chunked"] = rss_mb(team.a.pid) - before
        return out

    answers = in_session(team.a, alice, four)
    print(f"host A's RSS over four chunked 12 MB uploads: {team.rss['chunked']:+.1f} MB")
    assert [s for s, _ in answers] == [400] * 4, answers
    assert "Transfer-Encoding and Content-Length" in answers[0][1]
    assert team.rss["chunked"] < 24, team.rss  # 48 MB were sent; none of it is held


def test_a_delete_of_someone_elses_upload_is_refused_and_the_file_stays(team: Team) -> None:
    """Item 9. Alice's session holds a 10 MB upload. An anonymous DELETE of it, and Mabel's,
    are refused; the file is still held: a 15 MB upload then passes the session's 24 MB cap (429),
    and after Alice's own DELETE it fits (204)."""
    alice = sign_in(team.a, team.secret, "alice")
    mabel = sign_in(team.a, team.secret, "mabel")

    def deletes(sid: str) -> list[int]:
        assert upload(team.a, sid, alice, 10)[0] == 204
        gone = f"/_stcore/upload_file/{sid}/f10"
        out = [request(team.a, "DELETE", gone, {}, {})[0]]  # anonymous
        out.append(request(team.a, "DELETE", gone, mabel, {})[0])  # another person
        out.append(upload(team.a, sid, alice, 15)[0])  # the 10 MB still counts
        out.append(request(team.a, "DELETE", gone, alice, {})[0])  # her own
        out.append(upload(team.a, sid, alice, 15)[0])
        return out

    assert in_session(team.a, alice, deletes) == [401, 403, 429, 204, 204]
    # an upload into her session by Mabel is refused the same way
    status, body = in_session(team.a, alice, lambda sid: upload(team.a, sid, mabel, 1))
    assert (status, body) == (403, "this upload session is not yours\n")


def test_the_pages_of_a_signed_out_cookie_show_nothing_of_the_store(team: Team) -> None:
    """The store is the team's (PostgreSQL, S3): a refused cookie's page names neither."""
    copy = sign_in(team.a, team.secret, "alice")
    sign_out(team.a, sign_in(team.a, team.secret, "alice"))
    shown = shows(team.a, copy)
    assert team.store.database not in shown and "s3://" not in shown and "Sign in" in shown


def test_an_open_session_ends_when_its_owner_signs_out_on_the_other_host(team: Team) -> None:
    """A page already open on A (its websocket made while the cookie held) shows the sign-in page
    at its next run once Alice signs out on B: the pages check the cookie on every run."""
    alice = sign_in(team.a, team.secret, "alice")

    async def go() -> tuple[str, str]:
        async with page(team.a, alice) as p:
            before = "\n".join(p.text)
            await asyncio.to_thread(sign_out, team.b, sign_in(team.b, team.secret, "alice"))
            return before, await p.run()

    before, after = run_in_thread(go())
    assert "Signed in as **Alice**" in before
    assert "Signed in as" not in after and "Sign in" in after, after
