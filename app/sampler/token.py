"""The sampler's write token: made when the server starts, kept in a file only its user can read,
sent by gpuscope's own clients (the capture helper's step reports, the Live page's trace request).

A write (``POST /api/steps``, ``POST /api/trace-request``) carries it in the ``X-Gpuscope-Token``
header. ``$GPUSCOPE_SAMPLER_TOKEN`` set on both sides gives one the user chose (a sampler bound
beyond loopback, a dashboard running as another user); otherwise a client on the same machine
reads ``<dir>/sampler-<port>.token``, where ``<dir>`` is ``$GPUSCOPE_SAMPLER_TOKEN_DIR``, else
``$XDG_RUNTIME_DIR/gpuscope``, else ``~/.cache/gpuscope/sampler-tokens``: a folder of the user's
own, mode 0700, the file 0600. A client reads that file only for a loopback URL (a token is never
sent to another machine unless the user set it in the environment).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
import urllib.parse
from pathlib import Path

ENV_TOKEN = "GPUSCOPE_SAMPLER_TOKEN"
ENV_TOKEN_DIR = "GPUSCOPE_SAMPLER_TOKEN_DIR"
HEADER = "X-Gpuscope-Token"
MAX_TOKEN = 512  # characters: a longer file or header is not a token


class TokenError(OSError):
    """The token folder or file is unsafe or cannot be written: one line for the user."""


def token_dir() -> Path:
    """Where the sampler publishes its token (see the module docstring)."""
    if os.environ.get(ENV_TOKEN_DIR):
        return Path(os.environ[ENV_TOKEN_DIR])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "gpuscope"
    return Path.home() / ".cache" / "gpuscope" / "sampler-tokens"


def token_path(port: int) -> Path:
    return token_dir() / f"sampler-{int(port)}.token"


def new_token() -> str:
    """``$GPUSCOPE_SAMPLER_TOKEN`` when set, else 32 random bytes (URL-safe text)."""
    given = os.environ.get(ENV_TOKEN, "").strip()
    return given if given else secrets.token_urlsafe(32)


def _private_folder(folder: Path) -> None:
    """Make ``folder`` (0700) or check it: ours, a real folder, writable by no one else."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise TokenError(
            f"{folder}: the sampler's token folder must be a folder of this user's, writable by "
            f"no one else (set ${ENV_TOKEN_DIR} to another)"
        )


def publish(port: int, token: str) -> Path:
    """Write ``token`` to :func:`token_path` (0600, replaced atomically); returns the file.
    Raises TokenError."""
    path = token_path(port)
    try:
        _private_folder(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, token.encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except TokenError:
        raise
    except OSError as e:
        raise TokenError(f"{path}: cannot write the sampler's token ({e.strerror or e})") from None
    return path


def withdraw(port: int, token: str) -> None:
    """Remove the token file of ``port`` if it still holds ``token`` (a later sampler's is kept)."""
    path = token_path(port)
    if read_token_file(path) == token:
        path.unlink(missing_ok=True)


def read_token_file(path: Path) -> str | None:
    """The token in ``path``: None unless it is a regular file of this user's that no one else
    can read or write (a link is not followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        text = os.read(fd, MAX_TOKEN + 1).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    return text if 0 < len(text) <= MAX_TOKEN else None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address, IPv6 with or without brackets) is this machine only."""
    h = host.strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def token_for(url: str) -> str | None:
    """The token a client sends to the sampler at ``url``: ``$GPUSCOPE_SAMPLER_TOKEN``, else the
    published file of the URL's port when the URL is a loopback one, else None."""
    given = os.environ.get(ENV_TOKEN, "").strip()
    if given:
        return given
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if not is_loopback(host):
        return None
    return read_token_file(token_path(port))


def auth_headers(url: str) -> dict[str, str]:
    """The header a write to the sampler at ``url`` carries (empty when no token is known)."""
    token = token_for(url)
    return {HEADER: token} if token else {}
