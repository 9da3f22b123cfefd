"""Sign-in for a dashboard that others can reach: the deployer's config file, who is signed in,
and who may change a run.

Streamlit's own OIDC login does the sign-in (``st.login`` / ``st.user`` / ``st.logout``). The
deployer writes one TOML file (docs/security.md, "Sign-in"): Streamlit's ``[auth]`` section, plus
an optional ``[gpuscope] admins`` list. ``gpuscope ui --auth-config FILE`` (or
``$GPUSCOPE_AUTH_CONFIG``) checks it before the server starts, hands it to Streamlit as its only
secrets file (``--secrets.files``) and sets ``$GPUSCOPE_AUTH_CONFIG`` for the app, which is how
the app knows that sign-in is on.

The permission rule (:func:`may_change`) is a pure function; the pages ask it to disable a control
and ask it again, with the owner read afresh under the store's write lock, before they write.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    from gpuscope.store import Connection

ENV_AUTH_CONFIG = "GPUSCOPE_AUTH_CONFIG"
REQUIRED = ("redirect_uri", "cookie_secret", "client_id", "client_secret", "server_metadata_url")
COOKIE_SECRET_MIN = (
    32  # characters; e.g. `python -c "import secrets; print(secrets.token_hex(32))"`
)
LOOPBACK_NAMES = ("localhost",)


class AuthConfigError(ValueError):
    """The deployer's sign-in config cannot be used; ``str()`` is one line naming the file."""


@dataclass(frozen=True)
class AuthConfig:
    """The parts of the sign-in config that gpuscope reads (Streamlit reads the rest)."""

    path: Path
    redirect_uri: str
    server_metadata_url: str
    admins: frozenset[str]
    cookie_secret: str = field(default="", repr=False)  # signs the sign-in cookie


def _url(value: str, *, allow_port_placeholder: bool = False) -> bool:
    text = value.replace("{port}", "8501") if allow_port_placeholder else value
    try:
        u = urlparse(text)
        _ = u.port  # a malformed port raises here
    except ValueError:
        return False
    return u.scheme in ("http", "https") and bool(u.hostname)


def load_config(path: str | os.PathLike[str]) -> AuthConfig:
    """Read and check a sign-in config; raise :class:`AuthConfigError` (one line) when it is
    missing, not TOML, lacks an ``[auth]`` key, or holds a value Streamlit could not use."""
    p = Path(path).expanduser()
    where = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AuthConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise AuthConfigError(f"{where}: a folder, not a TOML file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AuthConfigError(f"{where}: cannot read it ({type(e).__name__})") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise AuthConfigError(f"{where}: not valid TOML ({e})") from None
    auth = doc.get("auth")
    if not isinstance(auth, dict):
        raise AuthConfigError(
            f"{where}: no [auth] section; it needs {', '.join(REQUIRED)} (docs/security.md)"
        )
    missing = [k for k in REQUIRED if k not in auth]
    if missing:
        raise AuthConfigError(f"{where}: [auth] lacks {', '.join(missing)} (docs/security.md)")
    for k in REQUIRED:
        v = auth[k]
        if not isinstance(v, str) or not v.strip():
            raise AuthConfigError(f"{where}: [auth] {k} must be a non-empty string")
    redirect = str(auth["redirect_uri"])
    if not _url(redirect, allow_port_placeholder=True) or not redirect.rstrip("/").endswith(
        "/oauth2callback"
    ):
        raise AuthConfigError(
            f"{where}: [auth] redirect_uri must be the dashboard's http(s) address ending in "
            "/oauth2callback, e.g. https://gpuscope.example.com/oauth2callback"
        )
    metadata = str(auth["server_metadata_url"])
    if not _url(metadata):
        raise AuthConfigError(
            f"{where}: [auth] server_metadata_url must be an http(s) URL (the provider's "
            ".well-known/openid-configuration)"
        )
    if len(str(auth["cookie_secret"])) < COOKIE_SECRET_MIN:
        raise AuthConfigError(
            f"{where}: [auth] cookie_secret is shorter than {COOKIE_SECRET_MIN} characters; "
            'make one with: python -c "import secrets; print(secrets.token_hex(32))"'
        )
    section = doc.get("gpuscope", {})
    if not isinstance(section, dict):
        raise AuthConfigError(f"{where}: [gpuscope] must be a section")
    admins = section.get("admins", [])
    if not isinstance(admins, list) or not all(isinstance(a, str) and a.strip() for a in admins):
        raise AuthConfigError(
            f'{where}: [gpuscope] admins must be a list of e-mail addresses, e.g. ["ana@example.com"]'
        )
    unknown = sorted(set(section) - {"admins"})
    if unknown:
        raise AuthConfigError(f"{where}: [gpuscope] has unknown key(s) {', '.join(unknown)}")
    return AuthConfig(
        path=p.resolve(),
        redirect_uri=redirect,
        server_metadata_url=metadata,
        admins=frozenset(fold(a) for a in admins),
        cookie_secret=str(auth["cookie_secret"]),
    )


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the dashboard on this machine (``localhost``,
    ``127.0.0.0/8``, ``::1``)."""
    import ipaddress

    h = host.strip().strip("[]").lower()
    if h in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


# -- who is signed in ------------------------------------------------------------------------------


def fold(who: str) -> str:
    """An identity as stored and compared: white space around it dropped, case-folded
    (``Carol@Example.com`` and ``carol@example.com`` are one person)."""
    return who.strip().casefold()


def identity(claims: Mapping[str, Any]) -> str | None:
    """The name a run's ``uploaded_by`` records for these OIDC claims: the e-mail address
    (case-folded, :func:`fold`), unless the provider says it is unverified; else the subject
    (``sub``)."""
    email = claims.get("email")
    if isinstance(email, str) and email.strip() and claims.get("email_verified") is not False:
        return fold(email)
    sub = claims.get("sub")
    return str(sub) if sub not in (None, "") else None


@dataclass(frozen=True)
class Viewer:
    """The person using a session while sign-in is on."""

    identity: str | None  # see identity(); None when the provider sent neither email nor sub
    name: str  # what the page shows
    admin: bool


def viewer_from_claims(claims: Mapping[str, Any], admins: Collection[str]) -> Viewer:
    who = identity(claims)
    name = claims.get("name")
    shown = str(name).strip() if isinstance(name, str) and name.strip() else (who or "unknown")
    folded = {fold(a) for a in admins}
    return Viewer(identity=who, name=shown, admin=who is not None and fold(who) in folded)


def may_change(owner: str | None, viewer: Viewer | None) -> tuple[bool, str]:
    """Whether ``viewer`` may delete, rename or tag a run that ``owner`` uploaded, and if not,
    why (one sentence). ``viewer`` None: sign-in is off, everyone who reaches the page may."""
    if viewer is None or viewer.admin:
        return True, ""
    if viewer.identity is None:
        return False, "Your sign-in carries no e-mail or subject, so no run is yours to change."
    if owner is not None and fold(owner) == fold(viewer.identity):
        return True, ""
    if owner is None:
        return False, (
            "Only an admin may change this run: no uploader was recorded (it was stored from "
            "the command line or before sign-in was on)."
        )
    return False, f"Only {owner}, who uploaded this run, or an admin may change it."


# -- the app's side (Streamlit) -------------------------------------------------------------------


def config_path() -> Path | None:
    """The sign-in config ``gpuscope ui`` checked and handed over, or None: sign-in is off."""
    raw = os.environ.get(ENV_AUTH_CONFIG, "").strip()
    return Path(raw) if raw else None


def enabled() -> bool:
    return config_path() is not None


def _admins() -> frozenset[str]:
    path = config_path()
    if path is None:
        return frozenset()
    try:
        return load_config(path).admins
    except AuthConfigError:  # checked at start; edited since: nobody is an admin
        return frozenset()


def current() -> Viewer | None:
    """The signed-in viewer; None when sign-in is off. Call :func:`gate` first."""
    import streamlit as st

    if not enabled():
        return None
    return viewer_from_claims(st.user.to_dict(), _admins())


def uploader() -> str | None:
    """What an upload records as ``uploaded_by``: the viewer's identity, None without sign-in."""
    v = current()
    return v.identity if v is not None else None


def signed_in() -> bool:
    """Whether this session's visitor is signed in: Streamlit says so (``st.user``), and the
    session's cookies sign that same person in now (:func:`request_identity`: sealed, whole, and
    not signed out since; checked on every run, so an open session ends at its owner's sign-out).

    A served app makes ``st.user`` from those cookies alone (and :class:`SignInSeal` has taken away
    any that do not hold); only a test harness (AppTest's ``at.user``) gives claims without them,
    and those are taken as they are."""
    import streamlit as st

    user = st.user.to_dict()
    if not user.get("is_logged_in"):
        return False
    cookies = dict(st.context.cookies)
    if USER_COOKIE not in cookies:
        return True
    path = config_path()
    secret = _cookie_secret(path) if path is not None else ""
    who = request_identity(cookies, secret)
    return who is not None and who == identity(user)


def gate() -> None:
    """With sign-in on: a visitor who is not signed in sees the sign-in page and nothing else
    (the script stops here); a signed-in one sees who they are and a sign-out in the sidebar."""
    import streamlit as st
    from gpuscope.web import ui

    if not enabled():
        return
    if not signed_in():
        st.title("gpuscope")
        st.write("This dashboard is for signed-in users. Sign in to see the runs.")
        if st.button("Sign in", type="primary", icon=":material/login:", key="auth_sign_in"):
            st.login()
        st.stop()
    v = current()
    assert v is not None
    with st.sidebar:
        role = " · admin" if v.admin else ""
        st.caption(f":material/person: Signed in as **{ui.md(v.name)}**{role}")
        if v.identity and v.identity != v.name:
            st.caption(ui.md(v.identity))
        if st.button("Sign out", icon=":material/logout:", key="auth_sign_out"):
            if v.identity:  # every cookie of theirs made before now stops working, copies too
                record_sign_out(v.identity)
            st.logout()


# -- the store's side: who uploaded a run ------------------------------------------------------------


def owners(cur: Connection) -> dict[str, str | None]:
    """Every run's ``uploaded_by``, by run id."""
    from gpuscope.analysis import run_views

    return run_views.uploaders(cur)


def refusal(cur: Connection, run_ids: Collection[str], viewer: Viewer | None) -> str | None:
    """Why ``viewer`` may not change one of ``run_ids``, with each owner read afresh (call it
    under the store's write lock, just before the write); None when every change is allowed.
    A run that is gone already is no reason to refuse (deleting it again changes nothing)."""
    from gpuscope.analysis import run_views

    found = run_views.uploaders(cur, list(run_ids))
    for rid in run_ids:
        if rid not in found:
            continue
        ok, why = may_change(found[rid], viewer)
        if not ok:
            return why
    return None


# -- sign-out that ends the session on the server ---------------------------------------------------
#
# Streamlit's sign-in cookie is signed, not stored: deleting it in the browser (st.logout) leaves
# every copy valid for 30 days; and a large one is split in chunks, each signed on its own, so the
# chunks of two sign-ins can be put together. gpuscope adds its own cookie at sign-in, the *seal*
# (``_gpuscope_signin``, signed with the same secret): the identity, that person's sign-in nonce
# from the shared record, and the SHA-256 digest of the whole sign-in cookie (chunks joined). A
# request signs someone in only when its seal is valid, the seal's digest is that of the cookie
# sent with it, the seal's identity is the cookie's, and the seal's nonce is still that person's in
# the record. Signing out replaces the nonce, so every cookie of that person stops working on every
# host that reads the record, whatever the hosts' clocks say: no time is compared.

ENV_SIGNOUT_FILE = "GPUSCOPE_SIGNOUT_FILE"
USER_COOKIE = "_streamlit_user"  # Streamlit's signed sign-in cookie (may be split in chunks)
TOKENS_COOKIE = "_streamlit_user_tokens"  # Streamlit's provider tokens (useless without the above)
SEAL_COOKIE = "_gpuscope_signin"  # gpuscope's seal over USER_COOKIE (see above)
COOKIE_MAX_AGE_S = 31 * 86400  # Streamlit's own limit: 30 days and a day's grace
_CHUNKS = re.compile(r"chunks-(\d+)")  # the head of a split cookie (streamlit.auth_util)


def signout_file() -> Path:
    """The shared sign-in record: ``$GPUSCOPE_SIGNOUT_FILE``, else
    ``$XDG_STATE_HOME/gpuscope/signed-out.json`` (``~/.local/state/...``)."""
    raw = os.environ.get(ENV_SIGNOUT_FILE, "").strip()
    if raw:
        return Path(raw).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "gpuscope" / "signed-out.json"


def _read_record(path: Path) -> dict[str, str] | None:
    """Identity -> current sign-in nonce; ``{}`` without a file; None when the file cannot be read
    or is not a record (every cookie is refused then: fail closed). Values that are not nonces (the
    sign-out times an older gpuscope wrote) count as no nonce."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    return {str(k): v for k, v in doc.items() if isinstance(v, str)}


def _change_record(path: Path, change: Callable[[dict[str, str]], str]) -> str:
    """Apply ``change`` to the record under an exclusive lock (beside it) and replace the file
    atomically; what ``change`` returns. An unreadable record is started afresh (everyone in it
    signs in again)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = _read_record(path) or {}
        out = change(doc)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        tmp.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    return out


def sign_in_nonce(who: str, record: Path | None = None) -> str:
    """The nonce a new sign-in of ``who`` carries in its seal: their current one in ``record``
    (default :func:`signout_file`), else a new one, recorded."""
    path = record or signout_file()
    key = fold(who)
    current = _read_record(path)
    if current and key in current:
        return current[key]

    def add(doc: dict[str, str]) -> str:
        return doc.setdefault(key, secrets.token_urlsafe(18))

    return _change_record(path, add)


def record_sign_out(who: str, record: Path | None = None) -> None:
    """End every sign-in of ``who``: their nonce in ``record`` (default :func:`signout_file`) is
    replaced, so no seal made before now matches it."""

    def replace(doc: dict[str, str]) -> str:
        doc[fold(who)] = secrets.token_urlsafe(18)
        return doc[fold(who)]

    _change_record(record or signout_file(), replace)


def revoked(who: str, nonce: str) -> bool:
    """Whether a sign-in of ``who`` whose seal carries ``nonce`` has ended: its owner signed out
    since (or the record is unreadable, or holds no nonce of theirs)."""
    record = _read_record(signout_file())
    if record is None:
        return True
    current = record.get(fold(who))
    return current is None or not hmac.compare_digest(current.encode(), nonce.encode())


def _cookie_secret(path: Path) -> str:
    try:
        return load_config(path).cookie_secret
    except AuthConfigError:
        return ""


def _unsign(secret: str, name: str, value: str) -> Any:
    """A signed cookie's payload; None when the signature is not ``secret``'s for ``name`` or the
    cookie is older than Streamlit accepts (or signed in the future of this host's clock)."""
    from itsdangerous import BadData, URLSafeTimedSerializer

    try:
        return URLSafeTimedSerializer(secret, salt=name).loads(value, max_age=COOKIE_MAX_AGE_S)
    except BadData:
        return None


def cookie_text(cookies: Mapping[str, str], secret: str) -> str | None:
    """The sign-in cookie's value, its chunks joined as Streamlit joins them (the head holds the
    whole value or ``chunks-N``, then ``_streamlit_user_1`` ... ``_N``); None when it or a chunk is
    missing or not signed with ``secret``."""
    head = cookies.get(USER_COOKIE)
    text = _unsign(secret, USER_COOKIE, head) if head else None
    if not isinstance(text, str):
        return None
    split = _CHUNKS.match(text)
    if split is None:
        return text
    parts = []
    for i in range(1, int(split.group(1)) + 1):
        raw = cookies.get(f"{USER_COOKIE}_{i}")
        part = _unsign(secret, f"{USER_COOKIE}_{i}", raw) if raw else None
        if not isinstance(part, str):
            return None
        parts.append(part)
    return "".join(parts)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _who(text: str) -> str | None:
    """The identity a sign-in cookie's value (chunks joined) signs in; None when it is not a
    signed-in user's claims or names nobody."""
    try:
        claims = json.loads(text)
    except ValueError:
        return None
    if not isinstance(claims, dict) or claims.get("is_logged_in") is not True:
        return None
    return identity(claims)


def make_seal(secret: str, text: str, record: Path | None = None) -> str | None:
    """The seal cookie's value for a new sign-in whose cookie holds ``text`` (chunks joined): its
    identity, that person's nonce (:func:`sign_in_nonce`) and the digest of ``text``, signed with
    ``secret``. None when ``text`` signs nobody in (not a signed-in user's, or no identity)."""
    from itsdangerous import URLSafeTimedSerializer

    who = _who(text)
    if who is None or not secret:
        return None
    seal = {"who": who, "nonce": sign_in_nonce(who, record), "digest": _digest(text)}
    return str(URLSafeTimedSerializer(secret, salt=SEAL_COOKIE).dumps(seal))


def signed_cookie(cookies: Mapping[str, str], secret: str) -> tuple[dict[str, Any], str] | None:
    """The sign-in cookie's claims and its seal's nonce, from a request's cookies; None when the
    cookie or its seal is missing, forged or expired, when the seal was made for another cookie
    (chunks of another sign-in, another person's) or when the cookie is not a signed-in user's."""
    if not secret:
        return None
    text = cookie_text(cookies, secret)
    raw = cookies.get(SEAL_COOKIE)
    seal = _unsign(secret, SEAL_COOKIE, raw) if raw else None
    if text is None or not isinstance(seal, dict) or _who(text) is None:
        return None
    claims = json.loads(text)
    who, nonce, digest = seal.get("who"), seal.get("nonce"), seal.get("digest")
    if not (isinstance(who, str) and isinstance(nonce, str) and isinstance(digest, str)):
        return None
    if not hmac.compare_digest(digest.encode(), _digest(text).encode()):
        return None
    if identity(claims) != who:
        return None
    return claims, nonce


def request_identity(cookies: Mapping[str, str], secret: str) -> str | None:
    """Who a request's cookies sign in (their identity), or None: no valid, sealed sign-in cookie,
    or one whose owner has signed out since. What the upload guard and the pages ask."""
    found = signed_cookie(cookies, secret)
    if found is None:
        return None
    claims, nonce = found
    who = identity(claims)
    if who is None or revoked(who, nonce):
        return None
    return who


# -- the server's side: the seal set at sign-in, cookies that do not hold removed --------------------


def is_signin_cookie(name: str) -> bool:
    """Whether ``name`` is one of the sign-in cookies (Streamlit's, its chunks, its tokens', the
    seal)."""
    if name == SEAL_COOKIE:
        return True
    for base in (USER_COOKIE, TOKENS_COOKIE):
        if name == base or (name.startswith(base + "_") and name[len(base) + 1 :].isdigit()):
            return True
    return False


def request_cookies(headers: Collection[tuple[bytes, bytes]]) -> dict[str, str]:
    """The cookies of an ASGI request as Streamlit (Starlette) reads them: its first ``Cookie``
    header, parsed by Starlette's parser."""
    from starlette.requests import cookie_parser

    for name, value in headers:
        if name.lower() == b"cookie":
            return cookie_parser(value.decode("latin-1"))
    return {}


def _has_signin_cookie(headers: Collection[tuple[bytes, bytes]]) -> bool:
    """Whether any ``Cookie`` header of a request names a sign-in cookie."""
    return any(
        is_signin_cookie(p.split("=", 1)[0].strip())
        for name, value in headers
        if name.lower() == b"cookie"
        for p in value.decode("latin-1").split(";")
    )


def _without_signin_cookies(headers: Collection[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    kept: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if name.lower() != b"cookie":
            kept.append((name, value))
            continue
        pairs = [p for p in value.decode("latin-1").split(";") if p.strip()]
        left = [p for p in pairs if not is_signin_cookie(p.split("=", 1)[0].strip())]
        if left:
            kept.append((name, ";".join(left).strip().encode("latin-1")))
    return kept


def _set_cookies(headers: Collection[tuple[bytes, bytes]]) -> dict[str, tuple[str, str]]:
    """A response's ``Set-Cookie`` headers: name -> (value, attributes), the last of each name."""
    found: dict[str, tuple[str, str]] = {}
    for name, raw in headers:
        if name.lower() != b"set-cookie":
            continue
        pair, _, attrs = raw.decode("latin-1").partition(";")
        key, _, value = pair.partition("=")
        found[key.strip()] = (value.strip(), attrs.strip())
    return found


class SignInSeal:
    """ASGI middleware in front of Streamlit, with sign-in on: a response that sets Streamlit's
    sign-in cookie (the provider's callback) gets the seal beside it, one that deletes it (sign-out)
    deletes the seal too; a request (page, websocket, upload, anything) whose sign-in cookies do
    not sign anyone in (:func:`request_identity`) reaches Streamlit without them, so ``st.user``
    never holds a spliced, unsealed or signed-out cookie's claims."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        path = config_path()
        self._secret = _cookie_secret(path) if path is not None else ""
        self._signin = path is not None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self._signin or scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        if scope["type"] == "http" and str(scope.get("path", "")).endswith(
            ("/oauth2callback", "/auth/logout")
        ):
            await self.app(scope, receive, self._sealing(send))
            return
        if _has_signin_cookie(headers) and (
            request_identity(request_cookies(headers), self._secret) is None
        ):
            scope = {**scope, "headers": _without_signin_cookies(headers)}
        await self.app(scope, receive, send)

    def _sealing(self, send: Any) -> Any:
        failed = False

        async def sealed(message: Any) -> None:
            nonlocal failed
            if failed:  # the answer below replaced the app's
                return
            if message.get("type") == "http.response.start":
                headers = list(message.get("headers", []))
                try:
                    extra = self._seal_headers(headers)
                except OSError as e:  # the record cannot be written: nobody is signed in
                    failed = True
                    await _record_unwritable(send, e)
                    return
                if extra:
                    message = {**message, "headers": headers + extra}
            await send(message)

        return sealed

    def _seal_headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        sets = _set_cookies(headers)
        if USER_COOKIE not in sets:
            return []
        value, attrs = sets[USER_COOKIE]
        if value in ("", '""'):  # Streamlit deletes its cookie: the seal goes with it
            return [(b"set-cookie", f'{SEAL_COOKIE}=""; {attrs}'.encode("latin-1"))]
        given = {k: v for k, (v, _) in sets.items() if k.startswith(USER_COOKIE)}
        text = cookie_text(given, self._secret)
        seal = make_seal(self._secret, text) if text is not None else None
        if seal is None:
            return []
        return [(b"set-cookie", f"{SEAL_COOKIE}={seal}; {attrs}".encode("latin-1"))]


async def _record_unwritable(send: Any, error: OSError) -> None:
    """Answer a sign-in whose seal could not be made: ``503`` and one line naming the record (its
    folder or file cannot be written); logged the same."""
    import logging

    why = error.strerror or str(error)
    line = (
        f"gpuscope: cannot sign in: the sign-in record {signout_file()} cannot be written ({why})"
    )
    logging.getLogger("gpuscope.web.auth").error("%s", line)
    body = (line + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
