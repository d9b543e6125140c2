"""Typed interface of registry_pb2_grpc (written by scripts/gen_protos.py from placement/v1/registry.proto; do not edit)."""

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

import grpc

from placement.v1 import registry_pb2

_Req = TypeVar("_Req", contravariant=True)
_Resp = TypeVar("_Resp", covariant=True)
_Metadata = Sequence[tuple[str, str | bytes]] | None

class _UnaryUnary(Protocol, Generic[_Req, _Resp]):
    def __call__(self, request: _Req, timeout: float | None = ..., metadata: _Metadata = ...,
                 credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                 compression: grpc.Compression | None = ...) -> _Resp: ...
    def with_call(self, request: _Req, timeout: float | None = ..., metadata: _Metadata = ...,
                  credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                  compression: grpc.Compression | None = ...) -> tuple[_Resp, grpc.Call]: ...
    def future(self, request: _Req, timeout: float | None = ..., metadata: _Metadata = ...,
               credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
               compression: grpc.Compression | None = ...) -> grpc.Future: ...

class _UnaryStream(Protocol, Generic[_Req, _Resp]):
    def __call__(self, request: _Req, timeout: float | None = ..., metadata: _Metadata = ...,
                 credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                 compression: grpc.Compression | None = ...) -> Iterator[_Resp]: ...

class _StreamUnary(Protocol, Generic[_Req, _Resp]):
    def __call__(self, request_iterator: Iterator[_Req], timeout: float | None = ..., metadata: _Metadata = ...,
                 credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                 compression: grpc.Compression | None = ...) -> _Resp: ...

class _StreamStream(Protocol, Generic[_Req, _Resp]):
    def __call__(self, request_iterator: Iterator[_Req], timeout: float | None = ..., metadata: _Metadata = ...,
                 credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                 compression: grpc.Compression | None = ...) -> Iterator[_Resp]: ...


class ClusterRegistryStub:
    def __init__(self, channel: grpc.Channel) -> None: ...
    PutCluster: _UnaryUnary[registry_pb2.PutClusterRequest, registry_pb2.PutClusterResponse]
    UpdateState: _UnaryUnary[registry_pb2.UpdateStateRequest, registry_pb2.UpdateStateResponse]
    Reserve: _UnaryUnary[registry_pb2.ReserveRequest, registry_pb2.ReserveResponse]
    Commit: _UnaryUnary[registry_pb2.ReservationRequest, registry_pb2.ReservationResponse]
    Release: _UnaryUnary[registry_pb2.ReservationRequest, registry_pb2.ReservationResponse]
    Renew: _UnaryUnary[registry_pb2.ReservationRequest, registry_pb2.ReservationResponse]
    ListReservations: _UnaryUnary[registry_pb2.ListReservationsRequest, registry_pb2.ListReservationsResponse]
    GetState: _UnaryUnary[registry_pb2.GetStateRequest, registry_pb2.GetStateResponse]
    WatchState: _UnaryStream[registry_pb2.WatchStateRequest, registry_pb2.StateEvent]

class ClusterRegistryServicer:
    def PutCluster(self, request: registry_pb2.PutClusterRequest, context: grpc.ServicerContext) -> registry_pb2.PutClusterResponse: ...
    def UpdateState(self, request: registry_pb2.UpdateStateRequest, context: grpc.ServicerContext) -> registry_pb2.UpdateStateResponse: ...
    def Reserve(self, request: registry_pb2.ReserveRequest, context: grpc.ServicerContext) -> registry_pb2.ReserveResponse: ...
    def Commit(self, request: registry_pb2.ReservationRequest, context: grpc.ServicerContext) -> registry_pb2.ReservationResponse: ...
    def Release(self, request: registry_pb2.ReservationRequest, context: grpc.ServicerContext) -> registry_pb2.ReservationResponse: ...
    def Renew(self, request: registry_pb2.ReservationRequest, context: grpc.ServicerContext) -> registry_pb2.ReservationResponse: ...
    def ListReservations(self, request: registry_pb2.ListReservationsRequest, context: grpc.ServicerContext) -> registry_pb2.ListReservationsResponse: ...
    def GetState(self, request: registry_pb2.GetStateRequest, context: grpc.ServicerContext) -> registry_pb2.GetStateResponse: ...
    def WatchState(self, request: registry_pb2.WatchStateRequest, context: grpc.ServicerContext) -> Iterator[registry_pb2.StateEvent]: ...

def add_ClusterRegistryServicer_to_server(servicer: ClusterRegistryServicer, server: grpc.Server) -> None: ...

ClusterRegistry: Callable[..., object]  # grpc's experimental static API, untyped
