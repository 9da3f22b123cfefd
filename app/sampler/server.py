"""The sampler's HTTP face (stdlib ThreadingHTTPServer):

* ``GET /metrics``: Prometheus text exposition of the newest sample, named like dcgm-exporter;
* ``GET /api/samples?since_ns=N[&limit=K]``: buffered samples with ``t_ns > N`` as JSON;
* ``GET /api/status``: what is sampled, how, and at what CPU cost;
* ``GET /healthz``: ``ok`` while samples keep coming, 503 otherwise;
* ``POST /api/steps``, ``GET /api/steps?since=N``, ``POST /api/trace-request``: step times a
  training loop reports, and the Live page's request for the next slow step's trace
  (:mod:`gpuscope.sampler.steps`).

Every write (``POST``) is checked before its body is read, and refused with ``403``: its ``Host``
must name this server when it is bound to loopback (no DNS rebinding), an ``Origin`` must be the
sampler's own, and it must carry the sampler's token (``X-Gpuscope-Token``,
:mod:`gpuscope.sampler.token`) or come from the sampler's own origin. :func:`start_server` binds
beyond loopback only with ``allow_remote``.
"""

from __future__ import annotations

import hmac
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec
from gpuscope import __version__
from gpuscope.ingest.env import positive_int, positive_number
from gpuscope.sampler import token as tokens
from gpuscope.sampler.loop import SamplerThread, SampleStore
from gpuscope.vocabulary import nvml_fields as nf
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9401  # dcgm-exporter's is 9400: both can run on one node
PROM_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MIB = 1 << 20
ENV_MAX_CONNECTIONS = "GPUSCOPE_SAMPLER_MAX_CONNECTIONS"
ENV_IDLE_TIMEOUT = "GPUSCOPE_SAMPLER_IDLE_TIMEOUT_S"
DEFAULT_MAX_CONNECTIONS = 128  # open connections served at once (one thread each); more get 503
DEFAULT_IDLE_TIMEOUT_S = 15.0  # a connection that sends nothing for this long is closed


@dataclass(frozen=True)
class Metric:
    name: str
    help: str
    value: Callable[[dict[str, Any]], float | int | None]


def _field(name: str, scale: float | None = None) -> Callable[[dict[str, Any]], float | int | None]:
    def get(row: dict[str, Any]) -> float | int | None:
        v = row.get(name)
        if v is None or scale is None:
            return v
        return v * scale

    return get


def _fb_used(row: dict[str, Any]) -> int | None:
    used = row.get(nf.MEM_USED_BYTES)
    return None if used is None else int(used) // MIB


def _fb_free(row: dict[str, Any]) -> int | None:
    used, total = row.get(nf.MEM_USED_BYTES), row.get(nf.MEM_TOTAL_BYTES)
    return None if used is None or total is None else max(0, int(total) - int(used)) // MIB


# dcgm-exporter's names, units and (mostly) help texts, so dashboards built for it work unchanged.
METRICS: tuple[Metric, ...] = (
    Metric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", _field(nf.GPU_UTIL_PCT)),
    Metric("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", _field(nf.MEM_UTIL_PCT)),
    Metric("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", _fb_used),
    Metric("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _fb_free),
    Metric("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", _field(nf.POWER_W)),
    Metric("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", _field(nf.SM_CLOCK_MHZ)),
    Metric("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", _field(nf.MEM_CLOCK_MHZ)),
    Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", _field(nf.TEMP_C)),
    Metric(
        "DCGM_FI_PROF_SM_ACTIVE",
        "Ratio of time at least one warp was resident on an SM, averaged over "
        "all SMs (0-1; NVML GPM SM utilization).",
        _field(nf.SM_ACTIVE_PCT, 0.01),
    ),
    Metric(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of time the tensor cores were active (0-1; NVML GPM any-tensor utilization).",
        _field(nf.TENSOR_ACTIVE_PCT, 0.01),
    ),
    Metric(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "PCIe receive throughput, protocol headers and payload (in B/s).",
        _field(nf.PCIE_RX_BYTES_S),
    ),
    Metric(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "PCIe transmit throughput, protocol headers and payload (in B/s).",
        _field(nf.PCIE_TX_BYTES_S),
    ),
)


class _SampleCollector:
    """A prometheus_client collector over one sample (the newest), built per scrape."""

    def __init__(
        self,
        host: str,
        gpus: list[dict[str, Any]],
        latest: tuple[int, list[dict[str, Any]]] | None,
        total_samples: int,
    ) -> None:
        self.host, self.latest, self.total = host, latest, total_samples
        self.info = {g["index"]: g for g in gpus}

    def collect(self) -> Iterator[Any]:
        rows = self.latest[1] if self.latest else []
        names = ["gpu", "UUID", "modelName", "Hostname"]
        for m in METRICS:
            fam = GaugeMetricFamily(m.name, m.help, labels=names)
            for row in rows:
                v = m.value(row)
                if v is None:  # N/A: left out, as dcgm-exporter does
                    continue
                g = self.info.get(row["gpu"], {})
                labels = [str(row["gpu"]), str(g.get("uuid") or ""), str(g.get("name") or "")]
                fam.add_metric([*labels, self.host], float(v))
            if fam.samples:
                yield fam
        total = CounterMetricFamily(
            "gpuscope_sampler_samples",
            "Samples taken since the sampler started.",
            labels=["Hostname"],
        )
        total.add_metric([self.host], self.total)
        yield total
        if self.latest is not None:
            last = GaugeMetricFamily(
                "gpuscope_sampler_last_sample_timestamp_seconds",
                "Unix time of the newest sample.",
                labels=["Hostname"],
            )
            last.add_metric([self.host], self.latest[0] / 1e9)
            yield last


def render_metrics(
    host: str,
    gpus: list[dict[str, Any]],
    latest: tuple[int, list[dict[str, Any]]] | None,
    *,
    total_samples: int = 0,
) -> str:
    """Prometheus text exposition (format 0.0.4, by prometheus_client) of one sample; N/A readings
    are left out."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SampleCollector(host, gpus, latest, total_samples))
    return generate_latest(registry).decode("utf-8")


class SamplerApp:
    """What the handlers read: the store, the sampling thread, and facts for /api/status."""

    def __init__(
        self,
        store: SampleStore,
        thread: SamplerThread,
        *,
        mode: str,
        status_extra: Callable[[], dict[str, Any]] | None = None,
        token: str | None = None,
    ) -> None:
        self.store, self.thread, self.mode = store, thread, mode
        self.token = token or tokens.new_token()  # what a write must carry (or be same-origin)
        self.status_extra = status_extra
        from gpuscope.sampler.steps import StepLog

        self.steps = StepLog()
        self.created_mono = time.monotonic()
        self.cpu0 = time.process_time()

    def status(self) -> dict[str, Any]:
        oldest, newest, held = self.store.extent()
        up = time.monotonic() - self.created_mono
        cpu = time.process_time() - self.cpu0
        d: dict[str, Any] = {
            "version": __version__,
            "mode": self.mode,
            "host": self.store.host,
            "interval_ms": self.store.interval_ms,
            "gpus": self.store.gpus,
            "samples_total": self.store.total,
            "buffered": held,
            "buffer_capacity": self.store.capacity,
            "oldest_ns": oldest,
            "latest_ns": newest,
            "now_ns": time.time_ns(),
            "started_ns": self.thread.started_ns,
            "uptime_s": round(up, 3),
            "cpu_s": round(cpu, 3),
            "cpu_pct": round(100.0 * cpu / up, 3) if up > 0 else None,
            "running": not self.thread.finished.is_set(),
            "ended": self.thread.ended_reason or None,
        }
        if self.status_extra is not None:
            d.update(self.status_extra())
        return d

    def healthy(self) -> tuple[bool, str]:
        if self.thread.finished.is_set():
            return False, f"sampler stopped ({self.thread.ended_reason or 'unknown'})"
        _, newest, _ = self.store.extent()
        grace_s = max(5.0, 10 * self.store.interval_ms / 1000.0)
        if newest is None:
            if time.monotonic() - self.created_mono > grace_s:
                return False, "no sample yet"
            return True, "ok (starting)"
        age = (time.time_ns() - newest) / 1e9
        if age > grace_s:
            return False, f"newest sample is {age:.1f} s old"
        return True, "ok"


class _Handler(BaseHTTPRequestHandler):
    server: SamplerHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = f"gpuscope-sampler/{__version__}"

    def setup(self) -> None:
        super().setup()
        # every read, the wait for a keep-alive request too
        self.connection.settimeout(self.server.idle_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no line per scrape
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        app = self.server.app
        url = urlsplit(self.path)
        route = url.path.rstrip("/") or "/"
        if route == "/metrics":
            body = render_metrics(
                app.store.host, app.store.gpus, app.store.latest(), total_samples=app.store.total
            )
            self._send(200, body.encode(), PROM_CONTENT_TYPE)
        elif route == "/api/samples":
            self._samples(app, parse_qs(url.query))
        elif route == "/api/status":
            self._json(200, app.status())
        elif route == "/api/steps":
            self._steps_since(app, parse_qs(url.query))
        elif route == "/healthz":
            ok, why = app.healthy()
            self._send(200 if ok else 503, (why + "\n").encode(), "text/plain; charset=utf-8")
        elif route == "/":
            links = "".join(
                f'<li><a href="{p}">{p}</a></li>'
                for p in ("/metrics", "/api/samples?since_ns=0&limit=10", "/api/status", "/healthz")
            )
            self._send(
                200,
                f"<h1>gpuscope sampler</h1><ul>{links}</ul>".encode(),
                "text/html; charset=utf-8",
            )
        else:
            self._json(404, {"error": f"no such endpoint: {url.path}"})

    def _write_refusal(self) -> str | None:
        """Why this write is refused (None: allowed); see the module docstring."""
        h = self.headers
        if any(len(h.get_all(k) or []) > 1 for k in ("Host", "Origin", tokens.HEADER)):
            return "a repeated Host, Origin or token header"
        host = (h.get("Host") or "").strip().lower()
        own = self.server.own_hosts()
        if own is not None and host not in own:
            return f"Host {host[:100]!r} is not this sampler's"
        origin = h.get("Origin")
        if origin is not None and origin.strip().lower() not in {
            f"http://{x}" for x in (own or {host})
        }:
            return f"a write from another origin ({origin[:100]!r})"
        sent = h.get(tokens.HEADER)
        if sent is not None:
            if hmac.compare_digest(sent.strip().encode(), self.server.app.token.encode()):
                return None
            return "a wrong token"
        if origin is not None and own is not None:
            return None  # the sampler's own origin, its Host checked
        return f"a write needs the sampler's token (header {tokens.HEADER})"

    def do_POST(self) -> None:
        """``/api/steps`` (a step report) and ``/api/trace-request``; a JSON error otherwise."""
        from gpuscope.sampler.steps import MAX_BODY

        app = self.server.app
        route = urlsplit(self.path).path.rstrip("/")
        refusal = self._write_refusal()
        if refusal is not None:  # before the body is read: nothing of it is taken
            self.close_connection = True
            self._json(403, {"error": f"refused: {refusal}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._json(413 if length > MAX_BODY else 400, {"error": "bad Content-Length"})
            return
        raw = self.rfile.read(length) if length else b"{}"
        if route == "/api/trace-request":
            self._json(200, app.steps.request_trace())
        elif route == "/api/steps":
            try:
                self._json(200, app.steps.report(json.loads(raw)))
            except ValueError as e:  # JSONDecodeError is one
                self._json(400, {"error": str(e).splitlines()[0][:200]})
        else:
            self._json(404, {"error": f"no such endpoint: {route}"})

    def _steps_since(self, app: SamplerApp, q: dict[str, list[str]]) -> None:
        try:
            since = int(q.get("since", ["0"])[-1] or 0)
        except ValueError:
            self._json(400, {"error": "since must be an integer"})
            return
        self._json(200, app.steps.since(since))

    def _samples(self, app: SamplerApp, q: dict[str, list[str]]) -> None:
        try:
            since = int(q.get("since_ns", ["0"])[-1] or 0)
            limit_raw = q.get("limit", [""])[-1]
            limit = int(limit_raw) if limit_raw else None
            if limit is not None and limit < 0:
                raise ValueError
        except ValueError:
            self._json(400, {"error": "since_ns and limit must be integers (limit >= 0)"})
            return
        lines = app.store.since(since, limit)
        enc = msgspec.json.encode
        body = b"".join(
            (
                b'{"host":',
                enc(app.store.host),
                b',"gpus":',
                enc(app.store.gpus),
                b',"interval_ms":',
                enc(app.store.interval_ms),
                b',"samples":[',
                b",".join(lines),
                b'],"now_ns":',
                str(time.time_ns()).encode(),
                b"}",
            )
        )
        self._send(200, body, "application/json")


_BUSY_BODY = b"too many connections\n"
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
    % (len(_BUSY_BODY), _BUSY_BODY)
)


class SamplerHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` of them; idle ones time out.

    A connection over the cap is answered ``503`` at once and closed (no thread). A peer that
    resets its connection is logged in one line on stderr, not with a traceback.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        app: SamplerApp,
        *,
        max_connections: int | None = None,
        idle_timeout_s: float | None = None,
        allow_remote: bool = False,
    ) -> None:
        if not allow_remote and not tokens.is_loopback(address[0]):
            raise ValueError(
                f"--host {address[0] or '(all addresses)'} is reachable from other machines: "
                "pass --allow-remote to serve there (writes then need the token)"
            )
        self.app = app
        self.token_file: Any = None  # where the token was published, if it was
        self.max_connections = int(
            max_connections or positive_int(ENV_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS)
        )
        self.idle_timeout_s = float(
            idle_timeout_s or positive_number(ENV_IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT_S)
        )
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self.refused = 0  # connections answered 503 because of the cap
        self.resets = 0  # connections the peer reset or that timed out mid-request
        if ":" in address[0]:  # an IPv6 address such as ::1
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)  # starts the thread
        except RuntimeError as e:  # the OS gave no thread ("can't start new thread"): 503 too
            self._slots.release()
            print(
                f"gpuscope sample: connection from {_peer(client_address)} refused: {e}",
                file=sys.stderr,
                flush=True,
            )
            self._refuse(request)

    def _refuse(self, request: Any) -> None:
        """Answer 503 (busy) and close, without a thread of its own."""
        self.refused += 1
        try:
            request.settimeout(1.0)
            request.sendall(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            self.resets += 1
            what = "timed out" if isinstance(exc, TimeoutError) else "reset by the client"
            print(
                f"gpuscope sample: connection from {_peer(client_address)} {what} "
                f"({type(exc).__name__})",
                file=sys.stderr,
                flush=True,
            )
            return
        super().handle_error(request, client_address)  # a bug: keep the traceback

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def own_hosts(self) -> set[str] | None:
        """The ``Host`` values a write may carry (``name:port``, lower case) when bound to
        loopback; None when bound beyond it (no name can be known: the token decides)."""
        bound = str(self.server_address[0]).lower()
        if not tokens.is_loopback(bound):
            return None
        names = {"localhost", "127.0.0.1", "[::1]", f"[{bound}]" if ":" in bound else bound}
        own = {f"{n}:{self.port}" for n in names}
        return own | names if self.port == 80 else own

    def publish_token(self) -> None:
        """Write the app's token where clients on this machine find it (:mod:`.token`)."""
        self.token_file = tokens.publish(self.port, self.app.token)

    def server_close(self) -> None:
        super().server_close()
        if self.token_file is not None:
            tokens.withdraw(self.port, self.app.token)
            self.token_file = None


def _peer(address: Any) -> str:
    try:
        return f"{address[0]}:{address[1]}"
    except (TypeError, IndexError):
        return str(address)


def start_server(
    app: SamplerApp,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    max_connections: int | None = None,
    idle_timeout_s: float | None = None,
    allow_remote: bool = False,
    publish_token: bool = True,
) -> SamplerHTTPServer:
    """Bind (port 0 = any free port) and serve in a daemon thread; ``shutdown()`` then ``server_close()`` stop it.

    ``max_connections`` (default ``$GPUSCOPE_SAMPLER_MAX_CONNECTIONS`` or 128) and
    ``idle_timeout_s`` (seconds; default ``$GPUSCOPE_SAMPLER_IDLE_TIMEOUT_S`` or 15): see
    :class:`SamplerHTTPServer`. A ``host`` beyond loopback raises ValueError unless
    ``allow_remote``. ``publish_token``: write the app's token for local clients
    (:func:`gpuscope.sampler.token.publish`; TokenError, an OSError, when it cannot be).
    """
    server = SamplerHTTPServer(
        (host, port),
        app,
        max_connections=max_connections,
        idle_timeout_s=idle_timeout_s,
        allow_remote=allow_remote,
    )
    if publish_token:
        try:
            server.publish_token()
        except OSError:
            server.server_close()
            raise
    t = threading.Thread(
        target=server.serve_forever,
        name="gpuscope-http",
        daemon=True,
        kwargs={"poll_interval": 0.5},
    )
    t.start()
    return server
