"""`gpuscope sample`: poll the GPUs through NVML (or replay a recording), record JSONL, serve HTTP.

Exit codes: 0 after a clean stop (Ctrl-C, SIGTERM, --duration, or the end of a --no-loop replay);
2 for bad options (a --host beyond loopback without --allow-remote among them), no NVML/GPU, an
unreadable --replay file, a port already taken, or a token file that cannot be written; 1 when
sampling failed while running.

Writes to the server (step reports, trace requests) need its token, published for clients on this
machine (:mod:`gpuscope.sampler.token`); the path is printed at start.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpuscope.sampler.server import DEFAULT_HOST, DEFAULT_PORT


def _speed(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError("must be > 0")
    return v


def _positive(text: str) -> float:
    return _speed(text)


def _gpu_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1: {text!r}") from None
    if not out or any(i < 0 for i in out):
        raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1: {text!r}")
    return out


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``gpuscope sample``."""
    p = sub.add_parser(
        "sample",
        help="sample GPU utilization through NVML; record JSONL and serve /metrics",
        description="Poll every GPU through NVML every --interval-ms, append each sample to --out "
        "(JSON Lines, see docs/sampler.md) and serve them over HTTP: /metrics (Prometheus, "
        "dcgm-exporter names), /api/samples?since_ns=N, /api/status, /healthz. "
        "--replay serves a recorded file as if live, on machines without a GPU. "
        "Stop with Ctrl-C or SIGTERM.",
    )
    p.add_argument(
        "--interval-ms",
        type=_positive,
        default=100.0,
        metavar="MS",
        help="sampling interval in ms (default 100, i.e. 10 Hz)",
    )
    p.add_argument("--out", metavar="FILE", help="record the samples to this JSONL file")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only); an address "
        "reachable from other machines needs --allow-remote",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host beyond loopback: anyone who reaches the port reads the samples and "
        "step times; writes still need the token ($GPUSCOPE_SAMPLER_TOKEN or the token file)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"HTTP port (default {DEFAULT_PORT}; 0 = any free port, printed at start)",
    )
    p.add_argument("--no-serve", action="store_true", help="record only: no HTTP server")
    p.add_argument("--duration", type=_positive, metavar="S", help="stop after S seconds")
    p.add_argument(
        "--gpus", type=_gpu_list, metavar="LIST", help="sample only these NVML indices, e.g. 0,1"
    )
    p.add_argument(
        "--no-pcie",
        action="store_true",
        help="where GPM gives no PCIe rates (pre-Hopper), skip NVML's PCIe counter, which blocks "
        "~20 ms per reading (2 per GPU per poll)",
    )
    p.add_argument(
        "--buffer-s",
        type=_positive,
        default=3600.0,
        metavar="S",
        help="seconds of samples kept in memory for /api/samples (default 3600)",
    )
    g = p.add_argument_group("replay (no GPU needed)")
    g.add_argument("--replay", metavar="FILE", help="serve this recorded JSONL series as if live")
    g.add_argument(
        "--speed", type=_speed, default=None, metavar="X", help="replay X times faster (default 1)"
    )
    g.add_argument(
        "--no-loop", action="store_true", help="stop at the end of the recording instead of looping"
    )


def _fail(message: str, code: int = 2) -> int:
    print(f"gpuscope: {' '.join(message.split())}", file=sys.stderr)
    return code


def _say(message: str) -> None:
    print(f"gpuscope sample: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run until stopped; returns the exit code."""
    from gpuscope.ingest.errors import IngestError
    from gpuscope.sampler.loop import SamplerThread, SampleStore
    from gpuscope.sampler.nvml_api import NvmlUnavailable
    from gpuscope.sampler.record import SeriesWriter, make_header
    from gpuscope.sampler.server import SamplerApp, start_server
    from gpuscope.sampler.sources import LiveSource, ReplaySource

    if args.replay is None and (args.speed is not None or args.no_loop):
        return _fail("--speed and --no-loop need --replay FILE")
    if args.replay is not None and (args.gpus or args.no_pcie):
        return _fail("--gpus and --no-pcie apply to live sampling, not --replay")
    if args.no_serve and not args.out:
        return _fail("nothing to do: --no-serve without --out FILE")
    if not 0 <= args.port <= 65535:
        return _fail(f"--port {args.port} is not a TCP port")
    from gpuscope.sampler.token import TokenError, is_loopback

    remote = not args.no_serve and not is_loopback(args.host)
    if remote and not args.allow_remote:
        return _fail(
            f"--host {args.host or '(all addresses)'} serves the sampler to other machines: "
            f"pass --allow-remote to mean it, or use {DEFAULT_HOST}"
        )
    out = Path(args.out) if args.out else None
    if out is not None:
        if out.is_dir():
            return _fail(f"{out}: is a folder; --out takes a file name")
        if out.exists() and out.stat().st_size > 0 and not args.force:
            return _fail(f"{out}: already exists (use --force to overwrite)")
        if args.replay is not None and out.resolve() == Path(args.replay).resolve():
            return _fail("--out must not be the --replay file")

    try:
        if args.replay is not None:
            source: Any = ReplaySource(args.replay, speed=args.speed or 1.0, loop=not args.no_loop)
        else:
            source = LiveSource(args.interval_ms, indices=args.gpus, skip_pcie=args.no_pcie)
    except NvmlUnavailable as e:
        return _fail(f"{e}; on a machine without a GPU, serve a recording with --replay FILE")
    except IngestError as e:
        return _fail(f"--replay {e}")

    writer = None
    server = None
    stop = threading.Event()
    old_handlers: dict[signal.Signals, Any] = {}
    try:
        started_ns = time.time_ns()
        if out is not None:
            header = make_header(
                source.host, source.interval_ms, source.gpus, started_ns, **source.header_extra
            )
            try:
                writer = SeriesWriter(out, header)
            except OSError as e:
                return _fail(f"{out}: cannot write ({e.strerror or e})")
        store = SampleStore(source.host, source.gpus, source.interval_ms, args.buffer_s)
        thread = SamplerThread(source, writer=writer, store=store, duration_s=args.duration)

        def extra() -> dict[str, Any]:
            d: dict[str, Any] = {"out": str(out) if out else None}
            if source.mode == "replay":
                d.update(
                    replay_of=str(source.path),
                    speed=source.speed,
                    loop=source.loop,
                    passes=source.passes,
                )
            else:
                d.update(
                    unsupported={str(k): v for k, v in source.unsupported().items()},
                    skipped_ticks=source.skipped_ticks,
                    driver_version=source.header_extra.get("driver_version"),
                )
            return d

        app = SamplerApp(store, thread, mode=source.mode, status_extra=extra)
        if not args.no_serve:
            try:
                server = start_server(app, args.host, args.port, allow_remote=args.allow_remote)
            except TokenError as e:
                return _fail(str(e))
            except OSError as e:
                return _fail(f"cannot listen on {args.host}:{args.port} ({e.strerror or e})")
            except ValueError as e:  # a bad $GPUSCOPE_SAMPLER_* limit: one line
                return _fail(str(e))

        def on_signal(signum: int, frame: Any) -> None:
            stop.set()

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old_handlers[sig] = signal.signal(sig, on_signal)

        gpus = ", ".join(f"{g['index']}: {g.get('name')}" for g in source.gpus)
        what = (
            f"replaying {args.replay} at {source.speed:g}x"
            if source.mode == "replay"
            else "sampling"
        )
        _say(
            f"{what} {len(source.gpus)} GPU(s) [{gpus}] every {source.interval_ms:g} ms"
            + (f", recording to {out}" if out else "")
        )
        if server is not None:
            host = f"[{args.host}]" if ":" in args.host else args.host
            _say(
                f"serving http://{host}:{server.port}/metrics (also /api/samples, /api/status, /healthz)"
            )
            _say(
                f"writes (POST /api/steps, /api/trace-request) need the token in "
                f"{server.token_file}: clients on this machine read it; elsewhere set "
                "$GPUSCOPE_SAMPLER_TOKEN to it on both sides"
            )
            if remote:
                _say(
                    f"warning: listening on {args.host or 'all addresses'}, beyond this machine "
                    "(--allow-remote): anyone who reaches the port reads the GPU samples and "
                    "step times"
                )
        thread.start()
        while not stop.is_set() and not thread.finished.wait(0.25):
            pass
        thread.stop()
        thread.join(timeout=10)
        up = thread.uptime_s()
        cpu = app.status()["cpu_s"]
        pct = 100.0 * cpu / up if up > 0 else 0.0
        _say(
            f"{thread.n_samples} samples in {up:.1f} s ({thread.ended_reason or 'stopped'}); "
            f"CPU {cpu:.2f} s = {pct:.2f}% of one core" + (f"; written to {out}" if out else "")
        )
        if thread.error is not None:
            return _fail(f"sampling failed: {thread.error}", 1)
        return 0
    finally:
        for sig, h in old_handlers.items():
            signal.signal(sig, h)
        if server is not None:
            server.shutdown()
            server.server_close()
        if writer is not None:
            writer.close()
        source.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuscope.cli.sample ...``: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="gpuscope")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(["sample", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    raise SystemExit(main())
