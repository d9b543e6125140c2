"""Observability of the server: the request id of the current call, JSON log lines, Prometheus metrics.

Metrics live in a registry per server (tests start many) and are served on their own port.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import sys
import threading
import time
import uuid
from contextvars import ContextVar
from typing import IO, Any
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

__all__ = [
    "REQUEST_ID_KEY",
    "JsonFormatter",
    "Metrics",
    "configure_logging",
    "current_request_id",
    "new_request_id",
    "request_id_var",
]

REQUEST_ID_KEY = "x-request-id"
"""Metadata key of the request id: read from the caller's metadata, echoed in the trailing metadata."""

request_id_var: ContextVar[str] = ContextVar("placement_request_id", default="-")


def current_request_id() -> str:
    return request_id_var.get()


def new_request_id(given: str | None) -> str:
    """The caller's id when it is short printable ASCII, else a fresh one."""
    if given and len(given) <= 128 and given.isascii() and given.isprintable():
        return given
    return uuid.uuid4().hex


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, request_id and the record's `fields` dict."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or request_id_var.get(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str = "INFO", stream: IO[str] | None = None) -> None:
    """Send every log record as JSON lines to `stream` (stderr by default)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
_GAP_BUCKETS = (0.0, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class Metrics:
    """The server's Prometheus metrics in their own registry; `serve` exposes them over HTTP."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "placement_grpc_requests",
            "Finished calls by method and status code",
            ["method", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "placement_grpc_request_seconds",
            "Call latency by method",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.solves = Counter(
            "placement_solves", "Answered solves by method and solve status", ["method", "status"], registry=r
        )
        self.gap = Histogram(
            "placement_solve_gap", "Relative gap of returned placements", buckets=_GAP_BUCKETS, registry=r
        )
        self.solve_seconds = Histogram(
            "placement_solve_seconds",
            "Time in the solver per call",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.memo_hits = Counter(
            "placement_memo_hits",
            "Calls answered from a solve worker's answer memo (the same request answered before)",
            ["method"],
            registry=r,
        )
        self.running = Gauge("placement_solves_running", "Solves running now", registry=r)
        self.queued = Gauge("placement_solves_queued", "Requests waiting for a solver", registry=r)
        self.rejected = Counter(
            "placement_rejected", "Requests refused by a server limit", ["limit"], registry=r
        )
        self._http: Any = None
        self._lock = threading.Lock()

    def serve(self, port: int, host: str = "127.0.0.1", token: str | None = None) -> int:
        """Expose /metrics on `host`:`port` (0: a free port); returns the bound port. With `token`, every
        scrape must send ``Authorization: Bearer <token>`` (compared in constant time), else 401."""
        app = make_wsgi_app(self.registry)
        expected = None if token is None else f"Bearer {token}".encode()

        def guarded(environ: dict[str, Any], start_response: Any) -> Any:
            given = str(environ.get("HTTP_AUTHORIZATION", "")).encode()
            if expected is not None and not hmac.compare_digest(given, expected):
                start_response(
                    "401 Unauthorized",
                    [
                        ("Content-Type", "text/plain"),
                        ("WWW-Authenticate", 'Bearer realm="placement-metrics"'),
                    ],
                )
                return [b"missing or wrong bearer token\n"]
            return app(environ, start_response)

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        with self._lock:
            httpd = make_server(host.strip("[]"), port, guarded, Server, handler_class=_SilentHandler)
            threading.Thread(target=httpd.serve_forever, name="placement-metrics", daemon=True).start()
            self._http = httpd
            return int(httpd.server_port)

    def close(self) -> None:
        with self._lock:
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
                self._http = None
