"""Server interceptors: request id, metrics, access log and malformed-bytes check around every unary call;
bearer-token auth.

Order matters: telemetry is outermost, so refused calls are counted, logged and carry their request id too.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from placement.errors import Problem
from server.errors import bad_request, unauthenticated
from server.telemetry import REQUEST_ID_KEY, Metrics, new_request_id, request_id_var

__all__ = ["OPEN_METHOD_PREFIXES", "TelemetryInterceptor", "TokenAuthInterceptor"]

_log = logging.getLogger("placement.server.access")

OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)
"""Methods callable without the bearer token: health checks stay open to load balancers and kubelets."""

Continuation = Callable[[Any], Any]


class _Malformed:
    """Stands in for a request whose bytes do not parse, so the call answers INVALID_ARGUMENT, not INTERNAL."""

    def __init__(self, error: str) -> None:
        self.error = error


def _tolerant(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as e:  # DecodeError and friends: the caller sent bytes that are not the message
            return _Malformed(f"{type(e).__name__}: {e}")

    return parse


def _metadata(details: Any, key: str) -> str | None:
    for item in details.invocation_metadata or ():
        if item.key == key:
            value = item.value
            return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
    return None


class TelemetryInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type hints
    """Per unary call: the request id (from `x-request-id` or new) in a context var and the trailing metadata,
    the call counted and timed by method and code, one JSON access-log line."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def intercept_service(self, continuation: Continuation, details: Any) -> Any:
        handler = continuation(details)
        if handler is None or handler.request_streaming or handler.response_streaming:
            return handler  # streams (health Watch, reflection) pass through untouched
        method: str = details.method
        short = method.rsplit("/", 1)[-1]
        request_id = new_request_id(_metadata(details, REQUEST_ID_KEY))
        behavior = handler.unary_unary
        quiet = method.startswith(OPEN_METHOD_PREFIXES)

        def observed(request: Any, context: Any) -> Any:
            token = request_id_var.set(request_id)
            t0 = time.perf_counter()
            failed = False
            try:
                if isinstance(request, _Malformed):
                    context.abort_with_status(bad_request(
                        [Problem("", f"the bytes are not a valid request of {method}: {request.error}")]))
                return behavior(request, context)
            except BaseException:
                failed = True
                raise
            finally:
                elapsed = time.perf_counter() - t0
                code = context.code() or (grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK)
                trailing = tuple(context.trailing_metadata() or ())
                context.set_trailing_metadata((*trailing, (REQUEST_ID_KEY, request_id)))
                self._metrics.requests.labels(method=short, code=code.name).inc()
                self._metrics.latency.labels(method=short).observe(elapsed)
                _log.log(logging.DEBUG if quiet else logging.INFO, "rpc", extra={"fields": {
                    "method": method, "code": code.name, "duration_ms": round(elapsed * 1000, 3),
                    "peer": context.peer(),
                }})
                request_id_var.reset(token)

        return grpc.unary_unary_rpc_method_handler(
            observed,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )


def _deny(handler: Any, status: grpc.Status) -> Any:
    """A handler of the same shape as `handler` that aborts with `status`."""

    def unary(request: Any, context: Any) -> Any:
        context.abort_with_status(status)

    def streaming(request: Any, context: Any) -> Iterator[Any]:
        context.abort_with_status(status)
        yield from ()

    kw = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(streaming, **kw)
    return grpc.unary_unary_rpc_method_handler(unary, **kw)


class TokenAuthInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type hints
    """Calls must carry ``authorization: Bearer <token>``, compared in constant time; health stays open."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def _authorized(self, details: Any) -> bool:
        value = _metadata(details, "authorization")
        if value is None:
            return False
        scheme, _, credential = value.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode(), self._token)

    def intercept_service(self, continuation: Continuation, details: Any) -> Any:
        if details.method.startswith(OPEN_METHOD_PREFIXES) or self._authorized(details):
            return continuation(details)
        handler = continuation(details)
        return None if handler is None else _deny(handler, unauthenticated())
