from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SolveStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOLVE_STATUS_UNSPECIFIED: _ClassVar[SolveStatus]
    SOLVE_STATUS_OPTIMAL: _ClassVar[SolveStatus]
    SOLVE_STATUS_FEASIBLE: _ClassVar[SolveStatus]
    SOLVE_STATUS_INFEASIBLE: _ClassVar[SolveStatus]
SOLVE_STATUS_UNSPECIFIED: SolveStatus
SOLVE_STATUS_OPTIMAL: SolveStatus
SOLVE_STATUS_FEASIBLE: SolveStatus
SOLVE_STATUS_INFEASIBLE: SolveStatus

class PlaceRequest(_message.Message):
    __slots__ = ("cluster", "state", "job", "options", "cluster_id")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    state: State
    job: Job
    options: Options
    cluster_id: str
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., state: _Optional[_Union[State, _Mapping]] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., options: _Optional[_Union[Options, _Mapping]] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("cluster", "state", "job", "mapping")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    MAPPING_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    state: State
    job: Job
    mapping: _containers.RepeatedCompositeFieldContainer[Assignment]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., state: _Optional[_Union[State, _Mapping]] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., mapping: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ...) -> None: ...

class CompareRequest(_message.Message):
    __slots__ = ("cluster", "state", "jobs", "options", "cluster_id")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    state: State
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    options: Options
    cluster_id: str
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., state: _Optional[_Union[State, _Mapping]] = ..., jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., options: _Optional[_Union[Options, _Mapping]] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class Options(_message.Message):
    __slots__ = ("strategy", "time_limit_s", "relative_gap", "seed", "deterministic")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_GAP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    strategy: str
    time_limit_s: float
    relative_gap: float
    seed: int
    deterministic: bool
    def __init__(self, strategy: _Optional[str] = ..., time_limit_s: _Optional[float] = ..., relative_gap: _Optional[float] = ..., seed: _Optional[int] = ..., deterministic: _Optional[bool] = ...) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("name", "description", "levels", "intra_node_tiers", "rail_policy", "node_types", "generate", "hosts", "fault_domains", "device_kinds")
    class IntraNodeTiersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tier
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tier, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    INTRA_NODE_TIERS_FIELD_NUMBER: _ClassVar[int]
    RAIL_POLICY_FIELD_NUMBER: _ClassVar[int]
    NODE_TYPES_FIELD_NUMBER: _ClassVar[int]
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    FAULT_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KINDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    levels: _containers.RepeatedCompositeFieldContainer[Level]
    intra_node_tiers: _containers.MessageMap[str, Tier]
    rail_policy: RailPolicy
    node_types: _containers.RepeatedCompositeFieldContainer[NodeType]
    generate: _containers.RepeatedCompositeFieldContainer[GenerateBlock]
    hosts: _containers.RepeatedCompositeFieldContainer[Host]
    fault_domains: _containers.RepeatedCompositeFieldContainer[FaultDomain]
    device_kinds: _containers.RepeatedCompositeFieldContainer[DeviceKind]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., levels: _Optional[_Iterable[_Union[Level, _Mapping]]] = ..., intra_node_tiers: _Optional[_Mapping[str, Tier]] = ..., rail_policy: _Optional[_Union[RailPolicy, _Mapping]] = ..., node_types: _Optional[_Iterable[_Union[NodeType, _Mapping]]] = ..., generate: _Optional[_Iterable[_Union[GenerateBlock, _Mapping]]] = ..., hosts: _Optional[_Iterable[_Union[Host, _Mapping]]] = ..., fault_domains: _Optional[_Iterable[_Union[FaultDomain, _Mapping]]] = ..., device_kinds: _Optional[_Iterable[_Union[DeviceKind, _Mapping]]] = ...) -> None: ...

class Level(_message.Message):
    __slots__ = ("name", "bandwidth_gbps", "latency_us", "oversubscription")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    OVERSUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    bandwidth_gbps: float
    latency_us: float
    oversubscription: float
    def __init__(self, name: _Optional[str] = ..., bandwidth_gbps: _Optional[float] = ..., latency_us: _Optional[float] = ..., oversubscription: _Optional[float] = ...) -> None: ...

class DeviceKind(_message.Message):
    __slots__ = ("name", "tflops", "memory_gb")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TFLOPS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GB_FIELD_NUMBER: _ClassVar[int]
    name: str
    tflops: float
    memory_gb: float
    def __init__(self, name: _Optional[str] = ..., tflops: _Optional[float] = ..., memory_gb: _Optional[float] = ...) -> None: ...

class Tier(_message.Message):
    __slots__ = ("bandwidth_gbps", "latency_us")
    BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    bandwidth_gbps: float
    latency_us: float
    def __init__(self, bandwidth_gbps: _Optional[float] = ..., latency_us: _Optional[float] = ...) -> None: ...

class RailPolicy(_message.Message):
    __slots__ = ("extra_latency_us", "bandwidth_factor")
    EXTRA_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_FACTOR_FIELD_NUMBER: _ClassVar[int]
    extra_latency_us: float
    bandwidth_factor: float
    def __init__(self, extra_latency_us: _Optional[float] = ..., bandwidth_factor: _Optional[float] = ...) -> None: ...

class NodeType(_message.Message):
    __slots__ = ("name", "devices", "kind", "matrix", "rails", "nics", "nic_gbps", "mesh_link_gbps")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MATRIX_FIELD_NUMBER: _ClassVar[int]
    RAILS_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    NIC_GBPS_FIELD_NUMBER: _ClassVar[int]
    MESH_LINK_GBPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    devices: int
    kind: str
    matrix: _containers.RepeatedScalarFieldContainer[str]
    rails: _containers.RepeatedScalarFieldContainer[int]
    nics: int
    nic_gbps: float
    mesh_link_gbps: float
    def __init__(self, name: _Optional[str] = ..., devices: _Optional[int] = ..., kind: _Optional[str] = ..., matrix: _Optional[_Iterable[str]] = ..., rails: _Optional[_Iterable[int]] = ..., nics: _Optional[int] = ..., nic_gbps: _Optional[float] = ..., mesh_link_gbps: _Optional[float] = ...) -> None: ...

class GenerateBlock(_message.Message):
    __slots__ = ("nodes", "node_type", "devices", "kind", "fanout", "prefix", "host_format")
    class FanoutEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NODES_FIELD_NUMBER: _ClassVar[int]
    NODE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FANOUT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    HOST_FORMAT_FIELD_NUMBER: _ClassVar[int]
    nodes: int
    node_type: str
    devices: int
    kind: str
    fanout: _containers.ScalarMap[str, int]
    prefix: str
    host_format: str
    def __init__(self, nodes: _Optional[int] = ..., node_type: _Optional[str] = ..., devices: _Optional[int] = ..., kind: _Optional[str] = ..., fanout: _Optional[_Mapping[str, int]] = ..., prefix: _Optional[str] = ..., host_format: _Optional[str] = ...) -> None: ...

class Host(_message.Message):
    __slots__ = ("name", "domains", "node_type", "devices", "kind")
    class DomainsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    NODE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    name: str
    domains: _containers.ScalarMap[str, str]
    node_type: str
    devices: int
    kind: str
    def __init__(self, name: _Optional[str] = ..., domains: _Optional[_Mapping[str, str]] = ..., node_type: _Optional[str] = ..., devices: _Optional[int] = ..., kind: _Optional[str] = ...) -> None: ...

class FaultDomain(_message.Message):
    __slots__ = ("kind", "name", "members")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ...) -> None: ...

class State(_message.Message):
    __slots__ = ("description", "occupied", "failed", "degraded", "links", "fault_domains")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    OCCUPIED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    FAULT_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    description: str
    occupied: _containers.RepeatedCompositeFieldContainer[Occupancy]
    failed: _containers.RepeatedScalarFieldContainer[str]
    degraded: _containers.RepeatedCompositeFieldContainer[Degraded]
    links: _containers.RepeatedCompositeFieldContainer[LinkState]
    fault_domains: _containers.RepeatedCompositeFieldContainer[FaultDomain]
    def __init__(self, description: _Optional[str] = ..., occupied: _Optional[_Iterable[_Union[Occupancy, _Mapping]]] = ..., failed: _Optional[_Iterable[str]] = ..., degraded: _Optional[_Iterable[_Union[Degraded, _Mapping]]] = ..., links: _Optional[_Iterable[_Union[LinkState, _Mapping]]] = ..., fault_domains: _Optional[_Iterable[_Union[FaultDomain, _Mapping]]] = ...) -> None: ...

class Occupancy(_message.Message):
    __slots__ = ("job", "devices")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    job: str
    devices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ...) -> None: ...

class Degraded(_message.Message):
    __slots__ = ("device", "slowdown")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    device: str
    slowdown: float
    def __init__(self, device: _Optional[str] = ..., slowdown: _Optional[float] = ...) -> None: ...

class LinkState(_message.Message):
    __slots__ = ("between", "uplink", "failed", "slowdown")
    BETWEEN_FIELD_NUMBER: _ClassVar[int]
    UPLINK_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    between: _containers.RepeatedScalarFieldContainer[str]
    uplink: str
    failed: bool
    slowdown: float
    def __init__(self, between: _Optional[_Iterable[str]] = ..., uplink: _Optional[str] = ..., failed: _Optional[bool] = ..., slowdown: _Optional[float] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("name", "description", "ranks", "device_kind", "parallel", "model", "exposure", "groups", "edges", "constraints")
    class ExposureEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EXPOSURE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    ranks: int
    device_kind: str
    parallel: Parallel
    model: Model
    exposure: _containers.ScalarMap[str, float]
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    edges: _containers.RepeatedCompositeFieldContainer[Edge]
    constraints: Constraints
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., ranks: _Optional[int] = ..., device_kind: _Optional[str] = ..., parallel: _Optional[_Union[Parallel, _Mapping]] = ..., model: _Optional[_Union[Model, _Mapping]] = ..., exposure: _Optional[_Mapping[str, float]] = ..., groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[Edge, _Mapping]]] = ..., constraints: _Optional[_Union[Constraints, _Mapping]] = ...) -> None: ...

class Parallel(_message.Message):
    __slots__ = ("tp", "cp", "ep", "dp", "pp", "order")
    TP_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    DP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    tp: int
    cp: int
    ep: int
    dp: int
    pp: int
    order: str
    def __init__(self, tp: _Optional[int] = ..., cp: _Optional[int] = ..., ep: _Optional[int] = ..., dp: _Optional[int] = ..., pp: _Optional[int] = ..., order: _Optional[str] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("parameters", "hidden", "layers", "seq_len", "micro_batch", "micro_batches", "bytes_per_element", "grad_bytes_per_element", "experts", "top_k", "expert_parameters", "kv_fraction", "recompute", "mfu", "heads")
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCHES_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_ELEMENT_FIELD_NUMBER: _ClassVar[int]
    GRAD_BYTES_PER_ELEMENT_FIELD_NUMBER: _ClassVar[int]
    EXPERTS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    EXPERT_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    KV_FRACTION_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    MFU_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    parameters: float
    hidden: int
    layers: int
    seq_len: int
    micro_batch: int
    micro_batches: int
    bytes_per_element: int
    grad_bytes_per_element: int
    experts: int
    top_k: int
    expert_parameters: float
    kv_fraction: float
    recompute: bool
    mfu: float
    heads: int
    def __init__(self, parameters: _Optional[float] = ..., hidden: _Optional[int] = ..., layers: _Optional[int] = ..., seq_len: _Optional[int] = ..., micro_batch: _Optional[int] = ..., micro_batches: _Optional[int] = ..., bytes_per_element: _Optional[int] = ..., grad_bytes_per_element: _Optional[int] = ..., experts: _Optional[int] = ..., top_k: _Optional[int] = ..., expert_parameters: _Optional[float] = ..., kv_fraction: _Optional[float] = ..., recompute: _Optional[bool] = ..., mfu: _Optional[float] = ..., heads: _Optional[int] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("label", "kind", "members", "bytes", "count", "exposed")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EXPOSED_FIELD_NUMBER: _ClassVar[int]
    label: str
    kind: str
    members: _containers.RepeatedScalarFieldContainer[int]
    bytes: float
    count: float
    exposed: float
    def __init__(self, label: _Optional[str] = ..., kind: _Optional[str] = ..., members: _Optional[_Iterable[int]] = ..., bytes: _Optional[float] = ..., count: _Optional[float] = ..., exposed: _Optional[float] = ...) -> None: ...

class Edge(_message.Message):
    __slots__ = ("label", "src", "dst", "bytes", "count", "exposed")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EXPOSED_FIELD_NUMBER: _ClassVar[int]
    label: str
    src: int
    dst: int
    bytes: float
    count: float
    exposed: float
    def __init__(self, label: _Optional[str] = ..., src: _Optional[int] = ..., dst: _Optional[int] = ..., bytes: _Optional[float] = ..., count: _Optional[float] = ..., exposed: _Optional[float] = ...) -> None: ...

class Constraints(_message.Message):
    __slots__ = ("require", "prefer", "spread", "pins", "exclude")
    class RequireEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PreferEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PinsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    REQUIRE_FIELD_NUMBER: _ClassVar[int]
    PREFER_FIELD_NUMBER: _ClassVar[int]
    SPREAD_FIELD_NUMBER: _ClassVar[int]
    PINS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    require: _containers.ScalarMap[str, str]
    prefer: _containers.ScalarMap[str, str]
    spread: _containers.RepeatedCompositeFieldContainer[Spread]
    pins: _containers.ScalarMap[int, str]
    exclude: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, require: _Optional[_Mapping[str, str]] = ..., prefer: _Optional[_Mapping[str, str]] = ..., spread: _Optional[_Iterable[_Union[Spread, _Mapping]]] = ..., pins: _Optional[_Mapping[int, str]] = ..., exclude: _Optional[_Iterable[str]] = ...) -> None: ...

class Spread(_message.Message):
    __slots__ = ("kind", "scope", "min_domains", "max_ranks_per_domain")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    MIN_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    MAX_RANKS_PER_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    kind: str
    scope: str
    min_domains: int
    max_ranks_per_domain: int
    def __init__(self, kind: _Optional[str] = ..., scope: _Optional[str] = ..., min_domains: _Optional[int] = ..., max_ranks_per_domain: _Optional[int] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("rank", "device", "host")
    RANK_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    rank: int
    device: str
    host: str
    def __init__(self, rank: _Optional[int] = ..., device: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class Breakdown(_message.Message):
    __slots__ = ("by_label_s", "by_tier_s", "by_label_tier", "preference_misses")
    class ByLabelSEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ByTierSEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class PreferenceMissesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    BY_LABEL_S_FIELD_NUMBER: _ClassVar[int]
    BY_TIER_S_FIELD_NUMBER: _ClassVar[int]
    BY_LABEL_TIER_FIELD_NUMBER: _ClassVar[int]
    PREFERENCE_MISSES_FIELD_NUMBER: _ClassVar[int]
    by_label_s: _containers.ScalarMap[str, float]
    by_tier_s: _containers.ScalarMap[str, float]
    by_label_tier: _containers.RepeatedCompositeFieldContainer[LabelTier]
    preference_misses: _containers.ScalarMap[str, int]
    def __init__(self, by_label_s: _Optional[_Mapping[str, float]] = ..., by_tier_s: _Optional[_Mapping[str, float]] = ..., by_label_tier: _Optional[_Iterable[_Union[LabelTier, _Mapping]]] = ..., preference_misses: _Optional[_Mapping[str, int]] = ...) -> None: ...

class LabelTier(_message.Message):
    __slots__ = ("label", "tier", "seconds")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    label: str
    tier: str
    seconds: float
    def __init__(self, label: _Optional[str] = ..., tier: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class Phase(_message.Message):
    __slots__ = ("name", "seconds", "exposed_seconds", "tier", "critical", "algorithm")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXPOSED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    name: str
    seconds: float
    exposed_seconds: float
    tier: str
    critical: str
    algorithm: str
    def __init__(self, name: _Optional[str] = ..., seconds: _Optional[float] = ..., exposed_seconds: _Optional[float] = ..., tier: _Optional[str] = ..., critical: _Optional[str] = ..., algorithm: _Optional[str] = ...) -> None: ...

class StepCost(_message.Message):
    __slots__ = ("step_seconds", "comm_seconds", "comm_seconds_total", "compute_seconds", "bubble_seconds", "tokens_per_s", "mfu", "phases", "surrogate_seconds")
    STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COMM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COMM_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BUBBLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    MFU_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    SURROGATE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    step_seconds: float
    comm_seconds: float
    comm_seconds_total: float
    compute_seconds: float
    bubble_seconds: float
    tokens_per_s: float
    mfu: float
    phases: _containers.RepeatedCompositeFieldContainer[Phase]
    surrogate_seconds: float
    def __init__(self, step_seconds: _Optional[float] = ..., comm_seconds: _Optional[float] = ..., comm_seconds_total: _Optional[float] = ..., compute_seconds: _Optional[float] = ..., bubble_seconds: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., mfu: _Optional[float] = ..., phases: _Optional[_Iterable[_Union[Phase, _Mapping]]] = ..., surrogate_seconds: _Optional[float] = ...) -> None: ...

class Baseline(_message.Message):
    __slots__ = ("strategy", "seconds_per_step", "step_seconds", "comm_seconds")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    SECONDS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COMM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    strategy: str
    seconds_per_step: float
    step_seconds: float
    comm_seconds: float
    def __init__(self, strategy: _Optional[str] = ..., seconds_per_step: _Optional[float] = ..., step_seconds: _Optional[float] = ..., comm_seconds: _Optional[float] = ...) -> None: ...

class SolveStats(_message.Message):
    __slots__ = ("wall_s", "time_limit_s", "deadline_limited", "values", "notes")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class NotesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WALL_S_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    wall_s: float
    time_limit_s: float
    deadline_limited: bool
    values: _containers.ScalarMap[str, float]
    notes: _containers.ScalarMap[str, str]
    def __init__(self, wall_s: _Optional[float] = ..., time_limit_s: _Optional[float] = ..., deadline_limited: _Optional[bool] = ..., values: _Optional[_Mapping[str, float]] = ..., notes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PlacementResult(_message.Message):
    __slots__ = ("job", "status", "strategy", "mapping", "seconds_per_step", "breakdown", "lower_bound_s", "gap", "baselines", "stats", "explanation", "cost")
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    MAPPING_FIELD_NUMBER: _ClassVar[int]
    SECONDS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    LOWER_BOUND_S_FIELD_NUMBER: _ClassVar[int]
    GAP_FIELD_NUMBER: _ClassVar[int]
    BASELINES_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    job: str
    status: SolveStatus
    strategy: str
    mapping: _containers.RepeatedCompositeFieldContainer[Assignment]
    seconds_per_step: float
    breakdown: Breakdown
    lower_bound_s: float
    gap: float
    baselines: _containers.RepeatedCompositeFieldContainer[Baseline]
    stats: SolveStats
    explanation: _containers.RepeatedScalarFieldContainer[str]
    cost: StepCost
    def __init__(self, job: _Optional[str] = ..., status: _Optional[_Union[SolveStatus, str]] = ..., strategy: _Optional[str] = ..., mapping: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., seconds_per_step: _Optional[float] = ..., breakdown: _Optional[_Union[Breakdown, _Mapping]] = ..., lower_bound_s: _Optional[float] = ..., gap: _Optional[float] = ..., baselines: _Optional[_Iterable[_Union[Baseline, _Mapping]]] = ..., stats: _Optional[_Union[SolveStats, _Mapping]] = ..., explanation: _Optional[_Iterable[str]] = ..., cost: _Optional[_Union[StepCost, _Mapping]] = ...) -> None: ...

class PlaceResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: PlacementResult
    def __init__(self, result: _Optional[_Union[PlacementResult, _Mapping]] = ...) -> None: ...

class EvaluateResponse(_message.Message):
    __slots__ = ("job", "seconds_per_step", "breakdown", "mapping", "cost")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SECONDS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    MAPPING_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    job: str
    seconds_per_step: float
    breakdown: Breakdown
    mapping: _containers.RepeatedCompositeFieldContainer[Assignment]
    cost: StepCost
    def __init__(self, job: _Optional[str] = ..., seconds_per_step: _Optional[float] = ..., breakdown: _Optional[_Union[Breakdown, _Mapping]] = ..., mapping: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., cost: _Optional[_Union[StepCost, _Mapping]] = ...) -> None: ...

class CompareEntry(_message.Message):
    __slots__ = ("job_index", "result")
    JOB_INDEX_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    job_index: int
    result: PlacementResult
    def __init__(self, job_index: _Optional[int] = ..., result: _Optional[_Union[PlacementResult, _Mapping]] = ...) -> None: ...

class CompareResponse(_message.Message):
    __slots__ = ("ranking",)
    RANKING_FIELD_NUMBER: _ClassVar[int]
    ranking: _containers.RepeatedCompositeFieldContainer[CompareEntry]
    def __init__(self, ranking: _Optional[_Iterable[_Union[CompareEntry, _Mapping]]] = ...) -> None: ...
