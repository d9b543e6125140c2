"""`PlacementClient`: a typed client of PlacementService with a deadline per call and retries on UNAVAILABLE.

Errors come back as `PlacementRpcError` with the status code and the decoded google.rpc details. It lives in
server/ because placement/ never imports grpc.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc

__all__ = ["PlacementClient", "PlacementRpcError"]

_DETAIL_TYPES: tuple[Any, ...] = (
    error_details_pb2.BadRequest,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.QuotaFailure,
    error_details_pb2.RetryInfo,
    error_details_pb2.ErrorInfo,
    error_details_pb2.DebugInfo,
)

Resp = TypeVar("Resp")


@dataclass(eq=False)
class PlacementRpcError(Exception):
    """A failed call: the gRPC status code, its message, the decoded details and the server's request id."""

    code: grpc.StatusCode
    message: str
    details: list[Any] = field(default_factory=list)
    request_id: str | None = None

    def __post_init__(self) -> None:
        super().__init__(f"{self.code.name}: {self.message}")

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    @property
    def field_violations(self) -> list[tuple[str, str]]:
        """(field path, description) of every BadRequest violation."""
        return [
            (v.field, v.description)
            for d in self.details
            if isinstance(d, error_details_pb2.BadRequest)
            for v in d.field_violations
        ]

    @property
    def precondition_violations(self) -> list[tuple[str, str, str]]:
        """(type, subject, description) of every PreconditionFailure violation."""
        return [
            (v.type, v.subject, v.description)
            for d in self.details
            if isinstance(d, error_details_pb2.PreconditionFailure)
            for v in d.violations
        ]

    @property
    def quota_violations(self) -> list[tuple[str, str]]:
        """(subject, description) of every QuotaFailure violation."""
        return [
            (v.subject, v.description)
            for d in self.details
            if isinstance(d, error_details_pb2.QuotaFailure)
            for v in d.violations
        ]

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> PlacementRpcError:
        status = rpc_status.from_call(err)
        details: list[Any] = []
        if status is not None:
            for any_msg in status.details:
                for t in _DETAIL_TYPES:
                    if any_msg.Is(t.DESCRIPTOR):
                        d = t()
                        any_msg.Unpack(d)
                        details.append(d)
                        break
        trailing = {m.key: m.value for m in (err.trailing_metadata() or ())}
        rid = trailing.get("x-request-id")
        return cls(err.code(), err.details() or "", details, str(rid) if rid is not None else None)


class PlacementClient:
    """PlacementService over one channel. Each call has a deadline (`timeout_s`); UNAVAILABLE is retried with
    exponential backoff and jitter while the deadline allows, other errors raise PlacementRpcError at once.

    >>> with PlacementClient("localhost:50051", token=None) as c:  # doctest: +SKIP
    ...     c.place(request).result.seconds_per_step
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        root_certificates: bytes | None = None,
        tls: bool = False,
        client_certificate: bytes | None = None,
        client_key: bytes | None = None,
        timeout_s: float = 60.0,
        retries: int = 4,
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
        max_message_bytes: int = 32 * 1024 * 1024,
        channel: Any = None,
    ) -> None:
        options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
        if channel is not None:
            self._channel = channel
        elif tls or root_certificates is not None or client_certificate is not None:
            # client_certificate/client_key (PEM): mTLS, for a server started with --tls-client-ca
            creds = grpc.ssl_channel_credentials(
                root_certificates=root_certificates,
                private_key=client_key,
                certificate_chain=client_certificate,
            )
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb_grpc.PlacementServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._token = token
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s

    def __enter__(self) -> PlacementClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def place(
        self, request: pb.PlaceRequest, *, timeout_s: float | None = None, request_id: str | None = None
    ) -> pb.PlaceResponse:
        response: pb.PlaceResponse = self._call(
            self._stub.Place, request, timeout_s, request_id
        )  # grpc is untyped
        return response

    def evaluate(
        self, request: pb.EvaluateRequest, *, timeout_s: float | None = None, request_id: str | None = None
    ) -> pb.EvaluateResponse:
        response: pb.EvaluateResponse = self._call(
            self._stub.Evaluate, request, timeout_s, request_id
        )  # grpc is untyped
        return response

    def compare(
        self, request: pb.CompareRequest, *, timeout_s: float | None = None, request_id: str | None = None
    ) -> pb.CompareResponse:
        response: pb.CompareResponse = self._call(
            self._stub.Compare, request, timeout_s, request_id
        )  # grpc is untyped
        return response

    def place_batch(
        self, request: pb.PlaceBatchRequest, *, timeout_s: float | None = None, request_id: str | None = None
    ) -> pb.PlaceBatchResponse:
        response: pb.PlaceBatchResponse = self._call(
            self._stub.PlaceBatch, request, timeout_s, request_id
        )  # grpc is untyped
        return response

    def repair(
        self, request: pb.RepairRequest, *, timeout_s: float | None = None, request_id: str | None = None
    ) -> pb.RepairResponse:
        response: pb.RepairResponse = self._call(
            self._stub.Repair, request, timeout_s, request_id
        )  # grpc is untyped
        return response

    def preempt(
        self, request: pb.PreemptRequest, *, timeout_s: float | None = None, request_id: str | None = None
    ) -> pb.PreemptResponse:
        response: pb.PreemptResponse = self._call(
            self._stub.Preempt, request, timeout_s, request_id
        )  # grpc is untyped
        return response

    def capacity(
        self, request: pb.CapacityRequest, *, timeout_s: float | None = None, request_id: str | None = None
    ) -> pb.CapacityResponse:
        response: pb.CapacityResponse = self._call(
            self._stub.Capacity, request, timeout_s, request_id
        )  # grpc is untyped
        return response

    def health(self, service: str = "", *, timeout_s: float = 5.0) -> str:
        """The server's health status name for `service` ("" = the whole server): SERVING, NOT_SERVING..."""
        try:
            resp = self._health.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as err:
            raise PlacementRpcError.from_rpc_error(err) from None
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))

    def _metadata(self, request_id: str | None) -> Sequence[tuple[str, str]]:
        md = [("x-request-id", request_id or uuid.uuid4().hex)]
        if self._token:
            md.append(("authorization", f"Bearer {self._token}"))
        return md

    def _call(
        self, method: Callable[..., Resp], request: Any, timeout_s: float | None, request_id: str | None
    ) -> Resp:
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.timeout_s)
        metadata = self._metadata(request_id)  # one id for every attempt
        delay = self.backoff_s
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            try:
                return method(request, timeout=max(remaining, 0.001), metadata=metadata)
            except grpc.RpcError as err:
                error = PlacementRpcError.from_rpc_error(err)
            if error.code is not grpc.StatusCode.UNAVAILABLE or attempt >= self.retries:
                raise error
            sleep = random.uniform(0, delay)  # full jitter
            if time.monotonic() + sleep >= deadline:
                raise error
            time.sleep(sleep)
            delay = min(delay * 2, self.max_backoff_s)
            attempt += 1
