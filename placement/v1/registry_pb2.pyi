from placement.v1 import placement_pb2 as _placement_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReservationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESERVATION_STATUS_UNSPECIFIED: _ClassVar[ReservationStatus]
    RESERVATION_STATUS_HELD: _ClassVar[ReservationStatus]
    RESERVATION_STATUS_COMMITTED: _ClassVar[ReservationStatus]
    RESERVATION_STATUS_RELEASED: _ClassVar[ReservationStatus]
    RESERVATION_STATUS_EXPIRED: _ClassVar[ReservationStatus]

class StateEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_EVENT_KIND_UNSPECIFIED: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_SNAPSHOT: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_CLUSTER_PUT: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_STATE_REPLACED: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_STATE_DIFF: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_RESERVED: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_COMMITTED: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_RELEASED: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_RENEWED: _ClassVar[StateEventKind]
    STATE_EVENT_KIND_EXPIRED: _ClassVar[StateEventKind]
RESERVATION_STATUS_UNSPECIFIED: ReservationStatus
RESERVATION_STATUS_HELD: ReservationStatus
RESERVATION_STATUS_COMMITTED: ReservationStatus
RESERVATION_STATUS_RELEASED: ReservationStatus
RESERVATION_STATUS_EXPIRED: ReservationStatus
STATE_EVENT_KIND_UNSPECIFIED: StateEventKind
STATE_EVENT_KIND_SNAPSHOT: StateEventKind
STATE_EVENT_KIND_CLUSTER_PUT: StateEventKind
STATE_EVENT_KIND_STATE_REPLACED: StateEventKind
STATE_EVENT_KIND_STATE_DIFF: StateEventKind
STATE_EVENT_KIND_RESERVED: StateEventKind
STATE_EVENT_KIND_COMMITTED: StateEventKind
STATE_EVENT_KIND_RELEASED: StateEventKind
STATE_EVENT_KIND_RENEWED: StateEventKind
STATE_EVENT_KIND_EXPIRED: StateEventKind

class PutClusterRequest(_message.Message):
    __slots__ = ("cluster_id", "cluster")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    cluster: _placement_pb2.Cluster
    def __init__(self, cluster_id: _Optional[str] = ..., cluster: _Optional[_Union[_placement_pb2.Cluster, _Mapping]] = ...) -> None: ...

class PutClusterResponse(_message.Message):
    __slots__ = ("cluster_id", "version", "changed", "devices")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    version: int
    changed: bool
    devices: int
    def __init__(self, cluster_id: _Optional[str] = ..., version: _Optional[int] = ..., changed: _Optional[bool] = ..., devices: _Optional[int] = ...) -> None: ...

class StateDiff(_message.Message):
    __slots__ = ("occupy", "free", "fail", "recover", "degrade")
    OCCUPY_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    FAIL_FIELD_NUMBER: _ClassVar[int]
    RECOVER_FIELD_NUMBER: _ClassVar[int]
    DEGRADE_FIELD_NUMBER: _ClassVar[int]
    occupy: _containers.RepeatedCompositeFieldContainer[_placement_pb2.Occupancy]
    free: _containers.RepeatedScalarFieldContainer[str]
    fail: _containers.RepeatedScalarFieldContainer[str]
    recover: _containers.RepeatedScalarFieldContainer[str]
    degrade: _containers.RepeatedCompositeFieldContainer[_placement_pb2.Degraded]
    def __init__(self, occupy: _Optional[_Iterable[_Union[_placement_pb2.Occupancy, _Mapping]]] = ..., free: _Optional[_Iterable[str]] = ..., fail: _Optional[_Iterable[str]] = ..., recover: _Optional[_Iterable[str]] = ..., degrade: _Optional[_Iterable[_Union[_placement_pb2.Degraded, _Mapping]]] = ...) -> None: ...

class UpdateStateRequest(_message.Message):
    __slots__ = ("cluster_id", "generation", "state", "diff")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    generation: int
    state: _placement_pb2.State
    diff: StateDiff
    def __init__(self, cluster_id: _Optional[str] = ..., generation: _Optional[int] = ..., state: _Optional[_Union[_placement_pb2.State, _Mapping]] = ..., diff: _Optional[_Union[StateDiff, _Mapping]] = ...) -> None: ...

class UpdateStateResponse(_message.Message):
    __slots__ = ("cluster_id", "generation")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    generation: int
    def __init__(self, cluster_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class Reservation(_message.Message):
    __slots__ = ("id", "cluster_id", "job", "status", "devices", "idempotency_key", "created_unix_s", "expires_unix_s", "ended_unix_s", "generation", "cluster_version")
    ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    ENDED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    id: str
    cluster_id: str
    job: str
    status: ReservationStatus
    devices: _containers.RepeatedScalarFieldContainer[str]
    idempotency_key: str
    created_unix_s: float
    expires_unix_s: float
    ended_unix_s: float
    generation: int
    cluster_version: int
    def __init__(self, id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., job: _Optional[str] = ..., status: _Optional[_Union[ReservationStatus, str]] = ..., devices: _Optional[_Iterable[str]] = ..., idempotency_key: _Optional[str] = ..., created_unix_s: _Optional[float] = ..., expires_unix_s: _Optional[float] = ..., ended_unix_s: _Optional[float] = ..., generation: _Optional[int] = ..., cluster_version: _Optional[int] = ...) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ("cluster_id", "job", "options", "ttl_s", "idempotency_key")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    job: _placement_pb2.Job
    options: _placement_pb2.Options
    ttl_s: float
    idempotency_key: str
    def __init__(self, cluster_id: _Optional[str] = ..., job: _Optional[_Union[_placement_pb2.Job, _Mapping]] = ..., options: _Optional[_Union[_placement_pb2.Options, _Mapping]] = ..., ttl_s: _Optional[float] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("result", "reservation_id", "expires_unix_s", "reservation", "replayed", "attempts")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    result: _placement_pb2.PlacementResult
    reservation_id: str
    expires_unix_s: float
    reservation: Reservation
    replayed: bool
    attempts: int
    def __init__(self, result: _Optional[_Union[_placement_pb2.PlacementResult, _Mapping]] = ..., reservation_id: _Optional[str] = ..., expires_unix_s: _Optional[float] = ..., reservation: _Optional[_Union[Reservation, _Mapping]] = ..., replayed: _Optional[bool] = ..., attempts: _Optional[int] = ...) -> None: ...

class ReservationRequest(_message.Message):
    __slots__ = ("reservation_id", "ttl_s")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    ttl_s: float
    def __init__(self, reservation_id: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class ReservationResponse(_message.Message):
    __slots__ = ("reservation",)
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    reservation: Reservation
    def __init__(self, reservation: _Optional[_Union[Reservation, _Mapping]] = ...) -> None: ...

class ListReservationsRequest(_message.Message):
    __slots__ = ("cluster_id", "live_only")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    LIVE_ONLY_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    live_only: bool
    def __init__(self, cluster_id: _Optional[str] = ..., live_only: _Optional[bool] = ...) -> None: ...

class ListReservationsResponse(_message.Message):
    __slots__ = ("reservations",)
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    reservations: _containers.RepeatedCompositeFieldContainer[Reservation]
    def __init__(self, reservations: _Optional[_Iterable[_Union[Reservation, _Mapping]]] = ...) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ("cluster_id", "include_cluster")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    include_cluster: bool
    def __init__(self, cluster_id: _Optional[str] = ..., include_cluster: _Optional[bool] = ...) -> None: ...

class GetStateResponse(_message.Message):
    __slots__ = ("cluster_id", "cluster_version", "generation", "state", "holds", "seq", "cluster")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    cluster_version: int
    generation: int
    state: _placement_pb2.State
    holds: _containers.RepeatedCompositeFieldContainer[Reservation]
    seq: int
    cluster: _placement_pb2.Cluster
    def __init__(self, cluster_id: _Optional[str] = ..., cluster_version: _Optional[int] = ..., generation: _Optional[int] = ..., state: _Optional[_Union[_placement_pb2.State, _Mapping]] = ..., holds: _Optional[_Iterable[_Union[Reservation, _Mapping]]] = ..., seq: _Optional[int] = ..., cluster: _Optional[_Union[_placement_pb2.Cluster, _Mapping]] = ...) -> None: ...

class WatchStateRequest(_message.Message):
    __slots__ = ("cluster_id", "after_seq")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    after_seq: int
    def __init__(self, cluster_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class StateEvent(_message.Message):
    __slots__ = ("cluster_id", "seq", "kind", "generation", "at_unix_s", "state", "diff", "reservation", "holds", "cluster_version")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    seq: int
    kind: StateEventKind
    generation: int
    at_unix_s: float
    state: _placement_pb2.State
    diff: StateDiff
    reservation: Reservation
    holds: _containers.RepeatedCompositeFieldContainer[Reservation]
    cluster_version: int
    def __init__(self, cluster_id: _Optional[str] = ..., seq: _Optional[int] = ..., kind: _Optional[_Union[StateEventKind, str]] = ..., generation: _Optional[int] = ..., at_unix_s: _Optional[float] = ..., state: _Optional[_Union[_placement_pb2.State, _Mapping]] = ..., diff: _Optional[_Union[StateDiff, _Mapping]] = ..., reservation: _Optional[_Union[Reservation, _Mapping]] = ..., holds: _Optional[_Iterable[_Union[Reservation, _Mapping]]] = ..., cluster_version: _Optional[int] = ...) -> None: ...
