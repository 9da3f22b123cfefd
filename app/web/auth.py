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
import json
import os
import time
import tomllib
from collections.abc import Collection, Mapping
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
    """Whether this session's visitor is signed in: Streamlit's signed cookie says so, and its
    holder has not signed out since the cookie was made (:func:`revoked`)."""
    import streamlit as st

    user = st.user.to_dict()
    if not user.get("is_logged_in"):
        return False
    who = identity(user)
    if who is None:
        return True
    path = config_path()
    secret = _cookie_secret(path) if path is not None else ""
    issued = cookie_issued_at(dict(st.context.cookies), secret)
    return not revoked(who, issued)


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
# every copy of it valid for 30 days. gpuscope keeps, per identity, the time of the last sign-out
# (a small JSON file on the dashboard's host); a cookie made before it no longer signs anyone in,
# on any page and at the upload endpoint. Signing out thus ends all of that person's sessions.

ENV_SIGNOUT_FILE = "GPUSCOPE_SIGNOUT_FILE"
USER_COOKIE = "_streamlit_user"  # Streamlit's signed sign-in cookie (may be split in chunks)
COOKIE_MAX_AGE_S = 31 * 86400  # Streamlit's own limit: 30 days and a day's grace


def signout_file() -> Path:
    """``$GPUSCOPE_SIGNOUT_FILE``, else ``$XDG_STATE_HOME/gpuscope/signed-out.json``
    (``~/.local/state/...``)."""
    raw = os.environ.get(ENV_SIGNOUT_FILE, "").strip()
    if raw:
        return Path(raw).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "gpuscope" / "signed-out.json"


def _read_signouts(path: Path) -> dict[str, float]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):  # unreadable: every cookie is suspect, fail closed
        return {"*": time.time()}
    if not isinstance(doc, dict):
        return {"*": time.time()}
    return {str(k): float(v) for k, v in doc.items() if isinstance(v, int | float)}


def record_sign_out(who: str, when: float | None = None) -> None:
    """Remember that ``who`` signed out at ``when`` (default now; epoch seconds)."""
    path = signout_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = _read_signouts(path)
        doc.pop("*", None)
        key = fold(who)
        doc[key] = max(doc.get(key, 0.0), time.time() if when is None else when)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)


def revoked(who: str, issued: float | None) -> bool:
    """Whether a sign-in cookie of ``who`` made at ``issued`` (epoch seconds; None: unknown)
    predates their last sign-out."""
    signouts = _read_signouts(signout_file())
    last = max(signouts.get(fold(who), 0.0), signouts.get("*", 0.0))
    if not last:
        return False
    return issued is None or issued <= last


def _cookie_secret(path: Path) -> str:
    try:
        return load_config(path).cookie_secret
    except AuthConfigError:
        return ""


def _unsign(secret: str, name: str, value: str) -> tuple[str, float] | None:
    """A signed cookie's value and when it was signed; None when the signature is not
    ``secret``'s or the cookie is older than Streamlit accepts."""
    from itsdangerous import BadData, URLSafeTimedSerializer

    try:
        text, when = URLSafeTimedSerializer(secret, salt=name).loads(
            value, max_age=COOKIE_MAX_AGE_S, return_timestamp=True
        )
    except BadData:
        return None
    return (str(text), when.timestamp()) if isinstance(text, str) else None


def signed_cookie(cookies: Mapping[str, str], secret: str) -> tuple[dict[str, Any], float] | None:
    """The sign-in cookie's claims and when it was made (epoch seconds), from a request's
    cookies; None when it is missing, forged, expired or not a signed-in user's. Reassembles a
    cookie Streamlit split in chunks (``_streamlit_user`` = ``chunks-N``, then ``_1`` …)."""
    if not secret:
        return None
    head = cookies.get(USER_COOKIE)
    first = _unsign(secret, USER_COOKIE, head) if head else None
    if first is None:
        return None
    text, issued = first
    if text.startswith("chunks-") and text[7:].isdigit():
        parts = []
        for i in range(1, int(text[7:]) + 1):
            raw = cookies.get(f"{USER_COOKIE}_{i}")
            part = _unsign(secret, f"{USER_COOKIE}_{i}", raw) if raw else None
            if part is None:
                return None
            parts.append(part[0])
        text = "".join(parts)
    try:
        claims = json.loads(text)
    except ValueError:
        return None
    if not isinstance(claims, dict) or claims.get("is_logged_in") is not True:
        return None
    return claims, issued


def cookie_issued_at(cookies: Mapping[str, str], secret: str) -> float | None:
    """When this request's sign-in cookie was made; None when there is no valid one."""
    found = signed_cookie(cookies, secret)
    return found[1] if found else None


def request_identity(cookies: Mapping[str, str], secret: str) -> str | None:
    """Who a request's cookies sign in (their identity), or None: no valid sign-in cookie, or
    one made before that person signed out. What the upload guard asks."""
    found = signed_cookie(cookies, secret)
    if found is None:
        return None
    claims, issued = found
    who = identity(claims)
    if who is None or revoked(who, issued):
        return None
    return who
