"""`RegistryClient`: the ClusterRegistry over the PlacementClient's channel, deadlines, retries and errors.

Unary calls go through `call("Reserve", request)`; `watch` yields WatchState events until the stream ends.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import grpc

from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from server.client import PlacementClient, PlacementRpcError

__all__ = ["RegistryClient"]

_UNARY = (
    "PutCluster",
    "UpdateState",
    "Reserve",
    "Commit",
    "Release",
    "Renew",
    "ListReservations",
    "GetState",
)


class RegistryClient(PlacementClient):
    """PlacementService and ClusterRegistry on one channel. UNAVAILABLE is retried (a Reserve retried after a lost
    answer, or after a commit the database left in doubt, should carry an idempotency key: the server then returns
    the same reservation), and so is ABORTED, which the registry answers only when it wrote nothing (a busy or
    unreachable database, a Reserve that lost every claim). RESOURCE_EXHAUSTED (a server limit, the store's disk
    full) is not: it needs the request smaller or the space freed."""

    def __init__(self, target: str, **kw: Any) -> None:
        super().__init__(target, **kw)
        self._registry = rpb_grpc.ClusterRegistryStub(self._channel)

    def __enter__(self) -> RegistryClient:
        return self

    def call(self, method: str, request: Any, *, timeout_s: float | None = None) -> Any:
        if method not in _UNARY:
            raise ValueError(f"unknown ClusterRegistry method {method!r}; known: {', '.join(_UNARY)}")
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.timeout_s)
        delay = self.backoff_s
        attempt = 0
        while True:
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                return self._call(getattr(self._registry, method), request, remaining, None)
            except PlacementRpcError as error:
                if error.code is not grpc.StatusCode.ABORTED or attempt >= self.retries:
                    raise
                sleep = random.uniform(0, delay)  # full jitter, as for UNAVAILABLE
                if time.monotonic() + sleep >= deadline:
                    raise
                time.sleep(sleep)
                delay = min(delay * 2, self.max_backoff_s)
                attempt += 1

    def watch(
        self, request: rpb.WatchStateRequest, *, timeout_s: float | None = None
    ) -> Iterator[rpb.StateEvent]:
        """WatchState events; PlacementRpcError when the stream fails (not when `timeout_s` ends it)."""
        stream = self._registry.WatchState(request, timeout=timeout_s, metadata=self._metadata(None))
        try:
            yield from stream
        except grpc.RpcError as err:
            error = PlacementRpcError.from_rpc_error(err)
            if error.code is not grpc.StatusCode.DEADLINE_EXCEEDED:
                raise error from None
