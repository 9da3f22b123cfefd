"""`gpuscope ui`, the app's Streamlit config, the sample runs, and the Dockerfile (linted, not built)."""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from synth import write_sample_tree

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "app" / "web" / ".streamlit" / "config.toml"


def _args(*argv: str):
    from gpuscope.cli.main import build_parser

    return build_parser().parse_args(["ui", *argv])


def test_defaults_bind_loopback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpuscope.cli.ui import build_command, main_script

    monkeypatch.delenv("GPUSCOPE_MAX_UPLOAD_MB", raising=False)
    monkeypatch.setenv("GPUSCOPE_DB", str(tmp_path / "d.duckdb"))
    argv, env = build_command(_args())
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4] == str(main_script())
    flags = dict(zip(argv[5::2], argv[6::2], strict=True))
    assert flags["--server.address"] == "127.0.0.1" and flags["--server.port"] == "8501"
    assert flags["--server.maxUploadSize"] == "256"
    assert "--server.headless" not in flags
    assert env["GPUSCOPE_STORE"] == str((tmp_path / "d.duckdb").resolve())
    assert (
        main_script().is_file() and (main_script().parent / ".streamlit" / "config.toml").is_file()
    )


def test_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpuscope.cli.ui import build_command

    monkeypatch.setenv("GPUSCOPE_MAX_UPLOAD_MB", "64")
    argv, env = build_command(
        _args("--host", "0.0.0.0", "--port", "9999", "--db", str(tmp_path / "x.db"), "--headless")
    )
    flags = dict(zip(argv[5::2], argv[6::2], strict=True))
    assert (flags["--server.address"], flags["--server.port"]) == ("0.0.0.0", "9999")
    assert flags["--server.maxUploadSize"] == "64" and flags["--server.headless"] == "true"
    assert env["GPUSCOPE_STORE"] == str(tmp_path / "x.db")
    argv, _ = build_command(_args("--max-upload-mb", "2048"))
    assert "2048" in argv
    team = "postgres://u:pw@db:5432/lake"
    _, env = build_command(_args("--store", team, "--data-path", "s3://b/p"))
    assert (env["GPUSCOPE_STORE"], env["GPUSCOPE_DATA_PATH"]) == (team, "s3://b/p")


def test_run_loads_samples_then_execs_streamlit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gpuscope.cli import ui
    from gpuscope.store import connect

    monkeypatch.setenv("GPUSCOPE_SAMPLES", str(write_sample_tree(tmp_path / "samples", steps=2)))
    seen: list[list[str]] = []
    monkeypatch.setattr(ui.os, "execve", lambda exe, argv, env: seen.append(argv))
    db = tmp_path / "s.duckdb"
    for _ in range(2):  # the second start finds a non-empty store and loads nothing
        assert ui.run(_args("--db", str(db), "--load-samples", "--port", "8600")) == 0
    con = connect(db)
    rows = con.execute("SELECT name, tags FROM runs ORDER BY name").fetchall()
    con.close()
    assert rows == [("after", ["sample"]), ("before", ["sample"])]
    assert len(seen) == 2 and "8600" in seen[0]


def test_missing_samples_folder_is_fine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpuscope.store import connect
    from gpuscope.web.samples import load_samples

    con = connect(tmp_path / "e.duckdb")
    assert load_samples(con, tmp_path / "nowhere") == []
    con.close()


def test_bad_port(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuscope.cli import ui

    assert ui.run(_args("--port", "70000")) == 2
    assert "not a port" in capsys.readouterr().err


def test_streamlit_config() -> None:
    cfg = tomllib.loads(CONFIG.read_text())
    assert cfg["server"]["address"] == "127.0.0.1"
    assert cfg["server"]["maxUploadSize"] == 256
    assert cfg["server"]["showEmailPrompt"] is False and cfg["browser"]["gatherUsageStats"] is False
    # no fixed base theme: the viewer's light/dark choice applies
    assert "base" not in cfg.get("theme", {})


def test_no_pages_folder_next_to_the_entry_script() -> None:
    """A `pages/` folder beside main.py puts Streamlit in its old multipage mode, which ignores
    st.navigation on a first visit to /run or /compare."""
    assert not (REPO / "app" / "web" / "pages").exists()


# -- Dockerfile ----------------------------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _exec_form(rest: str) -> list[str]:
    import json

    return json.loads(rest)


def test_dockerfile_mirrors_make_run() -> None:
    ins = _instructions()
    ops = [op for op, _ in ins]
    assert ops[0] == "FROM" and re.fullmatch(r"python:3\.11-slim(@sha256:[0-9a-f]+)?", ins[0][1])
    assert set(ops) <= {
        "FROM",
        "ENV",
        "RUN",
        "WORKDIR",
        "COPY",
        "USER",
        "VOLUME",
        "EXPOSE",
        "HEALTHCHECK",
        "CMD",
        "ARG",
        "LABEL",
    }
    env = " ".join(rest for op, rest in ins if op == "ENV")
    db = re.search(r"GPUSCOPE_DB=(\S+)", env).group(1)  # type: ignore[union-attr]
    volumes = [v for op, rest in ins if op == "VOLUME" for v in _exec_form(rest)]
    assert any(db.startswith(v.rstrip("/") + "/") for v in volumes), (
        "the store must live on a volume"
    )
    assert ("EXPOSE", "8501") in ins
    # the compiled parser needs a C compiler when gpuscope is installed
    install = next(rest for op, rest in ins if op == "RUN" and "pip install ." in rest)
    assert install.index("install -y --no-install-recommends gcc") < install.index("pip install .")
    user = [rest for op, rest in ins if op == "USER"]
    assert user and user[-1] not in ("root", "0") and ops.index("USER") < ops.index("CMD")
    health = next(rest for op, rest in ins if op == "HEALTHCHECK")
    assert "/_stcore/health" in health and "8501" in health
    probe = _exec_form(health.split("CMD", 1)[1].strip())
    assert probe[:2] == ["python", "-c"]
    compile(probe[2], "healthcheck", "exec")
    cmd = _exec_form(next(rest for op, rest in ins if op == "CMD"))
    assert cmd[:2] == ["gpuscope", "ui"]
    # the same options as the Makefile's `run` target, plus what a container needs
    make = (REPO / "Makefile").read_text()
    make_cmd = re.search(r"gpuscope ui ([^\n]*)", make).group(1)  # type: ignore[union-attr]
    for flag in shlex.split(make_cmd):
        if flag.startswith("--"):
            assert flag in cmd, f"Dockerfile CMD lacks {flag} that `make run` passes"
    assert cmd[cmd.index("--port") + 1] == "8501" and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    from gpuscope.cli.main import build_parser

    args = build_parser().parse_args(cmd[1:])
    assert args.load_samples and args.port == 8501


def test_dockerfile_copies_what_exists_and_dockerignore_keeps_it_small() -> None:
    ignore = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for op, rest in _instructions():
        if op == "COPY" and not rest.startswith("--from"):
            *sources, _dest = rest.split()
            for s in sources:
                assert (REPO / s).exists(), f"COPY {s}: no such path"
                assert s not in ignore, f"COPY {s} but .dockerignore drops it"
    for heavy in (".venv", ".git", "data", "artifacts", "benchmarks", "*.duckdb"):
        assert heavy in ignore


def test_error_details_hidden_unless_dev(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No traceback reaches a viewer: the config and the argv both say "none"; --dev says "full"."""
    from gpuscope.cli.ui import build_command

    monkeypatch.setenv("GPUSCOPE_DB", str(tmp_path / "d.duckdb"))
    cfg = tomllib.loads(CONFIG.read_text())
    assert cfg["client"]["showErrorDetails"] == "none"
    flags = dict(zip(*(lambda a: (a[5::2], a[6::2]))(build_command(_args())[0]), strict=True))
    assert flags["--client.showErrorDetails"] == "none"
    flags = dict(
        zip(*(lambda a: (a[5::2], a[6::2]))(build_command(_args("--dev"))[0]), strict=True)
    )
    assert flags["--client.showErrorDetails"] == "full"


def test_ambiguous_run_name_is_an_error_listing_the_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`analyze NAME` where two runs share the name: one line listing both, exit non-zero."""
    from gpuscope.cli.main import main
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect
    from synth import training_trace

    db = tmp_path / "s.duckdb"
    con = connect(db)
    ids = []
    for i, v in enumerate(("before", "after")):
        d = tmp_path / str(i)
        d.mkdir()
        p = training_trace(v, seed=i).write(d / "trace.json.gz")
        ids += [r.run_id for r in ingest_paths(con, [p], name="nightly")]
    names = [con.execute("SELECT name FROM runs WHERE run_id = ?", [i]).fetchone()[0] for i in ids]
    con.close()
    # both given the same name by the user (a name made from a trace's content gets " (2)")
    assert names == ["nightly", "nightly"]
    with pytest.raises(SystemExit) as ex:
        main(["analyze", names[0], "--db", str(db)])
    assert ex.value.code != 0
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert names[0] in line and "ambiguous" in line and all(i in line for i in ids)
    assert "no such run" not in line


def test_the_server_is_execed_with_the_stop_signals_at_their_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A SIGTERM that lands while ``execve`` runs must not be lost (CI once waited 60 s for a
    dashboard stopped right after its start line): at the exec the stop signals have their
    default action and are not blocked; a stand-in exec that returns leaves the caller's
    handlers and mask as they were."""
    import signal

    from gpuscope.cli import ui

    seen: list[tuple[object, object, set[int]]] = []

    def stand_in(exe: str, argv: list[str], env: dict[str, str]) -> None:
        blocked = {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])}
        seen.append((signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT), blocked))

    def mine(signum: int, frame: object) -> None:
        raise AssertionError("not called")

    monkeypatch.setattr(ui.os, "execve", stand_in)
    before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    signal.signal(signal.SIGTERM, mine)
    try:
        assert ui.run(_args("--db", str(tmp_path / "s.duckdb"), "--headless")) == 0
        assert signal.getsignal(signal.SIGTERM) is mine
        assert not {signal.SIGTERM, signal.SIGINT} & signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        signal.signal(signal.SIGTERM, before[0])  # type: ignore[arg-type]
    assert signal.getsignal(signal.SIGINT) is before[1]
    assert len(seen) == 1 and seen[0][:2] == (signal.SIG_DFL, signal.SIG_DFL), seen
    assert not {int(signal.SIGTERM), int(signal.SIGINT)} & seen[0][2], seen


@pytest.mark.slow
def test_a_stop_at_the_exec_is_never_lost(tmp_path: Path) -> None:
    """The three places a SIGTERM can land around the exec, in a real process: due before it
    (the CLI's handler stops the command: 143), caught by Python's low-level handler just as the
    default action is put back (its Python handler skipped: what the wakeup descriptor then
    holds; planted here) and after it (the default action ends the process: -15). The server,
    a shell that creates a file, must never start."""
    import subprocess

    marker = tmp_path / "execed"
    script = f"""
import os, signal, sys
from gpuscope.cli import ui
from gpuscope.cli.main import _stop
signal.signal(signal.SIGTERM, _stop)
case = os.environ["CASE"]
real = signal.signal
def setting(sig, handler):
    if sig == signal.SIGTERM and handler is signal.SIG_DFL:
        if case == "skipped":  # the byte Python's low-level handler writes, then real() skips it
            fd = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
            os.write(fd, bytes([signal.SIGTERM]))
        done = real(sig, handler)
        if case == "after":
            os.kill(os.getpid(), signal.SIGTERM)
        return done
    return real(sig, handler)
ui.signal.signal = setting
if case == "due":
    os.kill(os.getpid(), signal.SIGTERM)
try:
    ui.exec_server(["/bin/sh", "-c", "touch {marker}"], dict(os.environ))
except SystemExit as e:
    print("stopped", e.code, file=sys.stderr)
    raise
"""
    import os

    for case, code in (("due", 143), ("skipped", 143), ("after", -15)):
        done = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "CASE": case},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code, (case, done.returncode, done.stderr)
        assert not marker.exists(), case


def test_sample_runs_are_the_folders_of_profiler_traces() -> None:
    """`make run` loads the sample runs without a "skipped sample fixes: … not a trace" line:
    ``fixes/`` holds JSON truth tables beside folders of runs, and is no run itself."""
    from gpuscope.web.samples import sample_runs

    root = Path(__file__).resolve().parents[1] / "sample_traces"
    names = [p.name for p in sample_runs(root)]
    assert {"before", "after", "ddp"} <= set(names)
    assert "fixes" not in names and "wild" not in names
