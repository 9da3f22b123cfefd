"""The one place that renders a store error, spec or URL for people: every secret form masked.

Everything gpuscope shows a person or writes to a log about a store goes through :func:`redact`:
every :class:`~gpuscope.vocabulary.errors.GpuscopeError` (``IngestError``, ``StoreError``, ...) redacts its
text when it is made, ``StoreSpec.shown()`` is :func:`shown_url`, the CLI's stdout and stderr
pass every write through it, and :func:`install_log_redaction` makes every log record of the
process (the dashboard's server log) redacted when it is created.

Masked, in any letter case:

* a URL's user-info password: ``postgres://u:PW@host`` -> ``postgres://u:***@host``;
* ``password=…`` anywhere (a URL query ``?password=PW&…``, a libpq DSN ``password='PW'`` or
  ``password=PW``, ``sslpassword=…``), and ``PGPASSWORD=…``;
* S3 credentials: ``KEY_ID '…'``, ``SECRET '…'``, ``SESSION_TOKEN '…'`` of a ``CREATE SECRET``,
  ``aws_access_key_id=…``, ``aws_secret_access_key=…``, ``aws_session_token=…``, and a presigned
  URL's ``X-Amz-Credential``, ``X-Amz-Signature``, ``X-Amz-Security-Token``;
* every *known* secret verbatim wherever it appears, whatever DuckDB or libpq wrapped it in: the
  values of ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` and
  ``PGPASSWORD`` in the environment, and the password of every store URL this process parsed
  (:func:`remember`), raw and percent-encoded.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import urllib.parse
from collections.abc import Iterable

MASK = "***"
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "PGPASSWORD")
URL_ENV = ("GPUSCOPE_STORE",)  # a store URL whose password is a known secret
MIN_KNOWN = 6  # shorter known secrets are masked only in the forms above (not as bare text)

_QUOTED = r"'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?"  # an unterminated quote runs to the end
_KEYS = (
    r"[a-z_]*password|pgpassword|aws_access_key_id|aws_secret_access_key|aws_session_token"
    r"|x-amz-credential|x-amz-signature|x-amz-security-token"
)
# key=value: a quoted value, else up to white space, '&', ',' or ')' (URL query, DSN, SQL); a
# value masked already stays as it is (redact(redact(x)) == redact(x))
_ASSIGN = re.compile(rf"(?i)\b({_KEYS})(\s*[=:]\s*)(\*\*\*|{_QUOTED}|[^\s&,)]+)")
# CREATE SECRET (TYPE s3, KEY_ID 'x', SECRET 'y', SESSION_TOKEN 'z')
_SQL_SECRET = re.compile(rf"(?i)\b(key_id|secret|session_token)(\s+)({_QUOTED})")
# scheme://user:password@host  (the password may hold anything but '@' and white space)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@?#]*):([^\s@]*)@")

_known: set[str] = set()
_known_lock = threading.Lock()


def remember(*secrets: str | None) -> None:
    """Add secrets to mask verbatim from now on (e.g. a store URL's password)."""
    with _known_lock:
        for s in secrets:
            if s and len(s) >= MIN_KNOWN:
                _known.add(s)
                _known.add(urllib.parse.quote(s, safe=""))
                _known.add(urllib.parse.unquote(s))


def url_password(url: str) -> str | None:
    """The password of a URL's user info or ``password=`` query parameter (None: none)."""
    try:
        u = urllib.parse.urlsplit(url)
        pw = u.password
    except ValueError:
        return None
    if pw:
        return urllib.parse.unquote(pw)
    for key, values in urllib.parse.parse_qs(u.query).items():
        if key.lower() == "password" and values:
            return values[-1]
    return None


def _known_now() -> list[str]:
    found = [os.environ.get(k, "") for k in SECRET_ENV]
    for k in URL_ENV:
        found.append(url_password(os.environ.get(k, "")) or "")
    remember(*found)
    with _known_lock:
        return sorted(_known, key=len, reverse=True)  # longest first: no half-masked overlap


def redact(text: object) -> str:
    """``text`` with every secret form masked (``***``); see the module docstring."""
    s = str(text)
    for secret in _known_now():
        if secret in s:
            s = s.replace(secret, MASK)
    s = _USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", s)
    s = _ASSIGN.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", s)
    return _SQL_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}'{MASK}'", s)


def shown_url(location: str) -> str:
    """A store location for messages: :func:`redact` of it, its password remembered first."""
    remember(url_password(location))
    return redact(location)


def redact_all(items: Iterable[str]) -> list[str]:
    return [redact(i) for i in items]


# -- log records -----------------------------------------------------------------------------------

_installed = [False]


def install_log_redaction() -> None:
    """Make every log record of this process redacted when it is created: its message (with the
    arguments merged in), its traceback text and its stack. Idempotent; any handler (Streamlit's,
    a file, pytest's) then writes only redacted text."""
    with _known_lock:
        if _installed[0]:
            return
        _installed[0] = True
    make = logging.getLogRecordFactory()
    formatter = logging.Formatter()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)  # type: ignore[arg-type]
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: keep the raw text, masked
            message = f"{record.msg} {record.args}"
        record.msg, record.args = redact(message), None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redact(formatter.formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)
