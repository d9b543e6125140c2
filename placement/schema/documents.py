"""The input files of `placement` as declarative models (pydantic v2): cluster, state, job, mapping, request,
batch, running jobs, sweep, serving job and serving sweep, each field with its type, default, unit and an example,
true to the readers.

The readers (`placement.io.native`, `placement.io.native.serving`, `placement.messages.files`,
`placement.sim.whatif.spec`, the batch and preempt commands) stay the judges of a file: they check what a JSON
Schema cannot (a level named in `fanout` exists, a rank is below `ranks`, a device selector resolves, batch or
the concurrency splitting evenly). These models say what a file may hold, for
`placement schema KIND` (JSON Schema draft 2020-12), editors (the examples' `$schema` line) and docs/formats.md;
tests/schema/test_schema.py loads every example through both, so the two cannot disagree silently.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, RootModel, StringConstraints

from placement.cost.compute import DEFAULT_MFU
from placement.io.native.document import (
    MAX_BANDWIDTH_GBPS,
    MAX_BYTES,
    MAX_COUNT,
    MAX_LATENCY_US,
    MAX_PARAMETERS,
    MAX_SLOWDOWN,
    MIN_BANDWIDTH_GBPS,
)
from placement.io.native.serving import MAX_SIZE as MAX_SERVING_SIZE
from placement.io.native.state import MAX_LOAD_GBPS
from placement.sim.whatif.axes import DEFAULT_TIME_LIMIT

__all__ = [
    "DOCUMENTS",
    "Batch",
    "Cluster",
    "Job",
    "MappingFile",
    "Request",
    "RunningFile",
    "ServingJob",
    "ServingSweep",
    "State",
    "Sweep",
]


StrategyName = Literal["first-fit", "kueue-tas", "slurm-tree", "slurm-block", "cpsat", "topology-greedy"]
"""`placement.solve.Strategy`'s names (topology-greedy: the old name of kueue-tas); a test keeps them equal."""
CollectiveName = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
"""`placement.model.job.CollectiveKind`'s values."""
LauncherName = Literal["any", "torchrun"]
"""`placement.model.job.LAUNCHERS`."""
ModeName = Literal["whole", "partial", "mixed"]
"""`placement.sim.whatif.axes.MODES`."""
ObjectiveName = Literal["own", "cluster"]
"""`placement.cost.shared.OBJECTIVES`."""
T = TypeVar("T")
Axis: TypeAlias = T | list[T]
"""A sweep axis: its values, or one value."""


def _unit(unit: str) -> dict[str, Any]:
    return {"x-unit": unit}


class _Doc(BaseModel):
    """Every object of a file: unknown keys are refused (the readers say "unknown field; did you mean ...")."""

    model_config = ConfigDict(extra="forbid")


Selector = Annotated[
    str,
    Field(
        description="a device (`host/gpuK`), a host, a domain, or `level:domain` when one name is used at "
        "several levels",
        examples=["node03/gpu5", "node07", "leaf02", "leaf:leaf02"],
    ),
]
_CODE = r"(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)"
LinkCode = Annotated[str, StringConstraints(pattern=f"^{_CODE}$")]
MatrixRow = Annotated[str, StringConstraints(pattern=rf"^\s*{_CODE}(\s+{_CODE})*\s*$")]
RankKey = Annotated[str, StringConstraints(pattern=r"^\s*\d+\s*$")]
RankRange = Annotated[str, StringConstraints(pattern=r"^\s*\d+\s*(-\s*\d+\s*)?(,\s*\d+\s*(-\s*\d+\s*)?)*$")]
NumText = Annotated[
    str,
    StringConstraints(pattern=r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"),
    Field(
        description="a number written as text: YAML 1.1 reads `7.0e9` as a string, and the readers take it"
    ),
]
"""A number field also takes its number as text (the readers' `num` converts it)."""
Fraction = Annotated[float, Field(ge=0, le=1)] | NumText
Bandwidth = Annotated[float, Field(ge=MIN_BANDWIDTH_GBPS, le=MAX_BANDWIDTH_GBPS)] | NumText
Latency = Annotated[float, Field(ge=0, le=MAX_LATENCY_US)] | NumText
Slowdown = Annotated[float, Field(ge=1, le=MAX_SLOWDOWN)] | NumText
Positive = Annotated[float, Field(gt=0, le=1e6)] | NumText
Share = Annotated[float, Field(gt=0, le=1)] | NumText
Parameters = Annotated[float, Field(gt=0, le=MAX_PARAMETERS)] | NumText
ExpertParameters = Annotated[float, Field(ge=0, le=MAX_PARAMETERS)] | NumText
Bytes = Annotated[float, Field(ge=0, le=MAX_BYTES)] | NumText
Count = Annotated[float, Field(ge=0, le=MAX_COUNT)] | NumText
Oversubscription = Annotated[float, Field(gt=0, le=1e3)] | NumText
RailFactor = Annotated[float, Field(ge=1 / MAX_SLOWDOWN, le=1.0)] | NumText
LinkLoadGbps = Annotated[float, Field(ge=0, le=MAX_LOAD_GBPS)] | NumText
RankDevices = Annotated[dict[RankKey, str], Field(json_schema_extra={"additionalProperties": False})]

# ---- cluster ----------------------------------------------------------------------------------------------


class Tier(_Doc):
    """A link tier: bandwidth per device and direction, and one-hop latency."""

    bandwidth_gbps: Bandwidth = Field(
        description="bandwidth per device and direction (1 GB/s = 1e9 bytes/s); required",
        examples=[450],
        json_schema_extra=_unit("GB/s"),
    )
    latency_us: Latency = Field(
        0.0, description="one-hop latency", examples=[2], json_schema_extra=_unit("µs")
    )


class Level(Tier):
    """A level of the domain tree, bottom up: `levels[0]` is the host, the top level holds one domain. Its tier is
    the path two devices take when the lowest domain they share is of this level."""

    name: str = Field(description="the level's name; generated domains are named after it", examples=["leaf"])
    oversubscription: Oversubscription = Field(
        1.0,
        description="the uplinks of each domain of this level carry 1/ratio of what its devices could send at "
        "the next level's tier (1: non-blocking)",
        examples=[2],
        json_schema_extra=_unit("ratio"),
    )
    nvlink: bool = Field(
        False,
        description="each domain of this level is one NVLink domain across hosts (a GB200 NVL72 rack): NVLS runs "
        "across its hosts",
    )
    sharp: bool = Field(
        False,
        description="the switches of this level reduce in the network (InfiniBand SHARP): NCCL's CollNet runs "
        "across hosts when every level up to the group's lowest common one has it",
    )


class RailPolicy(_Doc):
    """Rail-optimized fabrics: cross-host traffic between different rails (NIC indices) takes an extra hop."""

    extra_latency_us: Latency = Field(
        2.0, description="added to each cross-rail transfer", json_schema_extra=_unit("µs")
    )
    bandwidth_factor: RailFactor = Field(
        1.0,
        description="cross-rail transfers run at this fraction of the tier's bandwidth",
        json_schema_extra=_unit("fraction"),
    )


class NodeType(_Doc):
    """A kind of host. `devices` is required unless a `matrix` or an `nvidia_smi` file gives the count."""

    name: str = Field(
        description="referenced by `generate[].node_type` and `hosts[].node_type`", examples=["hgx-h100"]
    )
    devices: int | None = Field(
        None,
        ge=1,
        description="devices per host; default: the matrix's side",
        examples=[8],
        json_schema_extra=_unit("devices"),
    )
    kind: str = Field(
        "gpu",
        description="device kind: a built-in (V100, A100, H100, H200, B200, GB200, MI300X, L40S) or one of "
        "`device_kinds`; a job's `device_kind` must match it",
        examples=["H100"],
    )
    matrix: list[MatrixRow | list[LinkCode]] | None = Field(
        None,
        description="intra-node link codes as `nvidia-smi topo -m` prints them, one row per device (a string of "
        "codes or a list): X, NV# (# NVLinks), PIX, PXB, PHB, NODE, SYS, SOC; refines the host level's tier",
        examples=[["X NV18", "NV18 X"]],
    )
    rails: list[Annotated[int, Field(ge=0)] | None] | None = Field(
        None,
        description="per device: the index of its NIC (rail); null = none. Rail-aligned traffic avoids the "
        "`rail_policy` penalty",
        examples=[[0, 1, 2, 3, 4, 5, 6, 7]],
    )
    nvidia_smi: str | None = Field(
        None,
        description="a saved `nvidia-smi topo -m` output (path relative to the cluster file): gives matrix, rails "
        "and CPU/NUMA affinity",
        examples=["topo.txt"],
    )
    nvidia_smi_table: int | None = Field(
        None, description="which table of the `nvidia_smi` file, when it holds several (0 = the first)"
    )
    nics: int | None = Field(
        None,
        ge=1,
        description="NICs the host's devices share for cross-host traffic; default: one per device",
        examples=[8],
    )
    nic_gbps: Bandwidth | None = Field(
        None,
        description="bandwidth of each NIC and direction; default: the level-1 tier's bandwidth",
        examples=[50],
        json_schema_extra=_unit("GB/s"),
    )
    mesh_link_gbps: Bandwidth | None = Field(
        None,
        description="a fully connected mesh without a switch (AMD XGMI): each device pair has its own link of this "
        "bandwidth, and the host level's tier is the device's total",
        examples=[64],
        json_schema_extra=_unit("GB/s"),
    )
    cpu_affinity: list[str | None] | None = Field(
        None,
        description="per device: the CPUs close to it (nvidia-smi's CPU Affinity); null or '' = unknown. "
        "`placement bind` and the rankfile use it",
        examples=[["0-47,96-143", "48-95,144-191"]],
    )
    numa_affinity: list[Annotated[int, Field(ge=-1)] | None] | None = Field(
        None,
        description="per device: its NUMA node (nvidia-smi's NUMA Affinity); null or -1 = unknown",
        examples=[[0, 0, 1, 1]],
    )


class _HostShape(_Doc):
    node_type: str | None = Field(
        None, description="a `node_types[].name`; or give `devices` (and `kind`)", examples=["hgx-h100"]
    )
    devices: int | None = Field(
        None,
        ge=1,
        description="devices per host, without a node type",
        examples=[8],
        json_schema_extra=_unit("devices"),
    )
    kind: str = Field("gpu", description="device kind, without a node type", examples=["H100"])


class Generate(_HostShape):
    """`nodes` hosts of one shape, packed `fanout` per level. Host K (1-based) is named
    `{prefix}{levels[0].name}{K}`, K zero-padded to max(2, digits of `nodes`) (`node01` ... `node32`), or
    `host_format.format(K)`. Its domain at a level above is `{prefix}{level}{J}`, J = (K-1) // (the product of the
    fanouts up to that level) + 1, padded the same way to that level's domain count (`leaf01` ... `leaf04`); the
    top level, when it is one domain, is named after the level (`spine`). Devices are `host/gpuI`, I from 0. Each
    block numbers its hosts from 1: two blocks need different `prefix`es (or `host_format`s)."""

    nodes: int = Field(
        ge=1, description="how many hosts; required", examples=[32], json_schema_extra=_unit("hosts")
    )
    fanout: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict,
        description="per level above the host: how many domains of the level below one domain of it holds. "
        "Required for every level but the top one, which defaults to holding everything (it must be one domain)",
        examples=[{"leaf": 8}],
    )
    prefix: str = Field("", description="put before every generated host and domain name", examples=["a-"])
    host_format: str | None = Field(
        None,
        description="a Python format with one positional field for host names, instead of the default",
        examples=["gpu-{:03d}"],
    )


class Host(_HostShape):
    """An explicit host with its domain at every level above the host."""

    name: str = Field(description="the host's name; devices are `name/gpuI`", examples=["dgx-a01"])
    domains: dict[str, str] = Field(
        default_factory=dict,
        description="level name -> domain name, for every level above the host",
        examples=[{"leaf": "leaf01", "spine": "spine"}],
    )


class FaultDomain(_Doc):
    """A fault domain: any grouping of devices (power feed, PDU, cooling), not only the network tree."""

    kind: str = Field(description="what fails together; spread rules name it", examples=["power"])
    name: str = Field(description="this domain's name", examples=["feed-a"])
    members: list[Selector] = Field(
        default_factory=list,
        description="devices, hosts or domains; a device is in at most one domain of a kind",
        examples=[["leaf01", "leaf02"]],
    )


class DeviceKind(_Doc):
    """A device kind beyond the built-in ones, or an override of one."""

    name: str = Field(
        description="referenced by `node_types[].kind` and a job's `device_kind`", examples=["H100"]
    )
    tflops: Positive = Field(
        description="peak dense BF16/FP16", examples=[989], json_schema_extra=_unit("TFLOP/s")
    )
    memory_gb: Positive = Field(description="device memory", examples=[80], json_schema_extra=_unit("GB"))


class Cluster(_Doc):
    """A cluster file: devices in a tree of named domain levels, bottom up, with a link tier per level. Hosts come
    from `generate` (compact) and/or `hosts` (explicit); at least one of the two."""

    model_config = ConfigDict(title="placement cluster file")

    name: str | None = Field(
        None, description="default: the file's name without its suffix", examples=["h100-256"]
    )
    description: str | None = Field(None, description="free text")
    levels: list[Level] = Field(
        description="required; bottom up, e.g. node < leaf < spine",
        examples=[[{"name": "node", "bandwidth_gbps": 450, "latency_us": 2}]],
    )
    intra_node_tiers: dict[Literal["NV", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC"], Tier] = Field(
        default_factory=dict,
        description="overrides of the built-in tier of a matrix code (NV is per link: NV18 = 18 x NV)",
        examples=[{"NV": {"bandwidth_gbps": 25, "latency_us": 1}}],
    )
    rail_policy: RailPolicy | None = Field(None, description="set on rail-optimized fabrics")
    node_types: list[NodeType] = Field(default_factory=list, description="the host shapes hosts refer to")
    generate: Generate | list[Generate] | None = Field(
        None,
        description="compact host lists (one block or a list); generated hosts come before `hosts`",
        examples=[{"nodes": 32, "node_type": "hgx-h100", "fanout": {"leaf": 8}}],
    )
    hosts: list[Host] | None = Field(None, description="explicit hosts, with real names")
    fault_domains: list[FaultDomain] | None = Field(
        None, description="static fault domains; a state file's own fault domains of a kind replace these"
    )
    device_kinds: list[DeviceKind] | None = Field(None, description="device kinds beyond the built-in ones")


# ---- state ------------------------------------------------------------------------------------------------


class Occupied(_Doc):
    """Devices a job holds."""

    job: str = Field(
        description="the job holding them; a job may use devices occupied by its own name",
        examples=["train-7"],
    )
    devices: list[Selector] = Field(default_factory=list, examples=[["node08", "node02/gpu6"]])
    shape: Job | None = Field(
        None,
        description="the running job's shape, a job file's body (parallel/model, or groups/edges; `name` defaults "
        "to `job`, an explicit job's `ranks` to the entry's device count): its traffic then shares the fabric "
        "with a new job's (`--objective cluster`, docs/model.md). Not with `job_file`",
        examples=[
            {
                "parallel": {"tp": 8, "dp": 4},
                "model": {"parameters": 7.0e9, "hidden": 4096, "layers": 32, "seq_len": 4096},
            }
        ],
    )
    job_file: str | None = Field(
        None,
        description="the running job's shape as a job file (relative to the state file), instead of `shape`",
        examples=["tp8-dp4.yaml"],
    )
    ranks: list[Selector] | None = Field(
        None,
        description="with `shape` or `job_file`: the device of each rank, in rank order, each one device among "
        "`devices` and none twice; default: the entry's devices in order",
        examples=[["node17/gpu0", "node17/gpu1"]],
    )


class Degraded(_Doc):
    """A slow device."""

    device: Selector
    slowdown: Slowdown = Field(
        description="what crosses it takes this many times longer; required",
        examples=[1.5],
        json_schema_extra=_unit("x"),
    )


class Link(_Doc):
    """A failed or slow link: `between` two devices of one host, or the `uplink` of a host or domain."""

    between: list[str] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="two devices of one host (an intra-node link)",
        examples=[["node03/gpu0", "node03/gpu1"]],
    )
    uplink: Selector | None = Field(
        None,
        description="a host or domain (not the top one): the link above it; `level:name` when the name is ambiguous",
        examples=["node12"],
    )
    failed: bool = Field(False, description="the link is down; or give a slowdown or a load_gbps")
    slowdown: Slowdown | None = Field(None, examples=[2.0], json_schema_extra=_unit("x"))
    load_gbps: LinkLoadGbps | None = Field(
        None,
        description="traffic measured on an uplink (switch counters), which a new job's traffic shares; not on "
        "`between`. Several entries of one uplink add up",
        examples=[600],
        json_schema_extra=_unit("GB/s"),
    )
    direction: Literal["up", "down", "both"] = Field(
        "both",
        description="with `load_gbps`: `up` leaves the domain, `down` enters it, `both` is each way",
    )


class State(_Doc):
    """A state file: what is busy, failed or slow now, resolved against a cluster. Unset: every device free."""

    model_config = ConfigDict(title="placement state file")

    description: str | None = Field(None, description="free text")
    occupied: list[Occupied] | None = Field(None, description="devices other jobs hold")
    failed: list[Selector] | None = Field(
        None, description="failed devices, hosts or domains", examples=[["node21/gpu3"]]
    )
    degraded: list[Degraded] | None = Field(None, description="slow devices")
    links: list[Link] | None = Field(None, description="failed or slow links")
    fault_domains: list[FaultDomain] | None = Field(
        None, description="fault domains; of a kind given here, these replace the cluster file's"
    )


# ---- job --------------------------------------------------------------------------------------------------


class Parallel(_Doc):
    """The parallel sizes of a structured job; ranks = tp*cp*ep*dp*pp."""

    tp: int = Field(1, ge=1, description="tensor parallel", examples=[8])
    cp: int = Field(1, ge=1, description="context parallel")
    ep: int = Field(1, ge=1, description="expert parallel (needs model.experts >= ep and top_k >= 1)")
    dp: int = Field(1, ge=1, description="data parallel", examples=[4])
    pp: int = Field(1, ge=1, description="pipeline stages (model.layers must split evenly)", examples=[2])
    order: str = Field(
        "tp-cp-ep-dp-pp",
        pattern=r"^(tp|cp|ep|dp|pp)(-(tp|cp|ep|dp|pp)){4}$",
        description="how ranks are numbered, fastest varying first (Megatron-LM's order); each dimension once",
        examples=["tp-cp-ep-dp-pp"],
    )


class Model(_Doc):
    """The model and batch shape the traffic and compute follow from (placement/model/traffic.py)."""

    parameters: Parameters = Field(
        description="parameter count; required", examples=[13.0e9], json_schema_extra=_unit("parameters")
    )
    hidden: int = Field(ge=1, le=10**7, description="hidden size; required", examples=[5120])
    layers: int = Field(ge=1, le=10**6, description="transformer layers; required", examples=[40])
    seq_len: int = Field(
        ge=1,
        le=10**9,
        description="sequence length; required",
        examples=[4096],
        json_schema_extra=_unit("tokens"),
    )
    micro_batch: int = Field(
        1, ge=1, le=10**6, description="sequences per micro-batch", json_schema_extra=_unit("sequences")
    )
    micro_batches: int = Field(
        1,
        ge=1,
        le=10**6,
        description="micro-batches per step and pipeline (the global batch is dp x micro_batch x micro_batches)",
        examples=[16],
    )
    bytes_per_element: int = Field(
        2, ge=1, le=64, description="activations and parameters (2: BF16)", json_schema_extra=_unit("bytes")
    )
    grad_bytes_per_element: int | None = Field(
        None,
        ge=1,
        le=64,
        description="gradients; default: bytes_per_element",
        json_schema_extra=_unit("bytes"),
    )
    experts: int = Field(0, ge=0, le=10**6, description="MoE experts (0: dense)")
    top_k: int = Field(0, ge=0, le=10**6, description="experts each token goes to")
    expert_parameters: ExpertParameters = Field(
        0.0,
        description="of `parameters`, those in the experts (< parameters)",
        json_schema_extra=_unit("parameters"),
    )
    kv_fraction: Share = Field(
        1.0, description="K/V width over the hidden size (GQA: kv_heads / heads); scales the CP exchange"
    )
    recompute: bool = Field(
        False,
        description="full activation recomputation: the forward (and its TP/CP/EP traffic) runs again in the backward",
    )
    distributed_optimizer: bool = Field(
        False,
        description="Megatron's distributed optimizer (ZeRO-1): the DP reduce is a reduce-scatter beside the backward "
        "and an all-gather after the optimizer step",
    )
    mfu: Share = Field(
        DEFAULT_MFU,
        description="fraction of the devices' peak FLOP/s the compute kernels reach",
        json_schema_extra=_unit("fraction"),
    )
    heads: int | None = Field(
        None, ge=1, le=10**6, description="attention heads (activation memory); default: hidden / 128"
    )


class Group(_Doc):
    """A communication group of an explicit job."""

    label: str | None = Field(
        None, description="the group kind for breakdowns and constraints; default: `kind`", examples=["tp"]
    )
    kind: CollectiveName = Field("all_reduce", description="the collective")
    members: list[int] | RankRange = Field(
        description='ranks (>= 2, each once): a list or ranges like "0-7,16-23"; required', examples=["0-7"]
    )
    bytes: Bytes = Field(
        description="the buffer S of one collective (all_gather: the gathered buffer; all_to_all: what one member sends); required",
        examples=[2.0e8],
        json_schema_extra=_unit("bytes"),
    )
    count: Count = Field(1.0, description="collectives per step", json_schema_extra=_unit("per step"))
    exposed: Fraction = Field(1.0, description="the fraction not hidden behind compute")


class Edge(_Doc):
    """Point-to-point traffic of an explicit job."""

    label: str = Field("p2p", examples=["pp"])
    src: int = Field(ge=0, description="sending rank; required")
    dst: int = Field(ge=0, description="receiving rank (not src); required")
    bytes: Bytes = Field(description="one transfer; required", json_schema_extra=_unit("bytes"))
    count: Count = Field(1.0, description="transfers per step", json_schema_extra=_unit("per step"))
    exposed: Fraction = Field(1.0, description="the fraction not hidden behind compute")


class Spread(_Doc):
    """Fault-domain spread: give min_domains and/or max_ranks_per_domain."""

    kind: str = Field(description="a fault-domain kind of the cluster or state; required", examples=["power"])
    scope: str = Field(
        "job", description="`job`, or a group label: each group of it is spread", examples=["job"]
    )
    min_domains: int | None = Field(
        None, ge=1, description="the scope covers at least this many domains of `kind`", examples=[2]
    )
    max_ranks_per_domain: int | None = Field(
        None, ge=1, description="at most this many of the scope's ranks in one domain"
    )


class Balance(_Doc):
    """Balanced slices (Kueue's): slices of `slice` ranks spread evenly over the domains of `level` the job uses."""

    level: str = Field(description="a level of the cluster; required", examples=["leaf"])
    slice: int = Field(1, ge=1, description="ranks per slice", json_schema_extra=_unit("ranks"))


class Segment(_Doc):
    """Segments (Slurm's --segment): consecutive blocks of `nodes` hosts' worth of ranks, each in one domain."""

    nodes: int = Field(ge=1, description="hosts per segment; required", json_schema_extra=_unit("hosts"))
    level: str = Field(
        description="each segment stays inside one domain of this level; required", examples=["leaf"]
    )


class Constraints(_Doc):
    """Hard and soft rules."""

    require: dict[str, str] = Field(
        default_factory=dict,
        description="group label -> level: every group (and edge) of that label stays inside one domain of that level",
        examples=[{"tp": "node"}],
    )
    prefer: dict[str, str] = Field(
        default_factory=dict,
        description="the same, soft: reported, and ties are broken toward it",
        examples=[{"tp": "node"}],
    )
    spread: list[Spread] = Field(default_factory=list, description="fault-domain spread rules")
    pins: RankDevices = Field(
        default_factory=dict, description="rank -> device id", examples=[{"0": "node01/gpu0"}]
    )
    exclude: list[Selector] = Field(default_factory=list, description="devices, hosts or domains not to use")
    balance: Balance | None = None
    segment: Segment | None = None


class Job(_Doc):
    """A job file: structured (`parallel` + `model`: the traffic is derived) or explicit (`ranks` + `groups` and/or
    `edges`), not both."""

    model_config = ConfigDict(title="placement job file")

    name: str | None = Field(
        None, description="default: the file's name without its suffix", examples=["llama-13b"]
    )
    description: str | None = Field(None, description="free text")
    ranks: int | None = Field(
        None,
        ge=1,
        description="required for an explicit job; a structured one's must equal tp*cp*ep*dp*pp",
        json_schema_extra=_unit("ranks"),
    )
    device_kind: str | None = Field(
        None, description="only devices of this kind (a node type's `kind`); default: any", examples=["H100"]
    )
    parallel: Parallel | None = Field(None, description="the parallel sizes: the job is structured")
    model: Model | None = Field(None, description="required with `parallel`")
    exposure: dict[str, Fraction] = Field(
        default_factory=dict,
        description="group label -> the fraction of its communication not hidden behind compute",
        examples=[{"dp": 0.5}],
    )
    groups: list[Group] | None = Field(None, description="collectives of an explicit job")
    edges: list[Edge] | None = Field(None, description="point-to-point transfers of an explicit job")
    constraints: Constraints | None = Field(None, description="hard and soft placement rules")
    launcher: LauncherName = Field(
        "any",
        description="`torchrun` numbers ranks host by host: each host's ranks must be one contiguous block",
    )


Occupied.model_rebuild()
State.model_rebuild()


# ---- mapping, request, batch, running jobs -------------------------------------------------------------


class Assignment(_Doc):
    rank: int | None = Field(None, ge=0, description="default: the position in the list")
    device: str = Field(description="device id `host/gpuI`", examples=["node01/gpu0"])


MappingList = list[str | Assignment]


class ResultMapping(BaseModel):
    """A result (`placement place --out`): its `mapping` is read, its other fields are not."""

    model_config = ConfigDict(extra="allow")
    mapping: MappingList | RankDevices


class PlaceResponse(BaseModel):
    """A PlaceResponse (`placement place --output json`): `result.mapping` is read."""

    model_config = ConfigDict(extra="allow")
    result: ResultMapping


class MappingFile(RootModel[MappingList | RankDevices | ResultMapping | PlaceResponse]):
    """A mapping file (rank -> device): a list of device ids in rank order, a list of `{rank, device}`,
    `{rank: device}`, or a result whose `mapping` (or `result.mapping`) it reads."""

    model_config = ConfigDict(title="placement mapping file")


class Options(_Doc):
    """Solver options; every unset field takes the default (or the server's)."""

    strategy: StrategyName = Field(
        "cpsat", description="cpsat (the optimizer) or a scheduler baseline; topology-greedy = kueue-tas"
    )
    time_limit_s: float | None = Field(
        None, gt=0, description="wall-clock limit of the search", json_schema_extra=_unit("s")
    )
    relative_gap: float | None = Field(
        None, ge=0, description="stop once (step - bound) / step is at most this"
    )
    seed: int | None = Field(None, description="the same request with the same seed gives the same answer")
    deterministic: bool | None = Field(
        None, description="budget the search in deterministic time: the answer does not depend on load"
    )
    objective: ObjectiveName = Field(
        "own",
        description="what the answer minimises when running jobs' traffic is on the fabric (a state's "
        "`occupied[].shape`, `links[].load_gbps`): `own` (the job's step) or `cluster` (its step x (1 + harm to "
        "the running jobs / gpus); docs/model.md, Shared fabric)",
    )


class Request(_Doc):
    """A place request file (`placement place --request`): the PlaceRequest of protos/placement/v1 in the protobuf
    JSON mapping. Each part may be inline or a native file (`*_file`, relative to the request file)."""

    model_config = ConfigDict(title="placement request file")

    cluster: Cluster | None = Field(None, description="the cluster inline")
    cluster_file: str | None = Field(
        None, description="a cluster file, instead of `cluster`", examples=["dgx-h100-4node.yaml"]
    )
    cluster_id: str | None = Field(
        None, description="a cluster held by the server's registry, instead of cluster and state"
    )
    state: State | None = Field(None, description="unset: every device free and healthy")
    state_file: str | None = Field(None, description="a state file, instead of `state`")
    job: Job | RequestServingJob | ServingJobDoc | None = Field(
        None,
        description="the job inline: a training job, or a serving job under `serving` (the message's form) or "
        "with `kind: serving` (a serving job file's form)",
    )
    job_file: str | None = Field(
        None,
        description="a job file, instead of `job`: a training job, or a serving job file (`kind: serving`), "
        "read by the serving reader into the job's `serving` (its name: the file's, unless it names one)",
        examples=["tp8-dp4.yaml"],
    )
    options: Options | None = None
    max_slowdown: float | None = Field(
        None,
        ge=1,
        description="answer WAIT when the best step is above this x the job's ideal step",
        json_schema_extra=_unit("x"),
    )


class BatchEntry(_Doc):
    """A job of the queue: `job` inline or `job_file`, exactly one."""

    job: Job | ServingJob | None = Field(
        None,
        description="the job inline: a training job, or a serving job (`kind: serving`, docs/serving.md)",
    )
    job_file: str | None = Field(
        None,
        description="a job file, relative to the batch file: a training job or a serving job (`kind: serving`)",
        examples=["tp8-dp4.yaml"],
    )
    weight: float = Field(
        1.0,
        description="counts toward the admitted weight and multiplies the job's step seconds (a serving job's "
        "step is its time per output token)",
    )
    priority: float = Field(0.0, description="orders the priority-cpsat baseline (higher first)")


class Batch(_Doc):
    """A batch file (`placement place-batch`): a queue of jobs in arrival (FIFO) order."""

    model_config = ConfigDict(title="placement batch file")

    description: str | None = None
    jobs: list[BatchEntry] = Field(description="required")


class RunningJob(_Doc):
    """A running job of the state and what preempting it costs."""

    job: str = Field(
        min_length=1, description="the job's name in the state's occupancy; required", examples=["train-3"]
    )
    priority: float = Field(
        0.0, description="only jobs of strictly lower priority than the new job are preempted"
    )
    checkpoint_age_s: float | None = Field(
        None,
        description="work since the last checkpoint, lost on each of its devices",
        json_schema_extra=_unit("s"),
    )
    gpu_hours: float | None = Field(
        None, description="the cost of preempting it, directly", json_schema_extra=_unit("GPU-hours")
    )


class RunningJobs(_Doc):
    description: str | None = None
    running: list[RunningJob] = Field(description="required")


class RunningFile(RootModel[RunningJobs | list[RunningJob]]):
    """A running-jobs file (`placement preempt --running`): `running:` a list of the running jobs, or the list
    alone."""

    model_config = ConfigDict(title="placement running-jobs file")


# ---- sweep ------------------------------------------------------------------------------------------------


class SweepSolver(_Doc):
    workers: int = Field(1, ge=1, description="CP-SAT workers per point (points run in parallel)")
    seed: int = 0
    relative_gap: float = Field(0.0, ge=0, lt=1)
    deterministic: bool = Field(False, description="deterministic time: answers do not depend on load")


class TierOption(_Doc):
    bandwidth_gbps: float | None = Field(None, gt=0, json_schema_extra=_unit("GB/s"))
    latency_us: float | None = Field(None, ge=0, json_schema_extra=_unit("µs"))


class ShapeSizes(_Doc):
    tp: int = Field(1, ge=1)
    cp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)


class ShapeFilters(_Doc):
    """Enumerate every shape of the job's world size that passes these filters (and the model's rules)."""

    tp: list[Annotated[int, Field(ge=1)]] | None = Field(None, examples=[[1, 2, 4, 8]])
    cp: list[Annotated[int, Field(ge=1)]] | None = None
    ep: list[Annotated[int, Field(ge=1)]] | None = None
    dp: list[Annotated[int, Field(ge=1)]] | None = None
    pp: list[Annotated[int, Field(ge=1)]] | None = None
    max_tp: int | None = Field(None, ge=1)
    max_cp: int | None = Field(None, ge=1)
    max_ep: int | None = Field(None, ge=1)
    max_dp: int | None = Field(None, ge=1)
    max_pp: int | None = Field(None, ge=1)
    heads: int | None = Field(None, ge=1, description="attention heads: tp and cp must divide them")
    tp_within_node: bool = Field(True, description="tp at most the GPUs per node")
    memory_gb: float | None = Field(
        None,
        gt=0,
        description="device memory to fit; default: the smallest of the cluster's kinds",
        json_schema_extra=_unit("GB"),
    )
    distributed_optimizer: bool | None = None
    activations: bool = Field(
        True, description="count activations in the memory check (else model states only)"
    )


class Axes(_Doc):
    """The grid: every combination of the axes' values is a point. A scalar is a list of one."""

    shapes: list[ShapeSizes] | Literal["all"] | ShapeFilters | None = Field(
        None, description="job shapes: a list of sizes, `all`, or filters; default: the job's own shape"
    )
    occupancy: Axis[Annotated[float, Field(ge=0, lt=1)]] = Field(
        [0.0], description="fraction of devices busy"
    )
    modes: Axis[ModeName] = Field(["whole"], description="how the occupancy is fragmented")
    seeds: Axis[int] = Field([0], description="random seeds of occupancy and failures")
    failed: Axis[Annotated[float, Field(ge=0, lt=1)]] = Field([0.0], description="fraction of devices failed")
    gpus_per_node: Axis[Annotated[int, Field(ge=1)]] | None = Field(None, description="cluster variants")
    nodes: Axis[Annotated[int, Field(ge=1)]] | None = Field(None, description="cluster variants: host count")
    nodes_per_leaf: Axis[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="cluster variants: the leaf fanout"
    )
    tiers: dict[str, Axis[TierOption]] | None = Field(
        None, description="cluster variants: level -> tier options"
    )
    strategies: Axis[StrategyName] | None = Field(None, description="default: every strategy")
    time_limits: Axis[Annotated[float, Field(gt=0)]] = Field(
        [DEFAULT_TIME_LIMIT], description="cpsat's time limit per point", json_schema_extra=_unit("s")
    )


class Sweep(_Doc):
    """A what-if sweep file (`placement whatif`): a base cluster, job and state, and the axes of the grid."""

    model_config = ConfigDict(title="placement sweep file")

    name: str | None = Field(None, description="default: the file's name")
    description: str | None = None
    cluster: str | Cluster = Field(
        description="a cluster file (relative to the sweep file) or the cluster inline; required"
    )
    job: str | Job = Field(description="a job file or the job inline; required")
    state: str | State | None = Field(None, description="a state file or the state inline")
    gpus: int | None = Field(
        None,
        ge=1,
        description="ranks of every shape; default: the job's ranks",
        json_schema_extra=_unit("GPUs"),
    )
    solver: SweepSolver | None = None
    keep_global_batch: bool = Field(True, description="shapes keep the base job's global batch")
    axes: Axes | None = None


# ---- serving job ------------------------------------------------------------------------------------------

DtypeName = Literal["fp32", "bf16", "fp16", "fp8", "int8", "fp4", "int4"]
"""`placement.model.serving.DTYPE_BYTES`'s keys (the reader takes them in any case)."""
RoleName = Literal["aggregated", "prefill", "decode"]
"""`placement.model.serving.POOL_ROLES`."""
AttentionName = Literal["mha", "gqa", "mla"]
"""The serving reader's attention kinds (any case; gqa is read as mha)."""
ServingSize = Annotated[int, Field(ge=1, le=MAX_SERVING_SIZE)]


class ServingModel(_Doc):
    """The served model's shape (placement/model/serving.py). A MoE model gives `experts`, `top_k` and
    `expert_parameters` together."""

    parameters: Annotated[float, Field(gt=0, le=1e15)] | NumText = Field(
        description="every weight, the routed experts' included; required",
        examples=[671.0e9],
        json_schema_extra=_unit("parameters"),
    )
    hidden: ServingSize = Field(description="hidden size; required", examples=[7168])
    layers: ServingSize = Field(description="transformer layers; required", examples=[61])
    heads: ServingSize = Field(description="attention (query) heads; required", examples=[128])
    kv_heads: ServingSize | None = Field(
        None,
        description="K/V heads (GQA: fewer than heads, dividing them); default: heads (mha), 1 (mla)",
        examples=[8],
    )
    head_dim: ServingSize = Field(
        description="per head and token: the K/V width (mha), or the latent every token keeps per layer (mla, "
        "e.g. 512 + 64 = 576); required",
        examples=[128],
        json_schema_extra=_unit("elements"),
    )
    qk_head_dim: Annotated[int, Field(ge=0, le=MAX_SERVING_SIZE)] = Field(
        0,
        description="the per-head query/key width prefill's attention multiplies with (DeepSeek-V3's MLA: 192); "
        "0: head_dim",
        json_schema_extra=_unit("elements"),
    )
    attention: AttentionName = Field(
        "mha",
        description="mha (multi-head or grouped-query: K and V of kv_heads heads per layer and token; gqa is the "
        "same) or mla (DeepSeek's multi-head latent attention: one latent per layer and token)",
    )
    experts: Annotated[int, Field(ge=0, le=MAX_SERVING_SIZE)] = Field(
        0, description="routed experts (0: dense)"
    )
    top_k: Annotated[int, Field(ge=0, le=MAX_SERVING_SIZE)] = Field(
        0, description="routed experts per token; 1..experts for a MoE model", examples=[8]
    )
    shared_experts: Annotated[int, Field(ge=0, le=MAX_SERVING_SIZE)] = Field(
        0,
        description="experts every token goes through (their weights are in parameters, not expert_parameters)",
    )
    expert_parameters: Annotated[float, Field(ge=0, le=1e15)] | NumText = Field(
        0.0,
        description="of `parameters`, the routed experts' (less than parameters); required with experts",
        examples=[653.9e9],
        json_schema_extra=_unit("parameters"),
    )
    moe_layers: Annotated[int, Field(ge=0, le=MAX_SERVING_SIZE)] = Field(
        0,
        description="layers whose MLP is routed (at most layers); 0 with experts: every layer",
        examples=[58],
    )
    weight_dtype: DtypeName = Field("bf16", description="data type of the weights")
    kv_dtype: DtypeName = Field("bf16", description="data type of the KV cache")
    activation_dtype: DtypeName = Field("bf16", description="data type of the activations TP reduces")
    dispatch_dtype: DtypeName = Field(
        "fp8", description="data type of the tokens an EP dispatch sends (DeepEP: FP8)"
    )


class ServingPool(_Doc):
    """A pool: one replica runs tp x attention_dp x pp ranks; the MoE layers of a stage span its tp x attention_dp
    ranks with expert parallelism ep (which divides them)."""

    role: RoleName | None = Field(
        None,
        description="aggregated (prefills and decodes), prefill or decode: one aggregated pool, or one prefill and "
        "one decode pool; default: aggregated for a single pool, else prefill then decode by position",
    )
    tp: ServingSize = Field(1, description="tensor parallel inside one attention replica", examples=[1])
    ep: ServingSize = Field(
        1, description="expert parallel; divides tp x attention_dp, at most the experts", examples=[64]
    )
    pp: ServingSize = Field(1, description="pipeline stages")
    attention_dp: ServingSize = Field(
        1, description="attention replicas per stage (SGLang's --enable-dp-attention)", examples=[64]
    )
    replicas: ServingSize = Field(1, description="replicas of the pool", examples=[2])


class ServingLoad(_Doc):
    """The load: give `batch` or `concurrency`, not both."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [{"required": ["batch"]}, {"required": ["concurrency"]}],
            "not": {"required": ["batch", "concurrency"]},
        }
    )

    batch: Annotated[int, Field(ge=1, le=MAX_SERVING_SIZE * 16)] | None = Field(
        None,
        description="requests decoded together per decode replica",
        examples=[2048],
        json_schema_extra=_unit("requests"),
    )
    concurrency: Annotated[int, Field(ge=1, le=MAX_SERVING_SIZE * 64)] | None = Field(
        None,
        description="requests in flight in the deployment, split evenly over the decode replicas (instead of batch)",
        json_schema_extra=_unit("requests"),
    )
    prompt_tokens: Annotated[int, Field(ge=1, le=MAX_SERVING_SIZE * 16)] = Field(
        description="prompt length per request; required", examples=[2000], json_schema_extra=_unit("tokens")
    )
    output_tokens: Annotated[int, Field(ge=1, le=MAX_SERVING_SIZE * 16)] = Field(
        description="tokens generated per request; required",
        examples=[1000],
        json_schema_extra=_unit("tokens"),
    )
    prefill_batch: ServingSize = Field(
        1,
        description="prompts one prefill replica (or the aggregated pool) processes together",
        json_schema_extra=_unit("requests"),
    )
    tpot_bound_ms: Annotated[float, Field(gt=0)] | NumText | None = Field(
        None,
        description="the time per output token the deployment must meet: the objective becomes tokens/s within it",
        examples=[50],
        json_schema_extra=_unit("ms"),
    )


class ServingRules(_Doc):
    """Placement rules of a serving job."""

    spread: bool = Field(True, description="spread the replicas over fault domains of `spread_kind`")
    spread_kind: str | None = Field(
        None,
        description="a fault-domain kind; default: the state's first fault-domain kind, else the level above the host",
        examples=["power"],
    )
    ep_level: str | None = Field(
        None,
        description="a level each EP group is preferred to stay inside; default: the lowest level whose domains "
        "hold one",
        examples=["leaf"],
    )
    require_ep: bool = Field(False, description="make `ep_level` a hard rule")


class _ServingBody(_Doc):
    name: str | None = Field(
        None, description="default: the file's name without its suffix", examples=["deepseek-v3-serving"]
    )
    description: str | None = Field(None, description="free text")
    device_kind: str | None = Field(
        None, description="only devices of this kind (a node type's `kind`); default: any", examples=["H100"]
    )
    model: ServingModel = Field(description="the served model; required")
    pools: list[ServingPool] = Field(
        min_length=1,
        max_length=2,
        description="one aggregated pool, or a prefill and a decode pool; required",
    )
    load: ServingLoad = Field(description="requests, prompt and output tokens; required")
    placement: ServingRules | None = Field(None, description="spread and expert-parallel placement rules")


class ServingJobDoc(_ServingBody):
    """A serving job file (`kind: serving`): a model served by one aggregated pool or a prefill and a decode pool
    (disaggregated), its load and placement rules (docs/serving.md)."""

    kind: Literal["serving"] = Field(description="`serving`: what makes it a serving job; required")


class ServingBody(_ServingBody):
    """The job under a `serving:` key."""

    kind: Literal["serving"] | None = None


class ServingWrapped(_Doc):
    """A serving job under a `serving:` key."""

    serving: ServingBody = Field(description="the serving job; required")
    kind: Literal["serving"] | None = None
    name: str | None = Field(None, description="default: the file's name without its suffix")
    description: str | None = None


class WireServing(_Doc):
    """A serving job as the `Job.serving` message of protos/placement/v1 (its placement rules are `rules`)."""

    model: ServingModel = Field(description="the served model; required")
    pools: list[ServingPool] = Field(
        min_length=1,
        max_length=2,
        description="one aggregated pool, or a prefill and a decode pool; required",
    )
    load: ServingLoad = Field(description="requests, prompt and output tokens; required")
    rules: ServingRules | None = Field(None, description="spread and expert-parallel placement rules")


class RequestServingJob(_Doc):
    """A serving job in a request: the `Job` message with its `serving` field (then only name, description and
    device_kind of a job's other fields apply)."""

    name: str | None = Field(None, description="the job's name", examples=["deepseek-v3-serving"])
    description: str | None = None
    device_kind: str | None = Field(
        None, description="only devices of this kind; default: any", examples=["H100"]
    )
    serving: WireServing = Field(description="the serving job; required")


class ServingJob(RootModel[ServingJobDoc | ServingWrapped]):
    """A serving job file: `kind: serving` with the job at the top, or the job under a `serving:` key."""

    model_config = ConfigDict(title="placement serving job file")


# ---- serving sweep ----------------------------------------------------------------------------------------


class ServingSweepSolver(_Doc):
    workers: int = Field(1, ge=1, description="CP-SAT workers per point (points run in parallel)")
    seed: int = 0
    deterministic: bool = Field(False, description="deterministic time: answers do not depend on load")
    time_limit_s: Annotated[float, Field(gt=0)] = Field(
        10.0, description="cpsat's time limit per point", json_schema_extra=_unit("s")
    )


class ServingAxes(_Doc):
    """The grid: decode TP x EP x replicas x cluster variants. An absent decode axis keeps the job's value; a scalar
    is a list of one. A shape the serving job's rules refuse is listed with its reason, not run."""

    decode_tp: Axis[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="the decode pool's tp", examples=[[1, 2]]
    )
    decode_ep: Axis[Annotated[int, Field(ge=1)]] | None = Field(
        None,
        description="the decode pool's ep; attention_dp follows (ep / tp when ep >= tp, else 1)",
        examples=[[16, 32, 64, 128]],
    )
    decode_replicas: Axis[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="the decode pool's replicas", examples=[[1, 2]]
    )
    nodes: Axis[Annotated[int, Field(ge=1)]] | None = Field(None, description="cluster variants: host count")
    gpus_per_node: Axis[Annotated[int, Field(ge=1)]] | None = Field(None, description="cluster variants")


class ServingSweep(_Doc):
    """A serving sweep file (`placement whatif`, docs/serving.md): a sweep whose job is a serving job. Each point
    is placed as `placement place` places the job and reported as TTFT, TPOT and tokens/s per GPU."""

    model_config = ConfigDict(title="placement serving sweep file")

    name: str | None = Field(None, description="default: the file's name")
    description: str | None = None
    cluster: str | Cluster = Field(
        description="a cluster file (relative to the sweep file) or the cluster inline; required"
    )
    job: str | ServingJob = Field(
        description="a serving job file or the serving job inline; required",
        examples=["deepseek-v3-serving.yaml"],
    )
    state: str | State | None = Field(None, description="a state file or the state inline")
    solver: ServingSweepSolver | None = None
    batch_per_decode_gpu: int | None = Field(
        None,
        ge=1,
        description="the decode batch per replica follows its size: this x the replica's ranks; default: the "
        "job's batch",
        examples=[32],
        json_schema_extra=_unit("requests per GPU"),
    )
    axes: ServingAxes | None = None


Request.model_rebuild()
Sweep.model_rebuild()

DOCUMENTS: dict[str, type[BaseModel]] = {
    "cluster": Cluster,
    "state": State,
    "job": Job,
    "mapping": MappingFile,
    "request": Request,
    "batch": Batch,
    "running": RunningFile,
    "sweep": Sweep,
    "serving": ServingJob,
    "serving-sweep": ServingSweep,
}
"""Every kind of input file, by the name `placement schema KIND` takes."""
