"""A deferred download clicked while a script run redraws its button still gets its file
(redrawn_downloads.serve_redrawn_downloads), on Streamlit's own MediaFileManager and storage: the
click's revoked id is answered with the callable the same button of the same session holds now;
a button drawn disabled, another button's id and another session's id are not served."""

from __future__ import annotations

import pytest
from gpuscope.web.redrawn_downloads import current_id, serve_redrawn_downloads
from streamlit.runtime import media_file_manager as mfm_module
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.runtime.media_file_storage import MediaFileStorageError
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage


@pytest.fixture
def manager(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """(a manager, a function that makes ``session`` the current one)."""
    assert serve_redrawn_downloads() and serve_redrawn_downloads()  # idempotent
    storage = MemoryMediaFileStorage("/media")
    mgr = MediaFileManager(storage)
    current = {"id": "s1"}
    monkeypatch.setattr(mfm_module, "_get_session_id", lambda: current["id"])

    def in_session(sid: str) -> None:
        current["id"] = sid

    return mgr, storage, in_session


def draw(
    mgr: MediaFileManager, body: str, *, coord: str = "1.(0).3", element: str = "report"
) -> str:
    """One script run's draw of a deferred download button: its placeholder id."""
    return mgr.add_deferred(lambda: body, "text/html", coord, "r.html", element_id=element)


def end_of_run(mgr: MediaFileManager) -> None:
    """What Streamlit does when a script run is done: ids no session refers to are revoked."""
    mgr.remove_orphaned_files()


def fetched(storage: MemoryMediaFileStorage, url: str) -> bytes:
    return storage.get_file(url.rsplit("/", 1)[1].split(".")[0]).content


def test_a_click_holding_the_previous_runs_id_gets_the_buttons_current_file(manager) -> None:  # type: ignore[no-untyped-def]
    mgr, storage, _ = manager
    old = draw(mgr, "run one")
    new = draw(mgr, "run two")  # a later script run draws the same button again
    end_of_run(mgr)
    assert old not in mgr._deferred_callables  # Streamlit revoked the id the browser still holds
    assert fetched(storage, mgr.execute_deferred(old)) == b"run two"
    assert fetched(storage, mgr.execute_deferred(new)) == b"run two"


def test_a_button_drawn_disabled_or_gone_is_not_served(manager) -> None:  # type: ignore[no-untyped-def]
    mgr, _, _ = manager
    old = draw(mgr, "run one")
    draw(mgr, "run two")
    mgr.remove_deferred("1.(0).3", element_id="report")  # drawn disabled: every id revoked
    with pytest.raises(MediaFileStorageError, match="not found"):
        mgr.execute_deferred(old)
    with pytest.raises(MediaFileStorageError, match="not found"):
        mgr.execute_deferred("never-registered")


def test_another_buttons_or_sessions_file_is_never_served(manager) -> None:  # type: ignore[no-untyped-def]
    mgr, storage, in_session = manager
    old = draw(mgr, "mine")
    draw(mgr, "mine, redrawn at another place", coord="1.(0).4", element="other")  # another button
    in_session("s2")
    draw(mgr, "the other reader's", element="report")  # the same button in another session
    in_session("s1")
    mgr.remove_deferred("1.(0).3", element_id="report")  # s1's report button drawn disabled
    with pytest.raises(MediaFileStorageError, match="not found"):
        mgr.execute_deferred(old)
    # its own redraw in s1 is served; s2's is not
    again = draw(mgr, "mine again")
    end_of_run(mgr)
    assert again != old and fetched(storage, mgr.execute_deferred(old)) == b"mine again"


def test_current_id_is_the_newest_of_that_session_and_element() -> None:
    callables = {
        "a": {"session_id": "s1", "element_id": "e"},
        "b": {"session_id": "s2", "element_id": "e"},
        "c": {"session_id": "s1", "element_id": "e"},
        "d": {"session_id": "s1", "element_id": "f"},
    }
    assert current_id(callables, "s1", "e") == "c"
    assert current_id(callables, "s2", "e") == "b"
    assert current_id(callables, "s3", "e") is None
    assert current_id(callables, "s1", "") is None  # an unkeyed, id-less button: never guessed


def test_a_generated_file_outlives_the_sweeps_of_other_runs_until_its_time_is_up(
    manager, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The file a click made belongs to no session's elements: Streamlit's sweeps after two script
    runs (of any session) would delete it before a slow browser fetched it. Kept for
    GENERATED_KEEP_S (120 s) after it was made, it survives any number of sweeps meanwhile, and
    two sweeps after that delete it, as Streamlit does with any unreferenced download."""
    from gpuscope.web import redrawn_downloads as rd

    mgr, storage, in_session = manager
    clock = {"now": 1000.0}
    monkeypatch.setattr(rd.time, "monotonic", lambda: clock["now"])
    url = mgr.execute_deferred(draw(mgr, "the report"))
    file_id = rd.generated_id(url)
    assert storage.get_file(file_id).content == b"the report"
    in_session("s2")  # another reader's runs end, and this reader's
    for _ in range(5):
        end_of_run(mgr)
    clock["now"] += 119.0
    end_of_run(mgr)
    assert fetched(storage, url) == b"the report"
    clock["now"] += 1.0  # its time is up: marked, then deleted, as Streamlit sweeps
    end_of_run(mgr)
    assert fetched(storage, url) == b"the report"
    end_of_run(mgr)
    with pytest.raises(MediaFileStorageError):
        storage.get_file(file_id)


def test_without_the_keep_two_sweeps_delete_a_generated_file(manager) -> None:  # type: ignore[no-untyped-def]
    """What the keep is for: Streamlit's own sweep, run twice (two script runs end anywhere),
    deletes the file a click made before the browser fetched it."""
    from gpuscope.web import redrawn_downloads as rd

    mgr, storage, _ = manager
    url = mgr.execute_deferred(draw(mgr, "the report"))
    file_id = rd.generated_id(url)
    assert file_id in mgr._gpuscope_generated_at  # kept
    mgr._gpuscope_generated_at.clear()  # as if made GENERATED_KEEP_S ago
    end_of_run(mgr)
    end_of_run(mgr)
    with pytest.raises(MediaFileStorageError):
        storage.get_file(file_id)
