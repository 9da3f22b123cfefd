"""The friction a new user met (issue 23), each as the user sees it: `check` without a bound names
every bound; traces of one process get distinct names; the Runs table keeps its Run id, Tags and
Open button whole; README says what `make test` installs; `make run` prints no setuptools banner."""

from __future__ import annotations

import argparse
import io
import re
import sys
from pathlib import Path

import pytest
from clitools import run_cli
from tracegen import TraceBuilder

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))


def test_check_without_a_bound_names_all_four(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.cli import check

    parser = argparse.ArgumentParser()
    check.add_parser(parser.add_subparsers())
    bounds = sorted(
        a.option_strings[0]
        for sp in parser._subparsers._group_actions[0].choices.values()  # type: ignore[union-attr]
        for a in sp._actions
        if a.option_strings
        and re.match(r"--(max|min)-", a.option_strings[0])
        and a.option_strings[0] != "--max-regression"  # the gate's threshold, not a bound
    )
    assert bounds == sorted(check.BOUNDS) and "--min-busy-pct" in bounds
    code, _, err = run_cli(capsys, "check", "x", "--db", str(tmp_path / "s"))
    assert code == 2 and err.count("\n") == 1
    for b in bounds:
        assert b in err, err
    assert "--baseline" in err


def _span(i: int) -> TraceBuilder:
    b = TraceBuilder(extra_meta={"baseTimeNanoseconds": 1_790_857_026_000_000_000})
    b.step(1, 0, 100 + i)  # four different spans of one process, one time base
    b.launch("k", 5, 10, 20)
    return b


def test_four_traces_of_one_process_get_distinct_names(tmp_path: Path) -> None:
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect
    from gpuscope.web.uploads import SEPARATE, ingest_uploads

    class Up(io.BytesIO):
        name = "trace.json"

    con = connect(tmp_path / "s")
    files = [Up(_span(i).write(tmp_path / f"t{i}.json").read_bytes()) for i in range(4)]
    res = ingest_uploads(con, files, mode=SEPARATE)
    names = [r.name for r in res]
    base = names[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", base)  # the shared time base
    assert names == [base, f"{base} (2)", f"{base} (3)", f"{base} (4)"]
    # a fifth, from a terminal, later: the next number; a name from a file is the file's, and a
    # second file of that name gets " (2)" too (issue 46: `analyze myjob` must not be ambiguous);
    # a name the user gives is kept as it is
    d = tmp_path / "x"
    d.mkdir()
    [fifth] = ingest_paths(con, [_span(9).write(d / "trace.json")])
    [named] = ingest_paths(con, [_span(10).write(tmp_path / "myjob.json")])
    [again] = ingest_paths(con, [_span(11).write(d / "myjob.json")])
    [given] = ingest_paths(con, [_span(12).write(d / "other.json")], name="myjob")
    assert fifth.name == f"{base} (5)"
    assert (named.name, again.name, given.name) == ("myjob", "myjob (2)", "myjob")


def test_uploads_named_from_their_files_are_told_apart(tmp_path: Path) -> None:
    """Issue 46: traces uploaded one by one, named like ``rank0.pt.trace.json`` (a stem that names
    nothing once the rank part is gone) or sharing a file name, became runs of one name."""
    from gpuscope.store import connect
    from gpuscope.web.uploads import ONE_RUN, ingest_uploads

    def up(name: str, i: int) -> io.BytesIO:
        f = io.BytesIO(_span(20 + i).write(tmp_path / f"u{i}.json").read_bytes())
        f.name = name  # type: ignore[attr-defined]
        return f

    con = connect(tmp_path / "s")
    names = [
        ingest_uploads(con, [up(n, i)], mode=ONE_RUN)[0].name
        for i, n in enumerate(
            ["rank0.pt.trace.json", "rank0.pt.trace.json", "job.json", "job.json"]
        )
    ]
    base = names[0]
    assert names == [base, f"{base} (2)", "job", "job (2)"]
    # two rank files of one run, uploaded twice: the second run's name gets " (2)"
    pair = [[up("ddp_rank0.json", 10 + 2 * k), up("ddp_rank1.json", 11 + 2 * k)] for k in range(2)]
    runs = [ingest_uploads(con, files, mode=ONE_RUN)[0].name for files in pair]
    assert runs == ["ddp", "ddp (2)"]
    con.close()
    con.close()


def test_readme_says_what_make_test_installs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    make = (REPO / "Makefile").read_text(encoding="utf-8")
    line = next(ln for ln in readme.splitlines() if ln.startswith("make test "))
    deps = re.search(r"^test:(.*)$", make, re.M)
    assert deps and "browser" in deps.group(1) and "postgres" in deps.group(1)
    assert "chromium" in line and "PostgreSQL" in line


def test_make_run_installs_quietly() -> None:
    """`make run` (through the install stamp) prints no setuptools banner: the build backend's
    warnings (the strict-editable notice) are silenced; errors still fail the install."""
    make = (REPO / "Makefile").read_text(encoding="utf-8")
    rule = make.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    install = next(ln for ln in rule.splitlines() if "editable_mode=strict" in ln)
    assert install.strip().startswith("PYTHONWARNINGS=ignore ") and "|" not in install


@pytest.mark.slow
def test_runs_table_keeps_run_id_tags_and_open_whole(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import json

    from apptools import app_store, ingest, open_app, texts
    from gpuscope.web import ui

    # the table is the subject, not the store: a DuckDB file (ingested before the app opens)
    db = app_store(tmp_path, monkeypatch, lake=False)
    long = "a run with a long name, 2026-10-01 12:17:06, after the fixes"
    p = _span(0).write(tmp_path / f"{long}.json")
    (rid,) = ingest(db, p, tags=("sample", "bf16", "batch-32"))
    at = open_app()
    spec = json.loads(at.dataframe[0].proto.columns)
    widths = {k: v.get("width") for k, v in spec.items()}
    # a run id (12 hex digits), two tags and a date fit their columns at 1440 px, where every
    # column shows whole (tests/e2e/test_browser_runs_list.py reads it in chromium)
    assert widths["run_id"] >= 12 * 8 + 8 and widths["tags"] >= 2 * 60 and widths["created"] >= 120
    key = next(k for k in at.session_state if str(k).startswith("runs_table_"))
    at.session_state[key] = {"selection": {"rows": [0], "columns": []}}
    at.run()
    links = [p.proto for p in at.get("page_link")]
    [open_link] = [p for p in links if "run=" in p.query_string and "a=" not in p.query_string]
    assert open_link.label == "Open the run" and ui.md(long, None) in open_link.help
    assert any(
        long.replace(",", "") in t.replace(",", "").replace("\\", "") for t in texts(at, "markdown")
    )
    assert rid in " ".join(texts(at, "markdown"))
