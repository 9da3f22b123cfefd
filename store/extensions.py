"""DuckDB extensions loaded offline from their PyPI packages (``duckdb-extension-<name>``).

Each package holds one file, ``extensions/v<duckdb version>/<name>.duckdb_extension``; it is loaded
by path on a connection that never installs or auto-loads anything, so opening a store needs no
network and never picks up an extension of another version from ``~/.duckdb``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import tempfile
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


# path -> (device, inode, size, mtime ns, ctime ns) of an extension file whose signature DuckDB
# checked and accepted. DuckDB checks the signature on every LOAD into a new database instance,
# hashing the whole file (30-40 MB: about 60-90 ms each, 0.15-0.2 s of every store opened); a file
# it has accepted once and that is the same file since is loaded again without that check, in this
# process and, through a stamp beside the file (:func:`_disk_trusted`), in the later ones.
_VERIFIED: dict[str, tuple[int, int, int, int, int]] = {}
_VERIFIED_LOCK = threading.Lock()
# the stamp's name beside the extension file: what was checked, and by which duckdb
STAMP_SUFFIX = ".gpuscope-verified"


def _stamp(path: Path) -> tuple[int, int, int, int, int]:
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stamp_file(path: Path) -> Path:
    return path.with_name(path.name + STAMP_SUFFIX)


def _private(st: os.stat_result) -> bool:
    """Owned by this user (or root) and writable by nobody else."""
    return st.st_uid in (os.geteuid(), 0) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _safe_chain(path: Path) -> bool:
    """Whether no one but this user and root can change what ``path`` names between a check and a
    load: ``path`` is a regular file (not a link) that is :func:`_private`, and every folder from
    its own up to the filesystem root is owned by this user or root and writable by no one else,
    unless sticky (then others cannot rename or remove what they do not own, and every entry on the
    way is ours or root's). One folder others may write to anywhere above lets them rename a
    folder of the path away and put their own in its place (issue 47: an unsigned ducklake swapped
    in between the stamp's check and the load)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or not _private(st):
            return False
        folder = Path(os.path.abspath(path)).parent
        while True:
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (os.geteuid(), 0):
                return False  # a link on the way (its target is another chain), or not ours
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
                return False
            if folder.parent == folder:
                return True
            folder = folder.parent
    except OSError:
        return False


def _disk_trusted(path: Path) -> bool:
    """Whether an earlier process's check of ``path`` stands: the stamp beside it names this very
    file (device, inode, size, modification and change times: a file written to or replaced since
    has another change time, which no user can set back) and this duckdb version, the stamp is as
    private as the extension file is (writable by its owner only), and no one else can swap the
    file or any folder above it (:func:`_safe_chain`). Whoever can forge the stamp there can
    replace the extension, or duckdb itself, anyway."""
    stamp = _stamp_file(path)
    try:
        st = stamp.lstat()
        if not stat.S_ISREG(st.st_mode) or not _private(st) or not _safe_chain(path):
            return False
        doc = json.loads(stamp.read_text())
        return doc == {"duckdb": duckdb.__version__, "file": list(_stamp(path))}
    except (OSError, ValueError):
        return False


def _write_stamp(path: Path, checked: tuple[int, int, int, int, int]) -> None:
    """Leave the stamp of a check beside ``path`` (a new file renamed over any old one); where the
    folder is not writable (a read-only install) every process checks the file, as DuckDB does."""
    try:
        if _stamp(path) != checked or not _safe_chain(path):
            return  # changed since the check, or a folder others may write to on the way
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        written = False
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"duckdb": duckdb.__version__, "file": list(checked)}, f)
            os.chmod(tmp, 0o644)
            os.replace(tmp, _stamp_file(path))
            written = True
        finally:
            if not written:  # no half-written stamp or temp file is left beside the extension
                Path(tmp).unlink(missing_ok=True)
    except OSError:  # the store opens all the same; the next process checks the file again
        pass


def offline_connection(*names: str, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that installs and auto-loads nothing, with the extensions ``names``
    loaded by path from their packages (no download), on as many threads as this process has
    cores (:func:`~gpuscope.store.cores.usable_cores`).

    Every file's signature is checked by DuckDB the first time it is loaded; later connections,
    of this process or (through the stamp the check leaves beside the file, see
    :func:`_disk_trusted`) of a later one, load a file that is still the one checked (same device,
    inode, size, modification and change times), and that no one but this user or root can swap
    before it is loaded (:func:`_safe_chain`), with the check skipped, and switch unsigned
    extensions off again before they are returned, so no later ``LOAD`` on the connection escapes
    the check.
    """
    # the folders resolved once: what is checked is what is loaded (no link is followed later)
    files = [Path(os.path.realpath(f.parent)) / f.name for f in map(extension_file, names)]
    stamps = [_stamp(f) for f in files]  # as they are before DuckDB reads them
    with _VERIFIED_LOCK:
        trusted = bool(files) and all(
            _safe_chain(f) and (_VERIFIED.get(str(f)) == st or _disk_trusted(f))
            for f, st in zip(files, stamps, strict=True)
        )
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
            for f, st in zip(files, stamps, strict=True):
                _VERIFIED[str(f)] = st
                if not _disk_trusted(f):
                    _write_stamp(f, st)
    return con


def load(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """Load extensions by path from their packages (no download, no auto-install), with DuckDB's
    signature check (on a connection from :func:`offline_connection` it is always on)."""
    for name in names:
        con.execute(f"LOAD {_sql_path(extension_file(name))}")


def _sql_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"
