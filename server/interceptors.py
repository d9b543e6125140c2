"""Server interceptors: request id, metrics, access log, malformed-bytes check, the request's cost budget and
its deadline/cancellation checkpoint around every unary call; bearer-token auth (before any byte is parsed).

Order matters: telemetry is outermost, so refused calls are counted, logged and carry their request id too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from placement.errors import InputError, Problem
from placement.limits import Call, Interrupted, LimitError, Limits, use_call, use_limits
from server.budget import check_message
from server.errors import bad_request, status_for, unauthenticated
from server.rpc import NO_DEADLINE_S
from server.telemetry import REQUEST_ID_KEY, Metrics, new_request_id, request_id_var

__all__ = ["OPEN_METHOD_PREFIXES", "TelemetryInterceptor", "TokenAuthInterceptor", "give_back_memory"]

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


_TRIM_EVERY_S = 2.0
_trim_lock = threading.Lock()
_last_trim = [0.0]
try:
    _malloc_trim: Callable[[int], int] | None = ctypes.CDLL(
        ctypes.util.find_library("c") or "libc.so.6"
    ).malloc_trim
except (OSError, AttributeError):  # not glibc
    _malloc_trim = None


def give_back_memory() -> None:
    """Return freed heap to the system (glibc keeps it otherwise: RSS would ratchet after big requests); at most
    once every few seconds."""
    if _malloc_trim is None:
        return
    now = time.monotonic()
    with _trim_lock:
        if now - _last_trim[0] < _TRIM_EVERY_S:
            return
        _last_trim[0] = now
    _malloc_trim(0)


def _ended_code(call: Call, context: Any) -> grpc.StatusCode | None:
    """CANCELLED or DEADLINE_EXCEEDED when the call ended before its handler did, else None."""
    state = call.state()
    if state is None and context.is_active():
        return None
    if state == "deadline" or (call.deadline is not None and time.monotonic() >= call.deadline):
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return grpc.StatusCode.CANCELLED


class TelemetryInterceptor(grpc.ServerInterceptor):
    """Per unary call: the request id (from `x-request-id` or new) in a context var and the trailing metadata,
    the request checked against the limits before any work (`server.budget`), the call's deadline and
    cancellation as a `placement.limits.Call` that every checkpoint of the work sees, the call counted and timed
    by method and code (a call that the client cancelled or that outlived its deadline is counted as such, not
    OK), one JSON access-log line."""

    def __init__(self, metrics: Metrics, limits: Limits | None = None) -> None:
        self._metrics = metrics
        self._limits = limits or Limits()

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
            remaining = context.time_remaining()
            call = Call.after(remaining if remaining is not None and remaining < NO_DEADLINE_S else None)
            context.add_callback(call.cancel)
            try:
                with use_call(call), use_limits(self._limits):
                    if isinstance(request, _Malformed):
                        context.abort_with_status(
                            bad_request(
                                [
                                    Problem(
                                        "", f"the bytes are not a valid request of {method}: {request.error}"
                                    )
                                ]
                            )
                        )
                    if not quiet and not isinstance(request, _Unparsed):
                        self._check(request, context)
                    return behavior(request, context)
            except BaseException:
                failed = True
                raise
            finally:
                elapsed = time.perf_counter() - t0
                code = (
                    context.code()
                    or _ended_code(call, context)
                    or (grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK)
                )
                trailing = tuple(context.trailing_metadata() or ())
                context.set_trailing_metadata((*trailing, (REQUEST_ID_KEY, request_id)))
                self._metrics.requests.labels(method=short, code=code.name).inc()
                self._metrics.latency.labels(method=short).observe(elapsed)
                _log.log(
                    logging.DEBUG if quiet else logging.INFO,
                    "rpc",
                    extra={
                        "fields": {
                            "method": method,
                            "code": code.name,
                            "duration_ms": round(elapsed * 1000, 3),
                            "peer": context.peer(),
                        }
                    },
                )
                request_id_var.reset(token)
                if not quiet:
                    give_back_memory()

        return grpc.unary_unary_rpc_method_handler(
            observed,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def _check(self, request: Any, context: Any) -> None:
        """The request's counts against the limits, before anything is converted or queued."""
        try:
            check_message(request, self._limits)
        except LimitError as e:
            self._metrics.rejected.labels(limit=e.limit_name.removeprefix("max_")).inc()
            context.abort_with_status(status_for(e))
        except (InputError, Interrupted) as e:
            context.abort_with_status(status_for(e))
        except Exception as e:  # a bug in the check: INTERNAL with the request id, logged, never UNKNOWN
            context.abort_with_status(status_for(e))


class _Unparsed:
    """The request of a refused call: its bytes are never parsed (auth runs before parsing)."""


_UNPARSED = _Unparsed()


def _ignore_bytes(data: bytes) -> _Unparsed:
    return _UNPARSED


def _deny(handler: Any, status: grpc.Status) -> Any:
    """A handler of the same shape as `handler` that aborts with `status` without parsing the request."""

    def unary(request: Any, context: Any) -> Any:
        context.abort_with_status(status)

    def streaming(request: Any, context: Any) -> Iterator[Any]:
        context.abort_with_status(status)
        yield from ()

    kw = {"request_deserializer": _ignore_bytes, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(streaming, **kw)
    return grpc.unary_unary_rpc_method_handler(unary, **kw)


class TokenAuthInterceptor(grpc.ServerInterceptor):
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
