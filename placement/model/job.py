"""Job specifications: structured (TP/CP/EP/DP/PP sizes, order, model shape) or explicit groups and edges.

Also the request's constraints (required and preferred levels, fault-domain spread, pins, exclusions, kind).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "DIMENSIONS",
    "LAUNCHERS",
    "BalanceRule",
    "CollectiveKind",
    "Constraints",
    "Edge",
    "Group",
    "Job",
    "ModelShape",
    "ParallelSpec",
    "SegmentRule",
    "SpreadRule",
    "host_blocks",
]

DIMENSIONS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
"""The parallel dimensions, in Megatron-LM's default order (fastest varying first)."""

LAUNCHERS: tuple[str, ...] = ("any", "torchrun")
"""What starts the ranks. ``any``: a launcher that takes a rank -> host list (mpirun --rankfile, srun
--distribution=arbitrary), no constraint. ``torchrun``: ranks are numbered host by host, so each host's ranks
must be one contiguous block (`host_blocks`)."""


def host_blocks(hosts: Sequence[str]) -> list[tuple[str, int, int]]:
    """(host, first rank, rank count) per host, in rank order, when every host's ranks are one contiguous block
    (what torchrun can launch); ValueError naming the first rank that breaks it.

    >>> host_blocks(["a", "a", "b"])
    [('a', 0, 2), ('b', 2, 1)]
    """
    blocks: list[tuple[str, int, int]] = []
    where: dict[str, int] = {}
    for r, h in enumerate(hosts):
        if blocks and blocks[-1][0] == h:
            blocks[-1] = (h, blocks[-1][1], blocks[-1][2] + 1)
            continue
        if h in where:
            _, first, n = blocks[where[h]]
            raise ValueError(
                f"rank {r} is on {h}, but {h}'s block of ranks {first}-{first + n - 1} ended at rank "
                f"{first + n - 1} ({hosts[first + n]} came between); torchrun numbers ranks host by host, "
                "so each host's ranks must be one contiguous block"
            )
        where[h] = len(blocks)
        blocks.append((h, r, 1))
    return blocks


class CollectiveKind(Enum):
    """A collective and the bytes it moves per member for a buffer of S bytes over n members (ring algorithms)."""

    ALL_REDUCE = "all_reduce"
    """2(n-1)/n * S per member in 2(n-1) steps (reduce-scatter then all-gather)."""
    ALL_GATHER = "all_gather"
    """(n-1)/n * S per member in n-1 steps; S is the gathered (full) buffer."""
    REDUCE_SCATTER = "reduce_scatter"
    """(n-1)/n * S per member in n-1 steps; S is the full input buffer."""
    ALL_TO_ALL = "all_to_all"
    """(n-1)/n * S per member in n-1 steps; S is what one member sends in total."""


@dataclass(frozen=True)
class Group:
    """A communication group: members (ranks), collective, buffer bytes S, count per step, exposed fraction.

    `label` is the group kind used for breakdowns and constraints (tp, cp, ep, dp, pp or any user name).
    """

    label: str
    kind: CollectiveKind
    members: tuple[int, ...]
    bytes: float
    count: float
    exposed: float = 1.0


@dataclass(frozen=True)
class Edge:
    """Point-to-point traffic: `count` transfers of `bytes` from rank `src` to rank `dst` per step."""

    label: str
    src: int
    dst: int
    bytes: float
    count: float = 1.0
    exposed: float = 1.0


@dataclass(frozen=True)
class ParallelSpec:
    """Parallel sizes and the rank order string (fastest varying dimension first)."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    pp: int = 1
    order: str = "tp-cp-ep-dp-pp"

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.ep * self.dp * self.pp

    def size(self, dim: str) -> int:
        return int(getattr(self, dim))

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(self.order.split("-"))

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of a rank along each dimension under the order string.

        >>> ParallelSpec(tp=2, pp=2).coords(3)
        {'tp': 1, 'cp': 0, 'ep': 0, 'dp': 0, 'pp': 1}
        """
        return dict(zip(DIMENSIONS, _coords(self, rank), strict=True))

    def rank_of(self, coords: Mapping[str, int]) -> int:
        rank, stride = 0, 1
        for d in self.dims:
            rank += coords.get(d, 0) * stride
            stride *= self.size(d)
        return rank


@functools.lru_cache(maxsize=1 << 17)
def _coords(spec: ParallelSpec, rank: int) -> tuple[int, ...]:
    """A rank's coordinates in `DIMENSIONS` order (cached: the heuristics and bounds ask for every rank often)."""
    out: dict[str, int] = {}
    rest = rank
    for d in spec.dims:
        n = spec.size(d)
        out[d] = rest % n
        rest //= n
    return tuple(out[d] for d in DIMENSIONS)


@dataclass(frozen=True)
class ModelShape:
    """The model and batch shape that traffic volumes follow from (see `placement.model.traffic`)."""

    parameters: float
    hidden: int
    layers: int
    seq_len: int
    micro_batch: int = 1
    micro_batches: int = 1
    bytes_per_element: int = 2
    grad_bytes_per_element: int | None = None
    experts: int = 0
    top_k: int = 0
    expert_parameters: float = 0.0
    kv_fraction: float = 1.0
    """Share of K/V width over the hidden size (GQA: kv_heads / heads); scales the CP exchange."""
    recompute: bool = False
    """Full activation recomputation: the forward (and its TP/CP/EP traffic) runs again in the backward."""
    mfu: float = 0.4
    """Fraction of the devices' peak FLOP/s the compute kernels reach (step model v2, `placement.cost.compute`)."""
    heads: int = 0
    """Attention heads (activation memory, `placement.cost.compute`); 0: hidden / 128."""
    distributed_optimizer: bool = False
    """Megatron's distributed optimizer (ZeRO-1): the DP reduce is a reduce-scatter beside the backward and an
    all-gather of the parameters after the optimizer step, which updates 1/dp of the parameters on each rank."""


@dataclass(frozen=True)
class SpreadRule:
    """Fault-domain spread: `scope` (``job`` or a group label) covers >= `min_domains` domains of `kind`,
    and/or holds <= `max_ranks_per_domain` ranks of the scope in any one domain of `kind`."""

    kind: str
    scope: str = "job"
    min_domains: int | None = None
    max_ranks_per_domain: int | None = None


@dataclass(frozen=True)
class BalanceRule:
    """Balanced slices (Kueue's balanced placement): the job's ranks, in slices of `slice` ranks, spread evenly
    over the domains of `level` it uses: every used domain holds a whole number of slices, and the slice counts
    of two used domains differ by at most one (6+6, not 10+2). `placement.model.slices` checks it."""

    level: str
    slice: int = 1


@dataclass(frozen=True)
class SegmentRule:
    """Segments (Slurm's ``--segment``): the job's ranks in consecutive blocks of `nodes` hosts' worth of devices
    (`nodes` x the devices per host of the job's kind), each block inside one domain of `level`."""

    nodes: int
    level: str


@dataclass(frozen=True)
class Constraints:
    """Hard and soft rules of a request.

    `require[label] = level`: every group (and edge) of that label stays inside one domain of that level.
    `prefer[label] = level`: the same, soft: reported, and the solver breaks ties toward it.
    `pins[rank] = device id`; `exclude`: selectors (device ids, hosts, domains, ``level:domain``).
    `balance`, `segment`: balanced slices and segments (`BalanceRule`, `SegmentRule`).
    """

    require: Mapping[str, str] = field(default_factory=dict)
    prefer: Mapping[str, str] = field(default_factory=dict)
    spread: tuple[SpreadRule, ...] = ()
    pins: Mapping[int, str] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()
    balance: BalanceRule | None = None
    segment: SegmentRule | None = None


@dataclass(frozen=True)
class Job:
    """A job: `ranks` ranks that need devices of `device_kind` (None: any) and the traffic between them.

    Structured jobs carry `parallel` and `model`; explicit jobs carry `groups` and `edges`. `exposure`
    overrides the exposed fraction per group label (1.0 = nothing overlaps with compute).
    """

    name: str
    ranks: int
    device_kind: str | None = None
    parallel: ParallelSpec | None = None
    model: ModelShape | None = None
    exposure: Mapping[str, float] = field(default_factory=dict)
    groups: tuple[Group, ...] = ()
    edges: tuple[Edge, ...] = ()
    constraints: Constraints = field(default_factory=Constraints)
    launcher: str = "any"
    """One of `LAUNCHERS`: ``torchrun`` makes every host's ranks one contiguous block."""

    @property
    def structured(self) -> bool:
        return self.parallel is not None
