"""`capacity`: how many disjoint copies of each job shape fit on a state now (a greedy count, a lower bound, and an
upper bound from the free devices per domain), per domain at each level, their modeled steps, and fragmentation.

The counts come from free devices per domain, the shape's required-level units and segments, and its balanced
slices (`balanced_copies`), not from solver calls (a 4,096-GPU cluster answers in milliseconds);
`placement.decide.balance.place_job` models the steps of the first copies. See docs/decisions.md.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.cost.report import CostReport
from placement.decide.balance import place_job
from placement.errors import InfeasibleError, InputError, InternalError, Problem
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.model.validate import validate
from placement.solve.run import request_problems
from placement.solve.types import SolveOptions
from placement.solve.units import candidate_devices, required_units

__all__ = [
    "MAX_PLACED",
    "CapacityResult",
    "DomainCapacity",
    "LevelFragmentation",
    "PlacedCopy",
    "ShapeCapacity",
    "balanced_copies",
    "capacity",
    "fragmentation",
    "greedy_copies",
]

MAX_PLACED = 64
"""Copies placed one by one with `place_job` at most: the count of shapes the fast count cannot handle, and the
steps asked for."""


@dataclass(frozen=True)
class DomainCapacity:
    """Copies of a shape that fit inside one domain alone, and its usable free devices."""

    level: str
    domain: str
    copies: int
    free: int


@dataclass
class PlacedCopy:
    """A copy placed by `place_job` on the state left by the copies before it."""

    index: int
    mapping: list[int]
    report: CostReport


@dataclass
class ShapeCapacity:
    """One shape: its usable devices, the greedy count of disjoint copies (a lower bound: each copy found is
    placeable), an upper bound, how they were counted (``count``: per-domain arithmetic; ``place``: copies placed
    one by one), the copies per domain (domains that hold at least one), and the placed copies' steps."""

    job: Job
    usable: int
    copies: int
    upper_bound: int
    method: str
    domains: list[DomainCapacity] = field(default_factory=list)
    placed: list[PlacedCopy] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LevelFragmentation:
    """Per level: the mean over its domains with free devices of 1 - (the most free devices in one child
    domain) / (the domain's free devices); free devices; domains with any; the most free devices in one domain."""

    level: str
    fragmentation: float
    free: int
    domains_with_free: int
    largest_free_block: int


@dataclass
class CapacityResult:
    shapes: list[ShapeCapacity]
    fragmentation: list[LevelFragmentation]
    stats: dict[str, float | int | str] = field(default_factory=dict)


def greedy_copies(free: Sequence[int], sizes: Sequence[int]) -> int:
    """Copies packed one after another, each unit (largest first) into the domain with the fewest free devices
    that still holds it (best fit), until a copy does not fit. `free`: free devices per domain; `sizes`: the unit
    sizes of one copy. Exact when every unit has the same size."""
    units = sorted((s for s in sizes if s > 0), reverse=True)
    if not units:
        return 0
    if units[0] == units[-1]:  # one size: any `len(units)` slots form a copy
        return sum(f // units[0] for f in free) // len(units)
    cnt = Counter(f for f in free if f > 0)
    copies = 0
    limit = sum(free) // sum(units)
    while copies < limit:
        for s in units:
            keys = sorted(k for k, n in cnt.items() if n > 0 and k >= s)
            if not keys:
                return copies
            k = keys[0]
            cnt[k] -= 1
            if k - s > 0:
                cnt[k - s] += 1
        copies += 1
    return copies


def _upper(free: Sequence[int], sizes: Sequence[int], ranks: int) -> int:
    """No more copies than the free devices hold, nor than the domains hold units of each size or larger."""
    bound = sum(free) // ranks if ranks else 0
    for s in sorted(set(sizes)):
        need = sum(1 for u in sizes if u >= s)
        bound = min(bound, sum(f // s for f in free) // need)
    return bound


def balanced_copies(rooms: Sequence[int], slices: int) -> int:
    """Copies of a job of `slices` balanced slices packed one after another, each as a balanced split (over d
    domains: r = slices mod d of them take q + 1 slices, the others q = slices // d) until a copy does not fit;
    the most of four greedy orders (the fewest or the most domains first; the tightest or the roomiest domains
    that suffice). `rooms`: the whole slices each domain holds. A lower bound: every copy counted is a balanced
    split of what the copies before it left."""
    if slices < 1:
        return 0
    limit = sum(r for r in rooms if r > 0) // slices
    best = 0
    for fewest in (True, False):
        for tight in (True, False):
            cnt = Counter(r for r in rooms if r > 0)
            copies = 0
            while copies < limit and _take_balanced(cnt, slices, fewest, tight):
                copies += 1
            best = max(best, copies)
            if best == limit:
                return best
    return best


def _take_balanced(cnt: Counter[int], slices: int, fewest: bool, tight: bool) -> bool:
    """Take one balanced copy out of `cnt` (room -> domains with that room): over the fewest (or the most)
    domains that hold it, the tightest (or the roomiest) of them; False when no split fits."""
    keys = sorted((k for k, n in cnt.items() if k > 0 and n > 0), reverse=not tight)
    domains = sum(cnt[k] for k in keys)
    counts = range(1, min(slices, domains) + 1)
    for d in counts if fewest else reversed(counts):
        q, r = divmod(slices, d)
        hi: list[tuple[int, int]] = []  # (room, domains) taking q + 1 slices
        need = r
        for k in keys:
            if need == 0:
                break
            if k >= q + 1:
                t = min(cnt[k], need)
                hi.append((k, t))
                need -= t
        if need:
            continue
        used = dict(hi)
        lo: list[tuple[int, int]] = []  # (room, domains) taking q slices
        need = d - r
        for k in keys:
            if need == 0:
                break
            if k >= q:
                t = min(cnt[k] - used.get(k, 0), need)
                if t > 0:
                    lo.append((k, t))
                    need -= t
        if need:
            continue
        for take, part in ((q + 1, hi), (q, lo)):
            for k, t in part:
                cnt[k] -= t
                cnt[k - take] += t
        return True
    return False


def fragmentation(topology: Topology, state: ClusterState) -> list[LevelFragmentation]:
    """Per level above the host: how scattered the free devices are (see `LevelFragmentation`); the host level's
    figure is 0 by definition (its devices are one block)."""
    free_devs = [d for d in range(topology.num_devices) if state.usable(d)]
    out: list[LevelFragmentation] = []
    prev: Counter[int] = Counter(topology.domain_column(0)[d] for d in free_devs)
    out.append(
        LevelFragmentation(
            topology.levels[0].name, 0.0, len(free_devs), len(prev), max(prev.values(), default=0)
        )
    )
    for level in range(1, len(topology.levels)):
        par = topology.parent[level - 1]
        cur: Counter[int] = Counter()
        best: dict[int, int] = {}
        for child, n in prev.items():
            p = par[child]
            cur[p] += n
            best[p] = max(best.get(p, 0), n)
        fr = [1.0 - best[p] / n for p, n in cur.items() if n > 0]
        out.append(
            LevelFragmentation(
                topology.levels[level].name,
                sum(fr) / len(fr) if fr else 0.0,
                len(free_devs),
                len(cur),
                max(cur.values(), default=0),
            )
        )
        prev = cur
    return out


def _ancestors(topology: Topology, level: int, target: int) -> list[int]:
    """For every domain of `level`: its ancestor at `target` (>= level)."""
    cur = list(range(len(topology.domain_names[level])))
    for li in range(level, target):
        par = topology.parent[li]
        cur = [par[c] for c in cur]
    return cur


PLACE_BUDGET = 4
"""Shapes counted by placing copies stop after this many times the time limit of one placement."""
NESTED_TRIES = 8
"""Domains tried per unit (fewest free devices first) before a nested copy gives up."""


class _Nested:
    """Greedy best-fit packing of copies whose rank units nest over several required levels (``tp: node`` inside
    ``pp: leaf``): each unit, largest first, into the domain of its level with the fewest free devices that holds
    it and its sub-units (NESTED_TRIES domains tried), inside the domain its enclosing unit took."""

    def __init__(
        self,
        topology: Topology,
        devices: Sequence[int],
        levels: list[int],
        units: dict[int, list[tuple[int, ...]]],
    ) -> None:
        self.levels = levels
        cols = [topology.domain_column(lv) for lv in levels]
        self.free: list[Counter[int]] = [Counter(col[d] for d in devices) for col in cols]
        self.up: list[dict[int, int]] = []  # domain at levels[k] -> its ancestor at levels[k+1]
        self.down: list[dict[int, list[int]]] = [{}]  # domain at levels[k] -> its descendants at levels[k-1]
        for k in range(len(levels) - 1):
            up = {cols[k][d]: cols[k + 1][d] for d in devices}
            self.up.append(up)
            down: dict[int, list[int]] = {}
            for child, par in sorted(up.items()):
                down.setdefault(par, []).append(child)
            self.down.append(down)
        self.sizes = [[len(u) for u in units[lv]] for lv in levels]
        self.inner: list[list[list[int]]] = [
            [[] for _ in units[levels[0]]]
        ]  # unit -> its units one level down
        for k in range(1, len(levels)):
            where = {r: i for i, u in enumerate(units[levels[k - 1]]) for r in u}
            self.inner.append([sorted({where[r] for r in u}) for u in units[levels[k]]])
        self.ranks = sum(self.sizes[0])
        # per level and unit: (size s, how many of its units one level down have >= s ranks)
        self.needs: list[list[list[tuple[int, int]]]] = [[]]
        for k in range(1, len(levels)):
            per: list[list[tuple[int, int]]] = []
            for inner in self.inner[k]:
                sz = [self.sizes[k - 1][u] for u in inner]
                per.append([(s, sum(1 for x in sz if x >= s)) for s in sorted(set(sz))])
            self.needs.append(per)

    def _take(self, d: int, size: int, log: list[tuple[int, int, int]]) -> None:
        for k in range(len(self.levels)):
            self.free[k][d] -= size
            log.append((k, d, size))
            if k < len(self.up):
                d = self.up[k][d]

    def _undo(self, log: list[tuple[int, int, int]], mark: int) -> None:
        while len(log) > mark:
            k, d, size = log.pop()
            self.free[k][d] += size

    def _room(self, k: int, unit: int, d: int) -> bool:
        """Domain `d` of levels[k] has room for the unit's units one level down, counted per size (necessary; it
        suffices when they have one size)."""
        if k == 0:
            return True
        below = [self.free[k - 1][c] for c in self.down[k].get(d, [])]
        return all(sum(f // s for f in below) >= need for s, need in self.needs[k][unit])

    def _place(self, k: int, unit: int, parent: int | None, log: list[tuple[int, int, int]]) -> bool:
        size = self.sizes[k][unit]
        pool = self.free[k] if parent is None else self.down[k + 1].get(parent, [])
        doms = sorted(
            (d for d in pool if self.free[k][d] >= size and self._room(k, unit, d)),
            key=lambda d: (self.free[k][d], d),
        )
        for d in doms[:NESTED_TRIES]:
            if k == 0:
                self._take(d, size, log)
                return True
            mark = len(log)
            inner = sorted(self.inner[k][unit], key=lambda u: -self.sizes[k - 1][u])
            if all(self._place(k - 1, u, d, log) for u in inner):
                return True
            self._undo(log, mark)
        return False

    def copies(self) -> int:
        top = len(self.levels) - 1
        order = sorted(range(len(self.sizes[top])), key=lambda u: -self.sizes[top][u])
        limit = sum(self.free[0].values()) // self.ranks if self.ranks else 0
        n = 0
        while n < limit:
            log: list[tuple[int, int, int]] = []
            if not all(self._place(top, u, None, log) for u in order):
                break
            n += 1
        return n


def _count(
    topology: Topology,
    job: Job,
    cands: Sequence[int],
    units: dict[int, list[int]],
    tree: dict[int, list[tuple[int, ...]]],
) -> tuple[int, int, list[DomainCapacity]]:
    """The fast count: (greedy copies, upper bound, copies per domain at every level)."""
    if len(units) > 1:
        return _count_nested(topology, job, cands, tree)
    names = topology.domain_names
    per_level: list[list[DomainCapacity]] = []
    if units:
        ((req, sizes),) = units.items()
    else:
        req, sizes = 0, [1] * job.ranks
    free_req = Counter(topology.domain_column(req)[d] for d in cands)
    total = greedy_copies(list(free_req.values()), sizes)
    upper = _upper(list(free_req.values()), sizes, job.ranks)
    for level in range(len(topology.levels)):
        rows: list[DomainCapacity] = []
        lname = topology.levels[level].name
        if (
            level <= req
        ):  # the domain lies inside one domain of the required level: only its free devices count
            free = Counter(topology.domain_column(level)[d] for d in cands)
            for k, n in sorted(free.items()):
                c = n // job.ranks
                if c:
                    rows.append(DomainCapacity(lname, names[level][k], c, n))
        else:
            anc = _ancestors(topology, req, level)
            inside: dict[int, list[int]] = {}
            for k, n in free_req.items():
                inside.setdefault(anc[k], []).append(n)
            for a, frees in sorted(inside.items()):
                c = greedy_copies(frees, sizes)
                if c:
                    rows.append(DomainCapacity(lname, names[level][a], c, sum(frees)))
        per_level.append(rows)
    return total, upper, [r for rows in per_level for r in rows]


def _count_nested(
    topology: Topology, job: Job, cands: Sequence[int], tree: dict[int, list[tuple[int, ...]]]
) -> tuple[int, int, list[DomainCapacity]]:
    """`_count` for units required at two or more levels (`_Nested`); the upper bound is the least of each level's."""
    levels = sorted(tree)
    total = _Nested(topology, cands, levels, tree).copies()
    upper = min(
        _upper(
            list(Counter(topology.domain_column(lv)[d] for d in cands).values()),
            [len(u) for u in tree[lv]],
            job.ranks,
        )
        for lv in levels
    )
    rows: list[DomainCapacity] = []
    for level in range(len(topology.levels)):
        col = topology.domain_column(level)
        inside: dict[int, list[int]] = {}
        for d in cands:
            inside.setdefault(col[d], []).append(d)
        below = [lv for lv in levels if lv <= level]  # required levels above `level` hold the domain whole
        top = level == len(topology.levels) - 1
        for k, devs in sorted(inside.items()):
            if len(devs) < job.ranks:
                continue
            if top:
                c = total  # the top domain is the whole cluster
            else:
                c = _Nested(topology, devs, below, tree).copies() if below else len(devs) // job.ranks
            if c:
                rows.append(
                    DomainCapacity(topology.levels[level].name, topology.domain_names[level][k], c, len(devs))
                )
    return total, upper, rows


def _slice_rooms(
    topology: Topology, job: Job, cands: Sequence[int], units: dict[int, list[int]]
) -> dict[int, int] | None:
    """Whole slices of the balance rule each domain of its level can hold (domain -> slices), when these rooms
    decide whether a balanced copy fits: no required units, or units at one level at or below the balance level,
    all of one size that divides the slice (a domain's slices are then whole units of its free devices). None
    otherwise (nested units, units above the balance level, sizes that do not divide the slice)."""
    bal = job.constraints.balance
    if bal is None:
        raise InternalError("_slice_rooms needs a job with a balance rule")
    li = topology.level_index(bal.level)
    units = {lv: sz for lv, sz in units.items() if max(sz, default=1) > 1}  # units of one rank bind nothing
    if not units:
        free = Counter(topology.domain_column(li)[d] for d in cands)
        return {k: n // bal.slice for k, n in free.items()}
    if len(units) > 1:
        return None
    ((req, sizes),) = units.items()
    u = sizes[0]
    if req > li or any(x != u for x in sizes) or bal.slice % u:
        return None
    anc = _ancestors(topology, req, li)
    whole: Counter[int] = Counter()
    for k, n in Counter(topology.domain_column(req)[d] for d in cands).items():
        whole[anc[k]] += n // u
    return {k: v * u // bal.slice for k, v in whole.items()}


def _count_balanced(
    topology: Topology,
    job: Job,
    cands: Sequence[int],
    units: dict[int, list[int]],
    tree: dict[int, list[tuple[int, ...]]],
) -> tuple[int, int, list[DomainCapacity]] | None:
    """`_count` for a shape with a balance rule: copies of balanced slices (`balanced_copies`) over the rooms of
    `_slice_rooms`, in the whole cluster and in each domain at or above the balance level; below it a domain
    lies inside one domain of the level, where a copy is balanced as it is (`_count`). None when the rooms do
    not decide it."""
    bal = job.constraints.balance
    if bal is None:
        raise InternalError("_count_balanced needs a job with a balance rule")
    rooms = _slice_rooms(topology, job, cands, units)
    if rooms is None:
        return None
    li = topology.level_index(bal.level)
    slices = job.ranks // bal.slice
    _, upper, below = _count(topology, job, cands, units, tree)
    lower_names = {topology.levels[lv].name for lv in range(li)}
    rows = [r for r in below if r.level in lower_names]
    total = balanced_copies(list(rooms.values()), slices)
    upper = min(upper, sum(rooms.values()) // slices)
    for level in range(li, len(topology.levels)):
        anc = _ancestors(topology, li, level)
        free = Counter(topology.domain_column(level)[d] for d in cands)
        inside: dict[int, list[int]] = {}
        for k, v in rooms.items():
            inside.setdefault(anc[k], []).append(v)
        for a, rs in sorted(inside.items()):
            c = balanced_copies(rs, slices)
            if c:
                rows.append(
                    DomainCapacity(topology.levels[level].name, topology.domain_names[level][a], c, free[a])
                )
    return total, upper, rows


def _place_copies(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    options: SolveOptions,
    limit: int,
    until: float | None = None,
) -> list[PlacedCopy]:
    """Up to `limit` copies placed one after another by `place_job` (a balance rule aimed for), each on the state
    the earlier ones left (none started after `until`, a `time.perf_counter()` value)."""
    out: list[PlacedCopy] = []
    occupied = dict(state.occupied)
    for i in range(limit):
        if until is not None and time.perf_counter() >= until:
            break
        st = dataclasses.replace(state, occupied=dict(occupied))
        try:
            res = place_job(topology, st, job, options, traffic=traffic)
        except InfeasibleError:
            break
        if res.mapping is None or res.report is None:
            raise InternalError("place_job returned no mapping and raised nothing")
        broken = validate(topology, st, job, res.mapping, traffic=traffic)
        if broken:
            raise InternalError(f"place_job returned a mapping that breaks {broken[0]}")
        out.append(PlacedCopy(i, res.mapping, res.report))
        for d in res.mapping:
            occupied[d] = f"{job.name}#copy{i}"
    return out


def capacity(
    topology: Topology,
    state: ClusterState,
    shapes: Sequence[Job],
    *,
    place_copies: int = 0,
    options: SolveOptions | None = None,
) -> CapacityResult:
    """For each shape alone on `state`: how many disjoint copies fit (greedy, a lower bound) and at most (an
    upper bound), per domain at each level, and, for the first `place_copies` copies, the mapping and modeled
    step that `place_job` gives each on the state the earlier copies left. Segments count as required units;
    a balance rule is counted over whole slices per domain (`balanced_copies`, said in the shape's notes).
    Shapes with spread rules or pins, and balance rules whose units the slice count cannot decide
    (`_slice_rooms`), are counted by placing copies one by one (at most MAX_PLACED). Raises `InputError`
    naming the shape, the field and the rule."""
    t0 = time.perf_counter()
    opts = options or SolveOptions(time_limit_s=2.0)
    problems: list[Problem] = []
    if not shapes:
        problems.append(Problem("shapes", "give at least one job shape"))
    if not 0 <= place_copies <= MAX_PLACED:
        problems.append(Problem("place_copies", f"must be in 0..{MAX_PLACED}, got {place_copies}"))
    traffics: list[Traffic] = []
    for i, job in enumerate(shapes):
        traffic = job_traffic(job)
        traffics.append(traffic)
        for p in request_problems(topology, state, job, traffic):
            problems.append(Problem(f"shapes[{i}].{p.path}", p.message))
    if problems:
        raise InputError("request", problems)
    out: list[ShapeCapacity] = []
    for job, traffic in zip(shapes, traffics, strict=True):
        cands = candidate_devices(topology, state, job)
        tree = {level: [u.ranks for u in us] for level, us in required_units(topology, job, traffic).items()}
        units = {level: [len(u) for u in us] for level, us in tree.items()}
        notes: list[str] = []
        cons = job.constraints
        why = "spread rules" if cons.spread else "pins" if cons.pins else ""
        counted = None
        if not why:
            if cons.balance is None:
                counted = _count(topology, job, cands, units, tree)
            else:
                counted = _count_balanced(topology, job, cands, units, tree)
                bal = cons.balance
                if counted is None:
                    why = f"a balance rule over {bal.level} with units the slice count cannot decide"
                else:
                    notes.append(
                        f"counted with the balance rule: each copy's {job.ranks // bal.slice} slice(s) of "
                        f"{bal.slice} rank(s) split evenly over the fewest {bal.level} domains that hold them "
                        "(a greedy over the whole slices each domain holds: a lower bound)"
                    )
        if counted is not None:
            copies, upper, domains = counted
            placed = _place_copies(topology, state, job, traffic, opts, min(place_copies, copies))
            if len(placed) < min(place_copies, copies):
                notes.append(
                    f"place_job fitted {len(placed)} copies one after another where the count gives {copies}: "
                    "its choices for the first copies left less room than the best-fit count"
                )
            out.append(ShapeCapacity(job, len(cands), copies, upper, "count", domains, placed, notes))
            continue
        cap = MAX_PLACED if not cons.pins else 1
        until = time.perf_counter() + PLACE_BUDGET * opts.time_limit_s
        placed = _place_copies(topology, state, job, traffic, opts, cap, until)
        sizes = units[min(units)] if units else [1] * job.ranks
        free_low = list(
            Counter(topology.domain_column(min(units) if units else 0)[d] for d in cands).values()
        )
        upper = 1 if cons.pins else _upper(free_low, sizes, job.ranks)
        notes.append(
            f"counted by placing copies one by one ({why}), at most {cap}, for at most "
            f"{PLACE_BUDGET * opts.time_limit_s:g} s: a lower bound"
        )
        out.append(
            ShapeCapacity(job, len(cands), len(placed), upper, "place", [], placed[:place_copies], notes)
        )
    frag = fragmentation(topology, state)
    return CapacityResult(out, frag, {"wall_s": time.perf_counter() - t0})
