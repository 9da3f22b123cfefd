"""AppTest: the Runs page (upload through the uploader, errors, list, search, rename/tag/delete)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, counts, ingest, open_app, texts
from synth import training_trace, write_sample_tree


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path | str:
    """The page's store. The subject here is the Runs page (what it shows, what its uploads and
    edits do and say), not the store under it: a single-process DuckDB file
    (``app_store(..., lake=False)``: the same door, one transaction per ingest, 2.6x less CPU per
    AppTest session), the lake under ``GPUSCOPE_TESTS_ON_LAKE=1``. The page's writes on the lake
    keep their own tests: an upload and a rename seen by other processes, a failed rename
    storing nothing (tests/test_app_shared_store.py), an upload maintaining the lake
    (tests/test_store_maintenance.py), a capture folder uploaded with its NVML series
    (tests/test_app_upload_nvml.py); an ingest that fails storing nothing on the lake, in
    tests/test_ingest_job.py."""
    return app_store(tmp_path, monkeypatch, lake=bool(os.environ.get("GPUSCOPE_TESTS_ON_LAKE")))


def _bytes(tmp_path: Path, variant: str = "before", **kw) -> bytes:
    return training_trace(variant, **kw).write(tmp_path / f"{variant}.json", gz=False).read_bytes()


@pytest.mark.slow
def test_empty_store_invites_an_upload(db: Path) -> None:
    at = open_app()
    assert not at.exception
    assert texts(at, "title") == ["Runs"]
    assert any("No runs yet" in t for t in texts(at, "info"))
    assert at.file_uploader[0].accept_multiple_files


@pytest.mark.slow
def test_upload_one_trace_opens_its_run_page(db: Path, tmp_path: Path) -> None:
    at = open_app()
    at.file_uploader[0].set_value(("my run.pt.trace.json", _bytes(tmp_path), "application/json"))
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception, at.exception
    run_id = at.query_params.get("run")
    assert run_id and len(run_id) == 12
    assert texts(at, "title") == ["my run"]  # the Run page, named after the file
    assert any("Stored run" in t for t in texts(at, "success"))
    assert counts(db)["runs"] == 1


@pytest.mark.slow
def test_upload_gz(db: Path, tmp_path: Path) -> None:
    data = training_trace("after").write(tmp_path / "a.json.gz").read_bytes()
    at = open_app()
    at.file_uploader[0].set_value(("a.pt.trace.json.gz", data, "application/gzip"))
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception
    assert counts(db)["runs"] == 1


@pytest.mark.slow
def test_bad_upload_shows_the_problem_and_stores_nothing(db: Path, tmp_path: Path) -> None:
    ingest(db, training_trace("after").write(tmp_path / "ok.json"))
    before = counts(db)
    at = open_app()
    at.file_uploader[0].set_value(
        ("broken.json", b'{"traceEvents": [{"ph": "X", "name": ', "application/json")
    )
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception
    errors = texts(at, "error")
    assert len(errors) == 1 and "Nothing was stored" in errors[0] and "broken.json" in errors[0]
    assert counts(db) == before


@pytest.mark.slow
def test_bad_file_among_good_ones_stores_nothing(db: Path, tmp_path: Path) -> None:
    before = counts(db)
    at = open_app()
    at.file_uploader[0].set_value(
        [
            ("good_rank0.json", _bytes(tmp_path, rank=0, world_size=2), "application/json"),
            ("bad_rank1.json", b"not json at all", "application/json"),
        ]
    )
    at.run()
    at.radio(key="upload_mode").set_value("separate runs").run()
    at.button(key="ingest").click().run()
    assert not at.exception
    assert any("Nothing was stored" in t for t in texts(at, "error"))
    assert counts(db) == before


@pytest.mark.slow
def test_rank_files_of_one_run(db: Path, tmp_path: Path) -> None:
    files = [
        (
            f"job_rank{r}.pt.trace.json",
            training_trace("before", rank=r, world_size=2, seed=r)
            .write(tmp_path / f"r{r}.json")
            .read_bytes(),
            "application/json",
        )
        for r in (0, 1)
    ]
    at = open_app()
    at.file_uploader[0].set_value(files)
    at.run()
    assert at.radio(key="upload_mode").value == "one run's ranks"
    at.button(key="ingest").click().run()
    assert not at.exception
    from gpuscope.store import connect

    con = connect(db)
    rows = con.execute("SELECT name, n_ranks FROM runs").fetchall()
    con.close()
    assert rows == [("job", 2)]
    assert at.query_params.get("run")  # went to the run page
    assert at.segmented_control  # the rank selector


@pytest.mark.slow
def test_separate_runs(db: Path, tmp_path: Path) -> None:
    files = [(f"{v}.json", _bytes(tmp_path, v), "application/json") for v in ("before", "after")]
    at = open_app()
    at.file_uploader[0].set_value(files)
    at.run()
    at.radio(key="upload_mode").set_value("separate runs").run()
    at.button(key="ingest").click().run()
    assert not at.exception
    assert counts(db)["runs"] == 2
    assert texts(at, "title") == ["Runs"]  # several runs: stay on the list
    assert len(at.dataframe[0].value) == 2


@pytest.mark.slow
def test_duplicate_upload_is_reported(db: Path, tmp_path: Path) -> None:
    path = training_trace("after").write(tmp_path / "dup.json")
    (rid,) = ingest(db, path)
    at = open_app()
    at.file_uploader[0].set_value(("dup.json", path.read_bytes(), "application/json"))
    at.run()
    at.button(key="ingest").click().run()
    assert at.query_params.get("run") == rid
    assert any("stored before" in t for t in texts(at, "info"))
    assert counts(db)["runs"] == 1


@pytest.mark.slow
def test_list_search_and_compare_defaults(db: Path, tmp_path: Path) -> None:
    from gpuscope.store import connect
    from gpuscope.web.samples import load_samples

    con = connect(db)
    loaded = load_samples(con, write_sample_tree(tmp_path / "samples"))
    con.close()
    ids = {r.name: r.run_id for r in loaded}
    at = open_app()
    table = at.dataframe[0].value
    assert set(table["name"]) == {"before", "after"}
    assert list(table.columns[:5]) == ["name", "run_id", "created", "gpu", "ranks"]
    assert {"step_ms", "busy_pct", "mfu_pct", "tags"} <= set(table.columns)
    # compare defaults: before -> after, whatever the order of ingest
    assert at.selectbox[0].value == ids["before"] and at.selectbox[1].value == ids["after"]
    at.text_input(key="runs_search").set_value("AFT").run()
    assert list(at.dataframe[0].value["name"]) == ["after"]
    at.text_input(key="runs_search").set_value("zzz").run()
    assert at.dataframe[0].value.empty and any("No run matches" in c for c in texts(at, "caption"))


def _select(at, rows: list[int]) -> None:
    key = next(k for k in at.session_state if str(k).startswith("runs_table_"))
    at.session_state[key] = {"selection": {"rows": rows, "columns": []}}
    at.run()


@pytest.mark.slow
def test_rename_tag_and_delete(db: Path, tmp_path: Path) -> None:
    (rid,) = ingest(db, training_trace("after").write(tmp_path / "x.json"))
    at = open_app()
    _select(at, [0])
    at.text_input(key=f"rename_text_{rid}").set_value("baseline, bf16")
    at.text_input(key=f"tags_text_{rid}").set_value("bf16, h100 , bf16")
    at.button[1].click().run()  # "Save name and tags" (the form's submit button)
    assert not at.exception
    row = at.dataframe[0].value.iloc[0]
    assert row["name"] == "baseline, bf16" and list(row["tags"]) == ["bf16", "h100"]
    _select(at, [0])
    delete = at.button(key=f"delete_{rid}")
    assert delete.disabled  # needs the confirmation first
    at.checkbox(key=f"confirm_delete_{rid}").check().run()
    at.button(key=f"delete_{rid}").click().run()
    assert not at.exception
    assert counts(db) == dict.fromkeys(counts(db), 0)
    assert any("No runs yet" in t for t in texts(at, "info"))


@pytest.mark.slow
def test_two_selected_runs_link_to_compare(db: Path, tmp_path: Path) -> None:
    ingest(db, *write_sample_tree(tmp_path / "s").iterdir())
    at = open_app()
    _select(at, [0, 1])
    links = [p.proto for p in at.get("page_link")]
    compare = [p for p in links if "Compare" in p.label]
    assert compare and all("a=" in p.query_string and "b=" in p.query_string for p in compare)


@pytest.mark.slow
def test_an_unreachable_store_is_one_line_on_the_page(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team store whose catalog cannot be reached: one error line (no password), no traceback."""
    from gpuscope.web import db as webdb

    monkeypatch.setenv("GPUSCOPE_STORE", "postgres://nobody:hunter2@127.0.0.1:1/nodb")
    webdb._open_store.clear()
    at = open_app()
    assert not at.exception
    (err,) = texts(at, "error")
    assert "cannot open the store" in err and "\n" not in err and "hunter2" not in err
    webdb._open_store.clear()


def _named_bytes(tmp_path: Path, host: str, model: str, seed: int) -> bytes:
    t = training_trace("after", seed=seed)
    t.extra_meta.update({"hostname": host, "model": model})
    return t.write(tmp_path / f"{host}.json", gz=False).read_bytes()


@pytest.mark.slow
def test_uploads_called_trace_are_named_from_their_content(db: Path, tmp_path: Path) -> None:
    """Two different files both called trace.json: the Name field shows the content's name before
    Ingest, and that is the name stored; the two runs are told apart."""
    names = []
    for host, model, seed in (("node1", "gpt2", 1), ("node2", "vit", 2)):
        at = open_app()
        at.file_uploader[0].set_value(
            ("trace.json", _named_bytes(tmp_path, host, model, seed), "application/json")
        )
        at.run()
        field = next(t for t in at.text_input if t.label == "Name")
        assert field.value.startswith(f"{model} {host}")  # shown before Ingest
        at.button(key="ingest").click().run()
        assert not at.exception, at.exception
        (title,) = texts(at, "title")
        names.append(title)
    assert names[0].startswith("gpt2 node1") and names[1].startswith("vit node2")


@pytest.mark.slow
def test_ambiguous_name_in_the_url_lists_the_matches(db: Path, tmp_path: Path) -> None:
    from gpuscope.store import connect, set_name

    ids = ingest(db, *(_write(tmp_path, v, s) for v, s in (("before", 1), ("after", 2))))
    con = connect(db)
    for rid in ids:
        set_name(con, rid, "trace")
    con.close()
    at = open_app("screens/run.py", {"run": "trace"})
    assert not at.exception
    (err,) = texts(at, "error")
    assert "names more than one run" in err and all(i in err for i in ids)
    assert not at.get("plotly_chart")


def _write(tmp_path: Path, variant: str, seed: int) -> Path:
    return training_trace(variant, seed=seed).write(tmp_path / f"{variant}{seed}.json.gz")


@pytest.mark.slow
def test_a_dropped_folder_is_one_run(db: Path, tmp_path: Path) -> None:
    """A run's folder dropped on the uploader: its rank files are one run (named after them);
    the files beside them that are not traces are left out, and the page says so."""
    rank_files = [
        (
            f"ddp_rank{r}.pt.trace.json",
            training_trace("after", rank=r, world_size=2, seed=r)
            .write(tmp_path / f"r{r}.json", gz=False)
            .read_bytes(),
            "application/json",
        )
        for r in (0, 1)
    ]
    at = open_app()
    at.file_uploader[0].set_value([*rank_files, ("timing.json", b'{"steps": 3}', "text/plain")])
    at.run()
    assert any("left out (not traces): timing.json" in c for c in texts(at, "caption"))
    assert next(t for t in at.text_input if t.label == "Name").value == "ddp"
    at.button(key="ingest").click().run()
    assert not at.exception, at.exception
    assert texts(at, "title") == ["ddp"]
    assert counts(db)["runs"] == 1 and counts(db)["ranks"] == 2


@pytest.mark.slow
def test_uploader_open_while_the_store_holds_only_samples(db: Path, tmp_path: Path) -> None:
    samples = write_sample_tree(tmp_path / "samples", steps=2)
    ingest(db, samples / "before", tags=("sample",))
    at = open_app()
    (exp,) = [e for e in at.expander if "Upload traces" in e.label]
    assert exp.proto.expanded  # nothing uploaded yet: the uploader is open
    ingest(db, _write(tmp_path, "after", 3))
    import streamlit as st

    st.cache_data.clear()
    at = open_app()
    (exp,) = [e for e in at.expander if "Upload traces" in e.label]
    assert not exp.proto.expanded  # the user's own run is there: folded away


@pytest.mark.slow
def test_a_store_fault_on_rename_is_one_line_and_the_next_action_works(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk-full error while saving a name: one plain line (no exception box), nothing written,
    the connection dropped; once the fault is gone the same action works."""
    import duckdb
    from gpuscope.web import ui as webui

    (rid,) = ingest(db, training_trace("after").write(tmp_path / "x.json"))
    at = open_app()
    real = webui.set_name

    def full(con, run_id, name):
        raise duckdb.IOException("could not write file: No space left on device")

    monkeypatch.setattr(webui, "set_name", full)
    _select(at, [0])
    at.text_input(key=f"rename_text_{rid}").set_value("renamed")
    at.button[1].click().run()
    assert not at.exception
    [err] = [e for e in texts(at, "error") if "Nothing was stored" in e]
    assert "full" in err and "\n" not in err.strip()
    monkeypatch.setattr(webui, "set_name", real)
    at = open_app()
    assert at.dataframe[0].value.iloc[0]["name"] == "x"  # unchanged
    _select(at, [0])
    at.text_input(key=f"rename_text_{rid}").set_value("renamed")
    at.button[1].click().run()
    assert not at.exception
    assert at.dataframe[0].value.iloc[0]["name"] == "renamed"


def test_a_run_that_cannot_be_analysed_is_named_in_the_list(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One broken run does not break the list, and the list says which one has no figures."""
    from gpuscope.web import data

    (rid,) = ingest(db, training_trace("after").write(tmp_path / "broken_one.json"))

    def broken(*a, **k):
        raise ValueError("internals")

    monkeypatch.setattr(data, "job", broken)  # the list shows the job's verdict
    at = open_app()
    assert not at.exception
    [note] = [c for c in texts(at, "caption") if "could not be analysed" in c]
    assert "broken\\_one" in note or "broken_one" in note
    row = at.dataframe[0].value.iloc[0]
    assert row["run_id"] == rid and pd.isna(row["step_ms"])


@pytest.mark.slow
def test_an_upload_whose_summary_runs_out_of_memory_after_the_commit_opens_its_run(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank too big to copy has its summary parts computed once the upload has committed; where
    DuckDB runs out of memory there the run is stored and whole: the page opens it, says so in
    one warning (not "Nothing was stored"), and computes what it shows from the events."""
    import duckdb
    from gpuscope.analysis import rank_summary as RS

    def planted(*a: object, **k: object) -> None:
        raise duckdb.OutOfMemoryException("Out of Memory Error: planted\nmore lines")

    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)  # the parts computed after the commit
    monkeypatch.setattr(RS, "store_outside_transaction", planted)
    at = open_app()
    at.file_uploader[0].set_value(("big.pt.trace.json", _bytes(tmp_path), "application/json"))
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception, at.exception
    assert not any("Nothing was stored" in e for e in texts(at, "error"))
    run_id = at.query_params.get("run")
    assert run_id and counts(db)["runs"] == 1
    assert texts(at, "title") == ["big"]  # its Run page
    [note] = texts(at, "warning")[:1]
    assert note.startswith("Stored run **big**") and note.endswith(  # the Markdown shown
        f"Run `{run_id}`'s summary could not be computed after the upload (Out of Memory "
        "Error\\: planted): its page computes it when it opens."
    ), note


def test_a_sample_whose_summary_runs_out_of_memory_after_the_commit_is_loaded(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sample loader, as the upload: a sample run whose summary parts run out of memory once
    it has committed is loaded (stored and whole), and its log says so in one line."""
    import duckdb
    from gpuscope.analysis import rank_summary as RS
    from gpuscope.store import connect
    from gpuscope.web.samples import load_samples

    def planted(*a: object, **k: object) -> None:
        raise duckdb.OutOfMemoryException("Out of Memory Error: planted\nmore lines")

    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)
    monkeypatch.setattr(RS, "store_outside_transaction", planted)
    said: list[str] = []
    with connect(db) as con:
        loaded = load_samples(con, write_sample_tree(tmp_path / "samples"), log=said.append)
        assert counts(db)["runs"] == len(loaded) == 2
    for r in loaded:
        assert (
            f"sample run {r.run_id} is stored, but its summary could not be computed (Out of "
            "Memory Error: planted)"
        ) in said
    assert not any(s.startswith("skipped") for s in said)
