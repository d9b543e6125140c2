"""Exceptions -> gRPC statuses with google.rpc details (BadRequest, PreconditionFailure, QuotaFailure, RetryInfo).

The one place that decides a status code. Messages name the rule, never a traceback; INTERNAL only for bugs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import CancelledError

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from placement.cost import InvalidMappingError
from placement.errors import InfeasibleError, InputError, PlacementError, Problem
from placement.registry.model import Aborted, NotFound, Refused
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
_MAX_MESSAGE_CHARS = 1500


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


class ShuttingDown(Exception):
    """The server stops and takes no more work: UNAVAILABLE (clients retry elsewhere)."""


def _status(code: int, message: str, details: Sequence[object] = ()) -> grpc.Status:
    st = status_pb2.Status(code=code, message=_shorten(message))
    for d in details:
        st.details.add().Pack(d)
    return rpc_status.to_status(st)


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[: _MAX_MESSAGE_CHARS - 40] + " ... (see the status details)"


def _summary(head: str, lines: Sequence[str]) -> str:
    if len(lines) == 1:
        return f"{head}: {lines[0]}"
    return f"{head} ({len(lines)}): " + "; ".join(lines)


def bad_request(problems: Iterable[Problem]) -> grpc.Status:
    """INVALID_ARGUMENT with one BadRequest field violation per problem."""
    ps = list(problems)
    br = error_details_pb2.BadRequest(
        field_violations=[error_details_pb2.BadRequest.FieldViolation(field=p.path, description=p.message) for p in ps]
    )
    return _status(code_pb2.INVALID_ARGUMENT, _summary("invalid request", [str(p) for p in ps]), [br])


def precondition_failed(kind: str, subject: str, descriptions: Sequence[str], head: str) -> grpc.Status:
    """FAILED_PRECONDITION with one PreconditionFailure violation per description (type `kind`)."""
    pf = error_details_pb2.PreconditionFailure(
        violations=[
            error_details_pb2.PreconditionFailure.Violation(type=kind, subject=subject, description=d)
            for d in descriptions
        ]
    )
    return _status(code_pb2.FAILED_PRECONDITION, _summary(head, list(descriptions)), [pf])


def resource_exhausted(subject: str, description: str, retry_after_s: float | None = None) -> grpc.Status:
    """RESOURCE_EXHAUSTED with a QuotaFailure (and a RetryInfo when waiting helps)."""
    details: list[object] = [
        error_details_pb2.QuotaFailure(
            violations=[error_details_pb2.QuotaFailure.Violation(subject=subject, description=description)]
        )
    ]
    if retry_after_s is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(retry_after_s * 1e9))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    return _status(code_pb2.RESOURCE_EXHAUSTED, f"server limit: {subject}: {description}", details)


def unauthenticated() -> grpc.Status:
    return _status(code_pb2.UNAUTHENTICATED, "missing or wrong bearer token (metadata `authorization: Bearer <token>`)")


def status_for(exc: BaseException) -> grpc.Status:
    """The status a failed call answers with. Unknown exceptions are logged and become a bare INTERNAL."""
    if isinstance(exc, InputError):
        return bad_request(exc.problems)
    if isinstance(exc, InvalidMappingError):
        rules = [getattr(v, "rule", "rule") for v in exc.violations]
        msgs = [getattr(v, "message", str(v)) for v in exc.violations]
        pf = error_details_pb2.PreconditionFailure(
            violations=[
                error_details_pb2.PreconditionFailure.Violation(type=r, subject="mapping", description=m)
                for r, m in zip(rules, msgs, strict=True)
            ]
        )
        return _status(code_pb2.FAILED_PRECONDITION,
                       _summary("the mapping breaks hard rules", [f"[{r}] {m}" for r, m in zip(rules, msgs, strict=True)]),
                       [pf])
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
    if isinstance(exc, Aborted):
        return _status(code_pb2.ABORTED, str(exc))
    if isinstance(exc, Refused):
        return precondition_failed(exc.kind, exc.subject, [str(exc)], "refused")
    if isinstance(exc, PlacementError) and not str(exc).startswith("internal"):
        # raised on purpose by the domain: a rule of the request that cannot hold
        return precondition_failed("rule", "request", [str(exc)], "the request breaks a rule")
    rid = current_request_id()
    _log.error("internal error", exc_info=exc, extra={"fields": {"error": type(exc).__name__}})
    return _status(code_pb2.INTERNAL, f"internal error (request id {rid}); the server log has the details")
