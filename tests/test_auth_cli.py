"""`gpuscope ui` and sign-in: no address beyond loopback without sign-in unless --no-auth says so,
and a sign-in config that Streamlit could not use is one line, exit 2, before the server starts."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clitools import run_cli

GOOD = {
    "redirect_uri": "https://gpuscope.example.com/oauth2callback",
    "cookie_secret": "c" * 64,
    "client_id": "gpuscope",
    "client_secret": "s3cret",
    "server_metadata_url": "https://idp.example.com/.well-known/openid-configuration",
}


def write_config(path: Path, auth: dict[str, object] | None = None, extra: str = "") -> Path:
    """A sign-in config file: ``[auth]`` with ``auth`` (GOOD by default), then ``extra``."""
    import json

    lines = ["[auth]"] + [f"{k} = {json.dumps(v)}" for k, v in (auth or GOOD).items()]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


@pytest.fixture
def execs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> list[tuple[list[str], dict[str, str]]]:
    """Where `gpuscope ui` would hand over to streamlit: (argv, env) recorded, nothing started."""
    from gpuscope.cli import ui

    seen: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(ui.os, "execve", lambda exe, argv, env: seen.append((argv, env)))
    monkeypatch.delenv("GPUSCOPE_AUTH_CONFIG", raising=False)
    monkeypatch.setenv("GPUSCOPE_DB", str(tmp_path / "store.duckdb"))
    return seen


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(zip(argv[5::2], argv[6::2], strict=True))


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "gpu-box.example.com", ""])
def test_beyond_loopback_without_sign_in_is_refused(capsys, execs, host: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli(capsys, "ui", "--host", host, "--headless")
    assert code == 2 and not execs and out == ""
    assert err.count("\n") == 1, err  # one line
    assert f"--host {shlex.quote(host)} lets other machines reach the dashboard" in err
    assert "--auth-config FILE" in err and "--no-auth" in err and "GPUSCOPE_AUTH_CONFIG" in err


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_no_sign_in(capsys, execs, host: str) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_cli(capsys, "ui", "--host", host, "--headless")
    assert code == 0 and len(execs) == 1, err
    argv, env = execs[0]
    assert "--secrets.files" not in argv and "GPUSCOPE_AUTH_CONFIG" not in env
    assert "no sign-in" in err


def test_no_auth_serves_beyond_loopback(capsys, execs) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_cli(capsys, "ui", "--host", "0.0.0.0", "--no-auth", "--headless")
    assert code == 0 and len(execs) == 1, err
    argv, env = execs[0]
    assert _flags(argv)["--server.address"] == "0.0.0.0"
    assert "--secrets.files" not in argv and "GPUSCOPE_AUTH_CONFIG" not in env
    assert "no sign-in" in err


def test_no_auth_does_not_turn_off_a_configured_sign_in(
    capsys, execs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """An image's command may say --no-auth; a deployment that sets $GPUSCOPE_AUTH_CONFIG still
    gets sign-in (the safer reading), and a broken file is still refused."""
    cfg = write_config(tmp_path / "auth.toml")
    monkeypatch.setenv("GPUSCOPE_AUTH_CONFIG", str(cfg))
    code, _, err = run_cli(capsys, "ui", "--host", "0.0.0.0", "--no-auth", "--headless")
    assert code == 0 and len(execs) == 1, err
    assert _flags(execs[0][0])["--secrets.files"] == str(cfg.resolve())
    assert execs[0][1]["GPUSCOPE_AUTH_CONFIG"] == str(cfg.resolve())
    monkeypatch.setenv("GPUSCOPE_AUTH_CONFIG", str(tmp_path / "missing.toml"))
    code, _, err = run_cli(capsys, "ui", "--host", "0.0.0.0", "--no-auth", "--headless")
    assert code == 2 and len(execs) == 1 and "missing.toml: no such file" in err


def test_auth_config_is_streamlits_only_secrets_file(capsys, execs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = write_config(tmp_path / "auth.toml", extra='[gpuscope]\nadmins = ["Ana@Example.com"]\n')
    code, _, err = run_cli(capsys, "ui", "--host", "0.0.0.0", "--auth-config", str(cfg))
    assert code == 0 and len(execs) == 1, err
    argv, env = execs[0]
    assert _flags(argv)["--secrets.files"] == str(cfg.resolve())
    assert env["GPUSCOPE_AUTH_CONFIG"] == str(cfg.resolve())
    assert f"sign-in by {cfg.resolve()}" in err


def test_auth_config_from_the_environment(
    capsys, execs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cfg = write_config(tmp_path / "auth.toml")
    monkeypatch.setenv("GPUSCOPE_AUTH_CONFIG", str(cfg))
    code, _, err = run_cli(capsys, "ui", "--host", "0.0.0.0")
    assert code == 0 and len(execs) == 1, err
    assert _flags(execs[0][0])["--secrets.files"] == str(cfg.resolve())


def test_no_auth_and_auth_config_together_are_refused(capsys, execs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = write_config(tmp_path / "auth.toml")
    code, _, err = run_cli(capsys, "ui", "--no-auth", "--auth-config", str(cfg))
    assert code == 2 and not execs
    assert err.count("\n") == 1 and "--no-auth and --auth-config" in err


BAD_CONFIGS = [
    # (what the file holds, a part of the one line that names the problem)
    (None, "no such file"),
    ("[auth\nredirect_uri = ", "not valid TOML"),
    ('title = "no auth here"\n', "no [auth] section"),
    ({k: v for k, v in GOOD.items() if k != "client_secret"}, "[auth] lacks client_secret"),
    ({"redirect_uri": GOOD["redirect_uri"]}, "lacks cookie_secret, client_id, client_secret"),
    ({**GOOD, "client_id": ""}, "[auth] client_id must be a non-empty string"),
    ({**GOOD, "client_id": 12}, "[auth] client_id must be a non-empty string"),
    ({**GOOD, "redirect_uri": "https://gpuscope.example.com/"}, "ending in /oauth2callback"),
    ({**GOOD, "redirect_uri": "gpuscope.example.com/oauth2callback"}, "redirect_uri must be"),
    ({**GOOD, "server_metadata_url": "idp.example.com"}, "server_metadata_url must be an http"),
    ({**GOOD, "cookie_secret": "short"}, "cookie_secret is shorter than 32 characters"),
    ((GOOD, '[gpuscope]\nadmins = "ana@example.com"\n'), "admins must be a list"),
    ((GOOD, "[gpuscope]\nadmins = [1]\n"), "admins must be a list"),
    ((GOOD, "[gpuscope]\nadmin = []\n"), "unknown key(s) admin"),
]


@pytest.mark.parametrize(("content", "says"), BAD_CONFIGS, ids=[s for _, s in BAD_CONFIGS])
def test_a_bad_config_is_one_line_exit_2_before_anything_starts(
    capsys, execs, tmp_path: Path, content: object, says: str
) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "auth.toml"
    if isinstance(content, str):
        cfg.write_text(content)
    elif isinstance(content, dict):
        write_config(cfg, content)
    elif isinstance(content, tuple):
        write_config(cfg, content[0], content[1])
    store = tmp_path / "never.duckdb"
    code, out, err = run_cli(
        capsys, "ui", "--host", "0.0.0.0", "--auth-config", str(cfg), "--db", str(store),
        "--load-samples",
    )  # fmt: skip
    assert code == 2 and not execs and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"gpuscope: sign-in config {cfg}: ") and says in err, err
    assert not store.exists()  # --load-samples did not run: nothing happened before the check


def test_a_folder_is_not_a_config(capsys, execs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_cli(capsys, "ui", "--auth-config", str(tmp_path))
    assert code == 2 and not execs and "a folder, not a TOML file" in err


def test_the_port_placeholder_streamlit_fills_in_is_accepted(tmp_path: Path) -> None:
    from gpuscope.web.auth import load_config

    cfg = write_config(
        tmp_path / "a.toml", {**GOOD, "redirect_uri": "http://localhost:{port}/oauth2callback"}
    )
    assert load_config(cfg).redirect_uri == "http://localhost:{port}/oauth2callback"


def _cli_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUSCOPE_AUTH_CONFIG"}
    env["GPUSCOPE_DB"] = str(tmp_path / "store.duckdb")
    return env


@pytest.mark.slow
def test_real_process_refuses_to_bind_beyond_loopback(tmp_path: Path) -> None:
    """The installed command, in a process of its own: exit 2, one line, no server."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope", "ui", "--host", "0.0.0.0", "--headless"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_cli_env(tmp_path),
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "sign-in is not configured" in lines[0], proc.stderr


@pytest.mark.slow
def test_real_process_refuses_an_incomplete_config(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "auth.toml", {k: v for k, v in GOOD.items() if k != "client_id"})
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope", "ui", "--auth-config", str(cfg), "--headless"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_cli_env(tmp_path),
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip()
        == f"gpuscope: sign-in config {cfg}: [auth] lacks client_id (docs/security.md)"
    )
