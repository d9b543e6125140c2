"""The constructive heuristics of the portfolio: cheap one-pass placements (tightest domain, Kueue's
LeastFreeCapacity, rail-aligned, contiguous, whole parallel groups host by host) that `place` must never lose to.

Each heuristic is ``(topology, state, job, traffic) -> list[int] | None`` like a scheduler baseline; pins are
honoured, every other hard rule is left to `placement.model.validate` (`heuristic_candidates` drops invalid ones).

- ``tight-emptiest`` / ``tight-fullest``: the tightest domain that holds the job (lowest level, fewest free
  devices), its hosts with the most (emptiest first) or the fewest (fullest first) free devices first, ranks in
  the job's order (``-nested``: the same inside the domain's sub-domains, level by level, so leaves stay together).
- ``least-free``: Kueue's LeastFreeCapacity: from the top level down, the domains with the least free capacity
  first, as many as the job needs; ranks in the job's order.
- ``rail-aligned``: the tightest domain's hosts grouped by the rails (or local indices) of their free devices,
  the largest such class first, every TP group (or heaviest group) onto one host in rail order, so that the
  groups' peers across hosts share a rail.
- ``contiguous``: ranks in the job's order onto the tightest domain's devices in cluster order.
- ``group-pack`` (``-dp`` / ``-pp``): whole TP groups (explicit jobs: the heaviest label's groups) host by host,
  the sub-domains with most room and the best-fitting hosts first; the groups ordered data-parallel first or
  pipeline first.
- ``block-pack`` (``-dp`` / ``-pp`` / ``-dp-leaf``): whole pipeline stages (data-parallel first) or whole
  pipelines best-fitted into the domains one level below the tightest one (or into leaves), then as group-pack.
- ``tile-pack`` (``-pp`` / ``-dp``): c data-parallel neighbours of one stage per host that holds c whole units
  (every host of a DP group holds c of its members), the tiles of c pipelines into one leaf (``-pp``) or of one
  stage into one domain below the tightest (``-dp``); then as group-pack.
- ``stage-fill`` (``-1``: g = 1): each stage's units onto hosts of one domain below the tightest that hold g or more
  (g as large as the free hosts allow), every host filled.
- ``stage-per-domain``: structured jobs; each pipeline stage inside one domain of the highest level below the top
  that takes them all (`stage_per_domain_at`), its TP groups whole on the least roomy hosts that hold one, the
  rest split as evenly as possible over hosts of their lowest common domain: the mapping the joint bound's
  cheapest case describes where full hosts are too few for the TP groups.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from placement.model.job import DIMENSIONS, Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, rank_components
from placement.model.validate import validate
from placement.solve.baselines.common import apply_pins
from placement.solve.units import candidate_devices

__all__ = [
    "HEURISTICS",
    "Heuristic",
    "heuristic_candidates",
    "rank_units",
    "shared_view",
    "stage_per_domain",
    "stage_per_domain_at",
]

Heuristic = Callable[[Topology, ClusterState, Job, Traffic], list[int] | None]


_SHARED: ContextVar[dict[tuple[int, int, int], _Free] | None] = ContextVar("heuristics_free", default=None)
"""Inside one `heuristic_candidates` call: the `_Free` view each heuristic starts from, built once (every
heuristic reads it and none changes it; the objects it is keyed by live through the call)."""


@contextmanager
def shared_view() -> Iterator[None]:
    """Within the block, the heuristics build their view of the free devices (candidates, pins, counts per host and
    per domain) once per (topology, state, job) instead of once each."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def _free(topology: Topology, state: ClusterState, job: Job) -> _Free:
    shared = _SHARED.get()
    if shared is None:
        return _Free(topology, state, job)
    key = (id(topology), id(state), id(job))
    if key not in shared:
        shared[key] = _Free(topology, state, job)
    return shared[key]


class _Free:
    """The job's free candidate devices (pinned ones removed) per host, and per domain of every level."""

    def __init__(self, topology: Topology, state: ClusterState, job: Job) -> None:
        self.topology = topology
        cands = candidate_devices(topology, state, job)
        pins = apply_pins(topology, job, cands)
        self.ok = pins is not None
        self.pinned, left = pins if pins is not None else ({}, [])
        self.by_host: dict[int, list[int]] = defaultdict(list)
        for d in left:
            self.by_host[topology.devices[d].host_index].append(d)
        self.count: list[Counter[int]] = []
        for li in range(len(topology.levels)):
            col = topology.domain_column(li)
            self.count.append(Counter(col[d] for d in left))
        self.need = job.ranks - len(self.pinned)
        self.free_ranks = [r for r in range(job.ranks) if r not in self.pinned]

    def scope(self) -> tuple[int, int] | None:
        """`tightest` when the free devices can hold the job at all (None otherwise)."""
        return self.tightest() if self.ok else None

    def tightest(self) -> tuple[int, int] | None:
        """(level, domain) of the lowest level whose least-free domain still holds the job."""
        for li, cnt in enumerate(self.count):
            fits = [(v, k) for k, v in cnt.items() if v >= self.need]
            if fits:
                return li, min(fits)[1]
        return None

    def hosts_under(self, level: int, domain: int) -> list[int]:
        col = self.topology.domain_column(level)
        return sorted(h for h, devs in self.by_host.items() if devs and col[devs[0]] == domain)

    def nested(self, level: int, domain: int, emptiest: bool) -> list[int]:
        """Hosts of a domain depth first, children by free devices (most or fewest first)."""
        if level == 0:
            return [domain] if self.by_host.get(domain) else []
        kids = [c for c in self.topology.children[level][domain] if self.count[level - 1].get(c, 0) > 0]
        kids.sort(key=lambda c: (-self.count[level - 1][c] if emptiest else self.count[level - 1][c], c))
        return [h for c in kids for h in self.nested(level - 1, c, emptiest)]

    def fill(self, devices: Sequence[int], ranks: Sequence[int] | None = None) -> list[int] | None:
        """Ranks (the free ones in order by default) onto `devices` in sequence; pins kept."""
        ranks = self.free_ranks if ranks is None else ranks
        if len(devices) < len(ranks):
            return None
        out = [-1] * (len(ranks) + len(self.pinned))
        for r, d in self.pinned.items():
            out[r] = d
        for r, d in zip(ranks, devices, strict=False):
            out[r] = d
        return out


def rank_units(job: Job, traffic: Traffic) -> list[tuple[int, ...]]:
    """The rank sets a heuristic keeps on one host: the TP groups of a structured job, else the disjoint groups of
    the heaviest label (bytes x count), else single ranks."""
    par = job.parallel
    if par is not None and par.tp > 1:
        by: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for r in range(job.ranks):
            c = par.coords(r)
            by[tuple(c[d] for d in DIMENSIONS if d != "tp")].append(r)
        return [tuple(sorted(v, key=lambda r: par.coords(r)["tp"])) for _, v in sorted(by.items())]
    weight: dict[str, float] = defaultdict(float)
    for g in traffic.groups:
        weight[g.label] += g.bytes * g.count * len(g.members)
    for label in sorted(weight, key=lambda lab: -weight[lab]):
        groups = [g.members for g in traffic.groups if g.label == label and len(g.members) > 1]
        seen: set[int] = set()
        disjoint = True
        for m in groups:
            disjoint = disjoint and seen.isdisjoint(m)
            seen.update(m)
        if disjoint:
            out: list[tuple[int, ...]] = [tuple(m) for m in groups]
            out += [(r,) for r in range(job.ranks) if r not in seen]
            return sorted(out)
    return [(r,) for r in range(job.ranks)]


_UNITS: dict[tuple[int, str, tuple[int, ...]], tuple[Traffic, Job, list[list[tuple[int, ...]]]]] = {}
"""Unit orders and classes per traffic object (one per `place` call, and every heuristic of the call asks for
them), a few calls' worth kept; the entry holds its traffic, so an id is not reused while it is kept."""


def _units_of(
    job: Job, traffic: Traffic, what: str, compute: Callable[[], list[list[tuple[int, ...]]]], *args: int
) -> list[list[tuple[int, ...]]]:
    """`compute()` once per (job, traffic) objects and `what`/`args`; callers do not modify the result."""
    key = (id(traffic), what, args)
    hit = _UNITS.get(key)
    if hit is not None and hit[0] is traffic and hit[1] is job:
        return hit[2]
    out = compute()
    if len(_UNITS) >= 64:
        _UNITS.clear()
    _UNITS[key] = (traffic, job, out)
    return out


def _orders_of(job: Job, traffic: Traffic) -> list[list[tuple[int, ...]]]:
    """`_unit_orders` of `rank_units`, computed once per (job, traffic) objects."""
    return _units_of(job, traffic, "orders", lambda: _unit_orders(job, rank_units(job, traffic)))


def _unit_orders(job: Job, units: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """Units data-parallel first (Megatron's default) and pipeline first; one order for explicit jobs."""
    par = job.parallel
    if par is None:
        return [units]
    out = []
    for slow in (("cp", "ep", "dp", "pp"), ("cp", "ep", "pp", "dp")):
        out.append(sorted(units, key=lambda u: tuple(par.coords(u[0])[d] for d in reversed(slow))))
    return out


def _in_order(free: _Free, job: Job, traffic: Traffic) -> list[int]:
    """The free ranks with every TP group (heaviest group) consecutive, data-parallel next."""
    units = _orders_of(job, traffic)[0]
    return [r for u in units for r in u if r not in free.pinned]


def _tight(emptiest: bool, nested: bool) -> Heuristic:
    def place(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
        free = _free(topology, state, job)
        scope = free.scope()
        if scope is None:
            return None
        if nested:
            hosts = free.nested(*scope, emptiest)
        else:
            hosts = sorted(
                free.hosts_under(*scope),
                key=lambda h: (-len(free.by_host[h]) if emptiest else len(free.by_host[h]), h),
            )
        return free.fill([d for h in hosts for d in free.by_host[h]])

    return place


def least_free(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """Kueue's LeastFreeCapacity, from the top level down (see the module docstring)."""
    free = _free(topology, state, job)
    if not free.ok:
        return None
    top = len(topology.levels) - 1
    devices: list[int] = []

    def take(level: int, domain: int, need: int) -> int:
        if level == 0:
            got = free.by_host.get(domain, [])[:need]
            devices.extend(got)
            return len(got)
        kids = [c for c in topology.children[level][domain] if free.count[level - 1].get(c, 0) > 0]
        kids.sort(key=lambda c: (free.count[level - 1][c], c))
        taken = 0
        for c in kids:
            if taken >= need:
                break
            taken += take(level - 1, c, need - taken)
        return taken

    roots = sorted(free.count[top], key=lambda k: (free.count[top][k], k))
    left = free.need
    for k in roots:
        if left <= 0:
            break
        left -= take(top, k, left)
    return free.fill(devices, _in_order(free, job, traffic))


def rail_aligned(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    free = _free(topology, state, job)
    scope = free.scope()
    if scope is None:
        return None

    def rail(d: int) -> int:
        dev = topology.devices[d]
        return dev.rail if dev.rail is not None else dev.local_index

    hosts = free.hosts_under(*scope)
    sig = {h: tuple(sorted(rail(d) for d in free.by_host[h])) for h in hosts}
    size = Counter(sig.values())
    hosts.sort(key=lambda h: (-size[sig[h]] * len(sig[h]), sig[h], h))
    seats = {h: sorted(free.by_host[h], key=lambda d: (rail(d), d)) for h in hosts}
    units = _orders_of(job, traffic)[0]
    return _pack(free, units, hosts, seats)


def _pack(
    free: _Free,
    units: Sequence[tuple[int, ...]],
    hosts: Sequence[int],
    seats: dict[int, list[int]],
    segments: Sequence[tuple[Sequence[tuple[int, ...]], Sequence[int]]] = (),
) -> list[int] | None:
    """Whole units host by host in sequence (a host that cannot take the next unit whole is skipped, and its
    devices serve the units left over at the end). `segments` (units, hosts) are packed first, each onto its own
    hosts only; what they cannot hold joins `units`."""
    left = {h: list(seats[h]) for h in hosts}
    out: dict[int, int] = {}
    over: list[tuple[int, ...]] = []
    for seg_units, seg_hosts in segments:
        over += _pack_into(free, seg_units, seg_hosts, left, out)
    pending = [
        r for u in _pack_into(free, [*over, *units], hosts, left, out) for r in u if r not in free.pinned
    ]
    rest = [d for h in hosts for d in left[h]]
    if len(rest) < len(pending):
        return None
    out.update(zip(pending, rest, strict=False))
    return free.fill([out[r] for r in sorted(out)], sorted(out))


def _pack_into(
    free: _Free,
    units: Sequence[tuple[int, ...]],
    hosts: Sequence[int],
    left: dict[int, list[int]],
    out: dict[int, int],
) -> list[tuple[int, ...]]:
    """Whole units onto `hosts` in sequence (taking from `left`, writing `out`); returns the units that did not fit."""
    pending: list[tuple[int, ...]] = []
    hi = 0
    for u in units:
        ranks = [r for r in u if r not in free.pinned]
        while hi < len(hosts) and len(left[hosts[hi]]) < len(ranks):
            hi += 1
        if hi == len(hosts):
            pending.append(u)
            continue
        for r in ranks:
            out[r] = left[hosts[hi]].pop(0)
    return pending


def contiguous_fill(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    free = _free(topology, state, job)
    scope = free.scope()
    if scope is None:
        return None
    return free.fill(sorted(d for h in free.hosts_under(*scope) for d in free.by_host[h]))


def _whole_units(free: _Free, usize: int, n_levels: int) -> list[Counter[int]]:
    """Whole units of `usize` ranks each domain of each level holds (hosts hold floor(free / usize))."""
    out: list[Counter[int]] = []
    for li in range(n_levels):
        col = free.topology.domain_column(li)
        c: Counter[int] = Counter()
        for devs in free.by_host.values():
            if devs:
                c[col[devs[0]]] += len(devs) // usize
        out.append(c)
    return out


def _group_pack(pipeline_first: bool) -> Heuristic:
    def place(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
        free = _free(topology, state, job)
        scope = free.scope()
        if scope is None:
            return None
        orders = _orders_of(job, traffic)
        units = orders[-1] if pipeline_first else orders[0]
        usize = max((len(u) for u in units), default=1)
        hosts = free.hosts_under(*scope)
        # sub-domains with the most whole units first (level by level, so a parallel group stays in few of them),
        # inside a sub-domain the hosts that hold whole units with the least left over first
        t = topology
        path = {
            h: tuple(-whole[li][t.domain_of(free.by_host[h][0], li)] for li in range(scope[0] - 1, 0, -1))
            for whole in [_whole_units(free, usize, len(t.levels))]
            for h in hosts
        }
        hosts.sort(
            key=lambda h: (
                path[h],
                len(free.by_host[h]) < usize,
                len(free.by_host[h]) % usize,
                -len(free.by_host[h]),
                h,
            )
        )
        return _pack(free, units, hosts, {h: free.by_host[h] for h in hosts})

    return place


def _block_pack(pipeline_first: bool, leaf: bool, first_fit: bool = False) -> Heuristic:
    """Blocks of units (one pipeline stage's units, data-parallel first; or one pipeline's, pipeline first)
    best-fitted whole into the domains one level below the tightest domain (``leaf``: level 1), so that a
    parallel group straddles as few domains as the free capacity allows (``first_fit``: consecutive blocks into
    the roomiest domain while they fit, so neighbouring pipeline stages share one); then host by host as
    `_group_pack`."""

    def place(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
        free = _free(topology, state, job)
        scope = free.scope()
        par = job.parallel
        if scope is None or par is None:
            return None
        level = 1 if leaf else scope[0] - 1
        if level < 1 or level >= scope[0]:
            return None
        orders = _orders_of(job, traffic)
        units = orders[-1] if pipeline_first else orders[0]
        usize = max((len(u) for u in units), default=1)
        dim = "dp" if pipeline_first else "pp"
        blocks: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        for u in units:
            blocks[par.coords(u[0])[dim]].append(u)
        whole = _whole_units(free, usize, len(topology.levels))
        hosts = free.hosts_under(*scope)
        dom_of = {h: topology.domain_of(free.by_host[h][0], level) for h in hosts}
        room = {k: whole[level][k] for k in set(dom_of.values())}
        placed: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        pending: list[tuple[int, ...]] = []
        for _, blk in sorted(blocks.items()):
            fits = [k for k, v in room.items() if v >= len(blk)]
            if not fits:
                pending += blk
                continue
            if first_fit:
                k = min(fits, key=lambda k: (k not in placed, -room[k], k))
            else:
                k = min(fits, key=lambda k: (room[k], k))
            room[k] -= len(blk)
            placed[k] += blk
        doms = sorted(placed, key=lambda k: (-len(placed[k]), k)) + sorted(set(room) - set(placed))
        rank_of = {k: i for i, k in enumerate(doms)}
        hosts.sort(
            key=lambda h: (
                rank_of[dom_of[h]],
                -whole[1][topology.domain_of(free.by_host[h][0], 1)],
                len(free.by_host[h]) < usize,
                len(free.by_host[h]) % usize,
                -len(free.by_host[h]),
                h,
            )
        )
        segments = [(placed[k], [h for h in hosts if dom_of[h] == k]) for k in doms if k in placed]
        return _pack(free, pending, hosts, {h: free.by_host[h] for h in hosts}, segments)

    return place


def _classes_in_scope(
    free: _Free, job: Job, traffic: Traffic, parts: int = 1
) -> tuple[tuple[int, int], list[int], list[list[tuple[int, ...]]]] | None:
    """The tightest domain above the hosts, its hosts and the job's unit classes sized to its roomiest host
    (`_unit_classes`); None when the job fits no such domain or has pinned ranks."""
    scope = free.scope()
    if scope is None or scope[0] < 1 or free.pinned:
        return None
    hosts = free.hosts_under(*scope)
    most = max((len(free.by_host[h]) for h in hosts), default=0)
    return scope, hosts, _unit_classes(job, traffic, most, parts)


def _unit_classes(job: Job, traffic: Traffic, host_room: int, parts: int = 1) -> list[list[tuple[int, ...]]]:
    """`_classes`, computed once per (job, traffic, host_room, parts)."""
    return _units_of(
        job, traffic, "classes", lambda: _classes(job, traffic, host_room, parts), host_room, parts
    )


def _classes(job: Job, traffic: Traffic, host_room: int, parts: int = 1) -> list[list[tuple[int, ...]]]:
    """The job's units (the components of the heaviest label whose components fit one host: TP groups, or TP rings
    of p2p edges) in classes of units that meet the same components of the next heaviest label (Megatron: the
    units of one pipeline stage, that meet the same DP groups), each class in the order of its units' positions
    in those components (data-parallel index). Derived from the traffic alone: structured, explicit and p2p jobs
    alike."""
    n = job.ranks
    sets: dict[str, list[Sequence[int]]] = defaultdict(list)
    weight: dict[str, float] = defaultdict(float)
    for g in traffic.groups:
        if len(g.members) > 1:
            sets[g.label].append(g.members)
            weight[g.label] += g.bytes * g.count * len(g.members)
    for e in traffic.edges:
        if e.src != e.dst:
            sets[e.label].append((e.src, e.dst))
            weight[e.label] += e.bytes * e.count
    comps = {lab: rank_components(n, v) for lab, v in sets.items()}
    sizes = {lab: Counter(c) for lab, c in comps.items()}
    labels = sorted(weight, key=lambda lab: (-weight[lab], lab))
    unit_label = next((lab for lab in labels if max(sizes[lab].values()) <= max(host_room, 1)), None)
    by_unit: dict[int, list[int]] = defaultdict(list)
    for r in range(n):
        by_unit[comps[unit_label][r] if unit_label is not None else r].append(r)
    units = [tuple(v) for _, v in sorted(by_unit.items())]
    if parts > 1:
        # each unit in `parts` pieces of consecutive members (a TP group's halves)
        units = [
            u[i * len(u) // parts : (i + 1) * len(u) // parts]
            for u in units
            for i in range(parts)
            if (i + 1) * len(u) // parts > i * len(u) // parts
        ]
    other = next((lab for lab in labels if lab != unit_label), None)
    if other is None:
        return [units]
    comp = comps[other]
    members: dict[int, list[int]] = defaultdict(list)
    for r in range(n):
        members[comp[r]].append(r)
    pos = {r: i for m in members.values() for i, r in enumerate(m)}
    classes: dict[tuple[int, ...], list[tuple[int, ...]]] = defaultdict(list)
    for u in units:
        classes[tuple(sorted({comp[r] for r in u}))].append(u)
    return [sorted(v, key=lambda u: (min(pos[r] for r in u), u)) for _, v in sorted(classes.items())]


def _finish(
    free: _Free,
    job: Job,
    hosts: Sequence[int],
    left: dict[int, list[int]],
    out: dict[int, int],
    pending: Sequence[tuple[int, ...]],
    usize: int,
) -> list[int] | None:
    """Units left: whole onto the hosts left (fullest fit first), then each split over the two hosts of the
    lowest domain that give the split's smaller part the most devices; `out` (rank -> device) completed."""
    t = free.topology

    def put(unit: Sequence[int], h: int) -> None:
        for r in unit:
            out[r] = left[h].pop(0)

    split: list[tuple[int, ...]] = []
    order = sorted(hosts, key=lambda h: (len(left[h]) % usize, -len(left[h]), h))
    hi = 0
    for u in pending:
        while hi < len(order) and len(left[order[hi]]) < usize:
            hi += 1
        if hi == len(order):
            split.append(u)
        else:
            put(u, order[hi])
    dom_at = (
        [{h: t.domain_of(free.by_host[h][0], li) for h in hosts} for li in range(len(t.levels))]
        if split
        else []
    )
    for u in split:
        best: tuple[int, int, int, int, int] | None = None
        for li in range(1, len(t.levels)):
            doms_h: dict[int, list[int]] = defaultdict(list)
            for h in hosts:
                if left[h]:
                    doms_h[dom_at[li][h]].append(h)
            for hs in doms_h.values():
                if len(hs) < 2:
                    continue
                a, b = sorted(hs, key=lambda h: (-len(left[h]), h))[:2]
                if len(left[a]) + len(left[b]) < len(u):
                    continue
                x = min(len(left[b]), len(u) // 2)
                cand = (x, -li, -len(left[a]), a, b)
                if best is None or cand[:3] > best[:3]:
                    best = cand
            if best is not None:
                break
        if best is None:
            rest = [h for h in hosts if left[h]]
            for r in u:
                h = max(rest, key=lambda h: len(left[h]))
                out[r] = left[h].pop(0)
            continue
        x, _, _, a, b = best
        put(u[: len(u) - x], a)
        put(u[len(u) - x :], b)
    if len(out) != job.ranks:
        return None
    return free.fill([out[r] for r in range(job.ranks)], list(range(job.ranks)))


def _tile_pack(pipeline_blocks: bool, parts: int = 1) -> Heuristic:
    """Tiles of c data-parallel neighbours' units of one stage, each onto one host, so that every host of a DP
    group holds c of its members (a DP ring runs at the pace of its host with the fewest); c is the largest tile
    the hosts holding whole tiles can take every unit in. ``pipeline_blocks``: the tiles of c neighbouring
    pipelines, every stage, as one block into a leaf (level 1), so that the PP sends stay in the leaf; else the
    tiles of one stage as one block into a domain one level below the tightest (best fit). Blocks go first fit
    into the domains, the roomiest upper domains first. Units left over go whole onto the hosts left, then split
    over the two hosts of the lowest domain that give the split's smaller part the most devices. ``parts`` 2:
    every unit in halves (when some TP groups must split anyway, splitting all of them within a leaf lets the DP
    groups hold two members on a host)."""

    def place(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
        free = _free(topology, state, job)
        found = _classes_in_scope(free, job, traffic, parts)
        if found is None:
            return None
        scope, hosts, classes = found
        if parts > 1 and all(len(u) < 2 for v in classes for u in v):
            return None
        n_units = sum(len(v) for v in classes)
        usize = max((len(u) for v in classes for u in v), default=1)
        room = {h: len(free.by_host[h]) // usize for h in hosts}
        c = max(
            (
                k
                for k in range(1, max(room.values(), default=0) + 1)
                if sum(r // k * k for r in room.values()) >= n_units
            ),
            default=1,
        )
        level = 1 if pipeline_blocks else scope[0] - 1
        if level < 1:
            return None
        tiling = _Tiling(topology, free, hosts, room, c, level, scope[0])
        for _, blk in sorted(_tile_blocks(classes, c, pipeline_blocks).items()):
            fits = [k for k in tiling.doms if tiling.cap[k] >= len(blk)]
            if not fits:
                tiling.spread(blk)
                continue
            k = fits[0] if pipeline_blocks else min(fits, key=lambda k: (tiling.cap[k], tiling.doms.index(k)))
            tiling.into(k, blk)
        return _finish(free, job, hosts, tiling.left, tiling.out, tiling.pending, usize)

    return place


def _tile_blocks(
    classes: list[list[tuple[int, ...]]], c: int, pipeline_blocks: bool
) -> dict[tuple[int, ...], list[list[tuple[int, ...]]]]:
    """Tiles of c units of one class; a block is one class's tiles, or (``pipeline_blocks``) the j-th tile of
    every class (c neighbouring pipelines, every stage)."""
    blocks: dict[tuple[int, ...], list[list[tuple[int, ...]]]] = defaultdict(list)
    for ci, cls in enumerate(classes):
        for j in range(0, len(cls), c):
            blocks[(j // c, ci) if pipeline_blocks else (ci,)].append(cls[j : j + c])
    if pipeline_blocks:
        merged: dict[tuple[int, ...], list[list[tuple[int, ...]]]] = defaultdict(list)
        for (j, _), tl in sorted(blocks.items()):
            merged[(j,)] += tl
        blocks = merged
    return blocks


class _Tiling:
    """`_tile_pack`'s slots (a host holds room // c tiles), their domains at `level` and above (up to the scope),
    the domains in first-fit order (the roomiest upper domains first), and the mapping as it is built."""

    def __init__(
        self, t: Topology, free: _Free, hosts: list[int], room: dict[int, int], c: int, level: int, scope: int
    ) -> None:
        self.slots = {h: room[h] // c for h in hosts if room[h] >= c}
        slots = self.slots
        self.dom_of = {h: t.domain_of(free.by_host[h][0], level) for h in hosts}
        self.cap: Counter[int] = Counter()
        for h, n in slots.items():
            self.cap[self.dom_of[h]] += n
        self.upper = [
            {h: t.domain_of(free.by_host[h][0], li) for h in hosts} for li in range(level + 1, scope)
        ]
        up_cap: list[Counter[int]] = []
        for col in self.upper:
            uc: Counter[int] = Counter()
            for h, n in slots.items():
                uc[col[h]] += n
            up_cap.append(uc)
        rep = {self.dom_of[h]: h for h in slots}
        self.doms = sorted(
            self.cap,
            key=lambda k: (
                *(-uc[col[rep[k]]] for col, uc in zip(self.upper, up_cap, strict=True)),
                -self.cap[k],
                k,
            ),
        )
        self.by_dom: dict[int, list[int]] = defaultdict(list)
        for h in sorted(slots, key=lambda h: (-slots[h], h)):
            self.by_dom[self.dom_of[h]].append(h)
        self.left = {h: list(free.by_host[h]) for h in hosts}
        self.out: dict[int, int] = {}
        self.pending: list[tuple[int, ...]] = []

    def put(self, unit: Sequence[int], h: int) -> None:
        for r in unit:
            self.out[r] = self.left[h].pop(0)

    def into(self, k: int, blk: list[list[tuple[int, ...]]]) -> None:
        """The block's tiles onto the slots of domain `k` (which holds them all)."""
        self.cap[k] -= len(blk)
        for tile in blk:
            h = next(h for h in self.by_dom[k] if self.slots[h] > 0)
            self.slots[h] -= 1
            for u in tile:
                self.put(u, h)

    def spread(self, blk: list[list[tuple[int, ...]]]) -> None:
        """No domain holds the block: its tiles into the lowest upper domain that has slots for all, else one by
        one into the slots left, domain by domain (tiles without a slot are left pending)."""
        slots, dom_of, cap, doms = self.slots, self.dom_of, self.cap, self.doms
        spread = [h for k in doms for h in self.by_dom[k]]
        for u_of in self.upper:
            room_up: Counter[int] = Counter()
            for h in spread:
                room_up[u_of[h]] += slots[h]
            wide = [k for k, v in room_up.items() if v >= len(blk)]
            if wide:
                k_up = min(wide, key=lambda k: (room_up[k], k))
                spread = sorted(
                    (h for h in spread if u_of[h] == k_up),
                    key=lambda h: (-cap[dom_of[h]], doms.index(dom_of[h])),
                )
                break
        at = 0
        for tile in blk:
            while at < len(spread) and slots[spread[at]] <= 0:
                at += 1
            if at == len(spread):
                self.pending += tile
                continue
            spot = spread[at]
            slots[spot] -= 1
            cap[dom_of[spot]] -= 1
            for u in tile:
                self.put(u, spot)


def _stage_fill(spread: bool) -> Heuristic:
    """`stage_fill`; without `spread`, g is 1 (a stage in one domain matters more than members per host: p2p
    sends price per pair)."""

    def place(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
        return stage_fill(topology, state, job, traffic, spread)

    return place


def stage_fill(
    topology: Topology, state: ClusterState, job: Job, traffic: Traffic, spread: bool = True
) -> list[int] | None:
    """Each class of units (Megatron: a pipeline stage, the units that meet the same DP groups) into one domain
    below the tightest (best fit), on hosts that hold at least g of its units each, every host taking as many as
    it holds: g is the largest such that those hosts hold every unit, so that every DP group has g members or
    more on each of its hosts. Units left as `_finish`."""
    free = _free(topology, state, job)
    found = _classes_in_scope(free, job, traffic)
    if found is None:
        return None
    scope, hosts, classes = found
    n_units = sum(len(v) for v in classes)
    usize = max((len(u) for v in classes for u in v), default=1)
    room = {h: len(free.by_host[h]) // usize for h in hosts}
    g = max(
        (
            k
            for k in range(1, max(room.values(), default=0) + 1)
            if sum(r for r in room.values() if r >= k) >= n_units
        ),
        default=1,
    )
    g = g if spread else 1
    level = scope[0] - 1
    t = topology
    good = sorted((h for h in hosts if room[h] >= g), key=lambda h: (-room[h], h))
    dom_of = {h: t.domain_of(free.by_host[h][0], level) for h in good}
    cap: Counter[int] = Counter()
    for h in good:
        cap[dom_of[h]] += room[h]
    left = {h: list(free.by_host[h]) for h in hosts}
    out: dict[int, int] = {}
    pending: list[tuple[int, ...]] = []
    by_dom: dict[int, list[int]] = defaultdict(list)
    for h in good:
        by_dom[dom_of[h]].append(h)

    # a class that fits one domain takes its least roomy hosts first (the roomy ones stay for a class that does
    # not fit, which spreads over domains on hosts that hold as many of its units as the hosts left allow)
    for k in by_dom:
        by_dom[k].sort(key=lambda h: (room[h], h))
    for cls in sorted(classes, key=lambda c: -len(c)):
        fits = [k for k in cap if cap[k] >= len(cls)]
        doms = [min(fits, key=lambda k: (cap[k], k))] if fits else sorted(cap, key=lambda k: (-cap[k], k))
        order = [h for k in doms for h in by_dom[k]]
        gg = g
        if not fits:
            avails = [len(left[h]) // usize for h in order]
            gg = max(
                (
                    x
                    for x in range(g, max(avails, default=0) + 1)
                    if sum(a for a in avails if a >= x) >= len(cls)
                ),
                default=g,
            )
            order = sorted(order, key=lambda h: (-(len(left[h]) // usize), doms.index(dom_of[h]), h))
        pending += _fill_class(list(cls), order, gg, usize, left, dom_of, cap, out)
    return _finish(free, job, hosts, left, out, pending, usize)


def _fill_class(
    todo: list[tuple[int, ...]],
    order: list[int],
    gg: int,
    usize: int,
    left: dict[int, list[int]],
    dom_of: dict[int, int],
    cap: Counter[int],
    out: dict[int, int],
) -> list[tuple[int, ...]]:
    """`stage_fill`: one class's units onto the hosts of `order`, each host taking the largest share (gg or more)
    that leaves a remainder the hosts not visited yet can take in shares of gg; returns the units left."""
    pool: Counter[int] = Counter()
    for h in order:
        if (a := len(left[h]) // usize) >= gg:
            pool[a] += 1
    for h in order:
        if not todo:
            break
        avail = len(left[h]) // usize
        if avail < gg:
            continue
        pool[avail] -= 1
        if pool[avail] == 0:
            del pool[avail]
        rem = len(todo)
        share = next((x for x in range(min(avail, rem), gg - 1, -1) if _takes(pool, rem - x, gg)), 0)
        if share < gg:
            continue
        cap[dom_of[h]] -= share
        for u in todo[:share]:
            for r in u:
                out[r] = left[h].pop(0)
        todo = todo[share:]
    return todo


def _takes(pool: Counter[int], rem: int, g: int) -> bool:
    """`rem` units split over the hosts of `pool` (units each holds) in shares of g or more: the k largest hold at
    least rem for the most shares k (rem // g) the hosts allow."""
    if rem == 0:
        return True
    k = min(rem // g, sum(pool.values()))
    if k < 1:
        return False
    total = 0
    for v in sorted(pool, reverse=True):
        c = min(pool[v], k)
        total += c * v
        k -= c
        if k == 0:
            break
    return rem <= total


def stage_per_domain(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """`stage_per_domain_at` at the highest level below the top where it gives a valid mapping (down to the
    leaves; a two-level tree: its top), None when no level does."""
    for level in range(max(len(topology.levels) - 2, 1), 0, -1):
        m = stage_per_domain_at(topology, state, job, level, traffic)
        if m is not None:
            return m
    return None


def stage_per_domain_at(
    topology: Topology, state: ClusterState, job: Job, level: int, traffic: Traffic | None = None
) -> list[int] | None:
    """A structured job's pipeline stages each inside one domain of `level` (the roomiest domains first, each
    taking stages while it holds one more), every TP group of a stage whole on the least roomy host of the domain
    that holds it, or, where no host holds it, split as evenly as possible over the fewest hosts of the lowest
    common domain that hold the parts. None unless the job is structured, has no pins and the mapping fits and
    is valid (`placement.model.validate`)."""
    par = job.parallel
    if par is None or not 1 <= level < len(topology.levels) or par.world_size != job.ranks:
        return None
    free = _free(topology, state, job)
    if not free.ok or free.pinned:
        return None
    stages: list[list[list[int]]] = [[] for _ in range(par.pp)]
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for r in range(job.ranks):
        c = par.coords(r)
        groups[tuple(c[d] for d in DIMENSIONS if d != "tp")].append(r)
    for key in sorted(groups, key=lambda k: (k[-1], min(groups[k]))):
        stages[key[-1]].append(sorted(groups[key], key=lambda r: par.coords(r)["tp"]))
    hosts = {h: list(devs) for h, devs in free.by_host.items() if devs}
    col = topology.domain_column(level)
    doms: dict[int, list[int]] = defaultdict(list)
    for h in sorted(hosts):
        doms[col[hosts[h][0]]].append(h)
    stage_ranks = job.ranks // par.pp
    out: dict[int, int] = {}
    stage = 0
    for k in sorted(doms, key=lambda k: (-sum(len(hosts[h]) for h in doms[k]), k)):
        while stage < par.pp and sum(len(hosts[h]) for h in doms[k]) >= stage_ranks:
            room = {h: list(hosts[h]) for h in doms[k]}
            placed: dict[int, int] = {}
            if not all(_put_group(topology, level, room, g, placed) for g in stages[stage]):
                break  # this domain cannot take the stage (its hosts too fragmented): the next domain may
            hosts.update(room)
            out.update(placed)
            stage += 1
    if stage < par.pp:
        return None
    m = [out[r] for r in range(job.ranks)]
    if validate(topology, state, job, m, traffic=traffic):
        return None
    return m


def _put_group(
    topology: Topology, level: int, room: dict[int, list[int]], group: list[int], out: dict[int, int]
) -> bool:
    """`stage_per_domain_at`: one TP group onto the hosts of `room` (its free devices, taken from): whole on the
    least roomy host that holds it, else in p near-equal parts (p from 2 up) on p hosts of one domain of the
    lowest level (1 up to `level`) that holds them, each part on the least roomy host left that holds it."""
    t = len(group)
    whole = [h for h, devs in room.items() if len(devs) >= t]
    if whole:
        h = min(whole, key=lambda x: (len(room[x]), x))
        out.update(zip(group, room[h][:t], strict=True))
        del room[h][:t]
        return True
    for sub in range(1, level + 1):
        col = topology.domain_column(sub)
        by_dom: dict[int, list[int]] = defaultdict(list)
        for h, devs in room.items():
            if devs:
                by_dom[col[devs[0]]].append(h)
        for p in range(2, t + 1):
            sizes = [t // p + (1 if i < t % p else 0) for i in range(p)]  # largest parts first
            for k in sorted(by_dom):
                chosen: list[int] = []
                for size in sizes:
                    fit = [h for h in by_dom[k] if h not in chosen and len(room[h]) >= size]
                    if not fit:
                        break
                    chosen.append(min(fit, key=lambda x: (len(room[x]), x)))
                if len(chosen) < p:
                    continue
                i = 0
                for h, size in zip(chosen, sizes, strict=True):
                    out.update(zip(group[i : i + size], room[h][:size], strict=True))
                    del room[h][:size]
                    i += size
                return True
    return False


HEURISTICS: dict[str, Heuristic] = {
    "tile-pack-dp": _tile_pack(False),
    "tile-pack-pp": _tile_pack(True),
    "stage-fill": _stage_fill(True),
    "stage-fill-1": _stage_fill(False),
    "stage-per-domain": stage_per_domain,
    "tight-emptiest": _tight(True, False),
    "tight-fullest": _tight(False, False),
    "tight-emptiest-nested": _tight(True, True),
    "tight-fullest-nested": _tight(False, True),
    "least-free": least_free,
    "rail-aligned": rail_aligned,
    "contiguous": contiguous_fill,
    "group-pack-dp": _group_pack(False),
    "group-pack-pp": _group_pack(True),
    "block-pack-dp": _block_pack(False, False),
    "block-pack-pp": _block_pack(True, False),
    "block-pack-dp-leaf": _block_pack(False, True),
    "block-pack-dp-first-fit": _block_pack(False, False, True),
}
"""The constructive family (each is one pass over the free devices); tile-pack first, the likeliest to win on a
fragmented cluster when time allows only a few scorings."""


def heuristic_candidates(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    names: Sequence[str] | None = None,
) -> dict[str, list[int] | None]:
    """Every heuristic's mapping when it is valid under the request's hard rules, else None."""
    out: dict[str, list[int] | None] = {}
    with shared_view():
        for name in names if names is not None else HEURISTICS:
            m = HEURISTICS[name](topology, state, job, traffic)
            if m is not None and validate(topology, state, job, m, traffic=traffic):
                m = None
            out[name] = m
    return out
