"""The cost model's entry point and report types: `evaluate` (step model v2) and the v1 surrogate the solver optimizes.

`evaluate` is the single source of truth for every number reported: it returns `placement.cost.step.model_step`
(phases, NCCL algorithms over shared links, compute; see `placement.cost.step` and `placement.cost.collectives`). The
functions below it are the v1 model, kept unchanged as the solver's linear surrogate (`surrogate_seconds`): it
ranks mappings like the evaluator where one group's placement decides, but adds concurrent groups up.

v1 model (alpha-beta): one transfer of S bytes over a path of bandwidth W (GB/s) and latency a (µs) costs
``a + S/W``. A collective over n members costs ``steps * a + volume / W`` where (ring algorithms)
all-reduce moves ``2(n-1)/n * S`` per member in ``2(n-1)`` steps and all-gather, reduce-scatter and
all-to-all move ``(n-1)/n * S`` in ``n-1`` steps. W and a are those of the slowest path the group spans:

- the tier of the lowest domain level holding every member (hosts sharing a leaf: the leaf tier);
- between members on one host, the host's intra-node matrix code (NV12, PIX, SYS...) when it has one, else the
  host (level-0) tier: a group split 4+4 over two PCIe hosts still pays PCIe, however fast the leaf;
- divided by the largest slowdown among its members' devices, the intra-node links between two members,
  and the uplinks of domains it crosses (some members inside, some outside);
- on rail-optimized fabrics (`RailPolicy`), a multi-host group whose hosts do not use the same set of rails,
  or an edge between different rails, pays the extra hop.

The result is multiplied by the count per step and by the exposed fraction. Failed links that a group needs
make the mapping invalid (`placement.model.validate`), never merely expensive.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.errors import PlacementError
from placement.model.job import CollectiveKind, Group, Job
from placement.model.links import Tier, intra_node_tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic

__all__ = [
    "CostReport",
    "InvalidMappingError",
    "Path",
    "PhaseCost",
    "collective_seconds",
    "evaluate",
    "group_path",
    "group_seconds",
    "p2p_seconds",
    "pair_path",
    "preference_misses",
    "surrogate_report",
    "surrogate_seconds",
]


class InvalidMappingError(PlacementError):
    """`evaluate` refuses a mapping that breaks a hard rule; `violations` lists every broken rule."""

    def __init__(self, violations: Sequence[object]) -> None:
        self.violations = list(violations)
        lines = "".join(f"\n  - {v}" for v in self.violations)
        super().__init__(f"the mapping breaks {len(self.violations)} hard rule(s):{lines}")


@dataclass(frozen=True)
class Path:
    """The effective path of a group or edge: bandwidth GB/s, latency µs, the bottleneck tier's name, LCA level."""

    bandwidth_gbps: float
    latency_us: float
    tier: str
    level: int


def collective_seconds(
    kind: CollectiveKind, n: int, size: float, count: float, exposed: float, path: Path
) -> float:
    """Seconds per step of `count` collectives of `size` bytes over `n` members on `path`."""
    if n <= 1 or count == 0 or exposed == 0:
        return 0.0
    if kind is CollectiveKind.ALL_REDUCE:
        volume, steps = 2.0 * (n - 1) / n * size, 2 * (n - 1)
    else:
        volume, steps = (n - 1) / n * size, n - 1
    one = steps * path.latency_us * 1e-6 + volume / (path.bandwidth_gbps * 1e9)
    return count * exposed * one


def p2p_seconds(size: float, count: float, exposed: float, path: Path) -> float:
    """Seconds per step of `count` point-to-point transfers of `size` bytes on `path`."""
    if count == 0 or exposed == 0:
        return 0.0
    return count * exposed * (path.latency_us * 1e-6 + size / (path.bandwidth_gbps * 1e9))


def group_seconds(group: Group, path: Path) -> float:
    return collective_seconds(group.kind, len(group.members), group.bytes, group.count, group.exposed, path)


def _slowdown(topology: Topology, state: ClusterState, devices: Sequence[int]) -> float:
    worst = 1.0
    if state.device_slowdown:
        for d in devices:
            worst = max(worst, state.device_slowdown.get(d, 1.0))
    if state.pair_slowdown:
        dset = set(devices)
        for (a, b), f in state.pair_slowdown.items():
            if a in dset and b in dset:
                worst = max(worst, f)
    if state.uplink_slowdown:
        n = len(devices)
        for up, f in state.uplink_slowdown.items():
            col = topology.domain_column(up.level)
            inside = sum(1 for d in devices if col[d] == up.domain)
            if 0 < inside < n:
                worst = max(worst, f)
    return worst


def group_path(topology: Topology, state: ClusterState, devices: Sequence[int]) -> Path:
    """The slowest path a set of devices spans, after degradation and rails (see the module docstring)."""
    if topology.pair_paths is not None:
        pp = topology.pair_paths
        bw, lat = math.inf, 0.0
        for i, a in enumerate(devices):
            for b in devices[i + 1 :]:
                for t in (pp[a][b], pp[b][a]):
                    bw, lat = min(bw, t.bandwidth_gbps), max(lat, t.latency_us)
        return Path(bw / _slowdown(topology, state, devices), lat, "graph", 1 if len(devices) > 1 else 0)
    level = topology.group_lca_level(devices)
    tier: Tier = topology.levels[level].tier
    name = topology.levels[level].name
    # intra-node codes between co-hosted members
    by_host: dict[int, list[int]] = defaultdict(list)
    for d in devices:
        by_host[topology.devices[d].host_index].append(d)
    if level > 0 or any(topology.host_types[h].matrix is not None for h in by_host):
        found_matrix = False
        best: Tier | None = None
        best_name = name
        for h, members in by_host.items():
            mat = topology.host_types[h].matrix
            if mat is None or len(members) < 2:
                continue
            for i, a in enumerate(members):
                la = topology.devices[a].local_index
                for b in members[i + 1 :]:
                    code = mat[la][topology.devices[b].local_index]
                    t = intra_node_tier(code, topology.intra_node_tiers)
                    if (
                        best is None
                        or t.bandwidth_gbps < best.bandwidth_gbps
                        or (t.bandwidth_gbps == best.bandwidth_gbps and t.latency_us > best.latency_us)
                    ):
                        best, best_name = t, f"{topology.levels[0].name}:{code}"
                    found_matrix = True
        if found_matrix and best is not None:
            if level == 0:
                tier, name = best, best_name
            elif best.bandwidth_gbps < tier.bandwidth_gbps:
                tier, name = Tier(best.bandwidth_gbps, max(best.latency_us, tier.latency_us)), best_name
            else:
                tier = Tier(tier.bandwidth_gbps, max(best.latency_us, tier.latency_us))
    if level > 0 and any(len(m) > 1 and topology.host_types[h].matrix is None for h, m in by_host.items()):
        # co-hosted members of a multi-host group still talk over the host tier (PCIe hosts under a faster NIC)
        t0 = topology.levels[0].tier
        if t0.bandwidth_gbps < tier.bandwidth_gbps:
            tier, name = Tier(t0.bandwidth_gbps, max(t0.latency_us, tier.latency_us)), topology.levels[0].name
        elif t0.latency_us > tier.latency_us:
            tier = Tier(tier.bandwidth_gbps, t0.latency_us)
    bw, lat = tier.bandwidth_gbps, tier.latency_us
    rp = topology.rail_policy
    if rp is not None and level > 0 and len(by_host) > 1:
        rail_sets = set()
        for members in by_host.values():
            rails = [topology.devices[d].rail for d in members]
            rail_sets.add(tuple(sorted(-1 if x is None else x for x in rails)))
        if len(rail_sets) > 1:
            bw *= rp.bandwidth_factor
            lat += rp.extra_latency_us
    slow = _slowdown(topology, state, devices)
    return Path(bw / slow, lat, name, level)


def pair_path(topology: Topology, state: ClusterState, a: int, b: int) -> Path:
    """The path between two devices (a point-to-point edge)."""
    tier, name = topology.pair_tier(a, b)
    bw, lat = tier.bandwidth_gbps, tier.latency_us
    level = topology.lca_level(a, b)
    rp = topology.rail_policy
    da, db = topology.devices[a], topology.devices[b]
    if rp is not None and level > 0 and da.rail != db.rail:
        bw *= rp.bandwidth_factor
        lat += rp.extra_latency_us
    slow = _slowdown(topology, state, (a, b))
    return Path(bw / slow, lat, name, level)


@dataclass
class PhaseCost:
    """One phase of a step (TP collectives, CP/EP exchanges, PP sends, DP gradient sync, or an explicit label).

    `seconds` is the phase's wall time per step (its concurrent groups run in parallel; the slowest after
    contention decides), `exposed_seconds` what is left after overlap with compute. `critical` names the
    slowest group, `tier` its bottleneck tier and `algorithm` the collective algorithm chosen for it.
    """

    name: str
    seconds: float
    exposed_seconds: float
    tier: str
    critical: str = ""
    algorithm: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "exposed_seconds": self.exposed_seconds,
            "tier": self.tier,
            "critical": self.critical,
            "algorithm": self.algorithm,
        }


@dataclass
class CostReport:
    """A modeled step under a mapping: step time, exposed and total communication, compute, and where it goes.

    - `step_seconds`: compute + pipeline bubble + exposed communication (for jobs with no model shape:
      exposed communication alone);
    - `comm_seconds`: exposed communication per step (phases in sequence, concurrent groups in parallel);
    - `comm_seconds_total`: communication per step before overlap;
    - `by_label` / `by_tier` / `by_label_tier`: exposed communication per phase label, per bottleneck tier;
    - `surrogate_seconds`: the serial sum of every group's and edge's v1 cost, the solver's linear objective
      (`surrogate_report`); not a time, a ranking.

    `seconds` is the deprecated v1 name; it now means `comm_seconds`, the part a placement changes.
    """

    step_seconds: float = 0.0
    comm_seconds: float = 0.0
    comm_seconds_total: float = 0.0
    compute_seconds: float | None = None
    bubble_seconds: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    phases: list[PhaseCost] = field(default_factory=list)
    by_label: dict[str, float] = field(default_factory=dict)
    by_tier: dict[str, float] = field(default_factory=dict)
    by_label_tier: dict[tuple[str, str], float] = field(default_factory=dict)
    preference_misses: dict[str, int] = field(default_factory=dict)
    surrogate_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        """Deprecated: exposed communication seconds per step (`comm_seconds`)."""
        return self.comm_seconds

    def add(self, label: str, tier: str, seconds: float) -> None:
        """Add exposed communication seconds of `label` bottlenecked on `tier`."""
        self.comm_seconds += seconds
        self.by_label[label] = self.by_label.get(label, 0.0) + seconds
        self.by_tier[tier] = self.by_tier.get(tier, 0.0) + seconds
        key = (label, tier)
        self.by_label_tier[key] = self.by_label_tier.get(key, 0.0) + seconds

    def to_dict(self) -> dict[str, object]:
        return {
            "step_seconds": self.step_seconds,
            "comm_seconds": self.comm_seconds,
            "comm_seconds_total": self.comm_seconds_total,
            "compute_seconds": self.compute_seconds,
            "bubble_seconds": self.bubble_seconds,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "seconds_per_step": self.comm_seconds,  # deprecated v1 name of comm_seconds
            "surrogate_seconds": self.surrogate_seconds,
            "phases": [p.to_dict() for p in self.phases],
            "by_label": dict(sorted(self.by_label.items())),
            "by_tier": dict(sorted(self.by_tier.items())),
            "by_label_tier": [
                {"label": k[0], "tier": k[1], "seconds": v} for k, v in sorted(self.by_label_tier.items())
            ],
            "preference_misses": dict(sorted(self.preference_misses.items())),
        }


def _check(
    topology: Topology, state: ClusterState, job: Job, mapping: Sequence[int], traffic: Traffic
) -> None:
    from placement.model.validate import validate  # local: validate imports cost's helpers

    violations = validate(topology, state, job, mapping, traffic=traffic)
    if violations:
        raise InvalidMappingError(violations)


def surrogate_seconds(
    topology: Topology, state: ClusterState, mapping: Sequence[int], traffic: Traffic
) -> float:
    """The solver's linear objective (v1): the serial sum of every group's and edge's cost on its slowest path.

    Not a step time (concurrent groups are added up); it ranks mappings the way the CP-SAT level model does,
    and it is additive, so a move is scored by the terms it touches.
    """
    total = 0.0
    for g in traffic.groups:
        total += group_seconds(g, group_path(topology, state, [mapping[r] for r in g.members]))
    for e in traffic.edges:
        total += p2p_seconds(
            e.bytes, e.count, e.exposed, pair_path(topology, state, mapping[e.src], mapping[e.dst])
        )
    return total


def surrogate_report(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    *,
    traffic: Traffic | None = None,
    check: bool = True,
) -> CostReport:
    """The v1 model as a report: every group and edge priced alone and summed (the solver's surrogate)."""
    traffic = traffic if traffic is not None else job_traffic(job)
    if check:
        _check(topology, state, job, mapping, traffic)
    report = CostReport()
    prefer = job.constraints.prefer
    pref_levels = {lab: topology.level_index(lv) for lab, lv in prefer.items() if lv in topology.level_names}
    for g in traffic.groups:
        devs = [mapping[r] for r in g.members]
        path = group_path(topology, state, devs)
        report.add(g.label, path.tier, group_seconds(g, path))
        if g.label in pref_levels and path.level > pref_levels[g.label]:
            report.preference_misses[g.label] = report.preference_misses.get(g.label, 0) + 1
    for e in traffic.edges:
        path = pair_path(topology, state, mapping[e.src], mapping[e.dst])
        report.add(e.label, path.tier, p2p_seconds(e.bytes, e.count, e.exposed, path))
        if e.label in pref_levels and path.level > pref_levels[e.label]:
            report.preference_misses[e.label] = report.preference_misses.get(e.label, 0) + 1
    report.comm_seconds_total = report.comm_seconds
    report.step_seconds = report.comm_seconds
    report.surrogate_seconds = report.comm_seconds
    return report


def evaluate(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    *,
    traffic: Traffic | None = None,
    check: bool = True,
) -> CostReport:
    """The modeled step of `job` when rank r runs on device `mapping[r]` (the single source of truth).

    Step model v2 (`placement.cost.step`): phases in sequence, concurrent groups in parallel on shared links, NCCL's
    algorithms (`placement.cost.collectives`) and compute (`placement.cost.compute`). `surrogate_seconds` carries the v1
    serial sum the solver optimizes. With `check` (the default) the mapping is first validated against every
    hard rule and refused with `InvalidMappingError` if it breaks any: a cost of an impossible placement is not
    a number to trust.
    """
    from placement.cost.step import (
        model_step,  # local: placement.cost.step builds on this module's report types
    )

    traffic = traffic if traffic is not None else job_traffic(job)
    if check:
        _check(topology, state, job, mapping, traffic)
    report = model_step(topology, state, job, mapping, traffic)
    report.surrogate_seconds = surrogate_seconds(topology, state, mapping, traffic)
    report.preference_misses = preference_misses(topology, job, mapping, traffic)
    return report


def preference_misses(
    topology: Topology, job: Job, mapping: Sequence[int], traffic: Traffic
) -> dict[str, int]:
    """Groups and edges per label that leave the level the job prefers for that label (`Constraints.prefer`)."""
    prefer = job.constraints.prefer
    pref_levels = {lab: topology.level_index(lv) for lab, lv in prefer.items() if lv in topology.level_names}
    out: dict[str, int] = {}
    if not pref_levels:
        return out
    for g in traffic.groups:
        if (
            g.label in pref_levels
            and topology.group_lca_level([mapping[r] for r in g.members]) > pref_levels[g.label]
        ):
            out[g.label] = out.get(g.label, 0) + 1
    for e in traffic.edges:
        if (
            e.label in pref_levels
            and topology.lca_level(mapping[e.src], mapping[e.dst]) > pref_levels[e.label]
        ):
            out[e.label] = out.get(e.label, 0) + 1
    return out
