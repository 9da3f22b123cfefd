"""Issue 47 item 6: the extension stamp is relied on only where no one else can swap the extension
or any folder above it between the check and the load. The probe: a world-writable ``extensions/``
folder (no sticky bit) let an unprivileged user rename the checked folder away and put an unsigned
ducklake in its place; only the stamp's own folder was checked. Real DuckDB loads, real files."""

from __future__ import annotations

import os
import stat

import duckdb
import pytest
from test_store import _check_in_another_process, _connect_spy

LOADED = "SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner'"


def _copy_under(tmp_path, monkeypatch, parent_mode: int):  # type: ignore[no-untyped-def]
    """``tmp_path/pub/v/sqlite_scanner.duckdb_extension``: ``v`` private (0755, ours), ``pub``
    of ``parent_mode``: the probe's ``extensions/v<duckdb>/`` layout."""
    from gpuscope.store import extensions

    pub = tmp_path / "pub"
    folder = pub / "v"
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    pub.chmod(parent_mode)
    copy = folder / "sqlite_scanner.duckdb_extension"
    copy.write_bytes(extensions.extension_file("sqlite_scanner").read_bytes())
    monkeypatch.setattr(extensions, "extension_file", lambda n: copy)
    monkeypatch.setattr(extensions, "_VERIFIED", {})
    return copy


def _unsigned(good: bytes) -> bytes:
    """The same extension with its signature (the last 256 bytes) zeroed: the code is intact, so
    it loads where the check is skipped, and DuckDB refuses it where the check is made."""
    return good[:-256] + bytes(256)


def test_a_world_writable_folder_above_the_stamp_is_not_relied_on(tmp_path, monkeypatch):
    from gpuscope.store import extensions

    copy = _copy_under(tmp_path, monkeypatch, 0o755)
    _check_in_another_process(copy)  # checked and stamped while the whole chain is private
    assert extensions._disk_trusted(copy) and extensions._safe_chain(copy)
    copy.parent.parent.chmod(0o777)  # the probe: extensions/ world-writable, no sticky bit
    assert stat.S_IMODE(copy.parent.stat().st_mode) == 0o755  # the stamp's own folder: private
    assert not extensions._safe_chain(copy) and not extensions._disk_trusted(copy)
    seen = _connect_spy(monkeypatch)
    con = extensions.offline_connection("sqlite_scanner")  # DuckDB checks it, as before
    assert con.execute(LOADED).fetchone() == (True,)
    con.close()
    assert not seen[-1].get("allow_unsigned_extensions")
    # nor is this process's own earlier check: the second connection is checked again
    con = extensions.offline_connection("sqlite_scanner")
    con.close()
    assert not seen[-1].get("allow_unsigned_extensions")
    # a sticky world-writable folder (/tmp's kind) of ours: no one else can rename what is ours
    copy.parent.parent.chmod(0o1777)
    assert extensions._safe_chain(copy)
    con = extensions.offline_connection("sqlite_scanner")
    con.close()
    assert seen[-1].get("allow_unsigned_extensions") is True


def test_a_folder_swapped_between_the_check_and_the_load_is_caught(tmp_path, monkeypatch):
    """The race, made certain: right after the trust decision (at ``duckdb.connect``) the checked
    folder is renamed away and one holding an unsigned copy put in its place, as the probe's
    unprivileged user did through the world-writable parent. The load must be checked."""
    from gpuscope.store import extensions

    copy = _copy_under(tmp_path, monkeypatch, 0o755)
    _check_in_another_process(copy)
    copy.parent.parent.chmod(0o777)
    real_connect = duckdb.connect

    def connect_then_swap(database=":memory:", read_only=False, config=None):  # type: ignore[no-untyped-def]
        con = real_connect(database, read_only=read_only, config=config or {})
        folder = copy.parent
        os.rename(folder, folder.with_name("v.checked"))
        folder.mkdir(mode=0o755)
        (folder / copy.name).write_bytes(
            _unsigned((folder.with_name("v.checked") / copy.name).read_bytes())
        )
        return con

    monkeypatch.setattr(extensions.duckdb, "connect", connect_then_swap)
    with pytest.raises(duckdb.Error, match=r"(?i)signature"):
        extensions.offline_connection("sqlite_scanner")


def test_a_link_on_the_way_or_a_file_others_may_write_is_not_a_safe_chain(tmp_path, monkeypatch):
    from gpuscope.store import extensions

    copy = _copy_under(tmp_path, monkeypatch, 0o755)
    assert extensions._safe_chain(copy)
    copy.chmod(0o666)
    assert not extensions._safe_chain(copy)
    copy.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(copy.parent, target_is_directory=True)
    assert not extensions._safe_chain(link / copy.name)  # checked as named: no link followed
    # offline_connection resolves the folders once, then checks and loads that same path
    monkeypatch.setattr(extensions, "extension_file", lambda n: link / copy.name)
    extensions.offline_connection("sqlite_scanner").close()
    assert str(copy) in extensions._VERIFIED and str(link / copy.name) not in extensions._VERIFIED
