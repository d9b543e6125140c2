"""Large-neighbourhood search on whole units: free a neighbourhood, re-solve it exactly with the unit program,
keep the answer when the evaluator's step (then exposed communication) improves, priced incrementally
(`placement.solve.incremental.StepEval`); the surrogate (`SurrogateScore`) breaks ties and judges jobs too large
for the evaluator.

Neighbourhoods that fit placement, taken in turn (seeded, so a fixed seed gives the same sequence):
- ``leaves``: the units of two used level-1 domains and one other (a leaf re-solved with its neighbours);
- ``stage``: the units of one pipeline stage (structured jobs) and the hosts they use;
- ``straddlers``: the units of the terms that cross the most expensive tier, with spare hosts of their domains;
- ``swap``: the contents of two hosts with the same number of ranks exchanged (no CP-SAT, many per round);
- ``leaf``: two used level-1 domains and one other re-solved with the leaf model (units may span hosts inside a
  domain and pay their split), then re-packed onto the domains' hosts: what moves units that span hosts.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field

from placement.solve.construct import HostPool
from placement.solve.cpsat.model import UnitModel
from placement.solve.cpsat.program import Slots, UnitProgram
from placement.solve.cpsat.slots import assignment_from_mapping, realize
from placement.solve.incremental import StepEval
from placement.solve.prepared import PreparedRequest, SurrogateScore
from placement.solve.types import key_better

__all__ = ["LnsStats", "lns"]

MAX_WINDOW_VARS = 4_000  # a window small enough for CP-SAT to finish within ~0.5 s
KINDS = ("leaves", "stage", "straddlers", "swap", "leaf")


@dataclass
class LnsStats:
    rounds: int = 0
    improved: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def as_stats(self) -> dict[str, float | int | str]:
        out: dict[str, float | int | str] = {"lns_rounds": self.rounds, "lns_improved": self.improved}
        for k, v in sorted(self.by_kind.items()):
            out[f"lns_improved_{k}"] = v
        return out


def _moves(
    request: PreparedRequest,
    score: SurrogateScore,
    model: UnitModel,
    assign: dict[int, int],
    new: dict[int, int],
) -> dict[int, int] | None:
    """Rank -> device moves that take the mapping from `assign` to `new` (only changed units move)."""
    changed = {u for u, h in new.items() if assign.get(u) != h}
    if not changed:
        return {}
    pool = request.pool
    used: dict[int, set[int]] = defaultdict(set)
    for d in score.mapping:
        used[request.topology.devices[d].host_index].add(d)
    for u in changed:
        for r in model.units[u]:
            used[request.topology.devices[score.mapping[r]].host_index].discard(score.mapping[r])
    moves: dict[int, int] = {}
    for u in sorted(changed):
        h = new[u]
        free = [d for d in pool.devices.get(h, ()) if d not in used[h]]
        if len(free) < len(model.units[u]):
            return None
        for r, d in zip(model.units[u], free, strict=False):
            moves[r] = d
            used[h].add(d)
    return moves


def _held(
    request: PreparedRequest, model: UnitModel, assign: dict[int, int], mapping: list[int]
) -> dict[int, int]:
    """Devices per host held by ranks of units that span hosts (not in `assign`): they stay where they are."""
    out: dict[int, int] = defaultdict(int)
    for u, ranks in enumerate(model.units):
        if u not in assign:
            for r in ranks:
                out[request.topology.devices[mapping[r]].host_index] += 1
    return out


def _window(
    request: PreparedRequest,
    model: UnitModel,
    assign: dict[int, int],
    kind: str,
    rng: random.Random,
    dom_hosts: dict[int, list[int]],
    level: int,
    term_cost: list[float],
) -> tuple[list[int], list[int]]:
    """Units to free and hosts to re-solve them on, for one neighbourhood kind."""
    topo = request.topology
    col = topo.domain_column(level)
    host_dom = {h: col[devs[0]] for h, devs in request.pool.devices.items()}
    used_doms = sorted({host_dom[h] for h in assign.values()})
    doms: set[int] = set()
    units: list[int] = []
    if kind == "stage" and request.job.parallel is not None and request.job.parallel.pp > 1:
        par = request.job.parallel
        stage = rng.randrange(par.pp)
        units = [u for u in assign if par.coords(model.units[u][0])["pp"] == stage]
        doms = {host_dom[assign[u]] for u in units}
    elif kind == "straddlers" and model.terms:
        order = sorted(range(len(model.terms)), key=lambda i: -term_cost[i])[: max(1, len(model.terms) // 20)]
        t = model.terms[rng.choice(order)]
        units = [u for u in t.units if u in assign]
        doms = {host_dom[assign[u]] for u in units}
    else:
        doms = set(rng.sample(used_doms, min(2, len(used_doms))))
    others = [k for k in dom_hosts if k not in doms]
    if others:
        doms.add(rng.choice(others))
    hosts = sorted(h for k in doms for h in dom_hosts[k])
    hset = set(hosts)
    if not units:
        units = [u for u, h in assign.items() if h in hset]
    else:
        hset |= {assign[u] for u in units}
        hosts = sorted(hset)
    return units, hosts


def _term_costs(model: UnitModel, assign: dict[int, int], chain: dict[int, list[int]]) -> list[float]:
    out = []
    for t in model.terms:
        li = 0
        hs = {assign[u] for u in t.units if u in assign}
        while li < len(t.cost) - 1 and len({chain[h][li] for h in hs}) > 1:
            li += 1
        out.append(t.cost[li])
    return out


class _Judge:
    """Judges moves by the evaluator (for evaluator-guided sizes): a move is taken when it improves `report_key`
    (step seconds, then exposed communication), priced incrementally (`StepEval`: only the groups and phases it
    touches), or leaves it equal and lowers the surrogate. Larger jobs are judged by the surrogate alone."""

    def __init__(self, request: PreparedRequest, score: SurrogateScore) -> None:
        self.request, self.score = request, score
        self.step = StepEval(request, score.mapping) if request.evaluator_guided else None

    def offer(self, moves: dict[int, int], *, evaluate_always: bool = True) -> bool:
        d, ng, ne = self.score.delta(moves)
        if self.step is None:
            if d >= -1e-12:
                return False
        else:
            if d >= -1e-12 and not evaluate_always:
                return False
            trial = self.step.trial(moves)
            if not key_better(trial.key, self.step.key) and (
                key_better(self.step.key, trial.key) or d >= -1e-12
            ):
                return False
            self.step.apply(trial)
        self.score.apply(moves, ng, ne)
        return True


def _swap_round(request: PreparedRequest, judge: _Judge, rng: random.Random, tries: int, until: float) -> int:
    """Exchange the ranks of two hosts holding as many ranks each; keep improving swaps. Returns the count."""
    score = judge.score
    by_host: dict[int, list[int]] = defaultdict(list)
    for r, d in enumerate(score.mapping):
        by_host[request.topology.devices[d].host_index].append(r)
    by_count: dict[int, list[int]] = defaultdict(list)
    for h, rs in by_host.items():
        if not any(r in request.pinned for r in rs):
            by_count[len(rs)].append(h)
    pairs = [hs for hs in by_count.values() if len(hs) > 1]
    if not pairs:
        return 0
    gained = 0
    for _ in range(tries):
        if time.perf_counter() > until:
            break
        hs = rng.choice(pairs)
        a, b = rng.sample(hs, 2)
        ra, rb = by_host[a], by_host[b]
        moves = {r: score.mapping[s] for r, s in zip(ra, rb, strict=True)} | {
            s: score.mapping[r] for r, s in zip(ra, rb, strict=True)
        }
        if judge.offer(moves):
            by_host[a], by_host[b] = rb, ra
            gained += 1
    return gained


def _leaf_chain(request: PreparedRequest) -> dict[int, list[int]]:
    topo = request.topology
    out: dict[int, list[int]] = {}
    for devs in request.pool.devices.values():
        k = topo.domain_of(devs[0], 1)
        if k not in out:
            c = [-1, k]
            for li in range(2, len(topo.levels)):
                c.append(topo.parent[li - 1][c[-1]])
            out[k] = c
    return out


def _leaf_round(
    request: PreparedRequest,
    model: UnitModel,
    judge: _Judge,
    rng: random.Random,
    budget: float,
    chain: dict[int, list[int]],
) -> bool:
    """One ``leaf`` neighbourhood: free every unit inside three level-1 domains, re-solve them with the leaf
    model on the devices nobody else holds there, re-pack, and offer the moves."""
    topo, score = request.topology, judge.score
    col = topo.domain_column(1)
    leaf_of: dict[int, int] = {}
    for u, ranks in enumerate(model.units):
        ks = {col[score.mapping[r]] for r in ranks}
        if len(ks) == 1:
            leaf_of[u] = ks.pop()
    used = sorted(set(leaf_of.values()))
    if not used:
        return False
    pick = set(rng.sample(used, min(2, len(used))))
    others = [k for k in chain if k not in pick]
    if others:
        pick.add(rng.choice(sorted(others)))
    free_units = [u for u, k in leaf_of.items() if k in pick]
    if len(free_units) < 2:
        return False
    free_ranks = {r for u in free_units for r in model.units[u]}
    taken = {d for r, d in enumerate(score.mapping) if r not in free_ranks}
    sub = {
        h: [d for d in devs if d not in taken]
        for h, devs in request.pool.devices.items()
        if col[devs[0]] in pick
    }
    pool = HostPool({h: v for h, v in sub.items() if v})
    usize = max(len(model.units[u]) for u in free_units)
    room: dict[int, int] = defaultdict(int)
    whole: dict[int, int] = defaultdict(int)
    for devs in pool.devices.values():
        room[col[devs[0]]] += len(devs)
        whole[col[devs[0]]] += len(devs) // usize
    free_set = set(free_units)
    fixed = {u: k for u, k in leaf_of.items() if u not in free_set}
    slots = Slots(dict(room), chain, True, dict(whole))
    prog = UnitProgram(topo, model, free_units, slots, fixed, bottleneck=request.evaluator_guided)
    prog.add_hint(leaf_of)
    res = prog.solve(request.options, budget, presolve=False)
    if res.assignment is None:
        return False
    out = realize(topo, pool, model.units, slots, res.assignment, len(score.mapping))
    if out is None:
        return False
    moves = {r: out[r] for r in free_ranks if out[r] != score.mapping[r]}
    return bool(moves) and judge.offer(moves, evaluate_always=True)


def lns(
    request: PreparedRequest,
    model: UnitModel,
    slots: Slots,
    assign: dict[int, int],
    score: SurrogateScore,
    deadline: float,
) -> LnsStats:
    """Improve `score` (its mapping is updated in place) until `deadline`, or a fixed number of rounds when the
    options ask for deterministic time. `assign` (unit -> host) describes the mapping's whole units; units that
    span hosts keep their devices (only host swaps move them)."""
    opts = request.options
    log = opts.log
    rng = random.Random(opts.seed)
    stats = LnsStats()
    topo = request.topology
    level = 1 if len(topo.levels) > 2 else 0
    col = topo.domain_column(level)
    dom_hosts: dict[int, list[int]] = defaultdict(list)
    for h, devs in request.pool.devices.items():
        dom_hosts[col[devs[0]]].append(h)
    max_rounds = max(4, int(opts.time_limit_s * 4)) if opts.deterministic else 1 << 30
    assign = dict(assign)
    held = _held(request, model, assign, score.mapping)
    judge = _Judge(request, score)
    chain = _leaf_chain(request) if len(topo.levels) > 2 else {}
    job_small = request.job.ranks <= 4096
    kinds = KINDS if chain else KINDS[:-1]
    while stats.rounds < max_rounds and (opts.deterministic or time.perf_counter() < deadline - 0.05):
        if request.stopped():
            break
        kind = kinds[stats.rounds % len(kinds)]
        stats.rounds += 1
        if kind == "swap":
            until = (
                math.inf
                if opts.deterministic
                else time.perf_counter() + min(0.2, 0.1 * max(0.0, deadline - time.perf_counter()))
            )
            n = _swap_round(request, judge, rng, 200 if job_small else 40, until)
            if n:
                stats.improved += n
                stats.by_kind[kind] += n
                assign = assignment_from_mapping(topo, model.units, score.mapping, partial=True) or assign
                held = _held(request, model, assign, score.mapping)
            continue
        budget = 0.2 if opts.deterministic else min(1.0, deadline - time.perf_counter() - 0.05)
        if budget <= 0.05:
            break
        if kind == "leaf":
            if _leaf_round(request, model, judge, rng, budget, chain):
                stats.improved += 1
                stats.by_kind[kind] += 1
                assign = assignment_from_mapping(topo, model.units, score.mapping, partial=True) or {}
                held = _held(request, model, assign, score.mapping)
                if log is not None:
                    log(f"lns round {stats.rounds} {kind}: surrogate {score.total:.6f}")
            continue
        term_cost = _term_costs(model, assign, slots.chain)
        free_units, hosts = _window(request, model, assign, kind, rng, dom_hosts, level, term_cost)
        if len(free_units) < 2:
            continue
        if len(free_units) * len(hosts) > MAX_WINDOW_VARS:
            free_units = sorted(rng.sample(free_units, max(2, MAX_WINDOW_VARS // len(hosts))))
        free_set = set(free_units)
        fixed = {u: h for u, h in assign.items() if u not in free_set}
        window = Slots({h: slots.room[h] - held.get(h, 0) for h in hosts if h in slots.room}, slots.chain)
        prog = UnitProgram(
            topo, model, free_units, window, fixed, allowed=None, bottleneck=request.evaluator_guided
        )
        prog.add_hint(assign)
        res = prog.solve(opts, budget, presolve=False)
        if res.assignment is None:
            continue
        new = fixed | res.assignment
        moves = _moves(request, score, model, assign, new)
        if not moves:
            continue
        if judge.offer(moves, evaluate_always=True):
            assign = new
            stats.improved += 1
            stats.by_kind[kind] += 1
            if log is not None:
                log(f"lns round {stats.rounds} {kind}: surrogate {score.total:.6f}")
    return stats
