"""DuckDB extensions loaded offline from their PyPI packages (``duckdb-extension-<name>``).

Each package holds one file, ``extensions/v<duckdb version>/<name>.duckdb_extension``; it is loaded
by path on a connection that never installs or auto-loads anything, so opening a store needs no
network and never picks up an extension of another version from ``~/.duckdb``.
"""

from __future__ import annotations

import importlib.util
import threading
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
from gpuscope.store.cores import usable_cores

# name -> the package that ships it
PACKAGES = {
    "parquet": "duckdb_extension_parquet",
    "sqlite_scanner": "duckdb_extension_sqlite_scanner",
    "postgres_scanner": "duckdb_extension_postgres_scanner",
    "httpfs": "duckdb_extension_httpfs",
    "ducklake": "duckdb_extension_ducklake",
}
OFFLINE = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


class MissingExtension(RuntimeError):
    """An extension's package is not installed (or holds no file for this duckdb); one line."""


@cache
def extension_file(name: str) -> Path:
    """The ``.duckdb_extension`` file of ``name`` shipped by its package, for this duckdb version."""
    package = PACKAGES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtension(
            f"the DuckDB extension {name} is not installed (pip install {package.replace('_', '-')}"
            f"=={duckdb.__version__})"
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    wanted = root / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if wanted.is_file():
        return wanted
    found = sorted(root.glob(f"extensions/*/{name}.duckdb_extension"))
    versions = ", ".join(p.parent.name for p in found) or "none"
    raise MissingExtension(
        f"the package {package} holds {name} for DuckDB {versions}, not v{duckdb.__version__}: "
        "install the versions pinned in gpuscope's pyproject.toml"
    )


# path -> (device, inode, size, mtime ns) of an extension file whose signature DuckDB checked and
# accepted in this process. DuckDB checks the signature on every LOAD into a new database instance,
# hashing the whole file (30-40 MB: about 90 ms each, 0.17 s of every store opened); a file it has
# accepted once and that is the same file since is loaded again without that check.
_VERIFIED: dict[str, tuple[int, int, int, int]] = {}
_VERIFIED_LOCK = threading.Lock()


def _stamp(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def offline_connection(*names: str, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that installs and auto-loads nothing, with the extensions ``names``
    loaded by path from their packages (no download), on as many threads as this process has
    cores (:func:`~gpuscope.store.cores.usable_cores`).

    Every file's signature is checked by DuckDB the first time this process loads it; later
    connections load a file that is still the one checked (same device, inode, size and mtime)
    with the check skipped, and switch unsigned extensions off again before they are returned, so
    no later ``LOAD`` on the connection escapes the check.
    """
    files = [extension_file(n) for n in names]
    with _VERIFIED_LOCK:
        trusted = bool(files) and all(_VERIFIED.get(str(f)) == _stamp(f) for f in files)
    config: dict[str, Any] = {**OFFLINE, "threads": usable_cores()}
    if trusted:
        config["allow_unsigned_extensions"] = True
    con = duckdb.connect(database, config=config)
    try:
        for f in files:
            con.execute(f"LOAD {_sql_path(f)}")
        if trusted:
            con.execute("SET allow_unsigned_extensions = false")
    except BaseException:  # a failed load: the half-made connection is closed, the error goes on
        con.close()
        raise
    if not trusted:
        with _VERIFIED_LOCK:
            _VERIFIED.update({str(f): _stamp(f) for f in files})
    return con


def load(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """Load extensions by path from their packages (no download, no auto-install), with DuckDB's
    signature check (on a connection from :func:`offline_connection` it is always on)."""
    for name in names:
        con.execute(f"LOAD {_sql_path(extension_file(name))}")


def _sql_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"
