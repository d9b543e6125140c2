"""The CLI's side of the gRPC contract: a PlaceRequest or PlaceBatchRequest sent to a placement-server, the
ClusterRegistry calls of `placement registry`, and `placement serve`.

The one module of `placement/` that reaches into `server/` (the clients and the server's main); the rest of the CLI
and the library never do. A failed call exits with its gRPC status mapped to an exit code (`rpc_exit_code`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any, NoReturn

from google.protobuf import json_format

from placement.cli.errors import CONFLICT_EXIT, escape, fail
from placement.errors import InputError, Problem
from placement.v1 import placement_pb2 as pb
from server.client import PlacementClient, PlacementRpcError
from server.main import main as server_main
from server.registry_client import RegistryClient

__all__ = [
    "decision_remote",
    "place_batch_remote",
    "place_remote",
    "registry_call",
    "registry_watch",
    "rpc_exit_code",
    "serve_main",
]


CONFLICTS = frozenset({"stale-generation", "claimed-device"})
"""The precondition violations that mean the stored state moved on or is claimed: a conflict, not infeasible."""


def rpc_exit_code(code_name: str, violations: Collection[str] = ()) -> int:
    """The exit code of a failed call: 2 the request is invalid, 3 it is infeasible, 6 a conflict with the stored
    state (ABORTED, or a precondition violation of `CONFLICTS`: a stale generation, devices of live reservations),
    4 anything else (the server is unreachable, the deadline passed, the token was refused, the server is
    overloaded, a registry id is unknown...)."""
    if code_name == "ABORTED" or (code_name == "FAILED_PRECONDITION" and CONFLICTS & set(violations)):
        return CONFLICT_EXIT
    return {"INVALID_ARGUMENT": 2, "FAILED_PRECONDITION": 3}.get(code_name, 4)


def _rpc_failure(server: str, e: PlacementRpcError, *, preconditions: bool = True) -> NoReturn:
    lines = [f"{server}: {e.code.name}: {escape(e.message)}"]
    lines += [f"  - {f}: {escape(d)}" for f, d in e.field_violations]
    if preconditions:
        lines += [f"  - {escape(d)}" for _, _, d in e.precondition_violations if d not in e.message]
    fail("\n".join(lines), rpc_exit_code(e.code.name, [kind for kind, _, _ in e.precondition_violations]))
    raise AssertionError("fail exits")  # pragma: no cover


def place_remote(req: pb.PlaceRequest, server: str, token: str | None) -> Any:
    """`place --server`: the PlacementResult the server answers for `req`."""
    try:
        with PlacementClient(server, token=token) as client:
            return client.place(req).result
    except PlacementRpcError as e:
        _rpc_failure(server, e)


def decision_remote(method: str, req: Any, server: str, token: str | None) -> Any:
    """`preempt --server`, `capacity --server`: the PreemptResponse or CapacityResponse the server answers."""
    try:
        with PlacementClient(server, token=token) as client:
            return client.preempt(req) if method == "preempt" else client.capacity(req)
    except PlacementRpcError as e:
        _rpc_failure(server, e)


def registry_call(server: str, token: str | None, method: str, request: Any, timeout_s: float = 120.0) -> Any:
    """One ClusterRegistry call (`placement registry ...`); a failed call exits with its status and details."""
    try:
        with RegistryClient(server, token=token) as client:
            return client.call(method, request, timeout_s=timeout_s)
    except PlacementRpcError as e:
        _rpc_failure(server, e)


def registry_watch(server: str, token: str | None, request: Any, timeout_s: float | None) -> Iterator[Any]:
    """WatchState events until `timeout_s` (None: until interrupted)."""
    try:
        with RegistryClient(server, token=token) as client:
            yield from client.watch(request, timeout_s=timeout_s)
    except PlacementRpcError as e:
        _rpc_failure(server, e)


def place_batch_remote(doc: dict[str, Any], server: str, token: str | None) -> dict[str, Any]:
    """`place-batch --server`: send a PlaceBatchRequest (as a dict in the protobuf JSON mapping); the response as a
    dict (proto field names; unset fields absent)."""
    req = pb.PlaceBatchRequest()
    try:
        json_format.ParseDict(doc, req)
    except json_format.ParseError as e:
        raise InputError("request", [Problem("", str(e))]) from None
    try:
        with PlacementClient(server, token=token) as client:
            resp = client.place_batch(req)
    except PlacementRpcError as e:
        _rpc_failure(server, e, preconditions=False)
    out: dict[str, Any] = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    return out


def serve_main(argv: list[str]) -> int:
    """Run the gRPC server (`placement-server`) with these arguments."""
    return int(server_main(argv))
