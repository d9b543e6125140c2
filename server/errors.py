"""Exceptions -> gRPC statuses with google.rpc details (BadRequest, PreconditionFailure, QuotaFailure, RetryInfo).

The one place that decides a status code. Messages name the rule, never a traceback; INTERNAL only for bugs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import CancelledError
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from placement.cost.report import InvalidMappingError
from placement.errors import InfeasibleError, InputError, PlacementError, Problem
from placement.limits import Interrupted, LimitError
from placement.registry.model import Aborted, Busy, InDoubt, NotFound, Refused, StoreFull
from server.telemetry import current_request_id

__all__ = [
    "Cancelled",
    "DeadlineError",
    "LimitExceeded",
    "ShuttingDown",
    "bad_request",
    "precondition_failed",
    "resource_exhausted",
    "status_for",
    "unauthenticated",
]

_log = logging.getLogger("placement.server")
_MAX_MESSAGE_CHARS = 600
MAX_DETAIL_ITEMS = 100
"""Violations put in the status details at most; one more entry counts the rest."""
STORE_RETRY_S = 0.1
"""The retry delay a registry store error advises (RetryInfo): a busy database, a commit in doubt; a full disk
advises ten times it."""
MAX_DETAILS_BYTES = 4500
"""Serialized google.rpc.Status at most: base64 in the trailer is 4/3 of it, so the trailer stays under 8 KB."""
_MAX_TEXT = 300  # characters of one field path or description in the details


class LimitExceeded(Exception):
    """A server limit (devices, ranks, jobs, queue) refuses the request: RESOURCE_EXHAUSTED."""

    def __init__(self, subject: str, description: str, retry_after_s: float | None = None) -> None:
        self.subject = subject
        self.description = description
        self.retry_after_s = retry_after_s
        super().__init__(f"{subject}: {description}")


class DeadlineError(Exception):
    """The deadline ended before any valid answer existed: DEADLINE_EXCEEDED."""


class Cancelled(Exception):
    """The caller went away before the work started: CANCELLED."""


class RemoteStatus(Exception):
    """The status a solve worker process computed for a failed call (`status_for` passes it on as it is)."""

    def __init__(self, status: grpc.Status) -> None:
        super().__init__(getattr(status, "details", ""))
        self.status = status


class ShuttingDown(Exception):
    """The server stops and takes no more work: UNAVAILABLE (clients retry elsewhere)."""


def _clip(text: str, n: int = _MAX_TEXT) -> str:
    return text if len(text) <= n else text[: n - 5] + " ..."


def _status(code: int, message: str, details: Sequence[Any] = ()) -> grpc.Status:
    """The status with its details bounded: each detail's repeated violations are cut (keeping a last entry that
    counts the rest) until the serialized status fits MAX_DETAILS_BYTES."""
    st = status_pb2.Status(code=code, message=_shorten(message))
    for d in details:
        st.details.add().Pack(d)
    if st.ByteSize() > MAX_DETAILS_BYTES:
        del st.details[:]
        room = MAX_DETAILS_BYTES - st.ByteSize()
        for d in details:
            packed = st.details.add()
            packed.Pack(d)
            if packed.ByteSize() > room:
                _cut(d, room)
                packed.Pack(d)
            room -= packed.ByteSize() + 4
    status: grpc.Status = rpc_status.to_status(st)  # grpc_status ships no types
    return status


def _cut(detail: Any, room: int) -> None:
    """Drop violations from the end of `detail` (BadRequest, PreconditionFailure, QuotaFailure) until it fits in
    `room` bytes with one more violation saying how many were left out."""
    field = "field_violations" if hasattr(detail, "field_violations") else "violations"
    items = getattr(detail, field)
    total = len(items)
    while len(items) > 1 and detail.ByteSize() + 120 > room:
        del items[len(items) // 2 if detail.ByteSize() > 2 * room else len(items) - 1 :]
    _more(detail, field, total - len(items))


def _more(detail: Any, field: str, n: int) -> None:
    if n <= 0:
        return
    text = f"... and {n} more (not listed)"
    if field == "field_violations":
        detail.field_violations.add(field="", description=text)
    elif isinstance(detail, error_details_pb2.PreconditionFailure):
        detail.violations.add(type="more", subject="", description=text)
    else:
        detail.violations.add(subject="", description=text)


def _shorten(text: str) -> str:
    text = (
        text if text.isascii() else text.encode("ascii", "backslashreplace").decode()
    )  # percent-encoding: 1x
    return (
        text
        if len(text) <= _MAX_MESSAGE_CHARS
        else text[: _MAX_MESSAGE_CHARS - 40] + " ... (see the status details)"
    )


def _summary(head: str, lines: Sequence[str], total: int | None = None) -> str:
    """The head and the first few lines (the message names the first fields; the details hold up to 100)."""
    n = len(lines) if total is None else total
    if n == 1 and lines:
        return f"{head}: {_clip(lines[0])}"
    shown = [_clip(line, 150) for line in lines[:5]]
    rest = f"; ... and {n - len(shown)} more" if n > len(shown) else ""
    return f"{head} ({n}): " + "; ".join(shown) + rest


def bad_request(problems: Iterable[Problem], omitted: int = 0) -> grpc.Status:
    """INVALID_ARGUMENT with a BadRequest field violation per problem (at most MAX_DETAIL_ITEMS, then a count)."""
    ps = list(problems)
    total = len(ps) + omitted
    br = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=_clip(p.path), description=_clip(p.message))
            for p in ps[:MAX_DETAIL_ITEMS]
        ]
    )
    _more(br, "field_violations", total - len(br.field_violations))
    return _status(
        code_pb2.INVALID_ARGUMENT, _summary("invalid request", [str(p) for p in ps[:5]], total), [br]
    )


def precondition_failed(kind: str, subject: str, descriptions: Sequence[str], head: str) -> grpc.Status:
    """FAILED_PRECONDITION with a PreconditionFailure violation per description (type `kind`; at most
    MAX_DETAIL_ITEMS, then a count)."""
    pf = error_details_pb2.PreconditionFailure(
        violations=[
            error_details_pb2.PreconditionFailure.Violation(type=kind, subject=subject, description=_clip(d))
            for d in descriptions[:MAX_DETAIL_ITEMS]
        ]
    )
    _more(pf, "violations", len(descriptions) - len(pf.violations))
    return _status(
        code_pb2.FAILED_PRECONDITION, _summary(head, list(descriptions[:5]), len(descriptions)), [pf]
    )


def resource_exhausted(subject: str, description: str, retry_after_s: float | None = None) -> grpc.Status:
    """RESOURCE_EXHAUSTED with a QuotaFailure (and a RetryInfo when waiting helps)."""
    details: list[object] = [
        error_details_pb2.QuotaFailure(
            violations=[
                error_details_pb2.QuotaFailure.Violation(
                    subject=_clip(subject), description=_clip(description)
                )
            ]
        )
    ]
    if retry_after_s is not None:
        details.append(_retry_info(retry_after_s))
    return _status(code_pb2.RESOURCE_EXHAUSTED, f"server limit: {subject}: {description}", details)


def _retry_info(seconds: float) -> error_details_pb2.RetryInfo:
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(int(seconds * 1e9))
    return error_details_pb2.RetryInfo(retry_delay=delay)


def unauthenticated() -> grpc.Status:
    return _status(
        code_pb2.UNAUTHENTICATED, "missing or wrong bearer token (metadata `authorization: Bearer <token>`)"
    )


def status_for(exc: BaseException) -> grpc.Status:
    """The status a failed call answers with. Unknown exceptions are logged and become a bare INTERNAL."""
    if isinstance(exc, RemoteStatus):
        return exc.status
    if isinstance(exc, LimitError):  # an InputError too: first
        return resource_exhausted(exc.limit_name.removeprefix("max_"), str(exc))
    if isinstance(exc, InputError):
        return bad_request(exc.problems, exc.omitted)
    if isinstance(exc, Interrupted):
        code = code_pb2.CANCELLED if exc.reason == "cancelled" else code_pb2.DEADLINE_EXCEEDED
        return _status(code, str(exc))
    if isinstance(exc, InvalidMappingError):
        vs = list(exc.violations)
        rules = [str(getattr(v, "rule", "rule")) for v in vs[:MAX_DETAIL_ITEMS]]
        msgs = [str(getattr(v, "message", str(v))) for v in vs[:MAX_DETAIL_ITEMS]]
        pf = error_details_pb2.PreconditionFailure(
            violations=[
                error_details_pb2.PreconditionFailure.Violation(
                    type=r, subject="mapping", description=_clip(m)
                )
                for r, m in zip(rules, msgs, strict=True)
            ]
        )
        _more(pf, "violations", len(vs) - len(pf.violations))
        return _status(
            code_pb2.FAILED_PRECONDITION,
            _summary(
                "the mapping breaks hard rules",
                [f"[{r}] {m}" for r, m in zip(rules[:5], msgs[:5], strict=True)],
                len(vs),
            ),
            [pf],
        )
    if isinstance(exc, StoreFull):  # a PlacementError: before the catch-all below
        return resource_exhausted(f"registry store {exc.store}", str(exc), retry_after_s=STORE_RETRY_S * 10)
    if isinstance(exc, InDoubt):
        return _status(code_pb2.UNAVAILABLE, str(exc), [_retry_info(STORE_RETRY_S)])
    if isinstance(exc, InfeasibleError):
        return precondition_failed("infeasible", "job", exc.reasons, "no placement satisfies the hard rules")
    if isinstance(exc, LimitExceeded):
        return resource_exhausted(exc.subject, exc.description, exc.retry_after_s)
    if isinstance(exc, DeadlineError):
        return _status(code_pb2.DEADLINE_EXCEEDED, str(exc))
    if isinstance(exc, ShuttingDown | CancelledError):
        return _status(code_pb2.UNAVAILABLE, "the server is shutting down; retry")
    if isinstance(exc, Cancelled):
        return _status(code_pb2.CANCELLED, str(exc) or "cancelled by the caller")
    if isinstance(exc, NotFound):
        return _status(code_pb2.NOT_FOUND, str(exc))
    if isinstance(exc, Busy):
        return _status(code_pb2.ABORTED, str(exc), [_retry_info(STORE_RETRY_S)])
    if isinstance(exc, Aborted):
        return _status(code_pb2.ABORTED, str(exc))
    if isinstance(exc, Refused):
        return precondition_failed(exc.kind, exc.subject, [str(exc)], "refused")
    if isinstance(exc, PlacementError) and not str(exc).startswith("internal"):
        # raised on purpose by the domain: a rule of the request that cannot hold
        return precondition_failed("rule", "request", [str(exc)], "the request breaks a rule")
    if isinstance(exc, MemoryError):
        return resource_exhausted(
            "memory", "the request needs more memory than this server has; make it smaller"
        )
    if isinstance(exc, RecursionError):
        return bad_request([Problem("", "the request is nested too deeply")])
    rid = current_request_id()
    _log.error("internal error", exc_info=exc, extra={"fields": {"error": type(exc).__name__}})
    return _status(code_pb2.INTERNAL, f"internal error (request id {rid}); the server log has the details")
