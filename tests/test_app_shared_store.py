"""AppTest: the Runs page follows the store when other processes write it (`gpuscope ingest`,
`gpuscope delete`, `gpuscope runs --rename`): the next rerun shows it, with the same server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from clitools import cli_in_process

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, open_app, texts
from synth import training_trace


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return app_store(tmp_path, monkeypatch)


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpuscope ARGS --db DB` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def trace(tmp_path: Path, host: str) -> Path:
    t = training_trace("after")
    t.extra_meta.update({"hostname": host})  # bytes of its own: a run id of its own
    return t.write(tmp_path / f"{host}.pt.trace.json")


def names(at) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(at.dataframe[0].value["name"]) if at.dataframe else []


@pytest.mark.slow
def test_the_runs_table_follows_external_writes_after_a_rerun(db: Path, tmp_path: Path) -> None:
    at = open_app()
    assert any("No runs yet" in t for t in texts(at, "info"))

    first = cli(db, "ingest", str(trace(tmp_path, "a")), "--name", "first")
    assert first.returncode == 0, first.stderr
    at.run()
    assert not at.exception
    assert names(at) == ["first"]

    second = cli(db, "ingest", str(trace(tmp_path, "b")), "--name", "second")
    assert second.returncode == 0, second.stderr
    at.run()
    assert names(at) == ["first", "second"]

    renamed = cli(db, "runs", "--rename", first.stdout.strip(), "renamed")
    assert renamed.returncode == 0, renamed.stderr
    at.run()
    assert names(at) == ["renamed", "second"]

    gone = cli(db, "delete", second.stdout.strip())
    assert gone.returncode == 0, gone.stderr
    at.run()
    assert names(at) == ["renamed"]


@pytest.mark.slow
def test_a_write_in_the_app_is_seen_by_the_cli_at_once(db: Path, tmp_path: Path) -> None:
    """The app's upload is committed for every process: `gpuscope runs` lists it while the app
    (and its open store) is still up."""
    data = trace(tmp_path, "c").read_bytes()
    at = open_app()
    at.file_uploader[0].set_value(("mine.pt.trace.json", data, "application/json"))
    at.run()
    at.button(key="ingest").click().run()
    assert not at.exception
    run_id = at.query_params.get("run")
    listed = cli(db, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert run_id and run_id in listed.stdout and "mine" in listed.stdout


def test_a_legacy_store_held_by_another_process_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A legacy DuckDB file (``duckdb:FILE``) is one process's: when another process holds it, the
    dashboard says so in one line naming that process, and points at the shared store."""
    path = tmp_path / "old.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time\n"
            "con = duckdb.connect(sys.argv[1])\n"
            "print('open', flush=True)\n"
            "time.sleep(300)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        monkeypatch.setenv("GPUSCOPE_STORE", f"duckdb:{path}")
        at = open_app()
    finally:
        holder.kill()
        holder.wait()
    assert not at.exception
    (shown,) = texts(at, "error")
    err = shown.replace("\\", "")  # as the reader sees it (Markdown escapes dropped)
    assert f"PID {holder.pid}" in err and str(path) in err
    assert "store folder" in err and "\n" not in err.strip()
    assert "stop" not in err.lower()  # nobody is told to stop their dashboard


@pytest.mark.slow
def test_the_generation_is_read_once_per_script_run(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cached read of a page is keyed by the store's generation: one catalog query per
    script run, however many reads the page makes (the Run page makes dozens)."""
    from gpuscope.store import Store

    # the run stored in this process (what is read per script run is the subject, not the writer)
    first = cli_in_process("ingest", str(trace(tmp_path, "g")), "--name", "g", "--db", str(db))
    assert first.returncode == 0, first.stderr
    reads = []
    real = Store.generation

    def counted(self: Store) -> int:
        reads.append(1)
        return real(self)

    monkeypatch.setattr(Store, "generation", counted)
    at = open_app("screens/run.py", {"run": first.stdout.strip()})
    assert not at.exception and texts(at, "title") == ["g"]
    reads.clear()
    at.run()
    assert len(reads) == 1
    at.switch_page("screens/runs.py").run()
    assert not at.exception and names(at) == ["g"]
    assert len(reads) == 2


@pytest.mark.slow
def test_a_rename_with_tags_is_one_commit(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saving a name and tags is one transaction: when the tags fail, the new name is not kept
    either (no other process ever sees one without the other)."""
    import duckdb
    from gpuscope.web import ui as webui

    # the run stored in this process; what another process sees after the failed save is the
    # subject (`gpuscope runs` below)
    done = cli_in_process(
        "ingest", str(trace(tmp_path, "r")), "--name", "before-rename", "--db", str(db)
    )
    assert done.returncode == 0, done.stderr
    rid = done.stdout.strip()

    def broken(con, run_id, tags):  # type: ignore[no-untyped-def]
        raise duckdb.IOException("could not write file: Input/output error")

    monkeypatch.setattr(webui, "set_tags", broken)
    at = open_app()
    key = next(k for k in at.session_state if str(k).startswith("runs_table_"))
    at.session_state[key] = {"selection": {"rows": [0], "columns": []}}
    at.run()
    at.text_input(key=f"rename_text_{rid}").set_value("after-rename")
    at.text_input(key=f"tags_text_{rid}").set_value("x, y")
    at.button[1].click().run()
    assert not at.exception
    assert any("Nothing was stored" in e for e in texts(at, "error"))
    listed = cli(db, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "before-rename" in listed.stdout and "after-rename" not in listed.stdout
