"""DuckDB extensions loaded offline from their PyPI packages (``duckdb-extension-<name>``).

Each package holds one file, ``extensions/v<duckdb version>/<name>.duckdb_extension``; it is loaded
by path on a connection that never installs or auto-loads anything, so opening a store needs no
network and never picks up an extension of another version from ``~/.duckdb``.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import duckdb

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


def offline_connection(database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that installs and auto-loads nothing (extensions come from :func:`load`)."""
    return duckdb.connect(database, config=dict(OFFLINE))


def load(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """Load extensions by path from their packages (no download, no auto-install)."""
    for name in names:
        path = str(extension_file(name)).replace("'", "''")
        con.execute(f"LOAD '{path}'")
