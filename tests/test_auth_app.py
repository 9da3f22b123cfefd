"""Sign-in in the app (AppTest, with ``AppTest.user`` standing in for the provider's claims): the
sign-in page, who is signed in, who an upload records, and who may rename, tag or delete a run
(the controls and the server-side check). The rule itself is tested as a pure function."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from apptools import MAIN, app_store, counts, texts
from streamlit.testing.v1 import AppTest
from synth import training_trace
from test_app_live import sampler  # noqa: F401 (a fixture: an in-process sampler)
from test_auth_cli import write_config

ALICE = {"is_logged_in": True, "sub": "a-1", "email": "Alice@Example.com", "name": "Alice Liddell"}
BOB = {"is_logged_in": True, "sub": "b-2", "email": "bob@example.com"}
CAROL = {"is_logged_in": True, "sub": "c-3", "email": "carol@example.com"}  # an admin
VISITOR = {"is_logged_in": False}


# -- the rule, a pure function --------------------------------------------------------------------


def test_identity_is_the_email_else_the_subject() -> None:
    from gpuscope.web.auth import identity

    assert identity({"email": " Ana@Example.COM ", "sub": "x"}) == "ana@example.com"
    assert identity({"email": "ana@example.com", "email_verified": True}) == "ana@example.com"
    # an address the provider says is unverified is anyone's claim: the subject is used
    assert identity({"email": "ana@example.com", "email_verified": False, "sub": "42"}) == "42"
    assert identity({"sub": "42"}) == "42"
    assert identity({"email": "", "sub": ""}) is None and identity({}) is None


def test_only_the_uploader_or_an_admin_may_change_a_run() -> None:
    from gpuscope.web.auth import may_change, viewer_from_claims

    admins = frozenset({"carol@example.com"})
    alice = viewer_from_claims(ALICE, admins)
    bob = viewer_from_claims(BOB, admins)
    carol = viewer_from_claims(CAROL, admins)
    nobody = viewer_from_claims({"is_logged_in": True}, admins)
    assert alice.name == "Alice Liddell" and bob.name == "bob@example.com" and carol.admin

    assert may_change("alice@example.com", alice) == (True, "")
    ok, why = may_change("alice@example.com", bob)
    assert (
        not ok
        and why == "Only alice@example.com, who uploaded this run, or an admin may change it."
    )
    assert may_change("alice@example.com", carol) == (True, "")
    # no recorded uploader (CLI ingest, before sign-in): admins only
    ok, why = may_change(None, alice)
    assert not ok and "Only an admin" in why and "no uploader was recorded" in why
    assert may_change(None, carol) == (True, "")
    # a sign-in with neither e-mail nor subject owns nothing, not even runs with no uploader
    assert not may_change(None, nobody)[0] and not may_change("x", nobody)[0]
    # sign-in off (viewer None): everyone who reaches the page may, as before
    assert may_change("alice@example.com", None) == (True, "")
    assert may_change(None, None) == (True, "")


# -- the app -------------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path | str:
    """The app's store: who may change a run is the subject, not the store, so a single-process
    DuckDB file (``app_store(..., lake=False)``: the same door, 2.6x less CPU per AppTest
    session); the lake under ``GPUSCOPE_TESTS_ON_LAKE=1``."""
    return app_store(tmp_path, monkeypatch, lake=bool(os.environ.get("GPUSCOPE_TESTS_ON_LAKE")))


@pytest.fixture
def signin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Sign-in on, as `gpuscope ui --auth-config` sets it for the app; Carol is an admin."""
    cfg = write_config(tmp_path / "auth.toml", extra='[gpuscope]\nadmins = ["Carol@example.com"]\n')
    monkeypatch.setenv("GPUSCOPE_AUTH_CONFIG", str(cfg))
    return cfg


def _app(user: dict[str, object]) -> AppTest:
    at = AppTest.from_file(str(MAIN), default_timeout=90)
    at.user = dict(user)
    at.run()
    return at


def _ingest(db: Path, tmp_path: Path, uploaded_by: str | None, variant: str = "after") -> str:
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    con = connect(db)
    try:
        trace = training_trace(variant).write(tmp_path / f"{variant}.json")
        return ingest_paths(con, [trace], uploaded_by=uploaded_by)[0].run_id
    finally:
        con.close()


def _owner(db: Path, run_id: str) -> str | None:
    from gpuscope.store import connect

    con = connect(db)
    try:
        row = con.execute("SELECT uploaded_by FROM runs WHERE run_id = ?", [run_id]).fetchone()
    finally:
        con.close()
    assert row is not None
    return row[0]


def _select(at: AppTest, rows: list[int]) -> None:
    key = next(k for k in at.session_state if str(k).startswith("runs_table_"))
    at.session_state[key] = {"selection": {"rows": rows, "columns": []}}
    at.run()


def _sidebar_text(at: AppTest) -> str:
    return " ".join(str(getattr(e, "value", "")) for e in at.sidebar.caption)


def test_a_visitor_sees_only_the_sign_in_page(db: Path, signin: Path, tmp_path: Path) -> None:
    _ingest(db, tmp_path, "alice@example.com")
    at = _app(VISITOR)
    assert not at.exception
    assert texts(at, "title") == ["gpuscope"]
    assert [b.label for b in at.button] == ["Sign in"]
    body = " ".join(texts(at, "markdown"))
    assert "Sign in to see the runs" in body
    assert not at.dataframe and not at.file_uploader  # nothing of the store
    assert "store" not in _sidebar_text(at)


def test_every_page_asks_a_visitor_to_sign_in(db: Path, signin: Path, tmp_path: Path) -> None:
    rid = _ingest(db, tmp_path, "alice@example.com")
    at = _app(VISITOR)
    for page, params in (
        ("screens/run.py", {"run": rid}),
        ("screens/compare.py", {"a": rid, "b": rid}),
        ("screens/live.py", {}),
    ):
        at.switch_page(page)
        at.query_params.clear()
        at.query_params.update(params)
        at.run()
        assert not at.exception
        assert texts(at, "title") == ["gpuscope"] and [b.label for b in at.button] == ["Sign in"]
        assert not at.get("plotly_chart") and not at.dataframe


def test_a_signed_in_user_sees_who_and_a_sign_out(db: Path, signin: Path) -> None:
    at = _app(ALICE)
    assert not at.exception
    assert texts(at, "title") == ["Runs"]
    side = _sidebar_text(at)
    assert "Signed in as **Alice Liddell**" in side and "admin" not in side
    assert "alice" in side and "example.com" in side  # the identity, escaped for Markdown
    assert at.button(key="auth_sign_out").label == "Sign out"
    assert "admin" in _sidebar_text(_app(CAROL))


def test_sign_out_returns_to_the_sign_in_page(db: Path, signin: Path) -> None:
    at = _app(ALICE)
    at.button(key="auth_sign_out").click().run()
    at.run()  # the next run of the session: st.user is empty again
    assert not at.exception
    assert [b.label for b in at.button] == ["Sign in"]


@pytest.mark.slow
def test_an_upload_records_the_signed_in_user(db: Path, signin: Path, tmp_path: Path) -> None:
    data = training_trace("before").write(tmp_path / "b.json", gz=False).read_bytes()
    at = _app(ALICE)
    at.file_uploader[0].set_value(("mine.pt.trace.json", data, "application/json"))
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception, at.exception
    rid = at.query_params.get("run")
    assert rid and _owner(db, rid) == "alice@example.com"
    at.switch_page("screens/runs.py")
    at.run()
    table = at.dataframe[0].value
    assert list(table["uploaded_by"]) == ["alice@example.com"]


@pytest.mark.slow
def test_without_sign_in_an_upload_records_nobody(db: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("GPUSCOPE_AUTH_CONFIG", raising=False)
    data = training_trace("before").write(tmp_path / "b.json", gz=False).read_bytes()
    at = _app({})
    at.file_uploader[0].set_value(("mine.pt.trace.json", data, "application/json"))
    at.run()
    at.button(key="ingest").click().run()
    rid = at.query_params.get("run")
    assert rid and _owner(db, rid) is None
    assert "Signed in as" not in _sidebar_text(at)


@pytest.mark.slow
def test_another_user_cannot_delete_rename_or_tag(db: Path, signin: Path, tmp_path: Path) -> None:
    rid = _ingest(db, tmp_path, "alice@example.com")
    at = _app(BOB)
    assert list(at.dataframe[0].value["uploaded_by"]) == ["alice@example.com"]
    _select(at, [0])
    assert at.checkbox(key=f"confirm_delete_{rid}").disabled
    assert at.button(key=f"delete_{rid}").disabled
    assert at.text_input(key=f"rename_text_{rid}").disabled
    assert at.text_input(key=f"tags_text_{rid}").disabled
    why = [c for c in texts(at, "caption") if "who uploaded this run" in c]
    assert len(why) == 2 and all("alice" in c and "or an admin may change it" in c for c in why)


@pytest.mark.slow
def test_a_click_from_someone_the_control_is_disabled_for_deletes_nothing(
    db: Path, signin: Path, tmp_path: Path
) -> None:
    """The page is rendered for the uploader, the click arrives in Bob's session (what a forged
    message would do): the rule is evaluated again on that run, and nothing is deleted."""
    rid = _ingest(db, tmp_path, "alice@example.com")
    before = counts(db)
    at = _app(ALICE)
    _select(at, [0])
    at.checkbox(key=f"confirm_delete_{rid}").check().run()
    at.user = dict(BOB)
    at.button(key=f"delete_{rid}").click().run()
    assert not at.exception
    assert counts(db) == before
    assert at.button(key=f"delete_{rid}").disabled


@pytest.fixture
def stale_owners(monkeypatch: pytest.MonkeyPatch) -> None:
    """The owners the page read say Bob uploaded every run, while the store says otherwise: the
    window between drawing the controls and the write (the run deleted and uploaded again by
    someone else meanwhile). Only the check under the write lock can catch it."""
    from gpuscope.web import auth

    real = auth.owners
    monkeypatch.setattr(auth, "owners", lambda cur: dict.fromkeys(real(cur), "bob@example.com"))


@pytest.mark.slow
def test_the_write_checks_the_owner_again(
    db: Path, signin: Path, tmp_path: Path, stale_owners: None
) -> None:
    rid = _ingest(db, tmp_path, "alice@example.com")
    before = counts(db)
    at = _app(BOB)
    _select(at, [0])
    at.checkbox(key=f"confirm_delete_{rid}").check().run()  # enabled: the page's view is stale
    at.button(key=f"delete_{rid}").click().run()
    assert not at.exception
    errors = texts(at, "error")
    assert len(errors) == 1 and errors[0].startswith("**Nothing was deleted.** Only alice")
    assert counts(db) == before


@pytest.mark.slow
def test_a_rename_checks_the_owner_again(
    db: Path, signin: Path, tmp_path: Path, stale_owners: None
) -> None:
    rid = _ingest(db, tmp_path, "alice@example.com")
    at = _app(BOB)
    _select(at, [0])
    at.text_input(key=f"rename_text_{rid}").set_value("bob's now")
    submit = next(b for b in at.get("button") if getattr(b, "label", "") == "Save name and tags")
    submit.click().run()
    assert not at.exception
    assert any(e.startswith("**Not saved.** Only alice") for e in texts(at, "error"))
    from gpuscope.store import connect

    con = connect(db)
    assert con.execute("SELECT name FROM runs").fetchone()[0] != "bob's now"
    con.close()


@pytest.mark.slow
def test_the_uploader_deletes_their_run(db: Path, signin: Path, tmp_path: Path) -> None:
    rid = _ingest(db, tmp_path, "alice@example.com")
    _ingest(db, tmp_path, "bob@example.com", variant="before")
    at = _app(ALICE)  # "Alice@Example.com" signs in: the address matches whatever its case
    names = list(at.dataframe[0].value["uploaded_by"])
    _select(at, [names.index("alice@example.com")])
    assert not at.checkbox(key=f"confirm_delete_{rid}").disabled
    assert not [c for c in texts(at, "caption") if "who uploaded this run" in c]
    at.checkbox(key=f"confirm_delete_{rid}").check().run()
    at.button(key=f"delete_{rid}").click().run()
    assert not at.exception
    assert list(at.dataframe[0].value["uploaded_by"]) == ["bob@example.com"]


@pytest.mark.slow
def test_an_admin_deletes_anyones_run_and_those_without_an_uploader(
    db: Path, signin: Path, tmp_path: Path
) -> None:
    _ingest(db, tmp_path, "alice@example.com")
    _ingest(db, tmp_path, None, variant="before")  # from the command line: no uploader
    at = _app(CAROL)
    assert sorted(at.dataframe[0].value["uploaded_by"]) == ["alice@example.com", "—"]
    _select(at, [0, 1])
    key = next(k for k in at.session_state if str(k).startswith("confirm_delete_"))
    at.checkbox(key=key).check().run()
    at.button(key=key.replace("confirm_delete_", "delete_")).click().run()
    assert not at.exception
    assert counts(db)["runs"] == 0


@pytest.mark.slow
def test_a_run_without_an_uploader_is_for_admins_only(
    db: Path, signin: Path, tmp_path: Path
) -> None:
    rid = _ingest(db, tmp_path, None)
    at = _app(ALICE)
    _select(at, [0])
    assert at.button(key=f"delete_{rid}").disabled
    assert any("Only an admin may change this run" in c for c in texts(at, "caption"))


@pytest.mark.slow
def test_a_live_series_saved_as_a_run_records_who_saved_it(
    db: Path,
    signin: Path,
    sampler: str,  # noqa: F811
) -> None:
    at = _app(ALICE)
    at.switch_page("screens/live.py")
    at.query_params.update({"sampler": sampler})
    at.run()
    at.button(key="live_save").click().run()
    assert not at.exception, at.exception
    assert any("saved as run" in t for t in texts(at, "success"))
    from gpuscope.web import db as webdb

    runs = webdb.query_df("SELECT kind, uploaded_by FROM runs")
    assert list(runs["kind"]) == ["nvml"] and list(runs["uploaded_by"]) == ["alice@example.com"]
