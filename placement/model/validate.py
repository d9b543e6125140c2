"""Independent checks of a rank-to-device mapping against every hard rule; returns all violations, not the first.

It trusts no solver: every mapping the service returns passes through here.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from placement.model.job import Job
from placement.model.slices import segment_ranks, slice_problems
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic

__all__ = ["Violation", "excluded_devices", "validate"]


@dataclass(frozen=True)
class Violation:
    """One broken rule: `rule` is a stable key (``occupied``, ``required-level``...), `message` says how."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


def excluded_devices(topology: Topology, job: Job) -> tuple[set[int], list[Violation]]:
    """Devices the job's exclusions name, and a violation per selector that names nothing."""
    out: set[int] = set()
    bad: list[Violation] = []
    for sel in job.constraints.exclude:
        try:
            out.update(topology.resolve(sel))
        except KeyError as e:
            bad.append(Violation("exclude", f"constraints.exclude: {e.args[0]}"))
    return out, bad


def _fmt_ranks(ranks: Sequence[int], limit: int = 6) -> str:
    head = ", ".join(str(r) for r in ranks[:limit])
    return head + (f", ... ({len(ranks)} in all)" if len(ranks) > limit else "")


def validate(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    *,
    traffic: Traffic | None = None,
) -> list[Violation]:
    """Every hard rule the mapping (rank r -> device index mapping[r]) breaks.

    Rules: rank count, known devices, one rank per device, free and healthy devices (devices occupied by this
    job's own name are allowed: evaluating a running job), device kind, exclusions, pins, required levels,
    fault-domain spread, balanced slices, segments, failed links between members of one group or edge.
    """
    v: list[Violation] = []
    n_dev = topology.num_devices
    if len(mapping) != job.ranks:
        v.append(Violation("rank-count", f"the mapping places {len(mapping)} ranks; the job has {job.ranks}"))
    bad_index = [r for r, d in enumerate(mapping) if not (isinstance(d, int) and 0 <= d < n_dev)]
    for r in bad_index:
        v.append(Violation("unknown-device", f"rank {r}: device index {mapping[r]!r} is not in the cluster"))
    if bad_index or len(mapping) != job.ranks:
        return v  # the remaining checks need a complete mapping onto real devices
    dev = topology.devices
    per_device: dict[int, list[int]] = defaultdict(list)
    for r, d in enumerate(mapping):
        per_device[d].append(r)
    for d, ranks in sorted(per_device.items()):
        if len(ranks) > 1:
            v.append(Violation("one-rank-per-device", f"device {dev[d].id} holds ranks {_fmt_ranks(ranks)}"))
    for r, d in enumerate(mapping):
        if d in state.failed:
            v.append(Violation("failed", f"rank {r}: device {dev[d].id} has failed"))
        elif not state.usable(d, job.name):
            v.append(
                Violation(
                    "occupied", f"rank {r}: device {dev[d].id} is occupied by job {state.occupied[d]!r}"
                )
            )
        if job.device_kind is not None and dev[d].kind != job.device_kind:
            v.append(
                Violation(
                    "kind",
                    f"rank {r}: device {dev[d].id} is a {dev[d].kind}; the job needs {job.device_kind}",
                )
            )
    excl, bad = excluded_devices(topology, job)
    v.extend(bad)
    for r, d in enumerate(mapping):
        if d in excl:
            v.append(Violation("excluded", f"rank {r}: device {dev[d].id} is excluded by the request"))
    for r, want in sorted(job.constraints.pins.items()):
        wi = topology.device_index(want)
        if wi is None:
            v.append(Violation("pin", f"constraints.pins[{r}]: unknown device {want!r}"))
        elif not 0 <= r < job.ranks:
            v.append(Violation("pin", f"constraints.pins: rank {r} is outside 0..{job.ranks - 1}"))
        elif mapping[r] != wi:
            v.append(Violation("pin", f"rank {r} is pinned to {want} but placed on {dev[mapping[r]].id}"))

    traffic = traffic if traffic is not None else job_traffic(job)
    for label, level_name in sorted(job.constraints.require.items()):
        try:
            li = topology.level_index(level_name)
        except KeyError as err:
            v.append(Violation("required-level", f"constraints.require.{label}: {err.args[0]}"))
            continue
        names = topology.domain_names[li]
        col = topology.domain_column(li)
        for g in traffic.groups:
            if g.label != label:
                continue
            doms = {col[mapping[r]] for r in g.members}
            if len(doms) > 1:
                shown = ", ".join(sorted(names[k] for k in doms)[:4])
                v.append(
                    Violation(
                        "required-level",
                        f"{label} group of ranks {_fmt_ranks(list(g.members))} spans {len(doms)} {level_name} domains ({shown}); {label} requires one {level_name}",
                    )
                )
        for e in traffic.edges:
            if e.label == label and col[mapping[e.src]] != col[mapping[e.dst]]:
                v.append(
                    Violation(
                        "required-level",
                        f"{label} edge {e.src}->{e.dst} crosses {level_name} domains {names[col[mapping[e.src]]]} and {names[col[mapping[e.dst]]]}; {label} requires one {level_name}",
                    )
                )

    for i, rule in enumerate(job.constraints.spread):
        try:
            fd = state.fault_domain_of(rule.kind, topology)
        except KeyError:
            v.append(
                Violation(
                    "spread",
                    f"constraints.spread[{i}].kind: unknown fault-domain kind {rule.kind!r}; known: {list(state.fault_kinds(topology))}",
                )
            )
            continue
        if rule.scope == "job":
            scopes: list[tuple[str, tuple[int, ...]]] = [("the job", tuple(range(job.ranks)))]
        else:
            scopes = [
                (f"{rule.scope} group of ranks {_fmt_ranks(list(g.members), 4)}", g.members)
                for g in traffic.groups
                if g.label == rule.scope
            ]
            if not scopes:
                v.append(
                    Violation(
                        "spread",
                        f"constraints.spread[{i}].scope: the job has no {rule.scope!r} groups; scopes are 'job' or one of {list(traffic.labels)}",
                    )
                )
        for what, scope_ranks in scopes:
            counts = Counter(fd.get(mapping[r], "<none>") for r in scope_ranks)
            if rule.min_domains is not None and len(counts) < rule.min_domains:
                v.append(
                    Violation(
                        "spread",
                        f"{what} covers {len(counts)} {rule.kind} domain(s) ({', '.join(sorted(counts))}); at least {rule.min_domains} required",
                    )
                )
            if rule.max_ranks_per_domain is not None:
                for name, c in sorted(counts.items()):
                    if c > rule.max_ranks_per_domain:
                        v.append(
                            Violation(
                                "spread",
                                f"{what} puts {c} ranks in {rule.kind} {name}; at most {rule.max_ranks_per_domain} allowed",
                            )
                        )

    if job.constraints.balance is not None or job.constraints.segment is not None:
        v.extend(_slice_violations(topology, job, mapping))
    if state.failed_pairs or state.failed_uplinks:
        v.extend(_failed_link_violations(topology, state, mapping, traffic))
    return v


def _slice_violations(topology: Topology, job: Job, mapping: Sequence[int]) -> list[Violation]:
    """Balanced slices (whole slices per used domain, slice counts within one of each other) and segments (each
    block of `segment_ranks` consecutive ranks inside one domain)."""
    bad = slice_problems(topology, job)
    if bad:
        return [
            Violation("balance" if p.path.startswith("constraints.balance") else "segment", str(p))
            for p in bad
        ]
    out: list[Violation] = []
    bal, seg = job.constraints.balance, job.constraints.segment
    if bal is not None:
        li = topology.level_index(bal.level)
        col, names = topology.domain_column(li), topology.domain_names[li]
        counts = Counter(col[d] for d in mapping)
        partial = sorted(names[k] for k, c in counts.items() if c % bal.slice)
        if partial:
            out.append(
                Violation(
                    "balance",
                    f"{bal.level} {', '.join(partial[:4])} hold(s) part of a slice of {bal.slice} ranks; "
                    "each used domain holds whole slices",
                )
            )
        slices = {names[k]: c // bal.slice for k, c in counts.items()}
        if slices and max(slices.values()) - min(slices.values()) > 1:
            shown = "+".join(str(c) for c in sorted(slices.values(), reverse=True))
            out.append(
                Violation(
                    "balance",
                    f"the job's slices of {bal.slice} rank(s) split {shown} over {len(slices)} {bal.level} "
                    "domains; balanced slices differ by at most one per domain",
                )
            )
    size = segment_ranks(topology, job)
    if seg is not None and size:
        li = topology.level_index(seg.level)
        col, names = topology.domain_column(li), topology.domain_names[li]
        for first in range(0, job.ranks, size):
            doms = {col[mapping[r]] for r in range(first, first + size)}
            if len(doms) > 1:
                shown = ", ".join(sorted(names[k] for k in doms)[:4])
                out.append(
                    Violation(
                        "segment",
                        f"segment of ranks {first}-{first + size - 1} ({seg.nodes} node(s)) spans {len(doms)} "
                        f"{seg.level} domains ({shown}); each segment lies inside one {seg.level}",
                    )
                )
    return out


def _failed_link_violations(
    topology: Topology, state: ClusterState, mapping: Sequence[int], traffic: Traffic
) -> list[Violation]:
    out: list[Violation] = []
    dev = topology.devices

    def check(label: str, ranks: Sequence[int]) -> None:
        devs = [mapping[r] for r in ranks]
        dset = set(devs)
        for a, b in state.failed_pairs:
            if a in dset and b in dset:
                out.append(
                    Violation(
                        "failed-link",
                        f"{label} traffic of ranks {_fmt_ranks(list(ranks))} needs the failed link {dev[a].id}<->{dev[b].id}",
                    )
                )
        for up in state.failed_uplinks:
            col = topology.domain_column(up.level)
            inside = sum(1 for d in devs if col[d] == up.domain)
            if 0 < inside < len(devs):
                name = topology.domain_names[up.level][up.domain]
                out.append(
                    Violation(
                        "failed-link",
                        f"{label} traffic of ranks {_fmt_ranks(list(ranks))} crosses the failed uplink of {topology.levels[up.level].name} {name}",
                    )
                )

    for g in traffic.groups:
        check(g.label, g.members)
    for e in traffic.edges:
        check(e.label, (e.src, e.dst))
    return out
