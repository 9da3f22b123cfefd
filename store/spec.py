"""Where a store lives: the store spec (a folder, ``postgres://...``, ``duckdb:FILE``), the default folders and the environment variables that name them."""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from gpuscope.vocabulary.errors import BadInput
from gpuscope.vocabulary.redact import remember, shown_url, url_password

ENV_DB = "GPUSCOPE_DB"  # the local store's folder
ENV_STORE = "GPUSCOPE_STORE"  # any store spec (see parse_spec)
ENV_DATA_PATH = "GPUSCOPE_DATA_PATH"  # where a team store's Parquet files live
CATALOG_FILE = "catalog.sqlite"
DATA_DIR = "data"
LOCK_FILE = "write.lock"
WRITING_MARK = "writing.pid"  # present while a write transaction is open: left behind by a crash
LEGACY_BACKUP_SUFFIX = ".pre-ducklake"  # a migrated DuckDB file is kept under this name


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share"))


def default_db_path() -> Path:
    """The local store's folder: ``$GPUSCOPE_DB``, else ``$XDG_DATA_HOME/gpuscope/store``
    (``~/.local/share/gpuscope/store`` by default)."""
    env = os.environ.get(ENV_DB)
    if env:
        return Path(env).expanduser()
    return data_home() / "gpuscope" / "store"


def legacy_default_path() -> Path:
    """Where gpuscope before the DuckLake kept its DuckDB file (migrated on first open)."""
    return data_home() / "gpuscope" / "gpuscope.duckdb"


# ---------------------------------------------------------------------------------------------------
# Store specs


@dataclass(frozen=True)
class StoreSpec:
    """Where a store lives. ``kind``: ``local`` (folder), ``team`` (PostgreSQL URL), ``duckdb``."""

    kind: str
    location: str  # local: the folder; team: the PostgreSQL URL; duckdb: a file or ":memory:"
    data_path: str | None = None  # Parquet location (local: default <folder>/data/)

    def shown(self) -> str:
        """The spec as printed in messages: every secret masked (``***``; see ``redact``)."""
        return shown_url(self.location)


def parse_spec(
    spec: str | os.PathLike[str] | None = None, data_path: str | None = None
) -> StoreSpec:
    """A store spec -> :class:`StoreSpec`. ``None``: ``$GPUSCOPE_STORE``, else the local store at
    :func:`default_db_path`. Forms: a folder path (local DuckLake), ``postgres://...`` or
    ``postgresql://...`` (team DuckLake; ``data_path`` or ``$GPUSCOPE_DATA_PATH`` says where its
    Parquet files go), ``duckdb:PATH`` (legacy DuckDB file), ``:memory:``. Raises BadInput."""
    if data_path is None:
        data_path = os.environ.get(ENV_DATA_PATH) or None
    if spec is None:
        spec = os.environ.get(ENV_STORE) or default_db_path()
    text = str(spec)
    if text == ":memory:":
        return StoreSpec("duckdb", text)
    if text.startswith("duckdb:"):
        path = text[len("duckdb:") :]
        if not path:
            raise BadInput(text, "duckdb: needs a file path (duckdb:PATH)")
        return StoreSpec("duckdb", path if path == ":memory:" else str(Path(path).expanduser()))
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("postgres", "postgresql"):
        remember(url_password(text))  # masked verbatim in every message from now on
        u = urllib.parse.urlsplit(text)
        try:
            u.port  # noqa: B018 (raises ValueError for a port that is not a number in range)
        except ValueError:
            masked = re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", text)
            raise BadInput(masked, "the port is not a number from 1 to 65535") from None
        if not u.hostname and not u.path.strip("/"):
            raise BadInput(text, "a PostgreSQL store needs a host or a database name")
        return StoreSpec("team", text, data_path)
    if scheme:
        raise BadInput(
            text,
            "not a store: give a folder, postgres://user@host/db, duckdb:FILE or :memory:",
        )
    return StoreSpec("local", str(Path(text).expanduser().absolute()), data_path)
