"""Typed interface of placement_pb2_grpc (written by scripts/gen_protos.py from placement/v1/placement.proto; do not edit)."""

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

import grpc

from placement.v1 import placement_pb2

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


class PlacementServiceStub:
    def __init__(self, channel: grpc.Channel) -> None: ...
    Place: _UnaryUnary[placement_pb2.PlaceRequest, placement_pb2.PlaceResponse]
    Evaluate: _UnaryUnary[placement_pb2.EvaluateRequest, placement_pb2.EvaluateResponse]
    Compare: _UnaryUnary[placement_pb2.CompareRequest, placement_pb2.CompareResponse]
    PlaceBatch: _UnaryUnary[placement_pb2.PlaceBatchRequest, placement_pb2.PlaceBatchResponse]
    Repair: _UnaryUnary[placement_pb2.RepairRequest, placement_pb2.RepairResponse]

class PlacementServiceServicer:
    def Place(self, request: placement_pb2.PlaceRequest, context: grpc.ServicerContext) -> placement_pb2.PlaceResponse: ...
    def Evaluate(self, request: placement_pb2.EvaluateRequest, context: grpc.ServicerContext) -> placement_pb2.EvaluateResponse: ...
    def Compare(self, request: placement_pb2.CompareRequest, context: grpc.ServicerContext) -> placement_pb2.CompareResponse: ...
    def PlaceBatch(self, request: placement_pb2.PlaceBatchRequest, context: grpc.ServicerContext) -> placement_pb2.PlaceBatchResponse: ...
    def Repair(self, request: placement_pb2.RepairRequest, context: grpc.ServicerContext) -> placement_pb2.RepairResponse: ...

def add_PlacementServiceServicer_to_server(servicer: PlacementServiceServicer, server: grpc.Server) -> None: ...

PlacementService: Callable[..., object]  # grpc's experimental static API, untyped
