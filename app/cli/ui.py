"""`gpuscope ui`: the web dashboard (``streamlit run app/web/main.py``) on 127.0.0.1:8501 by default.

Beyond loopback it serves only with sign-in configured (``--auth-config`` /
``$GPUSCOPE_AUTH_CONFIG``, checked before the server starts) or with ``--no-auth`` said outright.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
from pathlib import Path

ENV_MAX_UPLOAD = "GPUSCOPE_MAX_UPLOAD_MB"
ENV_AUTH_CONFIG = "GPUSCOPE_AUTH_CONFIG"  # the same name as gpuscope.web.auth.ENV_AUTH_CONFIG
DEFAULT_MAX_UPLOAD_MB = 256  # the same as gpuscope.web.upload_guard.DEFAULT_MAX_UPLOAD_MB


def main_script() -> Path:
    """What ``streamlit run`` serves: ``asgi.py``, the dashboard (``main.py``) behind the upload
    guard (its ``.streamlit/config.toml`` sits beside it)."""
    from gpuscope import web

    return Path(web.__file__).resolve().parent / "asgi.py"


def _max_upload_default() -> int:
    raw = os.environ.get(ENV_MAX_UPLOAD, "")
    try:
        return int(raw) if raw.strip() else DEFAULT_MAX_UPLOAD_MB
    except ValueError:
        return DEFAULT_MAX_UPLOAD_MB


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from gpuscope.cli.main import common_db_option

    p = sub.add_parser(
        "ui",
        help="open the web dashboard",
        description="Serve the dashboard with Streamlit. It binds to 127.0.0.1 unless "
        "--host says otherwise; an address other machines can reach needs sign-in "
        "(--auth-config) or --no-auth.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; 0.0.0.0 for all, with --auth-config or --no-auth)",
    )
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument(
        "--auth-config",
        metavar="FILE",
        default=None,
        help=f"sign-in: a TOML file with Streamlit's [auth] section (OIDC) and an optional "
        f"[gpuscope] admins list (default ${ENV_AUTH_CONFIG}; see docs/security.md)",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="serve beyond loopback without sign-in when none is configured: anyone who "
        f"reaches the address can read, upload, rename and delete runs (${ENV_AUTH_CONFIG}, "
        "when set, still turns sign-in on)",
    )
    p.add_argument(
        "--load-samples",
        action="store_true",
        help="load the runs of sample_traces/ first when the store is empty",
    )
    p.add_argument("--headless", action="store_true", help="do not open a browser")
    p.add_argument(
        "--dev",
        action="store_true",
        help="show error details (tracebacks) in the browser; off by default, where a failing "
        "section shows one plain line and the traceback goes to the server log",
    )
    p.add_argument(
        "--max-upload-mb",
        type=int,
        default=None,
        metavar="MB",
        help=f"upload size limit (default ${ENV_MAX_UPLOAD} or {DEFAULT_MAX_UPLOAD_MB})",
    )
    common_db_option(p)


def auth_config_arg(args: argparse.Namespace) -> str | None:
    """The sign-in config these options name: ``--auth-config``, else ``$GPUSCOPE_AUTH_CONFIG``;
    None when neither is set. ``--no-auth`` does not clear the variable: it only allows serving
    beyond loopback when no sign-in is configured (an image's default command can say it, and a
    deployment still turns sign-in on with the variable)."""
    given = getattr(args, "auth_config", None)
    if given is None:
        given = os.environ.get(ENV_AUTH_CONFIG, "").strip() or None
    return given


HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def bind_host(raw: str) -> str:
    """``--host`` as the server binds it: white space around it dropped, an IPv6 address's
    brackets (``[::1]``) dropped; raises ValueError (one line) for anything that is neither an IP
    address nor a host name. ``""`` stays ``""`` (every interface)."""
    import ipaddress

    host = raw.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError("brackets hold an IPv6 address, e.g. [::1]") from None
        return host
    try:
        return str(ipaddress.ip_address(host)) if host else host
    except ValueError:
        pass
    if not set(host) <= HOST_CHARS or host.startswith(("-", ".")):
        raise ValueError("not an IP address or a host name")
    return host


def url_host(host: str) -> str:
    """How a bound host reads in a URL (``localhost`` for 127.0.0.1, ``[::1]`` for IPv6)."""
    if host in ("127.0.0.1", "localhost"):
        return "localhost"
    return f"[{host}]" if ":" in host else host


def build_command(
    args: argparse.Namespace, auth_config: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """The ``streamlit run`` argv and environment for these options; ``auth_config``: the checked
    sign-in config, Streamlit's only secrets file (None: sign-in off)."""
    from gpuscope.cli._common import store_spec
    from gpuscope.store import ENV_DATA_PATH, ENV_STORE

    spec = store_spec(args)
    max_mb = args.max_upload_mb if args.max_upload_mb is not None else _max_upload_default()
    argv = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(main_script()),
        "--server.address",
        args.host,
        "--server.port",
        str(args.port),
        "--server.maxUploadSize",
        str(max_mb),
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    if args.headless:
        argv += ["--server.headless", "true"]
    # No traceback reaches a viewer unless asked for (config.toml says "none" as well).
    argv += ["--client.showErrorDetails", "full" if getattr(args, "dev", False) else "none"]
    env = dict(os.environ)
    if auth_config is not None:
        argv += ["--secrets.files", str(auth_config)]
        env[ENV_AUTH_CONFIG] = str(auth_config)
    else:
        env.pop(ENV_AUTH_CONFIG, None)
    env[ENV_STORE] = spec.location if spec.kind != "duckdb" else f"duckdb:{spec.location}"
    if spec.data_path:
        env[ENV_DATA_PATH] = spec.data_path
    env[ENV_MAX_UPLOAD] = str(max_mb)
    return argv, env


def spec_shown(env: dict[str, str]) -> str:
    from gpuscope.store import ENV_STORE, parse_spec

    return parse_spec(env[ENV_STORE]).shown()


def run(args: argparse.Namespace) -> int:
    from gpuscope.cli._common import fail, open_db

    if not 1 <= args.port <= 65535:
        return fail(f"--port {args.port}: not a port number")
    try:
        args.host = bind_host(args.host)
    except ValueError as e:
        return fail(f"--host {shlex.quote(args.host)}: {e}")
    if args.max_upload_mb is not None and args.max_upload_mb < 1:
        return fail("--max-upload-mb must be at least 1")
    from gpuscope.web.auth import AuthConfigError, is_loopback, load_config

    if args.no_auth and args.auth_config is not None:
        return fail("--no-auth and --auth-config contradict each other: choose one")
    auth_path = auth_config_arg(args)
    auth_config = None
    if auth_path is not None:
        try:
            auth_config = load_config(auth_path)
        except AuthConfigError as e:
            return fail(f"sign-in config {e}")
    elif not is_loopback(args.host) and not args.no_auth:
        return fail(
            f"--host {shlex.quote(args.host)} lets other machines reach the dashboard, and sign-in is not "
            f"configured: pass --auth-config FILE (or set ${ENV_AUTH_CONFIG}) so visitors sign "
            "in, or --no-auth to serve it to anyone who reaches it (docs/security.md)"
        )
    argv, env = build_command(args, auth_config.path if auth_config else None)
    if args.load_samples:
        from gpuscope.web.samples import load_samples

        con = open_db(args)
        try:
            load_samples(con, log=lambda m: print(f"gpuscope: {m}", file=sys.stderr))
        finally:
            con.close()
    host = url_host(args.host)
    signin = f"sign-in by {auth_config.path}" if auth_config else "no sign-in"
    print(
        f"gpuscope: dashboard on http://{host}:{args.port}  (store {spec_shown(env)}; {signin})",
        file=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    exec_server(argv, env)
    return 0  # only a stand-in execve returns (tests)


STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def exec_server(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process with the server (``os.execve``); signals then go straight to it.

    Until here a SIGTERM or Ctrl-C stops the command through the CLI's handler, which Python runs
    between two bytecodes. One that lands while ``execve`` runs would run no handler, and the
    server would start without it and serve on. So a handler already due runs first (the command
    stops there); then the stop signals get their default action, which ends the process as it
    would end the server. One caught in between by Python's low-level handler, whose Python
    handler would then be skipped, is read back from the wakeup file descriptor: the command
    stops instead of starting the server."""
    if threading.current_thread() is not threading.main_thread():
        os.execve(argv[0], argv, env)
        return
    from gpuscope.store import request_stop

    old = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    r, w = os.pipe()  # not inherited by the server (close-on-exec)
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, [])  # runs a handler already due: a stop
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(old_fd)
        try:
            caught = os.read(r, 512)
        except BlockingIOError:
            caught = b""
        for sig in sorted(STOP_SIGNALS & set(caught)):
            request_stop(sig)
            raise SystemExit(128 + sig)
        os.execve(argv[0], argv, env)
    finally:  # reached only when the server did not start: the handlers as they were
        signal.set_wakeup_fd(old_fd)
        for sig, handler in old.items():
            if handler is not None:
                signal.signal(sig, handler)
        os.close(r)
        os.close(w)
