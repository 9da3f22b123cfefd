"""The credentials a team store hands DuckDB: the PostgreSQL conninfo and the S3 secret (never shown: see :mod:`gpuscope.vocabulary.redact`)."""

from __future__ import annotations

import os
import urllib.parse


def postgres_conninfo(url: str) -> str:
    """A ``postgres://`` URL -> libpq's ``key=value`` string (what postgres_scanner reads)."""
    u = urllib.parse.urlsplit(url)
    parts = {
        "host": u.hostname,
        "port": str(u.port) if u.port else None,
        "user": urllib.parse.unquote(u.username) if u.username else None,
        "password": urllib.parse.unquote(u.password) if u.password else None,
        "dbname": urllib.parse.unquote(u.path.lstrip("/")) or None,
    }
    for key, values in urllib.parse.parse_qs(u.query).items():
        parts[key] = values[-1]

    def quoted(v: str) -> str:
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{k}={quoted(v)}" for k, v in parts.items() if v is not None)


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def s3_secret_sql(env: dict[str, str] | None = None) -> str | None:
    """``CREATE SECRET`` for an ``s3://`` data path from the standard AWS variables; None when no
    variable is set (a public bucket, or credentials DuckDB finds itself)."""
    env = dict(os.environ if env is None else env)
    fields: dict[str, str] = {}
    for var, key in (
        ("AWS_ACCESS_KEY_ID", "KEY_ID"),
        ("AWS_SECRET_ACCESS_KEY", "SECRET"),
        ("AWS_SESSION_TOKEN", "SESSION_TOKEN"),
    ):
        if env.get(var):
            fields[key] = _sql_text(env[var])
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        fields["REGION"] = _sql_text(region)
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        u = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        host = u.hostname or ""
        fields["ENDPOINT"] = _sql_text(f"{host}:{u.port}" if u.port else host)
        fields["USE_SSL"] = "true" if u.scheme == "https" else "false"
        fields["URL_STYLE"] = "'path'"
    if not fields:
        return None
    body = ", ".join(f"{k} {v}" for k, v in fields.items())
    return f"CREATE OR REPLACE SECRET gpuscope_s3 (TYPE s3, {body})"
