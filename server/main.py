"""Server assembly and process entry: `create_server(settings) -> (server, port)`, `serve(settings)`, `main()`.

Registers PlacementService, ClusterRegistry, health and reflection; SIGTERM turns health NOT_SERVING, drains and exits 0.
Health of ClusterRegistry and of the server ("") follows the registry's store (its probe); PlacementService's stays
SERVING while the store is lost (Place, Evaluate and Compare need none).
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from placement.v1 import registry_pb2_grpc as rpb_grpc
from server.interceptors import TelemetryInterceptor, TokenAuthInterceptor
from server.pool import SolvePool
from server.registry_service import REGISTRY_SERVICE_NAME, RegistryHolder, RegistryServicer
from server.servicer import PlacementServicer
from server.settings import Settings, parse_settings
from server.telemetry import Metrics, configure_logging
from server.workers import WorkerProcesses

__all__ = ["SERVICE_NAME", "PlacementServer", "create_server", "main", "serve"]

_log = logging.getLogger("placement.server")

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["PlacementService"].full_name
_SPARE_GRPC_THREADS = 8  # beyond every admitted solve: health checks and refusals never wait for a thread


_WORKERS_START_S = 120.0  # how long `start` waits for the solve processes to import the solver


class PlacementServer:
    """A started-or-not gRPC server with its solve pool, health and metrics; `stop` shuts all down gracefully.

    It has the methods of `grpc.Server` that callers use (start, stop, wait_for_termination, add_*_port).
    """

    def __init__(
        self,
        settings: Settings,
        server: Any,
        servicer: PlacementServicer,
        pool: SolvePool,
        health_servicer: Any,
        metrics: Metrics,
        registry: RegistryHolder | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry or RegistryHolder(settings.replace(registry="off"))
        self.grpc_server = server
        self.servicer = servicer
        self.health = health_servicer
        self.metrics = metrics
        self.metrics_port: int | None = None
        self._pool = pool
        self._lock = threading.Lock()
        self._stopped: threading.Event | None = None

    def add_insecure_port(self, address: str) -> int:
        return int(self.grpc_server.add_insecure_port(address))

    def add_secure_port(self, address: str, credentials: Any) -> int:
        return int(self.grpc_server.add_secure_port(address, credentials))

    def start(self) -> None:
        processes = self._pool.processes
        if processes is not None and not processes.wait_ready(_WORKERS_START_S):
            _log.warning("solve processes not ready", extra={"fields": {"waited_s": _WORKERS_START_S}})
        self.grpc_server.start()
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        # the registry's entry and the server's ("") follow the store; PlacementService (stateless) serves on
        self.registry.on_health = self._registry_health
        self.registry.start_probe()
        self._registry_health(self.registry.healthy, "")
        if self.settings.metrics_port is not None:
            token = self.settings.bearer_token() if self.settings.metrics_require_token else None
            self.metrics_port = self.metrics.serve(
                self.settings.metrics_port, self.settings.metrics_host, token
            )

    def _registry_health(self, healthy: bool, why: str) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if healthy else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", REGISTRY_SERVICE_NAME):
            self.health.set(name, status)

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return bool(self.grpc_server.wait_for_termination(timeout))

    def stop(self, grace: float | None) -> threading.Event:
        """Begin shutdown; the returned event is set once every call has ended.

        Health turns NOT_SERVING at once. With a grace period: new calls are still taken for `drain_s` (load
        balancers see NOT_SERVING first), then refused; running solves are asked for their best answer at 80% of
        the grace, and what still runs at its end is cancelled. With `grace` None, everything ends now.
        """
        with self._lock:
            if self._stopped is not None:
                return self._stopped
            done = self._stopped = threading.Event()
        self.health.enter_graceful_shutdown()
        _log.info("shutting down", extra={"fields": {"grace_s": grace, "drain_s": self.settings.drain_s}})

        def finish() -> None:
            if grace is not None and self.settings.drain_s > 0:
                time.sleep(self.settings.drain_s)
            timer: threading.Timer | None = None
            if grace is None or grace <= 0:
                self.servicer.stop_all()
            else:
                timer = threading.Timer(0.8 * grace, self.servicer.stop_all)
                timer.daemon = True
                timer.start()
            self.grpc_server.stop(grace).wait()
            if timer is not None:
                timer.cancel()
            self.servicer.stop_all()
            self._pool.shutdown(wait=False)
            self.registry.close()
            self.metrics.close()
            _log.info("stopped")
            done.set()

        if grace is None:
            finish()
        else:
            threading.Thread(target=finish, name="placement-shutdown", daemon=True).start()
        return done


def _read(name: str, path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise OSError(f"{name} {path}: cannot read it ({e.strerror})") from None
    if not data.strip():
        raise OSError(f"{name} {path} is empty")
    return data


def _credentials(settings: Settings) -> Any:
    """TLS server credentials; with `tls_client_ca`, clients must present a certificate signed by it (mTLS)."""
    if settings.tls_cert is None or settings.tls_key is None:
        raise ValueError("TLS needs both --tls-cert and --tls-key")
    key = _read("tls_key", settings.tls_key)
    cert = _read("tls_cert", settings.tls_cert)
    if settings.tls_client_ca is None:
        return grpc.ssl_server_credentials([(key, cert)])
    ca = _read("tls_client_ca", settings.tls_client_ca)
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


_WILDCARDS = ("", "*", "::", "0.0.0.0")


def _bind_problem(host: str, port: int) -> str | None:
    """Why `host`:`port` cannot be listened on, found before gRPC tries (its failure is a raw log line on stderr
    and a vague "Failed to bind"); None when some address of `host` binds, as gRPC needs."""
    name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if name.startswith(("unix:", "unix-abstract:", "vsock:")):
        return None  # not an IP address: gRPC's own check stands
    try:
        infos = socket.getaddrinfo(name or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        return f"{name} does not resolve ({getattr(e, 'strerror', None) or e})"
    addrs = [(family, addr) for family, _, _, _, addr in infos]
    if name in _WILDCARDS:  # gRPC falls back to IPv4 where IPv6 is off
        addrs.append((socket.AF_INET, ("0.0.0.0", port)))
    first: OSError | None = None
    for family, addr in addrs:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(addr)
            return None
        except OSError as e:
            first = first or e
    code = first.errno if first is not None else None
    if code == errno.EADDRINUSE:
        return f"port {port} is in use"
    if code == errno.EADDRNOTAVAIL:
        return f"{name} is not an address of this machine"
    if code == errno.EACCES:
        return f"port {port} needs privileges (ports below 1024)"
    return (first.strerror if first is not None else None) or "no address of it binds"


def _bind_error(settings: Settings, reason: object) -> OSError:
    """One line: the address, why, and where host and port came from (flag, variable or default)."""
    return OSError(
        f"cannot bind {settings.host}:{settings.port}: {reason}; host from {settings.source_of('host')}, "
        f"port from {settings.source_of('port')}"
    )


def create_server(settings: Settings) -> tuple[PlacementServer, int]:
    """Build (not start) the server bound to settings.host:settings.port; returns it and the bound port.

    Raises OSError when the address cannot be bound (one line naming it, the reason and where host and port came
    from) or a TLS file cannot be read, ValueError when the token file is unreadable or empty (auth fails closed:
    the server does not start).
    """
    problem = _bind_problem(settings.host, settings.port)
    if problem is not None:
        raise _bind_error(settings, problem)
    token = settings.bearer_token()
    credentials = _credentials(settings) if settings.tls_cert else None
    metrics = Metrics()
    processes = (
        WorkerProcesses(settings.workers, settings, metrics) if settings.solve_mode == "process" else None
    )
    pool = SolvePool(settings.workers, settings.queue_limit, metrics, settings.max_queued_bytes, processes)
    registry = RegistryHolder(settings)
    servicer = PlacementServicer(settings, pool, metrics, registry.resolve, registry.ends)
    health_servicer = health.HealthServicer(
        experimental_non_blocking=True, experimental_thread_pool=ThreadPoolExecutor(max_workers=1)
    )
    interceptors: list[Any] = [TelemetryInterceptor(metrics, settings.request_limits())]
    if token:
        interceptors.append(TokenAuthInterceptor(token))
    threads = settings.workers + settings.queue_limit + _SPARE_GRPC_THREADS
    server = grpc.server(
        ThreadPoolExecutor(max_workers=threads, thread_name_prefix="placement-grpc"),
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", settings.max_message_bytes),
            ("grpc.max_send_message_length", settings.max_message_bytes),
            ("grpc.so_reuseport", 0),  # a port in use is an error, not a silent share
        ],
    )
    pb_grpc.add_PlacementServiceServicer_to_server(servicer, server)
    if registry.enabled:
        rpb_grpc.add_ClusterRegistryServicer_to_server(RegistryServicer(settings, registry, servicer), server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            SERVICE_NAME,
            *([REGISTRY_SERVICE_NAME] if registry.enabled else []),
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    wrapped = PlacementServer(settings, server, servicer, pool, health_servicer, metrics, registry)
    address = f"{settings.host}:{settings.port}"
    try:
        port = (
            wrapped.add_secure_port(address, credentials)
            if credentials is not None
            else wrapped.add_insecure_port(address)
        )
    except RuntimeError as e:  # grpc raises RuntimeError when it cannot bind
        port = 0
        cause: Exception | None = e
    else:
        cause = None
    if port == 0:
        pool.shutdown()
        raise _bind_error(settings, cause or "address in use or unavailable")
    return wrapped, port


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT, then shut down gracefully (settings.grace_s); returns the exit code 0."""
    server, port = create_server(settings)
    try:
        server.registry.open()  # a wrong --registry fails here, at startup, not on the first call
    except Exception as e:
        server.stop(None)
        raise OSError(f"cannot open the registry {settings.registry or 'default'}: {e}") from e
    server.start()
    _log.info(
        "serving",
        extra={
            "fields": {
                "port": port,
                "metrics_port": server.metrics_port,
                "metrics_host": settings.metrics_host,
                "metrics_auth": settings.metrics_require_token,
                "tls": settings.tls_cert is not None,
                "mtls": settings.tls_client_ca is not None,
                "auth": settings.bearer_token() is not None,
                "workers": settings.workers,
                "solve_mode": settings.solve_mode,
                "queue_limit": settings.queue_limit,
            }
        },
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        _log.info("signal", extra={"fields": {"signal": signal.Signals(signum).name}})
        stop.set()

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    except ValueError:  # not the main thread: the caller stops the process its own way
        server.wait_for_termination()
        return 0
    try:
        while not stop.wait(0.5):
            pass
        server.stop(settings.grace_s).wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `placement-server`: settings from flags and PLACEMENT_* variables."""
    settings = parse_settings(argv)
    configure_logging(settings.log_level)
    try:
        return serve(settings)
    except (OSError, ValueError) as e:  # one line, no log record around it
        print(f"placement-server: cannot start: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
