"""Refinement of a found mapping: `refine_hosts` re-seats ranks inside hosts with non-uniform links (small hosts
by enumeration, larger ones by pairwise swaps); `polish` is the evaluator-judged local search that uses the time left.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from placement.cost.paths import group_path, pair_path
from placement.cost.surrogate import group_seconds, p2p_seconds
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.incremental import StepEval
from placement.solve.prepared import PreparedRequest
from placement.solve.types import key_better

__all__ = ["PolishOutcome", "polish", "refine_hosts"]

MAX_ENUMERATION = 20_000


def refine_hosts(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    mapping: Sequence[int],
    candidates: Sequence[int],
    deadline: float,
) -> list[int]:
    """A mapping at least as good as `mapping`, with ranks re-seated inside each non-uniform host."""
    out = list(mapping)
    pinned = set(job.constraints.pins)
    cset = set(candidates)
    groups_of: dict[int, list[int]] = defaultdict(list)
    for gi, g in enumerate(traffic.groups):
        for r in g.members:
            groups_of[r].append(gi)
    edges_of: dict[int, list[int]] = defaultdict(list)
    for ei, e in enumerate(traffic.edges):
        edges_of[e.src].append(ei)
        edges_of[e.dst].append(ei)
    ranks_on: dict[int, list[int]] = defaultdict(list)
    for r, d in enumerate(out):
        ranks_on[topology.devices[d].host_index].append(r)
    for h, ranks in sorted(ranks_on.items()):
        if topology.host_types[h].matrix is None or topology.uniform_hosts[h]:
            continue
        if time.perf_counter() > deadline:
            break
        movable = [r for r in ranks if r not in pinned]
        taken_by_pins = {out[r] for r in ranks if r in pinned}
        seats = [d for d in topology.devices_in_domain[0][h] if d in cset and d not in taken_by_pins]
        if len(movable) < 1 or len(seats) < len(movable):
            continue
        gids = sorted({g for r in movable for g in groups_of[r]})
        eids = sorted({e for r in movable for e in edges_of[r]})

        def local_cost(mp: list[int], gids: list[int] = gids, eids: list[int] = eids) -> float:
            s = 0.0
            for gi in gids:
                g = traffic.groups[gi]
                s += group_seconds(g, group_path(topology, state, [mp[r] for r in g.members]))
            for ei in eids:
                e = traffic.edges[ei]
                s += p2p_seconds(
                    e.bytes, e.count, e.exposed, pair_path(topology, state, mp[e.src], mp[e.dst])
                )
            return s

        best_cost = local_cost(out)
        n_perm = math.perm(len(seats), len(movable))
        if n_perm <= MAX_ENUMERATION:
            best_seats = [out[r] for r in movable]
            for perm in itertools.permutations(seats, len(movable)):
                for r, d in zip(movable, perm, strict=True):
                    out[r] = d
                c = local_cost(out)
                if c < best_cost - 1e-15:
                    best_cost, best_seats = c, list(perm)
            for r, d in zip(movable, best_seats, strict=True):
                out[r] = d
        else:
            improved = True
            while improved and time.perf_counter() < deadline:
                improved = False
                for i, r in enumerate(movable):
                    used = {out[x] for x in movable}
                    options = [out[x] for x in movable[i + 1 :]] + [d for d in seats if d not in used]
                    for d in options:
                        other = next((x for x in movable if out[x] == d), None)
                        old = out[r]
                        out[r] = d
                        if other is not None:
                            out[other] = old
                        c = local_cost(out)
                        if c < best_cost - 1e-15:
                            best_cost, improved = c, True
                            break
                        out[r] = old
                        if other is not None:
                            out[other] = d
    return out


@dataclass
class PolishOutcome:
    """The mapping after `polish`, its `report_key`, why it stopped and what it did."""

    mapping: list[int]
    key: tuple[float, float]
    stop_reason: str
    rounds: int = 0
    improved: int = 0
    trials: int = 0


def polish(
    request: PreparedRequest,
    mapping: Sequence[int],
    units: Sequence[tuple[int, ...]],
    deadline: float,
    *,
    target: tuple[float, float] = (0.0, 0.0),
    patience: int = 1,
    max_rounds: int | None = None,
) -> PolishOutcome:
    """Evaluator-judged local search from `mapping` until `deadline`, until the step and the exposed
    communication are at most `target` (``gap_closed``), or until `patience` rounds in a row improve nothing
    (``no_improvement``).

    Moves, judged by `report_key` through the incremental step model (`StepEval`): a unit (a TP group, or the
    heaviest label's group; `units`) moved whole onto free devices of one host, two units of one size exchanged,
    two ranks on different hosts exchanged. Units of the phase that costs most are picked first. Pinned ranks
    stay; a move that breaks a hard rule is refused (`placement.model.validate`).
    """
    pinned = set(request.pinned)
    units = [u for u in units if not pinned.intersection(u)]
    out = PolishOutcome(list(mapping), (0.0, 0.0), "time_limit")
    search = _Polish(request, mapping, units)
    out.key = search.ev.key
    if not units:
        out.stop_reason = "no_improvement"
        return out
    trials_per_round = max(50, min(400, 4 * len(units)))
    idle = 0
    ev = search.ev
    while True:
        if ev.key[0] <= target[0] and ev.key[1] <= target[1]:
            out.stop_reason = "gap_closed"
            break
        if max_rounds is not None and out.rounds >= max_rounds:
            out.stop_reason = "time_limit"
            break
        if time.perf_counter() > deadline or request.stopped():
            out.stop_reason = "time_limit"
            break
        if idle >= patience:
            out.stop_reason = "no_improvement"
            break
        out.rounds += 1
        gained = search.round(trials_per_round, deadline, target, out)
        out.improved += gained
        idle = 0 if gained else idle + 1
    out.mapping, out.key = list(ev.mapping), ev.key
    return out


class _Polish:
    """`polish`'s moves on the incremental step model: drawn, checked against the required levels, priced, and
    applied when better and valid."""

    def __init__(
        self, request: PreparedRequest, mapping: Sequence[int], units: list[tuple[int, ...]]
    ) -> None:
        self.request = request
        self.rng = random.Random(request.options.seed)
        self.ev = StepEval(request, mapping)
        topo = request.topology
        self.pinned = set(request.pinned)
        self.units = units
        self.by_size: dict[int, list[int]] = defaultdict(list)
        for i, u in enumerate(units):
            self.by_size[len(u)].append(i)
        self.unit_of = {r: i for i, u in enumerate(units) for r in u}
        self.cset = list(request.candidates)
        self.host = [topo.devices[d].host_index for d in range(topo.num_devices)]
        self.required = _required_checks(request) if units else {}

    def free_by_host(self) -> dict[int, list[int]]:
        used = set(self.ev.mapping)
        f: dict[int, list[int]] = defaultdict(list)
        for d in self.cset:
            if d not in used:
                f[self.host[d]].append(d)
        return f

    def critical_unit(self) -> int:
        """A unit with a rank in a random item of the phase that costs most (any unit if none has)."""
        ev, rng = self.ev, self.rng
        label = max(ev.labels, key=lambda lab: ev.phases[lab][1])
        ops = [oid for oid, lab in enumerate(ev.label_of) if lab == label]
        oid = rng.choice(ops)
        tr = self.request.traffic
        members = tr.groups[oid].members if oid < ev.n_groups else _edge_ranks(tr, oid - ev.n_groups)
        ranks = [r for r in members if r in self.unit_of]
        return self.unit_of[rng.choice(ranks)] if ranks else rng.randrange(len(self.units))

    def draw(self, free: dict[int, list[int]]) -> dict[int, int] | None:
        """One random move (rank -> device): a unit onto one host's free devices, two units of one size
        exchanged, or two ranks on different hosts exchanged; None when the draw gives no move."""
        ev, rng, units = self.ev, self.rng, self.units
        ui = self.critical_unit() if rng.random() < 0.5 else rng.randrange(len(units))
        u = units[ui]
        kind = rng.random()
        if kind < 0.4:
            hosts = [h for h, ds in free.items() if len(ds) >= len(u)]
            if not hosts:
                return None
            h = rng.choice(hosts)
            return dict(zip(u, free[h], strict=False))
        if kind < 0.7:
            peers = self.by_size[len(u)]
            if len(peers) < 2:
                return None
            vi = rng.choice(peers)
            if vi == ui:
                return None
            v = units[vi]
            moves = {r: ev.mapping[s] for r, s in zip(u, v, strict=True)}
            return moves | {s: ev.mapping[r] for r, s in zip(u, v, strict=True)}
        a = rng.choice(u)
        b = rng.randrange(len(ev.mapping))
        if b in self.pinned or self.host[ev.mapping[a]] == self.host[ev.mapping[b]]:
            return None
        return {a: ev.mapping[b], b: ev.mapping[a]}

    def apply_if_better(self, moves: dict[int, int]) -> bool:
        """Apply `moves` when they improve `report_key` and keep the mapping valid."""
        ev = self.ev
        if self.required and _breaks_required(self.required, ev.mapping, moves):
            return False  # `request.valid` would refuse it: not worth pricing (the same moves are drawn)
        trial = ev.trial(moves)
        if not key_better(trial.key, ev.key):
            return False
        cand = list(ev.mapping)
        for r, d in moves.items():
            cand[r] = d
        if not self.request.valid(cand):
            return False
        ev.apply(trial)
        return True

    def round(self, trials: int, deadline: float, target: tuple[float, float], out: PolishOutcome) -> int:
        """Up to `trials` drawn moves (counted in `out.trials`); returns how many were applied."""
        gained = 0
        free = self.free_by_host()
        for _ in range(trials):
            if time.perf_counter() > deadline:
                break
            moves = self.draw(free)
            if moves is None:
                continue
            out.trials += 1
            if not self.apply_if_better(moves):
                continue
            gained += 1
            free = self.free_by_host()
            if self.ev.key[0] <= target[0] and self.ev.key[1] <= target[1]:
                break
        return gained


def _required_checks(request: PreparedRequest) -> dict[int, list[tuple[Sequence[int], tuple[int, ...]]]]:
    """Per rank: the groups and edges of labels the job requires in one domain, as (domain column of that level,
    their ranks): what `placement.model.validate` checks for `constraints.require`."""
    topo, tr = request.topology, request.traffic
    out: dict[int, list[tuple[Sequence[int], tuple[int, ...]]]] = {}
    for label, level_name in request.job.constraints.require.items():
        if level_name not in topo.level_names:
            continue  # reported by the pre-checks
        col = topo.domain_column(topo.level_index(level_name))
        spans = [tuple(g.members) for g in tr.groups if g.label == label and len(g.members) > 1]
        spans += [(e.src, e.dst) for e in tr.edges if e.label == label and e.src != e.dst]
        for ranks in spans:
            for r in ranks:
                out.setdefault(r, []).append((col, ranks))
    return out


def _breaks_required(
    checks: dict[int, list[tuple[Sequence[int], tuple[int, ...]]]],
    mapping: Sequence[int],
    moves: dict[int, int],
) -> bool:
    """True when moving rank r to device moves[r] spreads a required group or edge over two domains (the mapping
    would break `constraints.require`)."""
    for r in moves:
        for col, ranks in checks.get(r, ()):
            first = -1
            for x in ranks:
                d = moves.get(x)
                dom = col[mapping[x] if d is None else d]
                if first < 0:
                    first = dom
                elif dom != first:
                    return True
    return False


def _edge_ranks(traffic: Traffic, ei: int) -> tuple[int, int]:
    e = traffic.edges[ei]
    return e.src, e.dst
