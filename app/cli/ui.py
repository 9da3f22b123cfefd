"""`gpuscope ui`: the web dashboard (``streamlit run app/web/main.py``) on 127.0.0.1:8501 by default."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ENV_MAX_UPLOAD = "GPUSCOPE_MAX_UPLOAD_MB"
DEFAULT_MAX_UPLOAD_MB = 1024


def main_script() -> Path:
    """The Streamlit entry script (its ``.streamlit/config.toml`` sits beside it)."""
    from gpuscope import web

    return Path(web.__file__).resolve().parent / "main.py"


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
        "--host says otherwise.",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 for all)"
    )
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
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


def build_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The ``streamlit run`` argv and environment for these options."""
    from gpuscope.cli._common import store_spec
    from gpuscope.ingest.store import ENV_DATA_PATH, ENV_STORE

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
    env[ENV_STORE] = spec.location if spec.kind != "duckdb" else f"duckdb:{spec.location}"
    if spec.data_path:
        env[ENV_DATA_PATH] = spec.data_path
    env[ENV_MAX_UPLOAD] = str(max_mb)
    return argv, env


def spec_shown(env: dict[str, str]) -> str:
    from gpuscope.ingest.store import ENV_STORE, parse_spec

    return parse_spec(env[ENV_STORE]).shown()


def run(args: argparse.Namespace) -> int:
    from gpuscope.cli._common import fail, open_db

    if not 1 <= args.port <= 65535:
        return fail(f"--port {args.port}: not a port number")
    if args.max_upload_mb is not None and args.max_upload_mb < 1:
        return fail("--max-upload-mb must be at least 1")
    argv, env = build_command(args)
    if args.load_samples:
        from gpuscope.web.samples import load_samples

        con = open_db(args)
        try:
            load_samples(con, log=lambda m: print(f"gpuscope: {m}", file=sys.stderr))
        finally:
            con.close()
    host = "localhost" if args.host in ("127.0.0.1", "localhost") else args.host
    print(
        f"gpuscope: dashboard on http://{host}:{args.port}  (store {spec_shown(env)})",
        file=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)  # streamlit takes over this process (signals go straight to it)
    return 0  # pragma: no cover
